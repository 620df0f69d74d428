//! Fuzz target `cupti_bin` (see ../readers/src/lib.rs, shared with tests/readers_random.rs):
//! `RUN/gpu_activity/<pid>.bin`: `powerperf_rt::cupti::decode` (what `read_file`, and so
//! `collect --gpu`, decodes).
#![no_main]

use libfuzzer_sys::fuzz_target;

use powerperf_readers_check as readers;

fuzz_target!(|data: &[u8]| {
    readers::cupti_bin(data);
});
