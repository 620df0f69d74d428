//! Collection: run a command, count perf_event events on it and its children, read RAPL
//! energy, sample both every interval into a timeline, and write a run directory.
//!
//! Sources sit behind small types: [`perf_event`] (CPU counters), [`rapl`] (energy),
//! [`sysinfo`] (host facts and knobs). Every sysfs reader takes a root directory.

pub mod events;
#[cfg(target_os = "linux")]
pub mod launcher;
#[cfg(target_os = "linux")]
pub mod perf_event;
pub mod rapl;
pub mod sysinfo;
pub mod timeline;

#[cfg(target_os = "linux")]
pub use run_impl::collect_run;

use std::path::PathBuf;
use std::time::Duration;

/// What `powerperf collect` does, as a plain struct.
#[derive(Debug, Clone)]
pub struct CollectConfig {
    /// Comma-separated `-e` list; `None` for perf stat's defaults.
    pub events: Option<String>,
    pub interval: Duration,
    /// Filesystem root for sysfs reads (`/` in production).
    pub sysfs_root: PathBuf,
    /// The run directory to write.
    pub out: PathBuf,
    pub command: Vec<String>,
    /// Workload label stored in run.toml (default: the command's base name).
    pub workload: Option<String>,
    /// Extra environment for the command (e.g. OMP_NUM_THREADS for sweeps).
    pub env: Vec<(String, String)>,
}

/// What a collection produced.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub meta: crate::store::run::RunMeta,
    /// The status a shell would report for the command: exit code, or 128 + signal.
    pub shell_status: i32,
}

/// CLOCK_MONOTONIC now, ns: the one clock of every run file.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

#[cfg(target_os = "linux")]
mod run_impl {
    use super::launcher::{self, Exit};
    use super::perf_event::{self, OpenCounter, Opened};
    use super::rapl::{self, RaplReader};
    use super::timeline::Timeline;
    use super::{events, monotonic_ns, sysinfo, CollectConfig, Outcome};
    use crate::store::run::{
        Backend, Ending, EventRecord, EventStatus, RunInfo, RunMeta, TIMELINE,
    };
    use anyhow::{Context, Result};
    use std::sync::mpsc;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    struct Sampler {
        counters: Vec<OpenCounter>,
        rapl: RaplReader,
        timeline: Timeline,
        origin_ns: u64,
        last_ns: u64,
    }

    impl Sampler {
        fn sample(&mut self) {
            let now = monotonic_ns();
            let mut vals: Vec<Option<f64>> = self.counters.iter_mut().map(|c| c.sample()).collect();
            vals.extend(self.rapl.sample());
            self.timeline
                .push(now - self.origin_ns, now - self.last_ns, &vals);
            self.last_ns = now;
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

    /// Run `cfg.command` under measurement and write the run directory.
    ///
    /// The directory is written even when the command fails to start, crashes or is killed
    /// (`run.toml` says how it ended). SIGINT, SIGTERM, SIGHUP and SIGQUIT received by
    /// powerperf are forwarded to the command.
    ///
    /// # Errors
    /// A bad event list, an unwritable run directory, or a failed fork.
    pub fn collect_run(cfg: &CollectConfig) -> Result<Outcome> {
        let specs = events::parse_list(cfg.events.as_deref())?;
        std::fs::create_dir_all(&cfg.out)
            .with_context(|| format!("cannot create the run directory {}", cfg.out.display()))?;
        let (host, kernel) = sysinfo::host_and_kernel();
        let cpu = sysinfo::cpu_id();
        let knobs = sysinfo::read_knobs(&cfg.sysfs_root);
        let discovery = rapl::discover(&cfg.sysfs_root);
        let mut notes = Vec::new();
        if let Some(n) = &knobs.cpufreq_note {
            notes.push(n.clone());
        }
        if let Some(r) = &discovery.absent_reason {
            notes.push(r.clone());
        }
        let start_unix_ns = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0);
        let rank = ["OMPI_COMM_WORLD_RANK", "PMI_RANK", "SLURM_PROCID"]
            .iter()
            .find_map(|v| std::env::var(v).ok().and_then(|s| s.parse().ok()));
        let mut meta = RunMeta {
            run: RunInfo {
                id: format!("{}-{}", base_name(&cfg.command), start_unix_ns),
                command: cfg.command.clone(),
                workload: Some(
                    cfg.workload
                        .clone()
                        .unwrap_or_else(|| base_name(&cfg.command)),
                ),
                ended: Ending::Unknown,
                exit_status: None,
                signal: None,
                signal_name: None,
                core_dumped: false,
                error: None,
                start_unix_ns,
                start_monotonic_ns: monotonic_ns(),
                duration_ns: 0,
                host,
                cpu_model: cpu.model_name.clone(),
                cpu_vendor: cpu.vendor.clone(),
                cpu_family: cpu.family,
                cpu_model_number: cpu.model,
                kernel,
                tool_version: env!("CARGO_PKG_VERSION").to_string(),
                rank,
                interval_ns: cfg.interval.as_nanos() as u64,
                samples: 0,
                truncated: false,
            },
            knobs,
            events: vec![],
            notes,
        };
        // A run.toml exists from the start, so even a powerperf killed mid-run leaves a
        // readable directory that says the ending is unknown.
        meta.write(&cfg.out)?;

        let mut env = cfg.env.clone();
        env.push(("POWERPERF_RUN_DIR".into(), cfg.out.display().to_string()));
        let paused = launcher::spawn_paused(&cfg.command, &env)
            .with_context(|| format!("cannot start `{}`", cfg.command.join(" ")))?;
        let pid = paused.pid;

        let mut counters = Vec::new();
        let mut failed = Vec::new();
        for s in &specs {
            match perf_event::open(s, pid) {
                Opened::Counter(c) => counters.push(*c),
                Opened::Failed {
                    spec,
                    status,
                    reason,
                } => failed.push((spec, status, reason)),
            }
        }
        let mut columns: Vec<String> = counters.iter().map(|c| c.spec.name.clone()).collect();
        columns.extend(discovery.domains.iter().map(|d| d.column.clone()));
        let origin = monotonic_ns();
        meta.run.start_monotonic_ns = origin;
        let mut sampler = Sampler {
            counters,
            rapl: RaplReader::new(discovery.domains.clone()),
            timeline: Timeline::new(&columns),
            origin_ns: origin,
            last_ns: origin,
        };

        // Forward terminating signals to the command.
        let mut signals = signal_hook::iterator::Signals::new([
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
        ])
        .context("installing signal handlers")?;
        let sig_handle = signals.handle();
        let forwarder = std::thread::spawn(move || {
            for sig in signals.forever() {
                // SAFETY: plain kill(2) on the child's pid.
                unsafe { libc::kill(pid, sig) };
            }
        });

        let exec_result = paused.go();
        let (stop_tx, stop_rx) = mpsc::channel::<()>();
        let interval = cfg.interval;
        let sampler_thread = std::thread::spawn(move || {
            if interval > Duration::ZERO {
                while let Err(mpsc::RecvTimeoutError::Timeout) = stop_rx.recv_timeout(interval) {
                    sampler.sample();
                }
            } else {
                let _ = stop_rx.recv();
            }
            sampler.sample();
            sampler
        });
        let exit = launcher::wait(pid);
        let end = monotonic_ns();
        let _ = stop_tx.send(());
        let sampler = sampler_thread
            .join()
            .map_err(|_| anyhow::anyhow!("the sampler thread panicked"))?;
        sig_handle.close();
        let _ = forwarder.join();

        meta.run.duration_ns = end - origin;
        meta.run.samples = sampler.timeline.t_ns.len() as u64;
        match (&exec_result, exit) {
            (Err(e), _) => {
                meta.run.ended = Ending::NotStarted;
                meta.run.error = Some(format!("cannot run `{}`: {e}", cfg.command[0]));
                meta.run.exit_status = Some(if e.kind() == std::io::ErrorKind::PermissionDenied {
                    126
                } else {
                    127
                });
            }
            (Ok(()), Ok(Exit::Code(c))) => {
                meta.run.ended = Ending::Exited;
                meta.run.exit_status = Some(c);
            }
            (
                Ok(()),
                Ok(Exit::Signal {
                    signal,
                    core_dumped,
                }),
            ) => {
                meta.run.ended = Ending::Signaled;
                meta.run.signal = Some(signal);
                meta.run.signal_name = Some(launcher::signal_name(signal));
                meta.run.core_dumped = core_dumped;
            }
            (Ok(()), Err(e)) => {
                meta.run.error = Some(format!("waitpid failed: {e}"));
            }
        }

        // Event records, in the order the user asked for them.
        let mut timeline = sampler.timeline;
        for s in &specs {
            if let Some(c) = sampler.counters.iter().find(|c| c.spec.name == s.name) {
                let total = c.total();
                let status = match total {
                    None => EventStatus::NotCounted,
                    Some(_) if c.multiplexed() => EventStatus::Multiplexed,
                    Some(_) => EventStatus::Counted,
                };
                meta.events.push(EventRecord {
                    name: s.name.clone(),
                    backend: Backend::PerfEvent,
                    status,
                    reason: match (status, c.fell_back_to_user) {
                        (EventStatus::NotCounted, _) => {
                            Some("opened but never scheduled on the PMU (time_running = 0)".into())
                        }
                        (_, true) => Some(format!(
                            "kernel excluded after a permission error (counted as `{}:u`); {}",
                            s.name,
                            perf_event::permission_fix()
                        )),
                        _ => None,
                    },
                    column: Some(s.name.clone()),
                    total,
                    unit: s.unit.map(String::from),
                    scale: Some(1.0),
                    running_ratio: c.running_ratio(),
                });
            } else if let Some((spec, status, reason)) =
                failed.iter().find(|(f, _, _)| f.name == s.name)
            {
                meta.events.push(EventRecord {
                    name: spec.name.clone(),
                    backend: Backend::PerfEvent,
                    status: *status,
                    reason: Some(reason.clone()),
                    column: None,
                    total: None,
                    unit: spec.unit.map(String::from),
                    scale: None,
                    running_ratio: None,
                });
            }
        }
        if failed
            .iter()
            .any(|(s, _, _)| matches!(s.kind, events::EventKind::Hardware(_)))
            && sampler.counters.iter().any(|c| c.spec.name == "task-clock")
        {
            meta.notes.push("hardware counters are not available here; task-clock (software) is counted instead of cycles".into());
        }
        for (i, d) in sampler.rapl.domains.iter().enumerate() {
            let total_j = sampler.rapl.total_uj[i] as f64 * 1e-6;
            let advanced = sampler.rapl.total_uj[i] > 0;
            if !advanced {
                timeline.remove(&d.column);
            }
            meta.events.push(EventRecord {
                name: format!("energy-{}", d.name),
                backend: Backend::Rapl,
                status: if advanced { EventStatus::Counted } else { EventStatus::NotSupported },
                reason: (!advanced).then(|| {
                    format!(
                        "{} did not advance while the command ran ({:.3} s): reported as not supported, not as zero energy (seen on virtual machines that expose RAPL)",
                        d.energy_path.display(),
                        meta.run.duration_ns as f64 * 1e-9
                    )
                }),
                column: advanced.then(|| d.column.clone()),
                total: advanced.then_some(total_j),
                unit: Some("J".into()),
                scale: Some(1e-6),
                running_ratio: None,
            });
        }
        for u in &discovery.unreadable {
            meta.events.push(EventRecord {
                name: format!("energy-{}", u.name),
                backend: Backend::Rapl,
                status: if u.permission_denied {
                    EventStatus::PermissionDenied
                } else {
                    EventStatus::NotSupported
                },
                reason: Some(u.reason.clone()),
                column: None,
                total: None,
                unit: Some("J".into()),
                scale: None,
                running_ratio: None,
            });
        }

        let tl_path = cfg.out.join(TIMELINE);
        if let Err(e) = timeline.write_parquet(&tl_path) {
            meta.run.truncated = true;
            meta.notes.push(format!(
                "the timeline could not be written completely: {e:#}"
            ));
        }
        meta.write(&cfg.out)?;
        let shell_status = meta.shell_status();
        Ok(Outcome { meta, shell_status })
    }
}
