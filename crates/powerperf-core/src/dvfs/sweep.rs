//! `powerperf sweep`: training runs over a grid of core frequencies and thread counts.
//!
//! Each (frequency, threads, repeat) is one run directory `SET/runs/f<MHz>_t<threads>_r<k>`
//! written by the same code as `powerperf collect` ([`crate::collect::collect_run`]), with
//! `OMP_NUM_THREADS` set and the frequency set through the cpufreq controller inside one
//! [`Session`] (restore record, switch log, original settings restored at the end and on
//! errors). A run directory that already holds a `run.toml` is finished and skipped, so an
//! interrupted sweep resumes where it stopped. At the end the finished runs become the
//! training set `SET/set.toml` + `SET/points.parquet` ([`powerperf_format::set::from_runs_labelled`]);
//! the grid is kept in `SET/sweep.toml`.
//!
//! GPU settings (issue 39): `--gpu-clock`, `--gpu-mem-clock` and `--gpu-power-limit` add the
//! GPU's locked SM clock (knob `core_freq_mhz`), locked memory clock (`mem_freq_mhz`) and
//! power limit (`power_limit_w`) to the grid, on GPU `--gpu N`, through a
//! [`GpuSession`](crate::dvfs::gpu_session::GpuSession): every setting is checked before
//! anything changes, the originals are saved in a GPU restore record and put back at the
//! end and on every exit path. Each run records the requested setting and the observed one
//! ([`super::sweep_gpu::observe`]); `set.toml`'s `knob_devices` maps the GPU knobs to
//! `gpu<N>`. `--warmup N` runs N runs before the repeats of each grid point, into
//! `SET/warmup/`, left out of the set.
//!
//! A user who is not root sweeps GPU settings through powerperfd (`--daemon PATH`, or
//! `$POWERPERF_DAEMON`, or its default socket when one is there): a
//! [`DaemonGpuSession`](super::apply::daemon_gpu::DaemonGpuSession) asks the daemon to
//! `check` every point of the grid before anything changes (the user's `gpu.*` grants and
//! the device's own list or range), sets each point in one daemon session, and asks for the
//! restore at the end and on every exit path; the daemon restores when this process dies.
//! The runs read the GPU as NVML allows any user (or the fake GPU's files with
//! `--fake-gpu DIR` beside `--daemon`, the daemon's own `--fake-gpu DIR`).

use super::apply::{Session, SignalForwarder};
use crate::dvfs::gpu_session::{self, GpuSession};
use crate::dvfs::sweep_gpu::GpuColumns;
use anyhow::{Context, Result};
use powerperf_format::run::RunMeta;
use powerperf_node::controller::{ControllerError, CpufreqController, FrequencyController};
use powerperf_node::gpu_control::GpuSetting;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// One `--freq` entry.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FreqSpec {
    /// A frequency, MHz.
    Mhz(f64),
    /// The controller's highest allowed frequency.
    Max,
    /// The controller's lowest allowed frequency.
    Min,
}

impl FreqSpec {
    /// Parse `1.2GHz`, `1200MHz`, `1200`, `max`, `min`.
    ///
    /// # Errors
    /// Text that is neither a frequency nor `max`/`min`.
    pub fn parse(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "max" => Ok(FreqSpec::Max),
            "min" => Ok(FreqSpec::Min),
            _ => powerperf_node::units::parse_freq_mhz(text).map(FreqSpec::Mhz),
        }
    }
}

/// What to sweep.
#[derive(Debug, Clone)]
pub struct SweepConfig {
    pub out: PathBuf,
    /// Empty: leave the frequency alone (thread-count sweep only).
    pub freqs: Vec<FreqSpec>,
    /// Empty: leave OMP_NUM_THREADS alone.
    pub threads: Vec<u32>,
    pub repeat: u32,
    pub sysfs_root: PathBuf,
    pub dry_run: bool,
    pub restore_file: PathBuf,
    pub log_file: PathBuf,
    pub command: Vec<String>,
    pub workload: Option<String>,
    pub events: Option<String>,
    pub interval: Duration,
    /// GPU SM clocks to lock, MHz (knob `core_freq_mhz` on the GPU).
    pub gpu_clocks: Vec<f64>,
    /// GPU memory clocks to lock, MHz (knob `mem_freq_mhz` on the GPU).
    pub gpu_mem_clocks: Vec<f64>,
    /// GPU power limits, W (knob `power_limit_w`).
    pub gpu_power_limits: Vec<f64>,
    /// The GPU the settings go to.
    pub gpu: u32,
    /// Fake GPUs (`--fake-gpu DIR`) in place of NVML.
    pub fake_gpu: Option<PathBuf>,
    /// Runs made and dropped before the repeats of each grid point.
    pub warmup: u32,
    /// powerperfd's socket (`--daemon PATH`): GPU settings go through it even as root or
    /// with `fake_gpu` (then only read). `None`: through it only for a user who is not
    /// root, has no `fake_gpu`, and has a daemon at `$POWERPERF_DAEMON` or the default
    /// socket.
    pub daemon: Option<PathBuf>,
}

impl SweepConfig {
    /// Whether the sweep sets GPU settings.
    pub fn sets_gpu(&self) -> bool {
        !(self.gpu_clocks.is_empty()
            && self.gpu_mem_clocks.is_empty()
            && self.gpu_power_limits.is_empty())
    }
}

/// `SET/sweep.toml`: the grid, so that a resumed sweep runs the same command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepRecord {
    pub command: Vec<String>,
    pub freqs_mhz: Vec<f64>,
    pub threads: Vec<u32>,
    pub repeat: u32,
    /// The GPU the GPU settings went to (absent: no GPU setting).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu: Option<u32>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_clocks_mhz: Vec<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_mem_clocks_mhz: Vec<f64>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub gpu_power_limits_w: Vec<f64>,
    #[serde(default, skip_serializing_if = "is_zero")]
    pub warmup: u32,
    /// Runs not at their requested GPU setting (the 2 % rule).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub off_setting: Vec<super::sweep_gpu::OffSetting>,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// One planned run.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRun {
    pub freq_mhz: Option<f64>,
    pub threads: Option<u32>,
    pub repeat: u32,
    pub dir: PathBuf,
    /// The GPU setting (empty: none).
    pub gpu: GpuSetting,
    /// A warm-up run (under `SET/warmup/`, left out of the set).
    pub warmup: bool,
}

/// What a sweep did.
#[derive(Debug, Clone)]
pub struct SweepOutcome {
    pub ran: usize,
    pub skipped: usize,
    pub failed: Vec<(PathBuf, i32)>,
    pub points: usize,
    pub notes: Vec<String>,
    /// Set when a signal stopped the sweep: 128 + signal.
    pub interrupted: Option<i32>,
}

/// The run directory name of one grid point.
pub fn run_dir_name(freq_mhz: Option<f64>, threads: Option<u32>, repeat: u32) -> String {
    let f = freq_mhz
        .map(|f| format!("{f}"))
        .unwrap_or_else(|| "-".into());
    let t = threads.map(|t| t.to_string()).unwrap_or_else(|| "-".into());
    format!("f{f}_t{t}_r{repeat}")
}

/// Resolve `max`/`min` against the controller's range and check every value is allowed.
///
/// # Errors
/// A value outside the range ([`ControllerError::OutOfRange`]).
pub fn resolve_freqs(specs: &[FreqSpec], ctl: &dyn FrequencyController) -> Result<Vec<f64>> {
    let range = ctl.range()?;
    let mut out = Vec::new();
    for s in specs {
        let f = match s {
            FreqSpec::Mhz(f) => *f,
            FreqSpec::Max => range
                .available_mhz
                .as_ref()
                .and_then(|l| l.last().copied())
                .unwrap_or(range.max_mhz),
            FreqSpec::Min => range
                .available_mhz
                .as_ref()
                .and_then(|l| l.first().copied())
                .unwrap_or(range.min_mhz),
        };
        if !range.allows(f) {
            return Err(ControllerError::OutOfRange {
                mhz: f,
                allowed: range.describe(),
            }
            .into());
        }
        if !out.contains(&f) {
            out.push(f);
        }
    }
    Ok(out)
}

/// The grid, frequency outermost (one switch per frequency).
pub fn plan_runs(
    out: &Path,
    freqs: &[Option<f64>],
    threads: &[Option<u32>],
    repeat: u32,
) -> Vec<PlannedRun> {
    plan_runs_gpu(out, freqs, &[GpuSetting::default()], threads, repeat, 0)
}

/// The grid with GPU settings: CPU frequency outermost, then the GPU setting (one switch
/// each), threads, then `warmup` warm-up runs and the repeats of each point.
pub fn plan_runs_gpu(
    out: &Path,
    freqs: &[Option<f64>],
    gpus: &[GpuSetting],
    threads: &[Option<u32>],
    repeat: u32,
    warmup: u32,
) -> Vec<PlannedRun> {
    let mut v = Vec::new();
    for f in freqs {
        for g in gpus {
            let sfx = super::sweep_gpu::dir_suffix(g);
            for t in threads {
                let base = run_dir_name(*f, *t, 0);
                let base = base.strip_suffix("_r0").unwrap_or(&base);
                for w in 0..warmup {
                    v.push(PlannedRun {
                        freq_mhz: *f,
                        threads: *t,
                        repeat: w,
                        dir: out.join("warmup").join(format!("{base}_w{w}{sfx}")),
                        gpu: *g,
                        warmup: true,
                    });
                }
                for r in 0..repeat {
                    v.push(PlannedRun {
                        freq_mhz: *f,
                        threads: *t,
                        repeat: r,
                        dir: out.join("runs").join(format!("{base}_r{r}{sfx}")),
                        gpu: *g,
                        warmup: false,
                    });
                }
            }
        }
    }
    v
}

fn finished(dir: &Path) -> bool {
    dir.join(powerperf_format::run::RUN_TOML).exists()
}

/// The cpufreq controller and the frequencies (MHz) to sweep: `[None]` (no controller)
/// when no frequency is asked for.
///
/// # Errors
/// No cpufreq (the message says what to do instead), or a frequency outside the range.
fn open_controller(cfg: &SweepConfig) -> Result<(Option<CpufreqController>, Vec<Option<f64>>)> {
    let mut ctl = None;
    let mut freqs: Vec<Option<f64>> = vec![None];
    if !cfg.freqs.is_empty() {
        match CpufreqController::open(&cfg.sysfs_root) {
            Ok(c) => {
                freqs = resolve_freqs(&cfg.freqs, &c)?
                    .into_iter()
                    .map(Some)
                    .collect();
                ctl = Some(c);
            }
            Err(e @ ControllerError::NoCpufreq { .. }) => {
                let listed: Vec<String> = cfg
                    .freqs
                    .iter()
                    .map(|f| match f {
                        FreqSpec::Mhz(m) => format!("{m} MHz"),
                        FreqSpec::Max => "max".into(),
                        FreqSpec::Min => "min".into(),
                    })
                    .collect();
                return Err(anyhow::Error::new(e).context(format!(
                    "cannot sweep frequencies {}; leave out --freq to sweep thread counts only, or use --dry-run to see the grid",
                    listed.join(", ")
                )));
            }
            Err(e) => return Err(e.into()),
        }
    }
    Ok((ctl, freqs))
}

/// `--dry-run`: print the runs (and whether each would be skipped) and the writes each
/// frequency and GPU setting would make.
///
/// # Errors
/// A frequency the controller cannot plan.
fn print_dry_run(
    cfg: &SweepConfig,
    runs: &[PlannedRun],
    ctl: Option<&CpufreqController>,
    freqs: &[Option<f64>],
    gpus: &[GpuSetting],
    gpu_ctl: Option<&dyn powerperf_node::gpu_control::GpuControl>,
) -> Result<()> {
    eprintln!(
        "powerperf sweep: dry-run: {} runs into {}",
        runs.len(),
        cfg.out.display()
    );
    for r in runs {
        let state = if finished(&r.dir) {
            "finished, would skip"
        } else if r.warmup {
            "warm-up, would run and leave out of the set"
        } else {
            "would run"
        };
        eprintln!("  {} ({state})", r.dir.display());
    }
    if let Some(c) = ctl {
        for f in freqs.iter().flatten() {
            eprintln!("  at {f} MHz, {} would write:", c.describe());
            for w in c.plan_set(*f)? {
                eprintln!("    {w}");
            }
        }
    }
    if cfg.sets_gpu() {
        let g = cfg.gpu;
        let checked = if gpu_ctl.is_some() {
            "checked against the GPU's supported clocks and power limit range"
        } else {
            "unchecked: no GPU control here"
        };
        if let Some(card) = gpu_ctl
            .and_then(|c| powerperf_node::gpu_control::node::sysfs_card(c, &cfg.sysfs_root, g))
        {
            for s in gpus {
                eprintln!(
                    "  at {} on GPU {g} ({checked}), would write the sysfs files of {card}",
                    s.describe()
                );
            }
            eprintln!("  at the end: the files read before put back (docs/cluster.md, \"AMD and Intel GPUs\")");
            return Ok(());
        }
        for s in gpus {
            eprintln!("  at {} on GPU {g} ({checked}), would call:", s.describe());
            if let Some(f) = s.sm_clock_mhz {
                eprintln!("    nvmlDeviceSetGpuLockedClocks(device {g}, minGpuClockMHz {f}, maxGpuClockMHz {f})");
            }
            if let Some(f) = s.mem_clock_mhz {
                eprintln!("    nvmlDeviceSetMemoryLockedClocks(device {g}, minMemClockMHz {f}, maxMemClockMHz {f})");
            }
            if let Some(w) = s.power_limit_w {
                eprintln!(
                    "    nvmlDeviceSetPowerManagementLimit(device {g}, limit {:.0} mW)",
                    w * 1e3
                );
            }
        }
        eprintln!("  at the end: the original GPU settings put back (nvmlDeviceResetGpuLockedClocks, nvmlDeviceResetMemoryLockedClocks, the saved power limit)");
    }
    Ok(())
}

/// Create `OUT/runs` and write `OUT/sweep.toml`, refusing a record of another command.
///
/// # Errors
/// A directory or file that cannot be written, or a record of another command.
fn write_record(cfg: &SweepConfig, record: &SweepRecord) -> Result<()> {
    std::fs::create_dir_all(cfg.out.join("runs"))
        .with_context(|| format!("cannot create {}", cfg.out.display()))?;
    let rec_path = cfg.out.join("sweep.toml");
    // A sweep may run as root in a directory its user chose: the record is read without
    // following a link, non-blocking and bounded, and written by rename over its name
    // (a link planted there is replaced, never followed).
    if rec_path.symlink_metadata().is_ok() {
        let text = powerperf_node::safe_file::read_to_string_bounded(
            &rec_path,
            MAX_SWEEP_RECORD_BYTES,
            "sweep record",
        )?;
        let old: SweepRecord = toml::from_str(&text)
            .with_context(|| format!("{} is not a sweep record", rec_path.display()))?;
        if old.command != record.command {
            anyhow::bail!(
                "{} holds a sweep of `{}`, not `{}`: choose another -o directory",
                cfg.out.display(),
                old.command.join(" "),
                record.command.join(" ")
            );
        }
    }
    powerperf_node::safe_file::write_atomic(
        &cfg.out,
        "sweep.toml",
        toml::to_string_pretty(record)?.as_bytes(),
    )
    .with_context(|| format!("cannot write {}", rec_path.display()))?;
    Ok(())
}

/// The largest `OUT/sweep.toml` a sweep reads back (a record of a few thousand runs is well
/// under 1 MiB).
pub const MAX_SWEEP_RECORD_BYTES: u64 = 16 << 20;

/// Collect one run of the sweep into `r.dir` and record its requested setting (and, for a
/// GPU setting, the observed one); returns the command's shell status.
///
/// # Errors
/// Collection errors, or a run directory whose metadata cannot be read back or written.
fn collect_one(
    cfg: &SweepConfig,
    r: &PlannedRun,
    cols: &super::sweep_gpu::GpuColumns,
) -> Result<i32> {
    let mut env = Vec::new();
    if let Some(t) = r.threads {
        env.push(("OMP_NUM_THREADS".to_string(), t.to_string()));
    }
    let ccfg = crate::collect::CollectConfig {
        mode: crate::collect::Mode::Command,
        events: cfg.events.clone(),
        backend: crate::collect::CounterBackend::Perf,
        interval: cfg.interval,
        sysfs_root: cfg.sysfs_root.clone(),
        out: r.dir.clone(),
        command: cfg.command.clone(),
        workload: cfg.workload.clone(),
        env,
        // a GPU sweep needs the GPU's readings: NVML missing is recorded, not a note
        nvml: if cfg.sets_gpu() && cfg.fake_gpu.is_none() {
            crate::collect::NvmlMode::On
        } else {
            crate::collect::NvmlMode::Auto
        },
        fake_gpu: cfg.fake_gpu.clone(),
        gpm: Default::default(),
        nvtx: true,
        gpu: false,
        per_thread: false,
        pc_sampling: vec![],
        gpu_pc_period: None,
        gpu_pc_serialized: false,
        cpu_pc_sampling_hz: None,
        sampler: crate::collect::TimelineSampler::Auto,
        // The sweep's own run directory (a half-written one is redone).
        force: true,
    };
    let outcome = crate::collect::collect_run(&ccfg)
        .with_context(|| format!("collecting {}", r.dir.display()))?;
    // record the requested setting (the fixture or a busy governor may report another
    // current frequency)
    let mut meta = RunMeta::read(&r.dir)?;
    if let Some(f) = r.freq_mhz {
        meta.knobs.core_freq_mhz = Some(f);
        meta.notes.push(format!(
            "core_freq_mhz = {f} set by powerperf sweep through the cpufreq controller"
        ));
    }
    if let Some(t) = r.threads {
        meta.knobs.threads = Some(t);
    }
    if !r.gpu.is_empty() {
        let g = cfg.gpu;
        let obs = super::sweep_gpu::observe(&r.dir, g, cols, &r.gpu)?;
        if let Some(f) = r.gpu.sm_clock_mhz {
            meta.knobs.core_freq_mhz = Some(f);
            meta.knobs.gpu_sm_clock_mhz = obs.observed_sm_clock_mhz;
        }
        if let Some(f) = r.gpu.mem_clock_mhz {
            meta.knobs.mem_freq_mhz = Some(f);
        }
        if let Some(w) = r.gpu.power_limit_w {
            meta.knobs.power_limit_w = Some(w);
        }
        let via = match cols {
            GpuColumns::Sysfs { driver, .. } => {
                format!(" through the {driver} driver's sysfs files")
            }
            GpuColumns::Nvml(_) if cfg.fake_gpu.is_some() => " on a fake GPU (--fake-gpu)".into(),
            GpuColumns::Nvml(_) => " through NVML".into(),
        };
        meta.notes.push(format!(
            "{} set on GPU {g} by powerperf sweep{via} ([gpu_setting]: requested and observed); knobs core_freq_mhz/mem_freq_mhz/power_limit_w of this run are the GPU's",
            r.gpu.describe(),
        ));
        if let Some(f) = &obs.flag {
            meta.notes
                .push(format!("not at the requested GPU setting: {f}"));
        }
        meta.gpu_setting = Some(obs);
    }
    meta.write(&r.dir)?;
    Ok(outcome.shell_status)
}

/// The GPU controls of a sweep: for a dry run, the fake GPUs or NVML read-only, then the
/// sysfs GPUs of `--sysfs-root` (`None` when there is none: the calls are printed
/// unchecked); else the fake GPUs, or NVML writable, then the sysfs GPUs, as root
/// ([`gpu_session::open_control`]).
///
/// # Errors
/// No fake GPU there; not root and no fake GPU.
fn open_gpu(cfg: &SweepConfig) -> Result<Option<Box<dyn powerperf_node::gpu_control::GpuControl>>> {
    if !cfg.sets_gpu() {
        return Ok(None);
    }
    if cfg.dry_run {
        let opened = powerperf_node::gpu_control::node::open_node_gpus(
            cfg.fake_gpu.as_deref(),
            &cfg.sysfs_root,
            false,
        );
        return match opened {
            Ok((g, _)) => Ok(Some(g)),
            Err(e) if cfg.fake_gpu.is_some() => Err(e.into()),
            Err(e) => {
                eprintln!("powerperf sweep: dry-run: {e}");
                Ok(None)
            }
        };
    }
    gpu_session::open_control(cfg.fake_gpu.as_deref(), &cfg.sysfs_root)
        .map(Some)
        .with_context(|| format!("cannot sweep GPU settings: no powerperfd to go through either (none at {}; name one with --daemon PATH or ${}); --dry-run shows the calls", powerperf_node::daemon::DEFAULT_SOCKET, powerperf_node::daemon::ENV_DAEMON))
}

/// The timeline columns the runs' observed GPU clock and power are read from
/// ([`powerperf_node::gpu_control::node::gpu_columns`]): GPU `--gpu` numbered through the
/// controls this process opened (`ctl`), or, where powerperfd sets the GPU, through the
/// node's GPUs opened here read-only ([`powerperf_node::gpu_control::node::open_node_gpus`],
/// the daemon's numbering: NVML's GPUs, then the sysfs GPUs); `gpu<N>_*` where neither opens.
fn observed_columns(
    cfg: &SweepConfig,
    ctl: Option<&dyn powerperf_node::gpu_control::GpuControl>,
) -> GpuColumns {
    use powerperf_node::gpu_control::node;
    if !cfg.sets_gpu() {
        return GpuColumns::Nvml(cfg.gpu);
    }
    match ctl {
        Some(c) => node::gpu_columns(c, &cfg.sysfs_root, cfg.gpu),
        None => match node::open_node_gpus(cfg.fake_gpu.as_deref(), &cfg.sysfs_root, false) {
            Ok((c, _)) => node::gpu_columns(c.as_ref(), &cfg.sysfs_root, cfg.gpu),
            Err(_) => GpuColumns::Nvml(cfg.gpu),
        },
    }
}

/// The daemon the GPU settings go through (see [`SweepConfig::daemon`]); `None` for a dry
/// run, a sweep without GPU settings, root, or `--fake-gpu` without `--daemon`.
fn gpu_daemon(cfg: &SweepConfig) -> Option<PathBuf> {
    if cfg.dry_run || !cfg.sets_gpu() {
        return None;
    }
    if cfg.daemon.is_some() {
        return cfg.daemon.clone();
    }
    if cfg.fake_gpu.is_some() {
        return None;
    }
    powerperf_node::daemon::client::for_apply(None)
}

/// What sets the GPU during a sweep: this process (root's NVML or the fake GPU's files,
/// with a restore record) or a powerperfd session.
enum GpuWriter {
    Local(GpuSession),
    Daemon(super::apply::daemon_gpu::DaemonGpuSession),
}

impl GpuWriter {
    fn set(&mut self, s: &GpuSetting) -> Result<Vec<String>> {
        match self {
            GpuWriter::Local(g) => g.set(s),
            GpuWriter::Daemon(d) => {
                let what = d.describe().to_string();
                Ok(d.set(s)?
                    .into_iter()
                    .map(|w| format!("{w} (by {what})"))
                    .collect())
            }
        }
    }
    fn restore(&mut self) -> Result<Vec<String>> {
        match self {
            GpuWriter::Local(g) => g.restore(),
            GpuWriter::Daemon(d) => d.restore(),
        }
    }
}

/// Save every GPU control the grid changes (GPU restore record next to the CPU's), before
/// the first GPU write.
///
/// # Errors
/// As [`GpuSession::begin`].
fn begin_gpu_session(
    cfg: &SweepConfig,
    c: Box<dyn powerperf_node::gpu_control::GpuControl>,
    gpus: &[GpuSetting],
) -> Result<GpuSession> {
    let mut knobs = Vec::new();
    for k in gpus.iter().flat_map(|g| g.knobs()) {
        if !knobs.contains(&k) {
            knobs.push(k);
        }
    }
    GpuSession::begin(
        c,
        cfg.gpu,
        &knobs,
        &gpu_session::gpu_record_path(&cfg.restore_file),
        Some(&cfg.log_file),
        gpu_session::GpuOrigin {
            fake_gpu: cfg.fake_gpu.as_deref(),
            sysfs_root: &cfg.sysfs_root,
        },
        &cfg.command,
    )
}

/// The GPU side of a sweep, opened and every point of `gpus` checked before anything
/// changes: a powerperfd session (a user through the daemon, [`gpu_daemon`]) or the
/// controls this process writes ([`open_gpu`]; `None` for a dry run without NVML or a sweep
/// without GPU settings).
///
/// # Errors
/// No daemon or controls, a refused point (the daemon's or the GPU's reason).
#[allow(clippy::type_complexity)]
fn open_and_check_gpu(
    cfg: &SweepConfig,
    gpus: &[GpuSetting],
) -> Result<(
    Option<super::apply::daemon_gpu::DaemonGpuSession>,
    Option<Box<dyn powerperf_node::gpu_control::GpuControl>>,
)> {
    let daemon = gpu_daemon(cfg);
    let mut gpu_dsess = match &daemon {
        Some(sock) => Some(
            super::apply::daemon_gpu::DaemonGpuSession::connect(sock, cfg.gpu, Some(&cfg.log_file))
                .context("cannot sweep GPU settings through powerperfd")?,
        ),
        None => None,
    };
    let gpu_ctl = if daemon.is_some() {
        None
    } else {
        open_gpu(cfg)?
    };
    // every GPU setting is checked before anything changes
    if let Some(d) = gpu_dsess.as_mut() {
        for g in gpus.iter().filter(|g| !g.is_empty()) {
            d.check(g).with_context(|| {
                format!(
                    "GPU setting {} refused by {} before anything was changed",
                    g.describe(),
                    d.describe()
                )
            })?;
        }
        eprintln!(
            "powerperf sweep: {} GPU setting(s) allowed by {}; the daemon sets them and restores them",
            gpus.iter().filter(|g| !g.is_empty()).count(),
            d.describe()
        );
    }
    if let Some(c) = &gpu_ctl {
        for g in gpus.iter().filter(|g| !g.is_empty()) {
            gpu_session::check_setting(c.as_ref(), cfg.gpu, g).with_context(|| {
                format!(
                    "GPU setting {} refused before anything was changed",
                    g.describe()
                )
            })?;
        }
    }
    Ok((gpu_dsess, gpu_ctl))
}

/// Whether the warm-up run `r` can be skipped: every repeat of its point is finished.
fn point_finished(runs: &[PlannedRun], r: &PlannedRun) -> bool {
    runs.iter()
        .filter(|x| {
            !x.warmup && x.freq_mhz == r.freq_mhz && x.threads == r.threads && x.gpu == r.gpu
        })
        .all(|x| finished(&x.dir))
}

/// Run the sweep.
///
/// # Errors
/// No cpufreq when frequencies are asked for (the message says what `--dry-run` would do),
/// a frequency outside the range, a GPU setting the GPU does not take, missing privileges,
/// a left-over restore record, a `sweep.toml` for another command, or collection errors.
pub fn sweep(cfg: &SweepConfig, sig: &SignalForwarder) -> Result<SweepOutcome> {
    if cfg.command.is_empty() {
        anyhow::bail!("no command given: write it after `--`");
    }
    if cfg.repeat == 0 {
        anyhow::bail!("--repeat must be at least 1");
    }
    if !cfg.freqs.is_empty() && !cfg.gpu_clocks.is_empty() {
        anyhow::bail!(
            "--freq and --gpu-clock both set the knob core_freq_mhz (the CPU's and the GPU's): sweep one of them per set"
        );
    }
    let (mut ctl, freqs) = open_controller(cfg)?;
    let gpus =
        super::sweep_gpu::gpu_grid(&cfg.gpu_clocks, &cfg.gpu_mem_clocks, &cfg.gpu_power_limits);
    let (gpu_dsess, gpu_ctl) = open_and_check_gpu(cfg, &gpus)?;
    let threads: Vec<Option<u32>> = if cfg.threads.is_empty() {
        vec![None]
    } else {
        cfg.threads.iter().map(|t| Some(*t)).collect()
    };
    let runs = plan_runs_gpu(&cfg.out, &freqs, &gpus, &threads, cfg.repeat, cfg.warmup);
    let mut record = SweepRecord {
        command: cfg.command.clone(),
        freqs_mhz: freqs.iter().flatten().copied().collect(),
        threads: cfg.threads.clone(),
        repeat: cfg.repeat,
        gpu: cfg.sets_gpu().then_some(cfg.gpu),
        gpu_clocks_mhz: cfg.gpu_clocks.clone(),
        gpu_mem_clocks_mhz: cfg.gpu_mem_clocks.clone(),
        gpu_power_limits_w: cfg.gpu_power_limits.clone(),
        warmup: cfg.warmup,
        off_setting: vec![],
    };
    if cfg.dry_run {
        print_dry_run(cfg, &runs, ctl.as_ref(), &freqs, &gpus, gpu_ctl.as_deref())?;
        return Ok(SweepOutcome {
            ran: 0,
            skipped: 0,
            failed: vec![],
            points: 0,
            notes: vec![],
            interrupted: None,
        });
    }
    write_record(cfg, &record)?;
    let gpu_cols = observed_columns(cfg, gpu_ctl.as_deref());

    let mut session = match ctl.as_mut() {
        Some(c) => {
            let w = c.plan_set(freqs[0].unwrap_or_default())?;
            c.check_access(&w)?;
            Some(Session::begin(
                c as &mut dyn FrequencyController,
                &cfg.restore_file,
                &cfg.log_file,
                &cfg.sysfs_root,
                &cfg.command,
            )?)
        }
        None => None,
    };
    let mut gpu_sess = match gpu_dsess {
        Some(d) => Some(GpuWriter::Daemon(d)),
        None => gpu_ctl
            .map(|c| begin_gpu_session(cfg, c, &gpus))
            .transpose()?
            .map(GpuWriter::Local),
    };
    let todo = runs
        .iter()
        .filter(|r| !(finished(&r.dir) || r.warmup && point_finished(&runs, r)))
        .count();
    let skipped = runs.iter().filter(|r| !r.warmup).count()
        - runs
            .iter()
            .filter(|r| !r.warmup && !finished(&r.dir))
            .count();
    let pb = indicatif::ProgressBar::new(todo as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template(
            "{bar:30} {pos}/{len} runs, {elapsed} elapsed, about {eta} left  {msg}",
        )
        .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
    );
    if skipped > 0 {
        eprintln!(
            "powerperf sweep: {skipped} of {} runs already finished, skipped",
            runs.iter().filter(|r| !r.warmup).count()
        );
    }
    let mut ran = 0;
    let mut failed = Vec::new();
    let mut current: Option<f64> = None;
    let mut current_gpu = GpuSetting::default();
    let mut interrupted = None;
    for r in &runs {
        if finished(&r.dir) || (r.warmup && point_finished(&runs, r)) {
            continue;
        }
        if sig.caught() != 0 {
            interrupted = Some(128 + sig.caught());
            break;
        }
        if r.dir.exists() {
            // an unfinished directory from an interrupted sweep
            std::fs::remove_dir_all(&r.dir)
                .with_context(|| format!("cannot clear {}", r.dir.display()))?;
        }
        if let (Some(s), Some(f)) = (session.as_mut(), r.freq_mhz) {
            if current != Some(f) {
                s.set(f)?;
                current = Some(f);
            }
        }
        if let Some(gs) = gpu_sess.as_mut() {
            if !r.gpu.is_empty() && r.gpu != current_gpu {
                for call in gs.set(&r.gpu)? {
                    pb.suspend(|| eprintln!("powerperf sweep: {call}"));
                }
                current_gpu = r.gpu;
            }
        }
        let label = r
            .dir
            .file_name()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default();
        pb.set_message(label.clone());
        let shell_status = collect_one(cfg, r, &gpu_cols)?;
        if shell_status != 0 && !r.warmup {
            failed.push((r.dir.clone(), shell_status));
        }
        ran += 1;
        pb.inc(1);
        if pb.is_hidden() {
            eprintln!(
                "powerperf sweep: {label}{}: status {} ({}/{todo})",
                if r.warmup { " (warm-up, left out)" } else { "" },
                shell_status,
                ran
            );
        }
    }
    pb.finish_and_clear();
    if interrupted.is_none() && sig.caught() != 0 {
        // caught during the last run
        interrupted = Some(128 + sig.caught());
    }
    if let Some(gs) = gpu_sess.as_mut() {
        for call in gs.restore()? {
            eprintln!("powerperf sweep: restored: {call}");
        }
    }
    drop(gpu_sess);
    if let Some(s) = session.as_mut() {
        s.restore()?;
    }
    drop(session);
    let (points, notes) = match write_set(cfg, &runs, &mut record) {
        Ok(x) => x,
        // interrupted before any usable run: nothing to make a set of yet
        Err(e) if interrupted.is_some() => (0, vec![format!("no set written yet: {e:#}")]),
        Err(e) => return Err(e),
    };
    Ok(SweepOutcome {
        ran,
        skipped,
        failed,
        points,
        notes,
        interrupted,
    })
}

/// Make the training set of the finished runs (warm-ups left out): `SET/set.toml` and
/// `SET/points.parquet`, with the knobs' devices; for a GPU sweep, the flagged runs go into
/// `SET/sweep.toml`'s `[[off_setting]]`. Returns the number of points and the notes.
///
/// # Errors
/// No usable run, an unreadable run, an unwritable set.
fn write_set(
    cfg: &SweepConfig,
    runs: &[PlannedRun],
    record: &mut SweepRecord,
) -> Result<(usize, Vec<String>)> {
    let dirs: Vec<PathBuf> = runs
        .iter()
        .filter(|r| !r.warmup && finished(&r.dir))
        .map(|r| r.dir.clone())
        .collect();
    let (mut set, mut notes) =
        powerperf_format::set::from_runs_labelled(&dirs, cfg.workload.as_deref())?;
    set.meta.description = format!("powerperf sweep of `{}`", cfg.command.join(" "));
    // The sweep sets core_freq_mhz through cpufreq: the CPU's (issue 20, item 4).
    if set.meta.knobs.iter().any(|k| k == "core_freq_mhz") {
        set.meta
            .knob_devices
            .insert("core_freq_mhz".into(), "cpu".into());
    }
    // GPU knobs are the GPU's (issue 39, item 4)
    for (knob, list) in [
        ("core_freq_mhz", &cfg.gpu_clocks),
        ("mem_freq_mhz", &cfg.gpu_mem_clocks),
        ("power_limit_w", &cfg.gpu_power_limits),
    ] {
        if !list.is_empty() {
            set.meta
                .knob_devices
                .insert(knob.into(), format!("gpu{}", cfg.gpu));
        }
    }
    if cfg.sets_gpu() {
        for d in &dirs {
            let flag = RunMeta::read(d)
                .ok()
                .and_then(|m| m.gpu_setting)
                .and_then(|g| g.flag);
            if let Some(flag) = flag {
                let run = d
                    .file_name()
                    .map(|s| s.to_string_lossy().to_string())
                    .unwrap_or_default();
                notes.push(format!(
                    "{run} is flagged: not at its requested GPU setting: {flag} (kept in the set, listed in sweep.toml's [[off_setting]]; fit names it)"
                ));
                record
                    .off_setting
                    .push(super::sweep_gpu::OffSetting { run, flag });
            }
        }
        write_record(cfg, record)?;
    }
    set.write(&cfg.out)?;
    Ok((set.points.len(), notes))
}
