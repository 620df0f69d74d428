//! Fuzz target `run_toml` (see ../readers/src/lib.rs, shared with tests/readers_random.rs):
//! `RUN/run.toml`: `RunMeta::from_toml` (what `RunMeta::read` parses); a run that parses
//! gives its totals and shell status, and `RunMeta::write`'s serialisation reads back.
#![no_main]

use libfuzzer_sys::fuzz_target;

use powerperf_readers_check as readers;

fuzz_target!(|data: &[u8]| {
    readers::run_toml(data);
});
