//! Synthetic known-answer tests of the joint model (issue 21, item 1).

use super::split::{separable_baseline, settings_holdout};
use super::*;
use crate::models::{FitParams, ModelKind};

const F: [f64; 3] = [1000.0, 1400.0, 1800.0];
const N: [f64; 3] = [1.0, 2.0, 4.0];

fn knobs(f: f64, n: f64) -> Knobs {
    [("core_freq_mhz".to_string(), f), ("threads".to_string(), n)]
        .into_iter()
        .collect()
}

/// Workload `i`'s memory intensity (L2 refills per instruction).
fn z(i: usize) -> f64 {
    0.002 + 0.004 * i as f64
}

/// Multiplicative truth with a counter-informed interaction:
/// `t = A·(1800/f)^a·n^(−s)·exp((c0 + c1·z)·ln(f/1800)·ln n)`,
/// `P = B·(f/1800)^2·n^0.6·exp(−0.3·z/0.01·ln(f/1800)·ln n)`.
fn point(i: usize, f: f64, n: f64) -> Point {
    let (a, s) = (0.6 + 0.07 * i as f64, 0.9 - 0.1 * i as f64);
    let (c0, c1) = (-0.05, -40.0);
    let uv = (f / 1800.0).ln() * n.ln();
    let t =
        (20.0 + 3.0 * i as f64) * (1800.0 / f).powf(a) * n.powf(-s) * ((c0 + c1 * z(i)) * uv).exp();
    let p = (1.0 + 0.1 * i as f64)
        * (f / 1800.0).powi(2)
        * n.powf(0.6)
        * (-0.3 * z(i) / 0.01 * uv).exp();
    let inst = 1e10;
    Point {
        workload: format!("w{i}"),
        knobs: knobs(f, n),
        time_s: Some(t),
        power_w: Some(p),
        energy_j: Some(t * p),
        counters: [
            ("inst_retired".to_string(), inst),
            ("l2d_cache_refill".to_string(), z(i) * inst),
        ]
        .into_iter()
        .collect(),
        ..Point::default()
    }
}

fn meta() -> SetMeta {
    let mut m = SetMeta::default();
    for c in ["inst_retired", "l2d_cache_refill"] {
        m.counters.insert(c.into(), CounterKind::Count);
    }
    m
}

fn rel(a: f64, b: f64) -> f64 {
    (a / b - 1.0).abs()
}

/// A cross: every clock at one thread, every thread count at the top clock.
fn cross_settings() -> Vec<Knobs> {
    let mut s: Vec<Knobs> = F.iter().map(|f| knobs(*f, 1.0)).collect();
    s.extend(N[1..].iter().map(|n| knobs(1800.0, *n)));
    s
}

#[test]
fn cross_design_without_interaction_is_the_separable_rule() {
    // One workload on a cross: no interaction is identified, so the model must reproduce
    // the separable rule point for point; time is separable in this truth (exact), power
    // (a static part plus per-core dynamic power) is not.
    let sep = |f: f64, n: f64| {
        let mut p = point(0, f, n);
        let t = 30.0 * (1000.0 / f + 0.2) * (0.1 + 0.9 / n);
        let pw = 0.5 + (f / 1800.0).powi(2) * n;
        p.time_s = Some(t);
        p.power_w = Some(pw);
        p.energy_j = Some(t * pw);
        p
    };
    let pts: Vec<Point> = F
        .iter()
        .flat_map(|f| N.iter().map(move |n| sep(*f, *n)))
        .collect();
    let ev = settings_holdout(
        ModelKind::Auto,
        &meta(),
        &pts,
        &cross_settings(),
        &FitParams::default(),
    );
    assert_eq!(ev.kind, ModelKind::Joint);
    assert!(ev.failures.is_empty(), "{:?}", ev.failures);
    assert_eq!(ev.results.len(), 4);
    let base = separable_baseline(&meta(), &pts, &cross_settings());
    assert_eq!(base.results.len(), 4);
    for (m, b) in ev.results.iter().zip(&base.results) {
        assert_eq!(m.knobs, b.knobs);
        for t in ["time_s", "power_w", "energy_j"] {
            let (pm, pb) = (
                m.predicted.target(t).unwrap(),
                b.predicted.target(t).unwrap(),
            );
            assert!(
                rel(pm, pb) < 1e-9,
                "{t} at {:?}: model {pm}, separable {pb}",
                m.knobs
            );
        }
        // Time is separable in this truth: exact.
        assert!(rel(m.predicted.time_s.unwrap(), m.measured.time_s.unwrap()) < 1e-9);
    }
}

#[test]
fn counter_informed_interaction_is_recovered_exactly() {
    // Six workloads measured on the full 3×3 grid teach β0 and β1; a seventh, measured on a
    // cross only, is predicted at its four other settings from its counters.
    let mut pts: Vec<Point> = Vec::new();
    for i in 0..7 {
        for f in F {
            for n in N {
                pts.push(point(i, f, n));
            }
        }
    }
    let cross = cross_settings();
    let train: Vec<Point> = pts
        .iter()
        .filter(|p| p.workload != "w6" || cross.contains(&p.knobs))
        .cloned()
        .collect();
    let test: Vec<&Point> = pts
        .iter()
        .filter(|p| p.workload == "w6" && !cross.contains(&p.knobs))
        .collect();
    assert_eq!(test.len(), 4);
    assert_eq!(ModelKind::Auto.resolve(&train, false), ModelKind::Joint);
    let m = fit(&meta(), &train, &JointParams::default()).unwrap();
    assert_eq!(m.interaction_counter.as_deref(), Some("l2d_cache_refill"));
    let time = m.targets.iter().find(|t| t.target == "time_s").unwrap();
    assert_eq!(
        time.combine,
        Combine::Multiplicative,
        "{}",
        time.combine_reason
    );
    assert_eq!(time.interactions[0].workloads, 6);
    for p in &test {
        let pred = m.predict(&p.workload, &p.knobs).unwrap();
        for t in ["time_s", "power_w", "energy_j"] {
            let e = rel(pred.target(t).unwrap(), p.target(t).unwrap());
            assert!(e < 1e-6, "{t} at {:?}: error {e}", p.knobs);
        }
    }
    // Without the counter the shared β0 cannot follow w6's own interaction: worse, and the
    // separable rule (no interaction) worse still for time.
    let no_z = JointParams {
        interaction_counter: None,
        ..JointParams::default()
    };
    let m0 = fit(&meta(), &train, &no_z).unwrap();
    let worst = |m: &JointModel| {
        test.iter()
            .map(|p| {
                rel(
                    m.predict(&p.workload, &p.knobs).unwrap().time_s.unwrap(),
                    p.time_s.unwrap(),
                )
            })
            .fold(0.0, f64::max)
    };
    let sep = test
        .iter()
        .map(|p| {
            rel(
                super::split::separable_rule(&train, p)
                    .unwrap()
                    .time_s
                    .unwrap(),
                p.time_s.unwrap(),
            )
        })
        .fold(0.0, f64::max);
    assert!(worst(&m0) > 1e-3, "{}", worst(&m0));
    assert!(sep > worst(&m0), "separable {sep}, β0 only {}", worst(&m0));
}

#[test]
fn additive_clock_domains_are_recovered_from_a_cross() {
    // Moore's split over two clock domains, t = tc·f0/f + tm·m0/m + to: additive, so one
    // core-clock sweep plus one point at the other memory clock determine it exactly,
    // where the separable rule does not.
    let mk = |w: usize, f: f64, m: f64| {
        let t = (1.0 + w as f64) * 1164.0 / f + 2.0 * 3505.0 / m + 0.3;
        let p = 40.0 + 60.0 * (f / 1164.0).powi(3) + 8.0 * m / 3505.0;
        Point {
            workload: format!("g{w}"),
            knobs: [
                ("core_freq_mhz".to_string(), f),
                ("mem_freq_mhz".to_string(), m),
            ]
            .into_iter()
            .collect(),
            time_s: Some(t),
            power_w: Some(p),
            energy_j: Some(t * p),
            ..Point::default()
        }
    };
    let fs = [595.0, 709.0, 861.0, 1000.0, 1164.0];
    let pts: Vec<Point> = (0..3)
        .flat_map(|w| {
            fs.iter()
                .flat_map(move |f| [810.0, 3505.0].map(|m| mk(w, *f, m)))
        })
        .collect();
    let mut settings: Vec<Knobs> = fs
        .iter()
        .map(|f| {
            [
                ("core_freq_mhz".to_string(), *f),
                ("mem_freq_mhz".to_string(), 3505.0),
            ]
            .into_iter()
            .collect()
        })
        .collect();
    settings.push(
        [
            ("core_freq_mhz".to_string(), 1164.0),
            ("mem_freq_mhz".to_string(), 810.0),
        ]
        .into_iter()
        .collect(),
    );
    // Opt-in since issue 41 (`combine: additive`): in a cross no inner split over programs
    // can show that it carries over, so `auto` keeps the separable rule (below).
    let mut additive = FitParams::default();
    additive.joint.combine = Combine::Additive;
    let ev = settings_holdout(
        ModelKind::Auto,
        &SetMeta::default(),
        &pts,
        &settings,
        &additive,
    );
    assert_eq!(ev.kind, ModelKind::Joint);
    assert_eq!(ev.results.len(), 3 * 4);
    let by_default = settings_holdout(
        ModelKind::Auto,
        &SetMeta::default(),
        &pts,
        &settings,
        &FitParams::default(),
    );
    let mut separable = FitParams::default();
    separable.joint.combine = Combine::Multiplicative;
    let mult = settings_holdout(
        ModelKind::Joint,
        &SetMeta::default(),
        &pts,
        &settings,
        &separable,
    );
    assert_eq!(by_default.results, mult.results);
    for r in &ev.results {
        for t in ["time_s", "power_w"] {
            let e = rel(
                r.predicted.target(t).unwrap(),
                r.measured.target(t).unwrap(),
            );
            assert!(e < 1e-9, "{t} {:?}: {e}", r.knobs);
        }
    }
    let base = separable_baseline(&SetMeta::default(), &pts, &settings);
    assert!(
        base.summary.targets["time_s"].mape_pct > 1.0,
        "{:?}",
        base.summary
    );
}

#[test]
fn unseparable_points_and_extrapolation_are_clear_errors() {
    // Two knobs that change together: no main effect can be told apart.
    let pts = vec![point(0, 1000.0, 1.0), point(0, 1800.0, 2.0)];
    let e = fit(&meta(), &pts, &JointParams::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("do not separate") && e.contains("fix:"), "{e}");
    // One knob: not a joint model.
    let pts: Vec<Point> = F.iter().map(|f| point(0, *f, 1.0)).collect();
    let e = fit(&meta(), &pts, &JointParams::default())
        .unwrap_err()
        .to_string();
    assert!(e.contains("two or more knobs"), "{e}");
    // A clock outside the training values is refused; one between them is interpolated.
    let (train, _) = super::split::split(
        &F.iter()
            .flat_map(|f| N.iter().map(move |n| point(0, *f, *n)))
            .collect::<Vec<_>>(),
        &cross_settings(),
    );
    let m = fit(&meta(), &train, &JointParams::default()).unwrap();
    assert!(m.predict("w0", &knobs(2000.0, 2.0)).is_err());
    assert!(
        m.predict("w0", &knobs(1600.0, 2.0))
            .unwrap()
            .time_s
            .unwrap()
            > 0.0
    );
    assert!(m.predict("nope", &knobs(1400.0, 2.0)).is_err());
}

#[test]
fn contention_from_the_cpi_stack_is_recovered_exactly() {
    // CPI(n, f) = a + m_n·f (cycles per instruction: a core part shared by every thread
    // count, a memory-stall part of m_n ns per instruction, growing with contention), run
    // time t = I·CPI / (n·f). From a clock sweep at one thread plus one point at 2 and at 4
    // threads, the CPI stack at the cross point gives the other clocks exactly; the separable
    // rule does not.
    let (a, inst) = (0.8, 2e10);
    let m = |n: f64| 1.5e-4 + 1.0e-4 * (n - 1.0);
    let mk = |f: f64, n: f64| {
        let cpi = a + m(n) * f;
        let t = inst * cpi / (n * f * 1e6);
        Point {
            workload: "w".into(),
            knobs: knobs(f, n),
            time_s: Some(t),
            power_w: Some(1.0 + n * (f / 1800.0).powi(2)),
            energy_j: Some(t * (1.0 + n * (f / 1800.0).powi(2))),
            counters: [
                ("inst_retired".to_string(), inst),
                ("cpu_cycles".to_string(), inst * cpi),
            ]
            .into_iter()
            .collect(),
            ..Point::default()
        }
    };
    let pts: Vec<Point> = F
        .iter()
        .flat_map(|f| N.iter().map(move |n| mk(*f, *n)))
        .collect();
    for b in F {
        let mut s: Vec<Knobs> = F.iter().map(|f| knobs(*f, 1.0)).collect();
        s.extend(N[1..].iter().map(|n| knobs(b, *n)));
        // Opt-in since issue 41 (an explicit `combine`): in a cross `auto` keeps the
        // separable rule (the last check below).
        let mut with = FitParams::default();
        with.joint.combine = Combine::Multiplicative;
        let ev = settings_holdout(ModelKind::Auto, &meta(), &pts, &s, &with);
        assert_eq!(ev.kind, ModelKind::Joint);
        assert_eq!(ev.results.len(), 4);
        for r in &ev.results {
            let e = rel(r.predicted.time_s.unwrap(), r.measured.time_s.unwrap());
            assert!(e < 1e-9, "b = {b}, {:?}: {e}", r.knobs);
        }
        let base = separable_baseline(&meta(), &pts, &s);
        assert!(
            base.summary.targets["time_s"].mape_pct > 1.0,
            "{:?}",
            base.summary
        );
        // Switched off: the separable rule again.
        let mut params = FitParams::default();
        params.joint.contention = false;
        let off = settings_holdout(ModelKind::Joint, &meta(), &pts, &s, &params);
        let d = (off.summary.targets["time_s"].mape_pct - base.summary.targets["time_s"].mape_pct)
            .abs();
        assert!(d < 1e-9, "{d}");
        // `auto` in a cross: the separable rule.
        let auto = settings_holdout(ModelKind::Auto, &meta(), &pts, &s, &FitParams::default());
        assert_eq!(auto.results, off.results);
    }
}

#[test]
fn a_model_file_round_trips_and_passes_the_number_checks() {
    // Clock-valued keys (`b_mhz`, `clock_range_mhz`, knob names ending in `_mhz`) must hold
    // clocks only: main effects are stored as {value, effect} objects, not under the knob's
    // name, so `ModelFile::read`'s checks accept what `fit` writes.
    let (a, inst) = (0.8, 2e10);
    let pts: Vec<Point> = F
        .iter()
        .flat_map(|f| N.iter().map(move |n| (*f, *n)))
        .map(|(f, n)| {
            let cpi = a + (1.5e-4 + 1e-4 * n) * f;
            let mut p = point(1, f, n);
            p.time_s = Some(inst * cpi / (n * f * 1e6));
            p.counters.insert("cpu_cycles".into(), inst * cpi);
            p.counters.insert("inst_retired".into(), inst);
            p
        })
        .collect();
    let (train, test) = super::split::split(&pts, &cross_settings());
    // The contention term is opt-in in a cross since issue 41 (an explicit combine).
    let mut params = FitParams::default();
    params.joint.combine = Combine::Multiplicative;
    let m = crate::models::fit_kind(ModelKind::Joint, &meta(), &train, &params).unwrap();
    let crate::models::Fitted::Joint(jm) = &m else {
        panic!("not joint")
    };
    assert!(!jm.workloads[0].contention.is_empty());
    let file = crate::models::ModelFile {
        format: crate::models::MODEL_FORMAT.into(),
        kind: m.kind().into(),
        set_source: "test".into(),
        set_path: "test".into(),
        knobs: vec!["core_freq_mhz".into(), "threads".into()],
        training_knobs: Default::default(),
        unreliable: Vec::new(),
        held_out_error: None,
        slowdown_errors: None,
        slowdown_errors_missing: None,
        knob_devices: Default::default(),
        model: m.clone(),
    };
    let dir = std::env::temp_dir().join(format!("pp-joint-{}", std::process::id()));
    let path = dir.join("model.json");
    file.write(&path).unwrap();
    let back = crate::models::ModelFile::read(&path).unwrap();
    std::fs::remove_dir_all(&dir).ok();
    for p in test {
        assert_eq!(
            back.model.predict(&p.workload, &p.knobs).unwrap(),
            m.predict(&p.workload, &p.knobs).unwrap()
        );
    }
}
