//! NVML locked clocks, dry run: every read done for real through nvml-wrapper, the plan's
//! GPU settings checked against the clocks the device supports, and the exact set and reset
//! calls a privileged run would make. **No NVML setter is called anywhere in this module**
//! (the test `no_setter_is_called` checks its source).
//!
//! NVML API reference (NVIDIA, "NVML API Reference Guide", Device Queries / Device Commands):
//! `nvmlDeviceGetCount`, `nvmlDeviceGetName`, `nvmlDeviceGetSupportedMemoryClocks`,
//! `nvmlDeviceGetSupportedGraphicsClocks(memoryClockMHz)`, `nvmlDeviceGetClock` (current and
//! application-clock target/default), `nvmlDeviceGetMaxClockInfo`,
//! `nvmlDeviceGetAPIRestriction`; the calls described: `nvmlDeviceSetGpuLockedClocks(device,
//! minGpuClockMHz, maxGpuClockMHz)` / `nvmlDeviceResetGpuLockedClocks(device)` and
//! `nvmlDeviceSetMemoryLockedClocks` / `nvmlDeviceResetMemoryLockedClocks` (Volta and newer;
//! root or admin needed). NVML has no getter for the locked-clock range itself; the current
//! clocks and the application clocks are what it reads back.

use serde::Serialize;

/// What NVML reports about one GPU (all MHz). A field NVML could not read holds the reason.
#[derive(Debug, Clone, Serialize)]
pub struct NvmlProbe {
    /// GPUs NVML sees.
    pub device_count: u32,
    /// The device the plan is applied to.
    pub device: u32,
    pub name: String,
    /// `nvmlDeviceGetSupportedMemoryClocks`, descending as NVML returns them.
    pub memory_clocks_mhz: Result<Vec<u32>, String>,
    /// `nvmlDeviceGetSupportedGraphicsClocks` for each supported memory clock.
    pub graphics_clocks_mhz: Vec<(u32, Result<Vec<u32>, String>)>,
    /// Current SM and memory clocks.
    pub current_sm_mhz: Result<u32, String>,
    pub current_mem_mhz: Result<u32, String>,
    /// Application clocks (target), SM and memory.
    pub app_sm_mhz: Result<u32, String>,
    pub app_mem_mhz: Result<u32, String>,
    /// Application clocks (default).
    pub default_app_sm_mhz: Result<u32, String>,
    pub default_app_mem_mhz: Result<u32, String>,
    /// `nvmlDeviceGetMaxClockInfo`.
    pub max_sm_mhz: Result<u32, String>,
    pub max_mem_mhz: Result<u32, String>,
    /// Whether changing application clocks is restricted to root
    /// (`nvmlDeviceGetAPIRestriction(NVML_RESTRICTED_API_SET_APPLICATION_CLOCKS)`).
    pub app_clocks_root_only: Result<bool, String>,
    /// Effective uid of this process (locked clocks need root or admin).
    pub euid: u32,
}

impl Default for NvmlProbe {
    /// Nothing read: every query holds "not read".
    fn default() -> Self {
        let nr = || Err("not read".to_string());
        NvmlProbe {
            device_count: 0,
            device: 0,
            name: String::new(),
            memory_clocks_mhz: Err("not read".into()),
            graphics_clocks_mhz: Vec::new(),
            current_sm_mhz: nr(),
            current_mem_mhz: nr(),
            app_sm_mhz: nr(),
            app_mem_mhz: nr(),
            default_app_sm_mhz: nr(),
            default_app_mem_mhz: nr(),
            max_sm_mhz: nr(),
            max_mem_mhz: nr(),
            app_clocks_root_only: Err("not read".into()),
            euid: 0,
        }
    }
}

/// The calls a privileged run would make, in order, and notes on the check.
#[derive(Debug, Clone, Serialize, Default, PartialEq)]
pub struct LockedClockCalls {
    /// Calls at start, e.g. `nvmlDeviceSetGpuLockedClocks(device 0, 1088, 1088)`.
    pub set: Vec<String>,
    /// Calls at exit.
    pub reset: Vec<String>,
    /// What the check found (nearest supported clock, permission).
    pub notes: Vec<String>,
}

/// A GPU setting the device cannot take.
#[derive(Debug, Clone, thiserror::Error, PartialEq)]
#[non_exhaustive]
pub enum NvmlClockError {
    /// The setting is outside the supported range.
    #[error("GPU {device} ({name}): {what} {mhz} MHz is outside the supported range {min}..{max} MHz (nvmlDeviceGetSupported{api}Clocks); choose a setting in that range or re-plan for this GPU")]
    OutOfRange {
        device: u32,
        name: String,
        what: &'static str,
        api: &'static str,
        mhz: f64,
        min: u32,
        max: u32,
    },
    /// The supported clocks could not be read, so the setting cannot be checked.
    #[error("GPU {device} ({name}): the supported {what} clocks could not be read ({why}); the setting {mhz} MHz cannot be checked")]
    Unreadable {
        device: u32,
        name: String,
        what: &'static str,
        mhz: f64,
        why: String,
    },
}

fn range_of(v: &[u32]) -> Option<(u32, u32)> {
    Some((*v.iter().min()?, *v.iter().max()?))
}

fn nearest(v: &[u32], mhz: f64) -> Option<u32> {
    v.iter()
        .copied()
        .min_by(|a, b| (*a as f64 - mhz).abs().total_cmp(&(*b as f64 - mhz).abs()))
}

/// Check `sm_mhz` (the plan's GPU `core_freq_mhz`) and `mem_mhz` (`mem_freq_mhz`) against
/// the probe and return the calls. The SM clock is checked against the graphics clocks
/// supported at the planned memory clock (at every memory clock when none is planned).
/// A clock inside the range but not in NVML's list is accepted with a note: the driver
/// locks to supported clocks inside `[min, max]`.
///
/// # Errors
/// [`NvmlClockError::OutOfRange`] for a setting outside the supported range;
/// [`NvmlClockError::Unreadable`] when NVML could not list the supported clocks.
pub fn check_plan(
    p: &NvmlProbe,
    sm_mhz: Option<f64>,
    mem_mhz: Option<f64>,
) -> Result<LockedClockCalls, NvmlClockError> {
    let d = p.device;
    let mut out = LockedClockCalls::default();
    let unreadable = |what, mhz, why: &str| NvmlClockError::Unreadable {
        device: d,
        name: p.name.clone(),
        what,
        mhz,
        why: why.to_string(),
    };
    if let Some(m) = mem_mhz {
        let mems = p
            .memory_clocks_mhz
            .as_ref()
            .map_err(|e| unreadable("memory", m, e))?;
        let (lo, hi) = range_of(mems).ok_or_else(|| unreadable("memory", m, "empty list"))?;
        if m < lo as f64 - 0.5 || m > hi as f64 + 0.5 {
            return Err(NvmlClockError::OutOfRange {
                device: d,
                name: p.name.clone(),
                what: "memory clock",
                api: "Memory",
                mhz: m,
                min: lo,
                max: hi,
            });
        }
        if let Some(n) = nearest(mems, m).filter(|n| (*n as f64 - m).abs() > 0.5) {
            out.notes.push(format!(
                "memory clock {m} MHz is not in the supported list; nearest supported: {n} MHz"
            ));
        }
    }
    if let Some(f) = sm_mhz {
        let mut all = Vec::new();
        let mut why = String::from("no supported memory clock");
        for (mc, g) in &p.graphics_clocks_mhz {
            if mem_mhz.is_some_and(|m| (m - *mc as f64).abs() > 0.5) {
                continue;
            }
            match g {
                Ok(v) => all.extend_from_slice(v),
                Err(e) => why = e.clone(),
            }
        }
        if all.is_empty() && mem_mhz.is_some() {
            // the planned memory clock is not one NVML lists: use every list
            for (_, g) in &p.graphics_clocks_mhz {
                if let Ok(v) = g {
                    all.extend_from_slice(v);
                }
            }
        }
        let (lo, hi) = range_of(&all).ok_or_else(|| unreadable("graphics", f, &why))?;
        if f < lo as f64 - 0.5 || f > hi as f64 + 0.5 {
            return Err(NvmlClockError::OutOfRange {
                device: d,
                name: p.name.clone(),
                what: "SM (graphics) clock",
                api: "Graphics",
                mhz: f,
                min: lo,
                max: hi,
            });
        }
        if let Some(n) = nearest(&all, f).filter(|n| (*n as f64 - f).abs() > 0.5) {
            out.notes.push(format!(
                "SM clock {f} MHz is not in the supported list; nearest supported: {n} MHz"
            ));
        }
        out.set.push(format!(
            "nvmlDeviceSetGpuLockedClocks(device {d}, minGpuClockMHz {f:.0}, maxGpuClockMHz {f:.0})"
        ));
        out.reset
            .push(format!("nvmlDeviceResetGpuLockedClocks(device {d})"));
    }
    if let Some(m) = mem_mhz {
        out.set.push(format!(
            "nvmlDeviceSetMemoryLockedClocks(device {d}, minMemClockMHz {m:.0}, maxMemClockMHz {m:.0})"
        ));
        out.reset
            .push(format!("nvmlDeviceResetMemoryLockedClocks(device {d})"));
    }
    out.notes.push(if p.euid == 0 {
        "permission: running as root, which the set calls need".to_string()
    } else {
        format!("permission: the set calls need root or admin (running as uid {}); they would fail with NVML_ERROR_NO_PERMISSION", p.euid)
    });
    Ok(out)
}

impl NvmlProbe {
    /// The reads as text lines, one per query.
    pub fn lines(&self) -> Vec<String> {
        fn s<T: std::fmt::Debug>(r: &Result<T, String>) -> String {
            match r {
                Ok(v) => format!("{v:?}"),
                Err(e) => format!("not readable: {e}"),
            }
        }
        let mut v = vec![
            format!("nvmlDeviceGetCount: {}", self.device_count),
            format!("nvmlDeviceGetName(device {}): {}", self.device, self.name),
            format!(
                "nvmlDeviceGetSupportedMemoryClocks: {} MHz",
                s(&self.memory_clocks_mhz)
            ),
        ];
        for (m, g) in &self.graphics_clocks_mhz {
            let t = match g {
                Ok(x) => match range_of(x) {
                    Some((lo, hi)) => format!("{} clocks, {lo}..{hi} MHz", x.len()),
                    None => "none".into(),
                },
                Err(e) => format!("not readable: {e}"),
            };
            v.push(format!(
                "nvmlDeviceGetSupportedGraphicsClocks(memory {m} MHz): {t}"
            ));
        }
        v.push(format!(
            "current clocks: SM {} MHz, memory {} MHz",
            s(&self.current_sm_mhz),
            s(&self.current_mem_mhz)
        ));
        v.push(format!(
            "application clocks (target): SM {} MHz, memory {} MHz; default: SM {} MHz, memory {} MHz",
            s(&self.app_sm_mhz),
            s(&self.app_mem_mhz),
            s(&self.default_app_sm_mhz),
            s(&self.default_app_mem_mhz)
        ));
        v.push(format!(
            "max clocks: SM {} MHz, memory {} MHz",
            s(&self.max_sm_mhz),
            s(&self.max_mem_mhz)
        ));
        v.push(format!(
            "application clocks restricted to root: {}",
            s(&self.app_clocks_root_only)
        ));
        v.push("locked clocks: NVML has no getter for the locked range (nvidia-smi -q -d CLOCK shows it)".into());
        v
    }
}

/// Read everything [`NvmlProbe`] holds from GPU `device`, through NVML loaded at run time.
/// Only getters are called.
///
/// # Errors
/// NVML cannot be loaded or initialised, or the device does not exist: the text says why
/// and what to do.
#[cfg(target_os = "linux")]
pub fn probe(device: u32) -> Result<NvmlProbe, String> {
    use nvml_wrapper::enum_wrappers::device::{Clock, ClockId};
    use nvml_wrapper::Nvml;
    let nvml = Nvml::builder()
        .lib_path(std::ffi::OsStr::new("libnvidia-ml.so.1"))
        .init()
        .or_else(|_| Nvml::init())
        .map_err(|e| format!("NVML not available: {e}; install the NVIDIA driver (libnvidia-ml.so.1) or run on a machine with an NVIDIA GPU"))?;
    let n = nvml
        .device_count()
        .map_err(|e| format!("NVML not available: nvmlDeviceGetCount failed: {e}"))?;
    if device >= n {
        return Err(format!(
            "NVML sees {n} GPU(s); device {device} does not exist"
        ));
    }
    let dev = nvml
        .device_by_index(device)
        .map_err(|e| format!("nvmlDeviceGetHandleByIndex({device}): {e}"))?;
    let e = |x: nvml_wrapper::error::NvmlError| x.to_string();
    let mems = dev.supported_memory_clocks().map_err(e);
    let graphics = match &mems {
        Ok(v) => v
            .iter()
            .map(|m| (*m, dev.supported_graphics_clocks(*m).map_err(e)))
            .collect(),
        Err(_) => Vec::new(),
    };
    Ok(NvmlProbe {
        device_count: n,
        device,
        name: dev
            .name()
            .unwrap_or_else(|x| format!("GPU {device} (name not readable: {x})")),
        memory_clocks_mhz: mems,
        graphics_clocks_mhz: graphics,
        current_sm_mhz: dev.clock(Clock::SM, ClockId::Current).map_err(e),
        current_mem_mhz: dev.clock(Clock::Memory, ClockId::Current).map_err(e),
        app_sm_mhz: dev.clock(Clock::SM, ClockId::TargetAppClock).map_err(e),
        app_mem_mhz: dev.clock(Clock::Memory, ClockId::TargetAppClock).map_err(e),
        default_app_sm_mhz: dev.clock(Clock::SM, ClockId::DefaultAppClock).map_err(e),
        default_app_mem_mhz: dev
            .clock(Clock::Memory, ClockId::DefaultAppClock)
            .map_err(e),
        max_sm_mhz: dev.max_clock_info(Clock::SM).map_err(e),
        max_mem_mhz: dev.max_clock_info(Clock::Memory).map_err(e),
        app_clocks_root_only: dev
            .is_api_restricted(nvml_wrapper::enum_wrappers::device::Api::ApplicationClocks)
            .map_err(e),
        // SAFETY: geteuid has no preconditions and cannot fail.
        euid: unsafe { libc::geteuid() },
    })
}

/// Not Linux: NVML is not loaded.
///
/// # Errors
/// Always.
#[cfg(not(target_os = "linux"))]
pub fn probe(_device: u32) -> Result<NvmlProbe, String> {
    Err("NVML is only loaded on Linux in this build".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn titanx() -> NvmlProbe {
        NvmlProbe {
            device_count: 1,
            device: 0,
            name: "fake GPU".into(),
            memory_clocks_mhz: Ok(vec![3505, 810]),
            graphics_clocks_mhz: vec![
                (3505, Ok(vec![1164, 1126, 1088, 595])),
                (810, Ok(vec![1088, 595])),
            ],
            euid: 1000,
            ..Default::default()
        }
    }

    #[test]
    fn in_range_gives_the_set_and_reset_calls() {
        let c = check_plan(&titanx(), Some(1088.0), Some(3505.0)).unwrap();
        assert_eq!(
            c.set,
            vec![
                "nvmlDeviceSetGpuLockedClocks(device 0, minGpuClockMHz 1088, maxGpuClockMHz 1088)",
                "nvmlDeviceSetMemoryLockedClocks(device 0, minMemClockMHz 3505, maxMemClockMHz 3505)"
            ]
        );
        assert_eq!(
            c.reset,
            vec![
                "nvmlDeviceResetGpuLockedClocks(device 0)",
                "nvmlDeviceResetMemoryLockedClocks(device 0)"
            ]
        );
        assert!(c.notes.iter().any(|n| n.contains("uid 1000")));
        // 1000 MHz lies in range but is not listed: accepted, nearest named
        let c = check_plan(&titanx(), Some(1000.0), None).unwrap();
        assert!(c.notes[0].contains("nearest supported: 1088 MHz"), "{c:?}");
    }

    #[test]
    fn out_of_range_is_refused_with_the_range() {
        // 1164 is supported at 3505 MHz memory, not at 810
        let e = check_plan(&titanx(), Some(1164.0), Some(810.0)).unwrap_err();
        assert!(e.to_string().contains("595..1088 MHz"), "{e}");
        let e = check_plan(&titanx(), Some(1300.0), None).unwrap_err();
        assert!(
            matches!(e, NvmlClockError::OutOfRange { max: 1164, .. }),
            "{e}"
        );
        let e = check_plan(&titanx(), None, Some(5000.0)).unwrap_err();
        assert!(e.to_string().contains("810..3505 MHz"), "{e}");
        let mut p = titanx();
        p.memory_clocks_mhz = Err("Not supported".into());
        let e = check_plan(&p, None, Some(810.0)).unwrap_err();
        assert!(matches!(e, NvmlClockError::Unreadable { .. }));
    }

    /// The module's own source calls no NVML setter (nvml-wrapper's `set_*`/`reset_*`).
    #[test]
    fn no_setter_is_called() {
        let src = include_str!("nvml_clocks.rs");
        let code = &src[..src.find("#[cfg(test)]").unwrap()];
        for bad in [".set_", ".reset_", "clear_"] {
            assert!(
                !code.contains(bad),
                "setter-like call `{bad}` in nvml_clocks.rs"
            );
        }
    }

    #[test]
    fn probe_on_this_machine_or_skip() {
        match probe(0) {
            Err(why) => println!("skipped: no NVIDIA GPU ({why})"),
            Ok(p) => {
                assert!(p.device_count >= 1);
                for l in p.lines() {
                    println!("{l}");
                }
                assert!(p.memory_clocks_mhz.is_ok() || !p.name.is_empty());
            }
        }
    }
}
