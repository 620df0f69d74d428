//! Fuzz target `import_spec` (see ../readers/src/lib.rs, shared with tests/readers_random.rs):
//! An import spec: `ImportSpec::from_toml` (what `ImportSpec::load` parses and checks).
#![no_main]

use libfuzzer_sys::fuzz_target;

use powerperf_readers_check as readers;

fuzz_target!(|data: &[u8]| {
    readers::import_spec(data);
});
