//! Fuzz target: every definition format, on arbitrary bytes, must return a result (never
//! panic, never overflow the stack), and whatever compiles must evaluate and print its RPN.
#![no_main]

use libfuzzer_sys::fuzz_target;

use powerperf_events::{constants, load_str, LoadOptions, Syntax};

fuzz_target!(|data: &[u8]| {
    let Some((&first, rest)) = data.split_first() else { return };
    let Ok(text) = std::str::from_utf8(rest) else { return };
    let syntax = if first as usize % 7 == 6 { None } else { Some(Syntax::ALL[first as usize % 7]) };
    let cpu = if first & 0x80 != 0 { Some("a".to_string()) } else { None };
    if let Ok(set) = load_str(text, "fuzz.txt", syntax, &LoadOptions { cpu }) {
        let _ = set.evaluate(&|n: &str| Some(n.len() as f64));
        for i in 0..set.definitions.len() {
            let _ = set.rpn(i);
        }
    }
    let _ = constants::parse_toml(text, "c.toml");
    let _ = constants::parse_properties(text, "m.properties");
});
