use super::*;
use crate::dvfs::risk_budget::{
    as_share_of_predicted_oracle, compute_bound, risk_budget_choice, violation_probability,
};
use powerperf_format::set::SetMeta;

/// Two workloads measured exactly on the Moore (2012) model: the analytic model fitted on
/// three clocks predicts the others well, so the plan should reach the oracle.
#[test]
fn plan_reaches_the_oracle_on_model_exact_data() {
    let mut points = Vec::new();
    for (w, tm, tc) in [("mem", 0.9, 0.1), ("cpu", 0.0, 1.0)] {
        for f in [1000.0, 1200.0, 1400.0, 1600.0, 1800.0, 2000.0] {
            let t = tm + tc * 2000.0 / f;
            let p = 10.0 + 40.0 * (f / 2000.0f64).powi(3);
            points.push(Point {
                workload: w.into(),
                knobs: [("core_freq_mhz".to_string(), f)].into_iter().collect(),
                time_s: Some(t),
                power_w: Some(p),
                energy_j: Some(p * t),
                ..Default::default()
            });
        }
    }
    let set = TrainingSet {
        meta: SetMeta {
            source: "test".into(),
            knobs: vec!["core_freq_mhz".into()],
            targets: vec!["time_s".into(), "power_w".into(), "energy_j".into()],
            ..Default::default()
        },
        points,
    };
    let req = EvalRequest {
        config: PlannerConfig {
            max_slowdown: Some(0.05),
            ..Default::default()
        },
        train_knob: "core_freq_mhz".into(),
        train_values: vec![1000.0, 1600.0, 2000.0],
        split: None,
        kind: ModelKind::Analytic,
        params: FitParams::default(),
        idle_power_w: None,
        guard: GuardSpec::Margin(0.0),
        cv_folds: None,
        judge_on: vec![],
    };
    let r = evaluate(&set, &req).unwrap();
    assert_eq!(r.workloads, 2);
    assert_eq!(r.bound_violations, 0);
    let mem = r.per_workload.iter().find(|x| x.workload == "mem").unwrap();
    // mem at 1400: t = 0.9 + 0.1429 = 1.0429 (4.3 % slower), P = 23.72 W, E = 24.74 J:
    // the lowest energy within 5 % (1200 MHz is 6.7 % slower); held out in training
    assert_eq!(mem.oracle["core_freq_mhz"], 1400.0);
    assert_eq!(mem.chosen["core_freq_mhz"], 1400.0, "{mem:?}");
    assert!((mem.fraction_of_oracle.unwrap() - 1.0).abs() < 1e-9);
    let cpu = r.per_workload.iter().find(|x| x.workload == "cpu").unwrap();
    assert!(cpu.small_oracle_gain && !cpu.violation);
    assert!(render(&r).contains("mean fraction of the oracle's gain 100.0%"));
}

/// `cpu` (t = 2000/f) keeps t·f constant at its two lowest clocks: compute-bound; `mem`
/// (t = 0.9 + 0.1·2000/f) does not; a group with one training time is unknown.
#[test]
fn compute_bound_reads_the_two_lowest_training_clocks() {
    let pt = |w: &str, f: f64, mem: f64, t: f64| Point {
        workload: w.into(),
        knobs: [
            ("core_freq_mhz".to_string(), f),
            ("mem_freq_mhz".to_string(), mem),
        ]
        .into_iter()
        .collect(),
        time_s: Some(t),
        ..Default::default()
    };
    let mut train = Vec::new();
    for f in [1000.0, 1500.0, 2000.0] {
        train.push(pt("cpu", f, 1.0, 2000.0 / f));
        train.push(pt("mem", f, 1.0, 0.9 + 0.1 * 2000.0 / f));
    }
    train.push(pt("cpu", 1000.0, 2.0, 2.0));
    let at = |f: f64, mem: f64| -> Knobs {
        [
            ("core_freq_mhz".to_string(), f),
            ("mem_freq_mhz".to_string(), mem),
        ]
        .into_iter()
        .collect()
    };
    let cb = |w: &str, k: &Knobs| compute_bound(&train, w, k, "core_freq_mhz", 0.01);
    assert_eq!(cb("cpu", &at(1250.0, 1.0)), Some(true));
    assert_eq!(cb("mem", &at(1250.0, 1.0)), Some(false));
    assert_eq!(cb("cpu", &at(1250.0, 2.0)), None);
}

/// Budget 0.05 × 2 workloads = 0.1: the 0.5-risk option of `a` does not fit, the
/// 0.05-risk option of `b` does, whatever their gains.
#[test]
fn risk_budget_spends_the_budget_where_it_fits() {
    let opts = vec![vec![(0.0, 0.0), (0.3, 0.5)], vec![(0.0, 0.0), (0.2, 0.05)]];
    let (idx, expected) = risk_budget_choice(&opts, 0.05);
    assert_eq!(idx, vec![0, 1]);
    assert!((expected - 0.05).abs() < 1e-12);
    // a budget of 0.5 of 2 workloads (1.0) takes both risky options
    let (idx, expected) = risk_budget_choice(&opts, 0.5);
    assert_eq!(idx, vec![1, 1]);
    assert!((expected - 0.55).abs() < 1e-12);
}

/// Two workloads, budget for one risky option (risk 0.25 × 2 = 0.5). On raw gains the
/// risky option of `b` buys more (0.30 − 0.27 = 0.03 against 0.02 − 0.01 = 0.01); as
/// shares of each workload's predicted oracle it buys 0.1 of `b`'s oracle against 0.5 of
/// `a`'s, so the risk goes to `a`, as the mean-fraction target wants.
#[test]
fn shares_of_the_predicted_oracle_weigh_every_workload_the_same() {
    let raw = vec![
        vec![(0.0, 0.0), (0.01, 0.0), (0.02, 0.5)],
        vec![(0.0, 0.0), (0.27, 0.0), (0.30, 0.5)],
    ];
    assert_eq!(risk_budget_choice(&raw, 0.25).0, vec![1, 2]);
    let mut shares = raw.clone();
    as_share_of_predicted_oracle(&mut shares);
    assert!((shares[0][1].0 - 0.5).abs() < 1e-12 && (shares[1][1].0 - 0.9).abs() < 1e-12);
    assert_eq!(risk_budget_choice(&shares, 0.25).0, vec![2, 1]);
    // below the small-oracle floor gains are divided by the floor, not by themselves
    let mut tiny = vec![vec![(0.0, 0.0), (0.001, 0.0)]];
    as_share_of_predicted_oracle(&mut tiny);
    assert!((tiny[0][1].0 - 0.2).abs() < 1e-12);
}

#[test]
fn violation_probability_counts_errors_above_the_slack() {
    let errs = [-0.01, 0.0, 0.002, 0.004, 0.01];
    // slack 0.05 - 0.047 = 0.003: 0.004 and 0.01 exceed it
    assert!((violation_probability(&errs, 0.047, 0.05) - 0.4).abs() < 1e-12);
    assert_eq!(violation_probability(&errs, 0.0, 0.05), 0.0);
    assert_eq!(quantile(&errs, 0.95), 0.01);
    assert_eq!(quantile(&errs, 0.5), 0.002);
}
