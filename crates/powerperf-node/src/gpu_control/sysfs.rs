//! GPU controls of AMD and Intel GPUs through their drivers' sysfs files (issue 43, items
//! 2–3): the `hwmon` directories named `amdgpu`, `xe` and `i915` under a sysfs root
//! ([`crate::devices::hwmon_dirs`]), GPU `first + i` for the i-th of them in hwmon order.
//!
//! | control | amdgpu | xe | i915 |
//! |---|---|---|---|
//! | power limit (µW) | `hwmonN/power1_cap` within `[power1_cap_min, power1_cap_max]`, whole watts | `hwmonN/power1_max` within `(0, power1_rated_max]` | as xe |
//! | locked clocks (MHz) | `device/power_dpm_force_performance_level` = `manual`, then `device/pp_dpm_sclk` = the level indices in `[min, max]` (both ends listed levels), or where `device/pp_od_clk_voltage` has an `OD_SCLK` table, `s 0 MIN`, `s 1 MAX`, `c` to it ([`od`]) | `device/tileT/gtG/freq0/{min,max}_freq` of every gt within `[rpn_freq, rp0_freq]` | `device/drm/cardC/gt_{min,max}_freq_mhz` within `[gt_RPn_freq_mhz, gt_RP0_freq_mhz]` |
//! | memory clock | refused ([`GpuControlError::NoMemLock`]) | refused | refused |
//!
//! Sources: amdgpu `Documentation/gpu/amdgpu/thermal.rst` (`power1_cap`: "the selected
//! power cap in microWatts", `power1_cap_min`/`_max`; `power_dpm_force_performance_level`;
//! `pp_dpm_sclk`: "echo "4 5 6" > pp_dpm_sclk" after `manual`); the driver divides a
//! `power1_cap` write by 1,000,000 (`amdgpu_hwmon_set_power_cap`, "convert to Watt"), so a
//! cap that is not whole watts is refused rather than truncated. xe and i915:
//! `Documentation/ABI/testing/sysfs-driver-intel-{xe,i915}-hwmon` (`power1_max`: "writing 0
//! disables the limit. Writing values > 0 and <= TDP will enable the power limit";
//! `power1_rated_max`: the card's default power limit, TDP): hence `(0, power1_rated_max]`,
//! 0 excluded because it switches the limit off; a saved 0 (the limit was off) is put back
//! as 0. xe gt frequencies: `Documentation/ABI/testing/sysfs-driver-intel-xe-gt`-style
//! `freq0/{min,max,rpn,rp0}_freq` (MHz); i915: `gt_{min,max,RPn,RP0}_freq_mhz` (MHz).
//!
//! As root (powerperfd): the hwmon and device directories are resolved once at open and must
//! lie under the sysfs root; every file is opened `O_NOFOLLOW|O_NONBLOCK`, checked with
//! `fstat` to be a regular file, read up to 4,096 bytes (a sysfs attribute's page); every
//! number is checked before it is written, written as the decimal checked, and read back.
//! Restores write the values read before the change, checked against the device
//! ([`GpuControl::validate`]), so a stale or forged journal entry cannot write an arbitrary
//! value.

use super::{check_clock_list, GpuControl, GpuControlError, GpuKnob, GpuSaved, SysfsSaved};
use crate::sysfs::MAX_ATTR;
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// amdgpu's `power_dpm_force_performance_level` values (thermal.rst).
pub const AMD_PERF_LEVELS: [&str; 9] = [
    "auto",
    "low",
    "high",
    "manual",
    "profile_standard",
    "profile_min_sclk",
    "profile_min_mclk",
    "profile_peak",
    "perf_determinism",
];
/// The most `pp_dpm_sclk` levels accepted (the driver lists at most 16 on current ASICs).
const MAX_LEVELS: usize = 32;

/// Which driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Driver {
    Amdgpu,
    Xe,
    I915,
}

impl Driver {
    /// The hwmon `name`.
    pub fn name(self) -> &'static str {
        match self {
            Driver::Amdgpu => "amdgpu",
            Driver::Xe => "xe",
            Driver::I915 => "i915",
        }
    }
    fn cap_file(self) -> &'static str {
        match self {
            Driver::Amdgpu => "power1_cap",
            Driver::Xe | Driver::I915 => "power1_max",
        }
    }
}

/// One GPU found under the root.
#[derive(Debug, Clone)]
pub struct Card {
    pub driver: Driver,
    /// `sys/class/hwmon/hwmonN`, resolved.
    pub hwmon: PathBuf,
    /// Where the frequency files are: xe's `freq0` directories (every gt), i915's
    /// `drm/cardC`; empty for amdgpu (its files are in `hwmonN/device`).
    pub freq_dirs: Vec<PathBuf>,
    /// `hwmonN/device`, resolved.
    pub device: PathBuf,
    /// amdgpu: `device/pp_od_clk_voltage` had an `OD_SCLK` table at open, so the clocks
    /// are set through it ([`od`]) rather than `pp_dpm_sclk`'s levels.
    pub od: bool,
}

/// The AMD and Intel GPUs under a sysfs root.
#[derive(Debug, Clone)]
pub struct SysfsGpus {
    root: PathBuf,
    first: u32,
    cards: Vec<Card>,
}

/// A `pp_dpm_sclk` level: index and clock, MHz.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Level {
    pub index: u32,
    pub mhz: u32,
}

/// Parse `pp_dpm_sclk` (`N: FMhz`, the current one marked `*`; a deep-sleep line `S: …`
/// has no index and is skipped).
///
/// # Errors
/// A line that is neither, or no level: the text is named.
pub fn parse_dpm_levels(text: &str) -> Result<Vec<Level>, String> {
    let mut out = Vec::new();
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        let Some((i, rest)) = line.split_once(':') else {
            return Err(format!("`{line}` is not `N: <clock>Mhz`"));
        };
        let Ok(index) = i.trim().parse::<u32>() else {
            if i.trim().chars().all(|c| c.is_ascii_alphabetic()) {
                continue; // `S:` (deep sleep), not a level that can be selected
            }
            return Err(format!("`{line}`: `{i}` is not a level index"));
        };
        let f = rest.trim().trim_end_matches('*').trim();
        let mhz = f
            .strip_suffix("Mhz")
            .or_else(|| f.strip_suffix("MHz"))
            .and_then(|n| n.trim().parse::<u32>().ok())
            .ok_or_else(|| format!("`{line}`: `{f}` is not `<clock>Mhz`"))?;
        if usize::try_from(index).ok() != Some(out.len()) {
            return Err(format!("`{line}`: level {index} out of order"));
        }
        out.push(Level { index, mhz });
    }
    if out.is_empty() || out.len() > MAX_LEVELS {
        return Err(format!("{} levels (expected 1..={MAX_LEVELS})", out.len()));
    }
    Ok(out)
}

fn under(root: &Path, p: &Path) -> Result<PathBuf, String> {
    let c = p
        .canonicalize()
        .map_err(|e| format!("{}: {e}", p.display()))?;
    if c.starts_with(root) {
        Ok(c)
    } else {
        Err(format!(
            "{} resolves to {}, outside the sysfs root {}; refused",
            p.display(),
            c.display(),
            root.display()
        ))
    }
}

impl SysfsGpus {
    /// Find the amdgpu, xe and i915 hwmon directories under `root`; the first is GPU
    /// `first` (after NVML's GPUs in powerperfd).
    ///
    /// # Errors
    /// [`GpuControlError::Unavailable`]: none found (with what was looked for), a directory
    /// outside the root.
    pub fn open(root: &Path, first: u32) -> Result<Self, GpuControlError> {
        let root_c = root.canonicalize().map_err(|e| {
            GpuControlError::Unavailable(format!("the sysfs root {}: {e}", root.display()))
        })?;
        let mut cards = Vec::new();
        for g in crate::devices::gpu_hwmons(root) {
            let driver = match g.origin {
                crate::devices::Origin::Amdgpu => Driver::Amdgpu,
                crate::devices::Origin::Xe => Driver::Xe,
                _ => Driver::I915,
            };
            let unavailable = GpuControlError::Unavailable;
            let hwmon = under(&root_c, &g.dir).map_err(unavailable)?;
            let device = under(&root_c, &hwmon.join("device")).map_err(unavailable)?;
            let freq_dirs = match driver {
                Driver::Amdgpu => Vec::new(),
                Driver::Xe => crate::devices::xe_freq_dirs(&device),
                Driver::I915 => crate::devices::i915_freq_dir(&device).into_iter().collect(),
            };
            let freq_dirs = freq_dirs
                .iter()
                .map(|d| under(&root_c, d))
                .collect::<Result<Vec<_>, _>>()
                .map_err(unavailable)?;
            let od = driver == Driver::Amdgpu
                && crate::safe_file::read_to_string_bounded(
                    &device.join("pp_od_clk_voltage"),
                    MAX_ATTR,
                    "sysfs attribute",
                )
                .is_ok_and(|t| od::parse_od_sclk(&t).is_ok());
            cards.push(Card {
                driver,
                hwmon,
                freq_dirs,
                device,
                od,
            });
        }
        if cards.is_empty() {
            return Err(GpuControlError::Unavailable(format!(
                "no hwmon directory named amdgpu, xe or i915 under {}/sys/class/hwmon",
                root.display()
            )));
        }
        Ok(SysfsGpus {
            root: root_c,
            first,
            cards,
        })
    }

    /// The GPUs found, in index order from `first`.
    pub fn cards(&self) -> &[Card] {
        &self.cards
    }

    /// The index of the first.
    pub fn first(&self) -> u32 {
        self.first
    }

    fn card(&self, gpu: u32) -> Result<&Card, GpuControlError> {
        self.check_gpu(gpu)?;
        Ok(&self.cards[(gpu - self.first) as usize])
    }

    /// Read an attribute (bounded, not following a link, a regular file).
    fn read(&self, gpu: u32, p: &Path, call: &'static str) -> Result<String, GpuControlError> {
        crate::safe_file::read_to_string_bounded(p, MAX_ATTR, "sysfs attribute")
            .map(|s| s.trim().to_string())
            .map_err(|e| GpuControlError::Read {
                gpu,
                call,
                why: format!(
                    "{e:#}; is the {} driver loaded with this attribute (and powerperfd run as root)?",
                    self.cards
                        .get(gpu.wrapping_sub(self.first) as usize)
                        .map_or("GPU", |c| c.driver.name())
                ),
            })
    }

    fn read_u64(&self, gpu: u32, p: &Path, call: &'static str) -> Result<u64, GpuControlError> {
        let t = self.read(gpu, p, call)?;
        t.parse::<u64>().map_err(|_| GpuControlError::Read {
            gpu,
            call,
            why: format!("{}: `{t}` is not a whole number", p.display()),
        })
    }

    /// Write `value` (a newline after it, as `echo` does), then read it back.
    fn write(&self, gpu: u32, p: &Path, value: &str) -> Result<String, GpuControlError> {
        use std::os::unix::fs::OpenOptionsExt;
        let err = |why: String| GpuControlError::Write {
            gpu,
            call: format!("write {value} to {}", p.display()),
            why,
        };
        if !p.starts_with(&self.root) {
            return Err(err(format!(
                "outside the sysfs root {}",
                self.root.display()
            )));
        }
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(p)
            .map_err(|e| err(e.to_string()))?;
        if !f.metadata().map_err(|e| err(e.to_string()))?.is_file() {
            return Err(err("not a regular file".into()));
        }
        tracing::debug!(file = %p.display(), value, "GPU sysfs write");
        f.write_all(format!("{value}\n").as_bytes())
            .map_err(|e| err(e.to_string()))?;
        drop(f);
        let back = crate::safe_file::read_to_string_bounded(p, MAX_ATTR, "sysfs attribute")
            .map_err(|e| err(format!("written, but not readable back: {e:#}")))?;
        let back = back.trim().replace('\n', " | ");
        Ok(if back == value {
            format!("{} = {value}", p.display())
        } else {
            format!("{} = {value} (reads back `{back}`)", p.display())
        })
    }

    fn cap_path(&self, gpu: u32) -> Result<(Driver, PathBuf), GpuControlError> {
        let c = self.card(gpu)?;
        Ok((c.driver, c.hwmon.join(c.driver.cap_file())))
    }

    /// `pp_dpm_sclk`'s levels (amdgpu).
    fn sclk_levels(&self, gpu: u32) -> Result<Vec<Level>, GpuControlError> {
        let p = self.card(gpu)?.device.join("pp_dpm_sclk");
        let t = self.read(gpu, &p, "pp_dpm_sclk")?;
        parse_dpm_levels(&t).map_err(|why| GpuControlError::Read {
            gpu,
            call: "pp_dpm_sclk",
            why: format!("{}: {why}", p.display()),
        })
    }

    /// The frequency files of every gt: `(min path, max path, lowest, highest)`, MHz.
    fn freq_files(&self, gpu: u32) -> Result<Vec<FreqDir>, GpuControlError> {
        let c = self.card(gpu)?;
        if c.freq_dirs.is_empty() {
            return Err(GpuControlError::Read {
                gpu,
                call: "gt frequency files",
                why: format!(
                    "no {} under {}; the {} driver shows them there",
                    match c.driver {
                        Driver::Xe => "tileN/gtN/freq0/min_freq",
                        _ => "drm/cardN/gt_min_freq_mhz",
                    },
                    c.device.display(),
                    c.driver.name()
                ),
            });
        }
        let (min, max, lo, hi): (&str, &str, &'static str, &'static str) = match c.driver {
            Driver::Xe => ("min_freq", "max_freq", "rpn_freq", "rp0_freq"),
            _ => (
                "gt_min_freq_mhz",
                "gt_max_freq_mhz",
                "gt_RPn_freq_mhz",
                "gt_RP0_freq_mhz",
            ),
        };
        c.freq_dirs
            .iter()
            .map(|d| {
                let lo_v = self.read_u64(gpu, &d.join(lo), lo)?;
                let hi_v = self.read_u64(gpu, &d.join(hi), hi)?;
                Ok(FreqDir {
                    min: d.join(min),
                    max: d.join(max),
                    lo: lo_v,
                    hi: hi_v,
                    range_files: (lo, hi),
                })
            })
            .collect()
    }

    /// Write `(min, max)` to a gt's files in the order that keeps min ≤ max at each step.
    fn write_min_max(
        &self,
        gpu: u32,
        f: &FreqDir,
        min: u64,
        max: u64,
    ) -> Result<Vec<String>, GpuControlError> {
        let cur_max = self.read_u64(gpu, &f.max, "max frequency")?;
        let (a, b) = if min > cur_max {
            ((&f.max, max), (&f.min, min))
        } else {
            ((&f.min, min), (&f.max, max))
        };
        Ok(vec![
            self.write(gpu, a.0, &a.1.to_string())?,
            self.write(gpu, b.0, &b.1.to_string())?,
        ])
    }

    fn perf_level_path(&self, gpu: u32) -> Result<PathBuf, GpuControlError> {
        Ok(self
            .card(gpu)?
            .device
            .join("power_dpm_force_performance_level"))
    }

    /// The full sclk mask (`0 1 … n-1`) then the performance level `level`.
    fn amd_unlock(&self, gpu: u32, levels: u32, level: &str) -> Result<String, GpuControlError> {
        let lp = self.perf_level_path(gpu)?;
        let cur = self.read(gpu, &lp, "power_dpm_force_performance_level")?;
        let mut done = Vec::new();
        if cur == "manual" {
            let mask: Vec<String> = (0..levels).map(|i| i.to_string()).collect();
            let sp = self.card(gpu)?.device.join("pp_dpm_sclk");
            done.push(self.write(gpu, &sp, &mask.join(" "))?);
        }
        if cur != level {
            done.push(self.write(gpu, &lp, level)?);
        }
        if done.is_empty() {
            done.push(format!("{} is {level} already", lp.display()));
        }
        Ok(done.join("; "))
    }
}

/// One gt's frequency files.
#[derive(Debug)]
struct FreqDir {
    min: PathBuf,
    max: PathBuf,
    lo: u64,
    hi: u64,
    range_files: (&'static str, &'static str),
}

fn whole_mhz(gpu: u32, min: f64, max: f64) -> Result<(u64, u64), GpuControlError> {
    if !(min.is_finite() && max.is_finite() && min.fract() == 0.0 && max.fract() == 0.0)
        || min < 0.0
        || max > 1e6
        || min > max
    {
        return Err(GpuControlError::OutOfRange {
            gpu,
            what: format!("locked clocks [{min}, {max}] MHz"),
            allowed: "whole MHz, min <= max".into(),
        });
    }
    Ok((min as u64, max as u64))
}

impl GpuControl for SysfsGpus {
    fn describe(&self) -> String {
        let v: Vec<String> = self
            .cards
            .iter()
            .enumerate()
            .map(|(i, c)| {
                format!(
                    "GPU {} {} ({})",
                    self.first + i as u32,
                    c.driver.name(),
                    c.hwmon.display()
                )
            })
            .collect();
        format!("sysfs: {}", v.join(", "))
    }
    fn count(&self) -> u32 {
        self.first + self.cards.len() as u32
    }
    fn check_gpu(&self, gpu: u32) -> Result<(), GpuControlError> {
        if gpu >= self.first && gpu < self.count() {
            Ok(())
        } else {
            Err(GpuControlError::NoDevice {
                gpu,
                count: self.count(),
            })
        }
    }
    fn check_locked_clocks(
        &self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<Vec<String>, GpuControlError> {
        let c = self.card(gpu)?;
        if c.od {
            return self.od_check(gpu, min_mhz, max_mhz).map(|_| Vec::new());
        }
        match c.driver {
            Driver::Amdgpu => {
                let l: Vec<u32> = self.sclk_levels(gpu)?.iter().map(|l| l.mhz).collect();
                check_clock_list(gpu, &l, min_mhz, max_mhz, "pp_dpm_sclk", "locked clocks")
            }
            Driver::Xe | Driver::I915 => {
                let (a, b) = whole_mhz(gpu, min_mhz, max_mhz)?;
                for f in self.freq_files(gpu)? {
                    if a < f.lo || b > f.hi {
                        return Err(GpuControlError::OutOfRange {
                            gpu,
                            what: format!("locked clocks [{a}, {b}] MHz"),
                            allowed: format!(
                                "{}..{} MHz ({} and {} of {})",
                                f.lo,
                                f.hi,
                                f.range_files.0,
                                f.range_files.1,
                                f.min
                                    .parent()
                                    .map(Path::display)
                                    .map(|d| d.to_string())
                                    .unwrap_or_default()
                            ),
                        });
                    }
                }
                Ok(Vec::new())
            }
        }
    }
    fn power_limit_w(&self, gpu: u32) -> Result<f64, GpuControlError> {
        let (d, p) = self.cap_path(gpu)?;
        Ok(self.read_u64(gpu, &p, d.cap_file())? as f64 * 1e-6)
    }
    fn power_limit_range_w(&self, gpu: u32) -> Result<(f64, f64), GpuControlError> {
        let c = self.card(gpu)?;
        let (lo, hi) = match c.driver {
            Driver::Amdgpu => (
                self.read_u64(gpu, &c.hwmon.join("power1_cap_min"), "power1_cap_min")?,
                self.read_u64(gpu, &c.hwmon.join("power1_cap_max"), "power1_cap_max")?,
            ),
            Driver::Xe | Driver::I915 => (
                0,
                self.read_u64(gpu, &c.hwmon.join("power1_rated_max"), "power1_rated_max")?,
            ),
        };
        if hi == 0 || lo > hi {
            return Err(GpuControlError::Read {
                gpu,
                call: "power limit range",
                why: format!(
                    "{}: the range {lo}..{hi} µW is empty (no rated maximum: the driver gives no bound to check a cap against)",
                    c.hwmon.display()
                ),
            });
        }
        Ok((lo as f64 * 1e-6, hi as f64 * 1e-6))
    }
    fn check_power_limit(&self, gpu: u32, watts: f64) -> Result<(), GpuControlError> {
        let (d, _) = self.cap_path(gpu)?;
        let (lo, hi) = self.power_limit_range_w(gpu)?;
        let uw = watts * 1e6;
        let (ok, allowed) = match d {
            Driver::Amdgpu => (
                watts.is_finite() && watts.fract() == 0.0 && watts >= lo && watts <= hi,
                format!("{lo}..{hi} W, whole watts (power1_cap_min..power1_cap_max; amdgpu divides power1_cap by 10^6)"),
            ),
            Driver::Xe | Driver::I915 => (
                watts.is_finite() && watts > 0.0 && watts <= hi && (uw - uw.round()).abs() < 1e-6,
                format!("(0, {hi}] W, whole µW (power1_rated_max; 0 would switch the limit off)"),
            ),
        };
        if ok {
            Ok(())
        } else {
            Err(GpuControlError::OutOfRange {
                gpu,
                what: format!("power limit {watts} W"),
                allowed,
            })
        }
    }
    fn set_locked_clocks(
        &mut self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<String, GpuControlError> {
        self.check_locked_clocks(gpu, min_mhz, max_mhz)?;
        if self.card(gpu)?.od {
            let (a, b) = self.od_check(gpu, min_mhz, max_mhz)?;
            let lp = self.perf_level_path(gpu)?;
            let mut done = Vec::new();
            if self.read(gpu, &lp, "power_dpm_force_performance_level")? != "manual" {
                done.push(self.write(gpu, &lp, "manual")?);
            }
            done.extend(self.od_write(gpu, a, b)?);
            return Ok(done.join("; "));
        }
        match self.card(gpu)?.driver {
            Driver::Amdgpu => {
                let idx: Vec<String> = self
                    .sclk_levels(gpu)?
                    .iter()
                    .filter(|l| f64::from(l.mhz) >= min_mhz && f64::from(l.mhz) <= max_mhz)
                    .map(|l| l.index.to_string())
                    .collect();
                let lp = self.perf_level_path(gpu)?;
                let mut done = Vec::new();
                if self.read(gpu, &lp, "power_dpm_force_performance_level")? != "manual" {
                    done.push(self.write(gpu, &lp, "manual")?);
                }
                let sp = self.card(gpu)?.device.join("pp_dpm_sclk");
                done.push(self.write(gpu, &sp, &idx.join(" "))?);
                Ok(done.join("; "))
            }
            Driver::Xe | Driver::I915 => {
                let (a, b) = whole_mhz(gpu, min_mhz, max_mhz)?;
                let mut done = Vec::new();
                for f in self.freq_files(gpu)? {
                    done.extend(self.write_min_max(gpu, &f, a, b)?);
                }
                Ok(done.join("; "))
            }
        }
    }
    /// The driver's own range: amdgpu all sclk levels and `auto`; xe/i915 min and max at
    /// RPn and RP0.
    fn reset_locked_clocks(&mut self, gpu: u32) -> Result<String, GpuControlError> {
        if self.card(gpu)?.od {
            // `r`: the table's defaults, committed; then `auto`
            let p = self.od_path(gpu)?;
            let mut done = vec![self.write(gpu, &p, "r")?, self.write(gpu, &p, "c")?];
            let lp = self.perf_level_path(gpu)?;
            done.push(self.write(gpu, &lp, "auto")?);
            return Ok(done.join("; "));
        }
        match self.card(gpu)?.driver {
            Driver::Amdgpu => {
                let n = self.sclk_levels(gpu)?.len() as u32;
                self.amd_unlock(gpu, n, "auto")
            }
            Driver::Xe | Driver::I915 => {
                let mut done = Vec::new();
                for f in self.freq_files(gpu)? {
                    done.extend(self.write_min_max(gpu, &f, f.lo, f.hi)?);
                }
                Ok(done.join("; "))
            }
        }
    }
    fn set_power_limit_w(&mut self, gpu: u32, watts: f64) -> Result<String, GpuControlError> {
        self.check_power_limit(gpu, watts)?;
        let (_, p) = self.cap_path(gpu)?;
        self.write(gpu, &p, &format!("{:.0}", (watts * 1e6).round()))
    }
    fn check_mem_locked_clocks(
        &self,
        gpu: u32,
        _min_mhz: f64,
        _max_mhz: f64,
    ) -> Result<Vec<String>, GpuControlError> {
        let why = match self.card(gpu)?.driver {
            Driver::Amdgpu => {
                "powerperf does not write amdgpu's pp_dpm_mclk (only pp_dpm_sclk is controlled)"
            }
            Driver::Xe | Driver::I915 => {
                "the xe and i915 drivers have no memory-clock control in sysfs"
            }
        };
        Err(GpuControlError::NoMemLock {
            gpu,
            why: why.into(),
        })
    }
    fn set_mem_locked_clocks(
        &mut self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<String, GpuControlError> {
        self.check_mem_locked_clocks(gpu, min_mhz, max_mhz)?;
        unreachable_mem(gpu)
    }
    fn reset_mem_locked_clocks(&mut self, gpu: u32) -> Result<String, GpuControlError> {
        self.check_mem_locked_clocks(gpu, 0.0, 0.0)?;
        unreachable_mem(gpu)
    }

    fn save(&self, gpu: u32, knob: GpuKnob) -> Result<GpuSaved, GpuControlError> {
        let c = self.card(gpu)?;
        let mut s = GpuSaved {
            gpu,
            knob,
            power_limit_w: None,
            sysfs: None,
        };
        match (knob, c.driver) {
            (GpuKnob::PowerLimit, _) => s.power_limit_w = Some(self.power_limit_w(gpu)?),
            (GpuKnob::MemLockedClocks, _) => {
                self.check_mem_locked_clocks(gpu, 0.0, 0.0)?;
            }
            (GpuKnob::LockedClocks, Driver::Amdgpu) => {
                let lp = self.perf_level_path(gpu)?;
                let level = self.read(gpu, &lp, "power_dpm_force_performance_level")?;
                s.sysfs = Some(if c.od {
                    let od = self.od_sclk(gpu)?;
                    SysfsSaved {
                        perf_level: Some(level),
                        sclk_levels: None,
                        freq_mhz: Vec::new(),
                        od_sclk_mhz: Some([od.min, od.max]),
                    }
                } else {
                    SysfsSaved {
                        perf_level: Some(level),
                        sclk_levels: Some(self.sclk_levels(gpu)?.len() as u32),
                        freq_mhz: Vec::new(),
                        od_sclk_mhz: None,
                    }
                });
            }
            (GpuKnob::LockedClocks, Driver::Xe | Driver::I915) => {
                let mut v = Vec::new();
                for f in self.freq_files(gpu)? {
                    v.push([
                        self.read_u64(gpu, &f.min, "min frequency")?,
                        self.read_u64(gpu, &f.max, "max frequency")?,
                    ]);
                }
                s.sysfs = Some(SysfsSaved {
                    perf_level: None,
                    sclk_levels: None,
                    freq_mhz: v,
                    od_sclk_mhz: None,
                });
            }
        }
        Ok(s)
    }

    fn validate(&self, s: &GpuSaved) -> Result<(), GpuControlError> {
        let bad = |reason: String| GpuControlError::BadSaved {
            saved: s.to_string(),
            reason,
        };
        let c = self.card(s.gpu).map_err(|e| bad(e.to_string()))?;
        match (s.knob, s.power_limit_w, &s.sysfs) {
            (GpuKnob::PowerLimit, Some(w), None) => {
                let (lo, hi) = self
                    .power_limit_range_w(s.gpu)
                    .map_err(|e| bad(e.to_string()))?;
                let intel_off = c.driver != Driver::Amdgpu && w == 0.0;
                // what the driver shows: whole W on amdgpu, whole µW on xe/i915
                let unit = if c.driver == Driver::Amdgpu { 1.0 } else { 1e6 };
                let whole = ((w * unit) - (w * unit).round()).abs() < 1e-6;
                if intel_off || (w.is_finite() && w >= lo && w <= hi && whole) {
                    Ok(())
                } else {
                    Err(bad(format!(
                        "not inside the GPU's power limit range {lo}..{hi} W"
                    )))
                }
            }
            (GpuKnob::LockedClocks, None, Some(ss)) => match c.driver {
                Driver::Amdgpu if ss.od_sclk_mhz.is_some() => self.validate_od(s, ss),
                Driver::Amdgpu if c.od => Err(bad(
                    "this GPU's clocks are set through pp_od_clk_voltage; a save of pp_dpm_sclk levels is not one it made".into(),
                )),
                Driver::Amdgpu => {
                    let (Some(level), Some(n), true) =
                        (&ss.perf_level, ss.sclk_levels, ss.freq_mhz.is_empty())
                    else {
                        return Err(bad(
                            "an amdgpu save holds a performance level and a level count only"
                                .into(),
                        ));
                    };
                    if !AMD_PERF_LEVELS.contains(&level.as_str()) {
                        return Err(bad(format!(
                            "`{level}` is not a power_dpm_force_performance_level value ({})",
                            AMD_PERF_LEVELS.join(", ")
                        )));
                    }
                    if n == 0 || n as usize > MAX_LEVELS {
                        return Err(bad(format!("{n} sclk levels (1..={MAX_LEVELS})")));
                    }
                    // where pp_dpm_sclk lists its levels now, the count must be theirs
                    if let Ok(l) = self.sclk_levels(s.gpu) {
                        if l.len() != n as usize {
                            return Err(bad(format!(
                                "{n} sclk levels saved, pp_dpm_sclk lists {}",
                                l.len()
                            )));
                        }
                    }
                    Ok(())
                }
                Driver::Xe | Driver::I915 => {
                    if ss.perf_level.is_some()
                        || ss.sclk_levels.is_some()
                        || ss.od_sclk_mhz.is_some()
                    {
                        return Err(bad("an Intel GPU save holds gt frequencies only".into()));
                    }
                    let files = self.freq_files(s.gpu).map_err(|e| bad(e.to_string()))?;
                    if files.len() != ss.freq_mhz.len() {
                        return Err(bad(format!(
                            "{} gt frequency pairs saved, the GPU has {} gt(s)",
                            ss.freq_mhz.len(),
                            files.len()
                        )));
                    }
                    for (f, [a, b]) in files.iter().zip(&ss.freq_mhz) {
                        if a > b || *a < f.lo || *b > f.hi {
                            return Err(bad(format!(
                                "[{a}, {b}] MHz is not inside {}..{} MHz with min <= max",
                                f.lo, f.hi
                            )));
                        }
                    }
                    Ok(())
                }
            },
            _ => Err(bad(format!(
                "not what a {} GPU saves for {}",
                c.driver.name(),
                s.knob.control()
            ))),
        }
    }

    fn restore(&mut self, s: &GpuSaved) -> Result<String, GpuControlError> {
        self.validate(s)?;
        match (s.knob, s.power_limit_w, &s.sysfs) {
            (GpuKnob::PowerLimit, Some(w), _) => {
                let (_, p) = self.cap_path(s.gpu)?;
                self.write(s.gpu, &p, &format!("{:.0}", (w * 1e6).round()))
            }
            (GpuKnob::LockedClocks, _, Some(ss)) => match (&ss.perf_level, ss.sclk_levels) {
                (Some(level), None) if ss.od_sclk_mhz.is_some() => {
                    let [a, b] = ss.od_sclk_mhz.unwrap_or_default();
                    let mut done = self.od_write(s.gpu, a, b)?;
                    let lp = self.perf_level_path(s.gpu)?;
                    if self.read(s.gpu, &lp, "power_dpm_force_performance_level")? != *level {
                        done.push(self.write(s.gpu, &lp, level)?);
                    }
                    Ok(done.join("; "))
                }
                (Some(level), Some(n)) => self.amd_unlock(s.gpu, n, level),
                _ => {
                    let mut done = Vec::new();
                    for (f, [a, b]) in self.freq_files(s.gpu)?.iter().zip(&ss.freq_mhz) {
                        done.extend(self.write_min_max(s.gpu, f, *a, *b)?);
                    }
                    Ok(done.join("; "))
                }
            },
            _ => Err(GpuControlError::BadSaved {
                saved: s.to_string(),
                reason: "nothing to restore".into(),
            }),
        }
    }
}

impl SysfsGpus {
    /// [`GpuControl::validate`] of an overdrive save: a performance level of the driver's
    /// list, no level count, a pair inside `OD_RANGE` with min ≤ max (where the table reads).
    fn validate_od(&self, s: &GpuSaved, ss: &SysfsSaved) -> Result<(), GpuControlError> {
        let bad = |reason: String| GpuControlError::BadSaved {
            saved: s.to_string(),
            reason,
        };
        let (Some(level), None, true, Some([a, b])) = (
            &ss.perf_level,
            ss.sclk_levels,
            ss.freq_mhz.is_empty(),
            ss.od_sclk_mhz,
        ) else {
            return Err(bad(
                "an overdrive save holds a performance level and the OD_SCLK pair only".into(),
            ));
        };
        if !AMD_PERF_LEVELS.contains(&level.as_str()) {
            return Err(bad(format!(
                "`{level}` is not a power_dpm_force_performance_level value"
            )));
        }
        if a > b || b > 1_000_000 {
            return Err(bad(format!(
                "OD_SCLK [{a}, {b}] MHz: min above max, or not a clock"
            )));
        }
        if !self
            .od_path(s.gpu)
            .map_err(|e| bad(e.to_string()))?
            .is_file()
        {
            return Err(bad("this GPU has no pp_od_clk_voltage".into()));
        }
        if let Ok(od) = self.od_sclk(s.gpu) {
            if a < od.range.0 || b > od.range.1 {
                return Err(bad(format!(
                    "OD_SCLK [{a}, {b}] MHz is outside OD_RANGE {}..{} MHz",
                    od.range.0, od.range.1
                )));
            }
        }
        Ok(())
    }
}

fn unreachable_mem(gpu: u32) -> Result<String, GpuControlError> {
    Err(GpuControlError::NoMemLock {
        gpu,
        why: "no memory-clock control through sysfs".into(),
    })
}

pub mod od;

#[cfg(test)]
mod tests;
