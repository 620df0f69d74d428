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
