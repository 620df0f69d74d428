//! `powerperf sweep`: training runs over a grid of core frequencies and thread counts.
//!
//! Each (frequency, threads, repeat) is one run directory `SET/runs/f<MHz>_t<threads>_r<k>`
//! written by the same code as `powerperf collect` ([`crate::collect::collect_run`]), with
//! `OMP_NUM_THREADS` set and the frequency set through the cpufreq controller inside one
//! [`Session`] (restore record, switch log, original settings restored at the end and on
//! errors). A run directory that already holds a `run.toml` is finished and skipped, so an
//! interrupted sweep resumes where it stopped. At the end the finished runs become the
//! training set `SET/set.toml` + `SET/points.parquet` ([`crate::store::set::from_runs_labelled`]);
//! the grid is kept in `SET/sweep.toml`.

use super::apply::{Session, SignalForwarder};
use super::controller::{ControllerError, CpufreqController, FrequencyController};
use crate::store::run::RunMeta;
use anyhow::{Context, Result};
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
            _ => crate::units::parse_freq_mhz(text).map(FreqSpec::Mhz),
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
}

/// `SET/sweep.toml`: the grid, so that a resumed sweep runs the same command.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepRecord {
    pub command: Vec<String>,
    pub freqs_mhz: Vec<f64>,
    pub threads: Vec<u32>,
    pub repeat: u32,
}

/// One planned run.
#[derive(Debug, Clone, PartialEq)]
pub struct PlannedRun {
    pub freq_mhz: Option<f64>,
    pub threads: Option<u32>,
    pub repeat: u32,
    pub dir: PathBuf,
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
    let mut v = Vec::new();
    for f in freqs {
        for t in threads {
            for r in 0..repeat {
                v.push(PlannedRun {
                    freq_mhz: *f,
                    threads: *t,
                    repeat: r,
                    dir: out.join("runs").join(run_dir_name(*f, *t, r)),
                });
            }
        }
    }
    v
}

fn finished(dir: &Path) -> bool {
    dir.join(crate::store::run::RUN_TOML).exists()
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
/// frequency would make.
///
/// # Errors
/// A frequency the controller cannot plan.
fn print_dry_run(
    cfg: &SweepConfig,
    runs: &[PlannedRun],
    ctl: Option<&CpufreqController>,
    freqs: &[Option<f64>],
) -> Result<()> {
    eprintln!(
        "powerperf sweep: dry-run: {} runs into {}",
        runs.len(),
        cfg.out.display()
    );
    for r in runs {
        let state = if finished(&r.dir) {
            "finished, would skip"
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
    if rec_path.exists() {
        let old: SweepRecord = toml::from_str(&std::fs::read_to_string(&rec_path)?)
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
    std::fs::write(&rec_path, toml::to_string_pretty(record)?)
        .with_context(|| format!("cannot write {}", rec_path.display()))?;
    Ok(())
}

/// Collect one run of the sweep into `r.dir` and record its requested setting; returns the
/// command's shell status.
///
/// # Errors
/// Collection errors, or a run directory whose metadata cannot be read back or written.
fn collect_one(cfg: &SweepConfig, r: &PlannedRun) -> Result<i32> {
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
        nvml: crate::collect::NvmlMode::Auto,
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
    meta.write(&r.dir)?;
    Ok(outcome.shell_status)
}

/// Run the sweep.
///
/// # Errors
/// No cpufreq when frequencies are asked for (the message says what `--dry-run` would do),
/// a frequency outside the range, missing privileges, a left-over restore record, a
/// `sweep.toml` for another command, or collection errors.
pub fn sweep(cfg: &SweepConfig, sig: &SignalForwarder) -> Result<SweepOutcome> {
    if cfg.command.is_empty() {
        anyhow::bail!("no command given: write it after `--`");
    }
    if cfg.repeat == 0 {
        anyhow::bail!("--repeat must be at least 1");
    }
    let (mut ctl, freqs) = open_controller(cfg)?;
    let threads: Vec<Option<u32>> = if cfg.threads.is_empty() {
        vec![None]
    } else {
        cfg.threads.iter().map(|t| Some(*t)).collect()
    };
    let runs = plan_runs(&cfg.out, &freqs, &threads, cfg.repeat);
    let record = SweepRecord {
        command: cfg.command.clone(),
        freqs_mhz: freqs.iter().flatten().copied().collect(),
        threads: cfg.threads.clone(),
        repeat: cfg.repeat,
    };
    if cfg.dry_run {
        print_dry_run(cfg, &runs, ctl.as_ref(), &freqs)?;
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
    let todo = runs.iter().filter(|r| !finished(&r.dir)).count();
    let skipped = runs.len() - todo;
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
            runs.len()
        );
    }
    let mut ran = 0;
    let mut failed = Vec::new();
    let mut current: Option<f64> = None;
    let mut interrupted = None;
    for r in &runs {
        if finished(&r.dir) {
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
        let label = r
            .dir
            .file_name()
            .map(|s| s.to_string_lossy().to_string())
            .unwrap_or_default();
        pb.set_message(label.clone());
        let shell_status = collect_one(cfg, r)?;
        if shell_status != 0 {
            failed.push((r.dir.clone(), shell_status));
        }
        ran += 1;
        pb.inc(1);
        if pb.is_hidden() {
            eprintln!(
                "powerperf sweep: {label}: status {} ({}/{todo})",
                shell_status, ran
            );
        }
    }
    pb.finish_and_clear();
    if let Some(s) = session.as_mut() {
        s.restore()?;
    }
    drop(session);
    let dirs: Vec<PathBuf> = runs
        .iter()
        .filter(|r| finished(&r.dir))
        .map(|r| r.dir.clone())
        .collect();
    let (mut set, notes) = crate::store::set::from_runs_labelled(&dirs, cfg.workload.as_deref())?;
    set.meta.description = format!("powerperf sweep of `{}`", cfg.command.join(" "));
    // The sweep sets core_freq_mhz through cpufreq: the CPU's (issue 20, item 4).
    if set.meta.knobs.iter().any(|k| k == "core_freq_mhz") {
        set.meta
            .knob_devices
            .insert("core_freq_mhz".into(), "cpu".into());
    }
    set.write(&cfg.out)?;
    Ok(SweepOutcome {
        ran,
        skipped,
        failed,
        points: set.points.len(),
        notes,
        interrupted,
    })
}
