//! The timeline's sampler: every source read into one row, by a thread that wakes every
//! interval (or, under leader sampling alone, only to drain the kernel's samples).

use super::super::devices::DeviceSampler;
use super::super::energy::Energy;
use super::super::leader_sampling::KernelTimeline;
use super::super::nvml::GpuSampler;
use powerperf_format::timeline::{Journal, TimelineWriter};
use powerperf_node::perf_event::{self, OpenCounter};
use powerperf_rt::now_ns;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Ring buffer per sampling leader (group × CPU): a sample of a group of n counters
/// takes 56 + 16·n bytes, so 128 KiB holds about 1,500 samples of 4 counters, 15 s of
/// one thread at 10 ms, far more than the 250 ms between drains.
pub(super) const LEADER_RING_BYTES: usize = 128 * 1024;
/// How often the buffers of leader sampling are drained into rows.
const LEADER_DRAIN: Duration = Duration::from_millis(250);

pub(super) struct Sampler {
    pub(super) counters: Vec<OpenCounter>,
    #[cfg(feature = "papi")]
    pub(super) papi: Option<super::super::papi::PapiCounters>,
    pub(super) energy: Energy,
    pub(super) gpu: GpuSampler,
    /// The sysfs power devices (amdgpu, xe, i915, hwmon).
    pub(super) devices: DeviceSampler,
    /// Rows stream to disk, at most `timeline::WRITE_BUFFER_ROWS` in memory (issue 18).
    pub(super) timeline: TimelineWriter,
    pub(super) journal: Option<Journal>,
    pub(super) origin_ns: u64,
    pub(super) last_ns: u64,
    /// Leader sampling: the counters' values come from the kernel's samples.
    pub(super) kernel: Option<KernelTimeline>,
    /// Leader samples are the only source: rows on the interval's grid.
    pub(super) drain_only: bool,
    pub(super) interval_ns: u64,
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
            self.grid_rows(now_ns());
        }
        let now = now_ns();
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
        vals.extend(self.devices.sample(now));
        self.push(now, &vals);
    }
}

/// The sampler thread, running: [`stop`](Self::stop) ends it and gives the sampler back.
pub(super) struct SamplerThread {
    handle: JoinHandle<Sampler>,
    done: Arc<AtomicBool>,
}

impl SamplerThread {
    /// Start sampling every `interval` (0: totals only) from the instant `start`, which
    /// should be the run's origin.
    ///
    /// The thread sleeps to absolute deadlines origin + k * interval (no drift: a late
    /// sample does not push the later ones back) and is woken early only to stop
    /// (park/unpark: one futex wait per sample).
    pub(super) fn spawn(mut sampler: Sampler, interval: Duration) -> Self {
        let sampling_done = Arc::new(AtomicBool::new(false));
        let done = sampling_done.clone();
        let drain_only = sampler.drain_only;
        let interval = if drain_only {
            LEADER_DRAIN.max(interval)
        } else {
            interval
        };
        let handle = std::thread::spawn(move || {
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
                    sampler.grid_rows(now_ns());
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
        SamplerThread {
            handle,
            done: sampling_done,
        }
    }

    /// Take the last row and give the sampler back.
    ///
    /// # Errors
    /// The sampler thread panicked.
    pub(super) fn stop(self) -> anyhow::Result<Sampler> {
        self.done.store(true, Ordering::Release);
        self.handle.thread().unpark();
        self.handle
            .join()
            .map_err(|_| anyhow::anyhow!("the sampler thread panicked"))
    }
}
