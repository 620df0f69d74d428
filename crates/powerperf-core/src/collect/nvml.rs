//! The GPU sampler of `collect`: every GPU of a [`GpuSource`] (NVML, or the fake GPU of
//! tests) sampled every `--interval` into the timeline (`gpu<i>_power_w`, `gpu<i>_energy_j`,
//! …; docs/run-format.md), and the run's event records. The NVML reader itself is
//! [`powerperf_node::nvml`].

use powerperf_format::run::{Backend, EventRecord};
use powerperf_node::event_spec::EventStatus;
use powerperf_node::nvml::GpuSource;

/// The quantities sampled per GPU, as (column suffix, unit).
const FIELDS: [(&str, &str); 8] = [
    ("power_w", "W"),
    ("energy_j", "J"),
    ("sm_clock_mhz", "MHz"),
    ("mem_clock_mhz", "MHz"),
    ("util_pct", "%"),
    ("mem_util_pct", "%"),
    ("temp_c", "C"),
    ("throttle_reasons", "mask"),
];

/// Samples every GPU of a [`GpuSource`] into timeline columns.
pub struct GpuSampler {
    source: Option<Box<dyn GpuSource>>,
    /// Why there is no source, when there is none.
    pub unavailable: Option<String>,
    last_energy_mj: Vec<Option<u64>>,
    last_power_w: Vec<Option<f64>>,
    /// Energy per GPU since the first sample, J (from the energy counter).
    pub energy_j: Vec<f64>,
    /// ∫ power dt per GPU since the first sample, J (a cross-check of the counter).
    pub power_integral_j: Vec<f64>,
    /// Notes for run.toml (which power field each GPU offers).
    pub notes: Vec<String>,
    /// The GPM performance metrics (Hopper and newer), sampled with the rest
    /// ([`super::gpm`]); none until [`GpuSampler::with_gpm`].
    pub gpm: super::gpm::GpmSampler,
}

impl GpuSampler {
    /// A sampler over `source`.
    pub fn new(source: Box<dyn GpuSource>) -> Self {
        let n = source.count() as usize;
        let notes = (0..source.count())
            .map(|i| {
                format!(
                    "gpu{i} ({}): power from {}, energy from nvmlDeviceGetTotalEnergyConsumption",
                    source.name(i),
                    source.power_source(i)
                )
            })
            .collect();
        GpuSampler {
            source: Some(source),
            unavailable: None,
            last_energy_mj: vec![None; n],
            last_power_w: vec![None; n],
            energy_j: vec![0.0; n],
            power_integral_j: vec![0.0; n],
            notes,
            gpm: super::gpm::GpmSampler::none("GPM not opened"),
        }
    }

    /// Sample GPM metrics too (their columns follow the NVML ones).
    pub fn with_gpm(mut self, gpm: super::gpm::GpmSampler) -> Self {
        self.gpm = gpm;
        self
    }

    /// The mean time one GPM sample of every GPU took, µs, and the number taken.
    pub fn gpm_cost_us(&self) -> Option<(f64, u64)> {
        self.gpm.cost_us()
    }

    /// No GPU source, with the reason (NVML missing, no GPU, turned off).
    pub fn none(reason: impl Into<String>) -> Self {
        let reason = reason.into();
        GpuSampler {
            source: None,
            gpm: super::gpm::GpmSampler::none(format!("no GPM without NVML: {reason}")),
            unavailable: Some(reason),
            last_energy_mj: vec![],
            last_power_w: vec![],
            energy_j: vec![],
            power_integral_j: vec![],
            notes: vec![],
        }
    }

    /// Number of GPUs sampled.
    pub fn count(&self) -> u32 {
        self.source.as_ref().map_or(0, |s| s.count())
    }

    /// Timeline column names, in the order [`GpuSampler::sample`] returns values.
    pub fn columns(&self) -> Vec<String> {
        let mut c: Vec<String> = (0..self.count())
            .flat_map(|i| FIELDS.iter().map(move |(f, _)| format!("gpu{i}_{f}")))
            .collect();
        c.extend(self.gpm.columns());
        c
    }

    /// Read every GPU; `dur_ns` is the length of the interval that ends now (for the power
    /// integral). Values follow [`GpuSampler::columns`]; `gpu<i>_energy_j` is the energy of
    /// the interval (None on the first sample, which only sets the counter's origin).
    pub fn sample(&mut self, dur_ns: u64) -> Vec<Option<f64>> {
        let Some(src) = self.source.as_mut() else {
            return vec![];
        };
        let mut out = Vec::with_capacity(src.count() as usize * FIELDS.len());
        for i in 0..src.count() {
            let r = src.read(i);
            let k = i as usize;
            let energy = match (self.last_energy_mj[k], r.energy_mj) {
                (Some(prev), Some(now)) if now >= prev => Some((now - prev) as f64 * 1e-3),
                // A counter that went back (driver reload) restarts the origin.
                _ => None,
            };
            if r.energy_mj.is_some() {
                self.last_energy_mj[k] = r.energy_mj;
            }
            if let Some(e) = energy {
                self.energy_j[k] += e;
            }
            // Trapezoid rule between this reading and the previous one.
            if let (Some(p), Some(q)) = (r.power_w, self.last_power_w[k]) {
                self.power_integral_j[k] += 0.5 * (p + q) * dur_ns as f64 * 1e-9;
            }
            self.last_power_w[k] = r.power_w;
            out.extend([
                r.power_w,
                energy,
                r.sm_clock_mhz,
                r.mem_clock_mhz,
                r.util_pct,
                r.mem_util_pct,
                r.temp_c,
                r.throttle_reasons.map(|m| m as f64),
            ]);
        }
        if self.gpm.is_active() {
            out.extend(self.gpm.sample());
        }
        out
    }

    /// Event records for run.toml: per GPU the energy (counted, or not supported when the
    /// counter never advanced) and the mean power over the run; or one record saying why
    /// NVML is not available when `required`.
    /// (The GPM metrics' records: [`super::gpm::GpmSampler::records`].)
    pub fn records(&self, duration_ns: u64, required: bool) -> Vec<EventRecord> {
        if let Some(why) = &self.unavailable {
            return if required {
                vec![EventRecord {
                    name: "nvml".into(),
                    backend: Backend::Nvml,
                    status: EventStatus::NotSupported,
                    reason: Some(why.clone()),
                    column: None,
                    total: None,
                    unit: None,
                    scale: None,
                    running_ratio: None,
                }]
            } else {
                vec![]
            };
        }
        let secs = duration_ns as f64 * 1e-9;
        let mut recs = Vec::new();
        for i in 0..self.count() as usize {
            let e = self.energy_j[i];
            let advanced = e > 0.0;
            recs.push(EventRecord {
                name: format!("gpu{i}-energy"),
                backend: Backend::Nvml,
                status: if advanced { EventStatus::Counted } else { EventStatus::NotSupported },
                reason: (!advanced).then(|| format!(
                    "the NVML energy counter of gpu{i} did not advance over {secs:.3} s (nvmlDeviceGetTotalEnergyConsumption needs Volta or newer): reported as not supported, not as zero energy"
                )),
                column: advanced.then(|| format!("gpu{i}_energy_j")),
                total: advanced.then_some(e),
                unit: Some("J".into()),
                scale: None,
                running_ratio: None,
            });
            let pi = self.power_integral_j[i];
            recs.push(EventRecord {
                name: format!("gpu{i}-power-integral"),
                backend: Backend::Nvml,
                status: if pi > 0.0 {
                    EventStatus::Counted
                } else {
                    EventStatus::NotSupported
                },
                reason: (pi <= 0.0).then(|| format!("no power samples of gpu{i}")),
                column: (pi > 0.0).then(|| format!("gpu{i}_power_w")),
                total: (pi > 0.0).then_some(pi),
                unit: Some("J".into()),
                scale: None,
                running_ratio: None,
            });
        }
        recs
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use powerperf_node::nvml::GpuReading;

    /// A GPU whose counter advances by `mj_per_read` and whose power is constant.
    struct Fake {
        energy_mj: u64,
        mj_per_read: u64,
        power_w: f64,
    }

    impl GpuSource for Fake {
        fn count(&self) -> u32 {
            1
        }
        fn name(&self, _: u32) -> String {
            "Fake GPU".into()
        }
        fn power_source(&self, _: u32) -> &'static str {
            "fake"
        }
        fn read(&mut self, _: u32) -> GpuReading {
            self.energy_mj += self.mj_per_read;
            GpuReading {
                power_w: Some(self.power_w),
                energy_mj: Some(self.energy_mj),
                sm_clock_mhz: Some(1980.0),
                throttle_reasons: Some(4),
                ..Default::default()
            }
        }
    }

    #[test]
    fn energy_is_the_counter_delta_and_power_integrates() {
        // 100 W for 10 ms per interval = 1 J = 1000 mJ per read.
        let mut s = GpuSampler::new(Box::new(Fake {
            energy_mj: 5_000_000,
            mj_per_read: 1000,
            power_w: 100.0,
        }));
        assert_eq!(s.columns()[0], "gpu0_power_w");
        assert_eq!(s.columns().len(), FIELDS.len());
        let first = s.sample(0);
        assert_eq!(first[1], None, "the first sample only sets the origin");
        for _ in 0..10 {
            let v = s.sample(10_000_000);
            assert_eq!(v[1], Some(1.0));
            assert_eq!(v[2], Some(1980.0));
            assert_eq!(v[7], Some(4.0));
        }
        assert!((s.energy_j[0] - 10.0).abs() < 1e-9);
        assert!((s.power_integral_j[0] - 10.0).abs() < 1e-9);
        let recs = s.records(100_000_000, false);
        assert_eq!(recs[0].status, EventStatus::Counted);
        assert_eq!(recs[0].total, Some(10.0));
    }

    #[test]
    fn a_counter_that_never_advances_is_not_supported() {
        let mut s = GpuSampler::new(Box::new(Fake {
            energy_mj: 42,
            mj_per_read: 0,
            power_w: 50.0,
        }));
        for _ in 0..5 {
            s.sample(10_000_000);
        }
        let recs = s.records(50_000_000, false);
        assert_eq!(recs[0].status, EventStatus::NotSupported);
        assert_eq!(recs[0].total, None);
        assert!(recs[0]
            .reason
            .as_deref()
            .unwrap()
            .contains("did not advance"));
    }

    #[test]
    fn missing_nvml_is_reported_only_when_asked_for() {
        let s = GpuSampler::none("NVML not available: libnvidia-ml.so.1 could not be loaded");
        assert!(s.columns().is_empty());
        assert!(s.records(1, false).is_empty());
        let r = s.records(1, true);
        assert_eq!(r[0].status, EventStatus::NotSupported);
        assert!(r[0]
            .reason
            .as_deref()
            .unwrap()
            .starts_with("NVML not available"));
    }
}
