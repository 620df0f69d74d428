//! hwmon power and energy sensors (`Documentation/hwmon/sysfs-interface.rst`): one
//! [`HwmonDevice`] per channel (`energyN_input` µJ, `powerN_average` or `powerN_input` µW),
//! or per GPU for amdgpu (power, sclk and the `gpu_metrics` energy accumulator together).
//! The generic scan here covers ACPI power meters (`power_meter`, whose attributes sit in
//! `hwmonN/device/`), Intel GPUs' energy channels (xe, i915) and any other hwmon device with
//! power or energy channels (`scmi_sensors`, …); temperature-only devices are not sources.

use super::amdgpu::GpuMetricsEnergy;
use super::read::{read_text, read_u64, EnergyCounter};
use super::{Ctx, EnergyFrom, Origin, PowerDevice, PowerFrom, PowerSample, Quantity};
use std::path::{Path, PathBuf};

/// Where a device's energy counter is.
#[derive(Debug, Clone)]
pub(crate) enum EnergyFile {
    /// hwmon `energyN_input`, µJ.
    Microjoules(PathBuf),
    /// amdgpu `gpu_metrics`' `energy_accumulator`.
    GpuMetrics(GpuMetricsEnergy),
}

/// Where a GPU device's clock is read.
#[derive(Debug, Clone)]
pub(crate) enum Clock {
    /// hwmon `freqN_input`, Hz (amdgpu's sclk).
    Hz(PathBuf),
    /// The actual GT frequency, MHz (xe `freq0/act_freq`, i915 `gt_act_freq_mhz`); 0 means
    /// the GT is asleep (RC6) and gives no value.
    ActualMhz(PathBuf),
}

impl Clock {
    /// The clock now, MHz; `None` where the read fails or an actual frequency is 0.
    fn read_mhz(&self) -> Option<f64> {
        match self {
            Clock::Hz(p) => read_u64(p).ok().map(|hz| hz as f64 * 1e-6),
            Clock::ActualMhz(p) => read_u64(p)
                .ok()
                .filter(|mhz| *mhz > 0)
                .map(|mhz| mhz as f64),
        }
    }

    fn describe(&self) -> String {
        match self {
            Clock::Hz(p) => format!("clock {} (Hz)", p.display()),
            Clock::ActualMhz(p) => format!(
                "clock {} (MHz, the actual GT frequency; 0, a GT asleep in RC6, is no value)",
                p.display()
            ),
        }
    }
}

/// What a GPU's devices carry besides power and energy ([`channel_devices`]).
#[derive(Debug, Clone)]
pub(crate) struct GpuOf {
    /// The GPU's index among the sysfs GPUs ([`super::gpu_hwmons`]).
    pub index: usize,
    /// Its clock, read by its first device.
    pub clock: Option<Clock>,
}

/// One hwmon power or energy source (a channel, or an amdgpu GPU).
#[derive(Debug)]
pub struct HwmonDevice {
    pub(crate) stem: String,
    pub(crate) origin: Origin,
    pub(crate) label: String,
    /// `powerN_average` / `powerN_input`, µW.
    pub(crate) power: Option<PathBuf>,
    pub(crate) energy: Option<EnergyFile>,
    /// The GPU's clock: amdgpu's sclk, xe's and i915's actual GT frequency.
    pub(crate) clock: Option<Clock>,
    pub(crate) counter: EnergyCounter,
    /// The AMD or Intel GPU it measures ([`PowerDevice::sysfs_gpu`]).
    pub(crate) gpu: Option<usize>,
}

impl PowerDevice for HwmonDevice {
    fn stem(&self) -> &str {
        &self.stem
    }
    fn origin(&self) -> Origin {
        self.origin
    }
    fn label(&self) -> &str {
        &self.label
    }
    fn source(&self) -> String {
        let mut parts = Vec::new();
        if let Some(p) = &self.power {
            parts.push(format!("power {} (µW)", p.display()));
        }
        match &self.energy {
            Some(EnergyFile::Microjoules(p)) => parts.push(format!("energy {} (µJ)", p.display())),
            Some(EnergyFile::GpuMetrics(g)) => parts.push(format!(
                "energy {} (gpu_metrics v{}.{} energy_accumulator, 15.259 µJ units)",
                g.path.display(),
                g.format_revision,
                g.content_revision
            )),
            None => parts.push("energy: the integral of the sampled power".into()),
        }
        if let Some(c) = &self.clock {
            parts.push(c.describe());
        }
        parts.join("; ")
    }
    fn power_from(&self) -> PowerFrom {
        if self.power.is_some() {
            PowerFrom::Measured
        } else {
            PowerFrom::EnergyRate
        }
    }
    fn energy_from(&self) -> EnergyFrom {
        if self.energy.is_some() {
            EnergyFrom::Counter
        } else {
            EnergyFrom::PowerIntegral
        }
    }
    fn read(&mut self) -> PowerSample {
        let power_w = self
            .power
            .as_deref()
            .and_then(|p| read_u64(p).ok())
            .map(|uw| uw as f64 * 1e-6);
        let raw = match &self.energy {
            Some(EnergyFile::Microjoules(p)) => read_u64(p).ok().map(|v| (v, 1e-6)),
            Some(EnergyFile::GpuMetrics(g)) => {
                g.read().ok().map(|v| (v, super::amdgpu::ENERGY_UNIT_J))
            }
            None => None,
        };
        let energy_j = raw.map(|(v, unit)| self.counter.update(v, unit));
        let clock_mhz = self.clock.as_ref().and_then(Clock::read_mhz);
        PowerSample {
            power_w,
            energy_j,
            clock_mhz,
        }
    }
    fn counter_resets(&self) -> u64 {
        self.counter.resets()
    }
    fn sysfs_gpu(&self) -> Option<usize> {
        self.gpu
    }
    fn has_clock(&self) -> bool {
        self.clock.is_some()
    }
}

/// `s` as a stem part: lower case, `[a-z0-9_]`, runs of anything else one `_`, at most 24
/// characters.
pub(crate) fn stem_part(s: &str) -> String {
    let mut out = String::new();
    for c in s.chars().flat_map(char::to_lowercase) {
        if c.is_ascii_alphanumeric() {
            out.push(c);
        } else if !out.ends_with('_') && !out.is_empty() {
            out.push('_');
        }
    }
    let mut out: String = out.trim_end_matches('_').chars().take(24).collect();
    while out.ends_with('_') {
        out.pop();
    }
    out
}

/// A power or energy channel of a hwmon directory.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct Channel {
    pub quantity: Quantity,
    /// `energy1`, `power2`.
    pub prefix: String,
    /// The file read: `energy1_input`, `power1_average` (preferred) or `power1_input`.
    pub file: PathBuf,
}

/// The first of `candidates` that holds a number, else the first (whose error the caller
/// reports): a driver may list `power1_average` and fail to read it (`EOPNOTSUPP`) where
/// `power1_input` works.
pub(crate) fn first_readable(candidates: &[PathBuf]) -> Option<PathBuf> {
    candidates
        .iter()
        .find(|p| read_u64(p).is_ok())
        .or(candidates.first())
        .cloned()
}

/// The power and energy channels in `dir`, in (quantity, N) order: `energyN_input`, and
/// `powerN_average` else `powerN_input` (the first that reads, [`first_readable`]).
pub(crate) fn channels(dir: &Path) -> Vec<Channel> {
    let mut found: Vec<(u8, u32, String, PathBuf)> = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        let Some((prefix, suffix)) = name.split_once('_') else {
            continue;
        };
        let kind = match (
            prefix.trim_end_matches(|c: char| c.is_ascii_digit()),
            suffix,
        ) {
            ("energy", "input") => 0u8,
            ("power", "average" | "input") => 1,
            _ => continue,
        };
        let Ok(n) = prefix
            .trim_start_matches(|c: char| !c.is_ascii_digit())
            .parse::<u32>()
        else {
            continue;
        };
        found.push((kind, n, suffix.to_string(), e.path()));
    }
    found.sort_by_key(|a| (a.0, a.1, a.2 != "average"));
    let mut groups: Vec<(u8, u32, Vec<PathBuf>)> = Vec::new();
    for (kind, n, _, file) in found {
        match groups.last_mut() {
            Some(g) if g.0 == kind && g.1 == n => g.2.push(file),
            _ => groups.push((kind, n, vec![file])),
        }
    }
    groups
        .into_iter()
        .filter_map(|(kind, n, files)| Some((kind, n, first_readable(&files)?)))
        .map(|(kind, n, file)| Channel {
            quantity: if kind == 0 {
                Quantity::Energy
            } else {
                Quantity::Power
            },
            prefix: format!("{}{n}", if kind == 0 { "energy" } else { "power" }),
            file,
        })
        .collect()
}

/// The `_label` of a channel, where the driver gives one.
pub(crate) fn channel_label(dir: &Path, prefix: &str) -> Option<String> {
    read_text(&dir.join(format!("{prefix}_label")))
        .ok()
        .filter(|l| !l.is_empty())
}

/// One device per channel of a hwmon directory: xe, i915, power meters and other hwmon
/// sensors. `stem_of(channel, label)` names it. For a GPU (`gpu`), every device says which
/// GPU it measures and the first one reads its clock.
pub(crate) fn channel_devices(
    ctx: &mut Ctx,
    origin: Origin,
    name: &str,
    dir: &Path,
    stem_of: &dyn Fn(&Channel, Option<&str>) -> String,
    label_of: &dyn Fn(&Channel, Option<&str>) -> String,
    gpu: Option<GpuOf>,
) {
    let index = gpu.as_ref().map(|g| g.index);
    let mut clock = gpu.and_then(|g| g.clock);
    for ch in channels(dir) {
        let label = channel_label(dir, &ch.prefix);
        let stem = ctx.unique_stem(stem_of(&ch, label.as_deref()));
        let label = label_of(&ch, label.as_deref());
        let readable = ctx.check_read(&ch.file, read_u64);
        let (power, energy) = match ch.quantity {
            Quantity::Energy => (None, Some(EnergyFile::Microjoules(ch.file.clone()))),
            _ => (Some(ch.file.clone()), None),
        };
        ctx.sensor_row(
            origin,
            name,
            &label,
            &ch.file,
            ch.quantity,
            &stem,
            &readable,
        );
        if readable.is_ok() {
            ctx.out.devices.push(Box::new(HwmonDevice {
                stem,
                origin,
                label,
                power,
                energy,
                clock: clock.take(),
                counter: EnergyCounter::default(),
                gpu: index,
            }));
        }
    }
}

/// An ACPI power meter (`power_meter`, NVIDIA Grace's Module/Grace/CPU/SysIO meters): the
/// acpi_power_meter driver puts `power1_average` (µW) and `power1_oem_info` in
/// `hwmonN/device/`; energy is the integral of power. Stem `power_meter<k>_<first word of
/// power1_oem_info>` (`power_meter0_module`).
pub(crate) fn power_meter(ctx: &mut Ctx, k: usize, dir: &Path) {
    let dev = dir.join("device");
    let file = [dev.join("power1_average"), dir.join("power1_average")]
        .into_iter()
        .find(|p| p.symlink_metadata().is_ok());
    let Some(file) = file else {
        ctx.out.problems.push(format!(
            "{}: a power_meter without power1_average (in {} or {}): the ACPI firmware gives no reading; check `dmesg | grep -i power_meter`",
            dir.display(),
            dev.display(),
            dir.display()
        ));
        return;
    };
    let oem = read_text(&dev.join("power1_oem_info"))
        .ok()
        .filter(|s| !s.is_empty());
    let word = oem
        .as_deref()
        .and_then(|s| s.split_whitespace().next())
        .map(stem_part)
        .unwrap_or_default();
    let stem = if word.is_empty() {
        format!("power_meter{k}")
    } else {
        format!("power_meter{k}_{word}")
    };
    let stem = ctx.unique_stem(stem);
    let label = oem.unwrap_or_else(|| format!("power_meter {k} power1_average"));
    let readable = ctx.check_read(&file, read_u64);
    ctx.sensor_row(
        Origin::Hwmon,
        "power_meter",
        &label,
        &file,
        Quantity::Power,
        &stem,
        &readable,
    );
    if readable.is_ok() {
        ctx.out.devices.push(Box::new(HwmonDevice {
            stem,
            origin: Origin::Hwmon,
            label,
            power: Some(file),
            energy: None,
            clock: None,
            counter: EnergyCounter::default(),
            gpu: None,
        }));
    }
}
