//! Fuzz target `plan_toml` (see ../readers/src/lib.rs, shared with tests/readers_random.rs):
//! A plan file: `Plan::from_toml` (what `Plan::read` parses and checks); a plan that reads
//! is written (`Plan::to_toml`) and reads back to the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;

use powerperf_readers_check as readers;

fuzz_target!(|data: &[u8]| {
    readers::plan_toml(data);
});
