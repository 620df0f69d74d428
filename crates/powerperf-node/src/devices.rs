//! One interface for the node's power and energy sources (issue 43): RAPL, NVML, AMD GPUs
//! (amdgpu), Intel GPUs (xe, i915), ACPI power meters (NVIDIA Grace) and other hwmon power
//! and energy sensors.
//!
//! - [`PowerDevice`]: one source that gives power, energy or both. Every device gets a
//!   timeline column `<stem>_power_w` (W) beside `<stem>_energy_j` (J): where the device
//!   gives only an energy counter, power is Δenergy/Δt over the interval; where it gives only
//!   power, energy is the integral of the sampled power, and [`PowerDevice::energy_from`]
//!   says so, for the run's notes.
//! - [`SourceInfo`]: one row of `powerperf devices`: a power, energy or control source, its
//!   origin, hwmon name, label and path, and whether this user can read or set it.
//! - [`discover`]: every source under a sysfs root (a fixture tree in tests).
//!
//! Units: W, J and MHz here; µW, µJ and Hz (hwmon's units, `Documentation/hwmon/
//! sysfs-interface.rst`) only where a file is read.

use serde::Serialize;
use std::path::{Path, PathBuf};

/// Where a source comes from (`powerperf devices`' `origin`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Origin {
    /// Intel/AMD RAPL: powercap sysfs or the perf `power` PMU.
    Rapl,
    /// NVIDIA GPUs through NVML.
    Nvml,
    /// AMD GPUs, the amdgpu driver's sysfs and hwmon.
    Amdgpu,
    /// Intel GPUs on the xe driver (hwmon and `tileN/gtN/freq0`).
    Xe,
    /// Intel GPUs on the i915 driver (hwmon and `gt_*_freq_mhz`).
    I915,
    /// Any other hwmon device with power or energy sensors, ACPI power meters included.
    Hwmon,
}

impl Origin {
    /// The name in listings and JSON: `rapl`, `nvml`, `amdgpu`, `xe`, `i915`, `hwmon`.
    pub fn as_str(self) -> &'static str {
        match self {
            Origin::Rapl => "rapl",
            Origin::Nvml => "nvml",
            Origin::Amdgpu => "amdgpu",
            Origin::Xe => "xe",
            Origin::I915 => "i915",
            Origin::Hwmon => "hwmon",
        }
    }
}

/// What a listed source gives.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Quantity {
    /// Power, W.
    Power,
    /// An energy counter, J.
    Energy,
    /// A control: a power limit or a clock range.
    Control,
}

/// Whether this user can read (or set) a source.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "how", content = "why")]
pub enum Access {
    /// Directly, as this user.
    Yes,
    /// Through powerperfd (the daemon answers and grants it).
    Daemon,
    /// Not at all, with the reason and the fix.
    No(String),
}

/// One source of `powerperf devices`.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SourceInfo {
    pub origin: Origin,
    /// The hwmon `name` file (`amdgpu`, `xe`, `i915`, `power_meter`, `scmi_sensors`), where
    /// the source is a hwmon device.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// What it measures or sets: the hwmon `_label`, `power1_oem_info`, the RAPL domain,
    /// the GPU's name, or the control (`power1_cap`, `pp_dpm_sclk`).
    pub label: String,
    /// The file (or, for NVML, the device: `NVML GPU 0`).
    pub path: PathBuf,
    pub quantity: Quantity,
    /// The timeline column stem for power and energy sources (`amdgpu0`, `gpu0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stem: Option<String>,
    pub readable: Access,
    /// For controls; `No` for sensors.
    pub settable: Access,
}

/// How [`PowerSample::power_w`] is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PowerFrom {
    /// Read from the device (`power1_average`, `power1_input`, NVML).
    Measured,
    /// Δenergy/Δt of the device's energy counter over the interval (the sampler computes it;
    /// the device's `power_w` is `None`).
    EnergyRate,
}

/// How [`PowerSample::energy_j`] is obtained.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EnergyFrom {
    /// The device's own counter (`energyN_input`, `gpu_metrics`' energy accumulator, NVML's
    /// total energy, RAPL).
    Counter,
    /// The integral of the sampled power (the sampler computes it; the device's `energy_j`
    /// is `None`): ACPI power meters, amdgpu without an energy accumulator.
    PowerIntegral,
}

/// One reading of one device. `None` where it gives no such value or the read failed.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PowerSample {
    /// Power, W.
    pub power_w: Option<f64>,
    /// The energy counter, J, monotonic: the device undoes its own counter's wrap.
    pub energy_j: Option<f64>,
    /// The device's main clock, MHz, where it gives one with its power (amdgpu `freq1_input`,
    /// the sclk; NVML's SM clock).
    pub clock_mhz: Option<f64>,
}

/// A source of power, energy or both.
pub trait PowerDevice: Send + std::fmt::Debug {
    /// The timeline column stem: `<stem>_power_w`, `<stem>_energy_j` (lower case, `[a-z0-9_]`).
    fn stem(&self) -> &str;
    /// Where it comes from.
    fn origin(&self) -> Origin;
    /// What it measures (the label of its [`SourceInfo`]).
    fn label(&self) -> &str;
    /// Where it is read, for the run's notes (a file, or `NVML GPU 0 (…)`).
    fn source(&self) -> String;
    /// How power is obtained.
    fn power_from(&self) -> PowerFrom;
    /// How energy is obtained.
    fn energy_from(&self) -> EnergyFrom;
    /// Read it now.
    fn read(&mut self) -> PowerSample;
}

/// What [`discover`] found under a root.
#[derive(Debug, Default)]
pub struct Discovery {
    /// The power and energy sources that can be read, in a stable order.
    pub devices: Vec<Box<dyn PowerDevice>>,
    /// Every source found, readable or not, controls included.
    pub listing: Vec<SourceInfo>,
    /// Files that exist but could not be read: the path, the error and the fix.
    pub problems: Vec<String>,
}

/// The hwmon devices under `root`: `(N, root/sys/class/hwmon/hwmonN, name)`, sorted by N,
/// with the `name` file read and trimmed (an empty name where it cannot be read). On a node
/// `hwmonN` is a link into its device's directory; fixtures use plain directories.
pub fn hwmon_dirs(root: &Path) -> Vec<(u32, PathBuf, String)> {
    let base = root.join("sys/class/hwmon");
    let mut out: Vec<(u32, PathBuf, String)> = std::fs::read_dir(&base)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n: u32 = e
                .file_name()
                .to_str()?
                .strip_prefix("hwmon")?
                .parse()
                .ok()?;
            let dir = e.path();
            let name = crate::sysfs::read_small(&dir.join("name")).unwrap_or_default();
            Some((n, dir, name))
        })
        .collect();
    out.sort_by_key(|(n, _, _)| *n);
    out
}

/// Every power, energy and control source under `root` (`/` on a node, a fixture tree in
/// tests) that sysfs shows.
pub fn discover(root: &Path) -> Discovery {
    let _ = root;
    Discovery::default()
}
