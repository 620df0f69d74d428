//! Collection: run a command, count perf_event events on it and its children, read RAPL
//! energy, sample both every interval into a timeline, and write a run directory.
//!
//! Sources sit behind small types: [`perf_event`] (CPU counters), [`rapl`] (energy),
//! [`sysinfo`] (host facts and knobs). Every sysfs reader takes a root directory.

pub mod attribution;
#[cfg(target_os = "linux")]
pub mod energy;
pub mod events;
pub mod gpu_activity;
pub mod gpu_pcsamp;
#[cfg(target_os = "linux")]
pub mod launcher;
#[cfg(target_os = "linux")]
pub mod leader_sampling;
pub mod nvml;
mod options;
#[cfg(all(target_os = "linux", feature = "papi"))]
pub mod papi;
#[cfg(target_os = "linux")]
pub mod pc_sampler;
pub mod pc_samples;
#[cfg(target_os = "linux")]
pub mod perf_event;
pub mod pmu;
mod ranks;
pub mod rapl;
mod rt_lib;
pub mod sysinfo;
/// The timeline table and its journal: the run format's ([`powerperf_format::timeline`]).
pub use powerperf_format::timeline;

pub use options::{
    check_interval, papi_not_built, CollectConfig, CounterBackend, Mode, NvmlMode, PcTarget,
    TimelineSampler, MIN_INTERVAL,
};
pub use ranks::{expand_output, global_rank, local_rank};
pub use rt_lib::{rt_cuda_library, rt_library};
#[cfg(target_os = "linux")]
pub use run_impl::collect_run;

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
    use super::energy::Energy;
    use super::launcher::{self, Exit};
    use super::leader_sampling::KernelTimeline;
    use super::nvml::GpuSampler;
    use super::perf_event::{self, OpenCounter, Opened, Target};
    use super::timeline::{Journal, TimelineWriter, JOURNAL};
    use super::{
        events, global_rank, local_rank, monotonic_ns, sysinfo, CollectConfig, CounterBackend,
        Mode, NvmlMode, Outcome, TimelineSampler,
    };
    use crate::store::run::{
        Backend, Ending, EventRecord, EventStatus, PcSampling, RunInfo, RunMeta, ThreadCounts,
        TIMELINE,
    };
    use anyhow::{Context, Result};

    /// Space held back in the run directory's file system while the run goes on.
    const RESERVE_BYTES: usize = 64 * 1024;
    /// Ring buffer per sampling leader (group × CPU): a sample of a group of n counters
    /// takes 56 + 16·n bytes, so 128 KiB holds about 1,500 samples of 4 counters, 15 s of
    /// one thread at 10 ms, far more than the 250 ms between drains.
    const LEADER_RING_BYTES: usize = 128 * 1024;
    /// How often the buffers of leader sampling are drained into rows.
    const LEADER_DRAIN: Duration = Duration::from_millis(250);

    /// An unnamed file of [`RESERVE_BYTES`] (`safe_file::anonymous_reserve`): closing it
    /// (dropping this, at the end and on every early return, or powerperf's death) gives the
    /// space back, and no file is ever left in the run directory.
    struct Reserve(#[allow(dead_code)] Option<std::fs::File>);
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;
    use std::time::{Duration, SystemTime, UNIX_EPOCH};

    struct Sampler {
        counters: Vec<OpenCounter>,
        #[cfg(feature = "papi")]
        papi: Option<super::papi::PapiCounters>,
        energy: Energy,
        gpu: GpuSampler,
        /// Rows stream to disk, at most `timeline::WRITE_BUFFER_ROWS` in memory (issue 18).
        timeline: TimelineWriter,
        journal: Option<Journal>,
        origin_ns: u64,
        last_ns: u64,
        /// Leader sampling: the counters' values come from the kernel's samples.
        kernel: Option<KernelTimeline>,
        /// Leader samples are the only source: rows on the interval's grid.
        drain_only: bool,
        interval_ns: u64,
    }

    impl Sampler {
        /// Rows at the interval's grid times origin + k·interval up to `now`, from leader
        /// samples alone (no other source is read: they need a thread waking every
        /// interval, and then [`sample`](Self::sample) is used).
        fn grid_rows(&mut self, now: u64) {
            let Some(mut k) = self.kernel.take() else {
                return;
            };
            k.drain();
            // A sample being written on another CPU at this instant is left for the next
            // drain: rows stop 1 ms short of now.
            let until = now.saturating_sub(1_000_000);
            let mut t = self.last_ns + self.interval_ns;
            while t <= until {
                let mut vals = k.deltas_at(t, &mut self.counters);
                vals.resize(self.timeline.columns(), None);
                self.push(t, &vals);
                t += self.interval_ns;
            }
            self.kernel = Some(k);
        }

        fn push(&mut self, now: u64, vals: &[Option<f64>]) {
            self.timeline
                .push(now - self.origin_ns, now - self.last_ns, vals);
            if let Some(j) = &mut self.journal {
                j.append(now - self.origin_ns, now - self.last_ns, vals);
            }
            self.last_ns = now;
        }

        /// One row at this instant from every source; `last` closes the timeline with one
        /// read(2) of every counter (exact totals) also under leader sampling.
        fn sample(&mut self, last: bool) {
            if last && self.drain_only {
                self.grid_rows(monotonic_ns());
            }
            let now = monotonic_ns();
            let mut vals = match (&mut self.kernel, last) {
                (Some(k), false) => {
                    k.drain();
                    k.deltas_at(now, &mut self.counters)
                }
                _ => perf_event::sample_all(&mut self.counters),
            };
            #[cfg(feature = "papi")]
            if let Some(p) = &mut self.papi {
                vals.extend(p.sample());
            }
            vals.extend(self.energy.sample());
            vals.extend(self.gpu.sample(now - self.last_ns));
            self.push(now, &vals);
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

    /// CPU time of this process so far (user + system), ns.
    fn self_cpu_ns() -> Option<u64> {
        // SAFETY: getrusage fills the struct it is given.
        let mut ru: libc::rusage = unsafe { std::mem::zeroed() };
        if unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut ru) } != 0 {
            return None;
        }
        let ns = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
        Some(ns(ru.ru_utime) + ns(ru.ru_stime))
    }

    /// Whether `pid` still runs: it exists and is not a zombie (an exited process whose
    /// parent has not reaped it yet still answers kill(pid, 0)).
    fn pid_alive(pid: i32) -> bool {
        match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
            // The state follows the parenthesised command name (proc(5)).
            Ok(stat) => stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().next())
                .is_some_and(|st| st != "Z" && st != "X"),
            Err(_) => false,
        }
    }

    fn record_for(c: &OpenCounter, s: &events::EventSpec) -> EventRecord {
        let is_energy = c
            .spec
            .unit
            .as_deref()
            .is_some_and(|u| u.eq_ignore_ascii_case("joules") || u == "J");
        if is_energy && c.total() == Some(0.0) {
            // An energy counter that never advances (a VM's power PMU) is not a zero.
            return EventRecord {
                name: s.name.clone(),
                backend: Backend::PerfEvent,
                status: EventStatus::NotSupported,
                reason: Some(format!("{} did not advance while the command ran: reported as not supported, not as zero energy (seen on virtual machines that expose a RAPL PMU)", s.name)),
                column: None,
                total: None,
                unit: Some("J".into()),
                scale: Some(c.scale),
                running_ratio: c.running_ratio(),
            };
        }
        let total = c.total();
        let status = match total {
            None => EventStatus::NotCounted,
            Some(_) if c.multiplexed() => EventStatus::Multiplexed,
            Some(_) => EventStatus::Counted,
        };
        EventRecord {
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
            unit: if is_energy {
                Some("J".into())
            } else {
                c.spec.unit.clone()
            },
            scale: Some(c.scale),
            running_ratio: c.running_ratio(),
        }
    }

    fn pc_not_taken(hz: u64, status: EventStatus, reason: String) -> PcSampling {
        PcSampling {
            device: "cpu".into(),
            backend: Backend::PerfEvent,
            event: "cpu-clock".into(),
            status,
            reason: Some(reason),
            frequency_hz: hz,
            period_unit: None,
            user_only: false,
            samples: 0,
            lost: 0,
            throttled: 0,
            unknown_samples: 0,
            rows: 0,
        }
    }

    /// Write `pc_samples.parquet` and say in run.toml how the samples were taken.
    fn write_pc_samples(
        dir: &std::path::Path,
        info: super::pc_sampler::OpenedInfo,
        c: &super::pc_sampler::Collected,
        meta: &mut RunMeta,
    ) -> PcSampling {
        let mut rec = PcSampling {
            device: "cpu".into(),
            backend: Backend::PerfEvent,
            event: info.event.clone(),
            status: EventStatus::Counted,
            reason: None,
            frequency_hz: info.frequency_hz,
            period_unit: Some(info.period_unit.clone()),
            user_only: info.user_only,
            samples: c.samples,
            lost: c.lost,
            throttled: c.throttled,
            unknown_samples: 0,
            rows: 0,
        };
        if c.lost > 0 {
            meta.notes.push(format!(
                "pc sampling: the kernel dropped {} record(s) because a ring buffer was full (PERF_RECORD_LOST); lower --sample-freq",
                c.lost
            ));
        }
        if c.throttled > 0 {
            meta.notes.push(format!(
                "pc sampling: the kernel throttled the sampling rate {} time(s) (kernel.perf_cpu_time_max_percent); fewer samples than --sample-freq asks for",
                c.throttled
            ));
        }
        if c.unparsed > 0 {
            meta.notes.push(format!(
                "pc sampling: {} record(s) could not be parsed and were skipped",
                c.unparsed
            ));
        }
        if c.samples == 0 {
            rec.status = EventStatus::NotCounted;
            rec.reason = Some("no samples: the command ran for less than one sampling period, or never ran on a CPU".into());
        }
        match super::pc_sampler::write(dir, c) {
            Ok(w) => {
                rec.rows = w.rows as u64;
                rec.unknown_samples = w.unknown_samples;
                meta.notes.extend(w.notes);
            }
            Err(e) => {
                meta.run.truncated = true;
                meta.notes
                    .push(format!("pc_samples.parquet could not be written: {e:#}"));
            }
        }
        rec
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
        super::check_interval(cfg.interval)?;
        if cfg.per_thread && !matches!(cfg.mode, Mode::Attach(_)) {
            anyhow::bail!(
                "--per-thread needs -p PID (as perf stat --per-thread): a command's counters are inherited by its threads and children and summed by the kernel"
            );
        }
        let mut specs = match cfg.backend {
            CounterBackend::Perf => events::parse_list(cfg.events.as_deref())?,
            CounterBackend::Papi => vec![],
        };
        // An event listed twice would be two timeline columns of one name (issue 18).
        #[allow(unused_mut)] // extended by the PAPI backend
        let mut dup_notes: Vec<String> = events::dedup_by_name(&mut specs, |s| s.name.as_str())
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
                dup_notes.extend(events::dedup_by_name(&mut names, |n| n.as_str()));
                names
            }
            CounterBackend::Perf => vec![],
        };
        if cfg.mode == Mode::Command && cfg.command.is_empty() {
            anyhow::bail!("no command given (usage: powerperf collect -o RUN -- CMD ARGS...)");
        }
        std::fs::create_dir_all(&cfg.out)
            .with_context(|| format!("cannot create the run directory {}", cfg.out.display()))?;
        // An earlier run in the same directory: its outputs go first (its region events or
        // GPU recordings would otherwise be read into this run). A directory that is not a
        // run (no readable run.toml) is never emptied without --force (issue 18).
        let present: Vec<&str> = crate::store::run::RUN_OUTPUTS
            .iter()
            .copied()
            .filter(|n| cfg.out.join(n).symlink_metadata().is_ok())
            .collect();
        if !present.is_empty() && !cfg.force && crate::store::run::RunMeta::read(&cfg.out).is_err()
        {
            anyhow::bail!(
                "{} is not a powerperf run directory (it has no readable run.toml), but it holds {}, which collect would replace; nothing was removed. Fix: choose another -o directory, or pass --force to replace them",
                cfg.out.display(),
                present.join(", ")
            );
        }
        let mut replaced = Vec::new();
        for name in crate::store::run::RUN_OUTPUTS {
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
        let (host, kernel) = sysinfo::host_and_kernel();
        let cpu = sysinfo::cpu_id();
        let mut knobs = sysinfo::read_knobs(&cfg.sysfs_root);
        if let Some((_, t)) = cfg.env.iter().find(|(k, _)| k == "OMP_NUM_THREADS") {
            // The command's own environment wins over powerperf's.
            knobs.threads = t.trim().parse().ok();
        }
        let mut notes = dup_notes;
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
        let rank = global_rank();
        let label = match (&cfg.mode, cfg.command.is_empty()) {
            (_, false) => base_name(&cfg.command),
            (Mode::Attach(pid), true) => std::fs::read_to_string(format!("/proc/{pid}/comm"))
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| format!("pid{pid}")),
            _ => "system".into(),
        };
        let mut meta = RunMeta {
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
                self_cpu_ns: None,
                timeline_sampler: None,
            },
            knobs,
            events: vec![],
            notes,
            threads: vec![],
            pc_sampling: None,
        };
        // A run.toml exists from the start (`ended = "running"`), so even a powerperf killed
        // mid-run leaves a readable directory; `RunMeta::read` rebuilds its totals from the
        // journal.
        meta.write(&cfg.out)?;
        // Space held back for the final run.toml: removed just before it is written, so a
        // disk the command (or the journal) filled up still gets a run.toml that says so.
        let reserve = match crate::store::safe_file::anonymous_reserve(&cfg.out, RESERVE_BYTES) {
            Ok(f) => Reserve(Some(f)),
            Err(e) => {
                meta.notes.push(format!(
                    "no space could be held back for the final run.toml ({e}): on a full disk it may keep its first version"
                ));
                Reserve(None)
            }
        };

        let mut env = cfg.env.clone();
        env.push(("POWERPERF_RUN_DIR".into(), cfg.out.display().to_string()));
        // With --gpu one library does everything in the process (regions, NVTX, CUDA
        // injection): two copies of the runtime would keep two region stacks.
        let gpu_pc = cfg.pc_sampling.contains(&super::PcTarget::Gpu);
        if gpu_pc {
            env.push(("POWERPERF_CUPTI_PC_SAMPLING".into(), "1".into()));
            if let Some(p) = cfg.gpu_pc_period {
                env.push(("POWERPERF_CUPTI_PC_PERIOD".into(), p.to_string()));
            }
            if cfg.gpu_pc_serialized {
                env.push(("POWERPERF_CUPTI_PC_MODE".into(), "serialized".into()));
            }
        }
        let rt_lib = if cfg.gpu || gpu_pc {
            let lib = super::rt_cuda_library().context(
                "collect --gpu needs libpowerperf_rt_cuda.so: build it (`cargo build --release` builds it next to powerperf, from rt/cuda) or name it with POWERPERF_RT_CUDA_LIB",
            )?;
            let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
            let theirs = std::env::var_os("CUDA_INJECTION64_PATH")
                .map(|v| v.to_string_lossy().into_owned())
                .or_else(|| {
                    cfg.env
                        .iter()
                        .find(|(k, _)| k == "CUDA_INJECTION64_PATH")
                        .map(|(_, v)| v.clone())
                });
            match theirs {
                None => env.push(("CUDA_INJECTION64_PATH".into(), lib.display().to_string())),
                Some(t) => meta.notes.push(format!(
                    "GPU activity is not recorded: CUDA_INJECTION64_PATH is already set to {t} (CUDA loads one injection library; CUPTI allows one subscriber per process)"
                )),
            }
            Some(lib)
        } else {
            super::rt_library()
        };
        if let Some(lib) = rt_lib {
            // For programs that load the region library by path (the Python ctypes module).
            let lib = std::fs::canonicalize(&lib).unwrap_or(lib);
            env.push(("POWERPERF_RT_LIB".into(), lib.display().to_string()));
            // NVTX ranges (nvtxRangePush/Pop, torch.cuda.nvtx) become regions: NVTX dlopens
            // the library named here and calls its InitializeInjectionNvtx2 (rt/README.md).
            let theirs = std::env::var_os("NVTX_INJECTION64_PATH")
                .map(|v| v.to_string_lossy().into_owned())
                .or_else(|| {
                    cfg.env
                        .iter()
                        .find(|(k, _)| k == "NVTX_INJECTION64_PATH")
                        .map(|(_, v)| v.clone())
                });
            match (cfg.nvtx, theirs) {
                (true, None) => {
                    env.push(("NVTX_INJECTION64_PATH".into(), lib.display().to_string()))
                }
                (true, Some(t)) => meta.notes.push(format!(
                    "NVTX ranges are not recorded as regions: NVTX_INJECTION64_PATH is already set to {t} (NVTX loads one tool per process)"
                )),
                (false, _) => {}
            }
        }
        let paused = if cfg.command.is_empty() {
            None
        } else {
            Some(
                launcher::spawn_paused(&cfg.command, &env)
                    .with_context(|| format!("cannot start `{}`", cfg.command.join(" ")))?,
            )
        };
        let target = match &cfg.mode {
            Mode::Command => Target::Child(paused.as_ref().map(|p| p.pid).unwrap_or(0)),
            Mode::Attach(pid) => Target::Tasks(
                perf_event::threads_of(*pid)
                    .with_context(|| format!("no process {pid} to attach to"))?,
            ),
            Mode::SystemWide(cpus) => Target::Cpus(cpus.clone()),
        };
        // Thread names, read now: threads may be gone by the end.
        let comms: Vec<(i32, String)> = match (&target, &cfg.mode) {
            (Target::Tasks(tids), Mode::Attach(pid)) if cfg.per_thread => tids
                .iter()
                .map(|t| {
                    let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm"))
                        .map(|s| s.trim().to_string())
                        .unwrap_or_default();
                    (*t, comm)
                })
                .collect(),
            _ => vec![],
        };
        let energy = match local_rank() {
            Some(l) if l > 0 => Energy::none(format!(
                "node-wide sources (RAPL) are sampled by the first rank on each node; this is local rank {l}"
            )),
            _ => Energy::open(&cfg.sysfs_root),
        };
        meta.notes.extend(energy.notes.iter().cloned());
        let gpu = match (cfg.nvml, local_rank()) {
            (NvmlMode::Off, _) => GpuSampler::none("NVML sampling turned off (--nvml off)"),
            (_, Some(l)) if l > 0 => GpuSampler::none(format!(
                "node-wide sources (NVML) are sampled by the first rank on each node; this is local rank {l}"
            )),
            _ => match super::nvml::open_nvml() {
                Ok(src) => GpuSampler::new(src),
                Err(why) => GpuSampler::none(why),
            },
        };
        meta.notes.extend(gpu.notes.iter().cloned());
        if let (Some(why), NvmlMode::Auto) = (&gpu.unavailable, cfg.nvml) {
            meta.notes.push(format!("no GPU sampling: {why}"));
        }
        // Leader sampling (the kernel reads the counters in the command's context) where
        // asked for, or by default where counters are the timeline's only sources.
        #[cfg(feature = "papi")]
        let papi_used = cfg.backend == CounterBackend::Papi;
        #[cfg(not(feature = "papi"))]
        let papi_used = false;
        let thread_sources = !energy.domains.is_empty() || gpu.unavailable.is_none() || papi_used;
        let want_kernel = match cfg.sampler {
            TimelineSampler::Thread => false,
            TimelineSampler::Kernel => true,
            TimelineSampler::Auto => !thread_sources,
        } && !cfg.interval.is_zero()
            && !specs.is_empty();
        let mut leader_sampling = match (&target, &cfg.mode) {
            (Target::Child(pid), Mode::Command) if want_kernel && *pid > 0 => {
                Some(perf_event::LeaderSampling {
                    pid: *pid,
                    cpus: super::pc_sampler::online_cpus(),
                    period_ns: cfg.interval.as_nanos() as u64,
                    ring_bytes: LEADER_RING_BYTES,
                    leaders: vec![],
                    failed: None,
                })
            }
            _ => {
                if cfg.sampler == TimelineSampler::Kernel {
                    meta.notes.push("--sampler kernel samples a command started by collect (counters with an interval): the timeline was read by a thread".into());
                }
                None
            }
        };
        let mut opened =
            perf_event::open_all_with(&specs, &target, &cfg.sysfs_root, leader_sampling.as_mut());
        // Counts under leader sampling cannot be scaled for multiplexing (docs/overhead.md):
        // auto takes it for software events only, which the kernel never multiplexes.
        let multiplexable: Vec<&str> = opened
            .iter()
            .filter_map(|o| match o {
                perf_event::Opened::Counter(c)
                    if !matches!(c.spec.kind, events::EventKind::Software(_)) =>
                {
                    Some(c.spec.name.as_str())
                }
                _ => None,
            })
            .collect();
        if let (Some(ls), false) = (leader_sampling.as_mut(), multiplexable.is_empty()) {
            match cfg.sampler {
                TimelineSampler::Auto => {
                    ls.failed = Some(format!(
                        "--sampler auto takes it for software events only, and {} can be multiplexed, which leader samples cannot scale",
                        multiplexable.join(", ")
                    ))
                }
                _ => meta.notes.push(format!(
                    "--sampler kernel: {} are not scaled for multiplexing (a counter bound to one CPU is also idle while the command runs on another); keep each group within the PMU's counters, or use --sampler thread",
                    multiplexable.join(", ")
                )),
            }
        }
        if let Some(why) = leader_sampling.as_ref().and_then(|l| l.failed.clone()) {
            meta.notes.push(format!(
                "the timeline's counters were read by a thread (--sampler thread): leader sampling was not possible: {why}"
            ));
            leader_sampling = None;
            opened = perf_event::open_all(&specs, &target, &cfg.sysfs_root);
        }
        meta.run.timeline_sampler = (!cfg.interval.is_zero()).then(|| {
            if leader_sampling.is_some() {
                "kernel"
            } else {
                "thread"
            }
            .to_string()
        });
        let mut counters = Vec::new();
        let mut failed = Vec::new();
        for o in opened {
            match o {
                Opened::Counter(c) => counters.push(*c),
                Opened::Failed {
                    spec,
                    status,
                    reason,
                } => failed.push((spec, status, reason)),
            }
        }
        #[cfg(feature = "papi")]
        let papi = match (&paused, cfg.backend) {
            (Some(p), CounterBackend::Papi) => {
                let mut c = super::papi::PapiCounters::open(
                    &papi_names,
                    super::papi::PapiTarget::Process(p.pid),
                );
                c.start();
                meta.notes.extend(c.notes().iter().cloned());
                meta.notes.push(format!(
                    "CPU events counted through PAPI {} (--backend papi)",
                    super::papi::version()
                ));
                Some(c)
            }
            _ => None,
        };
        // CPU PC sampling (command mode): opened on the paused child, enabled at its exec.
        let mut pc_info = None;
        use super::pc_sampler::SampleTarget;
        let pc_target = match (&target, &cfg.mode) {
            (Target::Child(pid), _) if *pid > 0 => Some(SampleTarget::Command(*pid)),
            (Target::Tasks(tids), Mode::Attach(pid)) => {
                Some(SampleTarget::Tasks { pid: *pid, tids })
            }
            (Target::Cpus(cpus), _) => Some(SampleTarget::Cpus(cpus)),
            _ => None,
        };
        let pc_reader = match (cfg.cpu_pc_sampling_hz, pc_target) {
            (None, _) => None,
            (Some(hz), Some(t)) => match super::pc_sampler::open(t, hz) {
                Ok(o) => {
                    let (reader, info) = super::pc_sampler::start(o);
                    meta.notes.extend(info.notes.iter().cloned());
                    pc_info = Some(info);
                    Some(reader)
                }
                Err((status, reason)) => {
                    meta.pc_sampling = Some(pc_not_taken(hz, status, reason));
                    None
                }
            },
            (Some(hz), None) => {
                meta.pc_sampling = Some(pc_not_taken(
                    hz,
                    EventStatus::NotSupported,
                    "--pc-sampling cpu: no command, process or CPU to sample".into(),
                ));
                None
            }
        };
        let mut columns: Vec<String> = counters.iter().map(|c| c.spec.name.clone()).collect();
        #[cfg(feature = "papi")]
        if let Some(p) = &papi {
            columns.extend(p.columns());
        }
        columns.extend(energy.domains.iter().map(|d| d.column.clone()));
        columns.extend(gpu.columns());
        let journal = match Journal::create(&cfg.out.join(JOURNAL), &columns) {
            Ok(j) => Some(j),
            Err(e) => {
                meta.notes.push(format!(
                    "no timeline journal (samples are kept in memory only until the end): {e:#}"
                ));
                None
            }
        };
        // run.toml again, now with the events whose columns the journal holds (no totals
        // yet): a powerperf killed from here on leaves a run whose totals `report` rebuilds
        // from the journal under the events' own names and units.
        {
            let mut provisional = meta.clone();
            provisional.events = counters
                .iter()
                .map(|c| EventRecord {
                    name: c.spec.name.clone(),
                    backend: Backend::PerfEvent,
                    status: EventStatus::Counted,
                    reason: None,
                    column: Some(c.spec.name.clone()),
                    total: None,
                    unit: c.spec.unit.clone(),
                    scale: Some(c.scale),
                    running_ratio: None,
                })
                .chain(energy.domains.iter().map(|d| EventRecord {
                    name: format!("energy-{}", d.name),
                    backend: Backend::Rapl,
                    status: EventStatus::Counted,
                    reason: None,
                    column: Some(d.column.clone()),
                    total: None,
                    unit: Some("J".into()),
                    scale: None,
                    running_ratio: None,
                }))
                .collect();
            if let Err(e) = provisional.write(&cfg.out) {
                tracing::debug!("run.toml with the events: {e:#}");
            }
        }
        // The timeline's rows stream to an unnamed file in the run directory; where none can
        // be made they stay in memory until the end (as the journal, they are then on disk
        // as well).
        let timeline = TimelineWriter::create(&cfg.out, &columns).unwrap_or_else(|e| {
            meta.notes.push(format!(
                "the timeline's rows are kept in memory until the end of the run: {e:#}"
            ));
            TimelineWriter::in_memory(&columns)
        });
        let mut sampler = Sampler {
            counters,
            #[cfg(feature = "papi")]
            papi,
            energy,
            gpu,
            timeline,
            journal,
            origin_ns: 0,
            last_ns: 0,
            kernel: None,
            drain_only: false,
            interval_ns: cfg.interval.as_nanos() as u64,
        };
        if let Some(ls) = leader_sampling {
            let k = KernelTimeline::new(ls.leaders, &sampler.counters);
            tracing::debug!(buffers = k.buffers(), "leader sampling");
            sampler.kernel = Some(k);
        }
        // Leader samples and nothing else: the thread wakes only to drain them.
        let drain_only = sampler.kernel.is_some() && !thread_sources;
        sampler.drain_only = drain_only;
        sampler.energy.sample();
        sampler.energy.totals_j.iter_mut().for_each(|t| *t = 0.0);
        sampler.gpu.sample(0);

        // Signals: forwarded to a command we started; otherwise they end the measurement.
        let stop = Arc::new(AtomicBool::new(false));
        let child_pid = paused.as_ref().map(|p| p.pid);
        let mut signals = signal_hook::iterator::Signals::new([
            libc::SIGINT,
            libc::SIGTERM,
            libc::SIGHUP,
            libc::SIGQUIT,
        ])
        .context("installing signal handlers")?;
        let sig_handle = signals.handle();
        let stop2 = stop.clone();
        let forwarder = std::thread::spawn(move || {
            for sig in signals.forever() {
                match child_pid {
                    // SAFETY: plain kill(2) on the child's pid.
                    Some(pid) => unsafe {
                        libc::kill(pid, sig);
                    },
                    None => stop2.store(true, Ordering::SeqCst),
                }
            }
        });

        // The run's origin (t = 0 of the timeline, the start of `duration_ns`) is taken just
        // before the command is let go, after the sources' first readings, so that the
        // command's wall-clock time does not include powerperf's own start-up.
        let origin = monotonic_ns();
        meta.run.start_monotonic_ns = origin;
        sampler.origin_ns = origin;
        sampler.last_ns = origin;
        let exec_result = paused.map(|p| (p.pid, p.go()));
        // The sampler thread sleeps to absolute deadlines origin + k * interval (no drift:
        // a late sample does not push the later ones back) and is woken early only to stop
        // (park/unpark: one futex wait per sample).
        let sampling_done = Arc::new(AtomicBool::new(false));
        let done = sampling_done.clone();
        let interval = if drain_only {
            LEADER_DRAIN.max(cfg.interval)
        } else {
            cfg.interval
        };
        let sampler_thread = std::thread::spawn(move || {
            let start = std::time::Instant::now();
            let mut k: u32 = 1;
            while !done.load(Ordering::Acquire) {
                if interval.is_zero() {
                    std::thread::park();
                    continue;
                }
                let deadline = start + interval * k;
                let now = std::time::Instant::now();
                if now < deadline {
                    std::thread::park_timeout(deadline - now);
                    continue;
                }
                if drain_only {
                    sampler.grid_rows(monotonic_ns());
                } else {
                    sampler.sample(false);
                }
                // The next deadline after `now`: deadlines missed (a stalled machine) are
                // skipped, not sampled in a burst.
                let passed = now.duration_since(start).as_nanos() / interval.as_nanos();
                k = passed as u32 + 1;
            }
            sampler.sample(true);
            sampler
        });
        let exit = match (&exec_result, &cfg.mode) {
            (Some((pid, _)), _) => Some(launcher::wait(*pid)),
            (None, Mode::Attach(pid)) => {
                while pid_alive(*pid) && !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                None
            }
            (None, _) => {
                while !stop.load(Ordering::SeqCst) {
                    std::thread::sleep(Duration::from_millis(20));
                }
                None
            }
        };
        let end = monotonic_ns();
        let pc_collected = pc_reader.map(|r| r.finish());
        sampling_done.store(true, Ordering::Release);
        sampler_thread.thread().unpark();
        let sampler = sampler_thread
            .join()
            .map_err(|_| anyhow::anyhow!("the sampler thread panicked"))?;
        sig_handle.close();
        let _ = forwarder.join();

        meta.run.duration_ns = end - origin;
        meta.run.self_cpu_ns = self_cpu_ns();
        meta.run.samples = sampler.timeline.rows();
        if let Some(k) = &sampler.kernel {
            if k.lost > 0 || k.unparsed > 0 {
                meta.notes.push(format!(
                    "leader sampling: the kernel dropped {} records on full ring buffers and {} could not be read ({} samples read); rows after a loss hold the lost counts later, the totals are exact",
                    k.lost, k.unparsed, k.samples
                ));
            }
        }
        match (&exec_result, exit) {
            (Some((_, Err(e))), _) => {
                meta.run.ended = Ending::NotStarted;
                meta.run.error = Some(format!("cannot run `{}`: {e}", cfg.command[0]));
                meta.run.exit_status = Some(if e.kind() == std::io::ErrorKind::PermissionDenied {
                    126
                } else {
                    127
                });
            }
            (_, Some(Ok(Exit::Code(c)))) => {
                meta.run.ended = Ending::Exited;
                meta.run.exit_status = Some(c);
            }
            (
                _,
                Some(Ok(Exit::Signal {
                    signal,
                    core_dumped,
                })),
            ) => {
                meta.run.ended = Ending::Signaled;
                meta.run.signal = Some(signal);
                meta.run.signal_name = Some(launcher::signal_name(signal));
                meta.run.core_dumped = core_dumped;
            }
            (_, Some(Err(e))) => {
                meta.run.ended = Ending::Unknown;
                meta.run.error = Some(format!("waitpid failed: {e}"));
            }
            (_, None) => {
                // Attach or system-wide without a command: the measurement ended normally.
                meta.run.ended = Ending::Exited;
                meta.run.exit_status = Some(0);
            }
        }

        // Event records, in the order the user asked for them.
        let mut timeline = sampler.timeline;
        for s in &specs {
            if let Some(c) = sampler.counters.iter().find(|c| c.spec.name == s.name) {
                let rec = record_for(c, s);
                if rec.column.is_none() {
                    timeline.remove(&s.name);
                }
                meta.events.push(rec);
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
                    unit: spec.unit.clone(),
                    scale: None,
                    running_ratio: None,
                });
            }
        }
        #[cfg(feature = "papi")]
        if let Some(p) = &sampler.papi {
            for rec in p.records() {
                if rec.column.is_none() {
                    timeline.remove(&rec.name);
                }
                meta.events.push(rec);
            }
        }
        if failed
            .iter()
            .any(|(s, _, _)| matches!(s.kind, events::EventKind::Hardware(_)))
            && sampler.counters.iter().any(|c| c.spec.name == "task-clock")
        {
            meta.notes.push("hardware counters are not available here; task-clock (software) is counted instead of cycles".into());
        }
        meta.threads = comms
            .iter()
            .map(|(tid, comm)| ThreadCounts {
                tid: *tid,
                comm: comm.clone(),
                counts: sampler
                    .counters
                    .iter()
                    .filter_map(|c| {
                        let k = c.slot_ids.iter().position(|s| s == tid)?;
                        Some((c.spec.name.clone(), c.slot_totals[k]?))
                    })
                    .collect(),
            })
            .collect();
        let energy = &sampler.energy;
        for (i, d) in energy.domains.iter().enumerate() {
            let total_j = energy.totals_j[i];
            let advanced = total_j > 0.0;
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
                        d.source,
                        meta.run.duration_ns as f64 * 1e-9
                    )
                }),
                column: advanced.then(|| d.column.clone()),
                total: advanced.then_some(total_j),
                unit: Some("J".into()),
                scale: None,
                running_ratio: None,
            });
        }
        for u in &energy.unreadable {
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
        for rec in sampler
            .gpu
            .records(meta.run.duration_ns, cfg.nvml == NvmlMode::On)
        {
            if rec.name.ends_with("-energy") && rec.column.is_none() {
                timeline.remove(&rec.name.replace("-energy", "_energy_j"));
            }
            meta.events.push(rec);
        }
        if !energy.domains.is_empty() {
            meta.notes
                .push(format!("RAPL read through the {}", energy.backend_name()));
        }

        let (journal_rows, journal_error) = match sampler.journal {
            Some(j) => j.finish(),
            None => (0, None),
        };
        let tl_path = cfg.out.join(TIMELINE);
        let samples = timeline.rows();
        match timeline.finish(&tl_path) {
            Ok(_) => {
                // The journal only matters while timeline.parquet does not exist.
                let _ = std::fs::remove_file(cfg.out.join(JOURNAL));
            }
            Err(e) => {
                // A half-written Parquet file has no footer: readers fall back to the journal.
                let _ = std::fs::remove_file(&tl_path);
                meta.run.truncated = true;
                meta.notes.push(format!(
                    "the timeline could not be written: {e:#}; {journal_rows} of {} samples are kept in {JOURNAL}{}",
                    samples,
                    journal_error
                        .as_deref()
                        .map(|j| format!(" (its writes stopped: {j})"))
                        .unwrap_or_default()
                ));
            }
        }
        // powerperf-rt writes region events in its binary form (v2: no formatting in the
        // program's threads); the run directory keeps them as text (v1), rt/README.md.
        if let Err(e) = powerperf_rt::events::convert_dir(&cfg.out) {
            meta.notes.push(format!(
                "region_events: a binary events file was kept as it is ({e}); powerperf reads it as well"
            ));
        }
        // Measured SM clock per GPU (NVML) while its kernels ran, for GSAMP:EXP of GPU PC
        // sampling: samples weighted by their overlap with the kernels' intervals
        // (CLOCK_MONOTONIC ns; a sample covers [t_ns - dur_ns, t_ns] after the origin).
        // The timeline is read back from the run directory one chunk at a time.
        let sm_clock = |dev: u32, kernels: &[(u64, u64)]| -> Option<f64> {
            let name = format!("gpu{dev}_sm_clock_mhz");
            let (mut w, mut sum, mut found) = (0.0, 0.0, false);
            let r = super::timeline::for_each_chunk(
                &cfg.out,
                Some(std::slice::from_ref(&name)),
                &mut |t| {
                    let Some((_, v)) = t.columns.iter().find(|(n, _)| *n == name) else {
                        return Ok(());
                    };
                    found = true;
                    for (i, x) in v.iter().enumerate() {
                        let Some(x) = x.filter(|x| *x > 0.0) else {
                            continue;
                        };
                        let end = origin + t.t_ns[i];
                        let start = end.saturating_sub(t.dur_ns[i]);
                        let o: u64 = kernels
                            .iter()
                            .map(|&(a, b)| b.min(end).saturating_sub(a.max(start)))
                            .sum();
                        w += o as f64;
                        sum += o as f64 * x;
                    }
                    Ok(())
                },
            );
            if let Err(e) = r {
                tracing::debug!("reading the timeline for the SM clock: {e:#}");
            }
            (found && w > 0.0).then(|| sum / w)
        };
        match super::gpu_activity::collect_run(&cfg.out, origin, &sm_clock) {
            Ok(Some(notes)) => meta.notes.extend(notes),
            Ok(None) if cfg.gpu || gpu_pc => meta.notes.push(
                "collect --gpu: no CUDA activity was recorded (the command did not use CUDA, or it did not load the injection library named by CUDA_INJECTION64_PATH)".into(),
            ),
            Ok(None) => {}
            Err(e) => {
                meta.run.truncated = true;
                meta.notes
                    .push(format!("gpu_activity.parquet could not be written: {e:#}"));
            }
        }
        if let (Some(info), Some(collected)) = (pc_info, pc_collected) {
            meta.pc_sampling = Some(write_pc_samples(&cfg.out, info, &collected, &mut meta));
        }
        let chunks = |f: &mut dyn FnMut(&super::timeline::Timeline) -> anyhow::Result<()>| {
            super::timeline::for_each_chunk(&cfg.out, None, f)
        };
        match super::attribution::write_regions_from(&cfg.out, &chunks, origin, rank) {
            Ok(Some((_, notes))) => meta.notes.extend(notes),
            Ok(None) => {}
            Err(e) => {
                meta.run.truncated = true;
                meta.notes
                    .push(format!("regions.parquet could not be written: {e:#}"));
            }
        }
        drop(reserve);
        meta.write(&cfg.out)?;
        let shell_status = meta.shell_status();
        Ok(Outcome { meta, shell_status })
    }
}
