//! The power model shared by every group of the analytic model (see the parent module's **Power**).

use super::*;

/// The power model shared by every group (see the module's **Power**): the exponent `k`,
/// and with `shared_static_power` one `P_static` for all groups.
pub(super) struct PowerFit {
    /// Per group, the (clock MHz, power W) training points (empty when power is unreliable).
    pub(super) power_pts: Vec<Vec<(f64, f64)>>,
    pub(super) power_exponent: f64,
    pub(super) power_exponent_source: String,
    /// The shared fit ([`fit_power_shared`]): `P_0`, the `c_g`, the weighted SSE.
    pub(super) shared: Option<(f64, Vec<Option<f64>>, f64)>,
    /// How static power is modelled, for the model file.
    pub(super) static_power: String,
    /// The voltage floor's knee, MHz ([`PowerShape::VoltageFloor`]), when fitted.
    pub(super) knee: Option<f64>,
    /// Each group with three or more clocks fits its own `k` ([`PowerShape::PowerLawPerGroup`]).
    pub(super) per_group: bool,
}

/// Fit the power exponent (or take it from the parameters) and, when the groups have no
/// residual degree of freedom and `shared_static_power` is set, one shared `P_static`.
pub(super) fn fit_power_model(
    meta: &SetMeta,
    groups: &[Group],
    params: &AnalyticParams,
    f_ref: f64,
) -> PowerFit {
    let power_pts: Vec<Vec<(f64, f64)>> = groups
        .iter()
        .map(|g| {
            if !meta.is_reliable("power_w", &g.workload) {
                return Vec::new();
            }
            g.pts
                .iter()
                .filter_map(|(f, p)| p.power_w.filter(|w| *w > 0.0).map(|w| (*f, w)))
                .collect()
        })
        .collect();
    let fitted_groups = power_pts.iter().filter(|p| p.len() >= 2).count();
    let dof: usize = power_pts
        .iter()
        .filter(|p| p.len() >= 2)
        .map(|p| p.len() - 2)
        .sum();
    let n_power: usize = power_pts.iter().map(|p| p.len()).sum();
    let n_groups = power_pts.iter().filter(|p| !p.is_empty()).count();
    // Per-group P_static when the groups have residual degrees of freedom; otherwise one P_0
    // shared by all groups (static power belongs to the chip), which leaves n - groups - 2.
    let shared_static =
        params.shared_static_power && dof == 0 && n_groups >= 2 && n_power > n_groups + 2;
    let table = params.voltage_table.as_deref().filter(|t| !t.is_empty());
    // The groups share a few clocks: each distinct clock's dynamic term is computed once per
    // exponent tried (the same function of the same clock, so the same value) instead of
    // once per group and point.
    let mut clocks: Vec<f64> = power_pts.iter().flatten().map(|(f, _)| *f).collect();
    clocks.sort_by(f64::total_cmp);
    clocks.dedup_by(|a, b| a.to_bits() == b.to_bits());
    let total_sse = |k: f64| -> f64 {
        let terms: Vec<f64> = clocks
            .iter()
            .map(|&f| dynamic_term(f, f_ref, k, table))
            .collect();
        let term = |f: f64| match clocks.binary_search_by(|c| c.total_cmp(&f)) {
            Ok(i) => terms[i],
            Err(_) => dynamic_term(f, f_ref, k, table),
        };
        if shared_static {
            fit_power_shared(&power_pts, &term).map_or(f64::INFINITY, |r| r.2)
        } else {
            power_pts
                .iter()
                .filter_map(|p| fit_power(p, &term).map(|(_, s)| s))
                .sum()
        }
    };
    let (power_exponent, mut power_exponent_source) = if table.is_some() {
        (
            params.default_power_exponent,
            "not used: P = P_static + c·V(f)²·f with V(f) from the voltage table".to_string(),
        )
    } else if let Some(k) = params.power_exponent {
        (k, "fixed by parameter".to_string())
    } else if dof == 0 && !shared_static {
        (
            params.default_power_exponent,
            "default: no residual degree of freedom (two clocks per workload)".to_string(),
        )
    } else {
        let (lo, hi) = params.power_exponent_range;
        // Golden-section search on the total relative squared error.
        let k = golden_section_min(lo, hi, 1e-9, 100, total_sse);
        let how = if shared_static {
            format!("one P_static shared by {n_groups} groups (two clocks per group leave no per-group residual), {} residual degrees of freedom", n_power - n_groups - 2)
        } else {
            format!("{fitted_groups} groups, {dof} residual degrees of freedom")
        };
        (
            k,
            format!("fitted: least relative squared error at the training clocks; {how}"),
        )
    };
    // The voltage floor's knee (PowerShape::VoltageFloor): one per chip, fitted like `k` on
    // the total relative squared error, where `k` would be fitted (per-group P_static, a
    // residual degree of freedom). With three training clocks both shapes have one shared
    // parameter and reach the same training error, so the training points cannot choose
    // between them: the shape is the user's (`power_shape`). The error is not unimodal in
    // the knee (a knee between two training clocks moves only the upper ones), so a grid of
    // 96 steps over [lowest, highest training clock] finds its valley and a golden-section
    // search refines it there.
    let knee = if table.is_none()
        && params.power_exponent.is_none()
        && params.power_shape == PowerShape::VoltageFloor
        && dof > 0
        && !shared_static
    {
        let lo = power_pts
            .iter()
            .filter(|p| p.len() >= 3)
            .flat_map(|p| p.iter().map(|q| q.0))
            .fold(f64::INFINITY, f64::min);
        let sse = |kn: f64| -> f64 {
            power_pts
                .iter()
                .filter_map(|p| fit_power(p, &|f| knee_term(f, f_ref, kn)).map(|(_, s)| s))
                .sum()
        };
        (lo.is_finite() && lo > 0.0 && lo < f_ref).then(|| {
            let steps = 96;
            let at = |i: usize| lo + (f_ref - lo) * i as f64 / steps as f64;
            let best = (0..=steps)
                .map(|i| (i, sse(at(i))))
                .filter(|(_, e)| e.is_finite())
                .min_by(|a, b| a.1.total_cmp(&b.1))
                .map_or(steps, |b| b.0);
            let (a, b) = (at(best.saturating_sub(1)), at((best + 1).min(steps)));
            golden_section_min(a, b, 1e-6, 100, sse)
        })
    } else {
        None
    };
    if let Some(kn) = knee {
        power_exponent_source = format!("not used (power_shape voltage_floor): V(f) = V0·max(1, f/f_knee), P = P_static + c·f·max(1, f/f_knee)², f_knee = {kn:.1} MHz fitted (least relative squared error at the training clocks; {fitted_groups} groups, {dof} residual degrees of freedom); the power law was {power_exponent_source}");
    }
    // Per-group exponents where the shared k would be fitted (no table, no fixed k, no
    // knee, per-group P_static with a residual degree of freedom).
    let per_group = table.is_none()
        && params.power_exponent.is_none()
        && params.power_shape == PowerShape::PowerLawPerGroup
        && knee.is_none()
        && dof > 0
        && !shared_static;
    if per_group {
        let own = power_pts.iter().filter(|p| p.len() >= 3).count();
        power_exponent_source = format!(
            "per group (power_shape power_law_per_group): each of the {own} groups with three or more clocks fits its own k in [{}, {}] (column k of the table); this shared k serves groups with two clocks and was {power_exponent_source}",
            params.power_exponent_range.0, params.power_exponent_range.1
        );
    }
    let shared = if shared_static {
        fit_power_shared(&power_pts, &|f| {
            dynamic_term(f, f_ref, power_exponent, table)
        })
    } else {
        None
    };
    let static_power = match &shared {
        Some((p0, _, _)) => format!("shared by all groups: P_static = {p0:.4} W"),
        None => "per group".to_string(),
    };

    PowerFit {
        power_pts,
        power_exponent,
        power_exponent_source,
        shared,
        static_power,
        knee,
        per_group,
    }
}
