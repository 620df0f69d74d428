//! Phase "open sources": what is measured (the command, a process's threads or CPUs) and
//! the sources that measure it: perf_event counters (with leader sampling where it fits),
//! PAPI, RAPL, NVML, CPU PC sampling, and the timeline with its journal.

use super::super::devices::DeviceSampler;
use super::super::energy::Energy;
use super::super::gpm::GpmSampler;
use super::super::launcher::Paused;
use super::super::leader_sampling::KernelTimeline;
use super::super::nvml::GpuSampler;
use super::super::pc_sampler::{self, OpenedInfo, Reader, SampleTarget};
#[cfg(feature = "papi")]
use super::super::CounterBackend;
use super::super::{Mode, NvmlMode, TimelineSampler};
use super::sampler::{Sampler, LEADER_RING_BYTES};
use super::Session;
use anyhow::{Context, Result};
use powerperf_format::run::{Backend, EventRecord, PcSampling};
use powerperf_format::timeline::{Journal, TimelineWriter, JOURNAL};
use powerperf_node::event_spec::EventStatus;
use powerperf_node::event_spec::{self, EventSpec};
use powerperf_node::perf_event::{self, LeaderSampling, OpenCounter, Opened, Target};

/// An event that could not be opened: its spec, status and reason.
pub(super) type FailedEvent = (EventSpec, EventStatus, String);

/// The sources, open (the counters of a paused command count from its exec).
pub(super) struct Sources {
    /// The command, stopped before exec.
    pub(super) paused: Option<Paused>,
    /// Thread names of `--per-thread`, read at the start: threads may be gone by the end.
    pub(super) comms: Vec<(i32, String)>,
    pub(super) failed: Vec<FailedEvent>,
    pub(super) sampler: Sampler,
    /// CPU PC sampling: its reader thread and how the samples are taken.
    pub(super) pc: Option<(Reader, OpenedInfo)>,
}

/// The counters opened: those counting, those that failed, and leader sampling when the
/// kernel reads them.
struct Counters {
    counters: Vec<OpenCounter>,
    failed: Vec<FailedEvent>,
    leader_sampling: Option<LeaderSampling>,
}

impl Session<'_> {
    /// Open every source on the target: the paused command, the process of `-p` or the CPUs
    /// of `-a`/`-C`; the first readings of RAPL and NVML are taken.
    ///
    /// # Errors
    /// A process to attach to that does not exist.
    pub(super) fn open_sources(&mut self, paused: Option<Paused>) -> Result<Sources> {
        let cfg = self.cfg;
        let target = match &cfg.mode {
            Mode::Command => Target::Child(paused.as_ref().map(|p| p.pid).unwrap_or(0)),
            Mode::Attach(pid) => Target::Tasks(
                perf_event::threads_of(*pid)
                    .with_context(|| format!("no process {pid} to attach to"))?,
            ),
            Mode::SystemWide(cpus) => Target::Cpus(cpus.clone()),
        };
        let comms = self.thread_names(&target);
        let (energy, gpu, devices) = self.open_node_sources();
        // Leader sampling (the kernel reads the counters in the command's context) where
        // asked for, or by default where counters are the timeline's only sources.
        #[cfg(feature = "papi")]
        let papi_used = cfg.backend == CounterBackend::Papi;
        #[cfg(not(feature = "papi"))]
        let papi_used = false;
        let thread_sources = !energy.domains.is_empty()
            || gpu.unavailable.is_none()
            || devices.count() > 0
            || papi_used;
        let Counters {
            counters,
            failed,
            leader_sampling,
        } = self.open_counters(&target, thread_sources);
        #[cfg(feature = "papi")]
        let papi = self.open_papi(paused.as_ref());
        // CPU PC sampling (command mode): opened on the paused child, enabled at its exec.
        let pc = self.open_pc_sampler(&target);
        let mut columns: Vec<String> = counters.iter().map(|c| c.spec.name.clone()).collect();
        #[cfg(feature = "papi")]
        if let Some(p) = &papi {
            columns.extend(p.columns());
        }
        columns.extend(energy.domains.iter().map(|d| d.column.clone()));
        columns.extend(gpu.columns());
        columns.extend(devices.columns());
        let (journal, timeline) = self.open_timeline(&columns, &counters, &energy, &devices);
        let mut sampler = Sampler {
            counters,
            #[cfg(feature = "papi")]
            papi,
            energy,
            gpu,
            devices,
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
        sampler.drain_only = sampler.kernel.is_some() && !thread_sources;
        sampler.energy.sample();
        sampler.energy.totals_j.iter_mut().for_each(|t| *t = 0.0);
        sampler.gpu.sample(0);
        sampler.devices.start(powerperf_rt::now_ns());
        tracing::debug!(
            counters = sampler.counters.len(),
            failed = failed.len(),
            rapl_domains = sampler.energy.domains.len(),
            gpus = sampler.gpu.count(),
            power_devices = sampler.devices.count(),
            columns = columns.len(),
            pc_sampling = pc.is_some(),
            sampler = ?self.meta.run.timeline_sampler,
            "collect: sources opened"
        );
        Ok(Sources {
            paused,
            comms,
            failed,
            sampler,
            pc,
        })
    }

    /// Thread names for `--per-thread`, read now: threads may be gone by the end.
    fn thread_names(&self, target: &Target) -> Vec<(i32, String)> {
        match (target, &self.cfg.mode) {
            (Target::Tasks(tids), Mode::Attach(pid)) if self.cfg.per_thread => tids
                .iter()
                .map(|t| {
                    let comm = std::fs::read_to_string(format!("/proc/{pid}/task/{t}/comm"))
                        .map(|s| s.trim().to_string())
                        .unwrap_or_default();
                    (*t, comm)
                })
                .collect(),
            _ => vec![],
        }
    }

    /// The node-wide sources, RAPL, NVML and the sysfs power devices (the first rank on
    /// each node only), with their notes.
    fn open_node_sources(&mut self) -> (Energy, GpuSampler, DeviceSampler) {
        let cfg = self.cfg;
        let meta = &mut self.meta;
        // run.toml's `local_rank` and `node_sources` say the same (session/mod.rs).
        let local = meta.run.local_rank;
        let energy = match local {
            Some(l) if l > 0 => Energy::none(format!(
                "node-wide sources (RAPL) are sampled by the first rank on each node (local rank 0, whose shard holds them); this is local rank {l}"
            )),
            _ => Energy::open(&cfg.sysfs_root),
        };
        meta.notes.extend(energy.notes.iter().cloned());
        let gpu = match (cfg.nvml, local) {
            (NvmlMode::Off, _) => GpuSampler::none("NVML sampling turned off (--nvml off)"),
            (_, Some(l)) if l > 0 => GpuSampler::none(format!(
                "node-wide sources (NVML) are sampled by the first rank on each node (local rank 0, whose shard holds them); this is local rank {l}"
            )),
            _ => match &cfg.fake_gpu {
                Some(dir) => match powerperf_node::fake_gpu::FileGpus::open(dir) {
                    Ok(f) => {
                        meta.notes.push(format!(
                            "GPU readings from the fake GPUs under {} (--fake-gpu), not from NVML",
                            dir.display()
                        ));
                        GpuSampler::new(Box::new(f))
                    }
                    Err(e) => GpuSampler::none(format!("--fake-gpu {}: {e}", dir.display())),
                },
                None => match powerperf_node::nvml::open_nvml() {
                    Ok(src) => {
                        let gpm = match cfg.gpm {
                            NvmlMode::Off => {
                                GpmSampler::none("GPM sampling turned off (--gpm off)")
                            }
                            _ => match super::super::gpm::open_gpm() {
                                Ok(g) => GpmSampler::new(g),
                                Err(why) => GpmSampler::none(why),
                            },
                        };
                        GpuSampler::new(src).with_gpm(gpm)
                    }
                    Err(why) => GpuSampler::none(why),
                },
            },
        };
        meta.notes.extend(gpu.notes.iter().cloned());
        if let (Some(why), NvmlMode::Auto) = (&gpu.unavailable, cfg.nvml) {
            meta.notes.push(format!("no GPU sampling: {why}"));
        }
        let devices = match local {
            Some(l) if l > 0 => DeviceSampler::none(format!(
                "node-wide sources (sysfs power devices) are sampled by the first rank on each node (local rank 0, whose shard holds them); this is local rank {l}"
            )),
            _ => open_devices(&cfg.sysfs_root),
        };
        meta.notes.extend(devices.notes.iter().cloned());
        (energy, gpu, devices)
    }

    /// The perf_event counters, under leader sampling where it is asked for (or, by
    /// default, where `thread_sources` is false) and possible; the timeline's sampler goes
    /// into run.toml.
    fn open_counters(&mut self, target: &Target, thread_sources: bool) -> Counters {
        let cfg = self.cfg;
        let specs = &self.specs;
        let meta = &mut self.meta;
        let want_kernel = match cfg.sampler {
            TimelineSampler::Thread => false,
            TimelineSampler::Kernel => true,
            TimelineSampler::Auto => !thread_sources,
        } && !cfg.interval.is_zero()
            && !specs.is_empty();
        let mut leader_sampling = match (target, &cfg.mode) {
            (Target::Child(pid), Mode::Command) if want_kernel && *pid > 0 => {
                Some(LeaderSampling {
                    pid: *pid,
                    cpus: pc_sampler::online_cpu_list(),
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
            perf_event::open_all_with(specs, target, &cfg.sysfs_root, leader_sampling.as_mut());
        // Counts under leader sampling cannot be scaled for multiplexing (docs/overhead.md):
        // auto takes it for software events only, which the kernel never multiplexes.
        let multiplexable: Vec<&str> = opened
            .iter()
            .filter_map(|o| match o {
                Opened::Counter(c)
                    if !matches!(c.spec.kind, event_spec::EventKind::Software(_)) =>
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
            opened = perf_event::open_all(specs, target, &cfg.sysfs_root);
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
        Counters {
            counters,
            failed,
            leader_sampling,
        }
    }

    /// PAPI's event set on the paused command (`--backend papi`), started.
    #[cfg(feature = "papi")]
    fn open_papi(&mut self, paused: Option<&Paused>) -> Option<super::super::papi::PapiCounters> {
        use super::super::papi;
        match (paused, self.cfg.backend) {
            (Some(p), CounterBackend::Papi) => {
                let mut c =
                    papi::PapiCounters::open(&self.papi_names, papi::PapiTarget::Process(p.pid));
                c.start();
                self.meta.notes.extend(c.notes().iter().cloned());
                self.meta.notes.push(format!(
                    "CPU events counted through PAPI {} (--backend papi)",
                    papi::version()
                ));
                Some(c)
            }
            _ => None,
        }
    }

    /// CPU PC sampling (`--pc-sampling cpu`), started; where it cannot be, run.toml's
    /// `[pc_sampling]` says why.
    fn open_pc_sampler(&mut self, target: &Target) -> Option<(Reader, OpenedInfo)> {
        let pc_target = match (target, &self.cfg.mode) {
            (Target::Child(pid), _) if *pid > 0 => Some(SampleTarget::Command(*pid)),
            (Target::Tasks(tids), Mode::Attach(pid)) => {
                Some(SampleTarget::Tasks { pid: *pid, tids })
            }
            (Target::Cpus(cpus), _) => Some(SampleTarget::Cpus(cpus)),
            _ => None,
        };
        match (self.cfg.cpu_pc_sampling_hz, pc_target) {
            (None, _) => None,
            (Some(hz), Some(t)) => match pc_sampler::open(t, hz) {
                Ok(o) => {
                    let (reader, info) = pc_sampler::start(o);
                    self.meta.notes.extend(info.notes.iter().cloned());
                    Some((reader, info))
                }
                Err((status, reason)) => {
                    self.meta.pc_sampling = Some(pc_not_taken(hz, status, reason));
                    None
                }
            },
            (Some(hz), None) => {
                self.meta.pc_sampling = Some(pc_not_taken(
                    hz,
                    EventStatus::NotSupported,
                    "--pc-sampling cpu: no command, process or CPU to sample".into(),
                ));
                None
            }
        }
    }

    /// The timeline's journal and writer for these columns, with run.toml written again
    /// with the events whose columns the journal holds.
    fn open_timeline(
        &mut self,
        columns: &[String],
        counters: &[OpenCounter],
        energy: &Energy,
        devices: &DeviceSampler,
    ) -> (Option<Journal>, TimelineWriter) {
        let out = &self.cfg.out;
        let journal = match Journal::create(&out.join(JOURNAL), columns) {
            Ok(j) => Some(j),
            Err(e) => {
                self.meta.notes.push(format!(
                    "no timeline journal (samples are kept in memory only until the end): {e:#}"
                ));
                None
            }
        };
        // run.toml again, now with the events whose columns the journal holds (no totals
        // yet): a powerperf killed from here on leaves a run whose totals `report` rebuilds
        // from the journal under the events' own names and units.
        let mut provisional = self.meta.clone();
        provisional.events = provisional_events(counters, energy);
        provisional.events.extend(devices.provisional_records());
        provisional.power_devices = devices.device_records(0);
        if let Err(e) = provisional.write(out) {
            tracing::debug!("run.toml with the events: {e:#}");
        }
        // The timeline's rows stream to an unnamed file in the run directory; where none can
        // be made they stay in memory until the end (as the journal, they are then on disk
        // as well).
        let timeline = TimelineWriter::create(out, columns).unwrap_or_else(|e| {
            self.meta.notes.push(format!(
                "the timeline's rows are kept in memory until the end of the run: {e:#}"
            ));
            TimelineWriter::in_memory(columns)
        });
        (journal, timeline)
    }
}

/// The event records of the provisional run.toml: counters and RAPL domains, no totals.
fn provisional_events(counters: &[OpenCounter], energy: &Energy) -> Vec<EventRecord> {
    counters
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
        .collect()
}

/// The power devices under `root` ([`powerperf_node::devices::discover_with`]) but RAPL's
/// and NVML's, which [`Energy`] and [`GpuSampler`] sample (NVML is not opened a second time,
/// nor powerperfd asked: the listing's access column is not used here); files found but
/// unreadable become notes.
fn open_devices(root: &std::path::Path) -> DeviceSampler {
    let found = powerperf_node::devices::discover_with(
        root,
        powerperf_node::devices::DiscoverOptions {
            nvml: false,
            probe_daemon: false,
        },
    );
    let mut s = DeviceSampler::new(
        found.devices,
        &[
            powerperf_node::devices::Origin::Rapl,
            powerperf_node::devices::Origin::Nvml,
        ],
    );
    s.notes.extend(
        found
            .problems
            .into_iter()
            .map(|p| format!("power device not sampled: {p}")),
    );
    s
}

/// `[pc_sampling]` of a CPU PC sampling that could not be started.
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
