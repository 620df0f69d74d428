//! Phase "finish": how the command ended, the event records and their totals, the timeline
//! written, the optional outputs ([`super::outputs`]) and the final `run.toml`.

use super::super::devices::DeviceSampler;
use super::super::energy::Energy;
use super::super::launcher::{self, Exit};
use super::super::nvml::GpuSampler;
use super::super::{NvmlMode, Outcome};
use super::launch::Sampled;
use super::outputs::{self, FinishCtx};
use super::sources::FailedEvent;
use super::Session;
use anyhow::Result;
use powerperf_format::run::{Backend, Ending, EventRecord, ThreadCounts};
use powerperf_format::timeline::TIMELINE;
use powerperf_format::timeline::{Journal, TimelineWriter, JOURNAL};
use powerperf_node::event_spec::EventStatus;
use powerperf_node::event_spec::{self, EventSpec};
use powerperf_node::perf_event::{self, OpenCounter};

impl Session<'_> {
    /// Record how the measurement ended and its totals, write the timeline and the optional
    /// outputs, then the final `run.toml`.
    ///
    /// # Errors
    /// The final `run.toml` cannot be written.
    pub(super) fn finish(mut self, sampled: Sampled) -> Result<Outcome> {
        let Sampled {
            exec_result,
            exit,
            sampler,
            comms,
            failed,
            pc,
            origin_ns,
        } = sampled;
        if let Some(k) = &sampler.kernel {
            if k.lost > 0 || k.unparsed > 0 {
                self.meta.notes.push(format!(
                    "leader sampling: the kernel dropped {} records on full ring buffers and {} could not be read ({} samples read); rows after a loss hold the lost counts later, the totals are exact",
                    k.lost, k.unparsed, k.samples
                ));
            }
        }
        self.record_ending(exec_result, exit);
        // Event records, in the order the user asked for them.
        let mut timeline = sampler.timeline;
        self.record_counters(&mut timeline, &sampler.counters, &failed);
        #[cfg(feature = "papi")]
        if let Some(p) = &sampler.papi {
            for rec in p.records() {
                if rec.column.is_none() {
                    timeline.remove(&rec.name);
                }
                self.meta.events.push(rec);
            }
        }
        if failed
            .iter()
            .any(|(s, _, _)| matches!(s.kind, event_spec::EventKind::Hardware(_)))
            && sampler.counters.iter().any(|c| c.spec.name == "task-clock")
        {
            self.meta.notes.push("hardware counters are not available here; task-clock (software) is counted instead of cycles".into());
        }
        self.meta.threads = thread_counts(&comms, &sampler.counters);
        self.record_energy(&mut timeline, &sampler.energy, &sampler.gpu);
        self.record_devices(&mut timeline, &sampler.devices);
        self.write_timeline(timeline, sampler.journal);
        let ctx = FinishCtx {
            out: &self.cfg.out,
            origin_ns,
            rank: self.rank,
            gpu_requested: self.cfg.gpu || self.gpu_pc,
        };
        let mut outs = outputs::run_outputs(pc);
        outputs::write_all(&mut outs, &ctx, &mut self.meta);
        drop(self.reserve);
        self.meta.write(&self.cfg.out)?;
        tracing::debug!(ended = ?self.meta.run.ended, notes = self.meta.notes.len(), "collect: run.toml written");
        let shell_status = self.meta.shell_status();
        Ok(Outcome {
            meta: self.meta,
            shell_status,
        })
    }

    /// `ended`, the exit status or signal, and the error of a command that did not start.
    fn record_ending(
        &mut self,
        exec_result: Option<(i32, std::io::Result<()>)>,
        exit: Option<std::io::Result<Exit>>,
    ) {
        let run = &mut self.meta.run;
        match (&exec_result, exit) {
            (Some((_, Err(e))), _) => {
                run.ended = Ending::NotStarted;
                run.error = Some(format!("cannot run `{}`: {e}", self.cfg.command[0]));
                run.exit_status = Some(if e.kind() == std::io::ErrorKind::PermissionDenied {
                    126
                } else {
                    127
                });
            }
            (_, Some(Ok(Exit::Code(c)))) => {
                run.ended = Ending::Exited;
                run.exit_status = Some(c);
            }
            (
                _,
                Some(Ok(Exit::Signal {
                    signal,
                    core_dumped,
                })),
            ) => {
                run.ended = Ending::Signaled;
                run.signal = Some(signal);
                run.signal_name = Some(launcher::signal_name(signal));
                run.core_dumped = core_dumped;
            }
            (_, Some(Err(e))) => {
                run.ended = Ending::Unknown;
                run.error = Some(format!("waitpid failed: {e}"));
            }
            (_, None) => {
                // Attach or system-wide without a command: the measurement ended normally.
                run.ended = Ending::Exited;
                run.exit_status = Some(0);
            }
        }
    }

    /// The perf_event events' records, in the order the user asked for them; the columns
    /// of events not counted leave the timeline.
    fn record_counters(
        &mut self,
        timeline: &mut TimelineWriter,
        counters: &[OpenCounter],
        failed: &[FailedEvent],
    ) {
        for s in &self.specs {
            if let Some(c) = counters.iter().find(|c| c.spec.name == s.name) {
                let rec = record_for(c, s);
                if rec.column.is_none() {
                    timeline.remove(&s.name);
                }
                self.meta.events.push(rec);
            } else if let Some((spec, status, reason)) =
                failed.iter().find(|(f, _, _)| f.name == s.name)
            {
                self.meta.events.push(EventRecord {
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
    }

    /// The records of RAPL domains (read or not) and NVML's; the columns of sources that
    /// did not advance leave the timeline.
    fn record_energy(&mut self, timeline: &mut TimelineWriter, energy: &Energy, gpu: &GpuSampler) {
        let meta = &mut self.meta;
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
        meta.notes.extend(gpu.gpm.notes());
        if let Some((us, n)) = gpu.gpm_cost_us() {
            meta.notes.push(format!(
                "GPM sampling (nvmlGpmSampleGet + nvmlGpmMetricsGet, every GPU, at most every {} ms): {us:.1} µs per sample on average over {n} samples, on the sampler thread", super::super::gpm::MIN_WINDOW.as_millis()
            ));
        }
        // GPM: each metric counted, or not supported with the reason (a GPU without GPM);
        // a missing NVML is said once, with --gpm on.
        for rec in gpu.gpm.records(self.cfg.gpm == NvmlMode::On) {
            if rec.status != EventStatus::Counted {
                // a metric this GPU never gave: no column of nulls
                timeline.remove(&rec.name.replacen('-', "_", 1));
            }
            meta.events.push(rec);
        }
        for rec in gpu.records(meta.run.duration_ns, self.cfg.nvml == NvmlMode::On) {
            if rec.name.ends_with("-energy") && rec.column.is_none() {
                timeline.remove(&rec.name.replace("-energy", "_energy_j"));
            }
            meta.events.push(rec);
        }
        if !energy.domains.is_empty() {
            meta.notes
                .push(format!("RAPL read through the {}", energy.backend_name()));
        }
    }

    /// The sysfs power devices' records (`<stem>-energy`, J) and `[[power_devices]]`; the
    /// energy column of a device that gave none leaves the timeline.
    fn record_devices(&mut self, timeline: &mut TimelineWriter, devices: &DeviceSampler) {
        let duration_ns = self.meta.run.duration_ns;
        for rec in devices.records(duration_ns) {
            if rec.column.is_none() {
                timeline.remove(&rec.name.replace("-energy", "_energy_j"));
            }
            self.meta.events.push(rec);
        }
        self.meta.power_devices = devices.device_records(duration_ns);
        self.meta.notes.extend(devices.end_notes());
    }

    /// `timeline.parquet`, then the journal removed; where the timeline cannot be written
    /// the journal stays and the run is truncated.
    fn write_timeline(&mut self, timeline: TimelineWriter, journal: Option<Journal>) {
        let out = &self.cfg.out;
        let (journal_rows, journal_error) = match journal {
            Some(j) => j.finish(),
            None => (0, None),
        };
        let tl_path = out.join(TIMELINE);
        let samples = timeline.rows();
        match timeline.finish(&tl_path) {
            Ok(_) => {
                // The journal only matters while timeline.parquet does not exist.
                let _ = std::fs::remove_file(out.join(JOURNAL));
                tracing::debug!(samples, "collect: timeline written");
            }
            Err(e) => {
                // A half-written Parquet file has no footer: readers fall back to the journal.
                let _ = std::fs::remove_file(&tl_path);
                self.meta.run.truncated = true;
                self.meta.notes.push(format!(
                    "the timeline could not be written: {e:#}; {journal_rows} of {} samples are kept in {JOURNAL}{}",
                    samples,
                    journal_error
                        .as_deref()
                        .map(|j| format!(" (its writes stopped: {j})"))
                        .unwrap_or_default()
                ));
            }
        }
    }
}

/// `[[threads]]` of `--per-thread`: each thread's totals.
fn thread_counts(comms: &[(i32, String)], counters: &[OpenCounter]) -> Vec<ThreadCounts> {
    comms
        .iter()
        .map(|(tid, comm)| ThreadCounts {
            tid: *tid,
            comm: comm.clone(),
            counts: counters
                .iter()
                .filter_map(|c| {
                    let k = c.slot_ids.iter().position(|s| s == tid)?;
                    Some((c.spec.name.clone(), c.slot_totals[k]?))
                })
                .collect(),
        })
        .collect()
}

/// The record of one perf_event counter: its total, status and unit.
fn record_for(c: &OpenCounter, s: &EventSpec) -> EventRecord {
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
