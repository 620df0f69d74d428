//! Naive baselines scored beside every held-out error, on the same split (issue 21, item 3).
//!
//! A model's error means little without the error of the obvious rule on the same points:
//!
//! - **Knob curve** (knob holdout, leave-one-out, k-fold): each held-out point from the
//!   same workload's training points that differ from it in one knob only (the *line*
//!   through it; at least two of them, else the separable rule below is tried first), by a
//!   least-squares polynomial of degree `min(2, m − 1)` through the `m` training values on
//!   that line: time in `1/k` (time ∝ 1/f for a compute-bound run; Amdahl's `s + p/n` is
//!   degree 1 in `1/n`), power in `k` (the quadratic in f of issue 21), energy as
//!   that power × time (or, when power or time is missing, the same polynomial in `k` through
//!   the energies). With one training value on the line it is that value; with two, a line.
//!   When several knobs give a line, the one with the most training values is used.
//! - **Separable rule** (a joint split, where no training point differs from the held-out
//!   one in a single knob): `y(k1, k2) = y(k1, b2) · y(b1, k2) / y(b1, b2)` for a training
//!   point `b` of the workload that differs from the held-out point in exactly the two knobs
//!   `k1`, `k2`; `y(k1, b2)` and `y(b1, k2)` are knob curves through the training points on
//!   the lines through `b` (the measured values when they are training points; a factor
//!   that is neither measured nor on a line of two training values at least makes that `b`
//!   unusable). The `b` with the most training points on its two lines is used. This is the product form of a
//!   separable (multiplicative) model, E-AMOM's and COS's starting point (Curtis-Maury et
//!   al., ICS 2008).
//! - **Median ratio** (workload holdout): `y(w, s) = y(w, b) · median_v y(v, s)/y(v, b)` over
//!   the training workloads `v` measured at both the setting `s` and the baseline setting
//!   `b` (targets the set marks unreliable for `v` left out), per target.
//!
//! Baseline predictions obey the same physical rules as a model's ([`super::check_physical`]):
//! a value that is not (a time ≤ 0, a negative power) is refused, target by target (a point
//! with no target left is a refusal with its reason), and the baseline's coverage is
//! reported beside its error, as the model's is.

use super::features::knob_key;
use super::scoring::measured;
use super::scoring::{PointResult, TargetError};
use super::{check_physical, HeldOutError, Knobs, Prediction};
use powerperf_format::set::{Point, SetMeta, TARGETS};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, HashMap};

/// The baseline's predictions of the held-out points.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct BaselineEval {
    /// The rule, in words (which curve, in which variable).
    pub rule: String,
    pub results: Vec<PointResult>,
    /// Held-out points the rule cannot predict, with the reason.
    pub failures: Vec<(String, String)>,
    /// Points predicted by a knob curve and by the separable rule (knob baselines).
    pub curve_points: usize,
    pub separable_points: usize,
}

impl BaselineEval {
    /// The parts of a protocol's folds as one (results in the order given).
    pub fn merge(parts: Vec<BaselineEval>) -> BaselineEval {
        let mut out = BaselineEval::default();
        for p in parts {
            if out.rule.is_empty() || p.rule != out.rule {
                out.rule = p.rule;
            }
            out.results.extend(p.results);
            out.failures.extend(p.failures);
            out.curve_points += p.curve_points;
            out.separable_points += p.separable_points;
        }
        if out.curve_points + out.separable_points > 0 {
            out.rule = knob_rule_text(out.curve_points, out.separable_points);
        }
        out
    }
}

/// The knob baselines' rule in words, by how many points each part predicted.
fn knob_rule_text(curves: usize, separable: usize) -> String {
    match (curves, separable) {
        (_, 0) => "per-workload curve through the training values of the held-out knob: least-squares polynomial of degree min(2, values − 1), time in 1/knob, power in knob, energy = power × time".into(),
        (0, _) => "separable rule y(k1,k2) = y(k1,b2)·y(b1,k2)/y(b1,b2) from the workload's training points (each factor a per-workload curve: degree min(2, values − 1), time in 1/knob, power in knob)".into(),
        (c, s) => format!("per-workload curve along one knob where the training points allow ({c} points: degree min(2, values − 1), time in 1/knob, power in knob, energy = power × time), else the separable rule y(k1,k2) = y(k1,b2)·y(b1,k2)/y(b1,b2) ({s} points)"),
    }
}

/// A model's error beside its baseline's for one target.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize, Default)]
pub struct Versus {
    /// Held-out points with a reliable measurement of this target: the total both are
    /// scored against.
    pub held_out: usize,
    /// The model's error over the points it predicts (`n` of `held_out`).
    pub model: TargetError,
    /// The baseline's error over the points it predicts (`n` of `held_out`).
    pub baseline: TargetError,
    /// Points both predict.
    pub common_n: usize,
    /// MAPE of the model over the points both predict.
    pub model_common_mape_pct: Option<f64>,
    /// MAPE of the baseline over the points both predict.
    pub baseline_common_mape_pct: Option<f64>,
    /// `model_common_mape_pct / baseline_common_mape_pct`: below 1, the model beats the baseline.
    pub ratio: Option<f64>,
}

fn label(p: &Point) -> String {
    format!("{} {}", p.workload, knob_key(&p.knobs))
}

/// Least-squares polynomial of degree `min(2, m − 1)` through `(x, y)` (`m` points, distinct
/// `x`), evaluated at `x0`. `x` is scaled by its largest magnitude for conditioning.
fn poly_at(xs: &[f64], ys: &[f64], x0: f64) -> Option<f64> {
    let m = xs.len();
    if m == 0 {
        return None;
    }
    if m == 1 {
        return Some(ys[0]);
    }
    let scale = xs.iter().fold(0.0f64, |a, x| a.max(x.abs())).max(1e-300);
    let d = (m - 1).min(2);
    let n = d + 1;
    // Normal equations A c = r in the scaled variable.
    let mut a = [[0.0f64; 3]; 3];
    let mut r = [0.0f64; 3];
    for (x, y) in xs.iter().zip(ys) {
        let u = x / scale;
        let pw = [1.0, u, u * u];
        for i in 0..n {
            r[i] += pw[i] * y;
            for j in 0..n {
                a[i][j] += pw[i] * pw[j];
            }
        }
    }
    // Gaussian elimination with partial pivoting on the n×n system.
    for col in 0..n {
        let piv = (col..n).max_by(|&i, &j| a[i][col].abs().total_cmp(&a[j][col].abs()))?;
        if a[piv][col].abs() < 1e-300 {
            return None;
        }
        a.swap(col, piv);
        r.swap(col, piv);
        for row in col + 1..n {
            let f = a[row][col] / a[col][col];
            let pivot_row = a[col];
            for (x, p) in a[row][col..n].iter_mut().zip(&pivot_row[col..n]) {
                *x -= f * p;
            }
            r[row] -= f * r[col];
        }
    }
    let mut c = [0.0f64; 3];
    for i in (0..n).rev() {
        let s: f64 = (i + 1..n).map(|k| a[i][k] * c[k]).sum();
        c[i] = (r[i] - s) / a[i][i];
    }
    let u = x0 / scale;
    let v = c[0] + c[1] * u + c[2] * u * u;
    v.is_finite().then_some(v)
}

/// The knob curve along `knob` through `line` (training points differing only in `knob`),
/// at `value`.
fn curve(line: &[&Point], knob: &str, value: f64) -> Prediction {
    let along = |target: &str, inverse: bool| -> Option<f64> {
        let (xs, ys): (Vec<f64>, Vec<f64>) = line
            .iter()
            .filter_map(|p| {
                let k = *p.knobs.get(knob)?;
                let y = p.target(target)?;
                (y.is_finite() && k != 0.0).then_some((if inverse { 1.0 / k } else { k }, y))
            })
            .unzip();
        if value == 0.0 {
            return None;
        }
        poly_at(&xs, &ys, if inverse { 1.0 / value } else { value })
    };
    let time_s = along("time_s", true);
    let power_w = along("power_w", false);
    let energy_j = match (time_s, power_w) {
        (Some(t), Some(w)) if t > 0.0 && w >= 0.0 => Some(t * w),
        _ => along("energy_j", false),
    };
    Prediction {
        time_s,
        power_w,
        energy_j,
    }
}

/// Training points of one workload, with a lookup by knob values.
struct WorkloadPoints<'a> {
    points: Vec<&'a Point>,
}

impl<'a> WorkloadPoints<'a> {
    /// The points that equal `at` on every knob except those in `free`.
    fn line(&self, at: &Knobs, free: &[&str]) -> Vec<&'a Point> {
        self.points
            .iter()
            .copied()
            .filter(|p| {
                at.iter().all(|(k, v)| {
                    free.contains(&k.as_str()) || p.knobs.get(k).is_some_and(|x| x == v)
                })
            })
            .collect()
    }
}

/// What the knob curve or the separable rule predicts for `q`, or why neither applies.
fn knob_rule(wp: &WorkloadPoints, q: &Point) -> Result<(Prediction, &'static str), String> {
    // A line through q along one knob.
    let mut best: Option<(&str, Vec<&Point>)> = None;
    for k in q.knobs.keys() {
        let line = wp.line(&q.knobs, &[k.as_str()]);
        if !line.is_empty() && best.as_ref().is_none_or(|(_, b)| line.len() > b.len()) {
            best = Some((k.as_str(), line));
        }
    }
    // A curve needs two values on its line; a single one is only a constant, worse than the
    // separable rule where that applies, so it comes last.
    if let Some((k, line)) = best.as_ref().filter(|(_, l)| l.len() >= 2) {
        return Ok((curve(line, k, q.knobs[*k]), "curve"));
    }
    // The separable rule through a training point differing in two knobs.
    let mut best_sep: Option<(usize, Prediction)> = None;
    let knobs: Vec<&str> = q.knobs.keys().map(|k| k.as_str()).collect();
    for (i, k1) in knobs.iter().enumerate() {
        for k2 in &knobs[i + 1..] {
            for b in wp.line(&q.knobs, &[k1, k2]) {
                if b.knobs.get(*k1) == q.knobs.get(*k1) || b.knobs.get(*k2) == q.knobs.get(*k2) {
                    continue;
                }
                // y(q1, b2): along k1 through b; y(b1, q2): along k2 through b.
                let line1 = wp.line(&b.knobs, &[k1]);
                let line2 = wp.line(&b.knobs, &[k2]);
                // Each factor is measured, or a curve through two training values at least
                // (a single other value says nothing about the knob).
                let usable = |line: &[&Point], k: &str| {
                    line.len() >= 2 || line.iter().any(|p| p.knobs.get(k) == q.knobs.get(k))
                };
                if !usable(&line1, k1) || !usable(&line2, k2) {
                    continue;
                }
                let support = line1.len() + line2.len();
                if best_sep.as_ref().is_some_and(|(s, _)| *s >= support) {
                    continue;
                }
                let y1 = curve(&line1, k1, q.knobs[*k1]);
                let y2 = curve(&line2, k2, q.knobs[*k2]);
                let yb = measured(b);
                let f = |a: Option<f64>, c: Option<f64>, d: Option<f64>| match (a, c, d) {
                    (Some(a), Some(c), Some(d)) if d != 0.0 => Some(a * c / d),
                    _ => None,
                };
                let pred = Prediction {
                    time_s: f(y1.time_s, y2.time_s, yb.time_s),
                    power_w: f(y1.power_w, y2.power_w, yb.power_w),
                    energy_j: f(y1.energy_j, y2.energy_j, yb.energy_j),
                };
                best_sep = Some((support, pred));
            }
        }
    }
    let constant = best;
    match (best_sep, constant) {
        (Some((_, p)), _) => Ok((p, "separable")),
        (None, Some((k, line))) => Ok((curve(&line, k, q.knobs[k]), "curve")),
        (None, None) => Err(format!(
            "no training point of `{}` differs from it in one or two knobs only",
            q.workload
        )),
    }
}

/// `pred` without the targets that are not physical (each is dropped on its own: a curve
/// through a convex power can go negative far out while its time stays valid); an error
/// with the reason when no target is left.
fn keep_physical(q: &Point, pred: Prediction) -> Result<Prediction, super::ModelError> {
    let mut out = pred;
    let mut why = None;
    for t in TARGETS {
        let one = Prediction {
            time_s: (t == "time_s").then_some(pred.time_s).flatten(),
            power_w: (t == "power_w").then_some(pred.power_w).flatten(),
            energy_j: (t == "energy_j").then_some(pred.energy_j).flatten(),
        };
        if one == Prediction::default() {
            continue;
        }
        if let Err(e) = check_physical("baseline", &q.workload, &q.knobs, one) {
            why.get_or_insert(e);
            match t {
                "time_s" => out.time_s = None,
                "power_w" => out.power_w = None,
                _ => out.energy_j = None,
            }
        }
    }
    match why {
        Some(e) if out == Prediction::default() => Err(e),
        _ if out == Prediction::default() => check_physical("baseline", &q.workload, &q.knobs, out),
        _ => Ok(out),
    }
}

/// The knob-curve baseline (or the separable rule where no curve applies) of `test` from
/// `train`.
pub fn knob_baseline(train: &[Point], test: &[&Point]) -> BaselineEval {
    let mut by_w: HashMap<&str, WorkloadPoints> = HashMap::new();
    for p in train {
        by_w.entry(&p.workload)
            .or_insert_with(|| WorkloadPoints { points: Vec::new() })
            .points
            .push(p);
    }
    let mut out = BaselineEval::default();
    let (mut curves, mut separable) = (0usize, 0usize);
    for q in test {
        let Some(wp) = by_w.get(q.workload.as_str()) else {
            out.failures.push((
                label(q),
                format!("baseline: no training point of `{}`", q.workload),
            ));
            continue;
        };
        match knob_rule(wp, q) {
            Ok((pred, how)) => match keep_physical(q, pred) {
                Ok(pred) => {
                    if how == "curve" {
                        curves += 1;
                    } else {
                        separable += 1;
                    }
                    out.results.push(PointResult {
                        workload: q.workload.clone(),
                        knobs: q.knobs.clone(),
                        measured: measured(q),
                        predicted: pred,
                    });
                }
                Err(e) => out.failures.push((label(q), e.to_string())),
            },
            Err(e) => out.failures.push((label(q), format!("baseline: {e}"))),
        }
    }
    out.rule = knob_rule_text(curves, separable);
    out.curve_points = curves;
    out.separable_points = separable;
    out
}

/// The median-ratio baseline of workload holdout: each held-out point of workload `w` at
/// setting `s` is `y(w, b) · median_v y(v, s)/y(v, b)` over the other workloads `v` (see the
/// module docs). `points` is the whole set; `is_base` picks the baseline setting.
pub fn median_ratio_baseline(
    meta: &SetMeta,
    points: &[Point],
    test: &[&Point],
    is_base: &dyn Fn(&Point) -> bool,
    base_label: &str,
) -> BaselineEval {
    // Each workload's baseline point and its points by setting.
    let mut base: HashMap<&str, &Point> = HashMap::new();
    let mut by_setting: HashMap<String, Vec<&Point>> = HashMap::new();
    for p in points {
        if is_base(p) {
            base.entry(&p.workload).or_insert(p);
        }
        by_setting.entry(knob_key(&p.knobs)).or_default().push(p);
    }
    let mut out = BaselineEval {
        rule: format!("median-ratio transfer: the workload's value at {base_label} × the median ratio (setting / {base_label}) of the other workloads, per target"),
        ..BaselineEval::default()
    };
    for q in test {
        let Some(own) = base.get(q.workload.as_str()) else {
            out.failures.push((
                label(q),
                format!("baseline: `{}` has no point at {base_label}", q.workload),
            ));
            continue;
        };
        let same = by_setting
            .get(&knob_key(&q.knobs))
            .map(|v| v.as_slice())
            .unwrap_or_default();
        let ratio = |t: &str| -> Option<f64> {
            let mut r: Vec<f64> = same
                .iter()
                .filter(|v| v.workload != q.workload && meta.is_reliable(t, &v.workload))
                .filter_map(|v| {
                    let b = base.get(v.workload.as_str())?.target(t)?;
                    let y = v.target(t)?;
                    let x = y / b;
                    (b != 0.0 && x.is_finite()).then_some(x)
                })
                .collect();
            if r.is_empty() {
                return None;
            }
            r.sort_by(f64::total_cmp);
            let m = r.len();
            Some(if m % 2 == 1 {
                r[m / 2]
            } else {
                0.5 * (r[m / 2 - 1] + r[m / 2])
            })
        };
        let pred = Prediction {
            time_s: own.time_s.zip(ratio("time_s")).map(|(a, b)| a * b),
            power_w: own.power_w.zip(ratio("power_w")).map(|(a, b)| a * b),
            energy_j: own.energy_j.zip(ratio("energy_j")).map(|(a, b)| a * b),
        };
        match keep_physical(q, pred) {
            Ok(pred) => out.results.push(PointResult {
                workload: q.workload.clone(),
                knobs: q.knobs.clone(),
                measured: measured(q),
                predicted: pred,
            }),
            Err(_) if pred == Prediction::default() => out.failures.push((
                label(q),
                format!(
                    "baseline: no other workload is measured at both this setting and {base_label}"
                ),
            )),
            Err(e) => out.failures.push((label(q), e.to_string())),
        }
    }
    out
}

/// Held-out points with a reliable, finite, non-zero measurement of `target`.
pub fn held_out_counts(meta: &SetMeta, test: &[&Point]) -> BTreeMap<String, usize> {
    TARGETS
        .iter()
        .map(|t| {
            let n = test
                .iter()
                .filter(|p| meta.is_reliable(t, &p.workload))
                .filter(|p| p.target(t).is_some_and(|m| m != 0.0 && m.is_finite()))
                .count();
            (t.to_string(), n)
        })
        .collect()
}

/// The model's and the baseline's errors per target, side by side, with the ratio on the
/// points both predict. Targets with no held-out measurement are left out.
pub fn versus(
    meta: &SetMeta,
    held_out: &BTreeMap<String, usize>,
    model: &[PointResult],
    model_summary: &HeldOutError,
    baseline: &BaselineEval,
) -> BTreeMap<String, Versus> {
    let base_summary = super::scoring::summarise(meta, &baseline.results, "baseline");
    let err = |r: &PointResult, t: &str| -> Option<f64> {
        if !meta.is_reliable(t, &r.workload) {
            return None;
        }
        match (r.measured.target(t), r.predicted.target(t)) {
            (Some(m), Some(p)) if m != 0.0 && m.is_finite() && p.is_finite() => {
                Some(((p - m) / m).abs() * 100.0)
            }
            _ => None,
        }
    };
    let mut out = BTreeMap::new();
    for t in TARGETS {
        let total = held_out.get(t).copied().unwrap_or(0);
        if total == 0 {
            continue;
        }
        let base_err: HashMap<(String, String), f64> = baseline
            .results
            .iter()
            .filter_map(|r| Some(((r.workload.clone(), knob_key(&r.knobs)), err(r, t)?)))
            .collect();
        let (mut sm, mut sb, mut n) = (0.0, 0.0, 0usize);
        for r in model {
            let Some(em) = err(r, t) else { continue };
            if let Some(eb) = base_err.get(&(r.workload.clone(), knob_key(&r.knobs))) {
                sm += em;
                sb += eb;
                n += 1;
            }
        }
        let (mc, bc) = if n > 0 {
            (Some(sm / n as f64), Some(sb / n as f64))
        } else {
            (None, None)
        };
        out.insert(
            t.to_string(),
            Versus {
                held_out: total,
                model: model_summary.targets.get(t).copied().unwrap_or_default(),
                baseline: base_summary.targets.get(t).copied().unwrap_or_default(),
                common_n: n,
                model_common_mape_pct: mc,
                baseline_common_mape_pct: bc,
                ratio: mc.zip(bc).and_then(|(a, b)| (b > 0.0).then_some(a / b)),
            },
        );
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(w: &str, n: f64, f: f64, t: f64, p: f64) -> Point {
        Point {
            workload: w.into(),
            knobs: [("threads".to_string(), n), ("core_freq_mhz".to_string(), f)]
                .into_iter()
                .collect(),
            time_s: Some(t),
            power_w: Some(p),
            energy_j: Some(t * p),
            ..Point::default()
        }
    }

    #[test]
    fn quadratic_curve_is_exact_through_three_points() {
        let xs = [1.0, 2.0, 3.0];
        let ys: Vec<f64> = xs.iter().map(|x| 2.0 + 3.0 * x - 0.5 * x * x).collect();
        let v = poly_at(&xs, &ys, 5.0).unwrap();
        assert!((v - (2.0 + 15.0 - 12.5)).abs() < 1e-9, "{v}");
        assert_eq!(poly_at(&[4.0], &[7.0], 9.0), Some(7.0));
        let v = poly_at(&[1.0, 3.0], &[1.0, 5.0], 2.0).unwrap();
        assert!((v - 3.0).abs() < 1e-12);
    }

    /// A separable set: y(n, f) = g(n)·h(f). Train on one thread at three clocks plus two
    /// threads at one clock (the E-AMOM split of issue 21); the separable rule is exact at
    /// two threads and the other clocks.
    #[test]
    fn separable_rule_is_exact_on_separable_data() {
        let g = |n: f64| 1.0 / n + 0.2;
        let h = |f: f64| 1000.0 / f;
        let pw = |n: f64, f: f64| (1.0 + n) * f / 1000.0;
        let mut train = Vec::new();
        for f in [1000.0, 1400.0, 1800.0] {
            train.push(pt("a", 1.0, f, g(1.0) * h(f), pw(1.0, f)));
        }
        train.push(pt("a", 2.0, 1000.0, g(2.0) * h(1000.0), pw(2.0, 1000.0)));
        let test = [
            pt("a", 2.0, 1400.0, g(2.0) * h(1400.0), pw(2.0, 1400.0)),
            pt("a", 2.0, 1800.0, g(2.0) * h(1800.0), pw(2.0, 1800.0)),
        ];
        let refs: Vec<&Point> = test.iter().collect();
        let b = knob_baseline(&train, &refs);
        assert!(b.failures.is_empty(), "{:?}", b.failures);
        assert!(b.rule.starts_with("separable"), "{}", b.rule);
        for r in &b.results {
            let m = r.measured.time_s.unwrap();
            assert!((r.predicted.time_s.unwrap() / m - 1.0).abs() < 1e-9);
            let m = r.measured.power_w.unwrap();
            assert!((r.predicted.power_w.unwrap() / m - 1.0).abs() < 1e-9);
        }
    }

    #[test]
    fn median_ratio_transfers_the_other_workloads_shape() {
        let mut pts = Vec::new();
        for (w, scale, bend) in [
            ("a", 1.0, 1.0),
            ("b", 2.0, 1.1),
            ("c", 3.0, 0.9),
            ("d", 5.0, 1.0),
        ] {
            for f in [1000.0, 2000.0] {
                let t = scale * if f == 1000.0 { 2.0 * bend } else { 1.0 };
                pts.push(pt(w, 1.0, f, t, 10.0 * scale));
            }
        }
        let is_base = |p: &Point| p.knobs["core_freq_mhz"] == 2000.0;
        let test: Vec<&Point> = pts.iter().filter(|p| !is_base(p)).collect();
        let b = median_ratio_baseline(&SetMeta::default(), &pts, &test, &is_base, "f=2000");
        assert_eq!(b.results.len(), 4);
        // d's ratio is the median of a (2.0), b (2.2), c (1.8): 2.0, exact for d.
        let d = b.results.iter().find(|r| r.workload == "d").unwrap();
        assert!((d.predicted.time_s.unwrap() - 10.0).abs() < 1e-12);
        // b: median of a (2.0), c (1.8), d (2.0) = 2.0 → 4.0 against 4.4 measured.
        let bb = b.results.iter().find(|r| r.workload == "b").unwrap();
        assert!((bb.predicted.time_s.unwrap() - 4.0).abs() < 1e-12);
    }

    #[test]
    fn unphysical_curve_values_are_refused_with_the_reason() {
        // A line in 1/n through t(1) = 10, t(2) = 2 is 16/n − 6: −4 s at n = 8; power
        // 40 − 10·n: −40 W there. Energy, a line in n through 300 and 40 J, is −1520 J.
        let train = vec![pt("a", 1.0, 1.0, 10.0, 30.0), pt("a", 2.0, 1.0, 2.0, 20.0)];
        let q = pt("a", 8.0, 1.0, 1.0, 5.0);
        let b = knob_baseline(&train, &[&q]);
        assert!(b.results.is_empty(), "{:?}", b.results);
        assert!(b.failures[0].1.contains("time_s"), "{:?}", b.failures);
        // Time valid, power negative: only power (and energy through it) is dropped.
        let train = vec![pt("a", 1.0, 1.0, 10.0, 30.0), pt("a", 2.0, 1.0, 6.0, 20.0)];
        let b = knob_baseline(&train, &[&q]);
        assert!(b.failures.is_empty(), "{:?}", b.failures);
        let r = &b.results[0];
        assert!((r.predicted.time_s.unwrap() - 3.0).abs() < 1e-9, "{r:?}");
        assert_eq!(r.predicted.power_w, None);
    }
}
