//! `powerperf export`: a run directory, or a job directory of per-rank runs, as a trace that
//! the timeline viewers HPC and GPU people already use open (docs/export.md):
//!
//! - [`otf2`]: an OTF2 archive (Vampir, the Score-P tools, `otf2-print`), written through
//!   the OTF2 library loaded at run time;
//! - [`perfetto`]: Perfetto's protobuf TrackEvent trace (the Perfetto UI, trace_processor);
//! - [`chrome`]: Chrome's JSON trace event format (chrome://tracing, the Perfetto UI).
//!
//! All three are written from one [`Trace`], built here from the run's own readers: region
//! intervals from powerperf-rt's event files ([`powerperf_rt::events::analyze`]), GPU
//! activities and CUDA API calls from `gpu_activity.parquet`/`gpu_api.parquet`
//! ([`powerperf_format::gpu_activity::read`]), the timeline ([`powerperf_format::timeline::
//! read_run`]) and the PC sample tables. Every time is CLOCK_MONOTONIC in nanoseconds, as
//! the run directory has it (docs/run-format.md); ranks on other hosts than the first
//! shard's are shifted by the difference of their hosts' wall-clock offsets
//! (`start_unix_ns - start_monotonic_ns`), so that ranks line up.

pub mod chrome;
pub mod otf2;
pub mod perfetto;
#[allow(clippy::all, missing_docs, dead_code)]
#[rustfmt::skip]
mod perfetto_proto;

use anyhow::{Context, Result};
use powerperf_format::gpu_activity::{self, Kind};
use powerperf_format::run::RunMeta;
use std::collections::{BTreeMap, HashMap, HashSet};
use std::path::{Path, PathBuf};

/// The trace formats of `powerperf export` (`--format`; each value's doc comment is its
/// `--help` text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum Format {
    /// OTF2 archive (Vampir, Score-P tools, otf2-print): -o DIR, anchor DIR/traces.otf2.
    Otf2,
    /// Perfetto protobuf trace (ui.perfetto.dev, trace_processor): -o FILE.pftrace.
    Perfetto,
    /// Chrome JSON trace (chrome://tracing, ui.perfetto.dev): -o FILE.json (.json.gz:
    /// gzip-compressed).
    Chrome,
}

impl Format {
    /// The name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Format::Otf2 => "otf2",
            Format::Perfetto => "perfetto",
            Format::Chrome => "chrome",
        }
    }

    /// Parse [`Format::name`].
    pub fn from_name(s: &str) -> Option<Format> {
        [Format::Otf2, Format::Perfetto, Format::Chrome]
            .into_iter()
            .find(|f| f.name() == s)
    }
}

/// How many PC-sample hot spots (function, file, line) become instant events per thread
/// (CPU) and per device (GPU).
pub const HOT_SPOTS: usize = 10;

/// A whole trace: one [`Process`] per process of the run (per rank of a job).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Trace {
    /// The run's id, or the job directory's name.
    pub name: String,
    /// `powerperf <version>`.
    pub tool: String,
    pub processes: Vec<Process>,
}

/// One process (one rank of a job): its threads, GPU streams and timeline counters.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Process {
    /// The OS process id.
    pub pid: u32,
    /// The id the trace uses: the pid, unless two processes of the trace share it (ranks on
    /// two hosts), then made unique.
    pub trace_pid: u32,
    pub rank: Option<u32>,
    pub host: String,
    /// The run directory's `run.id`.
    pub run_id: String,
    pub command: Vec<String>,
    /// Threads with regions, CUDA API calls or PC samples, by tid.
    pub threads: Vec<Thread>,
    /// GPU streams with activities.
    pub streams: Vec<Stream>,
    /// The timeline's columns (the first process of a run holds them).
    pub counters: Vec<Counter>,
}

impl Process {
    /// `rank 3 (pid 4711) on node01`, or `pid 4711 on node01`.
    pub fn label(&self) -> String {
        match self.rank {
            Some(r) => format!("rank {r} (pid {}) on {}", self.pid, self.host),
            None => format!("pid {} on {}", self.pid, self.host),
        }
    }
}

/// One host thread.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Thread {
    pub tid: u32,
    /// The id the trace uses (see [`Process::trace_pid`]).
    pub trace_tid: u32,
    /// Properly nested, sorted by (start, depth).
    pub slices: Vec<Slice>,
    /// Sorted by time.
    pub instants: Vec<Instant>,
}

/// What a slice is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SliceKind {
    /// A region (powerperf-rt, NVTX range).
    Region,
    /// A CUDA runtime or driver API call.
    CudaApi,
    /// A GPU activity.
    Gpu(Kind),
}

impl SliceKind {
    /// The category name (Chrome `cat`, Perfetto category).
    pub fn category(self) -> &'static str {
        match self {
            SliceKind::Region => "region",
            SliceKind::CudaApi => "cuda_api",
            SliceKind::Gpu(Kind::Kernel) => "gpu_kernel",
            SliceKind::Gpu(Kind::Memcpy) => "gpu_memcpy",
            SliceKind::Gpu(Kind::Memset) => "gpu_memset",
            SliceKind::Gpu(_) => "gpu_other",
        }
    }
}

/// A value attached to an event.
#[derive(Debug, Clone, PartialEq)]
pub enum Arg {
    Str(String),
    U64(u64),
    F64(f64),
}

/// One slice on a thread or stream: [start_ns, end_ns] on CLOCK_MONOTONIC.
#[derive(Debug, Clone, PartialEq)]
pub struct Slice {
    pub name: String,
    pub kind: SliceKind,
    pub start_ns: u64,
    pub end_ns: u64,
    /// 0 for an outermost slice on its track.
    pub depth: u32,
    /// A flow from a launching API call (source) to its GPU activity (destination): the
    /// same id on both.
    pub flow: Option<u64>,
    pub args: Vec<(String, Arg)>,
}

/// A point event (a PC-sample hot spot).
#[derive(Debug, Clone, PartialEq)]
pub struct Instant {
    pub name: String,
    pub t_ns: u64,
    pub args: Vec<(String, Arg)>,
}

/// One GPU stream of one process.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Stream {
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    /// Sorted, none overlapping (an activity that starts before the previous one ended is
    /// moved to that end: CUPTI's clocks may overlap two on one stream by a few ns).
    pub slices: Vec<Slice>,
    pub instants: Vec<Instant>,
}

impl Stream {
    /// `GPU 0 stream 7`; `GPU 0 (no stream)` for CUPTI's activities of no stream (stream id
    /// 2^32 - 1: context and event synchronisations).
    pub fn label(&self) -> String {
        if self.stream == u32::MAX {
            format!("GPU {} (no stream)", self.device)
        } else {
            format!("GPU {} stream {}", self.device, self.stream)
        }
    }
}

/// How a counter's values are meant (OTF2's metric modes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CounterMode {
    /// The value at that instant (power, a clock, a utilisation, a rate over the sample).
    AbsolutePoint,
    /// The total since the start of the run (energy).
    Accumulated,
}

/// One timeline quantity over time.
#[derive(Debug, Clone, PartialEq)]
pub struct Counter {
    /// `package_0 power`, `gpu0_sm_clock`, `instructions rate`.
    pub name: String,
    /// `W`, `J`, `MHz`, `%`, `1/s`, `ns/s`.
    pub unit: String,
    pub mode: CounterMode,
    /// The timeline column it comes from.
    pub column: String,
    /// (CLOCK_MONOTONIC ns at the end of the sample, value), sorted.
    pub points: Vec<(u64, f64)>,
}

impl Trace {
    /// The first and last time of any event, ns (0, 0 for an empty trace).
    pub fn span(&self) -> (u64, u64) {
        let mut lo = u64::MAX;
        let mut hi = 0;
        let mut see = |a: u64, b: u64| {
            lo = lo.min(a);
            hi = hi.max(b);
        };
        for p in &self.processes {
            for t in &p.threads {
                t.slices.iter().for_each(|s| see(s.start_ns, s.end_ns));
                t.instants.iter().for_each(|i| see(i.t_ns, i.t_ns));
            }
            for s in &p.streams {
                s.slices.iter().for_each(|x| see(x.start_ns, x.end_ns));
                s.instants.iter().for_each(|i| see(i.t_ns, i.t_ns));
            }
            for c in &p.counters {
                c.points.iter().for_each(|(t, _)| see(*t, *t));
            }
        }
        if lo == u64::MAX {
            (0, 0)
        } else {
            (lo, hi)
        }
    }

    /// Counts of what the trace holds: (region slices, GPU activities, counter points).
    pub fn counts(&self) -> (usize, usize, usize) {
        let mut n = (0, 0, 0);
        for p in &self.processes {
            n.0 += p
                .threads
                .iter()
                .flat_map(|t| &t.slices)
                .filter(|s| s.kind == SliceKind::Region)
                .count();
            n.1 += p.streams.iter().map(|s| s.slices.len()).sum::<usize>();
            n.2 += p.counters.iter().map(|c| c.points.len()).sum::<usize>();
        }
        n
    }
}

/// Read a run directory, or a job directory of per-rank run directories (`collect -o
/// JOB/rank%r`), into a [`Trace`].
///
/// # Errors
/// A directory that is neither (named, with what a run directory holds); a file of a run
/// that cannot be read.
pub fn load(dir: &Path) -> Result<Trace> {
    let shards: Vec<PathBuf> = if dir.join(powerperf_format::run::RUN_TOML).is_file() {
        vec![dir.to_path_buf()]
    } else {
        crate::report::ranks::shards(dir)
    };
    if shards.is_empty() {
        anyhow::bail!(
            "{}: not a run directory (no run.toml) nor a job directory of runs (no */run.toml); \
             give a directory written by `powerperf collect -o DIR`",
            dir.display()
        );
    }
    let mut trace = Trace {
        tool: format!("powerperf {}", env!("CARGO_PKG_VERSION")),
        ..Trace::default()
    };
    let mut reference: Option<(String, i128)> = None;
    let mut host_offset: HashMap<String, i128> = HashMap::new();
    for shard in &shards {
        let meta = RunMeta::read(shard)?;
        let wall = meta.run.start_unix_ns as i128 - meta.run.start_monotonic_ns as i128;
        let reference = reference.get_or_insert_with(|| (meta.run.host.clone(), wall));
        let shift =
            *host_offset
                .entry(meta.run.host.clone())
                .or_insert(if meta.run.host == reference.0 {
                    0
                } else {
                    wall - reference.1
                });
        let procs =
            load_run(shard, &meta, shift).with_context(|| format!("{}", shard.display()))?;
        trace.processes.extend(procs);
    }
    trace.name = if shards.len() == 1 && shards[0] == dir {
        RunMeta::read(dir)?.run.id
    } else {
        dir.file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_else(|| dir.display().to_string())
    };
    unique_ids(&mut trace.processes);
    Ok(trace)
}

/// Shift a CLOCK_MONOTONIC time of a run by its host's offset.
fn shifted(t: u64, shift: i128) -> u64 {
    (t as i128 + shift).clamp(0, u64::MAX as i128) as u64
}

/// The processes of one run directory.
fn load_run(dir: &Path, meta: &RunMeta, shift: i128) -> Result<Vec<Process>> {
    let origin = meta.run.start_monotonic_ns;
    let mut procs: BTreeMap<u32, Process> = BTreeMap::new();
    // Regions, as nested intervals per thread.
    let report = powerperf_rt::events::read_dir_report(dir)
        .with_context(|| format!("reading {}", dir.join("region_events").display()))?;
    let analysis = powerperf_rt::events::analyze(&report.events);
    let mut threads: BTreeMap<(u32, u32), Vec<Slice>> = BTreeMap::new();
    for iv in analysis.intervals {
        let mut args = vec![("path".to_string(), Arg::Str(iv.path.clone()))];
        if iv.closed_by_exit {
            args.push(("closed_by_exit".into(), Arg::U64(1)));
        }
        for (name, v) in report.counter_names.iter().zip(&iv.counters) {
            args.push((name.clone(), Arg::U64(*v)));
        }
        threads.entry((iv.pid, iv.tid)).or_default().push(Slice {
            name: iv.region,
            kind: SliceKind::Region,
            start_ns: shifted(iv.start_ns, shift),
            end_ns: shifted(iv.end_ns, shift),
            depth: iv.depth,
            flow: None,
            args,
        });
    }
    // GPU activities on their streams; the API calls that launched them on their threads.
    let mut streams: BTreeMap<(u32, u32, u32, u32), Vec<Slice>> = BTreeMap::new();
    if let Some((acts, calls)) = gpu_activity::read(dir)? {
        let t = |rel: u64| shifted(origin + rel, shift);
        let launched: HashSet<(u32, u32)> = acts
            .iter()
            .filter(|a| a.launch_tid.is_some())
            .map(|a| (a.pid, a.correlation_id))
            .collect();
        for c in &calls {
            let flow = launched
                .contains(&(c.pid, c.correlation_id))
                .then(|| flow_id(c.pid, c.correlation_id));
            let mut args = vec![(
                "correlation_id".to_string(),
                Arg::U64(c.correlation_id.into()),
            )];
            if let Some(r) = &c.region {
                args.push(("region".into(), Arg::Str(r.clone())));
            }
            threads.entry((c.pid, c.tid)).or_default().push(Slice {
                name: c.name.clone(),
                kind: SliceKind::CudaApi,
                start_ns: t(c.enter_ns),
                end_ns: t(c.exit_ns),
                depth: 0,
                flow,
                args,
            });
        }
        let called: HashSet<(u32, u32)> = calls.iter().map(|c| (c.pid, c.correlation_id)).collect();
        for a in acts {
            let kind = a.kind.unwrap_or(Kind::Sync);
            let name = match (kind, &a.name, &a.subkind) {
                (Kind::Kernel, Some(n), _) => n.clone(),
                (k, _, Some(s)) => format!("{} {s}", k.name()),
                (k, _, None) => k.name().to_string(),
            };
            let mut args = vec![
                (
                    "correlation_id".to_string(),
                    Arg::U64(a.correlation_id.into()),
                ),
                ("metric".to_string(), Arg::Str(kind.metric().to_string())),
            ];
            if let Some(r) = &a.region {
                args.push(("region".into(), Arg::Str(r.clone())));
            }
            if let Some(api) = &a.launch_api {
                args.push(("launch_api".into(), Arg::Str(api.clone())));
            }
            if a.bytes > 0 {
                args.push(("bytes".into(), Arg::U64(a.bytes)));
            }
            if kind == Kind::Kernel {
                args.push(("grid".into(), Arg::Str(format!("{:?}", a.grid))));
                args.push(("block".into(), Arg::Str(format!("{:?}", a.block))));
                if let Some(o) = a.occupancy {
                    args.push(("occupancy".into(), Arg::F64(o)));
                }
            }
            let flow = (a.launch_tid.is_some() && called.contains(&(a.pid, a.correlation_id)))
                .then(|| flow_id(a.pid, a.correlation_id));
            streams
                .entry((a.pid, a.device, a.context, a.stream))
                .or_default()
                .push(Slice {
                    name,
                    kind: SliceKind::Gpu(kind),
                    start_ns: t(a.start_ns),
                    end_ns: t(a.end_ns),
                    depth: 0,
                    flow,
                    args,
                });
        }
    }
    for ((pid, tid), mut slices) in threads {
        nest(&mut slices);
        proc_of(&mut procs, meta, pid).threads.push(Thread {
            tid,
            trace_tid: tid,
            slices,
            instants: Vec::new(),
        });
    }
    for ((pid, device, context, stream), mut slices) in streams {
        serialize(&mut slices);
        proc_of(&mut procs, meta, pid).streams.push(Stream {
            device,
            context,
            stream,
            slices,
            instants: Vec::new(),
        });
    }
    cpu_hot_spots(dir, meta, shift, &mut procs)?;
    let counters = timeline_counters(dir, meta, shift)?;
    let mut procs: Vec<Process> = procs.into_values().collect();
    gpu_hot_spots(dir, &mut procs)?;
    if procs.is_empty() {
        // A run without regions nor GPU activity: one process holds the timeline (its pid is
        // not recorded; the rank, else 0, stands for it).
        let mut one = BTreeMap::new();
        proc_of(&mut one, meta, meta.run.rank.unwrap_or(0));
        procs.extend(one.into_values());
    }
    procs[0].counters = counters;
    Ok(procs)
}

/// The process `pid` of a run, added when first seen.
fn proc_of<'a>(procs: &'a mut BTreeMap<u32, Process>, meta: &RunMeta, pid: u32) -> &'a mut Process {
    procs.entry(pid).or_insert_with(|| Process {
        pid,
        trace_pid: pid,
        rank: meta.run.rank,
        host: meta.run.host.clone(),
        run_id: meta.run.id.clone(),
        command: meta.run.command.clone(),
        ..Process::default()
    })
}

/// A flow id unique in a run: the process id and CUPTI's correlation id.
fn flow_id(pid: u32, correlation_id: u32) -> u64 {
    (u64::from(pid) << 32) | u64::from(correlation_id)
}

/// Make `slices` properly nested (a child ends no later than its parent: an API call that
/// outlives the region it began in is cut at the region's end) and set their depths;
/// sorted by (start, depth).
fn nest(slices: &mut [Slice]) {
    slices.sort_by(|a, b| {
        a.start_ns
            .cmp(&b.start_ns)
            .then(b.end_ns.cmp(&a.end_ns))
            .then(a.depth.cmp(&b.depth))
    });
    let mut stack: Vec<u64> = Vec::new();
    for s in slices.iter_mut() {
        while stack.last().is_some_and(|&end| end <= s.start_ns) {
            stack.pop();
        }
        if let Some(&end) = stack.last() {
            s.end_ns = s.end_ns.min(end);
        }
        s.depth = stack.len() as u32;
        stack.push(s.end_ns);
    }
}

/// Sort a stream's slices and make them follow one another.
fn serialize(slices: &mut [Slice]) {
    slices.sort_by_key(|s| (s.start_ns, s.end_ns));
    let mut prev_end = 0;
    for s in slices.iter_mut() {
        s.start_ns = s.start_ns.max(prev_end);
        s.end_ns = s.end_ns.max(s.start_ns);
        prev_end = s.end_ns;
    }
}

/// Give processes (and their threads) that share a pid with an earlier one (ranks on
/// different hosts) ids of their own.
fn unique_ids(procs: &mut [Process]) {
    let mut used: HashSet<u32> = HashSet::new();
    for p in procs.iter_mut() {
        let mut k = 0u32;
        while used.contains(&p.pid.wrapping_add(k.wrapping_mul(10_000_000))) {
            k += 1;
        }
        let off = k.wrapping_mul(10_000_000);
        p.trace_pid = p.pid.wrapping_add(off);
        used.insert(p.trace_pid);
        for t in &mut p.threads {
            t.trace_tid = t.tid.wrapping_add(off);
        }
    }
}

/// The timeline's columns as counters (docs/run-format.md, `timeline.parquet`): per-sample
/// energy deltas become power (delta / sample length, W) and accumulated energy (J);
/// counter deltas become rates (per second); power, clocks and utilisation are kept as
/// sampled.
fn timeline_counters(dir: &Path, meta: &RunMeta, shift: i128) -> Result<Vec<Counter>> {
    let Some(df) = powerperf_format::timeline::read_run(dir)? else {
        return Ok(Vec::new());
    };
    use powerperf_format::timeline::{column_f64, column_u64, or_default};
    let t = or_default(column_u64(&df, "t_ns")?);
    let dur = or_default(column_u64(&df, "dur_ns")?);
    let origin = meta.run.start_monotonic_ns;
    let at: Vec<u64> = t.iter().map(|&x| shifted(origin + x, shift)).collect();
    let unit_of: HashMap<&str, &str> = meta
        .events
        .iter()
        .filter_map(|e| Some((e.column.as_deref().unwrap_or(&e.name), e.unit.as_deref()?)))
        .collect();
    let mut out = Vec::new();
    for c in df.columns() {
        let col = c.name().as_str();
        if col == "t_ns" || col == "dur_ns" {
            continue;
        }
        let Ok(vals) = column_f64(&df, col) else {
            continue;
        };
        let absolute = |name: String, unit: &str| Counter {
            name,
            unit: unit.to_string(),
            mode: CounterMode::AbsolutePoint,
            column: col.to_string(),
            points: at
                .iter()
                .zip(&vals)
                .filter_map(|(t, v)| Some((*t, (*v)?)))
                .collect(),
        };
        let per_s = |name: String, unit: String| Counter {
            name,
            unit,
            mode: CounterMode::AbsolutePoint,
            column: col.to_string(),
            points: at
                .iter()
                .zip(&vals)
                .zip(&dur)
                .filter_map(|((t, v), d)| Some((*t, (*v)? / (*d > 0).then_some(*d as f64 * 1e-9)?)))
                .collect(),
        };
        let base = |suffix: &str| col.strip_suffix(suffix).unwrap_or(col).to_string();
        // NVML's columns (`gpu<i>_…`) are readings at the sample's end, except the energy.
        let nvml = col.starts_with("gpu") && col.as_bytes().get(3).is_some_and(u8::is_ascii_digit);
        if let Some(b) = col.strip_suffix("_j") {
            let domain = b.strip_prefix("energy_").unwrap_or(b);
            let domain = domain.strip_suffix("_energy").unwrap_or(domain);
            let src = if b.starts_with("energy_") {
                " (RAPL)"
            } else {
                ""
            };
            if !nvml {
                out.push(per_s(format!("{domain} power{src}"), "W".into()));
            }
            let mut sum = 0.0;
            out.push(Counter {
                name: format!("{domain} energy{src}"),
                unit: "J".into(),
                mode: CounterMode::Accumulated,
                column: col.to_string(),
                points: at
                    .iter()
                    .zip(&vals)
                    .filter_map(|(t, v)| {
                        sum += (*v)?;
                        Some((*t, sum))
                    })
                    .collect(),
            });
        } else if col.ends_with("_w") {
            out.push(absolute(base("_w"), "W"));
        } else if col.ends_with("_mhz") {
            out.push(absolute(base("_mhz"), "MHz"));
        } else if col.ends_with("_pct") {
            out.push(absolute(base("_pct"), "%"));
        } else if nvml && col.ends_with("_c") {
            out.push(absolute(base("_c"), "°C"));
        } else if nvml {
            // gpu<i>_throttle_reasons: NVML's clocks-event reasons, a bit mask.
            out.push(absolute(col.to_string(), "bit mask"));
        } else {
            let unit = match unit_of.get(col) {
                Some(u) => format!("{u}/s"),
                None => "1/s".to_string(),
            };
            out.push(per_s(format!("{col} rate"), unit));
        }
    }
    out.retain(|c| !c.points.is_empty());
    Ok(out)
}

/// The top [`HOT_SPOTS`] (function, file, line) of each thread's CPU PC samples
/// (`pc_samples.parquet`), as instant events at the start of the first instance of their
/// region on that thread (the thread's first slice, else the run's start, where the
/// samples carry no region: the table holds counts, not times).
fn cpu_hot_spots(
    dir: &Path,
    meta: &RunMeta,
    shift: i128,
    procs: &mut BTreeMap<u32, Process>,
) -> Result<()> {
    let origin = meta.run.start_monotonic_ns;
    let Some(rows) = powerperf_format::pc_samples::read(dir)? else {
        return Ok(());
    };
    let mut by_thread: BTreeMap<(u32, u32), Vec<&powerperf_format::pc_samples::PcRow>> =
        BTreeMap::new();
    for r in &rows {
        by_thread.entry((r.pid, r.tid)).or_default().push(r);
    }
    for ((pid, tid), mut rs) in by_thread {
        let total: u64 = rs.iter().map(|r| r.samples).sum();
        rs.sort_by(|a, b| b.samples.cmp(&a.samples).then(a.function.cmp(&b.function)));
        let p = proc_of(procs, meta, pid);
        let ti = match p.threads.iter().position(|t| t.tid == tid) {
            Some(i) => i,
            None => {
                p.threads.push(Thread {
                    tid,
                    trace_tid: tid,
                    ..Thread::default()
                });
                p.threads.len() - 1
            }
        };
        let th = &mut p.threads[ti];
        for r in rs.into_iter().take(HOT_SPOTS) {
            let at = r
                .region
                .as_deref()
                .and_then(|path| {
                    th.slices.iter().find(|s| {
                        s.kind == SliceKind::Region
                            && s.args
                                .iter()
                                .any(|(k, v)| k == "path" && *v == Arg::Str(path.to_string()))
                    })
                })
                .or(th.slices.first())
                .map(|s| s.start_ns)
                .unwrap_or_else(|| shifted(origin, shift));
            let mut args = vec![
                ("function".to_string(), Arg::Str(r.function.clone())),
                ("samples".to_string(), Arg::U64(r.samples)),
                (
                    "share_pct".to_string(),
                    Arg::F64(100.0 * r.samples as f64 / total.max(1) as f64),
                ),
            ];
            if let Some(f) = &r.file {
                args.push(("file".into(), Arg::Str(f.clone())));
            }
            if let Some(l) = r.line {
                args.push(("line".into(), Arg::U64(l.into())));
            }
            if let Some(m) = &r.module {
                args.push(("module".into(), Arg::Str(m.clone())));
            }
            if let Some(reg) = &r.region {
                args.push(("region".into(), Arg::Str(reg.clone())));
            }
            th.instants.push(Instant {
                name: hot_spot_name(&r.function, r.file.as_deref(), r.line),
                t_ns: at,
                args,
            });
        }
        th.instants.sort_by_key(|i| i.t_ns);
    }
    Ok(())
}

/// `function (file.c:42)`.
fn hot_spot_name(function: &str, file: Option<&str>, line: Option<u32>) -> String {
    match (file, line) {
        (Some(f), Some(l)) => format!(
            "hot spot: {function} ({}:{l})",
            f.rsplit('/').next().unwrap_or(f)
        ),
        _ => format!("hot spot: {function}"),
    }
}

/// A GPU hot spot: (samples, function, file, line).
type Spot = (u64, String, Option<String>, Option<u32>);

/// The top [`HOT_SPOTS`] (function, file, line) of each device's GPU PC samples
/// (`gpu_pc_samples.parquet`, summed over stall reasons), as instant events on the stream
/// of the first kernel of that function, at its start.
fn gpu_hot_spots(dir: &Path, procs: &mut [Process]) -> Result<()> {
    let Some((rows, _)) = powerperf_format::gpu_pcsamp::read(dir)? else {
        return Ok(());
    };
    let mut by: BTreeMap<(String, String, Option<String>, Option<u32>), u64> = BTreeMap::new();
    for r in &rows {
        *by.entry((r.device.clone(), r.function.clone(), r.file.clone(), r.line))
            .or_default() += r.samples;
    }
    let mut per_device: BTreeMap<String, Vec<Spot>> = BTreeMap::new();
    for ((dev, f, file, line), n) in by {
        per_device.entry(dev).or_default().push((n, f, file, line));
    }
    for (dev, mut spots) in per_device {
        let total: u64 = spots.iter().map(|s| s.0).sum();
        spots.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(&b.1)));
        let device: Option<u32> = dev.strip_prefix("gpu").and_then(|d| d.parse().ok());
        for (n, function, file, line) in spots.into_iter().take(HOT_SPOTS) {
            // The stream and time of the first kernel of that function on that device.
            let mut first: Option<(usize, usize, u64)> = None;
            for (pi, p) in procs.iter().enumerate() {
                for (si, s) in p.streams.iter().enumerate() {
                    if device.is_some_and(|d| d != s.device) {
                        continue;
                    }
                    if let Some(k) = s.slices.iter().find(|k| k.name == function) {
                        if first.is_none_or(|f| k.start_ns < f.2) {
                            first = Some((pi, si, k.start_ns));
                        }
                    }
                }
            }
            let Some((pi, si, t)) = first else { continue };
            let mut args = vec![
                ("function".to_string(), Arg::Str(function.clone())),
                ("samples".to_string(), Arg::U64(n)),
                (
                    "share_pct".to_string(),
                    Arg::F64(100.0 * n as f64 / total.max(1) as f64),
                ),
            ];
            if let Some(f) = &file {
                args.push(("file".into(), Arg::Str(f.clone())));
            }
            if let Some(l) = line {
                args.push(("line".into(), Arg::U64(l.into())));
            }
            let s = &mut procs[pi].streams[si];
            s.instants.push(Instant {
                name: hot_spot_name(&function, file.as_deref(), line),
                t_ns: t,
                args,
            });
            s.instants.sort_by_key(|i| i.t_ns);
        }
    }
    Ok(())
}

/// A slice's begin or end, as [`edges`] orders them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Edge {
    /// The slice of that index begins.
    Begin(usize),
    /// The slice of that index ends.
    End(usize),
}

/// The begins and ends of properly nested `slices` (sorted by start, outer first, as
/// [`Thread::slices`] are) in time order, each end before the begin of the next slice
/// that starts at or after it: the order B/E formats and OTF2's Enter/Leave need.
pub fn edges(slices: &[Slice]) -> Vec<(u64, Edge)> {
    let mut out = Vec::with_capacity(2 * slices.len());
    let mut stack: Vec<usize> = Vec::new();
    for (i, s) in slices.iter().enumerate() {
        while let Some(&top) = stack.last() {
            if slices[top].end_ns > s.start_ns {
                break;
            }
            out.push((slices[top].end_ns, Edge::End(top)));
            stack.pop();
        }
        out.push((s.start_ns, Edge::Begin(i)));
        stack.push(i);
    }
    while let Some(top) = stack.pop() {
        out.push((slices[top].end_ns, Edge::End(top)));
    }
    out
}

/// Track id of a GPU stream in the formats that key tracks by (pid, tid): 2^30 + device ·
/// 2^20 + stream, above any Linux tid (`pid_max` is at most 2^22) and below 2^31.
pub fn stream_tid(s: &Stream) -> u32 {
    (1 << 30) | ((s.device & 0x3ff) << 20) | (s.stream & 0x000f_ffff)
}

/// What [`export`] wrote.
#[derive(Debug, Clone, PartialEq)]
pub struct Written {
    /// The file (the anchor file `traces.otf2` for OTF2).
    pub path: PathBuf,
    /// Bytes written (all files of an OTF2 archive).
    pub bytes: u64,
    /// Region slices, GPU activities and counter points in the trace.
    pub regions: usize,
    pub gpu_activities: usize,
    pub counter_points: usize,
    pub processes: usize,
}

/// Read `input` (a run or job directory) and write it as `format` to `out` (a file; a
/// directory for OTF2; `-` for stdout with Chrome and Perfetto).
///
/// # Errors
/// As [`load`]; an output that cannot be written; for OTF2, a missing OTF2 library (the
/// message names the package to install).
pub fn export(input: &Path, format: Format, out: &Path) -> Result<Written> {
    let trace = load(input)?;
    let path = match format {
        Format::Chrome => chrome::write(&trace, out)?,
        Format::Perfetto => perfetto::write(&trace, out)?,
        Format::Otf2 => otf2::write(&trace, out)?,
    };
    let bytes = if out.as_os_str() == "-" {
        0
    } else {
        size_of(if format == Format::Otf2 { out } else { &path })
    };
    let (regions, gpu_activities, counter_points) = trace.counts();
    Ok(Written {
        path,
        bytes,
        regions,
        gpu_activities,
        counter_points,
        processes: trace.processes.len(),
    })
}

/// Bytes of a file, or of every file under a directory.
pub fn size_of(p: &Path) -> u64 {
    match std::fs::symlink_metadata(p) {
        Ok(m) if m.is_dir() => std::fs::read_dir(p)
            .into_iter()
            .flatten()
            .flatten()
            .map(|e| size_of(&e.path()))
            .sum(),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

/// Create the output file `path` for writing: a new file or an existing regular file
/// truncated, never through a symbolic link (O_NOFOLLOW).
///
/// # Errors
/// The open's error, with the path.
pub(crate) fn create_file(path: &Path) -> Result<std::fs::File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .with_context(|| format!("cannot create {}", path.display()))
}

#[cfg(test)]
mod tests;
