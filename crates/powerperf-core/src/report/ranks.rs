//! A report over the shards of an MPI job: a directory whose subdirectories are run
//! directories, one per rank (`collect -o job/rank%r`). Per event and per region: the
//! minimum, mean and maximum over ranks and the imbalance, (max − mean) / max, as IPM and
//! HPCToolkit report load imbalance. Node energy (RAPL, NVML) is sampled once per node, by
//! local rank 0 (`run.node_sources`): it is summed per node (the shards grouped by
//! `run.host`) from the shards that sampled it, then over nodes.
//!
//! Each shard's totals come from its `run.toml` (the totals `report RUN` prints, rebuilt from
//! the journal for a run whose powerperf was killed) and its regions from the `path` and
//! `incl_ns` columns of `regions.parquet`. Shards are read in parallel (a thread per CPU) and reduced to
//! per-shard sums, in shard order, so the report does not depend on the thread count. A shard
//! that cannot be read is named in the report and left out of it; the others are reported.

use anyhow::Result;
use polars::prelude::*;
use powerperf_format::regions::REGIONS;
use powerperf_format::run::{Backend, RunMeta, NODE_SOURCES_LEFT, NODE_SOURCES_SAMPLED, RUN_TOML};
use serde::Serialize;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

/// The name of the wall time's spread (the first of [`RankReport::events`]).
const WALL: &str = "wall time (s)";

/// Min, mean and max of one quantity over ranks.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Spread {
    pub name: String,
    pub ranks: usize,
    pub min: f64,
    pub mean: f64,
    pub max: f64,
    /// (max − mean) / max, 0 when perfectly balanced.
    pub imbalance: f64,
    /// Unit of min, mean and max: `s` (wall time, regions), `ns` (task-clock, cpu-clock),
    /// `J` (energy); absent for counts.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unit: Option<String>,
}

/// The node energy of one node: the node-wide sources (RAPL, NVML) as the shards that
/// sampled them recorded (local rank 0; `run.node_sources = "sampled"`).
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct NodeEnergy {
    /// `run.host` of its shards.
    pub host: String,
    /// Its shards (directory names), in shard order.
    pub shards: Vec<String>,
    /// The shards that sampled the node-wide sources: one (local rank 0) under a launcher.
    pub sampled_by: Vec<String>,
    /// Joules per energy event (`energy-package-0`, `gpu0-energy`), summed over `sampled_by`.
    pub energy_j: BTreeMap<String, f64>,
}

/// A shard that could not be read, and why.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct UnreadableShard {
    pub shard: String,
    pub error: String,
}

/// The whole cross-rank report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct RankReport {
    pub dir: String,
    /// The shards reported (those that could be read).
    pub shards: Vec<String>,
    /// Wall time of each shard's command, and event totals (from each run.toml), by timeline
    /// column name.
    pub events: Vec<Spread>,
    /// Inclusive time per region path (summed over the threads of a rank), seconds.
    pub regions: Vec<Spread>,
    /// Node energy per node (by host name), in host order.
    pub nodes: Vec<NodeEnergy>,
    /// Node energy summed over nodes: joules per energy event.
    pub energy_j: BTreeMap<String, f64>,
    /// Shards that could not be read (left out of everything above).
    pub unreadable: Vec<UnreadableShard>,
    /// What the reader should know (a node none of whose shards sampled its energy, one
    /// sampled by several).
    pub notes: Vec<String>,
}

/// The run directories directly under `dir` (those holding a run.toml), sorted by name;
/// empty when `dir` is itself a run or holds none.
pub fn shards(dir: &Path) -> Vec<PathBuf> {
    scan(dir).0
}

/// One pass over `dir`: its run directories (sorted paths, as [`shards`]) and the names of
/// the other directories directly under it, those without a run.toml (sorted).
///
/// Anything named run.toml counts, whatever it is (a link, a FIFO): the shard is then read,
/// and refused naming the file and why (issue 38), never dropped silently.
fn scan(dir: &Path) -> (Vec<PathBuf>, Vec<String>) {
    let present = |p: &Path| std::fs::symlink_metadata(p.join(RUN_TOML)).is_ok();
    if present(dir) {
        return (vec![], vec![]);
    }
    let mut runs = Vec::new();
    let mut others = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() && present(&p) {
            runs.push(p);
        } else if e.file_type().is_ok_and(|t| t.is_dir()) {
            others.push(e.file_name().to_string_lossy().into_owned());
        }
    }
    runs.sort();
    others.sort();
    (runs, others)
}

impl Spread {
    /// Min, mean, max and imbalance of one quantity's values, one per rank.
    fn of(name: impl Into<String>, unit: Option<&str>, v: &[f64]) -> Spread {
        let mean = v.iter().sum::<f64>() / v.len() as f64;
        let (min, max) = v
            .iter()
            .fold((f64::INFINITY, f64::NEG_INFINITY), |(a, b), &x| {
                (a.min(x), b.max(x))
            });
        Spread {
            name: name.into(),
            ranks: v.len(),
            min,
            mean,
            max,
            imbalance: if max > 0.0 { (max - mean) / max } else { 0.0 },
            unit: unit.map(String::from),
        }
    }
}

/// One shard reduced to what the report needs.
struct Shard {
    /// Directory name (`rank3`).
    name: String,
    host: String,
    duration_s: f64,
    /// The event totals with a value: (timeline column, else event name; total; unit).
    totals: Vec<(String, f64, Option<String>)>,
    /// This shard sampled the node-wide sources.
    sampled: bool,
    /// Its node-wide energy events with a value (`energy-package-0`, `gpu0-energy`), J.
    energy: Vec<(String, f64)>,
    /// Inclusive ns per region path, summed over threads.
    regions: Vec<(String, i128)>,
}

/// The event of a node-wide energy source: RAPL, NVML's energy counter, or a sysfs power
/// device's energy (`<stem>-energy`).
fn is_node_energy(backend: Backend, name: &str) -> bool {
    backend == Backend::Rapl
        || (matches!(backend, Backend::Nvml | Backend::Sysfs) && name.ends_with("-energy"))
}

/// Read one shard: its run.toml and, where it has one, its regions.parquet.
fn read_shard(dir: &Path) -> Result<Shard> {
    let meta = RunMeta::read(dir)?;
    let energy: Vec<(String, f64)> = meta
        .events
        .iter()
        .filter(|e| e.status.has_value() && is_node_energy(e.backend, &e.name))
        .filter_map(|e| Some((e.name.clone(), e.total?)))
        .collect();
    // Runs of versions before `run.node_sources`: a rank that left them says so in a note.
    let sampled = match meta.run.node_sources.as_deref() {
        Some(NODE_SOURCES_SAMPLED) => true,
        Some(NODE_SOURCES_LEFT) => false,
        Some(other) => anyhow::bail!(
            "{}: run.node_sources = {other:?} is neither {NODE_SOURCES_SAMPLED:?} nor {NODE_SOURCES_LEFT:?}",
            dir.join(RUN_TOML).display()
        ),
        None => !meta
            .notes
            .iter()
            .any(|n| n.contains("sampled by the first rank on each node")),
    };
    let totals: Vec<(String, f64, Option<String>)> = meta
        .events
        .iter()
        .filter(|e| e.status.has_value())
        .filter_map(|e| {
            Some((
                e.column.clone().unwrap_or_else(|| e.name.clone()),
                e.total?,
                e.unit.clone(),
            ))
        })
        .collect();
    // one value per event and shard: a run lists each event once, and a shard that repeats
    // one must not count as many ranks (issue 38)
    let mut seen = std::collections::HashSet::new();
    if let Some((col, ..)) = totals.iter().find(|(c, ..)| !seen.insert(c.as_str())) {
        let n = totals.iter().filter(|(c, ..)| c == col).count();
        anyhow::bail!(
            "{}: the event `{col}` is listed {n} times; a run lists each event once (is it the file powerperf collect wrote?)",
            dir.join(RUN_TOML).display()
        );
    }
    let p = dir.join(REGIONS);
    let regions = if std::fs::symlink_metadata(&p).is_ok() {
        region_times(&p)?
    } else {
        vec![]
    };
    Ok(Shard {
        name: dir
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string()),
        host: meta.run.host,
        duration_s: meta.run.duration_ns as f64 * 1e-9,
        totals,
        sampled,
        energy,
        regions,
    })
}

/// Inclusive time per region path of one regions.parquet, summed over threads exactly in
/// integer nanoseconds (nulls count as nothing).
fn region_times(path: &Path) -> Result<Vec<(String, i128)>> {
    let f = powerperf_node::safe_file::open_regular(path, REGIONS)?;
    let df = ParquetReader::new(f)
        .with_columns(Some(vec!["path".into(), "incl_ns".into()]))
        // A small table read on one of read_all's threads: no hand-off to polars' pool.
        .read_parallel(ParallelStrategy::None)
        .finish()
        .map_err(|e| anyhow::anyhow!("cannot read {}: {e}", path.display()))?;
    let bad = |e: PolarsError| anyhow::anyhow!("{}: {e}", path.display());
    let paths = df.column("path").map_err(bad)?.str().map_err(bad)?;
    let incl = df
        .column("incl_ns")
        .map_err(bad)?
        .as_materialized_series()
        .cast(&DataType::Int64)
        .map_err(bad)?;
    let incl = incl.i64().map_err(bad)?;
    let mut shard: BTreeMap<&str, i128> = BTreeMap::new();
    for (path, ns) in paths.iter().zip(incl.iter()) {
        if let Some(path) = path {
            *shard.entry(path).or_default() += i128::from(ns.unwrap_or(0));
        }
    }
    Ok(shard.into_iter().map(|(p, n)| (p.to_string(), n)).collect())
}

/// Read the shards on one thread per CPU, each a contiguous slice of them, and return them in
/// shard order, so the sums of the report do not depend on the number of threads. Plain
/// threads, not rayon's: a rayon worker that waits for polars' own pool (regions.parquet)
/// runs other shards' reads meanwhile, nested on its stack, which overflowed it at 4,096
/// shards with regions.
fn read_all(paths: &[PathBuf]) -> Vec<Result<Shard>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .clamp(1, paths.len().max(1));
    let chunk = paths.len().div_ceil(threads).max(1);
    std::thread::scope(|sc| {
        let handles: Vec<_> = paths
            .chunks(chunk)
            .map(|c| sc.spawn(move || c.iter().map(|p| read_shard(p)).collect::<Vec<_>>()))
            .collect();
        handles
            .into_iter()
            .flat_map(|h| h.join().unwrap_or_else(|e| std::panic::resume_unwind(e)))
            .collect()
    })
}

/// Build the report of the shards under `dir`.
///
/// # Errors
/// No shard, or no shard that can be read (a shard that cannot be read, among others that
/// can, is named in [`RankReport::unreadable`]).
pub fn rank_report(dir: &Path) -> Result<RankReport> {
    let (paths, others) = scan(dir);
    anyhow::ensure!(
        !paths.is_empty(),
        "{} holds no run directories (collect -o {}/rank%r writes one per rank)",
        dir.display(),
        dir.display()
    );
    let read = read_all(&paths);
    let mut ok = Vec::with_capacity(read.len());
    let mut unreadable = Vec::new();
    for (p, r) in paths.iter().zip(read) {
        match r {
            Ok(s) => ok.push((p, s)),
            Err(e) => unreadable.push(UnreadableShard {
                shard: p.display().to_string(),
                error: format!("{e:#}"),
            }),
        }
    }
    if ok.is_empty() {
        anyhow::bail!(
            "none of the {} shards under {} can be read: {}",
            unreadable.len(),
            dir.display(),
            unreadable
                .iter()
                .take(3)
                .map(|u| u.error.as_str())
                .collect::<Vec<_>>()
                .join("; ")
        );
    }
    // A column a shard lacks (an event it could not count) is left out of that shard's
    // statistics, never counted as zero.
    let durations: Vec<f64> = ok.iter().map(|(_, s)| s.duration_s).collect();
    let mut per_col: BTreeMap<&str, (Option<&str>, Vec<f64>)> = BTreeMap::new();
    let mut per_path: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut by_host: BTreeMap<&str, NodeEnergy> = BTreeMap::new();
    for (_, s) in &ok {
        for (col, v, unit) in &s.totals {
            per_col
                .entry(col)
                .or_insert_with(|| (unit.as_deref(), vec![]))
                .1
                .push(*v);
        }
        for (path, ns) in &s.regions {
            per_path.entry(path).or_default().push(*ns as f64 * 1e-9);
        }
        let node = by_host.entry(&s.host).or_insert_with(|| NodeEnergy {
            host: s.host.clone(),
            shards: vec![],
            sampled_by: vec![],
            energy_j: BTreeMap::new(),
        });
        node.shards.push(s.name.clone());
        if s.sampled {
            node.sampled_by.push(s.name.clone());
            for (e, j) in &s.energy {
                *node.energy_j.entry(e.clone()).or_default() += j;
            }
        }
    }
    let mut events = vec![Spread::of(WALL, Some("s"), &durations)];
    events.extend(
        per_col
            .iter()
            .map(|(name, (unit, v))| Spread::of(*name, *unit, v)),
    );
    let regions = per_path
        .iter()
        .map(|(p, v)| Spread::of(*p, Some("s"), v))
        .collect();
    let nodes: Vec<NodeEnergy> = by_host.into_values().collect();
    let mut energy_j = BTreeMap::new();
    let mut notes = Vec::new();
    for n in &nodes {
        for (e, j) in &n.energy_j {
            *energy_j.entry(e.clone()).or_default() += j;
        }
        match n.sampled_by.len() {
            0 => notes.push(format!(
                "{}: none of its {} shards sampled the node-wide sources (local rank 0 is missing or could not be read): its node energy is not in the sum",
                n.host,
                n.shards.len()
            )),
            1 => {}
            k => notes.push(format!(
                "{}: {k} shards sampled the node-wide sources ({}): their energy is summed, which counts it twice where they ran at the same time (separate launches into one job directory?)",
                n.host,
                n.sampled_by.join(", ")
            )),
        }
    }
    if !others.is_empty() {
        notes.push(format!(
            "{} director{} under {} hold{} no run.toml and {} left out (not a run, or a collect that died before it started): {}{}",
            others.len(),
            if others.len() == 1 { "y" } else { "ies" },
            dir.display(),
            if others.len() == 1 { "s" } else { "" },
            if others.len() == 1 { "is" } else { "are" },
            others.iter().take(5).cloned().collect::<Vec<_>>().join(", "),
            if others.len() > 5 { ", …" } else { "" }
        ));
    }
    Ok(RankReport {
        dir: dir.display().to_string(),
        shards: ok.iter().map(|(p, _)| p.display().to_string()).collect(),
        events,
        regions,
        nodes,
        energy_j,
        unreadable,
        notes,
    })
}

/// One value of a spread as perf stat prints it: seconds with six decimals (as `report RUN`
/// prints the time elapsed), clocks (ns) in msec, energy in joules, counts as integers
/// grouped by thousands.
fn value(v: f64, unit: Option<&str>) -> String {
    match unit {
        Some("s") => format!("{v:.6}"),
        _ => super::perf_value(v, unit).0,
    }
}

/// The unit and name of a spread's line: `msec task-clock`, `seconds time elapsed`.
fn label(s: &Spread) -> String {
    let u = match s.unit.as_deref() {
        Some("s") => "seconds",
        u => super::perf_value(0.0, u).1,
    };
    // The event's name for a RAPL column (`energy_package_0_j` is `energy-package-0`).
    let name = match s
        .name
        .strip_prefix("energy_")
        .and_then(|d| d.strip_suffix("_j"))
    {
        _ if s.name == WALL => "time elapsed".to_string(),
        Some(d) => format!("energy-{}", d.replace('_', "-")),
        None => s.name.clone(),
    };
    if u.is_empty() {
        name
    } else {
        format!("{u} {name}")
    }
}

/// The report as text, like perf stat: one line per event and region, min / mean / max over
/// ranks and the imbalance; then the node energy, per node where there are several.
pub fn render_text(r: &RankReport) -> String {
    use std::fmt::Write;
    let mut o = String::new();
    let n_nodes = r.nodes.len();
    let _ = writeln!(
        o,
        "\n Job report over {} ranks on {} node{} in {}:\n",
        r.shards.len(),
        n_nodes,
        if n_nodes == 1 { "" } else { "s" },
        r.dir
    );
    let header = |o: &mut String| {
        let _ = writeln!(
            o,
            "  {:>5} {:>18} {:>18} {:>18} {:>9}",
            "ranks", "min", "mean", "max", "imbalance"
        );
    };
    let line = |o: &mut String, s: &Spread, comment: Option<String>| {
        let u = s.unit.as_deref();
        let _ = write!(
            o,
            "  {:>5} {:>18} {:>18} {:>18} {:>8.2}%  {}",
            s.ranks,
            value(s.min, u),
            value(s.mean, u),
            value(s.max, u),
            100.0 * s.imbalance,
            label(s)
        );
        if let Some(c) = comment {
            let _ = write!(o, "  # {c}");
        }
        let _ = writeln!(o);
    };
    header(&mut o);
    let wall = r.events.iter().find(|s| s.name == WALL);
    let mean_wall = wall.map(|w| w.mean).filter(|w| *w > 0.0);
    // The time elapsed last, as perf stat prints it.
    for s in r.events.iter().filter(|s| s.name != WALL).chain(wall) {
        // perf stat's "CPUs utilized": task-clock over wall time, for the mean rank.
        let comment = match (s.name.as_str(), mean_wall) {
            ("task-clock" | "cpu-clock", Some(w)) => Some(format!(
                "{:.2} CPUs utilized (mean rank)",
                s.mean * 1e-9 / w
            )),
            _ => None,
        };
        line(&mut o, s, comment);
    }
    if !r.regions.is_empty() {
        let _ = writeln!(
            o,
            "\n  regions: inclusive time per rank, summed over threads\n"
        );
        header(&mut o);
        for s in &r.regions {
            line(&mut o, s, None);
        }
    }
    let _ = writeln!(o, "\n  imbalance = (max - mean) / max over ranks");
    if !r.nodes.is_empty() {
        let _ = writeln!(
            o,
            "\n Node energy (RAPL, NVML: sampled once per node, by local rank 0):\n"
        );
        let joules = |o: &mut String, m: &BTreeMap<String, f64>| {
            for (e, j) in m {
                let _ = writeln!(o, "  {:>18} Joules {e}", format!("{j:.2}"));
            }
        };
        for n in &r.nodes {
            let who = if n.sampled_by.is_empty() {
                "sampled by none of them".to_string()
            } else {
                format!("sampled by {}", n.sampled_by.join(", "))
            };
            let _ = writeln!(
                o,
                "  {}: {} rank{}, {who}{}",
                n.host,
                n.shards.len(),
                if n.shards.len() == 1 { "" } else { "s" },
                if n.energy_j.is_empty() && !n.sampled_by.is_empty() {
                    " (no energy source was readable: see its notes in `powerperf report`)"
                } else {
                    ""
                }
            );
            joules(&mut o, &n.energy_j);
        }
        if r.nodes.len() > 1 {
            let _ = writeln!(o, "  all {} nodes:", r.nodes.len());
            joules(&mut o, &r.energy_j);
        }
    }
    for n in &r.notes {
        let _ = writeln!(o, "\n  note: {n}");
    }
    if !r.unreadable.is_empty() {
        let _ = writeln!(
            o,
            "\n {} shard{} could not be read (left out above):",
            r.unreadable.len(),
            if r.unreadable.len() == 1 { "" } else { "s" }
        );
        for u in &r.unreadable {
            let _ = writeln!(o, "  {}: {}", u.shard, u.error);
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spread(name: &str, unit: Option<&str>, v: &[f64]) -> Spread {
        Spread::of(name, unit, v)
    }

    #[test]
    fn values_are_printed_as_perf_stat_prints_them() {
        assert_eq!(value(1_234_567_891.0, Some("ns")), "1,234.57");
        assert_eq!(value(1_999_999.9, Some("ns")), "2.00");
        assert_eq!(value(12_345_678.0, None), "12,345,678");
        assert_eq!(value(1.32885, Some("J")), "1.33");
        assert_eq!(value(0.5, Some("s")), "0.500000");
        assert_eq!(
            label(&spread("task-clock", Some("ns"), &[1.0])),
            "msec task-clock"
        );
        assert_eq!(
            label(&spread("wall time (s)", Some("s"), &[1.0])),
            "seconds time elapsed"
        );
        assert_eq!(label(&spread("cycles", None, &[1.0])), "cycles");
        assert_eq!(
            label(&spread("energy_package_0_j", Some("J"), &[1.0])),
            "Joules energy-package-0"
        );
    }

    #[test]
    fn spread_and_imbalance() {
        let s = spread("x", None, &[1.0, 2.0, 3.0]);
        assert_eq!((s.min, s.mean, s.max), (1.0, 2.0, 3.0));
        assert!((s.imbalance - 1.0 / 3.0).abs() < 1e-15);
        assert_eq!(spread("x", None, &[0.0, 0.0]).imbalance, 0.0);
    }
}
