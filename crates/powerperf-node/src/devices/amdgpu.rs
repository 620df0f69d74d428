//! AMD GPUs on the amdgpu driver (`Documentation/gpu/amdgpu/thermal.rst`): one device per
//! hwmon `amdgpu`, stem `amdgpu<k>` (k: its rank among the amdgpu hwmon devices, in hwmonN
//! order). Power from `power1_average`, else `power1_input` (µW; newer kernels give only
//! `power1_input` on some parts), sclk from `freq1_input` (Hz), energy from `gpu_metrics`'
//! `energy_accumulator` where the firmware fills it, else the integral of power.
//!
//! `gpu_metrics` is parsed here from the kernel's layout
//! (`drivers/gpu/drm/amd/include/kgd_pp_interface.h`): the header `{u16 structure_size, u8
//! format_revision, u8 content_revision}` (little endian), then per version:
//! - v1.1, v1.2, v1.3 (MI200 is v1.3): temperatures (6 × u16), activities (3 × u16),
//!   `average_socket_power` (u16), then the u64 `energy_accumulator` at byte 24;
//! - v1.4, v1.5 (MI300): hotspot/mem/vrsoc temperatures, `curr_socket_power`, two activities
//!   and `vcn_activity[4]` (u16 each), v1.5 also `jpeg_activity[32]`: `energy_accumulator` at
//!   byte 24 (v1.4) or 88 (v1.5).
//!
//! The unit is 2⁻¹⁶ J (15.259 µJ): the header says so for v1.4 and v1.5, and ROCm SMI's
//! `rsmi_dev_energy_count_get` gives the same 15.3 µJ resolution for MI200's v1.3. Every
//! other version (v1.0, whose u32 counter is not naturally aligned; the APUs' v2.x and v3.x,
//! which have no energy accumulator) is refused with a note, and energy is then the integral
//! of power. The crate `libdrm_amdgpu_sys` parses `gpu_metrics` only through a device handle
//! opened with libdrm (`LibDrmAmdgpu::new`, a `/dev/dri` render node), so it is not used:
//! these few bytes at fixed offsets need neither.

use super::hwmon::{Clock, EnergyFile, HwmonDevice};
use super::read::{read_u64, EnergyCounter};
use super::{Ctx, Origin, Quantity};
use std::path::{Path, PathBuf};

/// One unit of `energy_accumulator`, J (2⁻¹⁶ J = 15.259 µJ).
pub const ENERGY_UNIT_J: f64 = 1.0 / 65536.0;

/// The most bytes read from `gpu_metrics` (the largest v1.x table is under 1 KiB; sysfs
/// gives at most a page).
const MAX_GPU_METRICS: u64 = 4096;

/// The accepted versions (format, content) and their `energy_accumulator` offset, bytes.
const VERSIONS: [((u8, u8), usize); 5] = [
    ((1, 1), 24),
    ((1, 2), 24),
    ((1, 3), 24),
    ((1, 4), 24),
    ((1, 5), 88),
];

/// The energy accumulator of one `gpu_metrics` file.
#[derive(Debug, Clone, PartialEq)]
pub struct GpuMetricsEnergy {
    pub path: PathBuf,
    pub format_revision: u8,
    pub content_revision: u8,
    /// Byte offset of the u64 `energy_accumulator`.
    pub offset: usize,
}

/// Why a `gpu_metrics` file gives no energy counter.
#[derive(Debug, Clone, PartialEq)]
pub enum GpuMetricsRefusal {
    /// The file could not be read (the error, with the path).
    Unreadable(String),
    /// A version this parser does not know, or a table too short for its counter.
    Version(String),
    /// The firmware leaves the counter unfilled (0 or all ones).
    NoCounter,
}

impl GpuMetricsEnergy {
    /// Look at `path`'s header and counter.
    ///
    /// # Errors
    /// [`GpuMetricsRefusal`]: unreadable, an unknown version, or no counter.
    pub fn probe(path: &Path) -> Result<Self, GpuMetricsRefusal> {
        let bytes = read_bytes(path).map_err(GpuMetricsRefusal::Unreadable)?;
        let (version, offset) = version_of(path, &bytes).map_err(GpuMetricsRefusal::Version)?;
        let g = GpuMetricsEnergy {
            path: path.to_path_buf(),
            format_revision: version.0,
            content_revision: version.1,
            offset,
        };
        match g.counter_of(&bytes) {
            Ok(0) | Ok(u64::MAX) => Err(GpuMetricsRefusal::NoCounter),
            Ok(_) => Ok(g),
            Err(e) => Err(GpuMetricsRefusal::Version(e)),
        }
    }

    /// The raw counter now (units of [`ENERGY_UNIT_J`]).
    ///
    /// # Errors
    /// The file is unreadable, or its header changed to another version.
    pub fn read(&self) -> Result<u64, String> {
        let bytes = read_bytes(&self.path)?;
        let (version, _) = version_of(&self.path, &bytes)?;
        if version != (self.format_revision, self.content_revision) {
            return Err(format!(
                "{}: gpu_metrics changed from v{}.{} to v{}.{} (driver reloaded?)",
                self.path.display(),
                self.format_revision,
                self.content_revision,
                version.0,
                version.1
            ));
        }
        self.counter_of(&bytes)
    }

    fn counter_of(&self, bytes: &[u8]) -> Result<u64, String> {
        let b = bytes.get(self.offset..self.offset + 8).ok_or_else(|| {
            format!(
                "{}: {} bytes, too short for v{}.{}'s energy_accumulator at byte {}",
                self.path.display(),
                bytes.len(),
                self.format_revision,
                self.content_revision,
                self.offset
            )
        })?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Ok(u64::from_le_bytes(a))
    }
}

fn read_bytes(path: &Path) -> Result<Vec<u8>, String> {
    crate::safe_file::read_bounded(path, MAX_GPU_METRICS, "gpu_metrics file")
        .map_err(|e| format!("{e:#}"))
}

/// The version in `bytes`' header and the counter's offset, or why it is refused.
fn version_of(path: &Path, bytes: &[u8]) -> Result<((u8, u8), usize), String> {
    if bytes.len() < 4 {
        return Err(format!(
            "{}: {} bytes, shorter than gpu_metrics' 4-byte header",
            path.display(),
            bytes.len()
        ));
    }
    let size = u16::from_le_bytes([bytes[0], bytes[1]]) as usize;
    let version = (bytes[2], bytes[3]);
    let Some(&(_, offset)) = VERSIONS.iter().find(|(v, _)| *v == version) else {
        return Err(format!(
            "{}: gpu_metrics v{}.{} is not parsed (powerperf reads v1.1 to v1.5, the dGPU tables with an energy_accumulator); energy is the integral of power1_average",
            path.display(),
            version.0,
            version.1
        ));
    };
    if size < offset + 8 || bytes.len() < offset + 8 {
        return Err(format!(
            "{}: gpu_metrics v{}.{} says {size} bytes and has {}, too short for its energy_accumulator at byte {offset}",
            path.display(),
            version.0,
            version.1,
            bytes.len()
        ));
    }
    Ok((version, offset))
}

/// The amdgpu device of hwmon directory `dir` (the k-th amdgpu), and its control rows.
pub(crate) fn discover_one(ctx: &mut Ctx, index: usize, g: &super::GpuHwmon) {
    let (k, dir) = (g.rank, g.dir.as_path());
    let stem = ctx.unique_stem(format!("amdgpu{k}"));
    let dev = dir.join("device");
    let candidates: Vec<PathBuf> = ["power1_average", "power1_input"]
        .iter()
        .map(|f| dir.join(f))
        .filter(|p| p.symlink_metadata().is_ok())
        .collect();
    let power = super::hwmon::first_readable(&candidates);
    let label = super::hwmon::channel_label(dir, "power1")
        .map(|l| format!("AMD GPU {k} ({l})"))
        .unwrap_or_else(|| format!("AMD GPU {k}"));
    let clock = Some(dir.join("freq1_input"))
        .filter(|p| read_u64(p).is_ok())
        .map(Clock::Hz);
    let energy = energy_of(ctx, &stem, &dev.join("gpu_metrics"));
    let power_ok = match &power {
        Some(p) => {
            let r = ctx.check_read(p, read_u64);
            ctx.sensor_row(
                Origin::Amdgpu,
                "amdgpu",
                &label,
                p,
                Quantity::Power,
                &stem,
                &r,
            );
            r.is_ok()
        }
        None => {
            ctx.out.problems.push(format!(
                "{}: amdgpu without power1_average or power1_input: this driver or GPU gives no power reading; a newer kernel may",
                dir.display()
            ));
            false
        }
    };
    if let Some(EnergyFile::GpuMetrics(g)) = &energy {
        ctx.sensor_row(
            Origin::Amdgpu,
            "amdgpu",
            &label,
            &g.path,
            Quantity::Energy,
            &stem,
            &Ok(()),
        );
    }
    if power_ok || energy.is_some() {
        ctx.out.devices.push(Box::new(HwmonDevice {
            stem,
            origin: Origin::Amdgpu,
            label,
            power: power.filter(|_| power_ok),
            energy,
            clock,
            counter: EnergyCounter::default(),
            gpu: Some(index),
        }));
    }
    controls(ctx, dir, &dev);
}

fn energy_of(ctx: &mut Ctx, stem: &str, path: &Path) -> Option<EnergyFile> {
    if path.symlink_metadata().is_err() {
        return None;
    }
    match GpuMetricsEnergy::probe(path) {
        Ok(g) => Some(EnergyFile::GpuMetrics(g)),
        Err(GpuMetricsRefusal::Unreadable(e)) => {
            ctx.out.problems.push(format!(
                "{e}; {stem}'s energy is the integral of its power instead"
            ));
            None
        }
        Err(GpuMetricsRefusal::Version(e)) => {
            ctx.out.notes.push(format!("{stem}: {e}"));
            None
        }
        Err(GpuMetricsRefusal::NoCounter) => {
            ctx.out.notes.push(format!(
                "{stem}: {} has no energy_accumulator from this firmware (0 or all ones); energy is the integral of power",
                path.display()
            ));
            None
        }
    }
}

/// amdgpu's controls: `power1_cap` (µW, within `power1_cap_min`/`_max`), and the clocks
/// through `power_dpm_force_performance_level` (`manual`) with `pp_dpm_sclk`, or
/// `pp_od_clk_voltage` where present.
fn controls(ctx: &mut Ctx, dir: &Path, dev: &Path) {
    let cap = dir.join("power1_cap");
    if cap.symlink_metadata().is_ok() {
        let w = |f: &str| read_u64(&dir.join(f)).ok().map(|v| v as f64 * 1e-6);
        let label = match (w("power1_cap_min"), w("power1_cap_max")) {
            (Some(lo), Some(hi)) => format!("power1_cap, W ({lo}–{hi} W)"),
            _ => "power1_cap, W".to_string(),
        };
        ctx.control_row(
            Origin::Amdgpu,
            "amdgpu",
            &label,
            &cap,
            Some("gpu.power_limit"),
        );
    }
    for (f, what) in [
        (
            "power_dpm_force_performance_level",
            "power_dpm_force_performance_level (auto, manual, …)",
        ),
        ("pp_dpm_sclk", "pp_dpm_sclk (sclk levels, MHz)"),
        ("pp_od_clk_voltage", "pp_od_clk_voltage (sclk range, MHz)"),
    ] {
        let p = dev.join(f);
        if p.symlink_metadata().is_ok() {
            ctx.control_row(
                Origin::Amdgpu,
                "amdgpu",
                what,
                &p,
                Some("gpu.locked_clocks"),
            );
        }
    }
}
