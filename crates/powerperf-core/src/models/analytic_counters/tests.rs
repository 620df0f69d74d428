use super::*;

fn meta() -> SetMeta {
    let mut m = SetMeta::default();
    m.counters.insert("dram_active".into(), CounterKind::Rate);
    m.counters.insert("misses".into(), CounterKind::Count);
    m
}

/// A workload with t(f) = tm + tc·1000/f; its counters report the memory fraction
/// `tm/t` (dram_active) and `tm / 100 ns` misses; P = 20 + 30·(f/1000)^3.
fn pt(w: &str, f: f64, tm: f64, tc: f64) -> Point {
    let t = tm + tc * 1000.0 / f;
    Point {
        workload: w.into(),
        knobs: [("core_freq_mhz".to_string(), f)].into_iter().collect(),
        time_s: Some(t),
        power_w: Some(20.0 + 30.0 * (f / 1000.0f64).powi(3)),
        counters: [
            ("dram_active".to_string(), tm / t),
            ("misses".to_string(), tm / 100e-9),
        ]
        .into_iter()
        .collect(),
        ..Point::default()
    }
}

fn k(f: f64) -> Knobs {
    [("core_freq_mhz".to_string(), f)].into_iter().collect()
}

#[test]
fn one_reference_point_and_exact_counters_give_the_curve() {
    // α = 1: only the reference point, nothing to calibrate on.
    let m = fit(
        &meta(),
        &[pt("a", 1000.0, 2.0, 3.0)],
        &AnalyticCountersParams::default(),
    )
    .unwrap();
    assert_eq!(m.alpha, 1.0);
    let t = m.predict("a", &k(500.0)).unwrap().time_s.unwrap();
    assert!((t - 8.0).abs() < 1e-12, "{t}");
}

#[test]
fn known_answer_with_ns_latency_and_calibration() {
    // Counters that over-count memory time by 2× (e.g. refills of which half reach DRAM):
    // uncalibrated predictions are off, the calibrated α is 0.5 and exact.
    let mut pts = Vec::new();
    for (w, tm, tc) in [("a", 2.0, 3.0), ("b", 0.5, 4.0), ("c", 3.0, 0.5)] {
        for f in [500.0, 1000.0] {
            let mut p = pt(w, f, tm, tc);
            *p.counters.get_mut("misses").unwrap() *= 2.0;
            pts.push(p);
        }
    }
    let terms = vec![MemoryTerm {
        counter: "misses".into(),
        kind: MemoryTermKind::NsPerEvent(100.0),
    }];
    let raw = fit(
        &meta(),
        &pts,
        &AnalyticCountersParams {
            memory_terms: terms.clone(),
            calibrate: false,
            ..AnalyticCountersParams::default()
        },
    )
    .unwrap();
    let cal = fit(
        &meta(),
        &pts,
        &AnalyticCountersParams {
            memory_terms: terms,
            calibrate: true,
            ..AnalyticCountersParams::default()
        },
    )
    .unwrap();
    assert!((cal.alpha - 0.5).abs() < 1e-9, "{}", cal.alpha);
    let want = 0.5 + 4.0 * 1000.0 / 700.0;
    let t_cal = cal.predict("b", &k(700.0)).unwrap().time_s.unwrap();
    let t_raw = raw.predict("b", &k(700.0)).unwrap().time_s.unwrap();
    assert!((t_cal - want).abs() < 1e-9, "{t_cal} vs {want}");
    assert!((t_raw - want).abs() > 0.1);
    // Power comes from the analytic curve (two clocks, cube law): exact.
    let p = cal.predict("b", &k(700.0)).unwrap().power_w.unwrap();
    assert!((p - (20.0 + 30.0 * 0.7f64.powi(3))).abs() < 1e-6, "{p}");
}

#[test]
fn cycles_per_event_term() {
    // 1e9 events × 2 cycles at 1000 MHz = 2 s of memory time.
    let mut p = pt("a", 1000.0, 2.0, 3.0);
    p.counters.insert("misses".into(), 1e9);
    let m = fit(
        &meta(),
        &[p],
        &AnalyticCountersParams {
            memory_terms: vec![MemoryTerm {
                counter: "misses".into(),
                kind: MemoryTermKind::CyclesPerEvent(2.0),
            }],
            calibrate: true,
            ..AnalyticCountersParams::default()
        },
    )
    .unwrap();
    assert!((m.groups[0].memory_s.unwrap() - 2.0).abs() < 1e-12);
}

#[test]
fn no_memory_counter_names_the_fix() {
    let e = fit(
        &SetMeta::default(),
        &[pt("a", 1000.0, 1.0, 1.0)],
        &AnalyticCountersParams::default(),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("memory_terms") && e.contains("docs/models.md"),
        "{e}"
    );
}

fn meta_gpu() -> SetMeta {
    let mut m = meta();
    m.counters.insert("fp64_active".into(), CounterKind::Rate);
    m.counters.insert("fp32_active".into(), CounterKind::Rate);
    m.counters
        .insert("gr_engine_active".into(), CounterKind::Rate);
    m
}

/// A GPU workload measured at `f`: host time `th`, compute-pipe time `tc` at 1000 MHz
/// (∝ 1/f), DRAM time `tm` (fixed), the rest `tr` at 1000 MHz (∝ 1/f); the run lasts
/// `th + max(tc·1000/f, tm) + tr·1000/f` and its DCGM fractions are the busy times over
/// that. P = 20 + 30·(f/1000)^3.
fn gpu_pt(w: &str, f: f64, th: f64, tc: f64, tm: f64, tr: f64) -> Point {
    let r = 1000.0 / f;
    let t = th + (tc * r).max(tm) + tr * r;
    Point {
        workload: w.into(),
        knobs: k(f),
        time_s: Some(t),
        power_w: Some(20.0 + 30.0 * (f / 1000.0f64).powi(3)),
        counters: [
            ("dram_active".to_string(), tm / t),
            ("fp64_active".to_string(), tc * r / t),
            ("fp32_active".to_string(), 0.1 * tc * r / t),
            ("gr_engine_active".to_string(), (t - th) / t),
        ]
        .into_iter()
        .collect(),
        ..Point::default()
    }
}

fn max_params() -> AnalyticCountersParams {
    AnalyticCountersParams::roofline()
}

/// (workload, host, compute, memory, rest) seconds at 1000 MHz: compute-bound,
/// memory-bound at 1000 MHz that turns compute-bound below 600 MHz, host-heavy.
const GPU_WORKLOADS: [(&str, f64, f64, f64, f64); 3] = [
    ("dgemm", 0.0, 3.0, 1.5, 0.2),
    ("stream", 0.1, 1.2, 2.0, 0.3),
    ("histo", 4.0, 0.2, 0.1, 0.5),
];

#[test]
fn bound_and_bottleneck_known_answer_from_one_point() {
    for (w, th, tc, tm, tr) in GPU_WORKLOADS {
        let m = fit(
            &meta_gpu(),
            &[gpu_pt(w, 1000.0, th, tc, tm, tr)],
            &max_params(),
        )
        .unwrap();
        assert_eq!(m.alpha, 1.0);
        assert_eq!(m.combine, Combine::Max);
        assert_eq!(m.active_counter.as_deref(), Some("gr_engine_active"));
        for f in [1000.0, 800.0, 600.0, 500.0, 300.0] {
            let want = gpu_pt(w, f, th, tc, tm, tr).time_s.unwrap();
            let got = m.predict(w, &k(f)).unwrap().time_s.unwrap();
            assert!(
                (got - want).abs() < 1e-9 * want,
                "{w} at {f}: {got} vs {want}"
            );
        }
    }
    // The sum form charges the overlapped memory time again: off for the compute-bound one.
    let (w, th, tc, tm, tr) = GPU_WORKLOADS[0];
    let sum = fit(
        &meta_gpu(),
        &[gpu_pt(w, 1000.0, th, tc, tm, tr)],
        &AnalyticCountersParams::default(),
    )
    .unwrap();
    let want = gpu_pt(w, 500.0, th, tc, tm, tr).time_s.unwrap();
    let got = sum.predict(w, &k(500.0)).unwrap().time_s.unwrap();
    assert!((got - want).abs() > 0.1 * want, "{got} vs {want}");
}

#[test]
fn bound_and_bottleneck_in_workload_holdout_is_exact_and_fits_nothing() {
    use crate::models::{eval, FitParams, ModelKind};
    let mut pts = Vec::new();
    for (w, th, tc, tm, tr) in GPU_WORKLOADS {
        for f in [400.0, 700.0, 1000.0] {
            pts.push(gpu_pt(w, f, th, tc, tm, tr));
        }
    }
    let params = FitParams {
        analytic_counters: max_params(),
        ..FitParams::default()
    };
    let e = eval::workload_holdout(
        ModelKind::AnalyticCounters,
        &meta_gpu(),
        &pts,
        &k(1000.0),
        &params,
    );
    assert_eq!(e.results.len(), 6);
    assert_results_exact(&e.results, &pts, &["time_s"], 1e-9);
}

#[test]
fn bound_and_bottleneck_degenerate_input_gives_no_panic() {
    let mut p = gpu_pt("a", 1000.0, 0.5, 1.0, 2.0, 0.1);
    // Out-of-range and non-finite fractions are clamped or dropped.
    p.counters.insert("fp64_active".into(), f64::NAN);
    p.counters.insert("fp32_active".into(), 7.0);
    p.counters.insert("gr_engine_active".into(), -3.0);
    let m = fit(&meta_gpu(), std::slice::from_ref(&p), &max_params()).unwrap();
    assert_eq!(m.groups[0].compute_fraction, Some(1.0));
    assert_eq!(m.groups[0].active_fraction, Some(0.0));
    // a = 0: all host time, the same at every clock.
    let t = m.predict("a", &k(500.0)).unwrap().time_s.unwrap();
    assert!((t - p.time_s.unwrap()).abs() < 1e-12, "{t}");
    // A zero, negative or NaN clock is an error, not a panic or an infinity.
    for f in [0.0, -100.0, f64::NAN] {
        assert!(m.predict("a", &k(f)).is_err(), "{f}");
    }
    // No compute counter in the set: c = 0, the sum form with α = 1 and the host part.
    let mut meta = meta();
    meta.counters
        .insert("gr_engine_active".into(), CounterKind::Rate);
    assert!(!roofline_applicable(&meta));
    assert!(roofline_applicable(&meta_gpu()));
    let q = gpu_pt("b", 1000.0, 0.0, 1.0, 2.0, 1.0);
    let m = fit(&meta, std::slice::from_ref(&q), &max_params()).unwrap();
    assert_eq!(m.groups[0].compute_fraction, None);
    let t0 = q.time_s.unwrap();
    let t = m.predict("b", &k(500.0)).unwrap().time_s.unwrap();
    let md = q.counters["dram_active"];
    assert!((t - t0 * (md + (1.0 - md) * 2.0)).abs() < 1e-12, "{t}");
    // Zero reference time: t stays 0, no NaN.
    let mut z = gpu_pt("c", 1000.0, 0.0, 1.0, 1.0, 0.0);
    z.time_s = Some(0.0);
    let m = fit(&meta_gpu(), &[z], &max_params()).unwrap();
    assert_eq!(m.predict("c", &k(500.0)).unwrap().time_s, None);
    // An unknown compute or active counter names the set's counters.
    for params in [
        AnalyticCountersParams {
            compute_counters: vec!["nope".into()],
            ..max_params()
        },
        AnalyticCountersParams {
            active_counter: Some("nope".into()),
            ..max_params()
        },
    ] {
        let e = fit(&meta_gpu(), std::slice::from_ref(&p), &params)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope") && e.contains("dram_active"), "{e}");
    }
}

/// P_i(f) = S(f) + v(f)·D_i·t_i(f0)/t_i(f), S(f0) = 0 and v(f0) = 1 (so P_i0 = D_i and
/// the static grid's first value is exact), times from the bound-and-bottleneck form:
/// a held-out workload's time and power follow from its baseline point alone.
fn roofline_world() -> Vec<Point> {
    let sf = |f: f64| 15.0 * (1.0 - f / 1000.0);
    let vf = |f: f64| (0.6 + 0.4 * f / 1000.0).powi(2);
    let mut pts = Vec::new();
    let mut work = GPU_WORKLOADS.to_vec();
    work.push(("lbm", 0.3, 0.4, 1.8, 0.6));
    for (i, &(w, th, tc, tm, tr)) in work.iter().enumerate() {
        let d = 100.0 + 40.0 * i as f64;
        let t0 = gpu_pt(w, 1000.0, th, tc, tm, tr).time_s.unwrap();
        for f in [400.0, 550.0, 700.0, 850.0, 1000.0] {
            let mut p = gpu_pt(w, f, th, tc, tm, tr);
            p.power_w = Some(sf(f) + vf(f) * d * t0 / p.time_s.unwrap());
            pts.push(p);
        }
    }
    pts
}

/// `e` is `auto`'s stack with no failure, `n` results, `choice` on its protocol line, and
/// exact (within 10⁻⁶) on `targets` against `pts`.
fn assert_stack_exact(
    e: &crate::models::eval::Evaluation,
    pts: &[Point],
    n: usize,
    choice: &str,
    targets: &[&str],
) {
    assert_eq!(e.kind, crate::models::ModelKind::Stack);
    assert!(e.failures.is_empty(), "{:?}", e.failures);
    assert_eq!(e.results.len(), n);
    assert!(
        e.summary.protocol.contains(choice),
        "{}",
        e.summary.protocol
    );
    assert_results_exact(&e.results, pts, targets, 1e-6);
}

/// Every result's `targets` equal the measured value of the same point of `pts` within
/// the relative tolerance `tol`.
fn assert_results_exact(
    results: &[crate::models::eval::PointResult],
    pts: &[Point],
    targets: &[&str],
    tol: f64,
) {
    for r in results {
        let p = pts
            .iter()
            .find(|p| p.workload == r.workload && p.knobs == r.knobs)
            .unwrap();
        for t in targets {
            let got = r.predicted.target(t).unwrap();
            let want = crate::models::eval::measured(p).target(t).unwrap();
            assert!(
                (got - want).abs() < tol * want,
                "{} {t}: {got} vs {want}",
                r.workload
            );
        }
    }
}

#[test]
fn auto_stack_keeps_an_exact_physical_form_and_never_sees_the_held_out_points() {
    // `auto` on a set with DCGM fractions stacks the physical form with the neighbours
    // per target (models::stack). On data the physical form describes exactly, its inner
    // score is 0 for time and power, so it is chosen and the predictions are exact; and
    // poisoning a held-out workload's other points changes neither the choice nor them.
    use crate::models::{eval, FitParams, ModelKind};
    let pts = roofline_world();
    let run = |pts: &[Point]| {
        eval::workload_holdout(
            ModelKind::Auto,
            &meta_gpu(),
            pts,
            &k(1000.0),
            &FitParams::default(),
        )
    };
    let e = run(&pts);
    assert_stack_exact(
        &e,
        &pts,
        16,
        "time_s: analytic_counters ×4; power_w: analytic_counters ×4",
        &["time_s", "power_w"],
    );
    let mut poisoned = pts.clone();
    for p in poisoned
        .iter_mut()
        .filter(|p| p.workload == "stream" && p.knobs["core_freq_mhz"] != 1000.0)
    {
        p.time_s = Some(1e9);
        p.power_w = Some(1e-3);
        p.counters.insert("dram_active".into(), 0.01);
    }
    let b = run(&poisoned);
    let pick = |e: &crate::models::eval::Evaluation| e.predictions_of("stream");
    assert_eq!(pick(&e).len(), 4);
    assert_eq!(pick(&e), pick(&b));
}

#[test]
fn stack_model_file_predicts_a_workload_known_at_its_baseline_point() {
    // `--model stack` on a set where `stream` has only its 1000 MHz point: the choice by
    // the other workloads, `stream` exact from that point; the model file round-trips.
    use crate::models::{fit_kind, FitParams, Fitted, ModelKind};
    let all = roofline_world();
    let pts: Vec<Point> = all
        .iter()
        .filter(|p| p.workload != "stream" || p.knobs["core_freq_mhz"] == 1000.0)
        .cloned()
        .collect();
    let m = fit_kind(ModelKind::Stack, &meta_gpu(), &pts, &FitParams::default()).unwrap();
    let Fitted::Stack(s) = &m else {
        panic!("{m:?}")
    };
    assert_eq!(s.choice["time_s"], "analytic_counters");
    assert_eq!(s.choice["power_w"], "analytic_counters");
    assert!(s.physical.is_some() && s.neighbors.is_some() && s.notes.is_empty());
    assert!(
        m.explain().contains("time_s: analytic_counters 0.00 %")
            && m.explain().contains("energy_j: not scored -> scaling"),
        "{}",
        m.explain()
    );
    let back: Fitted = serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(back, m);
    // The common response (the null model) is scored beside the others and, where chosen,
    // predicts as the `scaling` fit without features; a file without the member (before
    // stop 32) reads and falls back to the physical form.
    let common = s.common.as_ref().expect("common-response member");
    assert!(common.targets.iter().all(|t| t.features.is_empty()));
    // Issue 41's candidates: `scaling` (the reference) and its mean with the neighbours.
    assert!(
        ["scaling", "blend"]
            .iter()
            .all(|c| s.inner_mape_pct["time_s"].contains_key(*c)),
        "{:?}",
        s.inner_mape_pct
    );
    assert!(
        s.inner_mape_pct["time_s"].contains_key("common_response"),
        "{:?}",
        s.inner_mape_pct
    );
    let mut forced = s.clone();
    forced
        .choice
        .insert("time_s".into(), "common_response".into());
    let q = &all.iter().find(|p| p.workload == "stream").unwrap().knobs;
    assert_eq!(
        forced.predict("stream", q).unwrap().time_s,
        common.predict("stream", q).unwrap().time_s
    );
    // A file written before stop 32 has neither the common response nor (issue 41) the
    // `scaling` member.
    forced.common = None;
    forced.scaling = None;
    let mut v = serde_json::to_value(&forced).unwrap();
    assert!(v.get("common").is_none() && v.get("scaling").is_none());
    v.as_object_mut().unwrap().remove("common");
    let old: crate::models::stack::StackModel = serde_json::from_value(v).unwrap();
    assert_eq!(
        old.predict("stream", q).unwrap().time_s,
        s.physical
            .as_ref()
            .unwrap()
            .predict("stream", q)
            .unwrap()
            .time_s
    );
    for p in all.iter().filter(|p| p.workload == "stream") {
        let got = back.predict("stream", &p.knobs).unwrap();
        for (g, w) in [(got.time_s, p.time_s), (got.power_w, p.power_w)] {
            let (g, w) = (g.unwrap(), w.unwrap());
            assert!((g - w).abs() < 1e-6 * w, "{:?}: {g} vs {w}", p.knobs);
        }
    }
    // One point: the neighbours cannot be fitted, the stack keeps the physical member
    // and says why; no point at all: the physical member's error, no panic.
    let one = fit_kind(
        ModelKind::Stack,
        &meta_gpu(),
        &pts[..1],
        &FitParams::default(),
    );
    let Ok(Fitted::Stack(s1)) = &one else {
        panic!("{one:?}")
    };
    assert!(
        s1.neighbors.is_none() && s1.notes[0].starts_with("neighbors:"),
        "{s1:?}"
    );
    let w = &pts[0].workload;
    assert!(one.unwrap().predict(w, &k(700.0)).unwrap().time_s.is_some());
    let e = fit_kind(ModelKind::Stack, &meta_gpu(), &[], &FitParams::default());
    assert!(e.is_err(), "{e:?}");
}

fn meta_cpu() -> SetMeta {
    let mut m = SetMeta::default();
    m.knobs = vec!["core_freq_mhz".into(), "threads".into()];
    m.counters.insert("cpu_cycles".into(), CounterKind::Count);
    m.counters.insert("inst_retired".into(), CounterKind::Count);
    m
}

/// A CPU workload with `n` instructions at base CPI 1.2, `ts` s of stall (cycles counted,
/// clock-independent) and `ti` s off the core (not counted) on `threads` threads:
/// t(f) = ti + n·1.2/(f·threads) + ts, C = n·1.2 + ts·f·threads; P = 0.2 + (f/1000)^2.
fn cpu_pt(w: &str, f: f64, threads: f64, n: f64, ts: f64, ti: f64) -> Point {
    let hz = f * 1e6;
    let t = ti + n * 1.2 / (hz * threads) + ts;
    Point {
        workload: w.into(),
        knobs: [
            ("core_freq_mhz".to_string(), f),
            ("threads".to_string(), threads),
        ]
        .into_iter()
        .collect(),
        time_s: Some(t),
        power_w: Some(0.2 + (f / 1000.0f64).powi(2)),
        counters: [
            ("inst_retired".to_string(), n),
            ("cpu_cycles".to_string(), n * 1.2 + ts * hz * threads),
        ]
        .into_iter()
        .collect(),
        ..Point::default()
    }
}

const CPU_WORKLOADS: [(&str, f64, f64, f64); 5] = [
    ("bitcount", 3e10, 0.5, 0.0),
    ("crc32", 2e10, 20.0, 0.5),
    ("rijndael", 4e10, 5.0, 15.0),
    ("qsort", 1e10, 2.0, 1.0),
    ("dijkstra", 5e9, 3.0, 0.2),
];

fn cpu_world(threads: &[f64]) -> Vec<Point> {
    let mut pts = Vec::new();
    for &(w, n, ts, ti) in &CPU_WORKLOADS {
        for &th in threads {
            for f in [1000.0, 1500.0, 2000.0] {
                pts.push(cpu_pt(w, f, th, n, ts, ti));
            }
        }
    }
    pts
}

#[test]
fn base_cpi_known_answer_from_one_point() {
    // β is recovered from the other workloads' clocks, and a workload known at 2000 MHz
    // alone gets its exact curve from its own cycles and instructions, on 1 and 2 threads.
    let all = cpu_world(&[1.0, 2.0]);
    let pts: Vec<Point> = all
        .iter()
        .filter(|p| p.workload != "crc32" || p.knobs["core_freq_mhz"] == 2000.0)
        .cloned()
        .collect();
    let m = fit(&meta_cpu(), &pts, &AnalyticCountersParams::base_cpi()).unwrap();
    assert!((m.base_cpi.unwrap() - 1.2).abs() < 1e-6, "{:?}", m.base_cpi);
    assert_eq!(m.instructions_counter.as_deref(), Some("inst_retired"));
    assert_eq!(m.cycles_counter.as_deref(), Some("cpu_cycles"));
    // Off-core time on every thread at once (`ti`): the per-thread reading is exact.
    assert_eq!(m.thread_idle, ThreadIdle::OffCore);
    for p in all.iter().filter(|p| p.workload == "crc32") {
        let got = m.predict("crc32", &p.knobs).unwrap().time_s.unwrap();
        let want = p.time_s.unwrap();
        assert!(
            (got - want).abs() < 1e-6 * want,
            "{:?}: {got} vs {want}",
            p.knobs
        );
    }
    assert!(m.explain().contains("β (base CPI"), "{}", m.explain());
    // The model file round-trips; older files (no base-CPI fields) still read.
    let back: AnalyticCountersModel =
        serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(back, m);
}

/// The workloads of [`CPU_WORKLOADS`] as pipelines whose threads take turns (one stage
/// hands each buffer to the next): on any thread count one thread runs at a time, so the
/// time is the one-thread time, `t(f) = ti + n·1.2/f + ts`, and the cycles are
/// `C = n·1.2 + ts·f`; the idle thread waits for the busy one.
fn turn_world() -> Vec<Point> {
    let mut pts = Vec::new();
    for &(w, n, ts, ti) in &CPU_WORKLOADS {
        for th in [1.0, 2.0] {
            for f in [1000.0, 1500.0, 2000.0] {
                let mut p = cpu_pt(w, f, 1.0, n, ts, ti);
                p.knobs.insert("threads".into(), th);
                pts.push(p);
            }
        }
    }
    pts
}

#[test]
fn base_cpi_reads_idle_threads_as_waiting_where_that_fits_the_training_points() {
    // Per thread, a 2-thread run is half idle; read as off-core time (not scaling) that
    // would halve the clock-scaled share. The training points choose the other reading:
    // β, and a held-out workload's curve from its one point, exact on 1 and 2 threads.
    let all = turn_world();
    let pts: Vec<Point> = all
        .iter()
        .filter(|p| p.workload != "rijndael" || p.knobs["core_freq_mhz"] == 2000.0)
        .cloned()
        .collect();
    let m = fit(&meta_cpu(), &pts, &AnalyticCountersParams::base_cpi()).unwrap();
    assert_eq!(m.thread_idle, ThreadIdle::Waits);
    assert!((m.base_cpi.unwrap() - 1.2).abs() < 1e-6, "{:?}", m.base_cpi);
    for p in all.iter().filter(|p| p.workload == "rijndael") {
        let got = m.predict("rijndael", &p.knobs).unwrap().time_s.unwrap();
        let want = p.time_s.unwrap();
        assert!(
            (got - want).abs() < 1e-6 * want,
            "{:?}: {got} vs {want}",
            p.knobs
        );
    }
    assert!(m.explain().contains("waits"), "{}", m.explain());
    let text = serde_json::to_string(&m).unwrap();
    assert!(text.contains("\"thread_idle\":\"waits\""), "{text}");
    let back: AnalyticCountersModel = serde_json::from_str(&text).unwrap();
    assert_eq!(back, m);
    // One thread only: the two readings are the same, and the field stays out of the file.
    let one: Vec<Point> = pts
        .iter()
        .filter(|p| p.knobs["threads"] == 1.0)
        .cloned()
        .collect();
    let m1 = fit(&meta_cpu(), &one, &AnalyticCountersParams::base_cpi()).unwrap();
    assert_eq!(m1.thread_idle, ThreadIdle::OffCore);
    assert!(!serde_json::to_string(&m1).unwrap().contains("thread_idle"));
}

#[test]
fn base_cpi_without_instructions_names_the_fix_and_bad_counts_do_not_panic() {
    let mut meta = meta_cpu();
    meta.counters.remove("inst_retired");
    let e = fit(
        &meta,
        &cpu_world(&[1.0]),
        &AnalyticCountersParams::base_cpi(),
    )
    .unwrap_err();
    let msg = e.to_string();
    assert!(
        msg.contains("retired-instructions") && msg.contains("instructions_counter"),
        "{msg}"
    );
    // Zero, negative and NaN counts and times: no prediction or a finite one, no panic.
    let mut pts = cpu_world(&[1.0]);
    for (i, p) in pts.iter_mut().enumerate() {
        match i % 4 {
            0 => {
                p.counters.insert("inst_retired".into(), 0.0);
            }
            1 => {
                p.counters.insert("cpu_cycles".into(), f64::NAN);
            }
            2 => p.time_s = Some(-1.0),
            _ => {}
        }
    }
    let m = fit(&meta_cpu(), &pts, &AnalyticCountersParams::base_cpi()).unwrap();
    for p in &pts {
        if let Ok(pr) = m.predict(&p.workload, &p.knobs) {
            if let Some(t) = pr.time_s {
                assert!(t.is_finite() && t > 0.0, "{t}");
            }
        }
    }
}

#[test]
fn auto_stack_takes_base_cpi_on_a_cpu_clock_sweep_and_scores_its_fallback() {
    // A clock sweep with cycles and instructions: `auto` in workload holdout is the stack
    // with the base-CPI form, chosen and exact on data it describes exactly. With two
    // thread counts the stack scores what it takes where the form has no prediction.
    use crate::models::{eval, FitParams, ModelKind};
    let base: Knobs = [
        ("core_freq_mhz".to_string(), 2000.0),
        ("threads".to_string(), 1.0),
    ]
    .into_iter()
    .collect();
    let pts = cpu_world(&[1.0]);
    let e = eval::workload_holdout(
        ModelKind::Auto,
        &meta_cpu(),
        &pts,
        &base,
        &FitParams::default(),
    );
    assert_stack_exact(&e, &pts, 10, "time_s: analytic_counters ×5", &["time_s"]);
    assert!(crate::models::stack::auto_applies(&meta_cpu(), &pts));
    // Two thread counts: the form predicts along the clock at the baseline's thread count
    // (exact there); at the other thread count the stack takes the neighbours or the
    // common response, chosen on the training workloads' points there (every workload's
    // time halves from 1 to 2 threads but for its stall and off-core time, so neither is
    // exact), and every point is predicted.
    let two = cpu_world(&[1.0, 2.0]);
    assert!(crate::models::stack::auto_applies(&meta_cpu(), &two));
    let e = eval::workload_holdout(
        ModelKind::Auto,
        &meta_cpu(),
        &two,
        &base,
        &FitParams::default(),
    );
    assert_eq!(e.kind, ModelKind::Stack);
    assert!(e.failures.is_empty(), "{:?}", e.failures);
    assert_eq!(e.results.len(), 25);
    assert!(
        e.summary
            .protocol
            .contains("(where the physical form has no prediction:"),
        "{}",
        e.summary.protocol
    );
    let same_threads: Vec<_> = e
        .results
        .iter()
        .filter(|r| r.knobs["threads"] == 1.0)
        .cloned()
        .collect();
    assert_eq!(same_threads.len(), 10);
    assert_results_exact(&same_threads, &two, &["time_s"], 1e-6);
    let m = crate::models::stack::fit(&meta_cpu(), &two, &FitParams::default()).unwrap();
    assert!(
        ["neighbors", "common_response"].contains(&m.fallback["time_s"].as_str()),
        "{m:?}"
    );
    assert!(m
        .explain()
        .contains("time_s where the physical form has no prediction"));
    // Issue 41's rule: at a thread count the form does not model, the fallback's member
    // predicts, whatever the choice where the form predicts (even `scaling`, the
    // reference, or the blend): a workload known at its baseline point alone, predicted
    // at 2 threads.
    let q = two.iter().find(|p| p.knobs["threads"] == 2.0).unwrap();
    let known: Vec<Point> = two
        .iter()
        .filter(|p| {
            p.workload != q.workload || crate::models::features::same_knobs(&p.knobs, &base)
        })
        .cloned()
        .collect();
    let mut at_base = FitParams::default();
    at_base.scaling.baseline = Some(base.clone());
    let m = crate::models::stack::fit(&meta_cpu(), &known, &at_base).unwrap();
    let phys = m.physical.as_ref().unwrap().predict(&q.workload, &q.knobs);
    assert!(
        phys.map_or(true, |p| p.time_s.is_none()),
        "the form models it"
    );
    let member = match m.fallback["time_s"].as_str() {
        "neighbors" => m.neighbors.as_ref(),
        _ => m.common.as_ref(),
    }
    .unwrap();
    let want = member.predict(&q.workload, &q.knobs).unwrap().time_s;
    assert!(want.is_some());
    for c in ["scaling", "blend", "analytic_counters", "neighbors"] {
        let mut forced = m.clone();
        forced.choice.insert("time_s".into(), c.into());
        let got = forced.predict(&q.workload, &q.knobs).unwrap().time_s;
        assert_eq!(got, want, "{c}");
    }
    let back: crate::models::stack::StackModel =
        serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(back, m);
}

/// A GPU sweep with warp instructions executed (`inst_executed`) and no cycles counter:
/// a kernel issues `n` warp instructions at 0.02 cycles each chip-wide (peak 50 per
/// cycle) and waits `tm` s on memory: t(f) = tm + 0.02·n/f.
fn gpu_inst_world() -> (SetMeta, Vec<Point>) {
    let mut meta = SetMeta::default();
    meta.knobs = vec!["core_freq_mhz".into(), "mem_freq_mhz".into()];
    meta.counters
        .insert("inst_executed".into(), CounterKind::Count);
    meta.counters
        .insert("achieved_occupancy".into(), CounterKind::Rate);
    let kernels = [
        ("sgemm", 6e8, 0.002),
        ("stream", 1e8, 0.05),
        ("spmv", 3e8, 0.01),
        ("stencil", 4e8, 0.004),
        ("nbody", 8e8, 0.0),
        ("bfs", 2e8, 0.02),
    ];
    let mut pts = Vec::new();
    for (i, &(w, n, tm)) in kernels.iter().enumerate() {
        for f in [600.0, 800.0, 1000.0, 1200.0] {
            pts.push(Point {
                workload: w.into(),
                knobs: [
                    ("core_freq_mhz".to_string(), f),
                    ("mem_freq_mhz".to_string(), 715.0),
                ]
                .into_iter()
                .collect(),
                time_s: Some(tm + 0.02 * n / (f * 1e6)),
                power_w: Some(40.0 + 60.0 * (f / 1200.0)),
                counters: [
                    ("inst_executed".to_string(), n),
                    ("achieved_occupancy".to_string(), 0.3 + 0.1 * i as f64),
                ]
                .into_iter()
                .collect(),
                ..Point::default()
            });
        }
    }
    (meta, pts)
}

#[test]
fn gpu_warp_instructions_without_cycles_take_the_base_cpi_stack() {
    // `inst_executed` alone (nvprof's warp instructions, no cycles counter): the base-CPI
    // form applies with φ = β·N/(f0·t0), β = 0.02 is recovered from the other kernels,
    // and `auto` in workload holdout is the stack, exact on every held-out point.
    use crate::models::{eval, FitParams, ModelKind};
    let (meta, pts) = gpu_inst_world();
    assert_eq!(
        instructions_counter(&meta).as_deref(),
        Some("inst_executed")
    );
    assert!(crate::models::stack::auto_applies(&meta, &pts));
    let train: Vec<Point> = pts
        .iter()
        .filter(|p| p.workload != "spmv" || p.knobs["core_freq_mhz"] == 1200.0)
        .cloned()
        .collect();
    let m = fit(&meta, &train, &AnalyticCountersParams::base_cpi()).unwrap();
    assert!(
        (m.base_cpi.unwrap() - 0.02).abs() < 1e-8,
        "{:?}",
        m.base_cpi
    );
    assert_eq!(m.cycles_counter, None);
    let base: Knobs = [
        ("core_freq_mhz".to_string(), 1200.0),
        ("mem_freq_mhz".to_string(), 715.0),
    ]
    .into_iter()
    .collect();
    let e = eval::workload_holdout(ModelKind::Auto, &meta, &pts, &base, &FitParams::default());
    assert_stack_exact(&e, &pts, 18, "time_s: analytic_counters ×6", &["time_s"]);
}

/// A core × memory clock grid with nvprof's counts: the six kernels of
/// [`crate::models::synthetic`] (t = max(0.02·n/f, 0.125·d/m) + lat).
fn gpu_two_clock_world() -> (SetMeta, Vec<Point>) {
    use crate::models::synthetic::{gpu_kernel_point, nvprof_meta, KERNELS};
    let mut pts = Vec::new();
    for (w, n, d, lat) in KERNELS {
        for m in [500.0, 700.0, 900.0] {
            for f in [600.0, 800.0, 1000.0, 1200.0] {
                let p = 40.0 + 60.0 * (f / 1200.0) + 20.0 * (m / 900.0);
                pts.push(gpu_kernel_point(w, (n, d, lat), f, m, p));
            }
        }
    }
    (nvprof_meta(), pts)
}

#[test]
fn two_clock_known_answer_recovers_beta_and_gamma_and_predicts_every_memory_clock() {
    // β = 0.02 and γ = 0.125 come back from the other kernels' grids, and a kernel known
    // at its baseline point alone is predicted exactly over the whole core × memory grid:
    // `auto` in workload holdout is the stack with the two-clock form on every point.
    use crate::models::{eval, FitParams, ModelKind};
    let (meta, pts) = gpu_two_clock_world();
    assert_eq!(
        dram_counters(&meta),
        vec!["dram_read_transactions", "dram_write_transactions"]
    );
    let base: Knobs = [
        ("core_freq_mhz".to_string(), 1200.0),
        ("mem_freq_mhz".to_string(), 900.0),
    ]
    .into_iter()
    .collect();
    let train: Vec<Point> = pts
        .iter()
        .filter(|p| p.workload != "spmv" || p.knobs == base)
        .cloned()
        .collect();
    let m = fit(&meta, &train, &AnalyticCountersParams::base_cpi()).unwrap();
    assert_eq!(m.mem_knob.as_deref(), Some("mem_freq_mhz"));
    assert!(
        (m.base_cpi.unwrap() - 0.02).abs() < 1e-6,
        "{:?}",
        m.base_cpi
    );
    let gamma = m.mem_cycles_per_transaction.unwrap();
    assert!((gamma - 0.125).abs() < 1e-5, "{gamma}");
    for p in pts.iter().filter(|p| p.workload == "spmv") {
        let t = m.predict("spmv", &p.knobs).unwrap().time_s.unwrap();
        let want = p.time_s.unwrap();
        assert!(
            ((t - want) / want).abs() < 1e-5,
            "{:?}: {t} vs {want}",
            p.knobs
        );
    }
    assert!(
        m.explain().contains("γ (memory-clock cycles"),
        "{}",
        m.explain()
    );
    let back: AnalyticCountersModel =
        serde_json::from_str(&serde_json::to_string(&m).unwrap()).unwrap();
    assert_eq!(back, m);
    let e = eval::workload_holdout(ModelKind::Auto, &meta, &pts, &base, &FitParams::default());
    assert_stack_exact(&e, &pts, 66, "time_s: analytic_counters ×6", &["time_s"]);
}

#[test]
fn two_clock_form_without_a_second_memory_clock_refuses_other_memory_clocks() {
    // Trained at one memory clock, γ cannot be fitted: the model says so and gives no
    // time at another memory clock (never a silent μ = 0), while the trained clock keeps
    // its predictions. A setting without the memory knob names it.
    let (meta, pts) = gpu_two_clock_world();
    let train: Vec<Point> = pts
        .iter()
        .filter(|p| p.knobs["mem_freq_mhz"] == 900.0)
        .cloned()
        .collect();
    let m = fit(&meta, &train, &AnalyticCountersParams::base_cpi()).unwrap();
    assert_eq!(m.mem_cycles_per_transaction, None);
    assert!(m.explain().contains("not fitted"), "{}", m.explain());
    let at = |f: f64, mem: f64| {
        let k: Knobs = [
            ("core_freq_mhz".to_string(), f),
            ("mem_freq_mhz".to_string(), mem),
        ]
        .into_iter()
        .collect();
        m.predict("bfs", &k).unwrap().time_s
    };
    assert_eq!(at(800.0, 500.0), None);
    assert!(at(800.0, 900.0).is_some());
    // A DRAM counter named in the params must be a count of the set.
    let named = AnalyticCountersParams {
        dram_counters: vec!["dram_bytes".into()],
        ..AnalyticCountersParams::base_cpi()
    };
    let e = fit(&meta, &train, &named).unwrap_err().to_string();
    assert!(e.contains("DRAM counter `dram_bytes`"), "{e}");
    let only_core: Knobs = [("core_freq_mhz".to_string(), 800.0)].into_iter().collect();
    assert!(matches!(
        m.predict("bfs", &only_core),
        Err(ModelError::MissingKnob { .. })
    ));
}

#[test]
fn roofline_power_transfer_known_answer_in_workload_holdout() {
    // roofline_world(): the median ratio misses the power the roofline transfer gets.
    use crate::models::{eval, FitParams, ModelKind};
    let pts = roofline_world();
    let run = |pt: PowerTransfer| {
        let params = FitParams {
            analytic_counters: AnalyticCountersParams {
                power_transfer: pt,
                ..AnalyticCountersParams::roofline()
            },
            ..FitParams::default()
        };
        eval::workload_holdout(
            ModelKind::AnalyticCounters,
            &meta_gpu(),
            &pts,
            &k(1000.0),
            &params,
        )
    };
    let (roof, median) = (
        run(PowerTransfer::Roofline),
        run(PowerTransfer::MedianRatio),
    );
    assert_eq!(roof.results.len(), 16);
    assert_results_exact(&roof.results, &pts, &["power_w"], 1e-6);
    let mut worst_median = 0.0f64;
    for m in &median.results {
        let want = m.measured.power_w.unwrap();
        worst_median = worst_median.max((m.predicted.power_w.unwrap() / want - 1.0).abs());
    }
    assert!(worst_median > 0.01, "{worst_median}");
    // dgemm with only its reference point: exact between the fitted clocks, no power
    // beyond them rather than an extrapolation, none without the memory fraction.
    let part: Vec<Point> = pts
        .iter()
        .filter(|p| p.workload != "dgemm" || p.knobs["core_freq_mhz"] == 1000.0)
        .cloned()
        .collect();
    let m = fit(
        &meta_gpu(),
        &part,
        &AnalyticCountersParams {
            power_transfer: PowerTransfer::Roofline,
            ..AnalyticCountersParams::roofline()
        },
    )
    .unwrap();
    assert_eq!(m.power_transfer.len(), 1);
    let want = pts
        .iter()
        .find(|p| p.workload == "dgemm" && p.knobs["core_freq_mhz"] == 700.0)
        .unwrap()
        .power_w
        .unwrap();
    let got = m.predict("dgemm", &k(700.0)).unwrap().power_w.unwrap();
    assert!((got - want).abs() < 1e-6 * want, "{got} vs {want}");
    assert!(m.predict("dgemm", &k(625.0)).unwrap().power_w.is_some());
    assert_eq!(m.predict("dgemm", &k(300.0)).unwrap().power_w, None);
    let mut broken = m.clone();
    for g in broken.groups.iter_mut() {
        g.memory_fraction = None;
    }
    assert_eq!(broken.predict("dgemm", &k(700.0)).unwrap().power_w, None);
}

#[test]
fn model_files_without_the_new_fields_read_as_the_sum_form() {
    let (w, th, tc, tm, tr) = GPU_WORKLOADS[1];
    let m = fit(
        &meta_gpu(),
        &[gpu_pt(w, 1000.0, th, tc, tm, tr)],
        &AnalyticCountersParams::default(),
    )
    .unwrap();
    let mut v = serde_json::to_value(&m).unwrap();
    let o = v.as_object_mut().unwrap();
    assert!(o.remove("combine").is_some());
    assert!(!o.contains_key("compute_counters") && !o.contains_key("active_counter"));
    let back: AnalyticCountersModel = serde_json::from_value(v).unwrap();
    assert_eq!(back, m);
    assert_eq!(back.combine, Combine::Sum);
    let p: AnalyticCountersParams =
        serde_json::from_str(r#"{"combine":"max","compute_counters":["fp64_active"]}"#).unwrap();
    assert_eq!(p.combine, Combine::Max);
    assert!(p.calibrate);
}

#[test]
fn held_out_counters_never_reach_the_prediction() {
    // Workload holdout from 1000 MHz: poisoning b's other points (targets and counters)
    // changes nothing.
    use crate::models::{eval, FitParams, ModelKind};
    let mut clean = Vec::new();
    for (w, tm, tc) in [("a", 2.0, 3.0), ("b", 0.5, 4.0), ("c", 3.0, 0.5)] {
        for f in [500.0, 700.0, 1000.0] {
            clean.push(pt(w, f, tm, tc));
        }
    }
    let mut poisoned = clean.clone();
    for p in poisoned
        .iter_mut()
        .filter(|p| p.workload == "b" && p.knobs["core_freq_mhz"] != 1000.0)
    {
        p.time_s = Some(1e9);
        p.power_w = Some(1e9);
        p.counters.insert("dram_active".into(), 0.99);
    }
    let base = k(1000.0);
    let run = |pts: &[Point]| {
        eval::workload_holdout(
            ModelKind::AnalyticCounters,
            &meta(),
            pts,
            &base,
            &FitParams::default(),
        )
    };
    let (a, b) = (run(&clean), run(&poisoned));
    let pick = |e: &crate::models::eval::Evaluation| e.predictions_of("b");
    assert_eq!(pick(&a).len(), 2);
    assert_eq!(pick(&a), pick(&b));
    // Exact counters: b's time is right from its baseline point alone.
    for r in a.results.iter().filter(|r| r.workload == "b") {
        let f = r.knobs["core_freq_mhz"];
        let want = 0.5 + 4.0 * 1000.0 / f;
        assert!((r.predicted.time_s.unwrap() - want).abs() < 1e-9);
    }
}
