//! Analytical DVFS model with an explicit memory-clock term: one curve per workload over both
//! the core clock `f` and the memory clock `m`, instead of one curve per memory clock
//! ([`super::analytic`]).
//!
//! Time: Moore's (2012) split `t = t_mem + t_comp·f0/f`, with the memory part itself scaled
//! by the memory clock (the time of a transfer-bound phase is inversely proportional to the
//! memory clock; the core/memory split that Wang & Chu's GPU core-and-memory DVFS model also
//! starts from):
//!
//! ```text
//! t(f, m) = t_comp·f0/f + t_mem·m0/m + t_other
//! ```
//!
//! `f0`, `m0`: the highest training core and memory clocks (MHz); `t_other` (seconds) scales
//! with neither (launch overheads, PCIe, host work). Weighted least squares (weights `1/t²`,
//! relative error) by linfa-linear.
//!
//! Power: Moore's `P = P_static + c·V²·f` for the core (with `V ∝ f^γ`, `c·(f/f0)^k`, `k`
//! shared by all workloads, chosen on a grid by the relative squared error over all training
//! points, as in [`super::analytic`]) plus a memory-clock dynamic term linear in `m` (the DRAM
//! interface's switching power at a fixed memory voltage):
//!
//! ```text
//! P(f, m) = P_static + c_core·(f/f0)^k + c_mem·m/m0
//! ```
//!
//! Energy: `E = P·t`. Three time and three power coefficients per workload: a group needs
//! three training points over at least two core and two memory clocks.

use super::features::find_group;
use super::{Knobs, ModelError, Prediction};
use linfa::traits::Fit;
use linfa::DatasetBase;
use ndarray::{Array1, Array2};
use powerperf_format::set::{Point, SetMeta};
use serde::{Deserialize, Serialize};

/// The core-clock knob.
pub const CORE_KNOB: &str = "core_freq_mhz";
/// The memory-clock knob.
pub const MEM_KNOB: &str = "mem_freq_mhz";

/// Candidate core-power exponents `k`.
const K_GRID: [f64; 21] = [
    1.0, 1.25, 1.5, 1.75, 2.0, 2.25, 2.5, 2.75, 3.0, 3.25, 3.5, 3.75, 4.0, 4.25, 4.5, 4.75, 5.0,
    5.25, 5.5, 5.75, 6.0,
];

/// One workload (and setting of the knobs other than the two clocks).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemClockGroup {
    pub workload: String,
    pub other_knobs: Knobs,
    /// `(t_comp, t_mem, t_other)`, seconds.
    pub time: Option<(f64, f64, f64)>,
    /// `(P_static, c_core, c_mem)`, watts.
    pub power: Option<(f64, f64, f64)>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub notes: Vec<String>,
}

/// The fitted model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct MemClockModel {
    /// `f0`, `m0`, MHz.
    pub f0_mhz: f64,
    pub m0_mhz: f64,
    /// The shared core-power exponent `k`.
    pub power_exponent: f64,
    pub groups: Vec<MemClockGroup>,
}

fn others(knobs: &Knobs) -> Knobs {
    knobs
        .iter()
        .filter(|(k, _)| *k != CORE_KNOB && *k != MEM_KNOB)
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// Weighted least squares `y ≈ X·β` (no intercept; weights `1/y²`), by linfa-linear on the
/// rows scaled by `1/y`. Returns β and the relative squared error.
fn wls(rows: &[Vec<f64>], y: &[f64]) -> Option<(Vec<f64>, f64)> {
    let p = rows.first()?.len();
    if rows.len() < p {
        return None;
    }
    let mut x = Array2::<f64>::zeros((rows.len(), p));
    let mut yy = Array1::<f64>::zeros(rows.len());
    for (i, (r, v)) in rows.iter().zip(y).enumerate() {
        for (j, c) in r.iter().enumerate() {
            x[[i, j]] = c / v;
        }
        yy[i] = 1.0;
    }
    let ds = DatasetBase::new(x.clone(), yy.clone());
    let m = linfa_linear::LinearRegression::new()
        .with_intercept(false)
        .fit(&ds)
        .ok()?;
    let beta = m.params().to_vec();
    if beta.iter().any(|b| !b.is_finite()) {
        return None;
    }
    let sse = (0..rows.len())
        .map(|i| {
            let pred: f64 = (0..p).map(|j| x[[i, j]] * beta[j]).sum();
            (pred - 1.0).powi(2)
        })
        .sum();
    Some((beta, sse))
}

/// Fit on mean points.
///
/// # Errors
/// [`ModelError::MissingKnob`] without both clock knobs; [`ModelError::NotEnoughData`] when no
/// group has three points over two core and two memory clocks.
pub fn fit(meta: &SetMeta, points: &[Point]) -> Result<MemClockModel, ModelError> {
    for k in [CORE_KNOB, MEM_KNOB] {
        if !points.iter().any(|p| p.knobs.contains_key(k)) {
            return Err(ModelError::MissingKnob {
                knob: k.into(),
                model: "analytic_mem".into(),
                fix: "use a set with both a core and a memory clock (e.g. titanx-micro), or --model analytic".into(),
            });
        }
    }
    let usable: Vec<&Point> = points
        .iter()
        .filter(|p| p.knobs.contains_key(CORE_KNOB) && p.knobs.contains_key(MEM_KNOB))
        .collect();
    let f0 = usable
        .iter()
        .map(|p| p.knobs[CORE_KNOB])
        .fold(0.0, f64::max);
    let m0 = usable.iter().map(|p| p.knobs[MEM_KNOB]).fold(0.0, f64::max);
    let mut groups: Vec<(String, Knobs, Vec<&Point>)> = Vec::new();
    for p in &usable {
        let o = others(&p.knobs);
        match groups.iter_mut().find(|g| g.0 == p.workload && g.1 == o) {
            Some(g) => g.2.push(p),
            None => groups.push((p.workload.clone(), o, vec![p])),
        }
    }
    let distinct = |v: Vec<f64>| {
        let mut v = v;
        v.sort_by(f64::total_cmp);
        v.dedup();
        v.len()
    };
    // Power rows per group, for the shared k.
    let power_rows = |pts: &[&Point], k: f64| -> (Vec<Vec<f64>>, Vec<f64>) {
        let mut rows = Vec::new();
        let mut y = Vec::new();
        for p in pts {
            if let Some(w) = p.power_w.filter(|w| *w > 0.0) {
                rows.push(vec![
                    1.0,
                    (p.knobs[CORE_KNOB] / f0).powf(k),
                    p.knobs[MEM_KNOB] / m0,
                ]);
                y.push(w);
            }
        }
        (rows, y)
    };
    let enough = |pts: &[&Point]| {
        pts.len() >= 3
            && distinct(pts.iter().map(|p| p.knobs[CORE_KNOB]).collect()) >= 2
            && distinct(pts.iter().map(|p| p.knobs[MEM_KNOB]).collect()) >= 2
    };
    let k = K_GRID
        .iter()
        .copied()
        .map(|k| {
            let sse: f64 = groups
                .iter()
                .filter(|g| meta.is_reliable("power_w", &g.0) && enough(&g.2))
                .filter_map(|g| {
                    let (r, y) = power_rows(&g.2, k);
                    wls(&r, &y).map(|s| s.1)
                })
                .sum();
            (k, sse)
        })
        .min_by(|a, b| a.1.total_cmp(&b.1))
        .map_or(3.0, |b| b.0);
    let mut out = Vec::new();
    for (workload, other, pts) in &groups {
        let mut notes = Vec::new();
        if !enough(pts) {
            notes.push(format!(
                "{} point(s); needs 3 over two core and two memory clocks",
                pts.len()
            ));
        }
        let time = if !meta.is_reliable("time_s", workload) {
            notes.push("time_s unreliable (set.toml)".into());
            None
        } else if enough(pts) {
            let (rows, y): (Vec<Vec<f64>>, Vec<f64>) = pts
                .iter()
                .filter_map(|p| {
                    let t = p.time_s.filter(|t| *t > 0.0)?;
                    Some((
                        vec![f0 / p.knobs[CORE_KNOB], m0 / p.knobs[MEM_KNOB], 1.0],
                        t,
                    ))
                })
                .unzip();
            wls(&rows, &y).map(|(b, _)| (b[0], b[1], b[2]))
        } else {
            None
        };
        let power = if !meta.is_reliable("power_w", workload) {
            notes.push("power_w unreliable (set.toml)".into());
            None
        } else if enough(pts) {
            let (r, y) = power_rows(pts, k);
            wls(&r, &y).map(|(b, _)| (b[0], b[1], b[2]))
        } else {
            None
        };
        out.push(MemClockGroup {
            workload: workload.clone(),
            other_knobs: other.clone(),
            time,
            power,
            notes,
        });
    }
    if out.iter().all(|g| g.time.is_none() && g.power.is_none()) {
        return Err(ModelError::NotEnoughData {
            model: "analytic_mem".into(),
            what: "no workload has 3 points over two core and two memory clocks".into(),
        });
    }
    Ok(MemClockModel {
        f0_mhz: f0,
        m0_mhz: m0,
        power_exponent: k,
        groups: out,
    })
}

impl MemClockModel {
    /// Predict `workload` at `knobs` (both clocks, MHz).
    ///
    /// # Errors
    /// A missing clock knob, or no group for the workload at the other knob values.
    pub fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction, ModelError> {
        let get = |k: &str| {
            knobs
                .get(k)
                .copied()
                .ok_or_else(|| ModelError::MissingKnob {
                    knob: k.into(),
                    model: "analytic_mem".into(),
                    fix: format!("pass --knob {k}=…"),
                })
        };
        let (f, m) = (get(CORE_KNOB)?, get(MEM_KNOB)?);
        let o = others(knobs);
        let g = find_group(&self.groups, workload, &o, knobs, |g| {
            (g.workload.as_str(), &g.other_knobs)
        })?;
        let time_s = g
            .time
            .map(|(tc, tm, to)| tc * self.f0_mhz / f + tm * self.m0_mhz / m + to);
        let power_w = g.power.map(|(ps, cc, cm)| {
            ps + cc * (f / self.f0_mhz).powf(self.power_exponent) + cm * m / self.m0_mhz
        });
        Ok(Prediction {
            time_s,
            power_w,
            energy_j: time_s.zip(power_w).map(|(t, p)| t * p),
        })
    }

    /// What was fitted, for `fit --explain`.
    pub fn explain(&self) -> String {
        let mut s = format!(
            "analytic DVFS model with a memory-clock term: t = t_comp·f0/f + t_mem·m0/m + t_other, P = P_static + c_core·(f/f0)^k + c_mem·m/m0, E = P·t\nf0 = {} MHz, m0 = {} MHz, k = {}\n",
            self.f0_mhz, self.m0_mhz, self.power_exponent
        );
        s += "workload                         t_comp_s   t_mem_s t_other_s  P_static_w c_core_w  c_mem_w\n";
        for g in &self.groups {
            let (a, b, c) = g.time.unwrap_or((f64::NAN, f64::NAN, f64::NAN));
            let (d, e, h) = g.power.unwrap_or((f64::NAN, f64::NAN, f64::NAN));
            s += &format!(
                "{:<32} {a:>9.4} {b:>9.4} {c:>9.4} {d:>11.2} {e:>8.2} {h:>8.2}{}\n",
                g.workload,
                if g.notes.is_empty() {
                    String::new()
                } else {
                    format!("  ({})", g.notes.join("; "))
                }
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pt(w: &str, f: f64, m: f64, t: f64, p: f64) -> Point {
        Point {
            workload: w.into(),
            knobs: [(CORE_KNOB.to_string(), f), (MEM_KNOB.to_string(), m)]
                .into_iter()
                .collect(),
            time_s: Some(t),
            power_w: Some(p),
            ..Point::default()
        }
    }

    /// Known answer: t = 2·1000/f + 3·3000/m + 0.5, P = 20 + 40·(f/1000)^2.5 + 10·m/3000.
    fn truth(f: f64, m: f64) -> (f64, f64) {
        (
            2.0 * 1000.0 / f + 3.0 * 3000.0 / m + 0.5,
            20.0 + 40.0 * (f / 1000.0f64).powf(2.5) + 10.0 * m / 3000.0,
        )
    }

    #[test]
    fn three_points_determine_the_time_curve_exactly() {
        let pts: Vec<Point> = [(500.0, 1000.0), (1000.0, 1000.0), (1000.0, 3000.0)]
            .iter()
            .map(|(f, m)| {
                let (t, p) = truth(*f, *m);
                pt("a", *f, *m, t, p)
            })
            .collect();
        let model = fit(&SetMeta::default(), &pts).unwrap();
        let (tc, tm, to) = model.groups[0].time.unwrap();
        assert!((tc - 2.0).abs() < 1e-9 && (tm - 3.0).abs() < 1e-9 && (to - 0.5).abs() < 1e-9);
    }

    #[test]
    fn known_answer_at_unseen_clock_pairs() {
        let mut pts = Vec::new();
        for f in [500.0, 750.0, 1000.0] {
            for m in [1000.0, 3000.0] {
                let (t, p) = truth(f, m);
                pts.push(pt("a", f, m, t, p));
            }
        }
        let model = fit(&SetMeta::default(), &pts).unwrap();
        assert_eq!(model.power_exponent, 2.5);
        for (f, m) in [(600.0, 2000.0), (900.0, 1500.0)] {
            let (t, p) = truth(f, m);
            let pr = model
                .predict(
                    "a",
                    &[(CORE_KNOB.to_string(), f), (MEM_KNOB.to_string(), m)]
                        .into_iter()
                        .collect(),
                )
                .unwrap();
            assert!((pr.time_s.unwrap() - t).abs() / t < 1e-9, "{pr:?} vs {t}");
            assert!((pr.power_w.unwrap() - p).abs() / p < 1e-9, "{pr:?} vs {p}");
            assert!((pr.energy_j.unwrap() - t * p).abs() / (t * p) < 1e-9);
        }
    }

    #[test]
    fn one_memory_clock_is_a_clear_error() {
        let pts: Vec<Point> = [500.0, 750.0, 1000.0]
            .iter()
            .map(|f| pt("a", *f, 3000.0, 1.0, 1.0))
            .collect();
        let e = fit(&SetMeta::default(), &pts).unwrap_err().to_string();
        assert!(e.contains("two memory clocks"), "{e}");
    }
}
