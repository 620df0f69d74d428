//! `auto`'s per-target stack in workload holdout on a set with DCGM activity fractions
//! (where [`super::analytic_counters::roofline_applicable`] holds): for each target, the
//! physical form (`analytic_counters`' bound and bottleneck with the roofline power transfer,
//! nothing fitted on the held-out workload), the data-driven local transfer (`neighbors`: the
//! K nearest training workloads' ratios, [`super::scaling::NeighborsParams`]), or the mean of
//! the two, whichever has the lowest inner cross-validated MAPE on the training workloads.
//!
//! This is stacked generalisation (Wolpert, Neural Networks 5(2), 1992; Breiman, Machine
//! Learning 24(1), 1996, "Stacked regressions") restricted to three fixed combinations, so
//! that the choice has one discrete degree of freedom per target: the combination is scored
//! by leaving each training workload out in turn (refitting both models on the other training
//! workloads plus that workload's baseline point, the outer protocol one level down; beyond
//! `scaling.inner_folds` workloads, that many folds of several workloads each) and never
//! sees the held-out workload's other points. A physical model and a nearest-neighbour
//! transfer err on different workloads (the first where a counter fraction misreads the
//! workload's bottleneck, the second where a workload has no close neighbour), which is what
//! an average of the two can exploit and what the inner score measures.
//!
//! Ties, and targets the inner folds cannot score (no left-out point both models predict; on
//! the V100 set time and energy, measured for two applications only), keep the physical
//! form. `neighbors` rather than `scaling`'s own per-target choice is the
//! data-driven member for cost: one inner level of refits per training workload, and the
//! neighbours' fit costs about a tenth of `scaling`'s choice among its four transfers.

use super::eval::{fit_then_predict, measured};
use super::{FitParams, ModelKind, Prediction};
use crate::store::set::{Point, SetMeta, TARGETS};
use std::collections::BTreeMap;

/// The three candidates, in the order ties are broken.
pub const CANDIDATES: [&str; 3] = ["analytic_counters", "neighbors", "mean"];

/// One model's prediction per test point, or the reason it has none.
type Preds = Vec<Result<Prediction, String>>;

fn value(p: &Result<Prediction, String>, t: &str) -> Option<f64> {
    p.as_ref()
        .ok()
        .and_then(|p| p.target(t))
        .filter(|v| v.is_finite())
}

/// Candidate `c`'s value of target `t` from the physical (`a`) and neighbours' (`n`)
/// predictions: the mean needs both.
fn candidate(c: usize, a: Option<f64>, n: Option<f64>) -> Option<f64> {
    match c {
        0 => a,
        1 => n,
        _ => Some((a? + n?) / 2.0),
    }
}

/// The stack: both models' parameters (`FitParams` with `analytic_counters` set to the
/// physical form, `scaling.baseline` to the workload-holdout baseline).
pub struct Stack<'a> {
    pub meta: &'a SetMeta,
    pub params: &'a FitParams,
}

/// Per target, the index into [`CANDIDATES`] chosen.
pub type Choice = BTreeMap<String, usize>;

impl Stack<'_> {
    fn both(&self, train: &[Point], test: &[&Point]) -> (Preds, Preds) {
        (
            fit_then_predict(
                ModelKind::AnalyticCounters,
                self.meta,
                train,
                test,
                self.params,
            ),
            fit_then_predict(ModelKind::Neighbors, self.meta, train, test, self.params),
        )
    }

    /// The choice per target on `train` (the held-out workload's baseline point among them,
    /// its other points not): the training workloads other than `held` with a baseline
    /// point and another point, left out in turn (that many folds beyond
    /// `scaling.inner_folds`, workload `i` in fold `i mod folds`, as `scaling`'s own inner
    /// cross-validation).
    pub fn choose(
        &self,
        train: &[Point],
        held: &str,
        at_base: &(dyn Fn(&Point) -> bool + Sync),
    ) -> Choice {
        let mut inner: Vec<&str> = Vec::new();
        for p in train {
            let w = p.workload.as_str();
            if w != held
                && !inner.contains(&w)
                && train.iter().any(|q| q.workload == w && at_base(q))
                && train.iter().any(|q| q.workload == w && !at_base(q))
            {
                inner.push(w);
            }
        }
        let folds = inner.len().min(self.params.scaling.inner_folds.max(2));
        // Per target and candidate: (sum of absolute percentage errors, count) over points
        // every candidate predicts.
        let mut sums: BTreeMap<&str, [(f64, usize); 3]> = BTreeMap::new();
        for f in 0..folds {
            let out: Vec<&str> = (f..inner.len()).step_by(folds).map(|i| inner[i]).collect();
            let left_out = |p: &Point| out.contains(&p.workload.as_str()) && !at_base(p);
            let test: Vec<&Point> = train.iter().filter(|p| left_out(p)).collect();
            let sub: Vec<Point> = train.iter().filter(|p| !left_out(p)).cloned().collect();
            let (pa, pn) = self.both(&sub, &test);
            for (i, p) in test.iter().enumerate() {
                let m = measured(p);
                for t in TARGETS {
                    if !self.meta.is_reliable(t, &p.workload) {
                        continue;
                    }
                    let Some(y) = m.target(t).filter(|y| *y != 0.0 && y.is_finite()) else {
                        continue;
                    };
                    let (a, n) = (value(&pa[i], t), value(&pn[i], t));
                    if a.is_none() || n.is_none() {
                        continue;
                    }
                    let e = sums.entry(t).or_insert([(0.0, 0); 3]);
                    for (c, acc) in e.iter_mut().enumerate() {
                        if let Some(x) = candidate(c, a, n) {
                            acc.0 += ((x - y) / y).abs() * 100.0;
                            acc.1 += 1;
                        }
                    }
                }
            }
        }
        TARGETS
            .iter()
            .map(|t| {
                let scores = sums.get(t).map_or([f64::NAN; 3], |s| {
                    s.map(|(sum, n)| if n > 0 { sum / n as f64 } else { f64::NAN })
                });
                // The lowest score; ties and no score keep the physical form (index 0).
                let mut best = 0;
                for c in 1..3 {
                    if scores[c] < scores[best] {
                        best = c;
                    }
                }
                (t.to_string(), best)
            })
            .collect()
    }

    /// Predict `test` (one held-out workload's points) from `train` with `choice`; a point a
    /// chosen candidate cannot give falls back to the physical form's value, then the
    /// neighbours'; a point neither gives is refused with both reasons.
    pub fn predict(
        &self,
        train: &[Point],
        test: &[&Point],
        choice: &Choice,
    ) -> Vec<Result<Prediction, String>> {
        let (pa, pn) = self.both(train, test);
        pa.iter()
            .zip(&pn)
            .map(|(a, n)| {
                if a.is_err() && n.is_err() {
                    return Err(format!(
                        "analytic_counters: {}; neighbors: {}",
                        a.as_ref().err().map_or("", String::as_str),
                        n.as_ref().err().map_or("", String::as_str)
                    ));
                }
                let get = |t: &str| {
                    let (va, vn) = (value(a, t), value(n, t));
                    let c = choice.get(t).copied().unwrap_or(0);
                    candidate(c, va, vn).or(va).or(vn)
                };
                Ok(Prediction {
                    time_s: get("time_s"),
                    power_w: get("power_w"),
                    energy_j: get("energy_j"),
                })
            })
            .collect()
    }
}

/// How often each candidate was chosen per target over the held-out workloads, as text for
/// the protocol line (`time_s: analytic_counters ×21; power_w: mean ×15, neighbors ×6`).
pub fn describe(choices: &[Choice]) -> String {
    let mut parts = Vec::new();
    for t in TARGETS {
        let mut counts = [0usize; 3];
        for c in choices {
            if let Some(&i) = c.get(t) {
                counts[i] += 1;
            }
        }
        let items: Vec<String> = (0..3)
            .filter(|&i| counts[i] > 0)
            .map(|i| format!("{} ×{}", CANDIDATES[i], counts[i]))
            .collect();
        if !items.is_empty() {
            parts.push(format!("{t}: {}", items.join(", ")));
        }
    }
    parts.join("; ")
}
