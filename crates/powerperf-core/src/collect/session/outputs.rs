//! The optional outputs of a run, written once the timeline is: region events as text,
//! GPU activity (with GPU PC samples), CPU PC samples and regions. Each is a [`RunOutput`]:
//! it writes its file, then adds its notes; one that fails marks the run truncated.

use super::super::pc_sampler::{self, Collected, OpenedInfo};
use super::super::{attribution, gpu_activity};
use anyhow::Result;
use powerperf_format::run::{Backend, PcSampling, RunMeta};
use powerperf_format::timeline;
use powerperf_node::event_spec::EventStatus;
use std::path::Path;

/// What the outputs of a run are written from.
pub(super) struct FinishCtx<'a> {
    /// The run directory, with `timeline.parquet` written.
    pub(super) out: &'a Path,
    /// t = 0 of the timeline, CLOCK_MONOTONIC ns.
    pub(super) origin_ns: u64,
    /// The global MPI rank, if any.
    pub(super) rank: Option<u32>,
    /// CUDA activity was asked for (`--gpu` or `--pc-sampling gpu`).
    pub(super) gpu_requested: bool,
}

/// One optional output of a run: write, then add notes.
pub(super) trait RunOutput {
    /// The file written, as run.toml's notes name it.
    fn name(&self) -> &str;
    /// Write the output into the run directory, adding notes for run.toml to `notes`.
    ///
    /// # Errors
    /// The output could not be written: the run is marked truncated and the note says so.
    fn write(&mut self, ctx: &FinishCtx, notes: &mut Vec<String>) -> Result<()>;
    /// What run.toml records of this output beyond notes, once it is written (or not).
    fn record(&mut self, _meta: &mut RunMeta) {}
}

/// The outputs of a run, in the order they are written; `pc` is CPU PC sampling's, if it
/// was taken.
pub(super) fn run_outputs(pc: Option<(OpenedInfo, Collected)>) -> Vec<Box<dyn RunOutput>> {
    let mut outs: Vec<Box<dyn RunOutput>> =
        vec![Box::new(RegionEvents), Box::new(GpuActivity(None))];
    if let Some((info, collected)) = pc {
        outs.push(Box::new(CpuPcSamples::new(info, collected)));
    }
    outs.push(Box::new(Regions));
    outs
}

/// Write every output in turn into `meta`'s notes; one that fails marks the run truncated.
pub(super) fn write_all(outs: &mut [Box<dyn RunOutput>], ctx: &FinishCtx, meta: &mut RunMeta) {
    for o in outs.iter_mut() {
        match o.write(ctx, &mut meta.notes) {
            Ok(()) => tracing::debug!(output = o.name(), "collect: output done"),
            Err(e) => {
                meta.run.truncated = true;
                meta.notes
                    .push(format!("{} could not be written: {e:#}", o.name()));
            }
        }
        o.record(meta);
    }
}

/// `region_events/`: powerperf-rt writes region events in its binary form (v2: no
/// formatting in the program's threads); the run directory keeps them as text (v1),
/// rt/README.md. A file that cannot be converted is kept as it is, with a note.
struct RegionEvents;

impl RunOutput for RegionEvents {
    fn name(&self) -> &str {
        "region_events"
    }

    fn write(&mut self, ctx: &FinishCtx, notes: &mut Vec<String>) -> Result<()> {
        if let Err(e) = powerperf_rt::events::convert_dir(ctx.out) {
            notes.push(format!(
                "region_events: a binary events file was kept as it is ({e}); powerperf reads it as well"
            ));
        }
        Ok(())
    }
}

/// `gpu_activity.parquet` and `gpu_api.parquet` (and GPU PC samples) from the CUDA
/// injection's recordings.
struct GpuActivity(Option<gpu_activity::GpuAttribution>);

impl RunOutput for GpuActivity {
    fn name(&self) -> &str {
        "gpu_activity.parquet"
    }

    fn write(&mut self, ctx: &FinishCtx, notes: &mut Vec<String>) -> Result<()> {
        let sm_clock = |dev: u32, kernels: &[(u64, u64)]| sm_clock_mhz(ctx, dev, kernels);
        match gpu_activity::write_gpu_activity_attributed(ctx.out, ctx.origin_ns, &sm_clock)? {
            Some((n, a)) => {
                notes.extend(n);
                self.0 = Some(a);
            }
            None if ctx.gpu_requested => notes.push(
                "collect --gpu: no CUDA activity was recorded (the command did not use CUDA, or it did not load the injection library named by CUDA_INJECTION64_PATH)".into(),
            ),
            None => {}
        }
        Ok(())
    }

    fn record(&mut self, meta: &mut RunMeta) {
        meta.gpu_attribution = self.0.take();
    }
}

/// Measured SM clock of GPU `dev` (NVML) while its kernels ran, for GSAMP:EXP of GPU PC
/// sampling: samples weighted by their overlap with the kernels' intervals
/// (CLOCK_MONOTONIC ns; a sample covers [t_ns - dur_ns, t_ns] after the origin).
/// The timeline is read back from the run directory one chunk at a time.
fn sm_clock_mhz(ctx: &FinishCtx, dev: u32, kernels: &[(u64, u64)]) -> Option<f64> {
    let name = format!("gpu{dev}_sm_clock_mhz");
    let origin = ctx.origin_ns;
    let (mut w, mut sum, mut found) = (0.0, 0.0, false);
    let r = timeline::for_each_chunk(ctx.out, Some(std::slice::from_ref(&name)), &mut |t| {
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
    });
    if let Err(e) = r {
        tracing::debug!("reading the timeline for the SM clock: {e:#}");
    }
    (found && w > 0.0).then(|| sum / w)
}

/// `pc_samples.parquet` of CPU PC sampling, and run.toml's `[pc_sampling]` saying how the
/// samples were taken.
struct CpuPcSamples {
    collected: Collected,
    rec: PcSampling,
}

impl CpuPcSamples {
    fn new(info: OpenedInfo, collected: Collected) -> Self {
        let rec = PcSampling {
            device: "cpu".into(),
            backend: Backend::PerfEvent,
            event: info.event.clone(),
            status: EventStatus::Counted,
            reason: None,
            frequency_hz: info.frequency_hz,
            period_unit: Some(info.period_unit.clone()),
            user_only: info.user_only,
            samples: collected.samples,
            lost: collected.lost,
            throttled: collected.throttled,
            unknown_samples: 0,
            rows: 0,
        };
        CpuPcSamples { collected, rec }
    }
}

impl RunOutput for CpuPcSamples {
    fn name(&self) -> &str {
        "pc_samples.parquet"
    }

    fn write(&mut self, ctx: &FinishCtx, notes: &mut Vec<String>) -> Result<()> {
        let c = &self.collected;
        if c.lost > 0 {
            notes.push(format!(
                "pc sampling: the kernel dropped {} record(s) because a ring buffer was full (PERF_RECORD_LOST); lower --sample-freq",
                c.lost
            ));
        }
        if c.throttled > 0 {
            notes.push(format!(
                "pc sampling: the kernel throttled the sampling rate {} time(s) (kernel.perf_cpu_time_max_percent); fewer samples than --sample-freq asks for",
                c.throttled
            ));
        }
        if c.unparsed > 0 {
            notes.push(format!(
                "pc sampling: {} record(s) could not be parsed and were skipped",
                c.unparsed
            ));
        }
        if c.samples == 0 {
            self.rec.status = EventStatus::NotCounted;
            self.rec.reason = Some("no samples: the command ran for less than one sampling period, or never ran on a CPU".into());
        }
        let w = pc_sampler::write(ctx.out, c)?;
        self.rec.rows = w.rows as u64;
        self.rec.unknown_samples = w.unknown_samples;
        notes.extend(w.notes);
        Ok(())
    }

    fn record(&mut self, meta: &mut RunMeta) {
        meta.pc_sampling = Some(self.rec.clone());
    }
}

/// `regions.parquet`: the regions of `region_events/` with their share of the timeline.
struct Regions;

impl RunOutput for Regions {
    fn name(&self) -> &str {
        "regions.parquet"
    }

    fn write(&mut self, ctx: &FinishCtx, notes: &mut Vec<String>) -> Result<()> {
        let chunks = |f: &mut dyn FnMut(&timeline::Timeline) -> Result<()>| {
            timeline::for_each_chunk(ctx.out, None, f)
        };
        if let Some((_, n)) =
            attribution::write_regions_from(ctx.out, &chunks, ctx.origin_ns, ctx.rank)?
        {
            notes.extend(n);
        }
        Ok(())
    }
}
