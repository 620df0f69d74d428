//! Fitting the counter model: the power transfer, the base CPI `β` and DRAM `γ` search,
//! and the whole fit ([`super::fit`]).

use super::*;

/// [`PowerTransfer::Roofline`]: per value of the other knobs, the static power at the
/// reference clock `s` (a 20-step grid in `[0, 0.95·min P0]`, least relative squared error
/// over the training points) and per clock `S(f)`, `v(f)` by weighted least squares of
/// `P_i(f) = S(f) + v(f)·(P_i0 − s)·ρ_i(f)` over the groups with power there (three or more).
fn fit_power_transfer(
    meta: &SetMeta,
    groups: &[(String, Knobs, Vec<&Point>)],
    fitted: &[CounterGroup],
    freq: &str,
) -> Vec<PowerTransferTable> {
    let mut keys: Vec<&Knobs> = Vec::new();
    for (_, o, _) in groups {
        if !keys.contains(&o) {
            keys.push(o);
        }
    }
    let mut out = Vec::new();
    for o in keys {
        // (clock, P_i(f), P_i0, ρ_i(f)) of the training groups' non-reference points.
        let mut rows: Vec<(f64, f64, f64, f64)> = Vec::new();
        let mut min_p0 = f64::INFINITY;
        for ((w, go, pts), g) in groups.iter().zip(fitted) {
            if go != o || !meta.is_reliable("power_w", w) {
                continue;
            }
            let Some(p0) = g.p0_w.filter(|p| *p > 0.0 && p.is_finite()) else {
                continue;
            };
            let mut any = false;
            for p in pts {
                let f = p.knobs[freq];
                let Some(pw) = p.power_w.filter(|v| *v > 0.0 && v.is_finite()) else {
                    continue;
                };
                if f == g.f0_mhz || f <= 0.0 {
                    continue;
                }
                if let Some(rho) = speed_ratio(g, g.f0_mhz / f) {
                    rows.push((f, pw, p0, rho));
                    any = true;
                }
            }
            if any {
                min_p0 = min_p0.min(p0);
            }
        }
        if rows.is_empty() || !min_p0.is_finite() {
            continue;
        }
        let mut clocks: Vec<f64> = rows.iter().map(|r| r.0).collect();
        clocks.sort_by(f64::total_cmp);
        clocks.dedup();
        let fit_at = |s: f64| -> (f64, Vec<[f64; 3]>) {
            let mut err = 0.0;
            let mut table = Vec::new();
            for &f in &clocks {
                let at: Vec<&(f64, f64, f64, f64)> = rows.iter().filter(|r| r.0 == f).collect();
                if at.len() < 3 {
                    continue;
                }
                let a: Vec<f64> = at.iter().flat_map(|r| [1.0, (r.2 - s) * r.3]).collect();
                let y: Vec<f64> = at.iter().map(|r| r.1).collect();
                let wt: Vec<f64> = at.iter().map(|r| 1.0 / (r.1 * r.1)).collect();
                let Some(b) = crate::models::scaling::weighted_least_squares(&a, 2, &y, &wt) else {
                    continue;
                };
                for r in &at {
                    let e = (b[0] + b[1] * (r.2 - s) * r.3 - r.1) / r.1;
                    err += e * e;
                }
                table.push([f, b[0], b[1]]);
            }
            (err, table)
        };
        let top = 0.95 * min_p0;
        let best = (0..20)
            .map(|k| top * k as f64 / 19.0)
            .map(|s| (s, fit_at(s)))
            .filter(|(_, (e, t))| e.is_finite() && !t.is_empty())
            .min_by(|a, b| a.1 .0.total_cmp(&b.1 .0));
        if let Some((s, (_, table))) = best {
            out.push(PowerTransferTable {
                other_knobs: o.clone(),
                static_ref_w: s,
                rows: table,
            });
        }
    }
    out
}

/// `combine = base_cpi`: the memory-clock knob and DRAM counters of the two-clock form, or
/// `(None, [])` for one clock: the set has no [`MEM_KNOB`] (or no point carries it), or no
/// DRAM count.
///
/// # Errors
/// A DRAM counter named in the params that is not a count of the set.
fn two_clock_counters(
    meta: &SetMeta,
    points: &[Point],
    params: &AnalyticCountersParams,
) -> Result<(Option<String>, Vec<String>), ModelError> {
    let names = if params.dram_counters.is_empty() {
        dram_counters(meta)
    } else {
        if let Some(c) = params
            .dram_counters
            .iter()
            .find(|c| meta.counters.get(*c) != Some(&CounterKind::Count))
        {
            return Err(not_in_set(meta, "DRAM", c, "count"));
        }
        params.dram_counters.clone()
    };
    let carried = points.iter().any(|p| p.knobs.contains_key(MEM_KNOB));
    let known = meta.knobs.iter().any(|k| k == MEM_KNOB);
    Ok(if known && carried && !names.is_empty() {
        (Some(MEM_KNOB.to_string()), names)
    } else {
        (None, Vec::new())
    })
}

/// `combine = base_cpi`: `(β, γ)` minimising the relative squared error of the training
/// points away from their group's reference setting; `γ` only with a memory-clock knob and
/// points at a second memory clock. `β` by golden section in `[0, the largest CPI of the
/// groups that score it]` (beyond it every share that enters the error is clamped); with `γ`
/// (in `[0, γ_top]`, `γ_top` where every such group's `μ` is 1), a log grid over both, then,
/// in the box of the best cell's neighbours, a zoom on `γ` and golden sections (each `γ` its
/// best `β`). `None` without any such point.
///
/// Where a training group that scores them runs on two or more threads and has a cycles
/// count, both readings of [`ThreadIdle`] are fitted and the one with the lower error kept
/// (a tie keeps [`ThreadIdle::OffCore`], the reading before stop 34); elsewhere the two are
/// the same and `OffCore` is returned.
fn fit_base_cpi(
    meta: &SetMeta,
    groups: &[(String, Knobs, Vec<&Point>)],
    fitted: &[CounterGroup],
    freq: &str,
    mem_knob: Option<&str>,
) -> Option<(f64, Option<f64>, ThreadIdle)> {
    let (b, c, e, threaded) =
        fit_base_cpi_with(meta, groups, fitted, freq, mem_knob, ThreadIdle::OffCore)?;
    if threaded {
        if let Some((bw, cw, ew, _)) =
            fit_base_cpi_with(meta, groups, fitted, freq, mem_knob, ThreadIdle::Waits)
        {
            if ew < e {
                return Some((bw, cw, ThreadIdle::Waits));
            }
        }
    }
    Some((b, c, ThreadIdle::OffCore))
}

/// [`fit_base_cpi`] under one reading of a thread's idle time: `(β, γ, error, threaded)`,
/// `threaded` when a group that scores them runs on two or more threads with a cycles count
/// (where the readings differ).
fn fit_base_cpi_with(
    meta: &SetMeta,
    groups: &[(String, Knobs, Vec<&Point>)],
    fitted: &[CounterGroup],
    freq: &str,
    mem_knob: Option<&str>,
    idle: ThreadIdle,
) -> Option<(f64, Option<f64>, f64, bool)> {
    // Per training point away from its reference: t0/t, f0/f, m0/m; its group's φ terms
    // (u, v) and μ's term w (NaN without one) once per group in `blocks`, with the group's
    // range of `pairs` (the points in the same order).
    let mut pairs: Vec<[f64; 3]> = Vec::new();
    let mut blocks: Vec<([f64; 3], std::ops::Range<usize>)> = Vec::new();
    let (mut top, mut top_gamma): (f64, f64) = (0.0, 0.0);
    let mut threaded = false;
    for ((w, _, pts), g) in groups.iter().zip(fitted) {
        let Some(n_inst) = g.instructions.filter(|n| *n > 0.0 && n.is_finite()) else {
            continue;
        };
        let Some(t0) = g.t0_s.filter(|_| meta.is_reliable("time_s", w)) else {
            continue;
        };
        let Some((u, v)) = share_terms(g, idle) else {
            continue;
        };
        let w_mem = mem_term(g).unwrap_or(f64::NAN);
        let busy = g
            .cycles
            .filter(|c| *c > 0.0 && c.is_finite())
            .unwrap_or(t0 * g.f0_mhz * 1e6 * group_threads(g));
        let before = pairs.len();
        let mut other_mem = false;
        for p in pts {
            let f = p.knobs[freq];
            let rm = match (mem_knob, g.mem0_mhz) {
                (Some(k), Some(m0)) => m0 / p.knobs[k],
                _ => 1.0,
            };
            let Some(t) = p.time_s.filter(|t| *t > 0.0 && t.is_finite()) else {
                continue;
            };
            if (f != g.f0_mhz || rm != 1.0)
                && f > 0.0
                && f.is_finite()
                && rm.is_finite()
                && rm > 0.0
            {
                pairs.push([t0 / t, g.f0_mhz / f, rm]);
                other_mem |= rm != 1.0;
            }
        }
        if pairs.len() > before {
            blocks.push(([u, v, w_mem], before..pairs.len()));
        }
        // The brackets end where every group that scores β (γ) is clamped: a group known at
        // its reference point alone (a held-out workload) would only add a flat stretch
        // where golden section cannot tell which way to go.
        if pairs.len() > before {
            threaded |=
                group_threads(g) > 1.0 && g.cycles.is_some_and(|c| c > 0.0 && c.is_finite());
            if busy.is_finite() && busy > 0.0 {
                top = top.max(busy / n_inst);
            }
            if let (true, Some(d), Some(m0)) = (other_mem, g.dram, g.mem0_mhz) {
                let c = m0 * 1e6 * t0 / d;
                if c.is_finite() && c > 0.0 {
                    top_gamma = top_gamma.max(c);
                }
            }
        }
    }
    if pairs.is_empty() || !(top > 0.0 && top.is_finite()) {
        return None;
    }
    // The sum of squared relative errors over `pairs` in their order ([`shares_ratio`]'s
    // terms, a point without a positive finite ratio left out), the group terms φ and μ
    // (and two clocks' `1 − max(φ, μ)`) computed once per group: the same values, summed
    // from `Sum`'s start `−0.0`, as summing each point's `shares_ratio` error.
    let err = |b: f64, c: Option<f64>| {
        let mut sum = -0.0f64;
        for ([u, v, w], range) in &blocks {
            let phi = u * (b * v).min(1.0);
            let mut add = |r: f64, q: f64| {
                if r.is_finite() && r > 0.0 {
                    let e = q * r - 1.0;
                    sum += e * e;
                }
            };
            match c {
                Some(c) if w.is_finite() => {
                    let mu = (c * w).min(1.0);
                    let head = 1.0 - phi.max(mu);
                    for &[q, rc, rm] in &pairs[range.clone()] {
                        add(head + (phi * rc).max(mu * rm), q);
                    }
                }
                Some(_) => {}
                None => {
                    for &[q, rc, rm] in &pairs[range.clone()] {
                        if rm == 1.0 {
                            add(1.0 - phi + phi * rc, q);
                        }
                    }
                }
            }
        }
        sum
    };
    if mem_knob.is_none() || !(top_gamma > 0.0 && top_gamma.is_finite()) {
        let b = analytic::golden_section_min(0.0, top, top * 1e-9, 200, |b| err(b, None));
        return Some((b, None, err(b, None), threaded));
    }
    // Two clocks: a log grid over both (the max makes the error surface kinked, so no single
    // bracket holds one minimum), then nested golden sections in the box of the best grid
    // cell's neighbours, kept where they improve on it.
    const GRID: usize = 17;
    let log_grid = |top: f64| -> Vec<f64> {
        std::iter::once(0.0)
            .chain((0..GRID).map(|i| top * 10f64.powf(-4.0 * (1.0 - i as f64 / (GRID - 1) as f64))))
            .collect()
    };
    let (betas, gammas) = (log_grid(top), log_grid(top_gamma));
    let mut best = (0, 0, f64::INFINITY);
    for (i, b) in betas.iter().enumerate() {
        for (j, c) in gammas.iter().enumerate() {
            let e = err(*b, Some(*c));
            if e < best.2 {
                best = (i, j, e);
            }
        }
    }
    let around = |v: &[f64], i: usize| (v[i.saturating_sub(1)], v[(i + 1).min(v.len() - 1)]);
    let ((blo, bhi), (clo, chi)) = (around(&betas, best.0), around(&gammas, best.1));
    // `β`'s best for a `γ`, to `tol` of `top` (coarser while zooming, where only the order
    // of the scores matters).
    let best_beta_to = |c: f64, tol: f64| {
        let b = analytic::golden_section_min(blo, bhi, top * tol, 200, |b| err(b, Some(c)));
        (b, err(b, Some(c)))
    };
    let best_beta = |c: f64| best_beta_to(c, 1e-8);
    let zoom_score = |c: f64| best_beta_to(c, 1e-6).1;
    // The kinks (a group's μ reaching 1) leave narrow minima beside flat stretches in the box
    // too, where golden section cannot tell which way to go: zoom in first, scanning 9 values
    // of `γ` and keeping the span around the first best (its ends already scored), down to
    // 1e-3 of `γ`, then golden section.
    let (mut lo, mut hi) = (clo, chi);
    let (mut flo, mut fhi) = (zoom_score(lo), zoom_score(hi));
    while hi - lo > hi * 1e-3 + top_gamma * 1e-12 {
        let scan: Vec<f64> = (0..=8)
            .map(|i| lo + (hi - lo) * f64::from(i) / 8.0)
            .collect();
        let scored: Vec<f64> = (0..=8)
            .map(|i| match i {
                0 => flo,
                8 => fhi,
                _ => zoom_score(scan[i]),
            })
            .collect();
        let k = (0..scan.len())
            .min_by(|a, b| scored[*a].total_cmp(&scored[*b]))
            .expect("the scan is never empty");
        let (a, b) = (k.saturating_sub(1), (k + 1).min(8));
        (lo, hi, flo, fhi) = (scan[a], scan[b], scored[a], scored[b]);
    }
    let c = analytic::golden_section_min(lo, hi, hi * 1e-9, 200, |c| best_beta(c).1);
    let (b, e) = best_beta(c);
    Some(if e <= best.2 {
        (b, Some(c), e, threaded)
    } else {
        (betas[best.0], Some(gammas[best.1]), best.2, threaded)
    })
}

/// The memory terms of the fit: none for `combine = base_cpi`; the params' terms, or the
/// set's `dram_active` as a fraction when the params name none.
///
/// # Errors
/// No term given and no `dram_active` in the set, or a term's counter not in the set.
fn memory_terms(
    meta: &SetMeta,
    params: &AnalyticCountersParams,
    base_cpi: bool,
) -> Result<Vec<MemoryTerm>, ModelError> {
    let terms = if base_cpi {
        Vec::new()
    } else if params.memory_terms.is_empty() {
        match meta
            .counters
            .iter()
            .find(|(n, k)| n.eq_ignore_ascii_case("dram_active") && **k == CounterKind::Rate)
        {
            Some((n, _)) => vec![MemoryTerm {
                counter: n.clone(),
                kind: MemoryTermKind::Fraction,
            }],
            None => {
                return Err(ModelError::NotEnoughData {
                    model: "analytic_counters".into(),
                    what: format!(
                        "no memory counter given and the set has no `dram_active`; its counters: [{}]. Fix: --params '{{\"analytic_counters\":{{\"memory_terms\":[{{\"counter\":\"l1d_cache_refill\",\"kind\":{{\"ns_per_event\":110}}}}]}}}}' (docs/models.md)",
                        counter_list(meta)
                    ),
                })
            }
        }
    } else {
        params.memory_terms.clone()
    };
    if let Some(t) = terms
        .iter()
        .find(|t| !meta.counters.contains_key(&t.counter))
    {
        return Err(not_in_set(meta, "memory term", &t.counter, "counter"));
    }
    Ok(terms)
}

/// `combine = base_cpi`: the retired-instructions counter (the params' or the set's, see
/// [`instructions_counter`]) and the cycles counter where the set has one.
///
/// # Errors
/// The named counter is not a count of the set, or the set has no instructions count.
fn base_cpi_counters(
    meta: &SetMeta,
    params: &AnalyticCountersParams,
) -> Result<(Option<String>, Option<String>), ModelError> {
    let inst = match &params.instructions_counter {
        Some(c) if meta.counters.get(c) == Some(&CounterKind::Count) => c.clone(),
        Some(c) => {
            return Err(not_in_set(meta, "instructions", c, "count"))
        }
        None => instructions_counter(meta).ok_or_else(|| ModelError::NotEnoughData {
            model: "analytic_counters".into(),
            what: format!(
                "combine = base_cpi needs a retired-instructions count ({}); the set's counters: [{}]. Fix: collect `instructions` (perf) or `inst_retired` (ARM PMU), or name it with --params '{{\"analytic_counters\":{{\"combine\":\"base_cpi\",\"instructions_counter\":\"NAME\"}}}}'",
                INSTRUCTIONS_NAMES.join(", "),
                counter_list(meta)
            ),
        })?,
    };
    Ok((Some(inst), crate::models::features::cycles_counter(meta)))
}

/// `combine = max`: the compute-pipe counters (the params' or those of
/// [`DEFAULT_COMPUTE_COUNTERS`] the set has, as rates) and the engine-active counter.
///
/// # Errors
/// A counter named in the params that is not in the set.
fn roofline_counters(
    meta: &SetMeta,
    params: &AnalyticCountersParams,
) -> Result<(Vec<String>, Option<String>), ModelError> {
    let rate_counter = |name: &str| {
        meta.counters
            .iter()
            .find(|(n, k)| n.eq_ignore_ascii_case(name) && **k == CounterKind::Rate)
            .map(|(n, _)| n.clone())
    };
    let compute: Vec<String> = if params.compute_counters.is_empty() {
        DEFAULT_COMPUTE_COUNTERS
            .iter()
            .filter_map(|c| rate_counter(c))
            .collect()
    } else {
        for c in &params.compute_counters {
            if !meta.counters.contains_key(c) {
                return Err(not_in_set(meta, "compute", c, "counter"));
            }
        }
        params.compute_counters.clone()
    };
    let active = match &params.active_counter {
        Some(c) if !meta.counters.contains_key(c) => {
            return Err(not_in_set(meta, "active", c, "counter"))
        }
        Some(c) => Some(c.clone()),
        None => rate_counter(DEFAULT_ACTIVE_COUNTER),
    };
    Ok((compute, active))
}

/// The memory-time scale `α` and where it comes from: least squares on the sums
/// `sxy = Σ x·y/t²`, `sxx = Σ x²/t²` of the training points away from the reference clock
/// with `calibrate` and the sum form, 1 otherwise.
fn alpha_of(params: &AnalyticCountersParams, base_cpi: bool, sxy: f64, sxx: f64) -> (f64, String) {
    if base_cpi {
        (1.0, "not used (combine = base_cpi)".to_string())
    } else if params.combine == Combine::Max {
        (
            1.0,
            "1 (combine = max: the counters as they are, nothing fitted)".to_string(),
        )
    } else if !params.calibrate {
        (
            1.0,
            "1 (calibrate off: the counters as they are)".to_string(),
        )
    } else if sxx > 0.0 {
        (
            (sxy / sxx).max(0.0),
            "least squares over the training points at the non-reference clocks".to_string(),
        )
    } else {
        (
            1.0,
            "1 (no training point at a second clock to calibrate on)".to_string(),
        )
    }
}

pub(super) fn fit_with(
    meta: &SetMeta,
    points: &[Point],
    params: &AnalyticCountersParams,
    whole_power_model: bool,
) -> Result<AnalyticCountersModel, ModelError> {
    let freq =
        analytic::freq_knob_of(meta, points, None).ok_or_else(|| ModelError::MissingKnob {
            knob: "core_freq_mhz".into(),
            model: "analytic_counters".into(),
            fix: "use a set with a clock knob".into(),
        })?;
    let base_cpi = params.combine == Combine::BaseCpi;
    let terms = memory_terms(meta, params, base_cpi)?;
    // Base CPI: the instructions and cycles counters.
    let (instructions_counter, cycles_counter) = if base_cpi {
        base_cpi_counters(meta, params)?
    } else {
        (None, None)
    };
    // Two clocks: a memory-clock knob the points carry and DRAM transaction counts.
    let (mem_knob, dram_names) = if base_cpi {
        two_clock_counters(meta, points, params)?
    } else {
        (None, Vec::new())
    };
    let group_key = |k: &Knobs| group_key(k, &freq, mem_knob.as_deref());
    // Bound and bottleneck: the compute-pipe and engine-active counters.
    let (compute_counters, active_counter) = if params.combine == Combine::Max {
        roofline_counters(meta, params)?
    } else {
        (Vec::new(), None)
    };
    // A fraction counter at the reference point, finite and clamped to 0..1.
    let fraction = |p: &Point, c: &str| {
        p.counters
            .get(c)
            .copied()
            .filter(|v| v.is_finite())
            .map(|v| v.clamp(0.0, 1.0))
    };
    // Groups and their reference points.
    let mut groups: Vec<(String, Knobs, Vec<&Point>)> = Vec::new();
    let with_clocks = |p: &&Point| {
        p.knobs.contains_key(&freq) && mem_knob.as_ref().is_none_or(|m| p.knobs.contains_key(m))
    };
    for p in points.iter().filter(with_clocks) {
        let o = group_key(&p.knobs);
        match groups.iter_mut().find(|g| g.0 == p.workload && g.1 == o) {
            Some(g) => g.2.push(p),
            None => groups.push((p.workload.clone(), o, vec![p])),
        }
    }
    let mut out = Vec::new();
    let (mut sxy, mut sxx) = (0.0, 0.0);
    for (w, o, pts) in &groups {
        // The highest core clock, and there the highest memory clock.
        let mem_of = |p: &Point| mem_knob.as_ref().map_or(0.0, |m| p.knobs[m]);
        let r = pts
            .iter()
            .max_by(|a, b| {
                a.knobs[&freq]
                    .total_cmp(&b.knobs[&freq])
                    .then(mem_of(a).total_cmp(&mem_of(b)))
            })
            .expect("groups are never empty");
        let f0 = r.knobs[&freq];
        let t0 = r
            .time_s
            .filter(|t| *t > 0.0 && meta.is_reliable("time_s", w));
        let m = t0.and_then(|t0| memory_time(r, &terms, f0, t0));
        if let (Some(t0), Some(m)) = (t0, m) {
            for p in pts {
                let (f, Some(t)) = (p.knobs[&freq], p.time_s.filter(|t| *t > 0.0)) else {
                    continue;
                };
                let x = m * (1.0 - f0 / f);
                let y = t - t0 * f0 / f;
                sxy += x * y / (t * t);
                sxx += x * x / (t * t);
            }
        }
        let compute_fraction = compute_counters
            .iter()
            .filter_map(|c| fraction(r, c))
            .reduce(f64::max);
        let active_fraction = active_counter.as_deref().and_then(|c| fraction(r, c));
        let memory_fraction = terms
            .iter()
            .map(|t| match t.kind {
                MemoryTermKind::Fraction => fraction(r, &t.counter),
                _ => None,
            })
            .sum::<Option<f64>>()
            .map(|v| v.clamp(0.0, 1.0));
        out.push(CounterGroup {
            workload: w.clone(),
            other_knobs: o.clone(),
            f0_mhz: f0,
            t0_s: t0,
            p0_w: r.power_w.filter(|_| meta.is_reliable("power_w", w)),
            memory_s: m,
            compute_fraction,
            active_fraction,
            memory_fraction,
            instructions: instructions_counter
                .as_ref()
                .and_then(|c| r.counters.get(c).copied()),
            cycles: cycles_counter
                .as_ref()
                .and_then(|c| r.counters.get(c).copied()),
            mem0_mhz: mem_knob.as_ref().map(|m| r.knobs[m]),
            dram: (!dram_names.is_empty())
                .then(|| {
                    dram_names
                        .iter()
                        .map(|c| r.counters.get(c).copied())
                        .sum::<Option<f64>>()
                })
                .flatten(),
        });
    }
    // Base CPI: β (and with two clocks γ) on the relative squared error of the training
    // points at the non-reference settings.
    let fitted_cpi = if base_cpi {
        fit_base_cpi(meta, &groups, &out, &freq, mem_knob.as_deref())
    } else {
        None
    };
    let (alpha, alpha_source) = alpha_of(params, base_cpi, sxy, sxx);
    // Power: the analytic model where a group has two clocks.
    let power_params = AnalyticParams {
        freq_knob: Some(freq.clone()),
        ..AnalyticParams::default()
    };
    let power = if whole_power_model {
        analytic::fit(meta, points, &power_params)
    } else {
        analytic::fit_power_only(meta, points, &power_params)
    }
    .ok();
    let power_transfer =
        if params.power_transfer == PowerTransfer::Roofline && params.combine == Combine::Max {
            fit_power_transfer(meta, &groups, &out, &freq)
        } else {
            Vec::new()
        };
    Ok(AnalyticCountersModel {
        freq_knob: freq,
        memory_terms: terms,
        alpha,
        alpha_source,
        groups: out,
        power,
        power_transfer,
        combine: params.combine,
        compute_counters,
        active_counter,
        base_cpi: fitted_cpi.map(|(b, _, _)| b),
        instructions_counter,
        cycles_counter,
        mem_cycles_per_transaction: fitted_cpi.and_then(|(_, c, _)| c),
        thread_idle: fitted_cpi.map_or(ThreadIdle::OffCore, |(_, _, i)| i),
        dram_counters: dram_names,
        mem_knob,
    })
}
