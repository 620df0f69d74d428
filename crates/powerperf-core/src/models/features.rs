//! Features for the models: means over repeats, counter rates, Spearman rank correlation.
//!
//! Counter rates follow Lively et al. (EnA-HPC 2011) and Moore (2012): an event count
//! ([`CounterKind::Count`]) is divided by the cycles counter of the same point when the set has
//! one (events per cycle), else by the run time (events per second). A counter that is already
//! a rate or an activity fraction ([`CounterKind::Rate`], e.g. DCGM `sm_active`) is used as is.

use super::Knobs;
use powerperf_format::set::{CounterKind, Point, SetMeta, TrainingSet};
use statrs::statistics::{Data, OrderStatistics, RankTieBreaker};
use std::collections::BTreeMap;

/// Counter names recognised as the cycles counter, in order of preference (perf, PAPI, ARM PMU,
/// LIKWID spellings; compared case-insensitively).
pub const CYCLES_NAMES: [&str; 6] = [
    "cycles",
    "cpu-cycles",
    "cpu_cycles",
    "papi_tot_cyc",
    "cpu_clk_unhalted_core",
    "cpu_clk_unhalted.thread",
];

/// A stable text key for a knob setting (`core_freq_mhz=595,mem_freq_mhz=810`), used to group
/// points and in files.
pub fn knob_key(knobs: &Knobs) -> String {
    knobs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// The set's unreliable targets by target name (workloads, `*` for all), as model files
/// keep them.
pub fn unreliable_by_target(meta: &SetMeta) -> BTreeMap<String, Vec<String>> {
    let mut unreliable: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for u in &meta.unreliable {
        unreliable
            .entry(u.target.clone())
            .or_default()
            .extend(u.workloads.iter().cloned());
    }
    unreliable
}

/// Whether `target` of `workload` is reliable in an [`unreliable_by_target`] map (the rule
/// of [`SetMeta::is_reliable`]).
pub fn is_reliable(
    unreliable: &BTreeMap<String, Vec<String>>,
    target: &str,
    workload: &str,
) -> bool {
    !unreliable
        .get(target)
        .is_some_and(|ws| ws.iter().any(|w| w == "*" || w == workload))
}

/// Whether `knobs` has every knob of `setting` at its value (within 10⁻⁹; other knobs of
/// `knobs` are free).
pub fn matches_setting(knobs: &Knobs, setting: &Knobs) -> bool {
    setting
        .iter()
        .all(|(k, v)| knobs.get(k).is_some_and(|x| (x - v).abs() < 1e-9))
}

/// The fitted group of `workload` at the other knob values `other`, among `groups` whose
/// (workload, other knobs) `key` gives; else [`ModelError::UnknownSetting`] with the
/// settings the model knows for that workload (`knobs` is the full setting asked for).
///
/// # Errors
/// No group matches.
pub fn find_group<'a, G>(
    groups: &'a [G],
    workload: &str,
    other: &Knobs,
    knobs: &Knobs,
    key: impl Fn(&G) -> (&str, &Knobs),
) -> Result<&'a G, super::error::ModelError> {
    groups
        .iter()
        .find(|g| key(g) == (workload, other))
        .ok_or_else(|| super::error::ModelError::UnknownSetting {
            workload: workload.to_string(),
            knobs: knob_key(knobs),
            known: groups
                .iter()
                .map(&key)
                .filter(|(w, _)| *w == workload)
                .map(|(_, o)| knob_key(o))
                .collect::<Vec<_>>()
                .join("; "),
        })
}

/// The mean over repeats of every (workload, knob values) in `set` ([`TrainingSet::means`]),
/// with derivable targets filled in ([`complete_targets`]): `energy_j = power_w × time_s` and
/// `power_w = energy_j / time_s` where one of them is missing.
///
/// docs/architecture.md ("Held-out evaluation"): a point is the mean over repeats of one (workload, knob
/// values).
pub fn mean_points(set: &TrainingSet) -> Vec<Point> {
    let mut points = set.means().points;
    for p in &mut points {
        complete_targets(p);
    }
    points
}

/// Fill `energy_j` from `power_w × time_s`, or `power_w` from `energy_j / time_s`, where one
/// is missing and the other two are present.
pub fn complete_targets(p: &mut Point) {
    match (p.time_s, p.power_w, p.energy_j) {
        (Some(t), Some(w), None) => p.energy_j = Some(w * t),
        (Some(t), None, Some(e)) if t > 0.0 => p.power_w = Some(e / t),
        _ => {}
    }
}

/// The cycles counter of a set, if it has one (see [`CYCLES_NAMES`]).
pub fn cycles_counter(meta: &SetMeta) -> Option<String> {
    count_counter(meta, &CYCLES_NAMES)
}

/// The first of `names` (in that order of preference, compared case-insensitively) that is
/// a Count counter of the set.
pub fn count_counter(meta: &SetMeta, names: &[&str]) -> Option<String> {
    names.iter().find_map(|want| {
        meta.counters
            .iter()
            .find(|(name, kind)| **kind == CounterKind::Count && name.eq_ignore_ascii_case(want))
            .map(|(name, _)| name.clone())
    })
}

/// How the rates of a set are normalised, for the model file and `--explain`.
pub fn rate_basis(meta: &SetMeta) -> String {
    match cycles_counter(meta) {
        Some(c) => format!("Count counters divided by `{c}` (events per cycle); Rate counters as is"),
        None => "Count counters divided by time_s (events per second: the set has no cycles counter); Rate counters as is".to_string(),
    }
}

/// Counter rates of one point, by feature name: `<counter>_per_cycle`, `<counter>_per_s` or
/// `<counter>` (a Rate counter), plus static features as `static:<name>` (values unchanged).
/// The cycles counter itself becomes `cycles_per_s` (the mean clock, Hz). A count whose
/// divisor is missing or zero is left out, never set to zero.
pub fn rates(meta: &SetMeta, p: &Point) -> BTreeMap<String, f64> {
    let cycles = cycles_counter(meta);
    let cyc_value = cycles.as_ref().and_then(|c| p.counters.get(c)).copied();
    let mut out = BTreeMap::new();
    for (name, kind) in &meta.counters {
        let Some(v) = p.counters.get(name).copied().filter(|v| v.is_finite()) else {
            continue;
        };
        match kind {
            CounterKind::Rate => {
                out.insert(name.clone(), v);
            }
            CounterKind::Count => {
                if Some(name) == cycles.as_ref() {
                    if let Some(t) = p.time_s.filter(|t| *t > 0.0) {
                        out.insert(format!("{name}_per_s"), v / t);
                    }
                } else if cycles.is_some() {
                    if let Some(c) = cyc_value.filter(|c| *c > 0.0) {
                        out.insert(format!("{name}_per_cycle"), v / c);
                    }
                } else if let Some(t) = p.time_s.filter(|t| *t > 0.0) {
                    out.insert(format!("{name}_per_s"), v / t);
                }
            }
        }
    }
    for (name, v) in &p.static_features {
        if v.is_finite() {
            out.insert(format!("static:{name}"), *v);
        }
    }
    out
}

/// Spearman's rank correlation ρ of `x` and `y`: the Pearson correlation of their ranks, ties
/// given the average of the ranks they span (Spearman 1904; the tie rule of
/// `scipy.stats.spearmanr`). Ranks come from statrs ([`OrderStatistics::ranks`] with
/// [`RankTieBreaker::Average`]).
///
/// Pairs where either value is not finite are dropped first. Returns `None` when fewer than two
/// pairs remain or when either ranked series is constant (ρ undefined).
pub fn spearman(x: &[f64], y: &[f64]) -> Option<f64> {
    let (mut xs, mut ys): (Vec<f64>, Vec<f64>) = x
        .iter()
        .zip(y)
        .filter(|(a, b)| a.is_finite() && b.is_finite())
        .map(|(a, b)| (*a, *b))
        .unzip();
    if xs.len() < 2 {
        return None;
    }
    let rx = Data::new(std::mem::take(&mut xs)).ranks(RankTieBreaker::Average);
    let ry = Data::new(std::mem::take(&mut ys)).ranks(RankTieBreaker::Average);
    pearson(&rx, &ry)
}

/// Pearson correlation of two equally long series; `None` if either is constant or shorter
/// than two.
pub fn pearson(x: &[f64], y: &[f64]) -> Option<f64> {
    let n = x.len().min(y.len());
    if n < 2 {
        return None;
    }
    let mx = x[..n].iter().sum::<f64>() / n as f64;
    let my = y[..n].iter().sum::<f64>() / n as f64;
    let (mut sxy, mut sxx, mut syy) = (0.0, 0.0, 0.0);
    for i in 0..n {
        let (dx, dy) = (x[i] - mx, y[i] - my);
        sxy += dx * dy;
        sxx += dx * dx;
        syy += dy * dy;
    }
    if sxx <= 0.0 || syy <= 0.0 {
        return None;
    }
    Some(sxy / (sxx * syy).sqrt())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spearman_perfect_and_reversed() {
        let x = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(spearman(&x, &[2.0, 4.0, 8.0, 16.0, 32.0]), Some(1.0));
        let r = spearman(&x, &[5.0, 4.0, 3.0, 2.0, 1.0]).unwrap();
        assert!((r + 1.0).abs() < 1e-12);
    }

    #[test]
    fn spearman_known_value_without_ties() {
        // 1 - 6·Σd²/(n(n²-1)); ranks x = 1..5, y ranks = [2,1,4,3,5], Σd² = 4 -> ρ = 0.8.
        let r = spearman(&[10.0, 20.0, 30.0, 40.0, 50.0], &[2.0, 1.0, 4.0, 3.0, 5.0]).unwrap();
        assert!((r - 0.8).abs() < 1e-12, "{r}");
    }

    #[test]
    fn spearman_with_ties_matches_scipy() {
        // scipy.stats.spearmanr([1,2,2,3],[1,3,2,4]) = 0.9486832980505138
        // (x ranks 1, 2.5, 2.5, 4: average ranks for the tie).
        let r = spearman(&[1.0, 2.0, 2.0, 3.0], &[1.0, 3.0, 2.0, 4.0]).unwrap();
        assert!((r - 0.948_683_298_050_513_8).abs() < 1e-12, "{r}");
        // Ties on both sides: x ranks 1.5,1.5,3.5,3.5,5 against y ranks 4.5,4.5,2,3,1;
        // Pearson of the ranks by hand = -0.9733285267845753.
        let r = spearman(&[1.0, 1.0, 2.0, 2.0, 3.0], &[3.0, 3.0, 1.0, 2.0, 0.0]).unwrap();
        assert!((r + 0.973_328_526_784_575_3).abs() < 1e-12, "{r}");
    }

    #[test]
    fn spearman_undefined_cases() {
        assert_eq!(spearman(&[1.0], &[2.0]), None);
        assert_eq!(spearman(&[1.0, 1.0, 1.0], &[1.0, 2.0, 3.0]), None);
        // NaN pairs are dropped, not ranked.
        let r = spearman(&[1.0, f64::NAN, 2.0, 3.0], &[1.0, 5.0, 2.0, 3.0]).unwrap();
        assert!((r - 1.0).abs() < 1e-12);
    }

    fn meta_with(counters: &[(&str, CounterKind)]) -> SetMeta {
        SetMeta {
            counters: counters.iter().map(|(n, k)| (n.to_string(), *k)).collect(),
            ..SetMeta::default()
        }
    }

    #[test]
    fn rates_per_cycle_when_cycles_present() {
        let meta = meta_with(&[
            ("cycles", CounterKind::Count),
            ("instructions", CounterKind::Count),
            ("sm_active", CounterKind::Rate),
        ]);
        let p = Point {
            time_s: Some(2.0),
            counters: [("cycles", 4e9), ("instructions", 6e9), ("sm_active", 0.5)]
                .into_iter()
                .map(|(k, v)| (k.to_string(), v))
                .collect(),
            ..Point::default()
        };
        let r = rates(&meta, &p);
        assert_eq!(r["instructions_per_cycle"], 1.5);
        assert_eq!(r["cycles_per_s"], 2e9);
        assert_eq!(r["sm_active"], 0.5);
        assert_eq!(r.len(), 3);
    }

    #[test]
    fn rates_per_second_without_cycles() {
        let meta = meta_with(&[("instructions", CounterKind::Count)]);
        let p = Point {
            time_s: Some(4.0),
            counters: [("instructions".to_string(), 8.0)].into_iter().collect(),
            ..Point::default()
        };
        assert_eq!(rates(&meta, &p)["instructions_per_s"], 2.0);
        // A missing divisor leaves the rate out.
        let p0 = Point {
            counters: p.counters.clone(),
            ..Point::default()
        };
        assert!(rates(&meta, &p0).is_empty());
    }

    #[test]
    fn means_over_repeats_and_derived_energy() {
        let mk = |rep, t, w| Point {
            workload: "a".into(),
            knobs: [("core_freq_mhz".to_string(), 1000.0)]
                .into_iter()
                .collect(),
            repeat: Some(rep),
            time_s: Some(t),
            power_w: Some(w),
            ..Point::default()
        };
        let set = TrainingSet {
            meta: SetMeta::default(),
            points: vec![mk(0, 1.0, 10.0), mk(1, 3.0, 20.0)],
        };
        let m = mean_points(&set);
        assert_eq!(m.len(), 1);
        assert_eq!(m[0].time_s, Some(2.0));
        assert_eq!(m[0].power_w, Some(15.0));
        assert_eq!(m[0].energy_j, Some(30.0));
        assert_eq!(m[0].repeat, None);
    }
}
