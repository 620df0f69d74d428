//! NVIDIA GPUs through NVML: power, the total energy counter, SM and memory clocks,
//! utilisation, temperature and throttle reasons, sampled every `--interval` into the
//! timeline (`gpu<i>_power_w`, `gpu<i>_energy_j`, …; docs/run-format.md).
//!
//! NVML is loaded at run time (nvml-wrapper over `libnvidia-ml.so.1`), so powerperf builds
//! and runs on machines without the NVIDIA driver: there the source reports
//! "not available" with the reason.
//!
//! Power is NVML's instantaneous field `NVML_FI_DEV_POWER_INSTANT` where the GPU offers it:
//! `nvmlDeviceGetPowerUsage` is a one-second moving average on recent GPUs (NVML API
//! reference, `nvmlDeviceGetPowerUsage`: "On Ampere … and newer … the power draw averaged
//! over a 1 sec interval"); older GPUs fall back to it, and the run says which was used.
//! Energy comes from `nvmlDeviceGetTotalEnergyConsumption` (mJ since the driver was
//! loaded, Volta and newer): the interval's energy is the counter's delta, never the
//! integral of sampled power.

use crate::store::run::{Backend, EventRecord, EventStatus};

/// One reading of one GPU. `None` where NVML could not give the value.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct GpuReading {
    pub power_w: Option<f64>,
    /// The total energy counter, mJ (monotonic while the driver stays loaded).
    pub energy_mj: Option<u64>,
    pub sm_clock_mhz: Option<f64>,
    pub mem_clock_mhz: Option<f64>,
    pub util_pct: Option<f64>,
    pub mem_util_pct: Option<f64>,
    pub temp_c: Option<f64>,
    /// `nvmlDeviceGetCurrentClocksEventReasons` bit mask (NVML's clock throttle reasons).
    pub throttle_reasons: Option<u64>,
}

/// The seam between the sampler and NVML: one method per query, so the sampler's
/// arithmetic (energy deltas, a counter that never advances, column layout) is tested on a
/// fake.
pub trait GpuSource: Send {
    /// Number of GPUs.
    fn count(&self) -> u32;
    /// Name of GPU `i` (e.g. "NVIDIA H100 80GB HBM3").
    fn name(&self, i: u32) -> String;
    /// Where power comes from on GPU `i` (for the run's notes).
    fn power_source(&self, i: u32) -> &'static str;
    /// Read GPU `i` now.
    fn read(&mut self, i: u32) -> GpuReading;
}

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

/// Open NVML and every GPU it sees.
///
/// # Errors
/// A text saying why NVML is not available here (library missing, driver not loaded, no
/// permission, no GPU), and what to do about it.
#[cfg(target_os = "linux")]
pub fn open_nvml() -> Result<Box<dyn GpuSource>, String> {
    real::NvmlSource::open().map(|s| Box::new(s) as Box<dyn GpuSource>)
}

#[cfg(target_os = "linux")]
mod real {
    use super::{GpuReading, GpuSource};
    use nvml_wrapper::enum_wrappers::device::{Clock, TemperatureSensor};
    use nvml_wrapper::enums::device::SampleValue;
    use nvml_wrapper::error::NvmlError;
    use nvml_wrapper::structs::device::FieldId;
    use nvml_wrapper::Nvml;

    /// `NVML_FI_DEV_POWER_INSTANT` (nvml.h, NVML 12): instantaneous power, mW.
    const FI_POWER_INSTANT: u32 = 186;

    pub struct NvmlSource {
        nvml: Nvml,
        n: u32,
        names: Vec<String>,
        instant: Vec<bool>,
    }

    fn explain(e: &NvmlError) -> String {
        match e {
            NvmlError::LibloadingError(_) | NvmlError::FailedToLoadSymbol(_) => format!(
                "NVML not available: libnvidia-ml.so.1 could not be loaded ({e}); install the NVIDIA driver, or add its library directory to LD_LIBRARY_PATH"
            ),
            NvmlError::DriverNotLoaded => {
                "NVML not available: the NVIDIA kernel driver is not loaded (nvidia-smi says the same)".into()
            }
            NvmlError::NoPermission => {
                "NVML not available: no permission to talk to the driver (check /dev/nvidia* permissions)".into()
            }
            other => format!("NVML not available: {other}"),
        }
    }

    fn instant_power_mw(dev: &nvml_wrapper::Device) -> Option<f64> {
        let v = dev.field_values_for(&[FieldId(FI_POWER_INSTANT)]).ok()?;
        match v.into_iter().next()?.ok()?.value.ok()? {
            SampleValue::U32(x) => Some(x as f64),
            SampleValue::U64(x) => Some(x as f64),
            SampleValue::I64(x) => Some(x as f64),
            SampleValue::F64(x) => Some(x),
        }
    }

    impl NvmlSource {
        pub fn open() -> Result<Self, String> {
            // The driver ships libnvidia-ml.so.1; the unversioned name only comes with
            // development packages.
            let nvml = Nvml::builder()
                .lib_path(std::ffi::OsStr::new("libnvidia-ml.so.1"))
                .init()
                .or_else(|_| Nvml::init())
                .map_err(|e| explain(&e))?;
            let n = nvml.device_count().map_err(|e| explain(&e))?;
            if n == 0 {
                return Err("NVML not available: NVML loaded but sees no GPU".into());
            }
            let mut names = Vec::new();
            let mut instant = Vec::new();
            for i in 0..n {
                let dev = nvml.device_by_index(i).map_err(|e| explain(&e))?;
                names.push(dev.name().unwrap_or_else(|_| format!("GPU {i}")));
                instant.push(instant_power_mw(&dev).is_some_and(|p| p > 0.0));
            }
            Ok(NvmlSource {
                nvml,
                n,
                names,
                instant,
            })
        }
    }

    impl GpuSource for NvmlSource {
        fn count(&self) -> u32 {
            self.n
        }
        fn name(&self, i: u32) -> String {
            self.names[i as usize].clone()
        }
        fn power_source(&self, i: u32) -> &'static str {
            if self.instant[i as usize] {
                "NVML_FI_DEV_POWER_INSTANT (instantaneous)"
            } else {
                "nvmlDeviceGetPowerUsage (the driver's average; no instantaneous field on this GPU)"
            }
        }
        fn read(&mut self, i: u32) -> GpuReading {
            let Ok(dev) = self.nvml.device_by_index(i) else {
                return GpuReading::default();
            };
            let power_mw = if self.instant[i as usize] {
                instant_power_mw(&dev)
            } else {
                dev.power_usage().ok().map(|p| p as f64)
            };
            let util = dev.utilization_rates().ok();
            GpuReading {
                power_w: power_mw.map(|p| p * 1e-3),
                energy_mj: dev.total_energy_consumption().ok(),
                sm_clock_mhz: dev.clock_info(Clock::SM).ok().map(f64::from),
                mem_clock_mhz: dev.clock_info(Clock::Memory).ok().map(f64::from),
                util_pct: util.as_ref().map(|u| u.gpu as f64),
                mem_util_pct: util.as_ref().map(|u| u.memory as f64),
                temp_c: dev.temperature(TemperatureSensor::Gpu).ok().map(f64::from),
                throttle_reasons: dev.current_throttle_reasons().ok().map(|r| r.bits()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
