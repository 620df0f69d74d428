use super::*;

mod base_cpi;

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
    results: &[crate::models::scoring::PointResult],
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
            let want = crate::models::scoring::measured(p).target(t).unwrap();
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
