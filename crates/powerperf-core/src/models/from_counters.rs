//! Predicting a GPU program's time at other SM clocks from one run's activity fractions
//! (`powerperf predict --from RUN` without `--model`).
//!
//! The run (or one of its regions) becomes a training set of one point per region, at the
//! clock it ran at, with its DCGM activity fractions as rate counters; the counter-driven time
//! model [`super::analytic_counters`] in its bound-and-bottleneck form (`combine = "max"`,
//! [`AnalyticCountersParams::roofline`]) is built on it, which fits nothing for time:
//!
//! ```text
//! t(f) = t0 · [ (1 − a) + max(c·f0/f, m) + (a − max(c, m))·f0/f ]
//! ```
//!
//! with `a` = `gr_engine_active`, `m` = `dram_active`, `c` = the largest of `fp64_active`,
//! `fp32_active`, `fp16_active`, `tensor_active` (docs/models.md, "Bound and bottleneck";
//! Williams, Waterman & Patterson, "Roofline", CACM 2009; Nath & Tullsen, MICRO 2015). This
//! is the model's own code path, as in `fit`/`evaluate`: on the V100 DCGM sweep, fed each
//! workload's 1380 MHz point alone, it gives docs/models.md's workload-holdout errors for
//! that form (time 9.57 %: dgemm 7.05 %, stream 12.09 %; tests/predict_from_counters.rs).
//!
//! Power is not predicted: one run at one clock says nothing of how power changes with it.

use super::analytic_counters::{self, AnalyticCountersModel, AnalyticCountersParams};
use super::{Knobs, ModelError};
use powerperf_format::set::{CounterKind, Point, SetMeta};
use std::collections::BTreeMap;

/// The clock knob, as the bundled GPU sets name the SM clock (device gpu).
pub const CLOCK_KNOB: &str = "core_freq_mhz";

/// The memory fraction the form needs.
pub const MEMORY_COUNTER: &str = "dram_active";

/// One thing measured once: a region of a run, or the whole run.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Measured {
    /// The region (or `(whole run)`).
    pub name: String,
    /// The SM clock it ran at, MHz.
    pub clock_mhz: f64,
    /// Its time, s.
    pub time_s: f64,
    /// Activity fractions 0..1 by DCGM name (`gr_engine_active`, `dram_active`,
    /// `fp64_active`, …).
    pub fractions: BTreeMap<String, f64>,
}

/// Whether `fractions` has what the form needs: `dram_active` and one compute-pipe
/// fraction (`fp64_active`, `fp32_active`, `fp16_active` or `tensor_active`).
pub fn has_fractions(fractions: &BTreeMap<String, f64>) -> bool {
    let ok = |n: &str| fractions.get(n).is_some_and(|v| v.is_finite());
    ok(MEMORY_COUNTER)
        && analytic_counters::DEFAULT_COMPUTE_COUNTERS
            .iter()
            .any(|c| ok(c))
}

/// The bound-and-bottleneck model of `measured`, one group per entry, nothing fitted.
///
/// # Errors
/// No entry, an entry without the fractions ([`has_fractions`]), a time or clock that is not
/// positive, or two entries with one name.
pub fn model_of(measured: &[Measured]) -> Result<AnalyticCountersModel, ModelError> {
    let bad = |what: String| ModelError::NotEnoughData {
        model: "analytic_counters (from counters)".into(),
        what,
    };
    if measured.is_empty() {
        return Err(bad("no region or run to predict from".into()));
    }
    let mut counters: BTreeMap<String, CounterKind> = BTreeMap::new();
    let mut points = Vec::new();
    for m in measured {
        if !has_fractions(&m.fractions) {
            return Err(bad(format!(
                "`{}` has no `{MEMORY_COUNTER}` with a compute-pipe fraction ({}); it has [{}] (fix: collect on a GPU with GPM metrics, Hopper or newer)",
                m.name,
                analytic_counters::DEFAULT_COMPUTE_COUNTERS.join(", "),
                m.fractions.keys().cloned().collect::<Vec<_>>().join(", ")
            )));
        }
        if !(m.time_s.is_finite() && m.time_s > 0.0) {
            return Err(bad(format!(
                "`{}`: time {} s is not positive",
                m.name, m.time_s
            )));
        }
        if !(m.clock_mhz.is_finite() && m.clock_mhz > 0.0) {
            return Err(bad(format!(
                "`{}`: SM clock {} MHz is not positive",
                m.name, m.clock_mhz
            )));
        }
        if points.iter().any(|p: &Point| p.workload == m.name) {
            return Err(bad(format!("`{}` is given twice", m.name)));
        }
        let mut c = BTreeMap::new();
        for (k, v) in &m.fractions {
            if v.is_finite() {
                counters.insert(k.clone(), CounterKind::Rate);
                c.insert(k.clone(), *v);
            }
        }
        points.push(Point {
            workload: m.name.clone(),
            knobs: [(CLOCK_KNOB.to_string(), m.clock_mhz)].into(),
            time_s: Some(m.time_s),
            counters: c,
            ..Point::default()
        });
    }
    let meta = SetMeta {
        source: "a run's counters".into(),
        knobs: vec![CLOCK_KNOB.into()],
        targets: vec!["time_s".into()],
        counters,
        knob_devices: [(CLOCK_KNOB.to_string(), "gpu".to_string())].into(),
        ..SetMeta::default()
    };
    analytic_counters::fit(&meta, &points, &AnalyticCountersParams::roofline())
}

/// The predicted time of `name` at `clock_mhz`.
///
/// # Errors
/// Unknown name, a clock that is not positive.
pub fn predict_time(
    model: &AnalyticCountersModel,
    name: &str,
    clock_mhz: f64,
) -> Result<f64, ModelError> {
    let knobs: Knobs = [(CLOCK_KNOB.to_string(), clock_mhz)].into();
    model
        .predict(name, &knobs)?
        .time_s
        .ok_or_else(|| ModelError::NotEnoughData {
            model: "analytic_counters (from counters)".into(),
            what: format!("no time for `{name}`"),
        })
}

/// `(a, c, m)`: the fractions the form used for `name` (engine active, compute bottleneck,
/// memory), for the output.
pub fn fractions_used(model: &AnalyticCountersModel, name: &str) -> Option<(f64, f64, f64)> {
    let g = model.groups.iter().find(|g| g.workload == name)?;
    model.roofline_fractions(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(name: &str, a: f64, c: f64, mem: f64) -> Measured {
        Measured {
            name: name.into(),
            clock_mhz: 1980.0,
            time_s: 2.0,
            fractions: [
                ("gr_engine_active".to_string(), a),
                ("fp64_active".to_string(), c),
                ("dram_active".to_string(), mem),
            ]
            .into(),
        }
    }

    #[test]
    fn memory_bound_is_flat_and_compute_bound_is_one_over_f() {
        let model = model_of(&[m("stream", 1.0, 0.05, 0.9), m("dgemm", 1.0, 0.95, 0.1)]).unwrap();
        // half the clock: stream t = 2·[max(0.1, 0.9) + (1 − 0.9)·2] = 2.2 s
        let s = predict_time(&model, "stream", 990.0).unwrap();
        assert!((s - 2.2).abs() < 1e-9, "{s}");
        // dgemm: 2·[max(0.95·2, 0.1) + (1 − 0.95)·2] = 4.0 s
        let d = predict_time(&model, "dgemm", 990.0).unwrap();
        assert!((d - 4.0).abs() < 1e-9, "{d}");
        assert_eq!(predict_time(&model, "dgemm", 1980.0).unwrap(), 2.0);
        assert_eq!(fractions_used(&model, "stream"), Some((1.0, 0.05, 0.9)));
    }

    #[test]
    fn missing_fractions_and_bad_times_are_named() {
        let mut x = m("k", 1.0, 0.5, 0.5);
        x.fractions.remove("dram_active");
        let e = model_of(&[x]).unwrap_err().to_string();
        assert!(e.contains("dram_active") && e.contains("`k`"), "{e}");
        let mut y = m("k", 1.0, 0.5, 0.5);
        y.time_s = 0.0;
        assert!(model_of(&[y])
            .unwrap_err()
            .to_string()
            .contains("not positive"));
        assert!(model_of(&[]).is_err());
        assert!(model_of(&[m("k", 1.0, 0.5, 0.5), m("k", 1.0, 0.5, 0.5)]).is_err());
    }
}
