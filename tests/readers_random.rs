//! CI's short run of the file-reader fuzz targets (issue 18, "Fuzzing"): the checks of
//! `fuzz/readers/` (crate powerperf-readers-check, what every libFuzzer target of `fuzz/`
//! runs) on (a) arbitrary bytes and text and (b) random mutations (byte flips, overwrites
//! with boundary values, truncation, deletion, duplication, splices of another file) of the
//! seed files
//! (`fuzz/seeds/<target>/`) and of the corpus the long fuzz runs grew (`fuzz/corpus/<target>/`).
//! A reader must return Ok or an error, never panic. Then round trips on valid random
//! records: what the writers write, the readers read back equal.
//!
//! The long runs (nightly, libFuzzer) are in fuzz/README.md; CI runs only this file.

use proptest::collection::vec;
use proptest::prelude::*;
use proptest::sample::Index;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use powerperf_readers_check as readers;

use powerperf_core::models::ModelFile;
use powerperf_format::run::RunMeta;
use powerperf_format::set::{CounterKind, Point, SetMeta, TrainingSet, Unreliable};
use powerperf_node::plan_file::Plan;
use powerperf_rt::events::{self, BinFile, Kind, RegionEvent};

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz")
}

fn files_of(dir: &Path) -> Vec<Vec<u8>> {
    let mut paths: Vec<PathBuf> = match std::fs::read_dir(dir) {
        Ok(d) => d.map(|e| e.unwrap().path()).collect(),
        Err(_) => Vec::new(),
    };
    paths.sort();
    paths.iter().map(|p| std::fs::read(p).unwrap()).collect()
}

/// The seed files of a target (real files: written by powerperf, the repository's
/// datasets, plans and CUPTI fixtures).
fn seeds(target: &str) -> &'static [Vec<u8>] {
    static SEEDS: OnceLock<BTreeMap<&'static str, Vec<Vec<u8>>>> = OnceLock::new();
    &SEEDS.get_or_init(|| {
        readers::TARGETS
            .iter()
            .map(|(t, _)| (*t, files_of(&fuzz_dir().join("seeds").join(t))))
            .collect()
    })[target]
}

/// Seeds and the grown corpus of a target: the inputs mutations start from.
fn inputs(target: &str) -> &'static [Vec<u8>] {
    static INPUTS: OnceLock<BTreeMap<&'static str, Vec<Vec<u8>>>> = OnceLock::new();
    &INPUTS.get_or_init(|| {
        readers::TARGETS
            .iter()
            .map(|(t, _)| {
                let mut v = seeds(t).to_vec();
                v.extend(files_of(&fuzz_dir().join("corpus").join(t)));
                (*t, v)
            })
            .collect()
    })[target]
}

/// One mutation; positions are taken modulo the input's length.
#[derive(Debug, Clone)]
enum Op {
    /// XOR one byte with a nonzero mask.
    Flip(Index, u8),
    /// Overwrite 1, 2, 4 or 8 bytes (little-endian) with a boundary value.
    Boundary(Index, u8, u8),
    /// Keep only the first part.
    Truncate(Index),
    /// Remove a range.
    Delete(Index, Index),
    /// Repeat a range in place.
    Duplicate(Index, Index),
    /// Insert a range of another input of the same target.
    Splice(Index, Index, Index, Index),
    /// Insert random bytes.
    Insert(Index, Vec<u8>),
}

const BOUNDARY: [u64; 12] = [
    0,
    1,
    0x7f,
    0x80,
    0xff,
    0x7fff,
    0xffff,
    0x7fff_ffff,
    0x8000_0000,
    0xffff_ffff,
    i64::MAX as u64,
    u64::MAX,
];

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        3 => (any::<Index>(), 1u8..).prop_map(|(i, m)| Op::Flip(i, m)),
        2 => (any::<Index>(), 0u8..12, 0u8..4).prop_map(|(i, v, w)| Op::Boundary(i, v, w)),
        1 => any::<Index>().prop_map(Op::Truncate),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Op::Delete(a, b)),
        1 => (any::<Index>(), any::<Index>()).prop_map(|(a, b)| Op::Duplicate(a, b)),
        2 => (any::<Index>(), any::<Index>(), any::<Index>(), any::<Index>())
            .prop_map(|(a, b, c, d)| Op::Splice(a, b, c, d)),
        1 => (any::<Index>(), vec(any::<u8>(), 1..16)).prop_map(|(i, b)| Op::Insert(i, b)),
    ]
}

/// A range of at most 64 bytes of `len` bytes starting at `a`.
fn range(len: usize, a: &Index, b: &Index) -> std::ops::Range<usize> {
    let start = a.index(len);
    let end = (start + 1 + b.index(64)).min(len);
    start..end
}

fn mutate(input: &[u8], ops: &[Op], others: &[Vec<u8>]) -> Vec<u8> {
    let mut d = input.to_vec();
    for op in ops {
        if d.is_empty() {
            d.push(0);
        }
        let n = d.len();
        match op {
            Op::Flip(i, m) => d[i.index(n)] ^= m,
            Op::Boundary(i, v, w) => {
                let bytes = BOUNDARY[*v as usize].to_le_bytes();
                let at = i.index(n);
                let w = (1usize << w).min(n - at);
                d[at..at + w].copy_from_slice(&bytes[..w]);
            }
            Op::Truncate(i) => d.truncate(i.index(n)),
            Op::Delete(a, b) => {
                d.drain(range(n, a, b));
            }
            Op::Duplicate(a, b) => {
                let r = range(n, a, b);
                let copy = d[r.clone()].to_vec();
                d.splice(r.end..r.end, copy);
            }
            Op::Splice(at, which, a, b) => {
                let other = &others[which.index(others.len())];
                if !other.is_empty() {
                    let part = other[range(other.len(), a, b)].to_vec();
                    d.splice(at.index(n + 1).min(n)..at.index(n + 1).min(n), part);
                }
            }
            Op::Insert(i, b) => {
                let at = i.index(n + 1).min(n);
                d.splice(at..at, b.iter().copied());
            }
        }
    }
    d
}

/// `n` cases, times `READERS_RANDOM_SCALE` (default 1) for a longer run by hand.
fn cases(n: u32) -> u32 {
    n * std::env::var("READERS_RANDOM_SCALE")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1)
}

fn check_of(target: &str) -> fn(&[u8]) -> bool {
    readers::TARGETS
        .iter()
        .find(|(t, _)| *t == target)
        .map(|(_, f)| *f)
        .unwrap()
}

#[test]
fn every_seed_file_is_read() {
    for (target, check) in readers::TARGETS {
        let seeds = seeds(target);
        assert!(!seeds.is_empty(), "no seed files in fuzz/seeds/{target}");
        for (i, s) in seeds.iter().enumerate() {
            assert!(check(s), "{target}: seed #{i} (name order) is refused");
        }
    }
}

#[test]
fn every_corpus_input_returns() {
    // The inputs the long runs kept: each must come back (Ok or an error), none panics.
    let mut n = 0;
    for (target, check) in readers::TARGETS {
        for input in inputs(target) {
            check(input);
            n += 1;
        }
    }
    assert!(n >= readers::TARGETS.len());
}

/// Properties (a) and (b) for one target; `cases` random inputs each.
macro_rules! reader_props {
    ($target:ident, $cases:expr) => {
        mod $target {
            use super::*;
            proptest! {
                #![proptest_config(ProptestConfig { cases: cases($cases), ..ProptestConfig::default() })]

                #[test]
                fn arbitrary_bytes(data in vec(any::<u8>(), 0..512)) {
                    check_of(stringify!($target))(&data);
                }

                #[test]
                fn arbitrary_text(text in "(?s).{0,256}") {
                    check_of(stringify!($target))(text.as_bytes());
                }

                #[test]
                fn mutated_files(which in any::<Index>(), ops in vec(op(), 1..6)) {
                    let all = inputs(stringify!($target));
                    let data = mutate(&all[which.index(all.len())], &ops, all);
                    check_of(stringify!($target))(&data);
                }
            }
        }
    };
}

reader_props!(run_toml, 600);
reader_props!(set_toml, 600);
reader_props!(set_parquet, 150);
reader_props!(model_json, 500);
reader_props!(plan_toml, 600);
reader_props!(import_spec, 600);
reader_props!(region_events, 1000);
reader_props!(cupti_bin, 600);

// ---- Round trips on valid random records -------------------------------------------------

/// A region name or text field: any characters, tabs, line breaks and backslashes
/// included (the writers escape them).
fn text() -> impl Strategy<Value = String> {
    "(?s).{0,12}"
}

/// A finite f64 of any magnitude.
fn finite() -> impl Strategy<Value = f64> {
    any::<f64>().prop_filter("finite", |v| v.is_finite())
}

/// One events frame: a thread's records, each (t_ns, region index, kind, counter values
/// or none).
type Frame = (u32, Vec<(u64, usize, u32, Option<Vec<u64>>)>);

/// A binary (v2) events file as rt/README.md documents it and the runtime writes it.
fn encode_bin(pid: u32, counters: &[String], names: &[String], frames: &[Frame]) -> Vec<u8> {
    let mut b = b"PPRTEV2\n".to_vec();
    let u32le = |b: &mut Vec<u8>, v: u32| b.extend_from_slice(&v.to_le_bytes());
    u32le(&mut b, pid);
    u32le(&mut b, counters.len() as u32);
    for c in counters {
        u32le(&mut b, c.len() as u32);
        b.extend_from_slice(c.as_bytes());
    }
    let mut p = Vec::new();
    for (id, n) in names.iter().enumerate() {
        u32le(&mut p, id as u32 + 1);
        u32le(&mut p, n.len() as u32);
        p.extend_from_slice(n.as_bytes());
    }
    u32le(&mut b, 1);
    u32le(&mut b, p.len() as u32);
    b.extend(p);
    let nc = counters.len();
    for (tid, recs) in frames {
        let mut p = Vec::new();
        for v in [*tid, recs.len() as u32, nc as u32, 0] {
            u32le(&mut p, v);
        }
        for r in recs {
            p.extend_from_slice(&r.0.to_le_bytes());
        }
        for r in recs {
            u32le(&mut p, ((r.1 as u32 + 1) << 2) | r.2);
        }
        for r in recs {
            for i in 0..nc {
                let v = r.3.as_ref().map_or(u64::MAX, |v| v[i]);
                p.extend_from_slice(&v.to_le_bytes());
            }
        }
        u32le(&mut b, 2);
        u32le(&mut b, p.len() as u32);
        b.extend(p);
    }
    b
}

fn events_file() -> impl Strategy<Value = (u32, Vec<String>, Vec<String>, Vec<Frame>)> {
    (
        any::<u32>(),
        vec("[a-z][a-z0-9_:.-]{0,15}", 0..4),
        vec(text(), 1..5),
    )
        .prop_flat_map(|(pid, counters, names)| {
            let nc = counters.len();
            let nn = names.len();
            let rec = (
                any::<u64>(),
                0..nn,
                0u32..3,
                proptest::option::of(vec(0..u64::MAX, nc..=nc)),
            );
            let frames = vec((any::<u32>(), vec(rec, 0..20)), 0..4);
            (Just(pid), Just(counters), Just(names), frames)
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(200), ..ProptestConfig::default() })]

    /// Binary events file → `parse_bin` gives the records written; `to_text` (what
    /// `collect` converts it to) → `parse_file` gives them again.
    #[test]
    fn region_events_round_trip((pid, counters, names, frames) in events_file()) {
        let bytes = encode_bin(pid, &counters, &names, &frames);
        let kinds = [Kind::Begin, Kind::End, Kind::ExitClosed];
        let want: Vec<RegionEvent> = frames
            .iter()
            .flat_map(|(tid, recs)| recs.iter().map(move |r| (tid, r)))
            .map(|(tid, r)| RegionEvent {
                t_ns: r.0,
                tid: *tid,
                pid,
                region: names[r.1].clone(),
                kind: kinds[r.2 as usize],
                // No counters: none configured, or u64::MAX first (no values at that record).
                counters: if counters.is_empty() { Vec::new() } else { r.3.clone().unwrap_or_default() },
            })
            .collect();
        let bin = events::parse_bin(Path::new("t.bin"), &bytes).unwrap();
        prop_assert_eq!(&bin.events, &want);
        prop_assert_eq!(&bin.counter_names, &counters);
        prop_assert!(!bin.truncated);
        let tsv = events::to_text(&bin);
        let (evs, truncated) = events::parse_file(Path::new("t.tsv"), &tsv).unwrap();
        prop_assert_eq!(&evs, &want);
        prop_assert!(!truncated);
        prop_assert_eq!(events::counter_names(&tsv), counters);
        // Cut inside the last frame: the whole frames before it, reported truncated.
        if bytes.len() > 1 && !frames.is_empty() {
            let cut = events::parse_bin(Path::new("t.bin"), &bytes[..bytes.len() - 1]).unwrap();
            prop_assert!(cut.truncated);
            prop_assert!(want.starts_with(&cut.events));
            let tsv = events::to_text(&cut);
            let (evs, truncated) = events::parse_file(Path::new("t.tsv"), &tsv).unwrap();
            prop_assert_eq!(evs, cut.events);
            prop_assert!(truncated);
        }
    }
}

fn run_meta() -> impl Strategy<Value = RunMeta> {
    let seed = RunMeta::from_toml(std::str::from_utf8(&seeds("run_toml")[0]).unwrap()).unwrap();
    (
        (text(), vec(text(), 0..4), proptest::option::of(text())),
        (
            0..=i64::MAX as u64,
            0..=i64::MAX as u64,
            proptest::option::of(any::<i32>()),
        ),
        (
            proptest::option::of(finite()),
            proptest::option::of(0u32..4096),
            vec(text(), 0..3),
        ),
        vec(
            (
                text(),
                proptest::option::of(finite()),
                proptest::option::of(text()),
            ),
            0..4,
        ),
    )
        .prop_map(
            move |((id, command, workload), (dur, start, status), (f, threads, notes), evs)| {
                let mut m = seed.clone();
                m.run.id = id;
                m.run.command = command;
                m.run.workload = workload;
                m.run.duration_ns = dur;
                m.run.start_unix_ns = start;
                m.run.exit_status = status;
                m.knobs.core_freq_mhz = f;
                m.knobs.threads = threads;
                m.notes = notes;
                let template = m.events[0].clone();
                m.events = evs
                    .into_iter()
                    .map(|(name, total, reason)| {
                        let mut e = template.clone();
                        e.name = name;
                        e.total = total;
                        e.reason = reason;
                        e
                    })
                    .collect();
                m
            },
        )
}

fn plan() -> impl Strategy<Value = Plan> {
    let seed = Plan::from_toml(
        std::str::from_utf8(
            &std::fs::read(fuzz_dir().join("seeds/plan_toml/plan-energy.toml")).unwrap(),
        )
        .unwrap(),
    )
    .unwrap();
    let region = (
        text(),
        vec(("[a-z_]{1,16}", 1e-6f64..1e6), 0..3),
        vec(finite(), 7..=7),
        vec(text(), 0..2),
    );
    (vec(region, 1..5), proptest::option::of(finite()), text()).prop_map(
        move |(regions, max_slowdown, model)| {
            let mut p = seed.clone();
            p.plan.max_slowdown = max_slowdown;
            p.plan.model = model;
            let template = p.regions[0].clone();
            p.regions = regions
                .into_iter()
                .map(|(name, setting, v, folded)| {
                    let mut r = template.clone();
                    r.name = name;
                    r.setting = setting.into_iter().collect();
                    r.folded = folded;
                    (r.time_s, r.energy_j, r.power_w) = (v[0], v[1], v[2]);
                    (r.reference_time_s, r.reference_energy_j) = (v[3], v[4]);
                    (r.energy_saving, r.slowdown) = (v[5], v[6]);
                    r
                })
                .collect();
            p
        },
    )
}

/// Column names of a set: distinct, none a fixed column (`workload`, `repeat`, targets).
fn set_names() -> impl Strategy<Value = (Vec<String>, Vec<String>, Vec<String>)> {
    (
        proptest::sample::subsequence(vec!["core_freq_mhz", "mem_freq_mhz", "threads"], 0..=3),
        proptest::collection::btree_set("c_[a-z0-9_]{1,8}", 0..4),
        proptest::collection::btree_set("s_[a-z0-9_]{1,8}", 0..3),
    )
        .prop_map(|(k, c, s)| {
            (
                k.into_iter().map(String::from).collect(),
                c.into_iter().collect(),
                s.into_iter().collect(),
            )
        })
}

fn training_set() -> impl Strategy<Value = TrainingSet> {
    (set_names(), text(), text(), vec(text(), 0..2))
        .prop_flat_map(
            |((knobs, counters, statics), source, description, unreliable_workloads)| {
                let value = || proptest::option::of(finite());
                // Knobs and targets within the ranges a set's reader accepts (a frequency
                // above 0 and at most 1e6 MHz, times, powers and energies not negative):
                // the set is valid, so it must read back.
                let in_range = || proptest::option::of(1e-3f64..=1e6);
                let point = (
                    text(),
                    proptest::option::of(any::<i64>()),
                    (in_range(), in_range(), in_range()),
                    vec(in_range(), knobs.len()..=knobs.len()),
                    vec(value(), counters.len()..=counters.len()),
                    vec(value(), statics.len()..=statics.len()),
                );
                let kinds = vec(any::<bool>(), counters.len()..=counters.len());
                (
                    Just((
                        knobs,
                        counters,
                        statics,
                        source,
                        description,
                        unreliable_workloads,
                    )),
                    kinds,
                    vec(point, 0..12),
                )
            },
        )
        .prop_map(
            |((knobs, counters, statics, source, description, uw), kinds, points)| {
                let pick = |names: &[String], vals: Vec<Option<f64>>| -> BTreeMap<String, f64> {
                    names
                        .iter()
                        .zip(vals)
                        .filter_map(|(n, v)| v.map(|v| (n.clone(), v)))
                        .collect()
                };
                let points = points
                    .into_iter()
                    .map(|(workload, repeat, (t, p, e), k, c, s)| Point {
                        workload,
                        knobs: pick(&knobs, k),
                        repeat,
                        time_s: t,
                        power_w: p,
                        energy_j: e,
                        counters: pick(&counters, c),
                        static_features: pick(&statics, s),
                    })
                    .collect();
                let meta = SetMeta {
                    source,
                    description,
                    knobs,
                    targets: vec!["time_s".into(), "power_w".into(), "energy_j".into()],
                    counters: counters
                        .into_iter()
                        .zip(kinds)
                        .map(|(c, rate)| {
                            (
                                c,
                                if rate {
                                    CounterKind::Rate
                                } else {
                                    CounterKind::Count
                                },
                            )
                        })
                        .collect(),
                    static_features: statics,
                    unreliable: if uw.is_empty() {
                        Vec::new()
                    } else {
                        vec![Unreliable {
                            target: "time_s".into(),
                            workloads: uw,
                            reason: "r".into(),
                        }]
                    },
                    knob_devices: Default::default(),
                };
                TrainingSet { meta, points }
            },
        )
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(100), ..ProptestConfig::default() })]

    /// `RunMeta::write`'s text → `RunMeta::from_toml`: the same run.
    #[test]
    fn run_toml_round_trip(m in run_meta()) {
        let text = toml::to_string_pretty(&m).unwrap();
        prop_assert_eq!(RunMeta::from_toml(&text).unwrap(), m);
    }

    /// `Plan::to_toml` → `Plan::from_toml`: the same plan.
    #[test]
    fn plan_round_trip(p in plan()) {
        prop_assert_eq!(Plan::from_toml(&p.to_toml()).unwrap(), p);
    }

    /// A model file with its numbers replaced by random finite ones (what a fit may
    /// write): written → read is the same model.
    #[test]
    fn model_json_round_trip(which in any::<Index>(), numbers in vec(finite(), 64)) {
        let all = seeds("model_json");
        let mut v: serde_json::Value = serde_json::from_slice(&all[which.index(all.len())]).unwrap();
        let mut i = 0;
        fn walk(v: &mut serde_json::Value, numbers: &[f64], i: &mut usize) {
            match v {
                serde_json::Value::Number(n) if n.is_f64() => {
                    *v = serde_json::json!(numbers[*i % numbers.len()]);
                    *i += 1;
                }
                serde_json::Value::Array(a) => a.iter_mut().for_each(|x| walk(x, numbers, i)),
                serde_json::Value::Object(o) => o.values_mut().for_each(|x| walk(x, numbers, i)),
                _ => {}
            }
        }
        walk(&mut v, &numbers, &mut i);
        let m: ModelFile = serde_json::from_value(v).unwrap();
        let text = serde_json::to_string_pretty(&m).unwrap();
        prop_assert_eq!(ModelFile::from_json(&text).unwrap(), m);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(24), ..ProptestConfig::default() })]

    /// `TrainingSet::write` (set.toml + points.parquet) → `TrainingSet::read`: the same
    /// set, absent values included.
    #[test]
    fn training_set_round_trip(set in training_set()) {
        let dir = tempfile::tempdir().unwrap();
        set.write(dir.path()).unwrap();
        prop_assert_eq!(TrainingSet::read(dir.path()).unwrap(), set);
    }
}

#[test]
fn a_binary_events_file_reads_the_same_through_both_forms() {
    // A fixed case of region_events_round_trip that the seeds also hold: names with a tab,
    // counters, two threads.
    let counters = vec!["cycles".to_string(), "instructions".to_string()];
    let names = vec!["main".to_string(), "tab\tname".to_string()];
    let frames: Vec<Frame> = vec![
        (78, vec![(10, 0, 0, Some(vec![5, 7])), (40, 0, 1, None)]),
        (
            79,
            vec![(15, 1, 0, Some(vec![1, 2])), (25, 1, 1, Some(vec![3, 4]))],
        ),
    ];
    let bin: BinFile = events::parse_bin(
        Path::new("t.bin"),
        &encode_bin(77, &counters, &names, &frames),
    )
    .unwrap();
    assert_eq!(bin.events.len(), 4);
    assert_eq!(bin.events[1].counters, Vec::<u64>::new());
    assert_eq!(bin.events[2].region, "tab\tname");
    let (evs, _) = events::parse_file(Path::new("t.tsv"), &events::to_text(&bin)).unwrap();
    assert_eq!(evs, bin.events);
}

// ---- Regressions: inputs that made a reader panic ----------------------------------------

/// The linear model seed with `edit` applied to its `model.regression` object; predicting
/// its training grid must return (an error here), not panic.
fn damaged_linear_model(edit: impl Fn(&mut serde_json::Value)) -> Vec<String> {
    use powerperf_core::models::Predictor;
    let path = fuzz_dir().join("seeds/model_json/linear.json");
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut v["model"]["regression"]);
    let m = ModelFile::from_json(&v.to_string()).unwrap();
    let mut errors = Vec::new();
    for w in m.workloads() {
        for k in m.knob_grid(&w) {
            errors.push(format!("{:#}", m.predict(&w, &k).unwrap_err()));
        }
    }
    assert!(!errors.is_empty());
    errors
}

#[test]
fn a_linear_model_with_fewer_coefficients_than_features_is_an_error_not_a_panic() {
    // Found by tests/readers_random.rs (model_json::mutated_files): `predict` indexed
    // `coefficients[i]` out of bounds (src/models/regression.rs).
    let errors = damaged_linear_model(|m| {
        m["targets"][0]["coefficients"]
            .as_array_mut()
            .unwrap()
            .pop();
    });
    assert!(errors
        .iter()
        .all(|e| e.contains("target `time_s` has 2 features, 1 coefficients, 2 means and 2 stds")));
}

#[test]
fn a_linear_model_with_an_unknown_feature_is_an_error_not_a_panic() {
    let errors = damaged_linear_model(|m| m["targets"][0]["features"][1] = "v(nope)".into());
    assert!(errors
        .iter()
        .all(|e| e.contains("uses the feature `v(nope)`, not one of its knob and rate terms")));
}

#[test]
fn a_linear_model_with_an_inverted_rate_range_is_an_error_not_a_panic() {
    // f64::clamp panics when min > max or either is NaN.
    let errors = damaged_linear_model(|m| m["rate_ranges"]["ipc"] = serde_json::json!([3.0, 1.0]));
    assert!(errors
        .iter()
        .all(|e| e.contains("rate range of `ipc` is [3, 1]")));
}

#[test]
fn a_damaged_points_parquet_is_an_error_not_a_panic() {
    // Found by tests/readers_random.rs (set_parquet::mutated_files): one flipped byte in
    // the seed's points.parquet made polars' Parquet reader index a slice out of range
    // (src/store/set.rs, TrainingSet::from_parquet, now catches it).
    let mut data = seeds("set_parquet")[0].clone();
    assert_eq!(data.len(), 2550, "the seed this case was found on");
    data[1678] ^= 40;
    let meta = SetMeta::from_toml(readers::SET_PARQUET_META).unwrap();
    let e = TrainingSet::from_parquet(meta, std::io::Cursor::new(data), Path::new("p.parquet"))
        .unwrap_err();
    assert!(
        format!("{e:#}").starts_with("p.parquet is not a readable Parquet file"),
        "{e:#}"
    );
}

#[test]
fn a_points_parquet_asking_for_2pow61_bytes_is_an_error_not_an_abort() {
    // Found by the set_parquet fuzz target: a data page header of `workload` says -39
    // values, and polars' decoder reserved 2^61 bytes for them: the process aborted
    // (an allocation failure is no panic that catch_unwind could turn into an error).
    // The footer and page headers are now checked before decoding
    // (crates/powerperf-format/src/parquet_check.rs). The input is the fuzzer's crash file.
    let data = std::fs::read(fuzz_dir().join("crashes/set_parquet-alloc-2pow61.parquet")).unwrap();
    let meta = SetMeta::from_toml(readers::SET_PARQUET_META).unwrap();
    let e = TrainingSet::from_parquet(
        meta,
        std::io::Cursor::new(data.clone()),
        Path::new("p.parquet"),
    )
    .unwrap_err();
    let e = format!("{e:#}");
    assert!(
        e.starts_with("p.parquet is not a readable Parquet file") && e.contains("-39 values"),
        "{e}"
    );
    assert!(!readers::set_parquet(&data));
    // The run tables are read through the same check.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("timeline.parquet"), &data).unwrap();
    let e = powerperf_format::timeline::read_run(dir.path()).unwrap_err();
    assert!(format!("{e:#}").contains("-39 values"), "{e:#}");
}

#[test]
fn a_run_toml_with_a_huge_signal_number_is_read_not_a_panic() {
    // `shell_status` computed 128 + signal, an overflow panic in debug builds for
    // signal = i32::MAX (src/store/run.rs; `import RUN` prints it for a skipped run).
    let text = std::str::from_utf8(&seeds("run_toml")[0]).unwrap().replace(
        "ended = \"exited\"",
        "ended = \"signaled\"\nsignal = 2147483647",
    );
    let meta = RunMeta::from_toml(&text).unwrap();
    assert_eq!(meta.shell_status(), i32::MAX);
    assert!(readers::run_toml(text.as_bytes()));
}

/// The seed model `name` with `edit` applied to its `model` object; every prediction of
/// its training grid must be an error (not a panic) containing `want`.
fn damaged_model_errors(name: &str, edit: impl Fn(&mut serde_json::Value), want: &str) {
    use powerperf_core::models::Predictor;
    let path = fuzz_dir().join("seeds/model_json").join(name);
    let mut v: serde_json::Value = serde_json::from_slice(&std::fs::read(path).unwrap()).unwrap();
    edit(&mut v["model"]);
    let m = ModelFile::from_json(&v.to_string()).unwrap();
    let mut n = 0;
    for w in m.workloads() {
        for k in m.knob_grid(&w) {
            if let Err(e) = m.predict(&w, &k) {
                assert!(format!("{e:#}").contains(want), "{e:#}");
                n += 1;
            }
        }
    }
    assert!(n > 0, "no prediction failed");
}

#[test]
fn a_scaling_model_with_an_inverted_feature_range_is_an_error_not_a_panic() {
    // Found by the model_json fuzz target in 91 s (fuzz/README.md): f64::clamp panicked
    // on min > max in ScalingModel::predict (src/models/scaling.rs).
    damaged_model_errors(
        "scaling.json",
        |m| {
            let t = &mut m["scaling"]["targets"][0];
            (t["mins"][0], t["maxs"][0]) = (t["maxs"][0].clone(), t["mins"][0].clone());
        },
        "the range of `llc_misses_per_cycle` is [0.0006060606060606061, 0.00013157894736842105]",
    );
}

#[test]
fn a_scaling_model_with_fewer_means_than_features_is_an_error_not_a_panic() {
    damaged_model_errors(
        "scaling.json",
        |m| m["scaling"]["targets"][0]["means"] = serde_json::json!([]),
        "1 features, 0 means, 1 stds, 1 mins and 1 maxs",
    );
}

#[test]
fn an_analytic_counters_model_with_a_negative_t0_is_an_error_not_a_panic() {
    // f64::clamp(0, t0) panicked for t0 < 0 (src/models/analytic_counters.rs).
    damaged_model_errors(
        "analytic_counters.json",
        |m| m["analytic_counters"]["groups"][0]["t0_s"] = serde_json::json!(-1.0),
        "workload `alpha`: t0_s = -1",
    );
}

#[test]
fn a_cupti_file_with_a_huge_warp_count_is_read_not_a_panic() {
    // Found by the cupti_bin fuzz target in 25 s and by tests/readers_random.rs: a DEVICE
    // record whose warps per SM × threads per warp overflows u32 (a panic in debug builds;
    // rt/src/cupti.rs now saturates). The input is the fuzzer's crash file.
    let data = std::fs::read(fuzz_dir().join("crashes/cupti_bin-warps-overflow.bin")).unwrap();
    let f = powerperf_rt::cupti::decode(&data).unwrap();
    assert!(f.devices.iter().any(|d| d.max_threads_per_sm == u32::MAX));
}

#[test]
fn region_events_whose_counter_sums_overflow_give_stats_not_a_panic() {
    // Found by the region_events fuzz target in 59 s: `stats` summed counter values (u64,
    // from the file) with +, an overflow panic in debug builds (rt/src/events.rs now
    // saturates). The input is the fuzzer's crash file.
    let data =
        std::fs::read(fuzz_dir().join("crashes/region_events-counter-sum-overflow.bin")).unwrap();
    assert!(readers::region_events(&data));
}
