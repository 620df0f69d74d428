//! Counter-informed thread-count model: Amdahl's law with a memory-bandwidth floor whose
//! saturation bandwidth is read off the memory-traffic counters at the training thread counts.
//!
//! Time, per (workload, other knob values):
//!
//! ```text
//! t(n) = max( t_serial + t_parallel/n ,  B / BW_sat )
//! ```
//!
//! - `t_serial + t_parallel/n`: Amdahl (AFIPS 1967), fitted as in [`super::threads`] on the
//!   training points whose achieved bandwidth is below the knee (the compute-limited ones).
//! - `B`: memory traffic of the run, bytes (or counter units), the mean over the training
//!   points of `count × bytes_per_event` for a count counter (e.g. `LLC-load-misses` × 64 B
//!   cache lines), or `rate × t` for a rate counter (bytes/s, or an activity fraction such as
//!   DCGM `dram_active`). Strong scaling moves the same data at every thread count.
//! - `BW_sat`: the machine's saturation bandwidth. Given as a parameter (e.g. a STREAM result
//!   from machine-constants), or estimated from the training points: the achieved bandwidth
//!   `BW(n) = B(n)/t(n)` of a workload that has stopped growing linearly with `n` within the
//!   training counts (`BW(n_max) < knee · n_max · BW(n_min)/n_min`) is the ceiling it ran into;
//!   the largest such ceiling over all workloads is `BW_sat`. The floor is the roofline bound
//!   (Williams, Waterman, Patterson, CACM 2009) applied to thread counts, the memory-bound
//!   regime of Loghin & Teo (Parallel Computing 2019) where adding cores stops reducing time.
//! - Without a traffic counter, or when no workload saturates and no `BW_sat` is given, the
//!   floor is absent and the model is Amdahl's (the group's notes say why).
//!
//! Power and energy: `P(n) = P_0 + n·P_core` and `E = P·t`, as in [`super::threads`].
//!
//! Held-out rules (docs/architecture.md): only counters and times of the training points are read; the
//! held-out point's knobs are the only input of [`ThreadsBwModel::predict`].

use super::features::{find_group, knob_key};
use super::threads::{self, ThreadsGroup, THREADS_KNOB};
use super::{Knobs, ModelError, Prediction};
use powerperf_format::set::{CounterKind, Point, SetMeta};
use serde::{Deserialize, Serialize};

/// Memory-traffic counters recognised without `traffic_counter`, in order of preference
/// (perf generic, perf cache events, Intel and ARM PMU names, DCGM; case-insensitive).
pub const TRAFFIC_NAMES: [&str; 8] = [
    "dram_bytes",
    "llc-load-misses",
    "llc_misses",
    "cache-misses",
    "longest_lat_cache.miss",
    "l2d_cache_refill",
    "papi_l3_tcm",
    "dram_active",
];

/// Parameters of the bandwidth-floor thread model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThreadsBwParams {
    /// The memory-traffic counter; `None`: the first of [`TRAFFIC_NAMES`] the set has.
    pub traffic_counter: Option<String>,
    /// Bytes per event of a count counter (a cache line: 64).
    pub bytes_per_event: f64,
    /// The saturation bandwidth in traffic units per second (bytes/s for counts); `None`:
    /// estimated from the training points (module docs).
    pub saturation_bw: Option<f64>,
    /// A workload whose bandwidth at its highest training count is below `knee` times the
    /// linear extrapolation from its lowest count counts as saturated.
    pub knee: f64,
}

impl Default for ThreadsBwParams {
    fn default() -> Self {
        Self {
            traffic_counter: None,
            bytes_per_event: 64.0,
            saturation_bw: None,
            knee: 0.8,
        }
    }
}

/// One (workload, other knobs) group: the Amdahl/power fit plus its memory traffic.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BwGroup {
    pub amdahl: ThreadsGroup,
    /// Mean traffic over the training points (bytes, or counter units × s for a rate).
    pub traffic: Option<f64>,
    /// (threads, achieved bandwidth) at the training points.
    pub bandwidth: Vec<(f64, f64)>,
    /// This group's ceiling when it saturated within the training counts.
    pub saturated_at: Option<f64>,
}

/// The fitted model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadsBwModel {
    /// The traffic counter used (`None`: no floor anywhere).
    pub traffic_counter: Option<String>,
    /// `BW_sat` and where it came from.
    pub saturation_bw: Option<f64>,
    pub saturation_source: String,
    pub groups: Vec<BwGroup>,
}

fn traffic_of(p: &Point, counter: &str, kind: CounterKind, bytes_per_event: f64) -> Option<f64> {
    let v = *p.counters.get(counter)?;
    let t = p.time_s.filter(|t| *t > 0.0)?;
    let b = match kind {
        CounterKind::Count => v * bytes_per_event,
        CounterKind::Rate => v * t,
    };
    (b.is_finite() && b > 0.0).then_some(b)
}

fn other_knobs(knobs: &Knobs) -> Knobs {
    knobs
        .iter()
        .filter(|(k, _)| *k != THREADS_KNOB)
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// Fit on mean points.
///
/// # Errors
/// As [`threads::fit`]; [`ModelError::NotEnoughData`] when `traffic_counter` names a counter
/// the set lacks.
pub fn fit(
    meta: &SetMeta,
    points: &[Point],
    params: &ThreadsBwParams,
) -> Result<ThreadsBwModel, ModelError> {
    let counter = match &params.traffic_counter {
        Some(c) => {
            if !meta.counters.contains_key(c) {
                return Err(ModelError::NotEnoughData {
                    model: "threads_bw".into(),
                    what: format!(
                        "traffic_counter `{c}` is not a counter of the set; its counters: [{}]",
                        meta.counters.keys().cloned().collect::<Vec<_>>().join(", ")
                    ),
                });
            }
            Some(c.clone())
        }
        None => TRAFFIC_NAMES.iter().find_map(|want| {
            meta.counters
                .keys()
                .find(|n| n.eq_ignore_ascii_case(want))
                .cloned()
        }),
    };
    // Per group: traffic and bandwidth at the training points.
    // (workload, other knobs, (threads, bandwidth) per training point, traffic per point)
    type Acc = (String, Knobs, Vec<(f64, f64)>, Vec<f64>);
    let mut groups: Vec<Acc> = Vec::new();
    for p in points {
        let Some(n) = p.knobs.get(THREADS_KNOB).copied().filter(|n| *n > 0.0) else {
            continue;
        };
        let other = other_knobs(&p.knobs);
        let i = match groups
            .iter()
            .position(|g| g.0 == p.workload && g.1 == other)
        {
            Some(i) => i,
            None => {
                groups.push((p.workload.clone(), other, Vec::new(), Vec::new()));
                groups.len() - 1
            }
        };
        if let Some(c) = &counter {
            let kind = meta.counters[c];
            if let Some(b) = traffic_of(p, c, kind, params.bytes_per_event) {
                groups[i].2.push((n, b / p.time_s.unwrap_or(f64::NAN)));
                groups[i].3.push(b);
            }
        }
    }
    // Which groups saturated, and BW_sat.
    let mut saturated: Vec<Option<f64>> = Vec::new();
    for g in &mut groups {
        g.2.sort_by(|a, b| a.0.total_cmp(&b.0));
        let bw = &g.2;
        let sat = match (bw.first(), bw.last()) {
            (Some(lo), Some(hi)) if bw.len() >= 2 && hi.0 > lo.0 => {
                let linear = lo.1 / lo.0 * hi.0;
                (hi.1 < params.knee * linear).then(|| bw.iter().fold(0.0f64, |a, b| a.max(b.1)))
            }
            _ => None,
        };
        saturated.push(sat);
    }
    let (saturation_bw, saturation_source) = match (params.saturation_bw, &counter) {
        (Some(s), _) => (
            Some(s),
            "given in the parameters (saturation_bw)".to_string(),
        ),
        (None, None) => (
            None,
            "no memory-traffic counter in the set: no bandwidth floor, Amdahl only".to_string(),
        ),
        (None, Some(_)) => {
            let best = groups
                .iter()
                .zip(&saturated)
                .filter_map(|(g, s)| s.map(|s| (s, &g.0)))
                .max_by(|a, b| a.0.total_cmp(&b.0));
            match best {
                Some((s, w)) => (
                    Some(s),
                    format!("the ceiling workload `{w}` reached within the training thread counts"),
                ),
                None => (
                    None,
                    "no workload's bandwidth saturated within the training thread counts: no floor, Amdahl only"
                        .to_string(),
                ),
            }
        }
    };
    // Amdahl on the compute-limited training points of each group (those below the knee of a
    // saturated group are all of them otherwise).
    let mut out = Vec::new();
    for (g, sat) in groups.iter().zip(&saturated) {
        let limit = saturation_bw.map(|s| params.knee * s);
        let mine: Vec<Point> = points
            .iter()
            .filter(|p| p.workload == g.0 && other_knobs(&p.knobs) == g.1)
            .filter(|p| {
                let n = p.knobs.get(THREADS_KNOB).copied().unwrap_or(0.0);
                let bw = g.2.iter().find(|b| b.0 == n).map(|b| b.1);
                match (limit, bw) {
                    (Some(l), Some(bw)) => bw < l,
                    _ => true,
                }
            })
            .cloned()
            .collect();
        // Keep at least two thread counts for Amdahl: fall back to all points.
        let use_pts: Vec<Point> = if mine.len() >= 2 {
            mine
        } else {
            points
                .iter()
                .filter(|p| p.workload == g.0 && other_knobs(&p.knobs) == g.1)
                .cloned()
                .collect()
        };
        let amdahl = match threads::fit(meta, &use_pts) {
            Ok(m) => m.groups.into_iter().next(),
            Err(_) => None,
        };
        let Some(mut amdahl) = amdahl else { continue };
        if counter.is_none() {
            amdahl
                .notes
                .push("no memory-traffic counter: Amdahl only".into());
        }
        let traffic = (!g.3.is_empty()).then(|| g.3.iter().sum::<f64>() / g.3.len() as f64);
        out.push(BwGroup {
            amdahl,
            traffic,
            bandwidth: g.2.clone(),
            saturated_at: *sat,
        });
    }
    if out.is_empty() {
        // Same points as threads::fit: report its error (no threads knob, too few counts).
        threads::fit(meta, points)?;
        return Err(ModelError::NotEnoughData {
            model: "threads_bw".into(),
            what: "no (workload, other knobs) group has two thread counts with a time or power"
                .into(),
        });
    }
    Ok(ThreadsBwModel {
        traffic_counter: counter,
        saturation_bw,
        saturation_source,
        groups: out,
    })
}

impl ThreadsBwModel {
    /// Predict `workload` at `knobs` (must include `threads`).
    ///
    /// # Errors
    /// Missing `threads`, or no fit for this workload at the other knob values.
    pub fn predict(&self, workload: &str, knobs: &Knobs) -> Result<Prediction, ModelError> {
        let other = other_knobs(knobs);
        let g = find_group(&self.groups, workload, &other, knobs, |g| {
            (g.amdahl.workload.as_str(), &g.amdahl.other_knobs)
        })?;
        let base = threads::ThreadsModel {
            groups: vec![g.amdahl.clone()],
        }
        .predict(workload, knobs)?;
        let floor = match (g.traffic, self.saturation_bw) {
            (Some(b), Some(s)) if s > 0.0 => Some(b / s),
            _ => None,
        };
        let time_s = match (base.time_s, floor) {
            (Some(t), Some(f)) => Some(t.max(f)),
            (t, _) => t,
        };
        let energy_j = time_s.zip(base.power_w).map(|(t, w)| t * w);
        Ok(Prediction {
            time_s,
            power_w: base.power_w,
            energy_j,
        })
    }

    /// What was fitted, for `fit --explain`.
    pub fn explain(&self) -> String {
        let mut s = "thread-count model with a bandwidth floor: t(n) = max(t_serial + t_parallel/n, B/BW_sat), P(n) = P_0 + n·P_core, E = P·t\n".to_string();
        s += &format!(
            "traffic counter: {}\nBW_sat: {} ({})\n",
            self.traffic_counter.as_deref().unwrap_or("none"),
            self.saturation_bw
                .map_or("none".to_string(), |v| format!("{v:.4e} per s")),
            self.saturation_source
        );
        s += "workload                         other knobs          t_serial_s t_parallel_s  traffic     floor_s\n";
        for g in &self.groups {
            let f = |v: Option<f64>| v.map_or("-".to_string(), |v| format!("{v:.4}"));
            let floor = g.traffic.zip(self.saturation_bw).map(|(b, s)| b / s);
            s += &format!(
                "{:<32} {:<20} {:>10} {:>12} {:>9} {:>10}{}\n",
                g.amdahl.workload,
                knob_key(&g.amdahl.other_knobs),
                f(g.amdahl.t_serial_s),
                f(g.amdahl.t_parallel_s),
                g.traffic.map_or("-".to_string(), |v| format!("{v:.3e}")),
                f(floor),
                if g.saturated_at.is_some() {
                    "  (saturated in training)"
                } else {
                    ""
                }
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn meta() -> SetMeta {
        let mut m = SetMeta::default();
        m.counters
            .insert("LLC-load-misses".into(), CounterKind::Count);
        m
    }

    /// A point of a workload with Amdahl compute time `ts + tp/n`, traffic `bytes`, on a
    /// machine with saturation bandwidth `bw_sat`: t = max(ts + tp/n, bytes/bw_sat).
    fn pt(w: &str, n: f64, ts: f64, tp: f64, bytes: f64, bw_sat: f64) -> Point {
        let t = (ts + tp / n).max(bytes / bw_sat);
        Point {
            workload: w.into(),
            knobs: [(THREADS_KNOB.to_string(), n)].into_iter().collect(),
            time_s: Some(t),
            power_w: Some(50.0 + 5.0 * n),
            counters: [("LLC-load-misses".to_string(), bytes / 64.0)]
                .into_iter()
                .collect(),
            ..Point::default()
        }
    }

    fn knobs(n: f64) -> Knobs {
        [(THREADS_KNOB.to_string(), n)].into_iter().collect()
    }

    #[test]
    fn without_traffic_counter_it_is_amdahl_exactly() {
        let pts: Vec<Point> = [(1.0, 10.0), (2.0, 6.0)]
            .iter()
            .map(|(n, t)| Point {
                workload: "a".into(),
                knobs: knobs(*n),
                time_s: Some(*t),
                power_w: Some(30.0 + 5.0 * n),
                ..Point::default()
            })
            .collect();
        let m = fit(&SetMeta::default(), &pts, &ThreadsBwParams::default()).unwrap();
        assert!(m.saturation_bw.is_none());
        let p = m.predict("a", &knobs(8.0)).unwrap();
        assert!((p.time_s.unwrap() - 3.0).abs() < 1e-12);
        assert!((p.energy_j.unwrap() - 210.0).abs() < 1e-9);
    }

    #[test]
    fn saturation_bandwidth_learned_from_one_workload_floors_another() {
        // Machine: 10 GB/s. `sat` (0.5 + 8/n s, 40 GB) hits the ceiling at n = 3 within the
        // training counts 1..4; `lin` (1 + 20/n s, 40 GB) grows linearly in training but its
        // floor of 4 s binds from n = 6 on, where Amdahl alone predicts less.
        let bw = 10e9;
        let mut pts = Vec::new();
        for n in [1.0, 2.0, 3.0, 4.0] {
            pts.push(pt("sat", n, 0.5, 8.0, 40e9, bw));
            pts.push(pt("lin", n, 1.0, 20.0, 40e9, bw));
        }
        let m = fit(&meta(), &pts, &ThreadsBwParams::default()).unwrap();
        assert_eq!(m.traffic_counter.as_deref(), Some("LLC-load-misses"));
        assert!((m.saturation_bw.unwrap() - bw).abs() / bw < 1e-12);
        for n in [5.0f64, 8.0, 16.0] {
            let want = (1.0 + 20.0 / n).max(4.0);
            let got = m.predict("lin", &knobs(n)).unwrap().time_s.unwrap();
            assert!((got - want).abs() < 1e-9, "lin n={n}: {got} vs {want}");
            let got = m.predict("sat", &knobs(n)).unwrap().time_s.unwrap();
            assert!((got - 4.0).abs() < 1e-9, "sat n={n}: {got}");
        }
        // Amdahl alone under-predicts `lin` at 16 threads (2.25 s against 4 s).
        let a = threads::fit(&meta(), &pts).unwrap();
        let t = a.predict("lin", &knobs(16.0)).unwrap().time_s.unwrap();
        assert!((t - 2.25).abs() < 1e-9);
    }

    #[test]
    fn given_saturation_bandwidth_is_used() {
        let pts: Vec<Point> = [1.0, 2.0]
            .iter()
            .map(|n| pt("a", *n, 1.0, 20.0, 20e9, 1e12))
            .collect();
        let p = ThreadsBwParams {
            saturation_bw: Some(5e9),
            ..ThreadsBwParams::default()
        };
        let m = fit(&meta(), &pts, &p).unwrap();
        let t = m.predict("a", &knobs(20.0)).unwrap().time_s.unwrap();
        assert!((t - 4.0).abs() < 1e-9, "{t}");
    }

    #[test]
    fn unknown_traffic_counter_is_a_clear_error() {
        let p = ThreadsBwParams {
            traffic_counter: Some("nope".into()),
            ..ThreadsBwParams::default()
        };
        let e = fit(&meta(), &[pt("a", 1.0, 1.0, 1.0, 1.0, 1.0)], &p)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nope") && e.contains("LLC-load-misses"), "{e}");
    }
}
