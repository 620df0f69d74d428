//! Regression on counter rates: the multivariate linear model (`linear`) and supervised PCA
//! (`spca`), both predicting a target relative to the workload's baseline setting.
//!
//! Following Moore (2012) and Lively et al. (EnA-HPC 2011), the response is the ratio of a
//! target at a knob setting to its value at the workload's baseline setting,
//! `T(k)/T(k0) = α0 + α1·x1 + α2·x2 + …`, fitted by least squares (linfa-linear) over every
//! training point of every workload. The inputs `x` are known before running at `k`:
//!
//! - knob terms, for each knob K: `u(K) = K0/K − 1` (the clock-scaled share of time, Moore's
//!   `f0/f`) and `v(K) = (K/K0)³ − 1` (dynamic power `c·V²·f` with `V ∝ f`);
//! - each counter rate `r` measured at the baseline setting (see [`super::features::rates`]:
//!   per cycle, per second, or an activity fraction) times each knob term: `r·u(K)`, `r·v(K)`,
//!   so the shape of a workload's curve follows its counters.
//!
//! Columns are standardised (training mean and standard deviation) before fitting; a column
//! with no variance, or collinear with earlier columns (Gram–Schmidt residual below `1e-9` of
//! its norm), is dropped and the model file says so. Energy is predicted as `P·t`.
//!
//! `spca` selects the columns by the six steps of shared/DESIGN.md ("Supervised PCA"), every
//! threshold a field of [`SpcaParams`], and records each step in [`SpcaStep`]s.

use super::features::{knob_key, rates, spearman};
use super::{Knobs, ModelError, Prediction};
use crate::store::set::{Point, SetMeta};
use linfa::traits::Fit;
use linfa::DatasetBase;
use ndarray::{Array1, Array2, Axis};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Targets the regressions fit directly (energy is `P·t`).
pub const REGRESSION_TARGETS: [&str; 2] = ["time_s", "power_w"];

/// Thresholds of supervised PCA (shared/DESIGN.md steps 2, 4, 5, 6).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct SpcaParams {
    /// Step 2: drop columns with |Spearman ρ| below this.
    pub rho_min: f64,
    /// Step 4: drop columns whose |standardised coefficient| is below this fraction of the
    /// largest.
    pub coef_min_frac: f64,
    /// Step 5: leading components explain at least this share of the variance.
    pub variance_kept: f64,
    /// Step 6: columns kept per leading component (largest |loading|).
    pub per_component: usize,
    /// Step 6: at most this many columns in the final regression.
    pub max_features: usize,
}

impl Default for SpcaParams {
    fn default() -> Self {
        Self {
            rho_min: 0.3,
            coef_min_frac: 0.05,
            variance_kept: 0.9,
            per_component: 2,
            max_features: 8,
        }
    }
}

/// Parameters of the regression models.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
#[serde(default)]
pub struct RegressionParams {
    /// The baseline setting (e.g. `core_freq_mhz=1380`); `None`: per workload, its training point
    /// with the highest knob values (compared knob by knob in name order).
    pub baseline: Option<Knobs>,
    /// Supervised-PCA thresholds (used by `spca`).
    pub spca: SpcaParams,
}

/// A column and why it was kept or dropped at a step.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct FeatureNote {
    pub feature: String,
    /// The statistic the decision used (ρ, coefficient, loading), when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub value: Option<f64>,
    pub reason: String,
}

/// One step of the selection.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SpcaStep {
    pub step: String,
    pub kept: Vec<FeatureNote>,
    pub dropped: Vec<FeatureNote>,
}

/// The fitted regression of one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetFit {
    pub target: String,
    /// Columns of the final regression.
    pub features: Vec<String>,
    /// Training mean and standard deviation of each column.
    pub means: Vec<f64>,
    pub stds: Vec<f64>,
    /// Coefficients on the standardised columns, and the intercept (ratio at the column means).
    pub coefficients: Vec<f64>,
    pub intercept: f64,
    /// Training rows.
    pub rows: usize,
    /// Selection steps (columns dropped for no variance or collinearity; the six spca steps).
    pub steps: Vec<SpcaStep>,
}

/// A workload's baseline: its knobs, targets and counter rates there.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Baseline {
    pub knobs: Knobs,
    pub time_s: Option<f64>,
    pub power_w: Option<f64>,
    pub rates: BTreeMap<String, f64>,
}

/// The fitted `linear` or `spca` model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RegressionModel {
    /// `linear` or `spca`.
    pub method: String,
    pub params: RegressionParams,
    /// How counter rates were normalised.
    pub rate_basis: String,
    /// Knobs with terms in the model.
    pub knobs: Vec<String>,
    /// Rates used as inputs (present at the baseline of every training workload).
    pub rates: Vec<String>,
    /// Rates left out because some workload's baseline lacks them.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub rates_missing_somewhere: Vec<String>,
    pub baselines: BTreeMap<String, Baseline>,
    pub targets: Vec<TargetFit>,
    /// Targets marked unreliable, by workload (`*` = all).
    #[serde(default)]
    pub unreliable: BTreeMap<String, Vec<String>>,
}

fn is_baseline(knobs: &Knobs, base: &Knobs) -> bool {
    base.iter().all(|(k, v)| knobs.get(k) == Some(v))
}

/// The candidate columns of one row (names and values) for `knobs` given a baseline.
fn row_features(
    model_knobs: &[String],
    rate_names: &[String],
    base: &Baseline,
    knobs: &Knobs,
) -> Result<Vec<f64>, ModelError> {
    let mut terms = Vec::new();
    for k in model_knobs {
        let b = base.knobs.get(k).copied().unwrap_or(f64::NAN);
        let v = knobs
            .get(k)
            .copied()
            .ok_or_else(|| ModelError::MissingKnob {
                knob: k.clone(),
                model: "regression".into(),
                fix: format!("pass --knob {k}=…"),
            })?;
        terms.push(b / v - 1.0);
        terms.push((v / b).powi(3) - 1.0);
    }
    let mut out = terms.clone();
    for r in rate_names {
        let rv = base.rates.get(r).copied().unwrap_or(f64::NAN);
        out.extend(terms.iter().map(|t| rv * t));
    }
    Ok(out)
}

fn column_names(model_knobs: &[String], rate_names: &[String]) -> Vec<String> {
    let mut terms = Vec::new();
    for k in model_knobs {
        terms.push(format!("u({k})"));
        terms.push(format!("v({k})"));
    }
    let mut out = terms.clone();
    for r in rate_names {
        out.extend(terms.iter().map(|t| format!("{r}·{t}")));
    }
    out
}

fn ols(x: &Array2<f64>, y: &Array1<f64>, model: &str) -> Result<(Vec<f64>, f64), ModelError> {
    if x.ncols() == 0 {
        let m = y.mean().unwrap_or(1.0);
        return Ok((Vec::new(), m));
    }
    if x.nrows() <= x.ncols() {
        return Err(ModelError::NotEnoughData {
            model: model.into(),
            what: format!(
                "{} training rows for {} columns (needs more rows than columns)",
                x.nrows(),
                x.ncols()
            ),
        });
    }
    let ds = DatasetBase::new(x.clone(), y.clone());
    let fitted = linfa_linear::LinearRegression::new()
        .fit(&ds)
        .map_err(|e| ModelError::Fit {
            model: model.into(),
            what: e.to_string(),
        })?;
    Ok((fitted.params().to_vec(), fitted.intercept()))
}

/// Standardise columns; drop constant and collinear ones. Returns kept indices, means, stds
/// and the step record.
fn prepare_columns(
    x: &Array2<f64>,
    names: &[String],
) -> (Vec<usize>, Vec<f64>, Vec<f64>, SpcaStep) {
    let n = x.nrows() as f64;
    let mut kept = Vec::new();
    let mut means = Vec::new();
    let mut stds = Vec::new();
    let mut notes_kept = Vec::new();
    let mut dropped = Vec::new();
    let mut basis: Vec<Array1<f64>> = Vec::new();
    for j in 0..x.ncols() {
        let col = x.column(j);
        if col.iter().any(|v| !v.is_finite()) {
            dropped.push(FeatureNote {
                feature: names[j].clone(),
                value: None,
                reason: "not finite in some row".into(),
            });
            continue;
        }
        let m = col.sum() / n;
        let sd = (col.iter().map(|v| (v - m).powi(2)).sum::<f64>() / n).sqrt();
        if !(sd > 1e-12 * m.abs().max(1e-300)) || sd == 0.0 {
            dropped.push(FeatureNote {
                feature: names[j].clone(),
                value: Some(sd),
                reason: "no variance over the training rows".into(),
            });
            continue;
        }
        let z: Array1<f64> = col.mapv(|v| (v - m) / sd);
        let mut r = z.clone();
        for q in &basis {
            let c = r.dot(q);
            r.scaled_add(-c, q);
        }
        let norm = r.dot(&r).sqrt();
        if norm < 1e-6 * n.sqrt() {
            dropped.push(FeatureNote {
                feature: names[j].clone(),
                value: None,
                reason: "collinear with earlier columns".into(),
            });
            continue;
        }
        basis.push(r / norm);
        kept.push(j);
        means.push(m);
        stds.push(sd);
        notes_kept.push(FeatureNote {
            feature: names[j].clone(),
            value: None,
            reason: "varies and is not collinear".into(),
        });
    }
    let step = SpcaStep {
        step: "0. candidate columns: standardised; constant or collinear ones dropped".into(),
        kept: notes_kept,
        dropped,
    };
    (kept, means, stds, step)
}

fn standardised(x: &Array2<f64>, cols: &[usize], means: &[f64], stds: &[f64]) -> Array2<f64> {
    let mut z = Array2::zeros((x.nrows(), cols.len()));
    for (c, &j) in cols.iter().enumerate() {
        for i in 0..x.nrows() {
            z[[i, c]] = (x[[i, j]] - means[c]) / stds[c];
        }
    }
    z
}

/// The six supervised-PCA steps on standardised columns `z` (named `names`); returns indices
/// into `z`'s columns and the step records.
fn spca_select(
    z: &Array2<f64>,
    y: &Array1<f64>,
    names: &[String],
    p: &SpcaParams,
) -> Result<(Vec<usize>, Vec<SpcaStep>), ModelError> {
    let mut steps = Vec::new();
    // 1-2. Spearman filter.
    let yv = y.to_vec();
    let rhos: Vec<Option<f64>> = (0..z.ncols())
        .map(|j| spearman(&z.column(j).to_vec(), &yv))
        .collect();
    let mut cur: Vec<usize> = Vec::new();
    let mut kept = Vec::new();
    let mut dropped = Vec::new();
    for (j, r) in rhos.iter().enumerate() {
        match r {
            Some(r) if r.abs() >= p.rho_min => {
                cur.push(j);
                kept.push(FeatureNote {
                    feature: names[j].clone(),
                    value: Some(*r),
                    reason: format!("|ρ| ≥ {}", p.rho_min),
                });
            }
            Some(r) => dropped.push(FeatureNote {
                feature: names[j].clone(),
                value: Some(*r),
                reason: format!("|ρ| < {}", p.rho_min),
            }),
            None => dropped.push(FeatureNote {
                feature: names[j].clone(),
                value: None,
                reason: "ρ undefined (constant ranks)".into(),
            }),
        }
    }
    if cur.is_empty() {
        if let Some((j, r)) = rhos
            .iter()
            .enumerate()
            .filter_map(|(j, r)| r.map(|r| (j, r)))
            .max_by(|a, b| a.1.abs().total_cmp(&b.1.abs()))
        {
            cur.push(j);
            kept.push(FeatureNote {
                feature: names[j].clone(),
                value: Some(r),
                reason: "largest |ρ| (no column passed the threshold)".into(),
            });
        }
    }
    steps.push(SpcaStep {
        step: "1-2. Spearman rank correlation with the target; drop low |ρ|".into(),
        kept,
        dropped,
    });
    // 3-4. Regression; drop negligible coefficients.
    let sub = z.select(Axis(1), &cur);
    let (coefs, _) = ols(&sub, y, "spca")?;
    let maxc = coefs.iter().fold(0.0f64, |m, c| m.max(c.abs()));
    let mut next = Vec::new();
    let (mut kept, mut dropped) = (Vec::new(), Vec::new());
    for (i, &j) in cur.iter().enumerate() {
        let c = coefs[i];
        if maxc > 0.0 && c.abs() >= p.coef_min_frac * maxc {
            next.push(j);
            kept.push(FeatureNote {
                feature: names[j].clone(),
                value: Some(c),
                reason: format!("|coefficient| ≥ {} × largest", p.coef_min_frac),
            });
        } else {
            dropped.push(FeatureNote {
                feature: names[j].clone(),
                value: Some(c),
                reason: format!("|coefficient| < {} × largest ({maxc:.4})", p.coef_min_frac),
            });
        }
    }
    steps.push(SpcaStep {
        step:
            "3-4. linear regression on the kept columns; drop negligible standardised coefficients"
                .into(),
        kept,
        dropped,
    });
    let cur = next;
    if cur.len() <= 1 {
        steps.push(SpcaStep {
            step: "5-6. PCA skipped: one column or none left".into(),
            kept: cur
                .iter()
                .map(|&j| FeatureNote {
                    feature: names[j].clone(),
                    value: None,
                    reason: "only column left".into(),
                })
                .collect(),
            dropped: Vec::new(),
        });
        return Ok((cur, steps));
    }
    // 5. PCA.
    let sub = z.select(Axis(1), &cur);
    let centered = &sub - &sub.mean_axis(Axis(0)).expect("rows > 0");
    let total: f64 = centered.iter().map(|v| v * v).sum();
    let ncomp = cur.len().min(sub.nrows().saturating_sub(1)).max(1);
    let pca = linfa_reduction::Pca::params(ncomp)
        .fit(&DatasetBase::new(sub.clone(), ()))
        .map_err(|e| ModelError::Fit {
            model: "spca".into(),
            what: format!("PCA: {e}"),
        })?;
    let sig = pca.singular_values();
    let comps = pca.components();
    let mut order: Vec<usize> = (0..sig.len()).collect();
    order.sort_by(|a, b| sig[*b].total_cmp(&sig[*a]));
    let mut cum = 0.0;
    let mut leading = Vec::new();
    for &c in &order {
        leading.push(c);
        cum += sig[c] * sig[c] / total;
        if cum >= p.variance_kept {
            break;
        }
    }
    // 6. Columns with the largest loadings on the leading components.
    let mut chosen: Vec<usize> = Vec::new();
    let mut kept = Vec::new();
    for (rank, &c) in leading.iter().enumerate() {
        let row = comps.row(c);
        let mut idx: Vec<usize> = (0..row.len()).collect();
        idx.sort_by(|a, b| row[*b].abs().total_cmp(&row[*a].abs()));
        for &i in idx.iter().take(p.per_component) {
            if chosen.len() >= p.max_features || chosen.contains(&i) {
                continue;
            }
            chosen.push(i);
            kept.push(FeatureNote {
                feature: names[cur[i]].clone(),
                value: Some(row[i]),
                reason: format!(
                    "top-{} |loading| on component {} ({:.1} % of variance)",
                    p.per_component,
                    rank + 1,
                    100.0 * sig[c] * sig[c] / total
                ),
            });
        }
    }
    let dropped = (0..cur.len())
        .filter(|i| !chosen.contains(i))
        .map(|i| FeatureNote {
            feature: names[cur[i]].clone(),
            value: None,
            reason: "not among the largest loadings of the leading components".into(),
        })
        .collect();
    steps.push(SpcaStep {
        step: format!("5-6. PCA (linfa-reduction): {} leading component(s) explain {:.1} % ≥ {} of the variance; keep the largest loadings", leading.len(), 100.0 * cum, p.variance_kept),
        kept,
        dropped,
    });
    Ok((chosen.into_iter().map(|i| cur[i]).collect(), steps))
}

/// Fit `linear` (`spca = false`) or `spca` on mean points.
///
/// # Errors
/// No knobs, fewer rows than columns, a failed least-squares solve.
pub fn fit(
    meta: &SetMeta,
    points: &[Point],
    params: &RegressionParams,
    spca: bool,
) -> Result<RegressionModel, ModelError> {
    let method = if spca { "spca" } else { "linear" };
    // Knobs that vary in the training data.
    let mut knob_names: Vec<String> = Vec::new();
    for p in points {
        for k in p.knobs.keys() {
            if !knob_names.contains(k) {
                knob_names.push(k.clone());
            }
        }
    }
    knob_names.sort();
    knob_names.retain(|k| {
        let vals: Vec<f64> = points
            .iter()
            .filter_map(|p| p.knobs.get(k).copied())
            .collect();
        vals.iter().any(|v| *v != vals[0]) && vals.iter().all(|v| *v > 0.0)
    });
    if knob_names.is_empty() {
        return Err(ModelError::NotEnoughData {
            model: method.into(),
            what: "no knob takes two values in the training set".into(),
        });
    }
    // Baselines.
    let mut baselines: BTreeMap<String, Baseline> = BTreeMap::new();
    let mut workloads: Vec<String> = Vec::new();
    for p in points {
        if !workloads.contains(&p.workload) {
            workloads.push(p.workload.clone());
        }
    }
    for w in &workloads {
        let mine: Vec<&Point> = points.iter().filter(|p| &p.workload == w).collect();
        let base = match &params.baseline {
            Some(b) => mine.iter().copied().find(|p| is_baseline(&p.knobs, b)),
            None => mine.iter().copied().max_by(|a, b| {
                let ka: Vec<f64> = knob_names
                    .iter()
                    .map(|k| a.knobs.get(k).copied().unwrap_or(f64::MIN))
                    .collect();
                let kb: Vec<f64> = knob_names
                    .iter()
                    .map(|k| b.knobs.get(k).copied().unwrap_or(f64::MIN))
                    .collect();
                ka.partial_cmp(&kb).unwrap_or(std::cmp::Ordering::Equal)
            }),
        };
        if let Some(b) = base {
            baselines.insert(
                w.clone(),
                Baseline {
                    knobs: b.knobs.clone(),
                    time_s: b.time_s,
                    power_w: b.power_w,
                    rates: rates(meta, b),
                },
            );
        }
    }
    if baselines.is_empty() {
        return Err(ModelError::NotEnoughData {
            model: method.into(),
            what: format!(
                "no workload has a point at the baseline {}",
                params.baseline.as_ref().map(knob_key).unwrap_or_default()
            ),
        });
    }
    let mut rate_names: Vec<String> = Vec::new();
    let mut missing = Vec::new();
    for b in baselines.values() {
        for r in b.rates.keys() {
            if !rate_names.contains(r) && !missing.contains(r) {
                if baselines.values().all(|o| o.rates.contains_key(r)) {
                    rate_names.push(r.clone());
                } else {
                    missing.push(r.clone());
                }
            }
        }
    }
    rate_names.sort();
    let names = column_names(&knob_names, &rate_names);
    let mut unreliable: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for u in &meta.unreliable {
        unreliable
            .entry(u.target.clone())
            .or_default()
            .extend(u.workloads.iter().cloned());
    }
    let mut targets = Vec::new();
    for target in REGRESSION_TARGETS {
        let mut rows: Vec<Vec<f64>> = Vec::new();
        let mut ys = Vec::new();
        for p in points {
            if !meta.is_reliable(target, &p.workload) {
                continue;
            }
            let Some(b) = baselines.get(&p.workload) else {
                continue;
            };
            let base_t = match target {
                "time_s" => b.time_s,
                _ => b.power_w,
            };
            let (Some(bt), Some(v)) = (base_t.filter(|v| *v > 0.0), p.target(target)) else {
                continue;
            };
            rows.push(row_features(&knob_names, &rate_names, b, &p.knobs)?);
            ys.push(v / bt);
        }
        if rows.len() < 2 {
            continue;
        }
        let x = Array2::from_shape_vec((rows.len(), names.len()), rows.concat())
            .expect("row widths agree");
        let y = Array1::from(ys);
        let (cols, means, stds, step0) = prepare_columns(&x, &names);
        let z = standardised(&x, &cols, &means, &stds);
        let col_names: Vec<String> = cols.iter().map(|&j| names[j].clone()).collect();
        let mut steps = vec![step0];
        let sel: Vec<usize> = if spca {
            let (sel, s) = spca_select(&z, &y, &col_names, &params.spca)?;
            steps.extend(s);
            sel
        } else {
            (0..cols.len()).collect()
        };
        let zs = z.select(Axis(1), &sel);
        let (coefs, intercept) = ols(&zs, &y, method)?;
        targets.push(TargetFit {
            target: target.to_string(),
            features: sel.iter().map(|&i| col_names[i].clone()).collect(),
            means: sel.iter().map(|&i| means[i]).collect(),
            stds: sel.iter().map(|&i| stds[i]).collect(),
            coefficients: coefs,
            intercept,
            rows: y.len(),
            steps,
        });
    }
    if targets.is_empty() {
        return Err(ModelError::NotEnoughData {
            model: method.into(),
            what: "no target has two training rows with a baseline value".into(),
        });
    }
    Ok(RegressionModel {
        method: method.into(),
        params: params.clone(),
        rate_basis: super::features::rate_basis(meta),
        knobs: knob_names,
        rates: rate_names,
        rates_missing_somewhere: missing,
        baselines,
        targets,
        unreliable,
    })
}

impl RegressionModel {
    fn reliable(&self, target: &str, workload: &str) -> bool {
        !self
            .unreliable
            .get(target)
            .is_some_and(|ws| ws.iter().any(|w| w == "*" || w == workload))
    }

    /// Predict `workload` at `knobs`: baseline value × predicted ratio.
    ///
    /// # Errors
    /// Unknown workload (no baseline) or a missing knob.
    pub fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction, ModelError> {
        let b = self
            .baselines
            .get(workload)
            .ok_or_else(|| ModelError::UnknownWorkload {
                workload: workload.into(),
                known: self
                    .baselines
                    .keys()
                    .cloned()
                    .collect::<Vec<_>>()
                    .join(", "),
            })?;
        let all = row_features(&self.knobs, &self.rates, b, knobs)?;
        let names = column_names(&self.knobs, &self.rates);
        let mut pred = Prediction::default();
        for t in &self.targets {
            if !self.reliable(&t.target, workload) {
                continue;
            }
            let mut ratio = t.intercept;
            for (i, f) in t.features.iter().enumerate() {
                let j = names
                    .iter()
                    .position(|n| n == f)
                    .expect("feature names come from column_names");
                ratio += t.coefficients[i] * (all[j] - t.means[i]) / t.stds[i];
            }
            match t.target.as_str() {
                "time_s" => pred.time_s = b.time_s.map(|v| v * ratio),
                _ => pred.power_w = b.power_w.map(|v| v * ratio),
            }
        }
        pred.energy_j = pred.time_s.zip(pred.power_w).map(|(t, w)| t * w);
        Ok(pred)
    }

    /// Human-readable selection record (`powerperf fit --explain`).
    pub fn explain(&self) -> String {
        let mut s = format!("{} model; rates: {}\n", self.method, self.rate_basis);
        s += &format!(
            "knob terms: {}\nrates at the baseline ({}): {}\n",
            self.knobs.join(", "),
            self.baselines.len(),
            self.rates.join(", ")
        );
        if !self.rates_missing_somewhere.is_empty() {
            s += &format!(
                "rates left out (missing at some baseline): {}\n",
                self.rates_missing_somewhere.join(", ")
            );
        }
        for t in &self.targets {
            s += &format!("\n== target {} ({} training rows) ==\n", t.target, t.rows);
            for st in &t.steps {
                s += &format!("step {}\n", st.step);
                for k in &st.kept {
                    s += &format!(
                        "  keep {:<40} {:>10}  {}\n",
                        k.feature,
                        k.value.map(|v| format!("{v:.4}")).unwrap_or_default(),
                        k.reason
                    );
                }
                for k in &st.dropped {
                    s += &format!(
                        "  drop {:<40} {:>10}  {}\n",
                        k.feature,
                        k.value.map(|v| format!("{v:.4}")).unwrap_or_default(),
                        k.reason
                    );
                }
            }
            s += &format!("final: {}/{} = {:.6}", t.target, t.target, t.intercept);
            for (f, c) in t.features.iter().zip(&t.coefficients) {
                s += &format!(" {:+.6}·z[{f}]", c);
            }
            s += "\n";
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::set::CounterKind;

    /// Synthetic set: time ratio = 1 + a_w·u where a_w = 0.8·mem_frac (a rate), so the
    /// time ratio is linear in the column `mem_frac·u(core_freq_mhz)`... written as
    /// t(f) = t0·(1 + (1 - m)·(f0/f - 1)): compute share 1 - m scales with the clock.
    fn synthetic(n_workloads: usize) -> (SetMeta, Vec<Point>) {
        let mut meta = SetMeta::default();
        meta.counters.insert("mem_frac".into(), CounterKind::Rate);
        meta.counters.insert("noise".into(), CounterKind::Rate);
        let mut pts = Vec::new();
        for i in 0..n_workloads {
            let m = (i as f64 + 0.5) / n_workloads as f64;
            let noise = ((i * 7919) % 13) as f64 / 13.0;
            for f in [500.0, 750.0, 1000.0] {
                let t = 10.0 * (1.0 + (1.0 - m) * (1000.0 / f - 1.0));
                let p = 100.0 * (1.0 + 0.5 * ((f / 1000.0f64).powi(3) - 1.0));
                pts.push(Point {
                    workload: format!("w{i}"),
                    knobs: [("core_freq_mhz".to_string(), f)].into_iter().collect(),
                    time_s: Some(t),
                    power_w: Some(p),
                    energy_j: Some(t * p),
                    counters: [("mem_frac".to_string(), m), ("noise".to_string(), noise)]
                        .into_iter()
                        .collect(),
                    ..Point::default()
                });
            }
        }
        (meta, pts)
    }

    #[test]
    fn linear_recovers_known_ratio_exactly() {
        let (meta, pts) = synthetic(12);
        let m = fit(&meta, &pts, &RegressionParams::default(), false).unwrap();
        let k: Knobs = [("core_freq_mhz".to_string(), 600.0)].into_iter().collect();
        let pr = m.predict("w3", &k).unwrap();
        let mf = 3.5 / 12.0;
        let want = 10.0 * (1.0 + (1.0 - mf) * (1000.0 / 600.0 - 1.0));
        assert!(
            (pr.time_s.unwrap() / want - 1.0).abs() < 1e-9,
            "{:?} {want}",
            pr.time_s
        );
        let wp = 100.0 * (1.0 + 0.5 * (0.6f64.powi(3) - 1.0));
        assert!((pr.power_w.unwrap() / wp - 1.0).abs() < 1e-9);
    }

    #[test]
    fn spca_keeps_the_informative_column_and_records_why() {
        let (meta, pts) = synthetic(20);
        let m = fit(&meta, &pts, &RegressionParams::default(), true).unwrap();
        let t = m.targets.iter().find(|t| t.target == "time_s").unwrap();
        assert!(
            t.features.iter().any(|f| f.starts_with("mem_frac·u(")),
            "{:?}",
            t.features
        );
        assert!(t.steps.len() >= 3);
        let k: Knobs = [("core_freq_mhz".to_string(), 600.0)].into_iter().collect();
        let pr = m.predict("w5", &k).unwrap();
        let mf = 5.5 / 20.0;
        let want = 10.0 * (1.0 + (1.0 - mf) * (1000.0 / 600.0 - 1.0));
        assert!(
            (pr.time_s.unwrap() / want - 1.0).abs() < 1e-6,
            "{:?} {want}",
            pr.time_s
        );
        assert!(m.explain().contains("Spearman"));
    }

    #[test]
    fn unknown_workload_is_an_error() {
        let (meta, pts) = synthetic(6);
        let m = fit(&meta, &pts, &RegressionParams::default(), false).unwrap();
        let k: Knobs = [("core_freq_mhz".to_string(), 600.0)].into_iter().collect();
        assert!(m
            .predict("nope", &k)
            .unwrap_err()
            .to_string()
            .contains("w0"));
    }
}
