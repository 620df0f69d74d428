//! [`NvmlGpu`]: the real GPUs through NVML, read-only. The supported graphics clocks come
//! from [`crate::dvfs::nvml_clocks::probe`] (`nvmlDeviceGetSupportedMemoryClocks`,
//! `nvmlDeviceGetSupportedGraphicsClocks`), the power limit from
//! `nvmlDeviceGetPowerManagementLimit` and its range from
//! `nvmlDeviceGetPowerManagementLimitConstraints` (NVML API Reference Guide, Device
//! Queries). **No NVML setter is called in this file** (the test `no_setter_is_called`
//! checks its source): a set, a reset or a restore answers
//! [`GpuControlError::DescribeOnly`] naming the call a privileged build would make.

use super::{check_clock_range, GpuControl, GpuControlError};

/// The GPUs NVML sees, read-only.
pub struct NvmlGpu {
    nvml: nvml_wrapper::Nvml,
    count: u32,
    names: Vec<String>,
}

impl std::fmt::Debug for NvmlGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlGpu")
            .field("count", &self.count)
            .field("names", &self.names)
            .finish()
    }
}

impl NvmlGpu {
    /// Load NVML (`libnvidia-ml.so.1`) and count the GPUs.
    ///
    /// # Errors
    /// NVML cannot be loaded or sees no GPU: the text says why.
    pub fn open() -> Result<Self, GpuControlError> {
        let nvml = nvml_wrapper::Nvml::builder()
            .lib_path(std::ffi::OsStr::new("libnvidia-ml.so.1"))
            .init()
            .or_else(|_| nvml_wrapper::Nvml::init())
            .map_err(|e| GpuControlError::Unavailable(format!("NVML not available: {e}; install the NVIDIA driver (libnvidia-ml.so.1) on a node with an NVIDIA GPU")))?;
        let count = nvml
            .device_count()
            .map_err(|e| GpuControlError::Unavailable(format!("nvmlDeviceGetCount: {e}")))?;
        if count == 0 {
            return Err(GpuControlError::Unavailable(
                "NVML loaded but sees no GPU".into(),
            ));
        }
        let names = (0..count)
            .map(|i| {
                nvml.device_by_index(i)
                    .and_then(|d| d.name())
                    .unwrap_or_else(|_| format!("GPU {i}"))
            })
            .collect();
        Ok(NvmlGpu { nvml, count, names })
    }

    fn device(&self, gpu: u32) -> Result<nvml_wrapper::Device<'_>, GpuControlError> {
        self.check_gpu(gpu)?;
        self.nvml
            .device_by_index(gpu)
            .map_err(|e| GpuControlError::Read {
                gpu,
                call: "nvmlDeviceGetHandleByIndex",
                why: e.to_string(),
            })
    }

    fn describe_only(gpu: u32, call: String) -> GpuControlError {
        GpuControlError::DescribeOnly { gpu, call }
    }
}

impl GpuControl for NvmlGpu {
    fn describe(&self) -> String {
        format!(
            "NVML, {} GPU(s) ({}); reads only, this build calls no NVML setter",
            self.count,
            self.names.join(", ")
        )
    }
    fn count(&self) -> u32 {
        self.count
    }
    fn describe_only(&self) -> bool {
        true
    }
    fn check_locked_clocks(
        &self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<Vec<String>, GpuControlError> {
        self.check_gpu(gpu)?;
        let p = crate::dvfs::nvml_clocks::probe(gpu).map_err(|why| GpuControlError::Read {
            gpu,
            call: "nvmlDeviceGetSupportedGraphicsClocks",
            why,
        })?;
        let mut all: Vec<u32> = p
            .graphics_clocks_mhz
            .iter()
            .filter_map(|(_, g)| g.as_ref().ok())
            .flatten()
            .copied()
            .collect();
        all.sort_unstable();
        all.dedup();
        check_clock_range(gpu, &all, min_mhz, max_mhz)
    }
    fn power_limit_w(&self, gpu: u32) -> Result<f64, GpuControlError> {
        let d = self.device(gpu)?;
        d.power_management_limit()
            .map(|mw| f64::from(mw) * 1e-3)
            .map_err(|e| GpuControlError::Read {
                gpu,
                call: "nvmlDeviceGetPowerManagementLimit",
                why: e.to_string(),
            })
    }
    fn power_limit_range_w(&self, gpu: u32) -> Result<(f64, f64), GpuControlError> {
        let d = self.device(gpu)?;
        d.power_management_limit_constraints()
            .map(|c| (f64::from(c.min_limit) * 1e-3, f64::from(c.max_limit) * 1e-3))
            .map_err(|e| GpuControlError::Read {
                gpu,
                call: "nvmlDeviceGetPowerManagementLimitConstraints",
                why: e.to_string(),
            })
    }
    fn set_locked_clocks(
        &mut self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<String, GpuControlError> {
        self.check_locked_clocks(gpu, min_mhz, max_mhz)?;
        Err(Self::describe_only(gpu, format!("nvmlDeviceSetGpuLockedClocks(device {gpu}, minGpuClockMHz {min_mhz:.0}, maxGpuClockMHz {max_mhz:.0})")))
    }
    fn reset_locked_clocks(&mut self, gpu: u32) -> Result<String, GpuControlError> {
        self.check_gpu(gpu)?;
        Err(Self::describe_only(
            gpu,
            format!("nvmlDeviceResetGpuLockedClocks(device {gpu})"),
        ))
    }
    fn set_power_limit_w(&mut self, gpu: u32, watts: f64) -> Result<String, GpuControlError> {
        let (lo, hi) = self.power_limit_range_w(gpu)?;
        if !(watts.is_finite() && watts >= lo - 1e-9 && watts <= hi + 1e-9) {
            return Err(GpuControlError::OutOfRange {
                gpu,
                what: format!("power limit {watts} W"),
                allowed: format!("{lo}..{hi} W (nvmlDeviceGetPowerManagementLimitConstraints)"),
            });
        }
        Err(Self::describe_only(
            gpu,
            format!(
                "nvmlDeviceSetPowerManagementLimit(device {gpu}, limit {:.0} mW)",
                watts * 1e3
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// This file's own code calls no NVML setter (nvml-wrapper's `set_*`/`reset_*`/`clear_*`
    /// methods of `Device`).
    #[test]
    fn no_setter_is_called() {
        let src = include_str!("nvml.rs");
        let code = &src[..src.find("#[cfg(test)]").unwrap()];
        for bad in [
            "d.set_",
            "d.reset_",
            ".clear_",
            "dev.set_",
            "dev.reset_",
            "device.set_",
        ] {
            assert!(!code.contains(bad), "setter-like call `{bad}` in nvml.rs");
        }
        // the only `.set_`/`.reset_` calls would be on a Device; there are none at all
        assert!(!code.contains(".set_") && !code.contains(".reset_"));
    }

    #[test]
    fn reads_on_this_machine_or_skip() {
        match NvmlGpu::open() {
            Err(e) => println!("skipped: no NVIDIA GPU ({e})"),
            Ok(g) => {
                println!("{}", g.describe());
                let (lo, hi) = g.power_limit_range_w(0).unwrap();
                let now = g.power_limit_w(0).unwrap();
                println!("GPU 0 power limit {now} W, range {lo}..{hi} W");
                assert!(lo <= now && now <= hi);
            }
        }
    }
}
