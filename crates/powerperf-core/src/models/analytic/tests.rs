use super::*;

fn pt(w: &str, f: f64, mem: f64, t: f64, p: f64) -> Point {
    Point {
        workload: w.into(),
        knobs: [
            ("core_freq_mhz".to_string(), f),
            ("mem_freq_mhz".to_string(), mem),
        ]
        .into_iter()
        .collect(),
        time_s: Some(t),
        power_w: Some(p),
        energy_j: Some(t * p),
        ..Point::default()
    }
}

fn knobs(f: f64, mem: f64) -> Knobs {
    [
        ("core_freq_mhz".to_string(), f),
        ("mem_freq_mhz".to_string(), mem),
    ]
    .into_iter()
    .collect()
}

#[test]
fn moore_model_exact_from_two_clocks() {
    // t = 2 + 3·1000/f, P = 50 + 100·(f/1000)^3 (default k with two clocks).
    let t = |f: f64| 2.0 + 3.0 * 1000.0 / f;
    let p = |f: f64| 50.0 + 100.0 * (f / 1000.0).powi(3);
    let pts = vec![
        pt("a", 500.0, 1.0, t(500.0), p(500.0)),
        pt("a", 1000.0, 1.0, t(1000.0), p(1000.0)),
    ];
    let m = fit(&SetMeta::default(), &pts, &AnalyticParams::default()).unwrap();
    assert_eq!(m.groups[0].time.as_ref().unwrap().overlap_p, 1.0);
    assert_eq!(m.power_exponent, 3.0);
    for f in [400.0, 750.0, 1200.0] {
        let pr = m.predict("a", &knobs(f, 1.0)).unwrap();
        assert!((pr.time_s.unwrap() - t(f)).abs() < 1e-9, "{f}");
        assert!((pr.power_w.unwrap() - p(f)).abs() < 1e-9);
        assert!((pr.energy_j.unwrap() - t(f) * p(f)).abs() < 1e-6);
    }
}

#[test]
fn recovers_roofline_and_power_exponent() {
    // Two workloads × two memory clocks; one roofline-shaped (p large), one additive;
    // power with k = 4 shared. Five clocks, so k and p are identifiable.
    let clocks = [600.0, 700.0, 800.0, 900.0, 1000.0];
    let mut pts = Vec::new();
    for (w, mem, tc, tm, p) in [
        ("roof", 1.0, 3.0, 2.5, 32.0),
        ("roof", 2.0, 3.0, 4.0, 32.0),
        ("add", 1.0, 1.0, 1.0, 1.0),
        ("add", 2.0, 1.5, 0.5, 1.0),
    ] {
        let c = TimeCurve {
            t_comp_s: tc,
            t_mem_s: tm,
            overlap_p: p,
            train_rel_rms: 0.0,
        };
        for f in clocks {
            let pw = 40.0 + tc * 10.0 + 60.0 * (f / 1000.0f64).powi(4);
            pts.push(pt(w, f, mem, c.at(1000.0, f), pw));
        }
    }
    let params = AnalyticParams {
        calibrate_clock: false,
        power_shape: PowerShape::PowerLaw,
        ..AnalyticParams::default()
    };
    let m = fit(&SetMeta::default(), &pts, &params).unwrap();
    assert!(m.voltage_knee_mhz.is_none());
    assert!(
        (m.power_exponent - 4.0).abs() < 1e-3,
        "{}",
        m.power_exponent
    );
    let roof = m.groups.iter().find(|g| g.workload == "roof").unwrap();
    assert_eq!(roof.time.as_ref().unwrap().overlap_p, 32.0);
    let add = m.groups.iter().find(|g| g.workload == "add").unwrap();
    assert_eq!(add.time.as_ref().unwrap().overlap_p, 1.0);
    for (w, mem, tc, tm, p) in [("roof", 2.0, 3.0, 4.0, 32.0), ("add", 2.0, 1.5, 0.5, 1.0)] {
        let c = TimeCurve {
            t_comp_s: tc,
            t_mem_s: tm,
            overlap_p: p,
            train_rel_rms: 0.0,
        };
        for f in [650.0, 950.0] {
            let pr = m.predict(w, &knobs(f, mem)).unwrap();
            let want = c.at(1000.0, f);
            assert!((pr.time_s.unwrap() / want - 1.0).abs() < 1e-6, "{w} {f}");
        }
    }
}

#[test]
fn two_clocks_per_workload_share_static_power_and_fit_k() {
    // P = 1.5 + c_w·(f/2000)^2.5 with one static power for all workloads.
    let mut pts = Vec::new();
    for (i, c) in [2.0, 3.0, 4.5, 1.0].iter().enumerate() {
        for f in [1000.0, 2000.0] {
            let p = 1.5 + c * (f / 2000.0f64).powf(2.5);
            pts.push(pt(&format!("w{i}"), f, 1.0, 1000.0 / f, p));
        }
    }
    let params = AnalyticParams {
        shared_static_power: true,
        ..AnalyticParams::default()
    };
    let m = fit(&SetMeta::default(), &pts, &params).unwrap();
    assert!(
        (m.power_exponent - 2.5).abs() < 1e-6,
        "{}",
        m.power_exponent
    );
    assert!(m.static_power.starts_with("shared"), "{}", m.static_power);
    let pr = m.predict("w2", &knobs(1500.0, 1.0)).unwrap();
    let want = 1.5 + 4.5 * (0.75f64).powf(2.5);
    assert!((pr.power_w.unwrap() - want).abs() < 1e-6);
}

#[test]
fn voltage_table_power_is_exact() {
    let table = vec![(1000.0, 0.9), (1500.0, 1.0), (2000.0, 1.3)];
    assert!((voltage_at(&table, 1750.0) - 1.15).abs() < 1e-12);
    assert!((voltage_at(&table, 500.0) - 0.8).abs() < 1e-12);
    let p = |f: f64| 0.2 + 1e-3 * voltage_at(&table, f).powi(2) * f;
    let pts = vec![
        pt("a", 1000.0, 1.0, 1.0, p(1000.0)),
        pt("a", 2000.0, 1.0, 0.5, p(2000.0)),
    ];
    let params = AnalyticParams {
        voltage_table: Some(table.clone()),
        ..AnalyticParams::default()
    };
    let m = fit(&SetMeta::default(), &pts, &params).unwrap();
    let pr = m.predict("a", &knobs(1500.0, 1.0)).unwrap();
    assert!((pr.power_w.unwrap() - p(1500.0)).abs() < 1e-12);
}

#[test]
fn effective_clock_estimated_from_compute_bound_groups() {
    // The top clock 1200 really runs at 1150 for every workload: t = W/f_eff.
    let mut pts = Vec::new();
    for i in 0..6 {
        let w = format!("w{i}");
        let work = 1000.0 * (1.0 + i as f64);
        for f in [600.0, 900.0, 1200.0] {
            let fe = if f == 1200.0 { 1150.0 } else { f };
            pts.push(pt(&w, f, 1.0, work / fe, 100.0));
        }
    }
    let m = fit(&SetMeta::default(), &pts, &AnalyticParams::default()).unwrap();
    assert_eq!(m.effective_clocks.len(), 1);
    assert!((m.effective_clocks[0].effective_mhz - 1150.0).abs() < 1e-6);
    let pr = m.predict("w0", &knobs(1000.0, 1.0)).unwrap();
    assert!((pr.time_s.unwrap() - 1.0).abs() < 1e-9);
    let pr = m.predict("w0", &knobs(1200.0, 1.0)).unwrap();
    assert!((pr.time_s.unwrap() - 1000.0 / 1150.0).abs() < 1e-9);
}

#[test]
fn joint_calibration_separates_non_scaling_time_from_the_clock_deficit() {
    // t = t0 + W/f_eff with a non-scaling part t0 (0.2–0.4 % of the time at 600 MHz, so
    // t·f agrees within the 1 % tolerance at 600 and 900: compute-bound) and the top clock
    // 1200 running at 1150. The ratio estimate reads t0's growth of t·f as a deficit (≈ 1148
    // MHz); the joint fit recovers 1150, and untested clocks (nominal) are then exact.
    let mut pts = Vec::new();
    let truth = |i: usize, f: f64| {
        let work = 1000.0 * (1.0 + i as f64);
        let t0 = 0.004 * work / 600.0 * (0.5 + 0.1 * i as f64);
        let fe = if f == 1200.0 { 1150.0 } else { f };
        t0 + work / fe
    };
    for i in 0..6 {
        for f in [600.0, 900.0, 1200.0] {
            pts.push(pt(&format!("w{i}"), f, 1.0, truth(i, f), 100.0));
        }
    }
    let joint = fit(&SetMeta::default(), &pts, &AnalyticParams::default()).unwrap();
    assert_eq!(joint.effective_clocks.len(), 1);
    let e = joint.effective_clocks[0].effective_mhz;
    assert!((e - 1150.0).abs() < 1e-6, "{e}");
    for i in 0..6 {
        for f in [700.0, 1000.0, 1100.0] {
            let pr = joint.predict(&format!("w{i}"), &knobs(f, 1.0)).unwrap();
            let want = truth(i, f);
            assert!((pr.time_s.unwrap() / want - 1.0).abs() < 1e-9, "w{i} {f}");
        }
    }
    let ratio = fit(
        &SetMeta::default(),
        &pts,
        &AnalyticParams {
            calibration: Calibration::Ratio,
            ..AnalyticParams::default()
        },
    )
    .unwrap();
    let r = ratio.effective_clocks[0].effective_mhz;
    assert!(r < 1149.0, "the ratio estimate is biased low by t0: {r}");
}

#[test]
fn unreliable_time_is_not_fitted_and_unknown_setting_is_an_error() {
    let mut meta = SetMeta::default();
    meta.unreliable.push(powerperf_format::set::Unreliable {
        target: "time_s".into(),
        workloads: vec!["*".into()],
        reason: "copied series".into(),
    });
    let pts = vec![
        pt("a", 500.0, 1.0, 1.0, 60.0),
        pt("a", 1000.0, 1.0, 1.0, 100.0),
    ];
    let m = fit(&meta, &pts, &AnalyticParams::default()).unwrap();
    let pr = m.predict("a", &knobs(700.0, 1.0)).unwrap();
    assert_eq!(pr.time_s, None);
    assert_eq!(pr.energy_j, None);
    assert!(pr.power_w.is_some());
    let err = m.predict("a", &knobs(700.0, 2.0)).unwrap_err().to_string();
    assert!(err.contains("mem_freq_mhz=1"), "{err}");
}

#[test]
fn voltage_floor_knee_is_recovered_and_old_files_keep_the_power_law() {
    // P = P_s + c·f·max(1, f/1100)² (V flat up to 1100 MHz, then ∝ f) for three workloads
    // at five clocks: the knee and every held-out clock are recovered.
    let knee = 1100.0;
    let g = |f: f64| f * (f / knee).max(1.0).powi(2);
    let mut pts = Vec::new();
    for (w, ps, c) in [("a", 40.0, 0.05), ("b", 60.0, 0.08), ("c", 30.0, 0.02)] {
        for f in [600.0, 900.0, 1200.0, 1300.0, 1400.0] {
            pts.push(pt(w, f, 1.0, 1.0, ps + c * g(f)));
        }
    }
    let params = AnalyticParams {
        calibrate_clock: false,
        power_shape: PowerShape::VoltageFloor,
        ..AnalyticParams::default()
    };
    // The default power law keeps no knee.
    let law = fit(
        &SetMeta::default(),
        &pts,
        &AnalyticParams {
            calibrate_clock: false,
            ..AnalyticParams::default()
        },
    )
    .unwrap();
    assert!(law.voltage_knee_mhz.is_none());
    let m = fit(&SetMeta::default(), &pts, &params).unwrap();
    let kn = m.voltage_knee_mhz.expect("knee fitted");
    assert!((kn - knee).abs() < 1.0, "knee {kn}");
    let pr = m.predict("b", &knobs(1000.0, 1.0)).unwrap();
    let want = 60.0 + 0.08 * g(1000.0);
    assert!(
        (pr.power_w.unwrap() / want - 1.0).abs() < 1e-4,
        "{:?} {want}",
        pr.power_w
    );
    // A model file without `voltage_knee_mhz` (before issue 21) predicts with its `k`.
    let mut json = serde_json::to_value(&m).unwrap();
    json.as_object_mut().unwrap().remove("voltage_knee_mhz");
    json["power_exponent"] = serde_json::json!(2.0);
    let old: AnalyticModel = serde_json::from_value(json).unwrap();
    assert!(old.voltage_knee_mhz.is_none());
    let gb = old.groups.iter().find(|g| g.workload == "b").unwrap();
    let c = gb.power.as_ref().unwrap();
    let p = old
        .predict("b", &knobs(1000.0, 1.0))
        .unwrap()
        .power_w
        .unwrap();
    assert!((p - (c.p_static_w + c.c_w * (1000.0f64 / 1400.0).powi(2))).abs() < 1e-9);
}

#[test]
fn per_group_exponent_recovers_each_workloads_power_curve() {
    // Two workloads on one chip whose power rises as f^2 and as f^4.5 (different leakage
    // and uncore shares): the default (a k per group, three or more clocks) recovers both
    // exactly at clocks it was not trained on; one k shared by the chip cannot.
    let train = [600.0, 800.0, 1000.0];
    let pw = |w: &str, f: f64| match w {
        "flat" => 70.0 + 30.0 * (f / 1000.0f64).powi(2),
        _ => 40.0 + 90.0 * (f / 1000.0f64).powf(4.5),
    };
    let mut pts = Vec::new();
    for w in ["flat", "steep"] {
        for f in train {
            pts.push(pt(w, f, 1.0, 1000.0 / f, pw(w, f)));
        }
    }
    let per = fit(&SetMeta::default(), &pts, &AnalyticParams::default()).unwrap();
    assert!(
        per.power_exponent_source.starts_with("per group"),
        "{}",
        per.power_exponent_source
    );
    for (w, k) in [("flat", 2.0), ("steep", 4.5)] {
        let g = per.groups.iter().find(|g| g.workload == w).unwrap();
        let got = g.power.as_ref().unwrap().exponent.unwrap();
        assert!((got - k).abs() < 1e-4, "{w}: k {got}");
        for f in [700.0, 900.0] {
            let p = per.predict(w, &knobs(f, 1.0)).unwrap().power_w.unwrap();
            assert!((p / pw(w, f) - 1.0).abs() < 1e-6, "{w} {f}: {p}");
        }
    }
    let shared = fit(
        &SetMeta::default(),
        &pts,
        &AnalyticParams {
            power_shape: PowerShape::PowerLaw,
            ..AnalyticParams::default()
        },
    )
    .unwrap();
    assert!(shared
        .groups
        .iter()
        .all(|g| g.power.as_ref().unwrap().exponent.is_none()));
    let err = |m: &AnalyticModel| -> f64 {
        ["flat", "steep"]
            .iter()
            .map(|w| {
                let p = m.predict(w, &knobs(700.0, 1.0)).unwrap().power_w.unwrap();
                (p / pw(w, 700.0) - 1.0).abs()
            })
            .fold(0.0, f64::max)
    };
    assert!(err(&shared) > 1e-3, "shared k: {}", err(&shared));
    // A model file written before the per-group exponent (no `exponent`) predicts with the
    // model's k, as it did.
    let mut old = serde_json::to_value(&shared).unwrap();
    let json = old.to_string();
    assert!(!json.contains("\"exponent\""));
    old["params"].as_object_mut().unwrap().remove("power_shape");
    let back: AnalyticModel = serde_json::from_value(old).unwrap();
    assert_eq!(
        back.predict("flat", &knobs(700.0, 1.0)).unwrap(),
        shared.predict("flat", &knobs(700.0, 1.0)).unwrap()
    );
    // Two clocks per workload: no per-group k (nothing to fit it on), the chip's default.
    let two: Vec<Point> = pts
        .iter()
        .filter(|p| p.knobs["core_freq_mhz"] != 800.0)
        .cloned()
        .collect();
    let m2 = fit(&SetMeta::default(), &two, &AnalyticParams::default()).unwrap();
    assert!(m2
        .groups
        .iter()
        .all(|g| g.power.as_ref().unwrap().exponent.is_none()));
    assert_eq!(m2.power_exponent, 3.0);
}
