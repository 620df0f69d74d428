//! Fuzz target `model_json` (see ../readers/src/lib.rs, shared with tests/readers_random.rs):
//! `MODEL.json`: `ModelFile::from_json` (what `ModelFile::read` and `load_model` parse);
//! what parses is written and reads back to the same JSON; a model `load_model` accepts
//! predicts (Ok or an error) its training grid.
#![no_main]

use libfuzzer_sys::fuzz_target;

use powerperf_readers_check as readers;

fuzz_target!(|data: &[u8]| {
    readers::model_json(data);
});
