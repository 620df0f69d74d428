//! Joint model over several knobs at once (core clock × memory clock × threads), fitted
//! from any training subgrid that covers each knob (issue 21, item 1).
//!
//! Per workload `w` and target `y` (time, power; energy = P·t), with `g_w` the geometric
//! mean of the workload's training values and `u_j(k) = ln(k_j / r_j)` the knob's log
//! distance from the workload's reference setting `r`:
//!
//! ```text
//! T(y_w(k) / g_w) = a_w + Σ_j e_{w,j}(k_j) + Σ_{j<l} (β0_{jl} + β1_{jl}·z_w) · u_j(k_j)·u_l(k_l)
//! ```
//!
//! - `T = ln` (multiplicative, the separable rule y(k1,k2) = y(k1,b2)·y(b1,k2)/y(b1,b2)
//!   when there is no interaction) or `T = identity` (additive: Moore's
//!   `t = t_comp·f0/f + t_mem·m0/m + t_other` and `P = P_static + P_core(f) + P_mem(m)`,
//!   one part per clock domain). `combine: auto` picks multiplicative, the separable rule,
//!   where no training workload identifies an interaction (a cross: no inner split over
//!   programs can show that anything else carries over; issue 41, docs/models.md, before
//!   which it picked additive for clock knobs alone), and drops the contention term there
//!   too; when the training points identify an interaction (some workload has two values of
//!   two knobs together) it picks the one with the lower relative training residual.
//! - `e_{w,j}`: one main effect per training value of knob `j` (the workload's own 1-D
//!   curve, categorical, least squares in `T`); between training values it is interpolated
//!   linearly in `1/k` (Moore's `t ∝ 1/f`, Amdahl's `t ∝ 1/n`); outside them the model
//!   refuses (no extrapolation).
//! - The interaction (counter-informed): `z_w` is the workload's memory intensity at its
//!   reference point (DCGM `dram_active`, else cache refills or L2 accesses per retired
//!   instruction), standardised over the training workloads. `β` is shared by all
//!   workloads and fitted on the within-workload residuals (Frisch–Waugh–Lovell) of the
//!   workloads whose training points identify it; it is zero where none does (a cross
//!   design: one full sweep plus one point across), where the model is the separable (or
//!   additive) rule exactly. Memory-bound workloads gain less from a faster core clock and
//!   from more threads sharing the memory bandwidth (Curtis-Maury et al. 2008; Lively et
//!   al.'s E-AMOM 2014 models runtime across DVFS and concurrency from counters).
//! - Time at a thread count trained at one clock (clock × threads): from the CPI stack at
//!   the cross point ([`contention`]), which replaces the main effects there.

pub mod contention;
mod interaction;
pub mod split;
#[cfg(test)]
mod tests;

use super::features::{self, knob_key};
use super::{Knobs, ModelError, Prediction};
use powerperf_format::set::{CounterKind, Point, SetMeta};
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

use interaction::{fit_target, TargetResult};

const MODEL: &str = "joint";
/// Targets fitted (energy is `P·t`).
const FIT_TARGETS: [&str; 2] = ["time_s", "power_w"];
/// Memory-traffic counters tried for the interaction, per retired instruction, in order.
const TRAFFIC_COUNTERS: [&str; 7] = [
    "l2d_cache_refill",
    "LLC-load-misses",
    "LLC-misses",
    "cache-misses",
    "l2d_cache_access",
    "l1d_cache_refill",
    "l1d_cache_access",
];
const INSTRUCTION_COUNTERS: [&str; 2] = ["inst_retired", "instructions"];

/// How the knobs' effects combine.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Combine {
    /// Chosen from the knobs and the training points (see the module docs).
    Auto,
    /// `y = a·Π_j e_j(k_j)` (the separable rule).
    Multiplicative,
    /// `y = a + Σ_j e_j(k_j)` (one part per knob, Moore's split of time).
    Additive,
}

/// Parameters (`--params '{"joint":{…}}'`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct JointParams {
    pub combine: Combine,
    /// Fit the interaction term where the training points identify it.
    pub interaction: bool,
    /// Counter of the interaction's slope: `"auto"` (the first of `dram_active`, then
    /// traffic counters per instruction), a counter name, or `null` for a shared `β0` only.
    pub interaction_counter: Option<String>,
    /// Time at a thread count trained at one clock from the CPI stack at the cross point
    /// ([`contention`]).
    pub contention: bool,
}

impl Default for JointParams {
    fn default() -> Self {
        JointParams {
            combine: Combine::Auto,
            interaction: true,
            interaction_counter: Some("auto".into()),
            contention: true,
        }
    }
}

/// The interaction of one knob pair for one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Interaction {
    pub knobs: (String, String),
    pub beta0: f64,
    /// Slope on the standardised counter `z` (0 without a counter).
    pub beta1: f64,
    /// Workloads whose training points identify it.
    pub workloads: usize,
}

/// What was fitted for one target.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TargetFit {
    pub target: String,
    pub combine: Combine,
    pub combine_reason: String,
    pub interactions: Vec<Interaction>,
    /// How the interaction was chosen (identified or not, the inner cross-validation).
    #[serde(default)]
    pub interaction_choice: String,
}

/// One main effect: a training value of a knob and its effect in `T` units.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Level {
    pub value: f64,
    pub effect: f64,
}

/// One workload's curve for one target: `a` and the main effects per knob, sorted by
/// value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Effects {
    /// Geometric mean of the training values (the unit of the transformed curve).
    pub scale: f64,
    pub intercept: f64,
    pub main: BTreeMap<String, Vec<Level>>,
}

/// One workload.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JointWorkload {
    pub workload: String,
    /// Knobs the model does not vary, at this workload's training value.
    pub fixed_knobs: Knobs,
    /// The reference setting (`u = 0`) and where `z` was read.
    pub reference: Knobs,
    /// The interaction counter's raw value at the reference point.
    pub z: Option<f64>,
    pub effects: BTreeMap<String, Effects>,
    /// Time curves of thread counts trained at one clock ([`contention`]).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub contention: Vec<contention::ContentionCurve>,
}

/// The fitted model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct JointModel {
    /// Knobs varied in training.
    pub knobs: Vec<String>,
    pub interaction_counter: Option<String>,
    /// Mean and standard deviation of `z` over the training workloads.
    pub z_mean: f64,
    pub z_sd: f64,
    pub targets: Vec<TargetFit>,
    pub workloads: Vec<JointWorkload>,
}

fn not_enough(what: String) -> ModelError {
    ModelError::NotEnoughData {
        model: MODEL.into(),
        what,
    }
}

/// Least squares `min |A β − y|²` through the normal equations, by Gaussian elimination
/// with partial pivoting. `None` when `A` does not have full column rank (a pivot below
/// `1e-10` of the largest diagonal entry).
fn lstsq(a: &[Vec<f64>], y: &[f64]) -> Option<Vec<f64>> {
    let m = a.first().map_or(0, Vec::len);
    let mut g = vec![vec![0.0; m + 1]; m];
    for (row, v) in a.iter().zip(y) {
        for i in 0..m {
            for j in 0..m {
                g[i][j] += row[i] * row[j];
            }
            g[i][m] += row[i] * v;
        }
    }
    solve_gram(g)
}

/// Solve the augmented normal equations `[AᵀA | Aᵀy]` (`m` rows, `m + 1` columns); `None`
/// when singular (see [`lstsq`]).
fn solve_gram(mut g: Vec<Vec<f64>>) -> Option<Vec<f64>> {
    let m = g.len();
    if m == 0 {
        return Some(Vec::new());
    }
    let scale = (0..m).map(|i| g[i][i]).fold(0.0, f64::max).max(1e-300);
    for c in 0..m {
        let p = (c..m).max_by(|x, y| g[*x][c].abs().total_cmp(&g[*y][c].abs()))?;
        if g[p][c].abs() < 1e-10 * scale {
            return None;
        }
        g.swap(c, p);
        let pivot = g[c].clone();
        for (r, row) in g.iter_mut().enumerate() {
            if r != c {
                let f = row[c] / pivot[c];
                for (x, q) in row[c..].iter_mut().zip(&pivot[c..]) {
                    *x -= f * q;
                }
            }
        }
    }
    let beta: Vec<f64> = (0..m).map(|i| g[i][m] / g[i][i]).collect();
    beta.iter().all(|b| b.is_finite()).then_some(beta)
}

fn transform(combine: Combine, y: f64) -> f64 {
    match combine {
        Combine::Additive => y,
        _ => y.ln(),
    }
}

fn untransform(combine: Combine, v: f64) -> f64 {
    match combine {
        Combine::Additive => v,
        _ => v.exp(),
    }
}

/// The interaction counter's value at a point: a fraction as it is, a count per retired
/// instruction.
fn z_of(meta: &SetMeta, p: &Point, name: &str) -> Option<f64> {
    let v = *p.counters.get(name)?;
    let per_inst = meta
        .counters
        .get(name)
        .map_or(name != "dram_active", |k| *k == CounterKind::Count);
    let z = if per_inst {
        let inst = INSTRUCTION_COUNTERS
            .iter()
            .find_map(|c| p.counters.get(*c).copied())?;
        (inst > 0.0).then(|| v / inst)?
    } else {
        v
    };
    z.is_finite().then_some(z)
}

/// One workload's training points and design.
struct Group<'a> {
    workload: String,
    fixed: Knobs,
    points: Vec<&'a Point>,
    reference: Knobs,
    /// Knob levels per varied knob (sorted), with the reference level first in the design.
    levels: BTreeMap<String, Vec<f64>>,
}

impl Group<'_> {
    /// Main-effect design row: intercept, then one indicator per non-reference level.
    fn row(&self, k: &Knobs) -> Vec<f64> {
        let mut r = vec![1.0];
        for (knob, levels) in &self.levels {
            let v = k[knob];
            for l in levels.iter().filter(|l| **l != self.reference[knob]) {
                r.push(if (v - l).abs() < 1e-9 { 1.0 } else { 0.0 });
            }
        }
        r
    }

    /// The values of the varied knobs in `k`.
    fn knob_values(&self, k: &Knobs) -> Knobs {
        self.levels
            .keys()
            .filter_map(|n| k.get(n).map(|v| (n.clone(), *v)))
            .collect()
    }

    fn u(&self, k: &Knobs, knob: &str) -> f64 {
        match (k.get(knob), self.reference.get(knob)) {
            (Some(v), Some(r)) if *v > 0.0 && *r > 0.0 => (v / r).ln(),
            _ => 0.0,
        }
    }
}

/// The reference point of a workload's training points: the one with the most training
/// points that differ from it in exactly one knob (the centre of a cross), ties to the
/// highest knob values.
fn reference(points: &[&Point], knobs: &[String]) -> Knobs {
    let key = |p: &Point| -> Knobs {
        knobs
            .iter()
            .filter_map(|k| p.knobs.get(k).map(|v| (k.clone(), *v)))
            .collect()
    };
    let one_off =
        |a: &Knobs, b: &Knobs| a.iter().filter(|(k, v)| b.get(*k) != Some(v)).count() == 1;
    let mut best: Option<(usize, Knobs)> = None;
    for p in points {
        let k = key(p);
        let n = points.iter().filter(|q| one_off(&k, &key(q))).count();
        let better = match &best {
            None => true,
            Some((bn, bk)) => n > *bn || (n == *bn && k.values().ge(bk.values())),
        };
        if better {
            best = Some((n, k));
        }
    }
    best.map(|b| b.1).unwrap_or_default()
}

/// The knobs that take two or more values over the training points, sorted by name.
///
/// # Errors
/// Fewer than two such knobs ([`ModelError::NotEnoughData`], naming them).
fn varied_knobs(points: &[Point]) -> Result<Vec<String>, ModelError> {
    let mut all: Vec<String> = points
        .iter()
        .flat_map(|p| p.knobs.keys().cloned())
        .collect();
    all.sort();
    all.dedup();
    let knobs: Vec<String> = all
        .iter()
        .filter(|k| {
            let mut v: Vec<f64> = points
                .iter()
                .filter_map(|p| p.knobs.get(*k).copied())
                .collect();
            v.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
            v.iter().any(|x| (x - v[0]).abs() > 1e-9)
        })
        .cloned()
        .collect();
    if knobs.len() < 2 {
        return Err(not_enough(format!(
            "the joint model combines two or more knobs, and the training points vary {} ({}); fix: use a one-knob model (analytic, threads) or train on points that vary two knobs",
            knobs.len(),
            if knobs.is_empty() { "none".to_string() } else { knobs.join(", ") }
        )));
    }
    Ok(knobs)
}

/// The training points grouped by workload and the values of the knobs that do not vary,
/// each group with its reference setting and the levels of each varied knob.
///
/// # Errors
/// A group with a point that lacks a varied knob, or whose points do not separate the
/// knobs' effects (two knobs change together).
fn knob_groups<'a>(points: &'a [Point], knobs: &[String]) -> Result<Vec<Group<'a>>, ModelError> {
    // Group by workload and the non-varied knobs.
    let mut groups: Vec<Group> = Vec::new();
    for p in points {
        let fixed: Knobs = p
            .knobs
            .iter()
            .filter(|(k, _)| !knobs.contains(k))
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        match groups
            .iter_mut()
            .find(|g| g.workload == p.workload && g.fixed == fixed)
        {
            Some(g) => g.points.push(p),
            None => groups.push(Group {
                workload: p.workload.clone(),
                fixed,
                points: vec![p],
                reference: Knobs::new(),
                levels: BTreeMap::new(),
            }),
        }
    }
    for g in &mut groups {
        if let Some(k) = knobs
            .iter()
            .find(|k| g.points.iter().any(|p| !p.knobs.contains_key(*k)))
        {
            return Err(not_enough(format!(
                "workload `{}` has training points without the knob `{k}`",
                g.workload
            )));
        }
        g.reference = reference(&g.points, knobs);
        for k in knobs {
            let mut v: Vec<f64> = g.points.iter().map(|p| p.knobs[k]).collect();
            v.sort_by(f64::total_cmp);
            v.dedup_by(|a, b| (*a - *b).abs() < 1e-9);
            g.levels.insert(k.clone(), v);
        }
        let rows: Vec<Vec<f64>> = g.points.iter().map(|p| g.row(&p.knobs)).collect();
        if lstsq(&rows, &vec![0.0; rows.len()]).is_none() {
            return Err(not_enough(format!(
                "the training points of workload `{}` ({}) do not separate the effects of {}: two knobs change together; fix: add a point that changes one knob alone, e.g. a full sweep of one knob plus one point across",
                g.workload,
                g.points.iter().map(|p| knob_key(&p.knobs)).collect::<Vec<_>>().join("; "),
                knobs.join(", ")
            )));
        }
    }
    Ok(groups)
}

/// Fit on mean points.
///
/// # Errors
/// [`ModelError::NotEnoughData`] when fewer than two knobs vary, or a workload's training
/// points do not separate the knobs' effects (they change together), or its targets are
/// missing or not positive.
pub fn fit(
    meta: &SetMeta,
    points: &[Point],
    params: &JointParams,
) -> Result<JointModel, ModelError> {
    let knobs = varied_knobs(points)?;
    let groups = knob_groups(points, &knobs)?;
    // The interaction counter and each workload's z.
    let counter = match params.interaction_counter.as_deref() {
        None | Some("none") => None,
        Some("auto") => std::iter::once("dram_active")
            .chain(TRAFFIC_COUNTERS)
            .find(|c| {
                groups
                    .iter()
                    .all(|g| g.points.iter().any(|p| z_of(meta, p, c).is_some()))
            })
            .map(str::to_string),
        Some(c) => Some(c.to_string()),
    };
    let z_at = |g: &Group| -> Option<f64> {
        let c = counter.as_deref()?;
        g.points
            .iter()
            .find(|p| g.reference.iter().all(|(k, v)| p.knobs.get(k) == Some(v)))
            .and_then(|p| z_of(meta, p, c))
    };
    let zs: Vec<Option<f64>> = groups.iter().map(z_at).collect();
    if let Some(c) = &counter {
        if let Some((g, _)) = groups.iter().zip(&zs).find(|(_, z)| z.is_none()) {
            return Err(not_enough(format!(
                "workload `{}` has no counter `{c}` (or no instruction count) at its reference point {}; fix: --params '{{\"joint\":{{\"interaction_counter\":null}}}}'",
                g.workload,
                knob_key(&g.reference)
            )));
        }
    }
    let zv: Vec<f64> = zs.iter().flatten().copied().collect();
    let (z_mean, z_sd) = if zv.len() >= 2 {
        let m = zv.iter().sum::<f64>() / zv.len() as f64;
        let sd = (zv.iter().map(|z| (z - m).powi(2)).sum::<f64>() / (zv.len() - 1) as f64).sqrt();
        (m, sd)
    } else {
        (zv.first().copied().unwrap_or(0.0), 0.0)
    };
    let zstd = |z: Option<f64>| match z {
        Some(z) if z_sd > 0.0 => (z - z_mean) / z_sd,
        _ => 0.0,
    };
    let pairs: Vec<(String, String)> = knobs
        .iter()
        .enumerate()
        .flat_map(|(i, a)| knobs[i + 1..].iter().map(move |b| (a.clone(), b.clone())))
        .collect();
    let clock = super::analytic::FREQ_KNOBS
        .iter()
        .copied()
        .find(|k| knobs.iter().any(|n| n == k));
    let mut workloads: Vec<JointWorkload> = groups
        .iter()
        .zip(&zs)
        .map(|(g, z)| JointWorkload {
            workload: g.workload.clone(),
            fixed_knobs: g.fixed.clone(),
            reference: g.reference.clone(),
            z: *z,
            effects: BTreeMap::new(),
            contention: match (params.contention, clock) {
                (true, Some(c)) => contention::curves(g, c),
                _ => Vec::new(),
            },
        })
        .collect();
    let mut targets = Vec::new();
    for t in FIT_TARGETS {
        let usable: Vec<usize> = (0..groups.len())
            .filter(|i| {
                meta.is_reliable(t, &groups[*i].workload)
                    && groups[*i]
                        .points
                        .iter()
                        .all(|p| p.target(t).is_some_and(|v| v > 0.0 && v.is_finite()))
            })
            .collect();
        if usable.is_empty() {
            continue;
        }
        let with_z = counter.is_some() && z_sd > 0.0;
        let fit_one = |combine: Combine| {
            fit_target(
                &groups,
                &usable,
                &pairs,
                t,
                combine,
                params.interaction,
                with_z,
                &zs,
                &zstd,
            )
        };
        let identified = |f: &TargetResult| f.1.iter().any(|i| i.workloads > 0);
        let (combine, reason, result) = match params.combine {
            Combine::Auto => {
                let m = fit_one(Combine::Multiplicative);
                if identified(&m) && params.interaction {
                    let a = fit_one(Combine::Additive);
                    if a.2 < m.2 {
                        let r = format!("additive: lower relative training residual ({:.3e} against {:.3e} multiplicative) where the training points identify an interaction", a.2, m.2);
                        (Combine::Additive, r, a)
                    } else {
                        let r = format!("multiplicative: lower relative training residual ({:.3e} against {:.3e} additive) where the training points identify an interaction", m.2, a.2);
                        (Combine::Multiplicative, r, m)
                    }
                } else {
                    // Issue 41: no training workload identifies an interaction, so no inner
                    // split over programs can show that a term beyond the separable rule
                    // helps (before it: additive for clock knobs, Moore's one part per clock
                    // domain, which lost on programs it was not tuned on).
                    (Combine::Multiplicative, "multiplicative: the separable rule y(a, b) = y(a, b0)·y(a0, b)/y(a0, b0), since no training workload identifies an interaction and no inner split over programs can show that other terms help (issue 41)".into(), m)
                }
            }
            c => (c, "given in --params".into(), fit_one(c)),
        };
        for (i, e) in result.0 {
            workloads[i].effects.insert(t.to_string(), e);
        }
        targets.push(TargetFit {
            target: t.to_string(),
            combine,
            combine_reason: reason,
            interactions: result.1,
            interaction_choice: result.3,
        });
    }
    if targets.is_empty() {
        return Err(not_enough(
            "no workload has a positive time or power at every training point".into(),
        ));
    }
    // Issue 41: the CPI-stack contention term is kept only where the training points can
    // test it; in a cross (no workload identifies an interaction) the separable rule.
    if params.combine == Combine::Auto
        && targets
            .iter()
            .all(|t| t.interactions.iter().all(|i| i.workloads == 0))
    {
        for w in &mut workloads {
            w.contention.clear();
        }
    }
    Ok(JointModel {
        knobs,
        interaction_counter: counter,
        z_mean,
        z_sd,
        targets,
        workloads,
    })
}

/// A main effect at `v`: the training value's, else linear in `1/v` between the two
/// neighbouring training values; `None` outside them.
fn effect_at(levels: &[Level], v: f64) -> Option<f64> {
    if let Some(l) = levels.iter().find(|l| (l.value - v).abs() < 1e-9) {
        return Some(l.effect);
    }
    let i = levels.iter().position(|l| l.value > v)?;
    if i == 0 || v <= 0.0 {
        return None;
    }
    let (l0, e0, l1, e1) = (
        levels[i - 1].value,
        levels[i - 1].effect,
        levels[i].value,
        levels[i].effect,
    );
    let w = (1.0 / v - 1.0 / l0) / (1.0 / l1 - 1.0 / l0);
    Some(e0 + w * (e1 - e0))
}

impl JointModel {
    fn unknown(&self, workload: &str, knobs: &Knobs) -> ModelError {
        ModelError::UnknownSetting {
            workload: workload.into(),
            knobs: knob_key(knobs),
            known: self
                .workloads
                .iter()
                .filter(|w| w.workload == workload)
                .map(|w| {
                    let mut s = knob_key(&w.fixed_knobs);
                    for (k, l) in w
                        .effects
                        .values()
                        .next()
                        .map(|e| &e.main)
                        .into_iter()
                        .flatten()
                    {
                        let (lo, hi) = (
                            l.first().map_or(0.0, |x| x.value),
                            l.last().map_or(0.0, |x| x.value),
                        );
                        if !s.is_empty() {
                            s.push(',');
                        }
                        s.push_str(&format!("{k}={lo}..{hi}"));
                    }
                    s
                })
                .collect::<Vec<_>>()
                .join("; "),
        }
    }

    /// Predict `workload` at `knobs`.
    ///
    /// # Errors
    /// [`ModelError::UnknownWorkload`]; [`ModelError::UnknownSetting`] for a knob value
    /// outside the workload's training range, or other knobs it was not trained at;
    /// [`ModelError::MissingKnob`]; [`ModelError::Fit`] for a non-physical prediction.
    pub fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction, ModelError> {
        if !self.workloads.iter().any(|w| w.workload == workload) {
            return Err(ModelError::UnknownWorkload {
                workload: workload.into(),
                known: super::name_list(
                    &self
                        .workloads
                        .iter()
                        .map(|w| w.workload.clone())
                        .collect::<Vec<_>>(),
                ),
            });
        }
        if let Some(k) = self.knobs.iter().find(|k| !knobs.contains_key(*k)) {
            return Err(ModelError::MissingKnob {
                knob: k.clone(),
                model: MODEL.into(),
                fix: format!("give every knob of the model: {}", self.knobs.join(", ")),
            });
        }
        let w = self
            .workloads
            .iter()
            .find(|w| w.workload == workload && features::matches_setting(knobs, &w.fixed_knobs))
            .ok_or_else(|| self.unknown(workload, knobs))?;
        let z = match (w.z, self.z_sd > 0.0) {
            (Some(z), true) => (z - self.z_mean) / self.z_sd,
            _ => 0.0,
        };
        let u = |k: &str| match (knobs.get(k), w.reference.get(k)) {
            (Some(v), Some(r)) if *v > 0.0 && *r > 0.0 => (v / r).ln(),
            _ => 0.0,
        };
        let mut pred = Prediction::default();
        for tf in &self.targets {
            let Some(e) = w.effects.get(&tf.target) else {
                continue;
            };
            let mut v = e.intercept;
            for (k, levels) in &e.main {
                v += effect_at(levels, knobs[k]).ok_or_else(|| self.unknown(workload, knobs))?;
            }
            for i in &tf.interactions {
                v += (i.beta0 + i.beta1 * z) * u(&i.knobs.0) * u(&i.knobs.1);
            }
            let mut y = untransform(tf.combine, v) * e.scale;
            if tf.target == "time_s" {
                let n = knobs.get(super::threads::THREADS_KNOB).copied();
                if let Some(c) = w
                    .contention
                    .iter()
                    .find(|c| n.is_some_and(|n| (n - c.threads).abs() < 1e-9))
                {
                    let f = super::analytic::FREQ_KNOBS
                        .iter()
                        .find_map(|k| knobs.get(*k))
                        .copied()
                        .unwrap_or(0.0);
                    y = c.time(f).ok_or_else(|| self.unknown(workload, knobs))?;
                }
            }
            if !(y.is_finite() && y > 0.0) {
                return Err(ModelError::Fit {
                    model: MODEL.into(),
                    what: format!(
                        "{} of `{workload}` at {} would be {y:.4} (additive parts sum to a non-positive value): refused; fix: --params '{{\"joint\":{{\"combine\":\"multiplicative\"}}}}'",
                        tf.target,
                        knob_key(knobs)
                    ),
                });
            }
            match tf.target.as_str() {
                "time_s" => pred.time_s = Some(y),
                "power_w" => pred.power_w = Some(y),
                _ => {}
            }
        }
        if pred.time_s.is_none() && pred.power_w.is_none() {
            return Err(self.unknown(workload, knobs));
        }
        pred.energy_j = pred.time_s.zip(pred.power_w).map(|(t, p)| t * p);
        Ok(pred)
    }

    /// What was fitted, for `fit --explain`.
    pub fn explain(&self) -> String {
        let mut s = format!(
            "joint model over {} (issue 21): T(y/g) = a + Σ_j e_j(k_j) + Σ_pairs (β0 + β1·z)·ln(k_j/r_j)·ln(k_l/r_l); T = ln (multiplicative) or identity (additive); E = P·t\n",
            self.knobs.join(" × ")
        );
        s += &format!(
            "interaction counter z: {} (mean {:.4e}, sd {:.4e} over the training workloads)\n",
            self.interaction_counter.as_deref().unwrap_or("none"),
            self.z_mean,
            self.z_sd
        );
        for t in &self.targets {
            s += &format!(
                "{}: {:?} ({})\n  interaction: {}\n",
                t.target, t.combine, t.combine_reason, t.interaction_choice
            );
            for i in &t.interactions {
                if i.workloads == 0 {
                    s += &format!(
                        "  {} × {}: interaction not identified (no workload has two values of both knobs in training): 0, the separable rule\n",
                        i.knobs.0, i.knobs.1
                    );
                } else {
                    s += &format!(
                        "  {} × {}: β0 = {:.4}, β1 = {:.4} (identified by {} workloads)\n",
                        i.knobs.0, i.knobs.1, i.beta0, i.beta1, i.workloads
                    );
                }
            }
        }
        for w in &self.workloads {
            for c in &w.contention {
                s += &format!(
                    "time of {} at {} threads from its point at {} MHz (CPI stack): CPI {:.3} against {:.3} at the reference thread count, memory share {:.3} (reference {:.3})\n",
                    w.workload, c.threads, c.b_mhz, c.cpi, c.cpi_ref, c.phi, c.phi_ref
                );
            }
        }
        s += "workload                         reference                       z\n";
        for w in &self.workloads {
            s += &format!(
                "{:<32} {:<31} {}\n",
                w.workload,
                knob_key(&w.reference),
                w.z.map_or("-".into(), |z| format!("{z:.4e}"))
            );
        }
        s
    }
}

/// Whether `auto` takes the joint model for these (training) points: two or more knobs
/// vary, and some workload's points at one setting of the other knobs have fewer than two
/// values of the one-knob models' knob (the first clock knob that varies, else `threads`),
/// so a one-knob curve cannot reach the settings across (a cross design).
pub fn needs_joint(points: &[Point]) -> bool {
    let varies = |k: &str| {
        let mut v = points.iter().filter_map(|p| p.knobs.get(k).copied());
        let first = v.next();
        v.any(|x| Some(x) != first)
    };
    let mut names: Vec<&String> = points.iter().flat_map(|p| p.knobs.keys()).collect();
    names.sort();
    names.dedup();
    if names.iter().filter(|k| varies(k)).count() < 2 {
        return false;
    }
    let Some(knob) = super::analytic::FREQ_KNOBS
        .iter()
        .chain(std::iter::once(&super::threads::THREADS_KNOB))
        .find(|k| varies(k))
    else {
        return false;
    };
    let mut groups: BTreeMap<(String, String), Vec<f64>> = BTreeMap::new();
    for p in points {
        let Some(v) = p.knobs.get(*knob) else {
            continue;
        };
        let other: Knobs = p
            .knobs
            .iter()
            .filter(|(k, _)| k.as_str() != *knob)
            .map(|(k, v)| (k.clone(), *v))
            .collect();
        let g = groups
            .entry((p.workload.clone(), knob_key(&other)))
            .or_default();
        if !g.contains(v) {
            g.push(*v);
        }
    }
    groups.values().any(|v| v.len() < 2)
}
