//! Held-out accuracy on the shared real datasets (issue 6 targets). Each test imports a set
//! through the shipped spec (`datasets/*.toml`) and evaluates with the library's protocols.
//! The data are the bundled copies beside the specs (`datasets/README.md`).

mod common;

use powerperf_core::models::eval::{knob_holdout, workload_holdout, Evaluation};
use powerperf_core::models::features::mean_points;
use powerperf_core::models::{FitParams, ModelKind};
use powerperf_core::store::import::{import, ImportSpec};
use powerperf_format::set::TrainingSet;

fn load(name: &str) -> TrainingSet {
    let spec_path = common::datasets().join(format!("{name}.toml"));
    let spec = ImportSpec::load(&spec_path).unwrap();
    import(&spec, None).unwrap().set
}

/// `auto` in workload holdout from `base`, default parameters.
fn auto_holdout(
    set: &TrainingSet,
    pts: &[powerperf_format::set::Point],
    base: &powerperf_node::plan_file::Knobs,
) -> Evaluation {
    workload_holdout(ModelKind::Auto, &set.meta, pts, base, &FitParams::default())
}

/// `auto` in workload holdout on set `name` from `base` resolves to `kind`, predicts every
/// point, and for each `(target, most)` predicts every held-out point of the target with a
/// ratio to the median-ratio baseline of at most `most`.
fn auto_holdout_within(name: &str, base: &[(&str, f64)], kind: ModelKind, bounds: &[(&str, f64)]) {
    let set = load(name);
    let pts = mean_points(&set);
    let base: powerperf_node::plan_file::Knobs =
        base.iter().map(|(k, v)| (k.to_string(), *v)).collect();
    let e = auto_holdout(&set, &pts, &base);
    assert_eq!(e.kind, kind);
    assert!(e.failures.is_empty(), "{:?}", e.failures);
    let v = e.versus(&set.meta);
    println!("{name} workload holdout, auto: {v:?}");
    for (t, most) in bounds {
        assert_eq!(v[*t].common_n, v[*t].held_out, "{t}: every point predicted");
        assert!(
            v[*t].ratio.unwrap() <= *most,
            "{t}: ratio {:?}",
            v[*t].ratio
        );
    }
}

fn mape(e: &Evaluation, t: &str) -> f64 {
    e.summary.targets[t].mape_pct
}

#[test]
fn titanx_knob_holdout_meets_issue6_targets() {
    let set = load("titanx-micro");
    let pts = mean_points(&set);
    let e = knob_holdout(
        ModelKind::Auto,
        &set.meta,
        &pts,
        "core_freq_mhz",
        &[595.0, 861.0, 1164.0],
        &FitParams::default(),
    );
    assert_eq!(e.kind, ModelKind::Analytic);
    // 140 workloads × 2 memory clocks × 13 held-out core clocks.
    assert_eq!(e.summary.points, 140 * 2 * 13);
    assert!(e.failures.is_empty(), "{:?}", e.failures.first());
    println!("titanx knob holdout: {:?}", e.summary.targets);
    assert!(mape(&e, "time_s") <= 0.5, "time {}", mape(&e, "time_s"));
    assert!(mape(&e, "power_w") <= 1.5, "power {}", mape(&e, "power_w"));
    assert!(
        mape(&e, "energy_j") <= 2.0,
        "energy {}",
        mape(&e, "energy_j")
    );
}

#[test]
fn v100_power_knob_holdout() {
    let set = load("v100-dcgm-sweep");
    let pts = mean_points(&set);
    let e = knob_holdout(
        ModelKind::Analytic,
        &set.meta,
        &pts,
        "core_freq_mhz",
        &[510.0, 945.0, 1380.0],
        &FitParams::default(),
    );
    println!("v100 knob holdout: {:?}", e.summary.targets);
    // Time and energy are scored only for dgemm and stream (the copied run_time series).
    assert_eq!(e.summary.targets["time_s"].n, 2 * 114);
    // Issue 6 asks for ≤ 2 %; three training clocks per application reach this much (see
    // docs/models.md, "V100"): the bound below is what the model measures, not the target.
    assert!(mape(&e, "power_w") <= 4.0, "power {}", mape(&e, "power_w"));
    // Issue 21: at or below the naive per-application quadratic through the same three
    // clocks (3.60 %), on the same points. With one power exponent per chip the model
    // measured 3.85 % (ratio 1.070); with each application's own exponent 3.38 % (0.940).
    let v = e.versus(&set.meta);
    let power = &v["power_w"];
    assert_eq!(
        power.common_n, power.held_out,
        "every point predicted by both"
    );
    assert!(power.ratio.unwrap() <= 1.0, "power ratio {:?}", power.ratio);
    assert!(
        power.baseline.mape_pct > 3.5 && power.baseline.mape_pct < 3.7,
        "the quadratic's 3.60 %: {}",
        power.baseline.mape_pct
    );
}

/// Issue 21: `auto` in workload holdout on the V100 sweep, which has DCGM activity
/// fractions, takes analytic-counters' bound-and-bottleneck form (nothing fitted on the
/// held-out application), stacked per target with the neighbours' transfer by inner
/// cross-validation (`models::stack`), and its time error is at most half the median-ratio
/// baseline's on the same points (measured 0.433, docs/models.md); power stays below the
/// baseline's ¾ and within issue 21's 5 % (measured 4.16 %, the mean of the two chosen in
/// every fold).
///
/// Issue 41's rule (`scaling` unless a challenger beats it by more than one standard error
/// over the inner folds, fixed before measuring) re-measured on this code (2026-11-29):
/// time 1.003 of the baseline's error (22.18 against 22.10 %, over the two applications
/// with their own run time, dgemm and stream; `--model scaling`'s error; issue 21's 0.433 is
/// lost), power 0.348 (4.16 %).
/// The time bound is a regression guard on that figure (1.05), not issue 21's target ½,
/// which this rule does not meet here (docs/models.md, the issue-41 table).
#[test]
fn v100_auto_workload_holdout_takes_the_bound_and_bottleneck_form() {
    let set = load("v100-dcgm-sweep");
    let pts = mean_points(&set);
    let base: powerperf_node::plan_file::Knobs = [("core_freq_mhz".to_string(), 1380.0)].into();
    let e = auto_holdout(&set, &pts, &base);
    assert_eq!(e.kind, ModelKind::Stack);
    let v = e.versus(&set.meta);
    println!("v100 workload holdout, auto: {v:?}");
    let time = &v["time_s"];
    assert_eq!(time.common_n, time.held_out, "every timed point predicted");
    assert!(time.ratio.unwrap() <= 1.05, "time ratio {:?}", time.ratio);
    let power = &v["power_w"];
    assert_eq!(power.common_n, power.held_out);
    assert!(
        power.ratio.unwrap() <= 0.75,
        "power ratio {:?}",
        power.ratio
    );
    assert!(
        e.summary.targets["power_w"].mape_pct <= 5.0,
        "power MAPE {:?}",
        e.summary.targets["power_w"]
    );
    assert!(
        e.summary.protocol.contains("power_w: "),
        "the stack's choices are reported: {}",
        e.summary.protocol
    );
}

/// Issue 21 on the XU3 PARSEC set (4 programs, 1–2 cores × 3 clocks, cycles and
/// instructions counted): since stop 32 `auto` in workload holdout is the stack with the
/// base-CPI form at the baseline's two cores and, at one core (which the form does not
/// model), the neighbours or the programs' common response chosen by inner cross-validation
/// on the training programs' one-core points. Measured: power 0.606 of the median-ratio
/// baseline's error (issue 21 asks ≤ ¾; `scaling`'s choice gave 0.796), time 1.016 (level
/// with the baseline, as `scaling`'s 0.996; ≤ ½ is not met either way, docs/models.md).
/// Issue 41's rule (`scaling` unless a challenger clearly beats it, fixed before
/// measuring), re-measured on this code (2026-11-29; the stack's fallback predicting at one
/// core whatever the choice at two): time 0.943 and power 0.627 of the baseline's error
/// (9.90 / 4.45 % against 10.49 / 7.11 %), within the bounds issue 21 set (docs/models.md,
/// the issue-41 table).
#[test]
fn parsec_auto_workload_holdout_takes_the_stack_and_meets_the_power_target() {
    auto_holdout_within(
        "xu3-parsec-joint",
        &[("core_freq_mhz", 1800.0), ("threads", 2.0)],
        ModelKind::Stack,
        &[("time_s", 1.05), ("power_w", 0.75)],
    );
}

/// Issue 21 on XU3 cBench (30 programs, one core at 1000/1500/2000 MHz, cycles and
/// instructions counted): `auto` in workload holdout is the stack of the base-CPI form
/// (`analytic_counters` with `combine = base_cpi`: the held-out program's clock-scaled share
/// from its own cycles and instructions at 2000 MHz, one base CPI fitted on the others) and
/// the neighbours' transfer, chosen per target by inner cross-validation. Measured 0.442 of
/// the median-ratio baseline's time error and 0.540 of its power error (docs/models.md);
/// issue 21 asks ≤ ½ and ≤ ¾. Issue 41's rule, re-measured on this code: 0.439 and 0.527.
#[test]
fn cbench_auto_workload_holdout_takes_the_base_cpi_stack() {
    auto_holdout_within(
        "xu3-cbench",
        &[("core_freq_mhz", 2000.0), ("threads", 1.0)],
        ModelKind::Stack,
        &[("time_s", 0.5), ("power_w", 0.75)],
    );
}
