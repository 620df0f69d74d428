//! Training sets from the regions of collected runs (`powerperf import RUN… --regions`,
//! issue 20 item 5): one point per (run, outermost region), so that a model predicts each
//! region of a job at every knob setting and `plan --job --regions-from RUN` can plan the
//! job's regions in the order they ran (docs/import.md, "Regions of collected runs as set
//! members").

use crate::regions::read_regions;
use crate::set::{from_runs_labelled, Point, TrainingSet, TARGETS};
use anyhow::{Context, Result};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// Make a training set from the outermost regions of run directories, one point per
/// (run, region path of depth 0):
///
/// - workload: the region's path (its name, at depth 0);
/// - knobs: the run's, as [`from_runs_labelled`] takes them (`core_freq_mhz`,
///   `mem_freq_mhz`, `threads` from run.toml's `[knobs]`);
/// - `time_s`: the longest inclusive time among the threads (and processes) that ran the
///   region (`max incl_ns` over its rows of `regions.parquet`): its wall time when one thread
///   marks it, its critical path when every thread does;
/// - `energy_j`: the region's share of the package energy (`energy_package_*_j` columns,
///   summed over its rows: the attribution never counts a sample twice across threads,
///   docs/run-format.md); absent without RAPL; `power_w` = energy / time;
/// - repeat: 0, 1, … over points with the same region and knob values, in argument order.
///
/// Nested regions are part of their outermost region's time and are not points of their
/// own (planning is over consecutive regions). Runs that did not complete normally are
/// skipped with a note, as [`from_runs_labelled`] does.
///
/// # Errors
/// A directory without a readable `run.toml` or without `regions.parquet` (naming the fix);
/// no point at all.
pub fn from_runs_by_region(dirs: &[PathBuf]) -> Result<(TrainingSet, Vec<String>)> {
    let mut notes = Vec::new();
    let mut points: Vec<Point> = Vec::new();
    let mut used = 0usize;
    let mut nested = 0usize;
    for dir in dirs {
        // An unreadable run.toml is an error, as for whole-run points; then the run's checks
        // (a run that did not complete is a note) and knobs, as for a whole-run point.
        crate::run::RunMeta::read(dir)?;
        let (run_set, run_notes) = match from_runs_labelled(std::slice::from_ref(dir), None) {
            Ok(x) => x,
            Err(e) => {
                notes.push(format!("skipped {}: {e:#}", dir.display()));
                continue;
            }
        };
        notes.extend(run_notes);
        let Some(run_point) = run_set.points.first() else {
            continue;
        };
        let rows = read_regions(dir)?.with_context(|| {
            format!(
                "{} has no regions.parquet: --regions needs runs whose program marked regions (powerperf-rt markers or NVTX ranges, collected by `powerperf collect`; docs/run-format.md)",
                dir.display()
            )
        })?;
        let mut by_path: BTreeMap<&str, (u64, Option<f64>)> = BTreeMap::new();
        for r in &rows {
            if r.depth > 0 {
                nested += 1;
                continue;
            }
            let e = by_path.entry(r.path.as_str()).or_insert((0, None));
            e.0 = e.0.max(r.incl_ns);
            for (col, v) in &r.values {
                if col.starts_with("energy_") && col.contains("package") && col.ends_with("_j") {
                    *e.1.get_or_insert(0.0) += v;
                }
            }
        }
        if by_path.is_empty() {
            notes.push(format!(
                "skipped {}: regions.parquet has no outermost region",
                dir.display()
            ));
            continue;
        }
        used += 1;
        for (path, (incl_ns, energy)) in by_path {
            let time_s = incl_ns as f64 * 1e-9;
            let repeat = points
                .iter()
                .filter(|p| p.workload == path && p.knobs == run_point.knobs)
                .count() as i64;
            points.push(Point {
                workload: path.to_string(),
                knobs: run_point.knobs.clone(),
                repeat: Some(repeat),
                time_s: Some(time_s),
                power_w: energy.filter(|_| time_s > 0.0).map(|e| e / time_s),
                energy_j: energy,
                ..Default::default()
            });
        }
    }
    if points.is_empty() {
        anyhow::bail!(
            "no region of {} run director{} could be imported: {}",
            dirs.len(),
            if dirs.len() == 1 { "y" } else { "ies" },
            notes.join("; ")
        );
    }
    if nested > 0 {
        notes.push(format!(
            "{nested} rows of nested regions are part of their outermost region's time (points are the outermost regions)"
        ));
    }
    if points.iter().all(|p| p.energy_j.is_none()) {
        notes.push("no region has package energy (the runs have no RAPL): the set has time only, and `plan` needs energy or power".into());
    }
    let knobs = crate::set::RUN_KNOBS
        .iter()
        .filter(|k| points.iter().any(|p| p.knobs.contains_key(**k)))
        .map(|k| k.to_string())
        .collect();
    let targets = TARGETS
        .iter()
        .filter(|t| points.iter().any(|p| p.target(t).is_some()))
        .map(|t| t.to_string())
        .collect();
    let regions = {
        let mut seen: Vec<&str> = Vec::new();
        for p in &points {
            if !seen.contains(&p.workload.as_str()) {
                seen.push(&p.workload);
            }
        }
        seen.len()
    };
    let meta = crate::set::SetMeta {
        source: "collect".into(),
        description: format!(
            "{regions} outermost regions of {used} runs collected by powerperf (one point per run and region)"
        ),
        knobs,
        targets,
        knob_devices: crate::set::run_knob_devices(&points),
        ..Default::default()
    };
    Ok((TrainingSet { meta, points }, notes))
}

/// The outermost regions of a run in the order they first began (any thread or process of
/// the run), from its region-event files (`RUN/region_events/`): the order of a job's
/// regions for `plan --job --regions-from RUN`.
///
/// # Errors
/// A run without region events (naming the fix), or unreadable event files.
pub fn region_order(run_dir: &Path) -> Result<Vec<String>> {
    let events = powerperf_rt::events::read_dir(run_dir).with_context(|| {
        format!(
            "reading the region events of {} (`{}/`)",
            run_dir.display(),
            crate::regions::REGION_EVENTS
        )
    })?;
    let mut first: BTreeMap<String, u64> = BTreeMap::new();
    for iv in powerperf_rt::events::intervals(&events) {
        if iv.depth == 0 {
            let t = first.entry(iv.path.clone()).or_insert(iv.start_ns);
            *t = (*t).min(iv.start_ns);
        }
    }
    if first.is_empty() {
        anyhow::bail!(
            "{} has no region: its program marked none (powerperf-rt markers or NVTX ranges, collected by `powerperf collect`; docs/run-format.md)",
            run_dir.display()
        );
    }
    let mut order: Vec<(u64, String)> = first.into_iter().map(|(p, t)| (t, p)).collect();
    order.sort();
    Ok(order.into_iter().map(|(_, p)| p).collect())
}
