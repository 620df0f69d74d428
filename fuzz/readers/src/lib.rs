//! What each file-reader fuzz target checks on one input, shared by the libFuzzer targets
//! (`fuzz/fuzz_targets/<name>.rs`, nightly, long runs) and by `tests/readers_random.rs`
//! (proptest, stable, CI's short run): every function takes the bytes of one file and
//! panics only on a bug (a reader that panics, or a written file that does not read back).
//!
//! Every reader must return Ok or an error on any input. Where the file has a writer,
//! what parses is written again and must read back to the same. Each function returns
//! whether the reader accepted the input (the tests check that the seed files are read).

use powerperf_core::models::{ModelFile, Predictor, MODEL_FORMAT};
use powerperf_core::store::import::ImportSpec;
use powerperf_format::run::RunMeta;
use powerperf_format::set::{SetMeta, TrainingSet};
use powerperf_node::plan_file::Plan;
use powerperf_rt::events;
use std::path::Path;

/// One target's check of one input (see each function's doc for what `true` means).
pub type Check = fn(&[u8]) -> bool;

/// The targets, by name (`fuzz_targets/<name>.rs`, `corpus/<name>/`).
pub const TARGETS: [(&str, Check); 8] = [
    ("run_toml", run_toml),
    ("set_toml", set_toml),
    ("set_parquet", set_parquet),
    ("model_json", model_json),
    ("plan_toml", plan_toml),
    ("import_spec", import_spec),
    ("region_events", region_events),
    ("cupti_bin", cupti_bin),
];

/// `RUN/run.toml`: `RunMeta::from_toml` (what `RunMeta::read` parses); a run that parses
/// gives its totals and shell status, and `RunMeta::write`'s serialisation reads back.
pub fn run_toml(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(meta) = RunMeta::from_toml(text) else {
        return false;
    };
    let _ = meta.totals();
    let _ = meta.duration_s();
    let _ = meta.shell_status();
    // Compared as text: NaN totals are not equal to themselves.
    if let Ok(out) = toml::to_string_pretty(&meta) {
        let back = RunMeta::from_toml(&out).expect("a written run.toml reads back");
        assert_eq!(
            toml::to_string_pretty(&back).ok().as_deref(),
            Some(out.as_str())
        );
    }
    true
}

/// `SET/set.toml`: `SetMeta::from_toml` (what `TrainingSet::read` parses); what parses
/// is written (`TrainingSet::write`'s serialisation) and reads back equal.
pub fn set_toml(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(meta) = SetMeta::from_toml(text) else {
        return false;
    };
    let _ = meta.is_reliable("time_s", "w");
    if let Ok(out) = toml::to_string_pretty(&meta) {
        let back = SetMeta::from_toml(&out).expect("a written set.toml reads back");
        assert_eq!(back, meta);
    }
    true
}

/// The `set.toml` used with [`set_parquet`]: the seed set's (one knob, time and power, one
/// rate counter).
pub const SET_PARQUET_META: &str = r#"source = "import:seed"
knobs = ["core_freq_mhz"]
targets = ["time_s", "power_w"]
[counters]
ipc = "rate"
"#;

/// `SET/points.parquet`: `TrainingSet::from_parquet` (what `TrainingSet::read` does with
/// the file) with [`SET_PARQUET_META`].
pub fn set_parquet(data: &[u8]) -> bool {
    let meta = SetMeta::from_toml(SET_PARQUET_META).expect("the fixed set.toml parses");
    let file = std::io::Cursor::new(data.to_vec());
    TrainingSet::from_parquet(meta, file, Path::new("points.parquet")).is_ok()
}

/// `MODEL.json`: `ModelFile::from_json` (what `ModelFile::read` and `load_model` parse);
/// what parses is written and reads back to the same JSON; a model `load_model` accepts
/// predicts (Ok or an error) its training grid.
pub fn model_json(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(m) = ModelFile::from_json(text) else {
        return false;
    };
    if let Ok(out) = serde_json::to_string(&m) {
        let back = ModelFile::from_json(&out).expect("a written model reads back");
        assert_eq!(
            serde_json::to_string(&back).ok().as_deref(),
            Some(out.as_str())
        );
    }
    if m.format != MODEL_FORMAT {
        return false; // load_model refuses it
    }
    for w in m.workloads().iter().take(4) {
        for k in m.knob_grid(w).iter().take(8) {
            let _ = m.predict(w, k);
        }
    }
    true
}

/// A plan file: `Plan::from_toml` (what `Plan::read` parses and checks); a plan that reads
/// is written (`Plan::to_toml`) and reads back to the same text.
pub fn plan_toml(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    let Ok(plan) = Plan::from_toml(text) else {
        return false;
    };
    for r in &plan.regions {
        for k in r.setting.keys() {
            let _ = plan.device_of(k);
        }
    }
    let out = plan.to_toml();
    let back = Plan::from_toml(&out).expect("a written plan reads back");
    assert_eq!(back.to_toml(), out);
    true
}

/// An import spec: `ImportSpec::from_toml` (what `ImportSpec::load` parses and checks).
pub fn import_spec(data: &[u8]) -> bool {
    let Ok(text) = std::str::from_utf8(data) else {
        return false;
    };
    ImportSpec::from_toml(text, Path::new("/nonexistent/fuzz/spec.toml")).is_ok()
}

/// `RUN/region_events/<pid>.{bin,tsv}`: the same bytes as a binary v2 file (`parse_bin`)
/// and as a text v1 file (`parse_file`, `counter_names`), as `read_dir_report` reads them;
/// the events that parse give intervals and statistics; a binary file that parses converts
/// (`to_text`, what `collect` does) to text that parses to the same events.
pub fn region_events(data: &[u8]) -> bool {
    let text = String::from_utf8_lossy(data);
    let _ = events::counter_names(&text);
    let mut accepted = false;
    if let Ok((evs, _)) = events::parse_file(Path::new("f.tsv"), &text) {
        let _ = events::stats(&events::intervals(&evs));
        let _ = events::analyze(&evs);
        accepted = true;
    }
    if let Ok(bin) = events::parse_bin(Path::new("f.bin"), data) {
        accepted = true;
        let _ = events::stats(&events::intervals(&bin.events));
        let _ = events::analyze(&bin.events);
        // Counter names are written unescaped in the `# counters` line: a name with a line
        // break cannot round-trip (the runtime writes perf event names, which have none).
        if bin.counter_names.iter().all(|n| !n.contains(['\n', '\r'])) {
            let tsv = events::to_text(&bin);
            let (evs, truncated) = events::parse_file(Path::new("f.tsv"), &tsv)
                .expect("the text form of a binary events file parses");
            assert_eq!(evs, bin.events);
            assert_eq!(truncated, bin.truncated);
        }
    }
    accepted
}

/// `RUN/gpu_activity/<pid>.bin`: `powerperf_rt::cupti::decode` (what `read_file`, and so
/// `collect --gpu`, decodes).
pub fn cupti_bin(data: &[u8]) -> bool {
    powerperf_rt::cupti::decode(data).is_ok()
}
