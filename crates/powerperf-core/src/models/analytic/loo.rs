//! Exact leave-one-out for `analytic` without refitting the whole set (issue 41, item 3).
//!
//! A point left out of [`super::fit`] moves only what is fitted from it:
//!
//! - its own group's curves (the group of its workload at its other knobs): refitted here
//!   with [`super::fit_group`] on the group's other points;
//! - the effective clocks ([`super::calibrate_clocks`]), but only when its group is a
//!   compute-bound group of the calibration with or without it (three or more clocks with a
//!   time, `t·f` within `calibration_tolerance` at the two lowest): recomputed then on the
//!   groups without the point, else the whole set's are the refit's;
//! - the shared power model ([`super::fit_power_model`]: the exponent `k` that groups with two
//!   clocks share, the voltage floor's knee, a shared `P_static`), which its group's power
//!   curve reads unless it fits its own `k` (`power_law_per_group`, three or more clocks with a
//!   power): recomputed then on the groups without the point;
//! - the reference clock `f_ref` (the highest training clock), and whether the fit fails at
//!   all.
//!
//! Where the last of these could change (the point is the only one at the highest clock,
//! alone in its group, or its group is left with no curve) the model is refitted on every
//! other point, as before. Every recomputed part is the same function of the same inputs as
//! in the full refit, so the prediction is the full refit's to the bit; the tests check it
//! point by point (`leave_one_out_equals_the_full_refit_bit_for_bit`).

use super::{
    calibrate_clocks, fit, fit_group, fit_power_model, freq_knob_of, group_by_clock, other_knobs,
    AnalyticModel, AnalyticParams, EffectiveClock, Group, PowerFit, PowerShape,
};
use crate::models::features::knob_key;
use crate::models::ModelError;
use crate::store::set::{Point, SetMeta};
use std::collections::HashMap;

/// What the whole set's fit shares with every leave-one-out refit.
pub(crate) struct Loo<'a> {
    meta: &'a SetMeta,
    points: &'a [Point],
    params: &'a AnalyticParams,
    freq: String,
    groups: Vec<Group<'a>>,
    /// Group index by (workload, other knobs' key).
    index: HashMap<(String, String), usize>,
    f_ref: f64,
    /// Points at `f_ref`.
    at_f_ref: usize,
    effective_clocks: Vec<EffectiveClock>,
    /// Per group, its points with a power (empty where power is unreliable).
    power_len: Vec<usize>,
    /// Over the groups: residual degrees of freedom, powered points, groups with a power.
    dof: usize,
    n_power: usize,
    n_groups: usize,
}

impl<'a> Loo<'a> {
    /// The shared parts of the whole set's fit; `None` where the fit needs no shortcut
    /// (no clock knob, no positive clock: every refit fails as the whole fit does).
    pub(crate) fn new(
        meta: &'a SetMeta,
        points: &'a [Point],
        params: &'a AnalyticParams,
    ) -> Option<Self> {
        let freq = freq_knob_of(meta, points, params.freq_knob.as_deref())?;
        let groups = group_by_clock(points, &freq);
        let f_ref = groups
            .iter()
            .flat_map(|g| g.pts.iter().map(|p| p.0))
            .fold(0.0, f64::max);
        if f_ref <= 0.0 {
            return None;
        }
        let at_f_ref = groups
            .iter()
            .flat_map(|g| g.pts.iter())
            .filter(|p| p.0 == f_ref)
            .count();
        let (effective_clocks, _) = calibrate_clocks(meta, &groups, params, f_ref);
        let power_len: Vec<usize> = groups.iter().map(|g| power_points(meta, g)).collect();
        let dof = power_len.iter().map(|&n| n.saturating_sub(2)).sum();
        let n_power = power_len.iter().sum();
        let n_groups = power_len.iter().filter(|&&n| n > 0).count();
        let index = groups
            .iter()
            .enumerate()
            .map(|(i, g)| ((g.workload.clone(), knob_key(&g.other)), i))
            .collect();
        Some(Self {
            meta,
            points,
            params,
            freq,
            groups,
            index,
            f_ref,
            at_f_ref,
            effective_clocks,
            power_len,
            dof,
            n_power,
            n_groups,
        })
    }

    /// The model fitted on every point but `points[i]`: exactly [`fit`]'s on those points
    /// as far as the prediction at `points[i]` reads it (see the module docs), refitted in
    /// full where a shortcut cannot be shown to be exact.
    pub(crate) fn model_without(&self, i: usize) -> Result<AnalyticModel, ModelError> {
        self.shortcut(i).unwrap_or_else(|| {
            let rest: Vec<Point> = self
                .points
                .iter()
                .enumerate()
                .filter(|(j, _)| *j != i)
                .map(|(_, p)| p.clone())
                .collect();
            fit(self.meta, &rest, self.params)
        })
    }

    /// Whether `model_without(i)` takes the shortcut rather than a full refit.
    #[cfg(test)]
    pub(crate) fn shortcut_taken(&self, i: usize) -> bool {
        self.shortcut(i).is_some()
    }

    fn shortcut(&self, i: usize) -> Option<Result<AnalyticModel, ModelError>> {
        let p = &self.points[i];
        let f = p.knobs.get(&self.freq).copied().filter(|f| *f > 0.0)?;
        let gi = *self.index.get(&(
            p.workload.clone(),
            knob_key(&other_knobs(&p.knobs, &self.freq)),
        ))?;
        let g = &self.groups[gi];
        if g.pts.len() < 2 || (f == self.f_ref && self.at_f_ref < 2) {
            return None;
        }
        let without = Group {
            workload: g.workload.clone(),
            other: g.other.clone(),
            pts: g
                .pts
                .iter()
                .filter(|q| !std::ptr::eq(q.1, p))
                .copied()
                .collect(),
        };
        if without.pts.len() + 1 != g.pts.len() {
            return None;
        }
        let groups = || -> Vec<Group> {
            self.groups
                .iter()
                .enumerate()
                .map(|(j, h)| {
                    if j == gi {
                        clone_group(&without)
                    } else {
                        clone_group(h)
                    }
                })
                .collect()
        };
        let effective_clocks = if self.calibrates(g) || self.calibrates(&without) {
            calibrate_clocks(self.meta, &groups(), self.params, self.f_ref).0
        } else {
            self.effective_clocks.clone()
        };
        let n_without = power_points(self.meta, &without);
        let (dof, n_power, n_groups) = (
            self.dof - self.power_len[gi].saturating_sub(2) + n_without.saturating_sub(2),
            self.n_power - self.power_len[gi] + n_without,
            self.n_groups - usize::from(self.power_len[gi] > 0) + usize::from(n_without > 0),
        );
        let shared_static =
            self.params.shared_static_power && dof == 0 && n_groups >= 2 && n_power > n_groups + 2;
        let own_k = self
            .params
            .voltage_table
            .as_deref()
            .is_none_or(|t| t.is_empty())
            && self.params.power_exponent.is_none()
            && self.params.power_shape == PowerShape::PowerLawPerGroup
            && dof > 0
            && !shared_static
            && n_without >= 3;
        let unpowered = !self.meta.is_reliable("power_w", &without.workload);
        let (pf, gpos) = if own_k || unpowered {
            // The group's power reads nothing shared: its own points alone (what
            // `fit_power_model` gives it), and a per-group `k`.
            let ppts: Vec<(f64, f64)> = if unpowered {
                Vec::new()
            } else {
                without
                    .pts
                    .iter()
                    .filter_map(|(f, p)| p.power_w.filter(|w| *w > 0.0).map(|w| (*f, w)))
                    .collect()
            };
            let pf = PowerFit {
                power_pts: vec![ppts],
                power_exponent: self.params.default_power_exponent,
                power_exponent_source: String::new(),
                shared: None,
                static_power: String::new(),
                knee: None,
                per_group: own_k,
            };
            (pf, 0)
        } else {
            (
                fit_power_model(self.meta, &groups(), self.params, self.f_ref),
                gi,
            )
        };
        let eff = |f: f64| -> f64 {
            effective_clocks
                .iter()
                .find(|e| e.nominal_mhz == f)
                .map_or(f, |e| e.effective_mhz)
        };
        let group = fit_group(
            self.meta,
            self.params,
            &without,
            gpos,
            &pf,
            self.f_ref,
            &eff,
            true,
        );
        if group.time.is_none() && group.power.is_none() {
            // Whether the refit fails turns on the other groups: refit them.
            return None;
        }
        if own_k && group.power.as_ref().is_some_and(|c| c.exponent.is_none()) {
            return None;
        }
        Some(Ok(AnalyticModel {
            params: self.params.clone(),
            freq_knob: self.freq.clone(),
            f_ref_mhz: self.f_ref,
            power_exponent: pf.power_exponent,
            power_exponent_source: String::new(),
            static_power: String::new(),
            voltage_knee_mhz: pf.knee,
            effective_clocks,
            calibration_note: String::new(),
            groups: vec![group],
        }))
    }

    /// Whether `g` is one of the calibration's compute-bound groups ([`calibrate_clocks`]'s
    /// test).
    fn calibrates(&self, g: &Group) -> bool {
        if !self.params.calibrate_clock || !self.meta.is_reliable("time_s", &g.workload) {
            return false;
        }
        let tp: Vec<(f64, f64)> = g
            .pts
            .iter()
            .filter_map(|(f, p)| p.time_s.filter(|t| *t > 0.0).map(|t| (*f, t)))
            .collect();
        if tp.len() < 3 {
            return false;
        }
        let ((f1, t1), (f2, t2)) = (tp[0], tp[1]);
        // The calibration skips a group when this exceeds the tolerance (NaN does not).
        let gap = ((t1 * f1) / (t2 * f2) - 1.0).abs();
        gap <= self.params.calibration_tolerance || gap.is_nan()
    }
}

fn clone_group<'a>(g: &Group<'a>) -> Group<'a> {
    Group {
        workload: g.workload.clone(),
        other: g.other.clone(),
        pts: g.pts.clone(),
    }
}

/// The group's points with a positive power ([`fit_power_model`]'s `power_pts`), 0 where
/// the set marks power unreliable for the workload.
fn power_points(meta: &SetMeta, g: &Group) -> usize {
    if !meta.is_reliable("power_w", &g.workload) {
        return 0;
    }
    g.pts
        .iter()
        .filter(|(_, p)| p.power_w.is_some_and(|w| w > 0.0))
        .count()
}
