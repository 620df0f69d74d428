//! The joint model's least-squares fit of one target: per-workload main effects, the shared
//! interaction by Frisch–Waugh–Lovell on the within-workload residuals, and the inner
//! cross-validation that decides whether the interaction carries over to a new workload.

use super::{
    lstsq, solve_gram, transform, untransform, Combine, Effects, Group, Interaction, Level,
};
use crate::models::Knobs;
use std::collections::BTreeMap;

/// Per usable group: (group index, effects); interactions; relative training residual;
/// how the interaction was chosen.
pub(super) type TargetResult = (Vec<(usize, Effects)>, Vec<Interaction>, f64, String);

/// One workload's rows for one target.
struct G {
    i: usize,
    scale: f64,
    /// `T(y / scale)`.
    y: Vec<f64>,
    /// Main-effect design rows.
    x: Vec<Vec<f64>>,
    /// Interaction regressors per row: per pair, `u·v` (and `z·u·v` with a counter).
    xi: Vec<Vec<f64>>,
    /// Gram matrix and right-hand side of the interaction regressors and `y`, both
    /// residualised on the main-effect design (Frisch–Waugh–Lovell).
    gram: Vec<Vec<f64>>,
    rhs: Vec<f64>,
    /// Per pair: whether this workload's points identify it.
    ident: Vec<bool>,
}

impl G {
    fn col(&self, c: usize, rows: &[usize]) -> Vec<f64> {
        rows.iter().map(|r| self.xi[*r][c]).collect()
    }
    fn inter(&self, r: usize, beta: &[f64]) -> f64 {
        self.xi[r].iter().zip(beta).map(|(a, b)| a * b).sum()
    }
    /// Main effects from `rows` with the interaction `beta` taken off.
    fn main(&self, rows: &[usize], beta: &[f64]) -> Option<Vec<f64>> {
        if rows.len() < self.x.first().map_or(1, Vec::len) {
            return None;
        }
        let x: Vec<Vec<f64>> = rows.iter().map(|r| self.x[*r].clone()).collect();
        let y: Vec<f64> = rows
            .iter()
            .map(|r| self.y[*r] - self.inter(*r, beta))
            .collect();
        lstsq(&x, &y)
    }
    fn fitted(&self, r: usize, b: &[f64], beta: &[f64]) -> f64 {
        self.x[r].iter().zip(b).map(|(a, b)| a * b).sum::<f64>() + self.inter(r, beta)
    }
}

/// Residual of `col` on the main-effect design of `g` (Frisch–Waugh–Lovell).
fn resid(g: &G, col: &[f64]) -> Vec<f64> {
    let b = lstsq(&g.x, col).unwrap_or_default();
    g.x.iter()
        .zip(col)
        .map(|(r, c)| c - r.iter().zip(&b).map(|(a, b)| a * b).sum::<f64>())
        .collect()
}

/// The shared interaction from the workloads `gs` (all rows): `option` 0 none, 1 `β0` per
/// pair, 2 `β0 + β1·z`. Returns the coefficients (per pair, `per` of them) and, per pair,
/// how many workloads identify it.
fn estimate_beta(gs: &[&G], npairs: usize, per: usize, option: usize) -> (Vec<f64>, Vec<usize>) {
    let np = npairs * per;
    let mut beta = vec![0.0; np];
    let ident: Vec<usize> = (0..npairs)
        .map(|p| gs.iter().filter(|g| g.ident[p]).count())
        .collect();
    if option == 0 {
        return (beta, ident);
    }
    // Columns of pairs nobody identifies are left at 0, and the counter slope where fewer
    // than three workloads identify the pair.
    let keep: Vec<usize> = (0..np)
        .filter(|c| {
            let n = ident[c / per];
            n > 0 && (c % per == 0 || (option == 2 && n >= 3))
        })
        .collect();
    let solve = |cols: &[usize]| {
        let mut m = vec![vec![0.0; cols.len() + 1]; cols.len()];
        for g in gs {
            for (i, ci) in cols.iter().enumerate() {
                for (j, cj) in cols.iter().enumerate() {
                    m[i][j] += g.gram[*ci][*cj];
                }
                m[i][cols.len()] += g.rhs[*ci];
            }
        }
        solve_gram(m)
    };
    let b0: Vec<usize> = keep.iter().copied().filter(|c| c % per == 0).collect();
    let (cols, b) = match solve(&keep) {
        Some(b) => (keep, Some(b)),
        // The counter slope not separable from β0: β0 alone.
        None => (b0.clone(), solve(&b0)),
    };
    if let Some(b) = b {
        for (j, c) in cols.iter().enumerate() {
            beta[*c] = b[j];
        }
    }
    (beta, ident)
}

#[allow(clippy::too_many_arguments)]
pub(super) fn fit_target(
    groups: &[Group],
    usable: &[usize],
    pairs: &[(String, String)],
    t: &str,
    combine: Combine,
    interaction: bool,
    with_z: bool,
    zs: &[Option<f64>],
    zstd: &dyn Fn(Option<f64>) -> f64,
) -> TargetResult {
    let per = if with_z { 2 } else { 1 };
    let gs: Vec<G> = usable
        .iter()
        .map(|&i| {
            let g = &groups[i];
            let vals: Vec<f64> = g
                .points
                .iter()
                .map(|p| p.target(t).unwrap_or(1.0))
                .collect();
            let scale = (vals.iter().map(|v| v.ln()).sum::<f64>() / vals.len() as f64).exp();
            let z = zstd(zs[i]);
            G {
                i,
                scale,
                y: vals.iter().map(|v| transform(combine, v / scale)).collect(),
                x: g.points.iter().map(|p| g.row(&p.knobs)).collect(),
                xi: g
                    .points
                    .iter()
                    .map(|p| {
                        pairs
                            .iter()
                            .flat_map(|(a, b)| {
                                let uv = g.u(&p.knobs, a) * g.u(&p.knobs, b);
                                if with_z {
                                    vec![uv, z * uv]
                                } else {
                                    vec![uv]
                                }
                            })
                            .collect()
                    })
                    .collect(),
                gram: Vec::new(),
                rhs: Vec::new(),
                ident: Vec::new(),
            }
        })
        .map(|mut g| {
            let np = pairs.len() * per;
            let all: Vec<usize> = (0..g.y.len()).collect();
            let cols: Vec<Vec<f64>> = (0..np).map(|c| resid(&g, &g.col(c, &all))).collect();
            let yr = resid(&g, &g.y);
            let dot = |a: &[f64], b: &[f64]| a.iter().zip(b).map(|(x, y)| x * y).sum::<f64>();
            g.gram = cols
                .iter()
                .map(|a| cols.iter().map(|b| dot(a, b)).collect())
                .collect();
            g.rhs = cols.iter().map(|a| dot(a, &yr)).collect();
            g.ident = (0..pairs.len())
                .map(|p| cols[p * per].iter().any(|v| v.abs() > 1e-9))
                .collect();
            g
        })
        .collect();
    let refs: Vec<&G> = gs.iter().collect();
    let (_, ident) = estimate_beta(&refs, pairs.len(), per, 0);
    let option = if !interaction {
        (0, "off (--params)".to_string())
    } else if ident.iter().all(|n| *n == 0) {
        (
            0,
            "not identified: no workload has two values of two knobs together in training"
                .to_string(),
        )
    } else {
        choose_interaction(groups, &gs, pairs.len(), per, with_z)
    };
    let (beta, ident) = estimate_beta(&refs, pairs.len(), per, option.0);
    let mut effects = Vec::new();
    let mut sse = 0.0;
    for g in &gs {
        let group = &groups[g.i];
        let all: Vec<usize> = (0..g.y.len()).collect();
        let b = g
            .main(&all, &beta)
            .unwrap_or_else(|| vec![0.0; g.x[0].len()]);
        for r in 0..g.y.len() {
            let yhat = untransform(combine, g.fitted(r, &b, &beta)) * g.scale;
            let y = group.points[r].target(t).unwrap_or(yhat);
            sse += (yhat / y - 1.0).powi(2);
        }
        let mut main = BTreeMap::new();
        let mut c = 1;
        for (knob, levels) in &group.levels {
            let mut e = Vec::new();
            for l in levels {
                if *l == group.reference[knob] {
                    e.push(Level {
                        value: *l,
                        effect: 0.0,
                    });
                } else {
                    e.push(Level {
                        value: *l,
                        effect: b[c],
                    });
                    c += 1;
                }
            }
            main.insert(knob.clone(), e);
        }
        effects.push((
            g.i,
            Effects {
                scale: g.scale,
                intercept: b[0],
                main,
            },
        ));
    }
    let interactions = pairs
        .iter()
        .enumerate()
        .map(|(pi, (a, b))| Interaction {
            knobs: (a.clone(), b.clone()),
            beta0: beta[pi * per],
            beta1: if with_z { beta[pi * per + 1] } else { 0.0 },
            workloads: ident[pi],
        })
        .collect();
    (effects, interactions, sse, option.1)
}

/// Whether the interaction carries over to a new workload, judged on the training
/// workloads alone: each workload that identifies it is in turn reduced to a cross (its
/// points at the settings of a workload measured on a cross only, else its points one knob
/// away from its reference), its main effects fitted there, and its other points predicted
/// with the interaction learned from the remaining workloads. The option (none, `β0`,
/// `β0 + β1·z`) with the lowest mean relative error is kept; ties go to the simpler one.
/// Fewer than three such workloads: none (too few to judge).
fn choose_interaction(
    groups: &[Group],
    gs: &[G],
    npairs: usize,
    per: usize,
    with_z: bool,
) -> (usize, String) {
    let identifies = |g: &G| g.ident.iter().any(|b| *b);
    let full: Vec<&G> = gs.iter().filter(|g| identifies(g)).collect();
    if full.len() < 3 {
        return (0, format!("none: only {} training workload(s) identify it, too few to judge whether it carries over (3 needed)", full.len()));
    }
    // The cross pattern of a workload measured on a cross only, if any.
    let pattern: Option<Vec<Knobs>> = gs.iter().find(|g| !identifies(g)).map(|g| {
        groups[g.i]
            .points
            .iter()
            .map(|p| groups[g.i].knob_values(&p.knobs))
            .collect()
    });
    let options: Vec<usize> = if with_z { vec![0, 1, 2] } else { vec![0, 1] };
    let mut score = vec![0.0; options.len()];
    let mut n = 0usize;
    for v in &full {
        let grp = &groups[v.i];
        let cross_rows = |keep: &dyn Fn(&Knobs) -> bool| -> Vec<usize> {
            (0..v.y.len())
                .filter(|r| keep(&grp.knob_values(&grp.points[*r].knobs)))
                .collect()
        };
        let mut rows = match &pattern {
            Some(pat) => cross_rows(&|k| pat.contains(k)),
            None => Vec::new(),
        };
        if rows.len() == v.y.len() || v.main(&rows, &vec![0.0; npairs * per]).is_none() {
            let r = grp.reference.clone();
            rows = cross_rows(&|k| k.iter().filter(|(n, x)| r.get(*n) != Some(x)).count() <= 1);
        }
        let test: Vec<usize> = (0..v.y.len()).filter(|r| !rows.contains(r)).collect();
        if test.is_empty() || v.main(&rows, &vec![0.0; npairs * per]).is_none() {
            continue;
        }
        let others: Vec<&G> = full.iter().filter(|g| g.i != v.i).copied().collect();
        for (o, s) in options.iter().zip(score.iter_mut()) {
            let (beta, _) = estimate_beta(&others, npairs, per, *o);
            let Some(b) = v.main(&rows, &beta) else {
                continue;
            };
            // Mean |T(ŷ/g) − T(y/g)|: about the relative error in either combination.
            let e: f64 = test
                .iter()
                .map(|r| (v.fitted(*r, &b, &beta) - v.y[*r]).abs())
                .sum::<f64>()
                / test.len() as f64;
            *s += e;
        }
        n += 1;
    }
    if n < 3 {
        return (0, format!("none: only {n} training workload(s) could be reduced to a cross to judge it (3 needed)"));
    }
    let names = ["none", "β0", "β0 + β1·z"];
    let best = (0..options.len())
        .min_by(|a, b| score[*a].total_cmp(&score[*b]).then(a.cmp(b)))
        .unwrap_or(0);
    let detail: Vec<String> = options
        .iter()
        .zip(&score)
        .map(|(o, s)| format!("{} {:.4}", names[*o], s / n as f64))
        .collect();
    (
        options[best],
        format!(
            "{}: inner cross-validation over {n} training workloads reduced to a cross, mean |error| of T(y) [{}]",
            names[options[best]],
            detail.join(", ")
        ),
    )
}
