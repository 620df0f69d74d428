//! In-sample noise floor of a knob curve: how closely a smooth curve can follow the
//! measurements at all, when it is fitted to every point (nothing held out).
//!
//! For each (workload, other knob values) group, a polynomial of degree `d` in one knob is
//! fitted by least squares to **all** of the group's points, and the absolute percentage
//! error of the fit at those same points is reported. This is an in-sample number, not a
//! held-out error: a held-out prediction of the same curve from fewer points cannot be
//! expected to do better on average, so it bounds what a knob-holdout target can ask for.
//! (On the V100 set a cubic in the SM clock over all 117 clocks leaves 1.91 % power MAPE,
//! docs/models.md.)

use super::features::knob_key;
use super::Knobs;
use powerperf_format::set::{Point, SetMeta, TARGETS};
use serde::Serialize;
use std::collections::BTreeMap;

/// The floor of one target.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct TargetFloor {
    pub target: String,
    /// Mean and median absolute percentage error of the in-sample fits, percent.
    pub mape_pct: f64,
    pub median_pct: f64,
    pub n: usize,
    /// Per group (`workload knobs`): MAPE, percent, largest first.
    pub groups: Vec<(String, f64)>,
}

/// Polynomial least squares of `y` on `x` (degree capped at the number of distinct
/// `x` − 1), evaluated at `x`. `x` is mapped onto `[-1, 1]` first.
fn poly_fit_values(x: &[f64], y: &[f64], degree: usize) -> Option<Vec<f64>> {
    let lo = x.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = x.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    let span = if hi > lo { hi - lo } else { 1.0 };
    let mut distinct = x.to_vec();
    distinct.sort_by(f64::total_cmp);
    distinct.dedup();
    let d = degree.min(distinct.len().saturating_sub(1));
    let m = d + 1;
    let u: Vec<f64> = x.iter().map(|v| 2.0 * (v - lo) / span - 1.0).collect();
    let a: Vec<f64> = u
        .iter()
        .flat_map(|u| (0..m).map(move |e| u.powi(e as i32)))
        .collect();
    let beta = super::scaling::weighted_least_squares(&a, m, y, &vec![1.0; y.len()])?;
    Some(
        u.iter()
            .map(|u| (0..m).map(|e| beta[e] * u.powi(e as i32)).sum())
            .collect(),
    )
}

/// The in-sample noise floor of every target the set has, for curves in `knob` of degree
/// `degree`, skipping targets the set marks unreliable for a workload.
pub fn noise_floor(
    meta: &SetMeta,
    points: &[Point],
    knob: &str,
    degree: usize,
) -> Vec<TargetFloor> {
    let mut groups: BTreeMap<(String, String), Vec<&Point>> = BTreeMap::new();
    for p in points.iter().filter(|p| p.knobs.contains_key(knob)) {
        let mut other: Knobs = p.knobs.clone();
        other.remove(knob);
        groups
            .entry((p.workload.clone(), knob_key(&other)))
            .or_default()
            .push(p);
    }
    let mut out = Vec::new();
    for t in TARGETS {
        let mut all = Vec::new();
        let mut per = Vec::new();
        for ((w, other), ps) in &groups {
            if !meta.is_reliable(t, w) {
                continue;
            }
            let (x, y): (Vec<f64>, Vec<f64>) = ps
                .iter()
                .filter_map(|p| {
                    p.target(t)
                        .filter(|v| v.is_finite() && *v != 0.0)
                        .map(|v| (p.knobs[knob], v))
                })
                .unzip();
            if x.len() < 2 {
                continue;
            }
            let Some(fitv) = poly_fit_values(&x, &y, degree) else {
                continue;
            };
            let errs: Vec<f64> = fitv
                .iter()
                .zip(&y)
                .map(|(f, m)| ((f - m) / m).abs() * 100.0)
                .collect();
            per.push((
                format!("{w} {other}").trim().to_string(),
                errs.iter().sum::<f64>() / errs.len() as f64,
            ));
            all.extend(errs);
        }
        if all.is_empty() {
            continue;
        }
        let mean = all.iter().sum::<f64>() / all.len() as f64;
        let mut sorted = all.clone();
        sorted.sort_by(f64::total_cmp);
        let median = if sorted.len() % 2 == 1 {
            sorted[sorted.len() / 2]
        } else {
            0.5 * (sorted[sorted.len() / 2 - 1] + sorted[sorted.len() / 2])
        };
        per.sort_by(|a, b| b.1.total_cmp(&a.1));
        out.push(TargetFloor {
            target: t.to_string(),
            mape_pct: mean,
            median_pct: median,
            n: all.len(),
            groups: per,
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(w: &str, f: f64, p: f64) -> Point {
        Point {
            workload: w.into(),
            knobs: [("core_freq_mhz".to_string(), f)].into_iter().collect(),
            power_w: Some(p),
            ..Point::default()
        }
    }

    #[test]
    fn a_cubic_curve_has_no_floor_and_noise_sets_it() {
        let clocks: Vec<f64> = (0..20).map(|i| 500.0 + 50.0 * i as f64).collect();
        let cubic = |f: f64| 30.0 + 1e-7 * f.powi(3) + 0.01 * f;
        let exact: Vec<Point> = clocks.iter().map(|&f| pt("a", f, cubic(f))).collect();
        let fl = noise_floor(&SetMeta::default(), &exact, "core_freq_mhz", 3);
        assert_eq!(fl.len(), 1);
        assert!(fl[0].mape_pct < 1e-9, "{}", fl[0].mape_pct);
        // ±2 % alternating noise: a cubic cannot follow it, the floor is close to 2 %.
        let noisy: Vec<Point> = clocks
            .iter()
            .enumerate()
            .map(|(i, &f)| pt("a", f, cubic(f) * if i % 2 == 0 { 1.02 } else { 0.98 }))
            .collect();
        let fl = noise_floor(&SetMeta::default(), &noisy, "core_freq_mhz", 3);
        assert!((fl[0].mape_pct - 2.0).abs() < 0.2, "{}", fl[0].mape_pct);
        assert_eq!(fl[0].n, 20);
    }
}
