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
//! `spca` selects the columns by the six steps of docs/architecture.md ("Supervised PCA"), every
//! threshold a field of [`SpcaParams`], and records each step in [`SpcaStep`]s.

use super::features::{knob_key, rates};
use super::{Knobs, ModelError, Prediction};
use linfa::traits::Fit;
use linfa::DatasetBase;
use ndarray::{Array1, Array2};
use powerperf_format::set::{Point, SetMeta};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

mod spca;
pub use spca::{fit_spca_matrix, SpcaFit};
use spca::{moments, prepare_columns, standardised};

/// Targets the regressions fit directly (energy is `P·t`).
pub const REGRESSION_TARGETS: [&str; 2] = ["time_s", "power_w"];

/// Thresholds of supervised PCA (docs/architecture.md steps 2, 4, 5, 6).
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
    /// Range `[min, max]` of each rate over the baselines of workloads with points beyond
    /// their baseline (the rows that determine the coefficients). Predictions clip a
    /// workload's rates into this range, so a workload unlike any training one is not
    /// extrapolated linearly.
    #[serde(default)]
    pub rate_ranges: BTreeMap<String, (f64, f64)>,
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
    let mut rate_ranges: BTreeMap<String, (f64, f64)> = BTreeMap::new();
    for (w, b) in &baselines {
        if points.iter().filter(|p| &p.workload == w).count() < 2 {
            continue;
        }
        for r in &rate_names {
            let v = b.rates[r];
            let e = rate_ranges.entry(r.clone()).or_insert((v, v));
            e.0 = e.0.min(v);
            e.1 = e.1.max(v);
        }
    }
    let names = column_names(&knob_names, &rate_names);
    let unreliable = super::features::unreliable_by_target(meta);
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
        if spca {
            let f = fit_spca_matrix(x.view(), y.view(), &names, &params.spca)?;
            targets.push(f.into_target(target));
            continue;
        }
        let (cols, means, stds, step0) = prepare_columns(&moments(x.view(), y.view()), &names);
        let z = standardised(&x, &cols, &means, &stds);
        let (coefs, intercept) = ols(&z, &y, method)?;
        targets.push(TargetFit {
            target: target.to_string(),
            features: cols.iter().map(|&j| names[j].clone()).collect(),
            means,
            stds,
            coefficients: coefs,
            intercept,
            rows: y.len(),
            steps: vec![step0],
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
        rate_ranges,
        targets,
        unreliable,
    })
}

impl RegressionModel {
    fn reliable(&self, target: &str, workload: &str) -> bool {
        super::features::is_reliable(&self.unreliable, target, workload)
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
        // A model file is input: its parts are checked here, not trusted (a damaged file
        // must give an error, not a panic).
        let inconsistent = |what: String| ModelError::Inconsistent {
            model: self.method.to_string(),
            what,
        };
        let mut b = b.clone();
        for (r, v) in b.rates.iter_mut() {
            if let Some(&(lo, hi)) = self.rate_ranges.get(r) {
                if lo.is_nan() || hi.is_nan() || lo > hi {
                    return Err(inconsistent(format!("rate range of `{r}` is [{lo}, {hi}]")));
                }
                *v = v.clamp(lo, hi);
            }
        }
        let all = row_features(&self.knobs, &self.rates, &b, knobs)?;
        let names = column_names(&self.knobs, &self.rates);
        let mut pred = Prediction::default();
        for t in &self.targets {
            if !self.reliable(&t.target, workload) {
                continue;
            }
            let n = t.features.len();
            if t.coefficients.len() != n || t.means.len() != n || t.stds.len() != n {
                return Err(inconsistent(format!(
                    "target `{}` has {n} features, {} coefficients, {} means and {} stds",
                    t.target,
                    t.coefficients.len(),
                    t.means.len(),
                    t.stds.len()
                )));
            }
            let mut ratio = t.intercept;
            for (i, f) in t.features.iter().enumerate() {
                let j = names.iter().position(|n| n == f).ok_or_else(|| {
                    inconsistent(format!(
                        "target `{}` uses the feature `{f}`, not one of its knob and rate terms",
                        t.target
                    ))
                })?;
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
mod tests;
