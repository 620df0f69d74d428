//! [`NvmlGpu`]: the real GPUs through NVML, read-only. The supported graphics clocks come
//! from [`crate::nvml_clocks::probe`] (`nvmlDeviceGetSupportedMemoryClocks`,
//! `nvmlDeviceGetSupportedGraphicsClocks`), the power limit from
//! `nvmlDeviceGetPowerManagementLimit` and its range from
//! `nvmlDeviceGetPowerManagementLimitConstraints` (NVML API Reference Guide, Device
//! Queries).
//!
//! Two ways to open it:
//! - [`NvmlGpu::open`]: **read-only**. A set, a reset or a restore answers
//!   [`GpuControlError::DescribeOnly`] naming the call it would make; nothing changes.
//! - [`NvmlGpu::open_writable`]: the setters are called (NVML API Reference Guide, Device
//!   Commands): `nvmlDeviceSetGpuLockedClocks` / `nvmlDeviceResetGpuLockedClocks` (Volta and
//!   newer), `nvmlDeviceSetMemoryLockedClocks` / `nvmlDeviceResetMemoryLockedClocks` (Ampere
//!   and newer; older GPUs are refused before any call) and
//!   `nvmlDeviceSetPowerManagementLimit` (mW). All need root. Only `powerperfd`
//!   opens it this way, where its policy is the gate: no grant of `gpu.locked_clocks` or
//!   `gpu.power_limit`, no write (docs/cluster.md). The setters are reached only through
//!   [`NvmlGpu::nvml_set`] (the test `setters_only_in_nvml_set` checks the source), and are
//!   exercised in CI only on the fake GPU: the project never changes a real GPU's clocks or
//!   power limit in a test.

use super::{check_clock_list, check_clock_range, GpuControl, GpuControlError};

/// The GPUs NVML sees, read-only.
pub struct NvmlGpu {
    nvml: nvml_wrapper::Nvml,
    count: u32,
    names: Vec<String>,
    /// Whether the setters are called ([`NvmlGpu::open_writable`]).
    writes: bool,
}

/// One NVML write.
#[derive(Debug, Clone, Copy)]
enum NvmlSet {
    LockedClocks { min_mhz: u32, max_mhz: u32 },
    ResetLockedClocks,
    MemLockedClocks { min_mhz: u32, max_mhz: u32 },
    ResetMemLockedClocks,
    PowerLimitMw(u32),
}

impl std::fmt::Debug for NvmlGpu {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NvmlGpu")
            .field("count", &self.count)
            .field("names", &self.names)
            .field("writes", &self.writes)
            .finish()
    }
}

impl NvmlGpu {
    /// Load NVML (`libnvidia-ml.so.1`) and count the GPUs, read-only: sets and resets are
    /// described, never made.
    ///
    /// # Errors
    /// NVML cannot be loaded or sees no GPU: the text says why.
    pub fn open() -> Result<Self, GpuControlError> {
        Self::open_inner(false)
    }

    /// As [`NvmlGpu::open`], but sets and resets call NVML's setters (root needed; the
    /// caller's policy decides who may ask).
    ///
    /// # Errors
    /// As [`NvmlGpu::open`].
    pub fn open_writable() -> Result<Self, GpuControlError> {
        Self::open_inner(true)
    }

    fn open_inner(writes: bool) -> Result<Self, GpuControlError> {
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
        Ok(NvmlGpu {
            nvml,
            count,
            names,
            writes,
        })
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

    /// Make the NVML call `what` names (read-only: describe it, change nothing). Returns
    /// the call made.
    fn nvml_set(&self, gpu: u32, what: NvmlSet, call: String) -> Result<String, GpuControlError> {
        if !self.writes {
            return Err(GpuControlError::DescribeOnly { gpu, call });
        }
        let mut d = self.device(gpu)?;
        let r = match what {
            NvmlSet::LockedClocks { min_mhz, max_mhz } => d.set_gpu_locked_clocks(
                nvml_wrapper::enums::device::GpuLockedClocksSetting::Numeric {
                    min_clock_mhz: min_mhz,
                    max_clock_mhz: max_mhz,
                },
            ),
            NvmlSet::ResetLockedClocks => d.reset_gpu_locked_clocks(),
            NvmlSet::MemLockedClocks { min_mhz, max_mhz } => {
                d.set_mem_locked_clocks(min_mhz, max_mhz)
            }
            NvmlSet::ResetMemLockedClocks => d.reset_mem_locked_clocks(),
            NvmlSet::PowerLimitMw(mw) => d.set_power_management_limit(mw),
        };
        r.map(|()| call.clone())
            .map_err(|e| GpuControlError::Write {
                gpu,
                call,
                why: match e {
                    nvml_wrapper::error::NvmlError::NoPermission => {
                        format!("{e}: run powerperfd as root")
                    }
                    nvml_wrapper::error::NvmlError::NotSupported => {
                        format!("{e}: this GPU or driver does not support it")
                    }
                    e => e.to_string(),
                },
            })
    }
}

/// A checked clock range as the whole MHz NVML's clock-locking calls take (`what` names the
/// setting in the error: `locked clocks`, `memory locked clocks`).
///
/// # Errors
/// A value NVML cannot take, with the reason.
fn nvml_clock_pair(
    gpu: u32,
    what: &str,
    min_mhz: f64,
    max_mhz: f64,
) -> Result<(u32, u32), GpuControlError> {
    let bad = |why: String| GpuControlError::OutOfRange {
        gpu,
        what: format!("{what} [{min_mhz}, {max_mhz}] MHz"),
        allowed: why,
    };
    Ok((
        nvml_uint(min_mhz).map_err(bad)?,
        nvml_uint(max_mhz).map_err(bad)?,
    ))
}

/// MHz or mW as NVML's `unsigned int`, for a value already checked against the device's
/// range.
fn nvml_uint(v: f64) -> Result<u32, String> {
    let r = v.round();
    if r.is_finite() && (0.0..=f64::from(u32::MAX)).contains(&r) {
        #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
        Ok(r as u32)
    } else {
        Err(format!("{v} is not an NVML unsigned int"))
    }
}

impl GpuControl for NvmlGpu {
    fn describe(&self) -> String {
        format!(
            "NVML, {} GPU(s) ({}); {}",
            self.count,
            self.names.join(", "),
            if self.writes {
                "sets locked clocks and power limits"
            } else {
                "reads only, sets nothing"
            }
        )
    }
    fn count(&self) -> u32 {
        self.count
    }
    fn describe_only(&self) -> bool {
        !self.writes
    }
    fn check_locked_clocks(
        &self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<Vec<String>, GpuControlError> {
        self.check_gpu(gpu)?;
        let p = crate::nvml_clocks::probe(gpu).map_err(|why| GpuControlError::Read {
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
    fn check_mem_locked_clocks(
        &self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<Vec<String>, GpuControlError> {
        use nvml_wrapper::enums::device::DeviceArchitecture as A;
        let d = self.device(gpu)?;
        // nvmlDeviceSetMemoryLockedClocks: "Ampere and newer fully supported devices"
        // (NVML API Reference Guide, Device Commands)
        match d.architecture() {
            Ok(A::Kepler | A::Maxwell | A::Pascal | A::Volta | A::Turing) => {
                return Err(GpuControlError::NoMemLock {
                    gpu,
                    why: format!(
                        "{} is {:?}; nvmlDeviceSetMemoryLockedClocks needs Ampere or newer",
                        self.names.get(gpu as usize).map_or("it", String::as_str),
                        d.architecture().unwrap_or(A::Unknown)
                    ),
                })
            }
            Ok(_) => {}
            Err(e) => {
                return Err(GpuControlError::NoMemLock {
                    gpu,
                    why: format!("nvmlDeviceGetArchitecture failed ({e}), so support for nvmlDeviceSetMemoryLockedClocks is unknown"),
                })
            }
        }
        let l = d
            .supported_memory_clocks()
            .map_err(|e| GpuControlError::Read {
                gpu,
                call: "nvmlDeviceGetSupportedMemoryClocks",
                why: e.to_string(),
            })?;
        check_clock_list(
            gpu,
            &l,
            min_mhz,
            max_mhz,
            "nvmlDeviceGetSupportedMemoryClocks",
            "memory locked clocks",
        )
    }
    fn set_mem_locked_clocks(
        &mut self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<String, GpuControlError> {
        self.check_mem_locked_clocks(gpu, min_mhz, max_mhz)?;
        let (lo, hi) = nvml_clock_pair(gpu, "memory locked clocks", min_mhz, max_mhz)?;
        self.nvml_set(
            gpu,
            NvmlSet::MemLockedClocks {
                min_mhz: lo,
                max_mhz: hi,
            },
            format!("nvmlDeviceSetMemoryLockedClocks(device {gpu}, minMemClockMHz {lo}, maxMemClockMHz {hi})"),
        )
    }
    fn reset_mem_locked_clocks(&mut self, gpu: u32) -> Result<String, GpuControlError> {
        self.check_gpu(gpu)?;
        self.nvml_set(
            gpu,
            NvmlSet::ResetMemLockedClocks,
            format!("nvmlDeviceResetMemoryLockedClocks(device {gpu})"),
        )
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
        let (lo, hi) = nvml_clock_pair(gpu, "locked clocks", min_mhz, max_mhz)?;
        self.nvml_set(
            gpu,
            NvmlSet::LockedClocks {
                min_mhz: lo,
                max_mhz: hi,
            },
            format!("nvmlDeviceSetGpuLockedClocks(device {gpu}, minGpuClockMHz {lo}, maxGpuClockMHz {hi})"),
        )
    }
    fn reset_locked_clocks(&mut self, gpu: u32) -> Result<String, GpuControlError> {
        self.check_gpu(gpu)?;
        self.nvml_set(
            gpu,
            NvmlSet::ResetLockedClocks,
            format!("nvmlDeviceResetGpuLockedClocks(device {gpu})"),
        )
    }
    fn set_power_limit_w(&mut self, gpu: u32, watts: f64) -> Result<String, GpuControlError> {
        self.check_power_limit(gpu, watts)?;
        let mw = nvml_uint(watts * 1e3).map_err(|why| GpuControlError::OutOfRange {
            gpu,
            what: format!("power limit {watts} W"),
            allowed: why,
        })?;
        self.nvml_set(
            gpu,
            NvmlSet::PowerLimitMw(mw),
            format!("nvmlDeviceSetPowerManagementLimit(device {gpu}, limit {mw} mW)"),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The NVML setters (nvml-wrapper's `Device::set_*`/`reset_*`/`clear_*`) are called only
    /// inside `nvml_set`, which describes instead of calling unless opened writable.
    #[test]
    fn setters_only_in_nvml_set() {
        let src = include_str!("nvml.rs");
        let code = &src[..src.find("#[cfg(test)]").unwrap()];
        let start = code.find("    fn nvml_set(").unwrap();
        let end = start + code[start..].find("\n    }\n").unwrap();
        let outside = format!("{}{}", &code[..start], &code[end..]);
        for bad in [
            "d.set_",
            "d.reset_",
            ".clear_",
            ".set_gpu",
            ".set_power",
            ".reset_gpu",
        ] {
            assert!(
                !outside.contains(bad),
                "setter-like call `{bad}` outside nvml_set in nvml.rs"
            );
        }
        let inside = &code[start..end];
        assert!(inside.contains("if !self.writes"));
        assert!(
            inside.contains("d.set_gpu_locked_clocks")
                && inside.contains("d.set_mem_locked_clocks")
                && inside.contains("d.reset_mem_locked_clocks")
                && inside.contains("d.set_power_management_limit")
        );
    }

    #[test]
    fn nvml_uint_rounds_and_refuses_what_nvml_cannot_take() {
        assert_eq!(nvml_uint(1410.4), Ok(1410));
        assert_eq!(nvml_uint(300_000.0), Ok(300_000));
        for bad in [-1.0, f64::NAN, f64::INFINITY, 5e9] {
            assert!(nvml_uint(bad).is_err(), "{bad}");
        }
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
