use super::*;
use std::collections::BTreeMap;
use std::fmt::Write as _;

fn slice(name: &str, start: u64, end: u64) -> Slice {
    Slice {
        name: name.into(),
        kind: SliceKind::Region,
        start_ns: start,
        end_ns: end,
        depth: 0,
        flow: None,
        args: Vec::new(),
    }
}

#[test]
fn nest_cuts_a_child_at_its_parent_end_and_edges_balance() {
    let mut s = vec![
        slice("inner", 20, 40),
        slice("outer", 10, 50),
        // An API call that outlives its region: cut at 50.
        slice("call", 45, 70),
        slice("next", 60, 65),
        slice("zero", 80, 80),
    ];
    nest(&mut s);
    let got: Vec<(&str, u64, u64, u32)> = s
        .iter()
        .map(|x| (x.name.as_str(), x.start_ns, x.end_ns, x.depth))
        .collect();
    assert_eq!(
        got,
        [
            ("outer", 10, 50, 0),
            ("inner", 20, 40, 1),
            ("call", 45, 50, 1),
            ("next", 60, 65, 0),
            ("zero", 80, 80, 0)
        ]
    );
    let e = edges(&s);
    let order: Vec<(u64, Edge)> = e.clone();
    assert_eq!(
        order,
        [
            (10, Edge::Begin(0)),
            (20, Edge::Begin(1)),
            (40, Edge::End(1)),
            (45, Edge::Begin(2)),
            (50, Edge::End(2)),
            (50, Edge::End(0)),
            (60, Edge::Begin(3)),
            (65, Edge::End(3)),
            (80, Edge::Begin(4)),
            (80, Edge::End(4)),
        ]
    );
}

#[test]
fn serialize_moves_an_overlapping_activity_after_the_previous_one() {
    let mut s = vec![slice("b", 15, 30), slice("a", 10, 20)];
    serialize(&mut s);
    let got: Vec<(u64, u64)> = s.iter().map(|x| (x.start_ns, x.end_ns)).collect();
    assert_eq!(got, [(10, 20), (20, 30)]);
}

/// A run directory with a timeline (RAPL energy, a counter, a GPU power and clock) and a
/// program that enters `inner` 3 times inside each of 5 `outer`s on thread 7.
pub(crate) fn nested_run() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let mut meta = crate::report::tests::sample_meta();
    meta.run.start_monotonic_ns = 1_000_000_000;
    meta.run.start_unix_ns = 1_700_000_000_000_000_000;
    meta.write(dir.path()).unwrap();
    let names: Vec<String> = [
        "task-clock",
        "energy_package_0_j",
        "gpu0_power_w",
        "gpu0_sm_clock_mhz",
        "gpu0_temp_c",
        "gpu0_energy_j",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut t = powerperf_format::timeline::Timeline::new(&names);
    for i in 1..=10u64 {
        t.push(
            i * 10_000_000,
            10_000_000,
            &[
                Some(5e6),
                Some(0.25),
                Some(100.0 + i as f64),
                Some(1410.0),
                Some(45.0),
                Some(1.0),
            ],
        );
    }
    t.write_parquet(&dir.path().join(powerperf_format::timeline::TIMELINE))
        .unwrap();
    let ev = dir.path().join("region_events");
    std::fs::create_dir_all(&ev).unwrap();
    let mut text =
        String::from("# powerperf-rt region events v1 pid=7\nR\t1\touter\nR\t2\tinner\n");
    let t0 = 1_000_000_000u64;
    for o in 0..5u64 {
        let base = t0 + 1_000_000 + o * 10_000_000;
        let _ = writeln!(text, "B\t{base}\t7\t1");
        for i in 0..3u64 {
            let s = base + 1_000_000 + i * 2_000_000;
            let _ = writeln!(text, "B\t{s}\t7\t2");
            let _ = writeln!(text, "E\t{}\t7\t2", s + 1_000_000);
        }
        let _ = writeln!(text, "E\t{}\t7\t1", base + 8_000_000);
    }
    std::fs::write(ev.join("7.tsv"), text).unwrap();
    dir
}

#[test]
fn a_run_becomes_nested_slices_and_counters_with_units() {
    let dir = nested_run();
    let t = load(dir.path()).unwrap();
    assert_eq!(t.name, "x");
    assert_eq!(t.processes.len(), 1);
    let p = &t.processes[0];
    assert_eq!((p.pid, p.host.as_str()), (7, "h"));
    assert_eq!(p.threads.len(), 1);
    let th = &p.threads[0];
    let count = |n: &str, d: u32| {
        th.slices
            .iter()
            .filter(|s| s.name == n && s.depth == d)
            .count()
    };
    assert_eq!((count("outer", 0), count("inner", 1)), (5, 15));
    let c: BTreeMap<&str, &Counter> = p.counters.iter().map(|c| (c.name.as_str(), c)).collect();
    let names: Vec<&str> = c.keys().copied().collect();
    assert_eq!(
        names,
        [
            "gpu0 energy",
            "gpu0_power",
            "gpu0_sm_clock",
            "gpu0_temp",
            "package_0 energy (RAPL)",
            "package_0 power (RAPL)",
            "task-clock rate"
        ]
    );
    // 0.25 J per 10 ms: 25 W; the energy accumulates to 2.5 J.
    let power = c["package_0 power (RAPL)"];
    assert_eq!(power.unit, "W");
    assert!(power.points.iter().all(|(_, v)| (v - 25.0).abs() < 1e-9));
    let energy = c["package_0 energy (RAPL)"];
    assert_eq!(
        (energy.unit.as_str(), energy.mode),
        ("J", CounterMode::Accumulated)
    );
    assert!((energy.points.last().unwrap().1 - 2.5).abs() < 1e-9);
    // Times on CLOCK_MONOTONIC: the run's start plus t_ns.
    assert_eq!(energy.points[0].0, 1_010_000_000);
    assert_eq!(c["task-clock rate"].unit, "ns/s");
    assert!((c["task-clock rate"].points[0].1 - 5e8).abs() < 1e-3);
    assert_eq!(c["gpu0_sm_clock"].unit, "MHz");
    // NVML's temperature is a reading, not a delta; its energy accumulates.
    assert_eq!(c["gpu0_temp"].unit, "°C");
    assert!(c["gpu0_temp"].points.iter().all(|(_, v)| *v == 45.0));
    assert_eq!(c["gpu0 energy"].points.last().unwrap().1, 10.0);
}

/// Chrome's rules, checked on the JSON: every B has its E on the same track (LIFO), X events
/// have a duration and, on a thread, nest (each inside the one open around its start),
/// counter events have numeric args, and times never go back on a track.
pub(crate) fn check_chrome(v: &serde_json::Value) -> BTreeMap<String, usize> {
    let mut stacks: BTreeMap<(u64, u64), Vec<String>> = BTreeMap::new();
    let mut x_stacks: BTreeMap<(u64, u64), Vec<f64>> = BTreeMap::new();
    let mut last: BTreeMap<(u64, u64), f64> = BTreeMap::new();
    let mut counts: BTreeMap<String, usize> = BTreeMap::new();
    let mut max_depth: BTreeMap<String, usize> = BTreeMap::new();
    for e in v["traceEvents"].as_array().unwrap() {
        let ph = e["ph"].as_str().unwrap();
        *counts.entry(ph.to_string()).or_default() += 1;
        if ph == "M" {
            continue;
        }
        let ts = e["ts"].as_f64().unwrap();
        let key = (
            e["pid"].as_u64().unwrap(),
            e["tid"].as_u64().unwrap_or(u64::MAX),
        );
        if matches!(ph, "B" | "E" | "X") {
            let l = last.entry(key).or_insert(f64::MIN);
            assert!(ts >= *l, "time goes back on {key:?}: {e}");
            *l = ts;
        }
        match ph {
            "B" => {
                let st = stacks.entry(key).or_default();
                st.push(e["name"].as_str().unwrap().to_string());
                let d = max_depth
                    .entry(e["name"].as_str().unwrap().to_string())
                    .or_default();
                *d = (*d).max(st.len());
            }
            "E" => {
                assert!(
                    stacks.entry(key).or_default().pop().is_some(),
                    "E without B on {key:?}: {e}"
                );
            }
            "X" => {
                let dur = e["dur"].as_f64().unwrap();
                assert!(dur >= 0.0, "{e}");
                let st = x_stacks.entry(key).or_default();
                while st.last().is_some_and(|&end| end <= ts) {
                    st.pop();
                }
                if let Some(&end) = st.last() {
                    assert!(ts + dur <= end + 1e-3, "X not inside its parent: {e}");
                }
                st.push(ts + dur);
                let d = max_depth
                    .entry(e["name"].as_str().unwrap().to_string())
                    .or_default();
                *d = (*d).max(st.len());
            }
            "C" => {
                let args = e["args"].as_object().unwrap();
                assert!(
                    !args.is_empty() && args.values().all(|x| x.is_number()),
                    "{e}"
                );
                *counts.entry("C values".into()).or_default() += args.len();
            }
            _ => {}
        }
    }
    for (k, s) in stacks {
        assert!(s.is_empty(), "B without E on {k:?}: {s:?}");
    }
    for (n, d) in max_depth {
        counts.insert(format!("depth:{n}"), d);
    }
    counts
}

#[test]
fn chrome_json_follows_the_format_rules() {
    let dir = nested_run();
    let t = load(dir.path()).unwrap();
    let mut buf = Vec::new();
    chrome::write_to(&t, &mut buf).unwrap();
    let v: serde_json::Value = serde_json::from_slice(&buf).unwrap();
    let c = check_chrome(&v);
    // 5 outer and 15 inner regions, each one complete event (no B/E pairs).
    assert_eq!(c["X"], 20);
    assert!(!c.contains_key("B") && !c.contains_key("E"));
    assert_eq!((c["depth:outer"], c["depth:inner"]), (1, 2));
    // 10 samples of 7 counters, one event each (args of one event would be drawn stacked).
    assert_eq!(c["C values"], 70);
    assert_eq!(c["C"], 70, "{c:?}");
    // µs with the ns as decimals: the first outer begins 1 ms after the run's start.
    let first_x = v["traceEvents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["ph"] == "X")
        .unwrap();
    assert_eq!(first_x["ts"].as_f64().unwrap(), 1_001_000.0);
    // Compact: one line, no empty args, exact µs without trailing zeros.
    let text = String::from_utf8(buf).unwrap();
    assert_eq!(text.lines().count(), 1);
    assert!(!text.contains("\"args\":{}"));
    assert!(text.contains("\"ts\":1001000,"), "{}", &text[..400]);
    assert_eq!(v["otherData"]["clock"], "CLOCK_MONOTONIC");
}

#[test]
fn perfetto_decodes_with_15_nested_slices_and_counter_tracks() {
    use prost::Message;
    let dir = nested_run();
    let t = load(dir.path()).unwrap();
    let mut buf = Vec::new();
    perfetto::write_to(&t, &mut buf).unwrap();
    let trace = perfetto_proto::Trace::decode(buf.as_slice()).unwrap();
    let mut counters = 0;
    let mut begins: BTreeMap<String, usize> = BTreeMap::new();
    let mut names: HashMap<u64, String> = HashMap::new();
    let mut counter_tracks = 0;
    for p in &trace.packet {
        if let Some(i) = &p.interned_data {
            for n in &i.event_names {
                names.insert(n.iid.unwrap(), n.name.clone().unwrap());
            }
        }
        match &p.data {
            Some(perfetto_proto::trace_packet::Data::TrackDescriptor(d)) if d.counter.is_some() => {
                counter_tracks += 1
            }
            Some(perfetto_proto::trace_packet::Data::TrackEvent(e)) => match e.r#type() {
                perfetto_proto::track_event::Type::Counter => {
                    counters += 1 + e.extra_double_counter_values.len();
                    assert_eq!(
                        e.extra_double_counter_values.len(),
                        e.extra_double_counter_track_uuids.len()
                    );
                }
                perfetto_proto::track_event::Type::SliceBegin => {
                    let Some(perfetto_proto::track_event::NameField::NameIid(iid)) = e.name_field
                    else {
                        panic!("no interned name: {e:?}")
                    };
                    *begins.entry(names[&iid].clone()).or_default() += 1;
                }
                _ => {}
            },
            _ => {}
        }
    }
    assert_eq!(counter_tracks, 7);
    assert_eq!(counters, 70);
    assert_eq!(begins["inner"], 15);
    assert_eq!(begins["outer"], 5);
}

#[test]
fn a_directory_that_is_no_run_is_named_with_the_fix() {
    let dir = tempfile::tempdir().unwrap();
    let e = load(dir.path()).unwrap_err().to_string();
    assert!(
        e.contains("not a run directory") && e.contains("powerperf collect -o"),
        "{e}"
    );
}

#[test]
fn ranks_on_two_hosts_get_distinct_pids_and_aligned_clocks() {
    let job = tempfile::tempdir().unwrap();
    for (r, host, mono) in [(0u32, "a", 1_000_000_000u64), (1, "b", 5_000_000_000)] {
        let src = nested_run();
        let dst = job.path().join(format!("rank{r}"));
        std::fs::rename(src.path(), &dst).unwrap();
        let mut meta = RunMeta::read(&dst).unwrap();
        meta.run.rank = Some(r);
        meta.run.host = host.into();
        // Both started at the same wall-clock instant; host b's monotonic clock is 4 s ahead.
        meta.run.start_unix_ns = 1_700_000_000_000_000_000;
        meta.run.start_monotonic_ns = mono;
        meta.write(&dst).unwrap();
        if r == 1 {
            // Host b's region events are 4 s later on its own clock.
            let p = dst.join("region_events/7.tsv");
            let text = std::fs::read_to_string(&p).unwrap();
            let shifted: String = text
                .lines()
                .map(|l| {
                    let f: Vec<&str> = l.split('\t').collect();
                    if f.len() == 4 && (f[0] == "B" || f[0] == "E") {
                        let t: u64 = f[1].parse().unwrap();
                        format!("{}\t{}\t{}\t{}\n", f[0], t + 4_000_000_000, f[2], f[3])
                    } else {
                        format!("{l}\n")
                    }
                })
                .collect();
            std::fs::write(&p, shifted).unwrap();
        }
    }
    let t = load(job.path()).unwrap();
    assert_eq!(t.processes.len(), 2);
    let (a, b) = (&t.processes[0], &t.processes[1]);
    assert_eq!((a.rank, b.rank), (Some(0), Some(1)));
    assert_eq!((a.pid, b.pid), (7, 7));
    assert_ne!(a.trace_pid, b.trace_pid);
    assert_eq!(b.label(), "rank 1 (pid 7) on b");
    // Aligned on the wall clock: the same region begins at the same time in both.
    assert_eq!(
        a.threads[0].slices[0].start_ns,
        b.threads[0].slices[0].start_ns
    );
    assert_eq!(a.counters[0].points[0].0, b.counters[0].points[0].0);
}
