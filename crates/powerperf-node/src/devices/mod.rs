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
//! - [`Meter`]: the one integrator of a device's readings (power and energy per interval,
//!   energy since an origin; its rules for a failed read, a counter that steps back and
//!   Δt = 0), used by `collect` and powerperfd alike.
//!
//! Units: W, J and MHz here; µW, µJ and Hz (hwmon's units, `Documentation/hwmon/
//! sysfs-interface.rst`) only where a file is read.

use serde::Serialize;
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

mod access;
mod amdgpu;
mod hwmon;
mod intel;
mod meter;
mod nvml;
mod read;
#[cfg(test)]
mod tests;

pub use amdgpu::{GpuMetricsEnergy, GpuMetricsRefusal, ENERGY_UNIT_J};
pub use hwmon::HwmonDevice;
pub(crate) use intel::{i915_freq_dir, xe_freq_dirs};
pub use meter::{Interval, Meter};
pub use nvml::{nvml_devices, NvmlDevice};
pub use read::EnergyCounter;

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

    /// The origin of a GPU driver's hwmon `name`: `amdgpu`, `xe`, `i915`; `None` for any
    /// other name.
    pub fn of_gpu_driver(name: &str) -> Option<Origin> {
        match name {
            "amdgpu" => Some(Origin::Amdgpu),
            "xe" => Some(Origin::Xe),
            "i915" => Some(Origin::I915),
            _ => None,
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
    /// Through powerperfd: it answers, and its policy grants this user that reading or
    /// control (its `access` request); or it answers and is older than `access` (a note
    /// says so).
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
    /// The energy counter, J, monotonic: the device undoes its own counter's wrap. It starts
    /// at the counter's own value (J since the driver's origin, not since the run), so only
    /// differences between samples mean anything ([`EnergyCounter`] says how a step
    /// backwards is handled).
    pub energy_j: Option<f64>,
    /// The device's main clock, MHz, where it gives one with its power (amdgpu `freq1_input`,
    /// the sclk; xe `tile0/gt0/freq0/act_freq`; i915 `gt_act_freq_mhz`; NVML's SM clock).
    /// `None` also where the GPU reports 0 MHz for a GT asleep in RC6 (xe, i915).
    pub clock_mhz: Option<f64>,
}

/// A value of a [`PowerSample`] that can be used: finite and non-negative (NaN, an infinity
/// or a negative power or energy is no value). The timeline, powerperfd's `read_power` and
/// its metrics all apply it.
pub fn usable(x: Option<f64>) -> Option<f64> {
    x.filter(|v| v.is_finite() && *v >= 0.0)
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
    /// How many times its energy counter went backwards since it was made (a driver reload,
    /// a reset, a wrap; each such interval adds no energy, [`EnergyCounter`]), for the run's
    /// notes. 0 for a device without a counter.
    fn counter_resets(&self) -> u64 {
        0
    }
    /// The AMD or Intel GPU this device measures: its index among the sysfs GPUs of the
    /// root ([`gpu_hwmons`]' order, the order `gpu_control::sysfs::SysfsGpus` numbers them
    /// in, after NVML's GPUs); `None` for any other device.
    fn sysfs_gpu(&self) -> Option<usize> {
        None
    }
    /// Whether it has a clock to read ([`PowerSample::clock_mhz`]), even where one reading
    /// gives none (an xe or i915 GT asleep at that moment reads 0 MHz: no value).
    fn has_clock(&self) -> bool {
        false
    }
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
    /// What the run should say but is no fault: NVML absent (one line, why), no RAPL here,
    /// a `gpu_metrics` version not parsed (energy is then the integral of power).
    pub notes: Vec<String>,
}

/// The hwmon devices under `root`: `(N, root/sys/class/hwmon/hwmonN, name)`, sorted by N,
/// with the `name` file read and trimmed (an empty name where it cannot be read). On a node
/// `hwmonN` is a link into its device's directory; fixtures use plain directories.
pub fn hwmon_dirs(root: &Path) -> Vec<(u32, PathBuf, String)> {
    crate::sysfs::numbered_entries(&root.join("sys/class/hwmon"), "hwmon")
        .into_iter()
        .map(|(n, dir)| {
            let name = crate::sysfs::read_small(&dir.join("name")).unwrap_or_default();
            (n, dir, name)
        })
        .collect()
}

/// The hwmon directory of an AMD or Intel GPU (one that `gpu_control::sysfs::SysfsGpus`
/// controls and [`discover`] reads).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GpuHwmon {
    /// [`Origin::Amdgpu`], [`Origin::Xe`] or [`Origin::I915`].
    pub origin: Origin,
    /// Its rank among the hwmon directories of the same driver, in hwmonN order: the `k`
    /// of its stems (`amdgpu<k>`, `xe<k>_card`, `i915_<k>`).
    pub rank: usize,
    /// `root/sys/class/hwmon/hwmonN`.
    pub dir: PathBuf,
}

/// The AMD and Intel GPUs under `root`: the hwmon directories named `amdgpu`, `xe` or
/// `i915`, in hwmonN order. The one order both the GPU controls (GPU `n + i` for the i-th,
/// `n` being NVML's count) and the power devices ([`PowerDevice::sysfs_gpu`]) use, so a
/// node GPU index maps to the timeline columns of its device ([`gpu_stems`]).
pub fn gpu_hwmons(root: &Path) -> Vec<GpuHwmon> {
    gpu_hwmons_in(&hwmon_dirs(root))
}

/// [`gpu_hwmons`] of a listing of [`hwmon_dirs`].
fn gpu_hwmons_in(dirs: &[(u32, PathBuf, String)]) -> Vec<GpuHwmon> {
    let mut rank: BTreeMap<Origin, usize> = BTreeMap::new();
    dirs.iter()
        .filter_map(|(_, dir, name)| {
            let origin = Origin::of_gpu_driver(name)?;
            let r = rank.entry(origin).or_default();
            let g = GpuHwmon {
                origin,
                rank: *r,
                dir: dir.clone(),
            };
            *r += 1;
            Some(g)
        })
        .collect()
}

/// For each GPU of [`gpu_hwmons`] (the same index), the stem of its power device whose
/// columns collect records (`<stem>_power_w`, `<stem>_clock_mhz`): the device that reads
/// its clock, else its first device; `None` where it has no readable device. Found by the
/// same discovery collect makes ([`discover_with`] without NVML and without asking
/// powerperfd), so the stems are the timeline's.
pub fn gpu_stems(root: &Path) -> Vec<Option<String>> {
    let n = gpu_hwmons(root).len();
    let d = discover_with(
        root,
        DiscoverOptions {
            nvml: false,
            probe_daemon: false,
        },
    );
    (0..n)
        .map(|i| {
            let of: Vec<&dyn PowerDevice> = d
                .devices
                .iter()
                .map(|x| x.as_ref())
                .filter(|x| x.sysfs_gpu() == Some(i))
                .collect();
            of.iter()
                .find(|x| x.has_clock())
                .or(of.first())
                .map(|x| x.stem().to_string())
        })
        .collect()
}

/// What [`discover_with`] looks at besides the sysfs root.
#[derive(Debug, Clone, Copy)]
pub struct DiscoverOptions {
    /// Open NVML (the node's NVIDIA driver, whatever the root) and list its GPUs.
    pub nvml: bool,
    /// Ask powerperfd (`$POWERPERF_DAEMON`, else the default socket) what it grants this
    /// user (its `access` request), to say [`Access::Daemon`] where this user cannot read or
    /// set a source himself and the daemon's policy grants that reading or control.
    /// powerperfd itself and `collect` pass `false`.
    pub probe_daemon: bool,
}

impl Default for DiscoverOptions {
    fn default() -> Self {
        DiscoverOptions {
            nvml: true,
            probe_daemon: true,
        }
    }
}

/// Every power, energy and control source under `root` (`/` on a node, a fixture tree in
/// tests) that sysfs shows, with NVML's GPUs, and whether powerperfd answers here: RAPL
/// domains (listed; `collect` reads them itself), NVML GPUs (only what NVML can read:
/// stem `gpu<i>`), then the hwmon devices in `hwmonN` order: amdgpu (`amdgpu<k>`), xe
/// (`xe<k>_<label>`), i915 (`i915_<k>`), ACPI power meters (`power_meter<k>_<word>`) and any
/// other hwmon with `energyN_input`, `powerN_average` or `powerN_input`
/// (`<name><k>_<label>`). docs/run-format.md gives the stem rule.
pub fn discover(root: &Path) -> Discovery {
    discover_with(root, DiscoverOptions::default())
}

/// [`discover`] with [`DiscoverOptions`].
pub fn discover_with(root: &Path, opts: DiscoverOptions) -> Discovery {
    let mut ctx = Ctx {
        out: Discovery::default(),
        stems: BTreeSet::new(),
        daemon: if opts.probe_daemon {
            access::probe()
        } else {
            access::DaemonView::Absent
        },
    };
    if let Some(n) = ctx.daemon.note() {
        ctx.out.notes.push(n);
    }
    rapl_rows(&mut ctx, root);
    if opts.nvml {
        nvml::rows(&mut ctx);
    }
    let dirs = hwmon_dirs(root);
    let gpus = gpu_hwmons_in(&dirs);
    let mut rank: BTreeMap<String, usize> = BTreeMap::new();
    for (_, dir, name) in dirs {
        if let Some((i, g)) = gpus.iter().enumerate().find(|(_, g)| g.dir == dir) {
            match g.origin {
                Origin::Amdgpu => amdgpu::discover_one(&mut ctx, i, g),
                Origin::Xe => intel::discover_xe(&mut ctx, i, g),
                _ => intel::discover_i915(&mut ctx, i, g),
            }
            continue;
        }
        let r = rank.entry(name.clone()).or_default();
        let k = *r;
        *r += 1;
        match name.as_str() {
            "power_meter" => hwmon::power_meter(&mut ctx, k, &dir),
            "" => ctx.out.problems.push(format!(
                "{}: cannot read its `name`, so its sensors are not listed; check the file's permissions",
                dir.join("name").display()
            )),
            other => {
                let base = Some(hwmon::stem_part(other))
                    .filter(|s| !s.is_empty())
                    .unwrap_or_else(|| "hwmon".into());
                hwmon::channel_devices(
                    &mut ctx,
                    Origin::Hwmon,
                    other,
                    &dir,
                    &|ch, label| {
                        let part = label
                            .map(hwmon::stem_part)
                            .filter(|s| !s.is_empty())
                            .unwrap_or_else(|| ch.prefix.clone());
                        format!("{base}{k}_{part}")
                    },
                    &|ch, label| {
                        label.map(str::to_string).unwrap_or_else(|| {
                            ch.file
                                .file_name()
                                .map(|f| f.to_string_lossy().into_owned())
                                .unwrap_or_default()
                        })
                    },
                    None,
                );
            }
        }
    }
    ctx.out
}

/// RAPL's domains as listing rows (no stem: their columns are `energy_<domain>_j`).
fn rapl_rows(ctx: &mut Ctx, root: &Path) {
    let r = crate::rapl::discover(root);
    for d in &r.domains {
        ctx.out.listing.push(SourceInfo {
            origin: Origin::Rapl,
            name: None,
            label: d.name.clone(),
            path: d.energy_path.clone(),
            quantity: Quantity::Energy,
            stem: None,
            readable: Access::Yes,
            settable: Access::No(NOT_A_CONTROL.into()),
        });
    }
    for u in &r.unreadable {
        ctx.out
            .problems
            .push(format!("RAPL {}: {}", u.name, u.reason));
        // powerperfd's `read_energy` gives these counters (signal `energy`)
        let readable = ctx.daemon.read("energy", &u.reason);
        ctx.out.listing.push(SourceInfo {
            origin: Origin::Rapl,
            name: None,
            label: u.name.clone(),
            path: root.join("sys/class/powercap"),
            quantity: Quantity::Energy,
            stem: None,
            readable,
            settable: Access::No(NOT_A_CONTROL.into()),
        });
    }
    if let Some(why) = r.absent_reason {
        ctx.out.notes.push(why);
    }
}

/// `settable` of a sensor.
const NOT_A_CONTROL: &str = "a sensor: nothing to set";

/// What [`discover_with`] builds, and the rules every reader follows.
pub(crate) struct Ctx {
    pub out: Discovery,
    stems: BTreeSet<String>,
    daemon: access::DaemonView,
}

impl Ctx {
    /// `want`, or `want_2`, `want_3`, … where another device has it.
    pub fn unique_stem(&mut self, want: String) -> String {
        let mut stem = want.clone();
        let mut n = 2;
        while self.stems.contains(&stem) {
            stem = format!("{want}_{n}");
            n += 1;
        }
        self.stems.insert(stem.clone());
        stem
    }

    /// Read `path` once with `f`; an error goes to `problems` (it names the path and the fix).
    pub fn check_read<T>(
        &mut self,
        path: &Path,
        f: impl Fn(&Path) -> Result<T, String>,
    ) -> Result<(), String> {
        f(path)
            .map(|_| ())
            .inspect_err(|e| self.out.problems.push(e.clone()))
    }

    /// A power or energy source's row.
    #[allow(clippy::too_many_arguments)]
    pub fn sensor_row(
        &mut self,
        origin: Origin,
        name: &str,
        label: &str,
        path: &Path,
        quantity: Quantity,
        stem: &str,
        readable: &Result<(), String>,
    ) {
        // powerperfd's `read_power` reads the sysfs power devices (signal `power`)
        let readable = match readable {
            Ok(()) => Access::Yes,
            Err(e) => self.daemon.read("power", e),
        };
        self.out.listing.push(SourceInfo {
            origin,
            name: Some(name.to_string()),
            label: label.to_string(),
            path: path.to_path_buf(),
            quantity,
            stem: Some(stem.to_string()),
            readable,
            settable: Access::No(NOT_A_CONTROL.into()),
        });
    }

    /// A control's row: readable when its text reads (powerperfd returns no control's
    /// value, so never `daemon`), settable when this user may write it (`faccessat(W_OK)`),
    /// else through powerperfd when its policy grants this user `grant`; `grant` `None`: a
    /// file powerperfd's GPU controls do not write (xe's `power2_max`, an i915 card after
    /// the first), never `daemon`.
    pub fn control_row(
        &mut self,
        origin: Origin,
        name: &str,
        label: &str,
        path: &Path,
        grant: Option<&str>,
    ) {
        let r = self.check_read(path, read::read_text);
        let readable = match r {
            Ok(()) => Access::Yes,
            Err(e) => Access::No(e),
        };
        let settable = if read::may(path, libc::W_OK) {
            Access::Yes
        } else if let Some(grant) = grant {
            self.daemon.set(grant, path)
        } else {
            Access::No(format!(
                "{} is writable by root only, and powerperfd's GPU controls do not write it (docs/cluster.md, \"AMD and Intel GPUs\"): run as root",
                path.display()
            ))
        };
        self.out.listing.push(SourceInfo {
            origin,
            name: Some(name.to_string()),
            label: label.to_string(),
            path: path.to_path_buf(),
            quantity: Quantity::Control,
            stem: None,
            readable,
            settable,
        });
    }
}
