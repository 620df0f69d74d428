//! The joint split on the bundled XU3 PARSEC joint timeline (issue 21, item 1): train on
//! 1 core at every clock plus 2 cores at one clock, predict 2 cores at the other clocks;
//! the joint model against the separable rule on the same split. Also the Titan X's core ×
//! memory clock cross. Run with `--nocapture` for the table.

mod common;

use powerperf_core::models::eval::Evaluation;
use powerperf_core::models::features::mean_points;
use powerperf_core::models::joint::split::{
    cross_workload_holdout, separable_baseline, settings_holdout,
};
use powerperf_core::models::{FitParams, ModelKind};
use powerperf_core::store::import::{import, ImportSpec};
use powerperf_format::set::{Point, TrainingSet};
use powerperf_node::plan_file::Knobs;

fn load(name: &str) -> TrainingSet {
    let spec_path = common::datasets().join(format!("{name}.toml"));
    let spec = ImportSpec::load(&spec_path).unwrap();
    import(&spec, None).unwrap().set
}

fn k(pairs: &[(&str, f64)]) -> Knobs {
    pairs.iter().map(|(n, v)| (n.to_string(), *v)).collect()
}

fn mape(e: &Evaluation, t: &str) -> f64 {
    e.summary.targets.get(t).map_or(f64::NAN, |x| x.mape_pct)
}

fn row(label: &str, m: &Evaluation, b: &Evaluation) {
    for t in ["time_s", "power_w", "energy_j"] {
        println!(
            "{label:<58} {t:<9} points {:>4}  model {:>6.2} %  separable {:>6.2} %  ratio {:.3}",
            m.summary.targets.get(t).map_or(0, |x| x.n),
            mape(m, t),
            mape(b, t),
            mape(m, t) / mape(b, t)
        );
    }
}

fn xu3_cross(b: f64) -> Vec<Knobs> {
    let mut s: Vec<Knobs> = [1000.0, 1400.0, 1800.0]
        .iter()
        .map(|f| k(&[("core_freq_mhz", *f), ("threads", 1.0)]))
        .collect();
    s.push(k(&[("core_freq_mhz", b), ("threads", 2.0)]));
    s
}

#[test]
fn xu3_parsec_joint_split_against_the_separable_rule() {
    let set = load("xu3-parsec-joint");
    let pts: Vec<Point> = mean_points(&set);
    assert_eq!(pts.len(), 4 * 2 * 3);
    for b in [1000.0, 1400.0, 1800.0] {
        let s = xu3_cross(b);
        let m = settings_holdout(ModelKind::Auto, &set.meta, &pts, &s, &FitParams::default());
        let base = separable_baseline(&set.meta, &pts, &s);
        // auto takes the joint model, and every held-out point is predicted (4 programs ×
        // 2 other clocks at 2 cores).
        assert_eq!(m.kind, ModelKind::Joint);
        assert!(m.failures.is_empty(), "{:?}", m.failures);
        assert_eq!(m.results.len(), 8);
        assert_eq!(base.results.len(), 8);
        row(&format!("xu3 cross, 2 cores trained at {b} MHz"), &m, &base);
        // No workload has two thread counts at two clocks in training, so no shared
        // interaction is identified and no inner split over programs can show that the CPI
        // stack's contention term helps: since issue 41 power and time are the separable
        // rule's, equal up to rounding (the joint model computes it in logs), and energy is
        // their product, which is not the rule applied to energy itself: measured 2.329
        // against 2.330 % at b = 1000 (the shared split, docs/models.md), 2.002 against
        // 2.001 % at b = 1800 (ratio 1.0006). The bound guards that, not a target.
        for t in ["power_w", "time_s"] {
            assert!(
                (mape(&m, t) - mape(&base, t)).abs() < 1e-9,
                "{t} at b = {b}: {} against {}",
                mape(&m, t),
                mape(&base, t)
            );
        }
        assert!(
            mape(&m, "energy_j") <= 1.001 * mape(&base, "energy_j"),
            "energy at b = {b}: {} against {}",
            mape(&m, "energy_j"),
            mape(&base, "energy_j")
        );
        // Each program a new one, measured on the cross only; the others on the full grid.
        let m = cross_workload_holdout(ModelKind::Auto, &set.meta, &pts, &s, &FitParams::default());
        assert_eq!(m.kind, ModelKind::Joint);
        assert!(m.failures.is_empty(), "{:?}", m.failures);
        assert_eq!(m.results.len(), 8);
        row(
            &format!("xu3 cross workload holdout, 2 cores at {b} MHz"),
            &m,
            &base,
        );
    }
}

#[test]
fn titanx_core_memory_clock_cross() {
    let set = load("titanx-micro");
    let pts: Vec<Point> = mean_points(&set);
    let cores: Vec<f64> = set.knob_values("core_freq_mhz");
    for b in [595.0, 1164.0] {
        let mut s: Vec<Knobs> = cores
            .iter()
            .map(|f| k(&[("core_freq_mhz", *f), ("mem_freq_mhz", 3505.0)]))
            .collect();
        s.push(k(&[("core_freq_mhz", b), ("mem_freq_mhz", 810.0)]));
        let m = settings_holdout(ModelKind::Auto, &set.meta, &pts, &s, &FitParams::default());
        let base = separable_baseline(&set.meta, &pts, &s);
        assert_eq!(m.kind, ModelKind::Joint);
        assert!(m.failures.is_empty(), "{:?}", m.failures.first());
        assert_eq!(m.results.len(), 140 * 15);
        row(
            &format!("titanx cross, 810 MHz memory trained at {b} MHz core"),
            &m,
            &base,
        );
        assert!(mape(&m, "time_s") < mape(&base, "time_s"));
    }
}
