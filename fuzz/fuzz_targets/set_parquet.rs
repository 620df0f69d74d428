//! Fuzz target `set_parquet` (see ../readers/src/lib.rs, shared with tests/readers_random.rs):
//! `SET/points.parquet`: `TrainingSet::from_parquet` (what `TrainingSet::read` does with
//! the file) with [`SET_PARQUET_META`].
#![no_main]

use libfuzzer_sys::fuzz_target;

use powerperf_readers_check as readers;

fuzz_target!(|data: &[u8]| {
    // TrainingSet::from_parquet turns a panic of polars' Parquet reader into an error
    // (catch_unwind); libfuzzer-sys's panic hook would abort first. The default hook lets
    // it unwind; a panic that escapes still aborts (libfuzzer-sys catches it and aborts).
    static HOOK: std::sync::Once = std::sync::Once::new();
    HOOK.call_once(|| drop(std::panic::take_hook()));
    readers::set_parquet(data);
});
