//! Fuzz target `set_toml` (see ../readers/src/lib.rs, shared with tests/readers_random.rs):
//! `SET/set.toml`: `SetMeta::from_toml` (what `TrainingSet::read` parses); what parses
//! is written (`TrainingSet::write`'s serialisation) and reads back equal.
#![no_main]

use libfuzzer_sys::fuzz_target;

use powerperf_readers_check as readers;

fuzz_target!(|data: &[u8]| {
    readers::set_toml(data);
});
