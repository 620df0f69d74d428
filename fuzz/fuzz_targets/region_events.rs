//! Fuzz target `region_events` (see ../readers/src/lib.rs, shared with tests/readers_random.rs):
//! `RUN/region_events/<pid>.{bin,tsv}`: the same bytes as a binary v2 file (`parse_bin`)
//! and as a text v1 file (`parse_file`, `counter_names`), as `read_dir_report` reads them;
//! the events that parse give intervals and statistics; a binary file that parses converts
//! (`to_text`, what `collect` does) to text that parses to the same events.
#![no_main]

use libfuzzer_sys::fuzz_target;

use powerperf_readers_check as readers;

fuzz_target!(|data: &[u8]| {
    readers::region_events(data);
});
