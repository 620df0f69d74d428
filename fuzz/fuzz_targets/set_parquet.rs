//! Fuzz target `set_parquet` (see ../readers.rs, shared with tests/readers_random.rs):
//! `SET/points.parquet`: `TrainingSet::from_parquet` (what `TrainingSet::read` does with
//! the file) with [`SET_PARQUET_META`].
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../readers.rs"]
mod readers;

fuzz_target!(|data: &[u8]| {
    readers::set_parquet(data);
});
