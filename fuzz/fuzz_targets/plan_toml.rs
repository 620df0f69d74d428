//! Fuzz target `plan_toml` (see ../readers.rs, shared with tests/readers_random.rs):
//! A plan file: `Plan::from_toml` (what `Plan::read` parses and checks); a plan that reads
//! is written (`Plan::to_toml`) and reads back to the same text.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../readers.rs"]
mod readers;

fuzz_target!(|data: &[u8]| {
    readers::plan_toml(data);
});
