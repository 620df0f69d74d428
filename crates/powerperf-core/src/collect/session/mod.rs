//! `collect` as a session with phases: start (the run directory and a `run.toml` that says
//! `ended = "running"`), spawn (the command, paused before exec), open sources (counters,
//! RAPL, NVML, PAPI, PC sampling, the timeline and its journal), launch (the command let
//! go, the sampler thread started), sample (until the command ends or powerperf is
//! stopped) and finish (the timeline, the optional outputs, the totals, the final
//! `run.toml`). [`collect_run`] calls them in this order.

mod finish;
mod launch;
mod outputs;
mod sampler;
mod sources;

use super::{global_rank, local_rank, sysinfo, CollectConfig, CounterBackend, Mode, Outcome};
use anyhow::{Context, Result};
use powerperf_format::run::{self, Ending, RunInfo, RunMeta};
use powerperf_node::event_spec;
use std::time::{SystemTime, UNIX_EPOCH};

/// Space held back in the run directory's file system while the run goes on.
const RESERVE_BYTES: usize = 64 * 1024;

/// An unnamed file of [`RESERVE_BYTES`] (`safe_file::anonymous_reserve`): closing it
/// (dropping this, at the end and on every early return, or powerperf's death) gives the
/// space back, and no file is ever left in the run directory.
struct Reserve(#[allow(dead_code)] Option<std::fs::File>);

/// One collection, from its checked configuration to the final `run.toml`: what the phases
/// share. The phases' own state travels between them by value ([`sources::Sources`],
/// [`launch::Running`], [`launch::Sampled`]).
pub(super) struct Session<'a> {
    cfg: &'a CollectConfig,
    /// The run's `run.toml`, written at the start and at the end.
    meta: RunMeta,
    /// Held until the final `run.toml` is written.
    reserve: Reserve,
    /// The perf_event events, in the order the user asked for them.
    specs: Vec<event_spec::EventSpec>,
    /// The PAPI events (`--backend papi`).
    #[cfg(feature = "papi")]
    papi_names: Vec<String>,
    /// The global MPI rank, if any.
    rank: Option<u32>,
    /// GPU PC sampling asked for (`--pc-sampling gpu`).
    gpu_pc: bool,
}

/// Run `cfg.command` (or watch a process or CPUs, see [`Mode`]) under measurement and
/// write the run directory.
///
/// The directory is written even when the command fails to start, crashes or is killed
/// (`run.toml` says how it ended). In command mode SIGINT, SIGTERM, SIGHUP and SIGQUIT
/// received by powerperf are forwarded to the command; in attach and system-wide mode
/// without a command they end the measurement.
///
/// # Errors
/// A bad event list, an unwritable run directory, a process to attach to that does not
/// exist, or a failed fork.
pub fn collect_run(cfg: &CollectConfig) -> Result<Outcome> {
    let mut session = Session::start(cfg)?;
    let paused = session.spawn_paused()?;
    let sources = session.open_sources(paused)?;
    let running = session.launch(sources)?;
    let sampled = session.sample(running)?;
    session.finish(sampled)
}

/// The events of the configuration, checked: perf_event specs, PAPI names and the notes on
/// events listed twice.
struct CheckedEvents {
    specs: Vec<event_spec::EventSpec>,
    #[cfg(feature = "papi")]
    papi_names: Vec<String>,
    dup_notes: Vec<String>,
}

impl<'a> Session<'a> {
    /// Check the configuration, clear an earlier run from the run directory and write a
    /// `run.toml` that says `ended = "running"`.
    fn start(cfg: &'a CollectConfig) -> Result<Self> {
        let checked = check_config(cfg)?;
        std::fs::create_dir_all(&cfg.out)
            .with_context(|| format!("cannot create the run directory {}", cfg.out.display()))?;
        let replaced = clear_run_dir(cfg)?;
        let rank = global_rank();
        let mut meta = initial_meta(cfg, &replaced, checked.dup_notes, rank);
        // A run.toml exists from the start (`ended = "running"`), so even a powerperf killed
        // mid-run leaves a readable directory; `RunMeta::read` rebuilds its totals from the
        // journal.
        meta.write(&cfg.out)?;
        // Space held back for the final run.toml: removed just before it is written, so a
        // disk the command (or the journal) filled up still gets a run.toml that says so.
        let reserve = match powerperf_node::safe_file::anonymous_reserve(&cfg.out, RESERVE_BYTES) {
            Ok(f) => Reserve(Some(f)),
            Err(e) => {
                meta.notes.push(format!(
                    "no space could be held back for the final run.toml ({e}): on a full disk it may keep its first version"
                ));
                Reserve(None)
            }
        };
        tracing::debug!(out = %cfg.out.display(), id = %meta.run.id, "collect: run directory started");
        Ok(Session {
            cfg,
            meta,
            reserve,
            specs: checked.specs,
            #[cfg(feature = "papi")]
            papi_names: checked.papi_names,
            rank,
            gpu_pc: cfg.pc_sampling.contains(&super::PcTarget::Gpu),
        })
    }
}

/// The checks on a configuration that need no system: interval, `--per-thread`, the event
/// lists, the backend and the command.
fn check_config(cfg: &CollectConfig) -> Result<CheckedEvents> {
    super::check_interval(cfg.interval)?;
    if cfg.per_thread && !matches!(cfg.mode, Mode::Attach(_)) {
        anyhow::bail!(
            "--per-thread needs -p PID (as perf stat --per-thread): a command's counters are inherited by its threads and children and summed by the kernel"
        );
    }
    let mut specs = match cfg.backend {
        CounterBackend::Perf => event_spec::parse_list(cfg.events.as_deref())?,
        CounterBackend::Papi => vec![],
    };
    // An event listed twice would be two timeline columns of one name (issue 18).
    #[allow(unused_mut)] // extended by the PAPI backend
    let mut dup_notes: Vec<String> = event_spec::dedup_by_name(&mut specs, |s| s.name.as_str())
        .into_iter()
        .collect();
    #[cfg(not(feature = "papi"))]
    if cfg.backend == CounterBackend::Papi {
        return Err(super::papi_not_built());
    }
    #[cfg(feature = "papi")]
    let papi_names = match cfg.backend {
        CounterBackend::Papi => {
            if cfg.mode != Mode::Command {
                anyhow::bail!("--backend papi counts a command started by collect (PAPI attaches one event set to one process); for -p, -a and -C use --backend perf");
            }
            let mut names = super::papi::parse_list(cfg.events.as_deref())?;
            dup_notes.extend(event_spec::dedup_by_name(&mut names, |n| n.as_str()));
            names
        }
        CounterBackend::Perf => vec![],
    };
    if cfg.mode == Mode::Command && cfg.command.is_empty() {
        anyhow::bail!("no command given (usage: powerperf collect -o RUN -- CMD ARGS...)");
    }
    Ok(CheckedEvents {
        specs,
        #[cfg(feature = "papi")]
        papi_names,
        dup_notes,
    })
}

/// Remove the outputs of an earlier run from the run directory (they would otherwise be
/// read into this run); the names removed. A directory that is not a run (no readable
/// run.toml) is never emptied without --force (issue 18).
fn clear_run_dir(cfg: &CollectConfig) -> Result<Vec<&'static str>> {
    let present: Vec<&str> = powerperf_format::run::RUN_OUTPUTS
        .iter()
        .copied()
        .filter(|n| cfg.out.join(n).symlink_metadata().is_ok())
        .collect();
    if !present.is_empty() && !cfg.force && powerperf_format::run::RunMeta::read(&cfg.out).is_err()
    {
        anyhow::bail!(
            "{} is not a powerperf run directory (it has no readable run.toml), but it holds {}, which collect would replace; nothing was removed. Fix: choose another -o directory, or pass --force to replace them",
            cfg.out.display(),
            present.join(", ")
        );
    }
    let mut replaced = Vec::new();
    for name in powerperf_format::run::RUN_OUTPUTS {
        let p = cfg.out.join(name);
        let removed = if p.is_dir() {
            std::fs::remove_dir_all(&p)
        } else if p.exists() {
            std::fs::remove_file(&p)
        } else {
            continue;
        };
        removed.with_context(|| format!("cannot remove {} of an earlier run", p.display()))?;
        replaced.push(name);
    }
    Ok(replaced)
}

/// The run's `run.toml` at its start: host facts, knobs, `ended = "running"`, and `notes`
/// followed by the notes on the run directory and the knobs.
fn initial_meta(
    cfg: &CollectConfig,
    replaced: &[&str],
    mut notes: Vec<String>,
    rank: Option<u32>,
) -> RunMeta {
    let (host, kernel) = sysinfo::host_and_kernel();
    let cpu = sysinfo::cpu_id();
    let mut knobs = sysinfo::read_knobs(&cfg.sysfs_root);
    if let Some((_, t)) = cfg.env.iter().find(|(k, _)| k == "OMP_NUM_THREADS") {
        // The command's own environment wins over powerperf's.
        knobs.threads = t.trim().parse().ok();
    }
    if !replaced.is_empty() {
        notes.push(format!(
            "{} held an earlier run: its {} were removed first",
            cfg.out.display(),
            replaced.join(", ")
        ));
    }
    if let Some(n) = &knobs.cpufreq_note {
        notes.push(n.clone());
    }
    let start_unix_ns = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let label = match (&cfg.mode, cfg.command.is_empty()) {
        (_, false) => base_name(&cfg.command),
        (Mode::Attach(pid), true) => std::fs::read_to_string(format!("/proc/{pid}/comm"))
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| format!("pid{pid}")),
        _ => "system".into(),
    };
    RunMeta {
        run: RunInfo {
            id: format!("{label}-{start_unix_ns}"),
            command: cfg.command.clone(),
            workload: Some(cfg.workload.clone().unwrap_or_else(|| label.clone())),
            ended: Ending::Running,
            exit_status: None,
            signal: None,
            signal_name: None,
            core_dumped: false,
            error: None,
            start_unix_ns,
            start_monotonic_ns: powerperf_rt::now_ns(),
            duration_ns: 0,
            host,
            cpu_model: cpu.model_name.clone(),
            cpu_vendor: cpu.vendor.clone(),
            cpu_family: cpu.family,
            cpu_model_number: cpu.model,
            kernel,
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            rank,
            // Node-wide sources are sampled once per node, by local rank 0 (sources.rs).
            local_rank: local_rank(),
            node_sources: Some(run::node_sources_for(local_rank()).to_string()),
            interval_ns: cfg.interval.as_nanos() as u64,
            samples: 0,
            truncated: false,
            self_cpu_ns: None,
            timeline_sampler: None,
        },
        knobs,
        events: vec![],
        notes,
        threads: vec![],
        pc_sampling: None,
        gpu_attribution: None,
        gpu_setting: None,
        power_devices: vec![],
    }
}

fn base_name(cmd: &[String]) -> String {
    cmd.first()
        .map(|c| {
            std::path::Path::new(c)
                .file_name()
                .map(|f| f.to_string_lossy().into_owned())
                .unwrap_or_else(|| c.clone())
        })
        .unwrap_or_default()
}
