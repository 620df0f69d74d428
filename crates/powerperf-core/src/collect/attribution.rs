//! Regions × timeline: per-region counters and energy (`RUN/regions.parquet`).
//!
//! powerperf-rt writes region enter/exit records (`RUN/region_events/<pid>.bin`, turned into
//! `<pid>.tsv` by collect once the command has exited; CLOCK_MONOTONIC
//! ns); [`powerperf_rt::events`] pairs them into nested per-thread intervals. Each timeline
//! sample's additive values (counter deltas, `energy_*_j`, `gpu<i>_energy_j`) are split among
//! the region instances that overlap it:
//!
//! > share of an instance = value × overlap(instance, sample) / max(sample length,
//! > Σ over threads of the overlap of their outermost regions with the sample)
//!
//! so a sample in which one thread spends half its time in a region gives that region half
//! of the sample, and a sample shared by four busy threads gives each a quarter (docs/architecture.md,
//! "Energy of concurrent regions": in proportion to the threads' time in regions; the
//! per-thread CPU time within a sample is not measured, so every thread in a region counts
//! as busy). Values are inclusive: a nested region's share is also its parent's. Gauges
//! (power, clocks, utilisation, temperature) are not attributed. GPM metrics
//! (`gpu<i>_sm_active`, `gpu<i>_pcie_tx_bytes`, …: rates over their sample,
//! [`crate::collect::gpm`]) are attributed as their mean over the region's time, each sample
//! weighted by its overlap with the region's instances (samples without a value left out).

use anyhow::{Context, Result};
use powerperf_format::timeline::Timeline;
use powerperf_rt::events::{self, Interval};
use std::collections::HashMap;
use std::path::Path;

/// The table's file name, row types, writer and reader: the run format's
/// ([`powerperf_format::regions`]).
pub use powerperf_format::regions::{read_regions, RegionRecord, RegionRow, REGIONS};

/// The attribution rule, as recorded in run.toml's notes.
pub const RULE: &str = "regions.parquet: each sample's counter deltas and energy are split among the region instances overlapping it, in proportion to overlap time over max(sample length, total thread time in outermost regions); GPM metrics (gpu<i>_sm_active, …) are the mean over the region's time, each sample weighted by its overlap; values are inclusive of nested regions";

/// Whether a timeline column adds up over time (and so can be split among regions).
pub fn is_additive(column: &str) -> bool {
    !["_w", "_mhz", "_pct", "_c", "_reasons"]
        .iter()
        .any(|s| column.ends_with(s))
        && !crate::collect::gpm::is_gpm_column(column)
}

/// Per row, per attributed column: the overlap seconds weighting a GPM mean (0 for the
/// additive columns).
type Weights = Vec<Vec<f64>>;

/// Divide the GPM columns' weighted sums by their weights (a mean; `NaN` where no sample with
/// a value overlapped the region).
fn finish_means(names: &[String], rows: &mut [RegionRow], w: &Weights) {
    for (r, wr) in rows.iter_mut().zip(w) {
        for ((v, n), wt) in r.values.iter_mut().zip(names).zip(wr) {
            if crate::collect::gpm::is_gpm_column(n) {
                *v = if *wt > 0.0 { *v / wt } else { f64::NAN };
            }
        }
    }
}

/// Split the timeline's additive columns among `intervals`.
///
/// `origin_ns` is the CLOCK_MONOTONIC time of the timeline's `t_ns = 0`. Returns the
/// attributed column names and one row per entry of [`events::stats`].
pub fn attribute(
    intervals: &[Interval],
    timeline: &Timeline,
    origin_ns: u64,
) -> (Vec<String>, Vec<RegionRow>) {
    let (names, mut rows, w) = attribute_weighted(intervals, timeline, origin_ns);
    finish_means(&names, &mut rows, &w);
    (names, rows)
}

/// [`attribute`] with the GPM columns left as weighted sums, and their weights (chunks add
/// up; [`finish_means`] divides).
fn attribute_weighted(
    intervals: &[Interval],
    timeline: &Timeline,
    origin_ns: u64,
) -> (Vec<String>, Vec<RegionRow>, Weights) {
    let cols: Vec<usize> = timeline
        .columns
        .iter()
        .enumerate()
        .filter(|(_, (n, _))| is_additive(n) || crate::collect::gpm::is_gpm_column(n))
        .map(|(i, _)| i)
        .collect();
    let mean: Vec<bool> = cols
        .iter()
        .map(|&i| crate::collect::gpm::is_gpm_column(&timeline.columns[i].0))
        .collect();
    let names: Vec<String> = cols
        .iter()
        .map(|&i| timeline.columns[i].0.clone())
        .collect();
    let stats = events::stats(intervals);
    let index: HashMap<(u32, u32, &str), usize> = stats
        .iter()
        .enumerate()
        .map(|(k, s)| ((s.pid, s.tid, s.path.as_str()), k))
        .collect();
    let mut rows: Vec<RegionRow> = stats
        .iter()
        .map(|s| RegionRow {
            stats: s.clone(),
            values: vec![0.0; cols.len()],
        })
        .collect();
    let mut weights: Weights = vec![vec![0.0; cols.len()]; rows.len()];
    // Samples as absolute [start, end) on CLOCK_MONOTONIC; ends are sorted.
    let ends: Vec<u64> = timeline.t_ns.iter().map(|t| origin_ns + t).collect();
    let starts: Vec<u64> = ends
        .iter()
        .zip(&timeline.dur_ns)
        .map(|(e, d)| e.saturating_sub(*d))
        .collect();
    let mut denom: Vec<u64> = timeline.dur_ns.clone();
    let mut busy = vec![0u64; ends.len()];
    for iv in intervals.iter().filter(|i| i.depth == 0) {
        for (s, o) in overlaps(iv, &starts, &ends) {
            busy[s] += o;
        }
    }
    for (d, b) in denom.iter_mut().zip(&busy) {
        *d = (*d).max(*b);
    }
    for iv in intervals {
        let Some(&k) = index.get(&(iv.pid, iv.tid, iv.path.as_str())) else {
            continue;
        };
        for (s, o) in overlaps(iv, &starts, &ends) {
            if denom[s] == 0 {
                continue;
            }
            let f = o as f64 / denom[s] as f64;
            let secs = o as f64 * 1e-9;
            for (j, (v, &c)) in rows[k].values.iter_mut().zip(&cols).enumerate() {
                match timeline.columns[c].1[s] {
                    Some(x) if mean[j] && x.is_finite() => {
                        *v += x * secs;
                        weights[k][j] += secs;
                    }
                    Some(_) if mean[j] => {}
                    Some(x) => *v += x * f,
                    None => {}
                }
            }
        }
    }
    (names, rows, weights)
}

/// The samples an interval overlaps, with the overlap in ns. Samples are
/// `[starts[s], ends[s])` on CLOCK_MONOTONIC with `ends` sorted.
fn overlaps(iv: &Interval, starts: &[u64], ends: &[u64]) -> Vec<(usize, u64)> {
    // First sample whose end is after the interval's start.
    let first = ends.partition_point(|&e| e <= iv.start_ns);
    (first..ends.len())
        .take_while(|&s| starts[s] < iv.end_ns)
        .filter_map(|s| {
            let o = iv
                .end_ns
                .min(ends[s])
                .saturating_sub(iv.start_ns.max(starts[s]));
            (o > 0).then_some((s, o))
        })
        .collect()
}

/// Read the run's region events, attribute the timeline to them and write
/// `RUN/regions.parquet`. Returns `None` when the program marked no regions, else the
/// number of rows and notes (truncated event files, misuse counts).
///
/// # Errors
/// A malformed events file, or an unwritable `regions.parquet`.
pub fn write_regions(
    run_dir: &Path,
    timeline: &Timeline,
    origin_ns: u64,
    rank: Option<u32>,
) -> Result<Option<(usize, Vec<String>)>> {
    write_regions_from(run_dir, &|f| f(timeline), origin_ns, rank)
}

/// A timeline given in chunks of rows, in order: calls its argument with each chunk (at
/// least once, every chunk with the same columns). [`powerperf_format::timeline::for_each_chunk`]
/// reads a run's this way, so that its memory stays bounded.
pub type Chunks<'a> = dyn Fn(&mut dyn FnMut(&Timeline) -> Result<()>) -> Result<()> + 'a;

/// [`write_regions`] over a timeline given in chunks: the shares of each chunk's samples are
/// added up (the attribution is per sample).
///
/// # Errors
/// As [`write_regions`], and the chunks' errors.
pub fn write_regions_from(
    run_dir: &Path,
    timeline: &Chunks<'_>,
    origin_ns: u64,
    rank: Option<u32>,
) -> Result<Option<(usize, Vec<String>)>> {
    let read = events::read_dir_report(run_dir)
        .with_context(|| format!("reading the region events of {}", run_dir.display()))?;
    if read.events.is_empty() {
        return Ok(None);
    }
    let mut notes = vec![RULE.to_string()];
    for f in &read.truncated_files {
        notes.push(format!(
            "{}: the last record was cut off (the writer stopped mid-line) and is skipped",
            f.display()
        ));
    }
    let a = events::analyze(&read.events);
    if a.unmatched_ends > 0 {
        notes.push(format!(
            "regions: {} region end(s) without a matching begin were skipped",
            a.unmatched_ends
        ));
    }
    if a.unterminated > 0 {
        notes.push(format!(
            "regions: {} region instance(s) never ended (mismatched nesting, or a process killed before it could write them) are not in regions.parquet",
            a.unterminated
        ));
    }
    let mut acc: Option<(Vec<String>, Vec<RegionRow>, Weights)> = None;
    timeline(&mut |chunk| {
        let (names, rows, w) = attribute_weighted(&a.intervals, chunk, origin_ns);
        match &mut acc {
            None => acc = Some((names, rows, w)),
            Some((_, sum, sw)) => {
                for ((s, r), (swr, wr)) in sum.iter_mut().zip(&rows).zip(sw.iter_mut().zip(&w)) {
                    for (v, x) in s.values.iter_mut().zip(&r.values) {
                        *v += x;
                    }
                    for (v, x) in swr.iter_mut().zip(wr) {
                        *v += x;
                    }
                }
            }
        }
        Ok(())
    })?;
    let (names, rows) = match acc {
        Some((names, mut rows, w)) => {
            finish_means(&names, &mut rows, &w);
            (names, rows)
        }
        None => attribute(&a.intervals, &Timeline::default(), origin_ns),
    };
    if !read.counter_names.is_empty() {
        notes.push(format!(
            "regions.parquet: rt_{} are exact counts read by powerperf-rt at every region begin and end (--region-counters), inclusive of nested regions",
            read.counter_names.join(", rt_")
        ));
    }
    powerperf_format::regions::write(
        &run_dir.join(REGIONS),
        &names,
        &rows,
        rank,
        &read.counter_names,
    )?;
    Ok(Some((rows.len(), notes)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use powerperf_rt::events::{Kind, RegionEvent};

    fn ev(t: u64, tid: u32, region: &str, kind: Kind) -> RegionEvent {
        RegionEvent {
            t_ns: t,
            tid,
            pid: 1,
            region: region.into(),
            kind,
            counters: vec![],
        }
    }

    /// Four 10 ns samples from t = 100 (origin) of 10 J each.
    fn timeline() -> Timeline {
        let mut t = Timeline::new(&["energy_package_0_j".into(), "gpu0_power_w".into()]);
        for k in 1..=4 {
            t.push(k * 10, 10, &[Some(10.0), Some(300.0)]);
        }
        t
    }

    #[test]
    fn one_thread_gets_its_overlap_and_nesting_is_inclusive() {
        use Kind::*;
        // outer 105..135 (15 of the first 3 samples... 5+10+5 ns), inner 110..120.
        let evs = vec![
            ev(105, 7, "outer", Begin),
            ev(110, 7, "inner", Begin),
            ev(120, 7, "inner", End),
            ev(125, 7, "outer", End),
        ];
        let iv = events::intervals(&evs);
        let (names, rows) = attribute(&iv, &timeline(), 100);
        assert_eq!(names, vec!["energy_package_0_j"], "power is a gauge");
        let outer = rows.iter().find(|r| r.stats.path == "outer").unwrap();
        let inner = rows.iter().find(|r| r.stats.path == "outer/inner").unwrap();
        // outer: 5 ns of sample 1 (105..110), 10 of sample 2, 5 of sample 3 -> 2 J.
        assert!((outer.values[0] - 20.0).abs() < 1e-9, "{}", outer.values[0]);
        assert!((inner.values[0] - 10.0).abs() < 1e-9, "{}", inner.values[0]);
        assert_eq!(outer.stats.incl_ns, 20);
    }

    #[test]
    fn gpm_metrics_are_the_mean_over_the_region_not_split() {
        use Kind::*;
        // dram_active 0.2, 0.8, 0.8, none over four 10 ns samples; the region 105..135
        // overlaps 5 ns of the first, the second, the third and 5 ns of the fourth (no value).
        let mut t = Timeline::new(&["gpu0_dram_active".into(), "gpu0_pcie_tx_bytes".into()]);
        for (k, v) in [(1, Some(0.2)), (2, Some(0.8)), (3, Some(0.8)), (4, None)] {
            t.push(k * 10, 10, &[v, v.map(|x| x * 1e9)]);
        }
        let evs = vec![ev(105, 7, "r", Begin), ev(135, 7, "r", End)];
        let iv = events::intervals(&evs);
        let (names, rows) = attribute(&iv, &t, 100);
        assert_eq!(names, vec!["gpu0_dram_active", "gpu0_pcie_tx_bytes"]);
        // (0.2·5 + 0.8·10 + 0.8·10) / 25
        let want = (0.2 * 5.0 + 0.8 * 20.0) / 25.0;
        assert!(
            (rows[0].values[0] - want).abs() < 1e-12,
            "{}",
            rows[0].values[0]
        );
        assert!((rows[0].values[1] - want * 1e9).abs() < 1e-3);
        // a region with no sample value at all: NaN, not 0
        let evs = vec![ev(131, 7, "late", Begin), ev(139, 7, "late", End)];
        let (_, rows) = attribute(&events::intervals(&evs), &t, 100);
        assert!(rows[0].values[0].is_nan());
    }

    #[test]
    fn concurrent_threads_split_a_sample() {
        use Kind::*;
        // Two threads in regions over the whole of sample 2 (110..120).
        let evs = vec![
            ev(110, 1, "a", Begin),
            ev(110, 2, "b", Begin),
            ev(120, 1, "a", End),
            ev(120, 2, "b", End),
        ];
        let iv = events::intervals(&evs);
        let (_, rows) = attribute(&iv, &timeline(), 100);
        let total: f64 = rows.iter().map(|r| r.values[0]).sum();
        assert!(
            (total - 10.0).abs() < 1e-9,
            "energy is not counted twice: {total}"
        );
        assert!(rows.iter().all(|r| (r.values[0] - 5.0).abs() < 1e-9));
    }

    #[test]
    fn regions_parquet_round_trips() {
        use Kind::*;
        let dir = tempfile::tempdir().unwrap();
        let ev_dir = dir.path().join("region_events");
        std::fs::create_dir(&ev_dir).unwrap();
        std::fs::write(
            ev_dir.join("1.tsv"),
            "# powerperf-rt region events v1 pid=1\nR\t1\tsolve\nB\t105\t1\t1\nE\t135\t1\t1\n",
        )
        .unwrap();
        let _ = (Begin, End);
        let (n, notes) = write_regions(dir.path(), &timeline(), 100, Some(0))
            .unwrap()
            .unwrap();
        assert_eq!(n, 1);
        assert!(notes[0].starts_with("regions.parquet"));
        let back = read_regions(dir.path()).unwrap().unwrap();
        assert_eq!(back[0].path, "solve");
        assert_eq!(back[0].calls, 1);
        assert_eq!(back[0].incl_ns, 30);
        assert!((back[0].values["energy_package_0_j"] - 30.0).abs() < 1e-9);
    }
}
