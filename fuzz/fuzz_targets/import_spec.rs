//! Fuzz target `import_spec` (see ../readers.rs, shared with tests/readers_random.rs):
//! An import spec: `ImportSpec::from_toml` (what `ImportSpec::load` parses and checks).
#![no_main]

use libfuzzer_sys::fuzz_target;

#[allow(dead_code)]
#[path = "../readers.rs"]
mod readers;

fuzz_target!(|data: &[u8]| {
    readers::import_spec(data);
});
