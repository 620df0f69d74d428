//! Fuzz target `set_toml` (see ../readers.rs, shared with tests/readers_random.rs):
//! `SET/set.toml`: `SetMeta::from_toml` (what `TrainingSet::read` parses); what parses
//! is written (`TrainingSet::write`'s serialisation) and reads back equal.
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../readers.rs"]
mod readers;

fuzz_target!(|data: &[u8]| {
    readers::set_toml(data);
});
