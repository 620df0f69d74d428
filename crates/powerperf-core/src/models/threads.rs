//! Thread-count model: time by Amdahl's law, power linear in the active cores, energy = P·t.
//!
//! - Time (Amdahl, AFIPS 1967): `t(n) = t_serial + t_parallel / n`, per (workload, other knob
//!   values), weighted least squares with weights `1/t²` (relative error); a negative part is
//!   clamped to zero and the other refitted. Two thread counts determine it exactly.
//! - Power: `P(n) = P_0 + n·P_core`: idle/uncore power plus a per-active-core term (the
//!   multicore energy model of Loghin & Teo, Parallel Computing 2019, whose data powerperf
//!   evaluates on), weighted least squares.
//! - Energy: `E(n) = P(n)·t(n)`.
//!
//! Gustafson's law (scaled speedup) describes weak scaling, where the problem grows with `n`;
//! the shared data and `collect` runs are strong scaling (fixed problem), so Amdahl is the form
//! fitted here. Trained on low thread counts, it extrapolates to higher ones.

use super::features::{find_group, knob_key};
use super::{Knobs, ModelError, Prediction};
use powerperf_format::set::{Point, SetMeta};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The thread-count knob.
pub const THREADS_KNOB: &str = "threads";

/// One (workload, other knob values) fit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadsGroup {
    pub workload: String,
    pub other_knobs: Knobs,
    pub train_threads: Vec<f64>,
    /// `t_serial`, seconds.
    pub t_serial_s: Option<f64>,
    /// `t_parallel` (the parallel part at one thread), seconds.
    pub t_parallel_s: Option<f64>,
    /// `P_0`, watts.
    pub p0_w: Option<f64>,
    /// `P_core`, watts per thread.
    pub p_core_w: Option<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The fitted thread-count model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadsModel {
    pub groups: Vec<ThreadsGroup>,
}

fn wls_line(x: &[f64], y: &[f64], w: &[f64]) -> Option<(f64, f64)> {
    let (mut sw, mut sx, mut sy, mut sxx, mut sxy) = (0.0, 0.0, 0.0, 0.0, 0.0);
    for i in 0..x.len() {
        sw += w[i];
        sx += w[i] * x[i];
        sy += w[i] * y[i];
        sxx += w[i] * x[i] * x[i];
        sxy += w[i] * x[i] * y[i];
    }
    let det = sw * sxx - sx * sx;
    if det == 0.0 || !det.is_finite() {
        return None;
    }
    Some(((sxx * sy - sx * sxy) / det, (sw * sxy - sx * sy) / det))
}

/// Fit on mean points.
///
/// # Errors
/// [`ModelError::MissingKnob`] without a `threads` knob; [`ModelError::NotEnoughData`] when no
/// workload has two thread counts.
pub fn fit(meta: &SetMeta, points: &[Point]) -> Result<ThreadsModel, ModelError> {
    // Per workload and other knobs: the (thread count, point) pairs.
    type Group<'a> = (String, Knobs, Vec<(f64, &'a Point)>);
    let mut groups: Vec<Group> = Vec::new();
    let mut index: BTreeMap<String, usize> = BTreeMap::new();
    for p in points {
        let Some(n) = p.knobs.get(THREADS_KNOB).copied().filter(|n| *n > 0.0) else {
            continue;
        };
        let other: Knobs = p
            .knobs
            .iter()
            .filter(|(k, _)| *k != THREADS_KNOB)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let key = format!("{}\u{1f}{}", p.workload, knob_key(&other));
        let i = *index.entry(key).or_insert_with(|| {
            groups.push((p.workload.clone(), other.clone(), Vec::new()));
            groups.len() - 1
        });
        groups[i].2.push((n, p));
    }
    if groups.is_empty() {
        return Err(ModelError::MissingKnob {
            knob: THREADS_KNOB.into(),
            model: "threads".into(),
            fix: "collect runs with OMP_NUM_THREADS set, or import a set with a `threads` knob"
                .into(),
        });
    }
    let mut out = Vec::new();
    for (workload, other, mut pts) in groups {
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        let mut notes = Vec::new();
        let (mut t_serial_s, mut t_parallel_s) = (None, None);
        if meta.is_reliable("time_s", &workload) {
            let tp: Vec<(f64, f64)> = pts
                .iter()
                .filter_map(|(n, p)| p.time_s.filter(|t| *t > 0.0).map(|t| (*n, t)))
                .collect();
            let x: Vec<f64> = tp.iter().map(|(n, _)| 1.0 / n).collect();
            let y: Vec<f64> = tp.iter().map(|p| p.1).collect();
            let w: Vec<f64> = y.iter().map(|t| 1.0 / (t * t)).collect();
            if let (true, Some((mut ts, mut tpar))) = (tp.len() >= 2, wls_line(&x, &y, &w)) {
                if ts < 0.0 {
                    ts = 0.0;
                    tpar = (0..x.len()).map(|i| w[i] * x[i] * y[i]).sum::<f64>()
                        / (0..x.len()).map(|i| w[i] * x[i] * x[i]).sum::<f64>();
                } else if tpar < 0.0 {
                    tpar = 0.0;
                    ts = (0..x.len()).map(|i| w[i] * y[i]).sum::<f64>() / w.iter().sum::<f64>();
                }
                t_serial_s = Some(ts);
                t_parallel_s = Some(tpar);
            } else {
                notes.push(format!(
                    "time_s: {} thread count(s) with a time, needs 2",
                    tp.len()
                ));
            }
        } else {
            notes.push("time_s unreliable for this workload (set.toml)".into());
        }
        let (mut p0_w, mut p_core_w) = (None, None);
        if meta.is_reliable("power_w", &workload) {
            let pp: Vec<(f64, f64)> = pts
                .iter()
                .filter_map(|(n, p)| p.power_w.filter(|w| *w > 0.0).map(|w| (*n, w)))
                .collect();
            let x: Vec<f64> = pp.iter().map(|p| p.0).collect();
            let y: Vec<f64> = pp.iter().map(|p| p.1).collect();
            let w: Vec<f64> = y.iter().map(|v| 1.0 / (v * v)).collect();
            if let (true, Some((a, b))) = (pp.len() >= 2, wls_line(&x, &y, &w)) {
                p0_w = Some(a);
                p_core_w = Some(b);
            } else {
                notes.push(format!(
                    "power_w: {} thread count(s) with a power, needs 2",
                    pp.len()
                ));
            }
        } else {
            notes.push("power_w unreliable for this workload (set.toml)".into());
        }
        out.push(ThreadsGroup {
            workload,
            other_knobs: other,
            train_threads: pts.iter().map(|p| p.0).collect(),
            t_serial_s,
            t_parallel_s,
            p0_w,
            p_core_w,
            notes,
        });
    }
    if out
        .iter()
        .all(|g| g.t_serial_s.is_none() && g.p0_w.is_none())
    {
        return Err(ModelError::NotEnoughData {
            model: "threads".into(),
            what: "no workload has two thread counts with a time or power".into(),
        });
    }
    Ok(ThreadsModel { groups: out })
}

impl ThreadsModel {
    /// Predict `workload` at `knobs` (must include `threads`).
    ///
    /// # Errors
    /// Missing `threads`, or no fit for this workload at the other knob values.
    pub fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction, ModelError> {
        let n = *knobs
            .get(THREADS_KNOB)
            .ok_or_else(|| ModelError::MissingKnob {
                knob: THREADS_KNOB.into(),
                model: "threads".into(),
                fix: "pass --knob threads=…".into(),
            })?;
        let other: Knobs = knobs
            .iter()
            .filter(|(k, _)| *k != THREADS_KNOB)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let g = find_group(&self.groups, workload, &other, knobs, |g| {
            (g.workload.as_str(), &g.other_knobs)
        })?;
        let time_s = match (g.t_serial_s, g.t_parallel_s) {
            (Some(s), Some(p)) => Some(s + p / n),
            _ => None,
        };
        let power_w = match (g.p0_w, g.p_core_w) {
            (Some(a), Some(b)) => Some(a + b * n),
            _ => None,
        };
        let energy_j = time_s.zip(power_w).map(|(t, w)| t * w);
        Ok(Prediction {
            time_s,
            power_w,
            energy_j,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(n: f64, t: f64, w: f64) -> Point {
        Point {
            workload: "a".into(),
            knobs: [(THREADS_KNOB.to_string(), n)].into_iter().collect(),
            time_s: Some(t),
            power_w: Some(w),
            ..Point::default()
        }
    }

    #[test]
    fn two_thread_counts_determine_amdahl_exactly() {
        // t = 2 + 8/n, P = 30 + 5n.
        let pts = vec![pt(1.0, 10.0, 35.0), pt(2.0, 6.0, 40.0)];
        let m = fit(&SetMeta::default(), &pts).unwrap();
        let k: Knobs = [(THREADS_KNOB.to_string(), 8.0)].into_iter().collect();
        let pr = m.predict("a", &k).unwrap();
        assert!((pr.time_s.unwrap() - 3.0).abs() < 1e-12);
        assert!((pr.power_w.unwrap() - 70.0).abs() < 1e-12);
        assert!((pr.energy_j.unwrap() - 210.0).abs() < 1e-9);
    }

    #[test]
    fn negative_serial_part_is_clamped() {
        // Superlinear: t(1)=10, t(2)=4 would give t_s = -2; clamped to a pure 1/n fit.
        let pts = vec![pt(1.0, 10.0, 35.0), pt(2.0, 4.0, 40.0)];
        let m = fit(&SetMeta::default(), &pts).unwrap();
        assert_eq!(m.groups[0].t_serial_s, Some(0.0));
        assert!(m.groups[0].t_parallel_s.unwrap() > 0.0);
    }

    #[test]
    fn no_threads_knob_is_a_clear_error() {
        let mut p = pt(1.0, 1.0, 1.0);
        p.knobs.clear();
        let err = fit(&SetMeta::default(), &[p]).unwrap_err().to_string();
        assert!(err.contains("threads"), "{err}");
    }
}
