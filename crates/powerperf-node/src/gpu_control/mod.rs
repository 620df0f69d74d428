//! GPU controls per device: locked clocks and the power limit, behind one trait, for
//! `powerperfd`'s `gpu.locked_clocks` and `gpu.power_limit` (docs/cluster.md).
//!
//! - [`nvml::NvmlGpu`]: the real GPU through NVML (nvml-wrapper). Every read is done for
//!   real (`nvmlDeviceGetSupportedGraphicsClocks` through [`crate::nvml_clocks`],
//!   `nvmlDeviceGetPowerManagementLimit`, `nvmlDeviceGetPowerManagementLimitConstraints`).
//!   Opened read-only ([`nvml::NvmlGpu::open`]), a set or reset answers
//!   [`GpuControlError::DescribeOnly`] with the exact call it would make; opened writable
//!   ([`nvml::NvmlGpu::open_writable`], `powerperfd` only) it calls
//!   `nvmlDeviceSetGpuLockedClocks`, `nvmlDeviceResetGpuLockedClocks` and
//!   `nvmlDeviceSetPowerManagementLimit`.
//! - [`FakeGpu`]: GPUs described by files in a directory (tests, `powerperfd --fake-gpu DIR`):
//!   the same checks, and the settings written to those files, so that a test in another
//!   process sees them and a restarted daemon restores them.
//! - [`sysfs::SysfsGpus`]: AMD (amdgpu) and Intel (xe, i915) GPUs through their drivers'
//!   hwmon and frequency files under a sysfs root (issue 43).
//! - [`node::NodeGpus`]: a node's GPUs as one control, NVML's (or the fake) first, then the
//!   sysfs GPUs (powerperfd).
//!
//! Units: MHz for clocks, W for power limits (NVML's mW only at the NVML boundary).

pub mod fake_build;
pub mod node;
pub mod nvml;
pub mod sysfs;

use serde::{Deserialize, Serialize};
use std::io::Write as _;
use std::path::{Path, PathBuf};

/// Errors of the GPU controls.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum GpuControlError {
    /// No GPU control on this node.
    #[error("no GPU control on this node: {0}")]
    Unavailable(String),
    /// A GPU index that does not exist.
    #[error("GPU {gpu} does not exist: this node has {count} GPU(s) (0..{count})")]
    NoDevice { gpu: u32, count: u32 },
    /// A setting the device does not take.
    #[error("GPU {gpu}: {what} is outside what it allows: {allowed}")]
    OutOfRange {
        gpu: u32,
        what: String,
        allowed: String,
    },
    /// A read that failed.
    #[error("GPU {gpu}: {call} failed: {why}")]
    Read {
        gpu: u32,
        call: &'static str,
        why: String,
    },
    /// A write that failed.
    #[error("GPU {gpu}: {call} failed: {why}")]
    Write { gpu: u32, call: String, why: String },
    /// The GPU or driver cannot lock its memory clock.
    #[error("GPU {gpu} has no memory-clock lock: {why}; memory-clock sweeps and plans are refused on it (nothing was changed)")]
    NoMemLock { gpu: u32, why: String },
    /// NVML opened read-only: the call is named, nothing is set.
    #[error(
        "GPU {gpu}: NVML is open read-only here; a write would call {call}. Nothing was changed"
    )]
    DescribeOnly { gpu: u32, call: String },
    /// A saved setting (journal) that is not one this controller may restore.
    #[error("refusing the saved GPU setting {saved}: {reason}; nothing was written")]
    BadSaved { saved: String, reason: String },
}

/// Which GPU control.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, PartialOrd, Ord)]
#[serde(rename_all = "snake_case")]
pub enum GpuKnob {
    /// `gpu.locked_clocks`: the SM (graphics) clock locked to `[min, max]` MHz.
    LockedClocks,
    /// `gpu.power_limit`: the power management limit, W.
    PowerLimit,
    /// `gpu.mem_locked_clocks`: the memory clock locked to `[min, max]` MHz
    /// (`nvmlDeviceSetMemoryLockedClocks`, Ampere and newer).
    MemLockedClocks,
}

impl GpuKnob {
    /// The policy's control name.
    pub fn control(self) -> &'static str {
        match self {
            GpuKnob::LockedClocks => "gpu.locked_clocks",
            GpuKnob::PowerLimit => "gpu.power_limit",
            GpuKnob::MemLockedClocks => "gpu.mem_locked_clocks",
        }
    }
    /// For messages: `locked clocks`, `power limit`.
    pub fn words(self) -> &'static str {
        match self {
            GpuKnob::LockedClocks => "locked clocks",
            GpuKnob::PowerLimit => "power limit",
            GpuKnob::MemLockedClocks => "memory locked clocks",
        }
    }
}

/// What a GPU setting overwrites, for the restore: locked clocks are reset (NVML has no
/// getter for the locked range, and `nvmlDeviceResetGpuLockedClocks` is how nvidia-smi
/// `-rgc` undoes `-lgc`); the power limit is put back to the value read before.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSaved {
    pub gpu: u32,
    pub knob: GpuKnob,
    /// The power limit before the change, W (for [`GpuKnob::PowerLimit`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
    /// What a locked-clock change on an AMD or Intel GPU ([`sysfs::SysfsGpus`]) overwrites;
    /// absent for NVML and the fake GPU (journals written before issue 43 load unchanged).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sysfs: Option<SysfsSaved>,
}

/// The sysfs values a locked-clock change overwrites ([`sysfs::SysfsGpus`]), put back as
/// they were read.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SysfsSaved {
    /// amdgpu: `power_dpm_force_performance_level` before (`auto`, `manual`, …).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub perf_level: Option<String>,
    /// amdgpu: how many `pp_dpm_sclk` levels there are (the restore enables all of them:
    /// the mask the driver had cannot be read back, `pp_dpm_sclk` shows only the current
    /// level).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sclk_levels: Option<u32>,
    /// xe and i915: `[min, max]` MHz of every gt before, in the order of
    /// `tileT/gtG/freq0` (xe) or the one `gt_{min,max}_freq_mhz` pair (i915).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub freq_mhz: Vec<[u64; 2]>,
    /// amdgpu with an overdrive table: `pp_od_clk_voltage`'s `OD_SCLK` `[min, max]` MHz
    /// before ([`sysfs::od`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub od_sclk_mhz: Option<[u64; 2]>,
}

impl std::fmt::Display for GpuSaved {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match (self.knob, self.power_limit_w, &self.sysfs) {
            (GpuKnob::PowerLimit, Some(w), _) => {
                write!(f, "GPU {} power limit {w} W", self.gpu)
            }
            (k, _, Some(s)) => {
                write!(f, "GPU {} {}", self.gpu, k.words())?;
                if let Some(l) = &s.perf_level {
                    // at most 40 characters of a value read from a journal
                    let l: String = l.chars().take(40).collect();
                    write!(f, " (performance level {l:?}")?;
                    match (s.sclk_levels, s.od_sclk_mhz) {
                        (_, Some([a, b])) => write!(f, ", OD_SCLK [{a}, {b}] MHz)")?,
                        (n, None) => write!(f, ", {} sclk levels)", n.unwrap_or(0))?,
                    }
                }
                if !s.freq_mhz.is_empty() {
                    let v: Vec<String> = s
                        .freq_mhz
                        .iter()
                        .take(16)
                        .map(|[a, b]| format!("[{a}, {b}]"))
                        .collect();
                    write!(f, " (gt min/max {} MHz)", v.join(" "))?;
                }
                Ok(())
            }
            (k, _, None) => write!(f, "GPU {} {}", self.gpu, k.words()),
        }
    }
}

/// The GPU controls of a node.
pub trait GpuControl: Send + std::fmt::Debug {
    /// What it controls (`NVML, 1 GPU (NVIDIA H100 80GB HBM3)`).
    fn describe(&self) -> String;
    /// The number of GPUs.
    fn count(&self) -> u32;
    /// True when set and reset only describe the call (NVML opened read-only): the
    /// daemon then refuses before it saves anything, so no journal entry waits for a
    /// restore that cannot be made.
    fn describe_only(&self) -> bool {
        false
    }
    /// Check a locked-clock range `[min, max]` MHz against the clocks the GPU supports
    /// ([`check_clock_range`]: both ends must be listed clocks); returns notes. Changes
    /// nothing.
    ///
    /// # Errors
    /// [`GpuControlError::OutOfRange`] (naming the nearest supported clocks), unreadable
    /// lists, no such GPU.
    fn check_locked_clocks(
        &self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<Vec<String>, GpuControlError>;
    /// The current power limit, W.
    ///
    /// # Errors
    /// Unreadable, no such GPU.
    fn power_limit_w(&self, gpu: u32) -> Result<f64, GpuControlError>;
    /// The power limits the GPU accepts, `(min, max)` W.
    ///
    /// # Errors
    /// Unreadable, no such GPU.
    fn power_limit_range_w(&self, gpu: u32) -> Result<(f64, f64), GpuControlError>;
    /// Check a power limit, W, against [`GpuControl::power_limit_range_w`]. Changes nothing.
    ///
    /// # Errors
    /// [`GpuControlError::OutOfRange`] (also for a value that is not finite), unreadable.
    fn check_power_limit(&self, gpu: u32, watts: f64) -> Result<(), GpuControlError> {
        let (lo, hi) = self.power_limit_range_w(gpu)?;
        if watts.is_finite() && watts >= lo - 1e-9 && watts <= hi + 1e-9 {
            Ok(())
        } else {
            Err(GpuControlError::OutOfRange {
                gpu,
                what: format!("power limit {watts} W"),
                allowed: format!("{lo}..{hi} W (nvmlDeviceGetPowerManagementLimitConstraints)"),
            })
        }
    }
    /// Lock the SM clock to `[min, max]` MHz (checked first); returns what was done.
    ///
    /// # Errors
    /// As `check_locked_clocks`, and the write.
    fn set_locked_clocks(
        &mut self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<String, GpuControlError>;
    /// Undo locked clocks; returns what was done.
    ///
    /// # Errors
    /// The write.
    fn reset_locked_clocks(&mut self, gpu: u32) -> Result<String, GpuControlError>;
    /// Set the power limit, W (checked against the range first); returns what was done.
    ///
    /// # Errors
    /// [`GpuControlError::OutOfRange`], the write.
    fn set_power_limit_w(&mut self, gpu: u32, watts: f64) -> Result<String, GpuControlError>;

    /// Check a memory locked-clock range `[min, max]` MHz against the memory clocks the GPU
    /// supports (`nvmlDeviceGetSupportedMemoryClocks`); both ends must be listed. Changes
    /// nothing.
    ///
    /// # Errors
    /// [`GpuControlError::NoMemLock`] where the GPU or driver has no memory-clock lock,
    /// [`GpuControlError::OutOfRange`], unreadable lists, no such GPU.
    fn check_mem_locked_clocks(
        &self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<Vec<String>, GpuControlError>;
    /// Lock the memory clock to `[min, max]` MHz (checked first); returns what was done.
    ///
    /// # Errors
    /// As `check_mem_locked_clocks`, and the write.
    fn set_mem_locked_clocks(
        &mut self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<String, GpuControlError>;
    /// Undo memory locked clocks; returns what was done.
    ///
    /// # Errors
    /// The write.
    fn reset_mem_locked_clocks(&mut self, gpu: u32) -> Result<String, GpuControlError>;

    /// What a change of `knob` on `gpu` overwrites.
    ///
    /// # Errors
    /// The power limit cannot be read.
    fn save(&self, gpu: u32, knob: GpuKnob) -> Result<GpuSaved, GpuControlError> {
        self.check_gpu(gpu)?;
        Ok(GpuSaved {
            gpu,
            knob,
            power_limit_w: match knob {
                GpuKnob::PowerLimit => Some(self.power_limit_w(gpu)?),
                GpuKnob::LockedClocks | GpuKnob::MemLockedClocks => None,
            },
            sysfs: None,
        })
    }

    /// Check a saved setting (a journal entry) before anything is written: a GPU that
    /// exists, and a power limit inside the GPU's range.
    ///
    /// # Errors
    /// [`GpuControlError::BadSaved`].
    fn validate(&self, s: &GpuSaved) -> Result<(), GpuControlError> {
        let bad = |reason: String| GpuControlError::BadSaved {
            saved: s.to_string(),
            reason,
        };
        if s.gpu >= self.count() {
            return Err(bad(format!("this node has {} GPU(s)", self.count())));
        }
        if s.sysfs.is_some() {
            return Err(bad(
                "it holds sysfs values (an AMD or Intel GPU's), and this GPU is not one".into(),
            ));
        }
        match (s.knob, s.power_limit_w) {
            (GpuKnob::LockedClocks | GpuKnob::MemLockedClocks, None) => Ok(()),
            (GpuKnob::LockedClocks | GpuKnob::MemLockedClocks, Some(_)) => {
                Err(bad("a locked-clock save holds no power limit".into()))
            }
            (GpuKnob::PowerLimit, None) => Err(bad("no power limit saved".into())),
            (GpuKnob::PowerLimit, Some(w)) => {
                let (lo, hi) = self
                    .power_limit_range_w(s.gpu)
                    .map_err(|e| bad(e.to_string()))?;
                if w.is_finite() && w >= lo - 1e-9 && w <= hi + 1e-9 {
                    Ok(())
                } else {
                    Err(bad(format!(
                        "not inside the GPU's power limit range {lo}..{hi} W"
                    )))
                }
            }
        }
    }

    /// Put back what `s` saved; returns what was done.
    ///
    /// # Errors
    /// The write.
    fn restore(&mut self, s: &GpuSaved) -> Result<String, GpuControlError> {
        match (s.knob, s.power_limit_w) {
            (GpuKnob::LockedClocks, _) => self.reset_locked_clocks(s.gpu),
            (GpuKnob::MemLockedClocks, _) => self.reset_mem_locked_clocks(s.gpu),
            (GpuKnob::PowerLimit, Some(w)) => self.set_power_limit_w(s.gpu, w),
            (GpuKnob::PowerLimit, None) => Err(GpuControlError::BadSaved {
                saved: s.to_string(),
                reason: "no power limit saved".into(),
            }),
        }
    }

    /// [`GpuControlError::NoDevice`] unless `gpu` exists.
    ///
    /// # Errors
    /// As above.
    fn check_gpu(&self, gpu: u32) -> Result<(), GpuControlError> {
        if gpu < self.count() {
            Ok(())
        } else {
            Err(GpuControlError::NoDevice {
                gpu,
                count: self.count(),
            })
        }
    }
}

/// The supported clocks nearest to `f`: the highest listed clock at or below it and the
/// lowest at or above it (one of them when `f` is outside the list).
pub fn nearest_clocks(supported: &[u32], f: f64) -> Vec<u32> {
    let below = supported
        .iter()
        .copied()
        .filter(|c| f64::from(*c) <= f)
        .max();
    let above = supported
        .iter()
        .copied()
        .filter(|c| f64::from(*c) >= f)
        .min();
    let mut v: Vec<u32> = below.into_iter().chain(above).collect();
    v.dedup();
    v
}

/// Check `[min, max]` MHz against a list of supported clocks (`call` names the list's
/// NVML query): both ends must be clocks of the list, exactly (whole MHz). An unlisted clock
/// is refused naming the nearest listed ones, as is a range outside the list, before
/// anything changes (the driver would otherwise lock to some supported clock of its
/// choosing, and the run would not be at the clock asked for). Returns no notes today (the
/// vector is kept for the callers' messages).
///
/// # Errors
/// [`GpuControlError::OutOfRange`]; [`GpuControlError::Read`] for an empty list.
pub fn check_clock_range(
    gpu: u32,
    supported: &[u32],
    min_mhz: f64,
    max_mhz: f64,
) -> Result<Vec<String>, GpuControlError> {
    check_clock_list(
        gpu,
        supported,
        min_mhz,
        max_mhz,
        "nvmlDeviceGetSupportedGraphicsClocks",
        "locked clocks",
    )
}

/// [`check_clock_range`] for any list (`call`: the NVML query that lists it; `what`:
/// `locked clocks`, `memory locked clocks`).
///
/// # Errors
/// As [`check_clock_range`].
pub fn check_clock_list(
    gpu: u32,
    supported: &[u32],
    min_mhz: f64,
    max_mhz: f64,
    call: &'static str,
    what: &str,
) -> Result<Vec<String>, GpuControlError> {
    let (Some(lo), Some(hi)) = (supported.iter().min(), supported.iter().max()) else {
        return Err(GpuControlError::Read {
            gpu,
            call,
            why: "an empty list".into(),
        });
    };
    let (lo, hi) = (f64::from(*lo), f64::from(*hi));
    let shown = if min_mhz == max_mhz {
        format!("{what} {min_mhz} MHz")
    } else {
        format!("{what} [{min_mhz}, {max_mhz}] MHz")
    };
    if !(min_mhz.is_finite() && max_mhz.is_finite() && min_mhz <= max_mhz) {
        return Err(GpuControlError::OutOfRange {
            gpu,
            what: shown,
            allowed: "min <= max, finite".into(),
        });
    }
    // no tolerance: the clocks written are the clocks checked (issue 38)
    if min_mhz < lo || max_mhz > hi {
        return Err(GpuControlError::OutOfRange {
            gpu,
            what: shown,
            allowed: format!("{lo}..{hi} MHz ({call}); choose clocks of that list"),
        });
    }
    for f in [min_mhz, max_mhz] {
        // exactly a listed clock: what is written is what was checked (issue 38)
        let listed = supported.iter().any(|c| f64::from(*c) == f);
        if !listed {
            let near: Vec<String> = nearest_clocks(supported, f)
                .iter()
                .map(|c| format!("{c} MHz"))
                .collect();
            return Err(GpuControlError::OutOfRange {
                gpu,
                what: shown,
                allowed: format!(
                    "{f} MHz is not a supported clock ({call}); nearest: {}",
                    near.join(" or ")
                ),
            });
        }
    }
    Ok(Vec::new())
}

/// GPUs described by files: `DIR/gpuN/` (N = 0, 1, … without gaps) with
/// `supported_graphics_clocks_mhz` (space-separated), `power_limit_range_w` (`MIN MAX`),
/// `power_limit_w` (current, written) and `locked_clocks_mhz` (`MIN MAX` or `none`,
/// written); optionally `supported_memory_clocks_mhz` (space-separated: what
/// `nvmlDeviceGetSupportedMemoryClocks` would list; without it a memory clock cannot be
/// checked) and `name`. For tests and demonstrations (`powerperfd --fake-gpu DIR`): no GPU is
/// touched. Files are written `O_NOFOLLOW`, never created.
///
/// Memory clocks (optional): `supported_memory_clocks_mhz` (space-separated) and
/// `mem_locked_clocks_mhz` (`MIN MAX` or `none`, written); a GPU directory without them has
/// no memory-clock lock, and memory-clock settings are refused on it with that reason.
///
/// It is also a [`crate::nvml::GpuSource`] (the readings `read_power`, the
/// metrics endpoint and `collect`/`sweep`/`apply --fake-gpu DIR` serve): `gpuN/power_w`
/// (watts) and `gpuN/energy_mj` (the total energy counter, mJ), both optional, a missing
/// or unreadable file being a missing value; its SM clock is the locked clock's upper end
/// (the highest supported graphics clock when unlocked), or `gpuN/sm_clock_mhz` where that
/// file exists (a GPU that does not reach its lock, as under power or thermal throttling),
/// its memory clock likewise from its lock, and its clock throttle reasons
/// `gpuN/throttle_reasons` (a number, optional, else 0: none).
#[derive(Debug, Clone)]
pub struct FakeGpu {
    dir: PathBuf,
    count: u32,
}

impl crate::nvml::GpuSource for FakeGpu {
    fn count(&self) -> u32 {
        self.count
    }
    fn name(&self, i: u32) -> String {
        // The optional file `name` (e.g. what the fake GPU stands for).
        self.read_file(i, "name")
            .ok()
            .filter(|n| !n.is_empty() && n.len() <= 256)
            .unwrap_or_else(|| format!("fake GPU {i}"))
    }
    fn power_source(&self, _: u32) -> &'static str {
        "the file power_w"
    }
    /// The readings of [`crate::fake_gpu::FileGpus`] over the same directory.
    fn read(&mut self, i: u32) -> crate::nvml::GpuReading {
        match crate::fake_gpu::FileGpus::open(&self.dir) {
            Ok(mut f) => crate::nvml::GpuSource::read(&mut f, i),
            Err(_) => crate::nvml::GpuReading::default(),
        }
    }
}

impl FakeGpu {
    /// Open the directory.
    ///
    /// # Errors
    /// No `gpu0` in it.
    pub fn open(dir: &Path) -> Result<Self, GpuControlError> {
        let mut count = 0;
        while dir.join(format!("gpu{count}")).is_dir() {
            count += 1;
        }
        if count == 0 {
            return Err(GpuControlError::Unavailable(format!(
                "{} holds no gpu0 directory (the fake GPU layout: gpuN/supported_graphics_clocks_mhz, power_limit_range_w, power_limit_w, locked_clocks_mhz)",
                dir.display()
            )));
        }
        Ok(FakeGpu {
            dir: dir.to_path_buf(),
            count,
        })
    }

    fn path(&self, gpu: u32, f: &str) -> PathBuf {
        self.dir.join(format!("gpu{gpu}")).join(f)
    }

    fn read_file(&self, gpu: u32, f: &'static str) -> Result<String, GpuControlError> {
        self.check_gpu(gpu)?;
        std::fs::read_to_string(self.path(gpu, f))
            .map(|s| s.trim().to_string())
            .map_err(|e| GpuControlError::Read {
                gpu,
                call: f,
                why: e.to_string(),
            })
    }

    fn numbers(&self, gpu: u32, f: &'static str) -> Result<Vec<f64>, GpuControlError> {
        let t = self.read_file(gpu, f)?;
        t.split_whitespace()
            .map(|x| {
                x.parse::<f64>()
                    .ok()
                    .filter(|v| v.is_finite())
                    .ok_or_else(|| GpuControlError::Read {
                        gpu,
                        call: f,
                        why: format!("`{x}` is not a number"),
                    })
            })
            .collect()
    }

    fn write(
        &self,
        gpu: u32,
        f: &str,
        value: &str,
        call: String,
    ) -> Result<String, GpuControlError> {
        use std::os::unix::fs::OpenOptionsExt;
        let p = self.path(gpu, f);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&p)
            .map_err(|e| GpuControlError::Write {
                gpu,
                call: call.clone(),
                why: format!("{}: {e}", p.display()),
            })?;
        file.write_all(format!("{value}\n").as_bytes())
            .map_err(|e| GpuControlError::Write {
                gpu,
                call: call.clone(),
                why: format!("{}: {e}", p.display()),
            })?;
        Ok(format!("{call} (fake GPU: {} = {value})", p.display()))
    }

    /// The current locked clocks (`None`: not locked).
    ///
    /// # Errors
    /// Unreadable.
    pub fn locked_clocks(&self, gpu: u32) -> Result<Option<(f64, f64)>, GpuControlError> {
        self.lock_file(gpu, "locked_clocks_mhz")
    }

    /// The current memory locked clocks (`None`: not locked).
    ///
    /// # Errors
    /// Unreadable.
    pub fn mem_locked_clocks(&self, gpu: u32) -> Result<Option<(f64, f64)>, GpuControlError> {
        self.lock_file(gpu, "mem_locked_clocks_mhz")
    }

    fn lock_file(&self, gpu: u32, f: &'static str) -> Result<Option<(f64, f64)>, GpuControlError> {
        if self.read_file(gpu, f)? == "none" {
            return Ok(None);
        }
        match self.numbers(gpu, f)?[..] {
            [a, b] => Ok(Some((a, b))),
            _ => Err(GpuControlError::Read {
                gpu,
                call: f,
                why: "not `MIN MAX` or `none`".into(),
            }),
        }
    }

    fn clock_list(&self, gpu: u32, f: &'static str) -> Result<Vec<u32>, GpuControlError> {
        Ok(self
            .numbers(gpu, f)?
            .into_iter()
            .filter(|v| *v >= 0.0 && *v <= f64::from(u32::MAX))
            .map(|v| v.round() as u32)
            .collect())
    }
}

impl GpuControl for FakeGpu {
    fn describe(&self) -> String {
        format!(
            "fake GPUs under {} ({} GPU(s))",
            self.dir.display(),
            self.count
        )
    }
    fn count(&self) -> u32 {
        self.count
    }
    fn check_locked_clocks(
        &self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<Vec<String>, GpuControlError> {
        let l = self.clock_list(gpu, "supported_graphics_clocks_mhz")?;
        check_clock_range(gpu, &l, min_mhz, max_mhz)
    }
    fn check_mem_locked_clocks(
        &self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<Vec<String>, GpuControlError> {
        self.check_gpu(gpu)?;
        let p = self.path(gpu, "mem_locked_clocks_mhz");
        if !p.exists() {
            return Err(GpuControlError::NoMemLock {
                gpu,
                why: format!(
                    "the fake GPU has no {} (the file that stands for nvmlDeviceSetMemoryLockedClocks)",
                    p.display()
                ),
            });
        }
        let l = self.clock_list(gpu, "supported_memory_clocks_mhz")?;
        check_clock_list(
            gpu,
            &l,
            min_mhz,
            max_mhz,
            "nvmlDeviceGetSupportedMemoryClocks",
            "memory locked clocks",
        )
    }
    fn power_limit_w(&self, gpu: u32) -> Result<f64, GpuControlError> {
        match self.numbers(gpu, "power_limit_w")?[..] {
            [w] => Ok(w),
            _ => Err(GpuControlError::Read {
                gpu,
                call: "power_limit_w",
                why: "not one number".into(),
            }),
        }
    }
    fn power_limit_range_w(&self, gpu: u32) -> Result<(f64, f64), GpuControlError> {
        match self.numbers(gpu, "power_limit_range_w")?[..] {
            [a, b] if a <= b => Ok((a, b)),
            _ => Err(GpuControlError::Read {
                gpu,
                call: "power_limit_range_w",
                why: "not `MIN MAX`".into(),
            }),
        }
    }
    fn set_locked_clocks(
        &mut self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<String, GpuControlError> {
        self.check_locked_clocks(gpu, min_mhz, max_mhz)?;
        self.write(
            gpu,
            "locked_clocks_mhz",
            &format!("{min_mhz:.0} {max_mhz:.0}"),
            format!("nvmlDeviceSetGpuLockedClocks(device {gpu}, minGpuClockMHz {min_mhz:.0}, maxGpuClockMHz {max_mhz:.0})"),
        )
    }
    fn reset_locked_clocks(&mut self, gpu: u32) -> Result<String, GpuControlError> {
        self.check_gpu(gpu)?;
        self.write(
            gpu,
            "locked_clocks_mhz",
            "none",
            format!("nvmlDeviceResetGpuLockedClocks(device {gpu})"),
        )
    }
    fn set_mem_locked_clocks(
        &mut self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<String, GpuControlError> {
        self.check_mem_locked_clocks(gpu, min_mhz, max_mhz)?;
        self.write(
            gpu,
            "mem_locked_clocks_mhz",
            &format!("{min_mhz:.0} {max_mhz:.0}"),
            format!("nvmlDeviceSetMemoryLockedClocks(device {gpu}, minMemClockMHz {min_mhz:.0}, maxMemClockMHz {max_mhz:.0})"),
        )
    }
    fn reset_mem_locked_clocks(&mut self, gpu: u32) -> Result<String, GpuControlError> {
        self.check_gpu(gpu)?;
        self.write(
            gpu,
            "mem_locked_clocks_mhz",
            "none",
            format!("nvmlDeviceResetMemoryLockedClocks(device {gpu})"),
        )
    }
    fn set_power_limit_w(&mut self, gpu: u32, watts: f64) -> Result<String, GpuControlError> {
        self.check_power_limit(gpu, watts)?;
        self.write(
            gpu,
            "power_limit_w",
            &format!("{watts}"),
            format!(
                "nvmlDeviceSetPowerManagementLimit(device {gpu}, limit {:.0} mW)",
                watts * 1e3
            ),
        )
    }
}

/// One GPU setting: the SM clock locked to one clock, the memory clock locked to one
/// clock, the power limit. `None`: left as it is.
#[derive(Debug, Clone, Copy, PartialEq, Default, Serialize, Deserialize)]
pub struct GpuSetting {
    /// `core_freq_mhz`: `nvmlDeviceSetGpuLockedClocks(min = max = this)`, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sm_clock_mhz: Option<f64>,
    /// `mem_freq_mhz`: `nvmlDeviceSetMemoryLockedClocks(min = max = this)`, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mem_clock_mhz: Option<f64>,
    /// `power_limit_w`: `nvmlDeviceSetPowerManagementLimit`, W.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
}

impl GpuSetting {
    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        self.sm_clock_mhz.is_none() && self.mem_clock_mhz.is_none() && self.power_limit_w.is_none()
    }

    /// The controls this setting changes.
    pub fn knobs(&self) -> Vec<GpuKnob> {
        let mut v = Vec::new();
        if self.sm_clock_mhz.is_some() {
            v.push(GpuKnob::LockedClocks);
        }
        if self.mem_clock_mhz.is_some() {
            v.push(GpuKnob::MemLockedClocks);
        }
        if self.power_limit_w.is_some() {
            v.push(GpuKnob::PowerLimit);
        }
        v
    }

    /// `core_freq_mhz = 1200, power_limit_w = 300` (the knob names of the sets).
    pub fn describe(&self) -> String {
        let mut v = Vec::new();
        if let Some(f) = self.sm_clock_mhz {
            v.push(format!("core_freq_mhz = {f}"));
        }
        if let Some(f) = self.mem_clock_mhz {
            v.push(format!("mem_freq_mhz = {f}"));
        }
        if let Some(w) = self.power_limit_w {
            v.push(format!("power_limit_w = {w}"));
        }
        v.join(", ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fake() -> (tempfile::TempDir, FakeGpu) {
        let d = tempfile::tempdir().unwrap();
        crate::controller::tests::copy_tree(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/fake-gpu"),
            d.path(),
        );
        let g = FakeGpu::open(d.path()).unwrap();
        (d, g)
    }

    #[test]
    fn fake_gpu_checks_sets_and_restores() {
        let (_d, mut g) = fake();
        assert_eq!(g.count(), 1);
        // locked clocks: checked against the supported list, reset on restore
        let s = g.save(0, GpuKnob::LockedClocks).unwrap();
        g.set_locked_clocks(0, 1200.0, 1200.0).unwrap();
        assert_eq!(g.locked_clocks(0).unwrap(), Some((1200.0, 1200.0)));
        let e = g
            .set_locked_clocks(0, 100.0, 3000.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("outside") && e.contains("MHz"), "{e}");
        g.validate(&s).unwrap();
        g.restore(&s).unwrap();
        assert_eq!(g.locked_clocks(0).unwrap(), None);
        // power limit: in range, saved value put back
        let before = g.power_limit_w(0).unwrap();
        let s = g.save(0, GpuKnob::PowerLimit).unwrap();
        assert_eq!(s.power_limit_w, Some(before));
        g.set_power_limit_w(0, 400.0).unwrap();
        assert_eq!(g.power_limit_w(0).unwrap(), 400.0);
        let e = g.set_power_limit_w(0, 5000.0).unwrap_err().to_string();
        assert!(e.contains("200..700 W"), "{e}");
        g.restore(&s).unwrap();
        assert_eq!(g.power_limit_w(0).unwrap(), before);
        // forged saves
        for bad in [
            GpuSaved {
                gpu: 7,
                knob: GpuKnob::LockedClocks,
                power_limit_w: None,
                sysfs: None,
            },
            GpuSaved {
                gpu: 0,
                knob: GpuKnob::PowerLimit,
                power_limit_w: Some(1e9),
                sysfs: None,
            },
            GpuSaved {
                gpu: 0,
                knob: GpuKnob::PowerLimit,
                power_limit_w: None,
                sysfs: None,
            },
        ] {
            assert!(g.validate(&bad).is_err(), "{bad}");
        }
        assert!(matches!(
            g.set_power_limit_w(3, 300.0),
            Err(GpuControlError::NoDevice { gpu: 3, count: 1 })
        ));
    }

    /// Issue 39: an unlisted clock inside the range is refused (it used to get a note),
    /// naming the nearest listed clocks, and nothing is written.
    #[test]
    fn unlisted_clock_refused_with_nearest_and_nothing_written() {
        let (d, mut g) = fake();
        let before = std::fs::read(d.path().join("gpu0/locked_clocks_mhz")).unwrap();
        let e = g
            .set_locked_clocks(0, 1234.0, 1234.0)
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("1234 MHz is not a supported clock") && e.contains("1200 MHz or 1500 MHz"),
            "{e}"
        );
        assert_eq!(
            std::fs::read(d.path().join("gpu0/locked_clocks_mhz")).unwrap(),
            before
        );
        assert_eq!(nearest_clocks(&[1200, 1500], 1234.0), vec![1200, 1500]);
        assert_eq!(nearest_clocks(&[1200, 1500], 1500.0), vec![1500]);
        assert_eq!(nearest_clocks(&[1200, 1500], 99.0), vec![1200]);
        // listed clocks pass, as a range too
        assert!(g.check_locked_clocks(0, 345.0, 1980.0).unwrap().is_empty());
    }

    /// The observed clocks of the fake GPU: the lock's upper end, else the highest listed.
    #[test]
    fn fake_gpu_observed_clock_follows_the_lock() {
        use crate::nvml::GpuSource;
        let (_d, mut g) = fake();
        assert_eq!(GpuSource::read(&mut g, 0).sm_clock_mhz, Some(1980.0));
        assert_eq!(GpuSource::read(&mut g, 0).mem_clock_mhz, Some(2619.0));
        g.set_locked_clocks(0, 1200.0, 1200.0).unwrap();
        g.set_mem_locked_clocks(0, 1593.0, 1593.0).unwrap();
        let r = GpuSource::read(&mut g, 0);
        assert_eq!(
            (
                r.sm_clock_mhz,
                r.mem_clock_mhz,
                r.power_w,
                r.throttle_reasons
            ),
            (Some(1200.0), Some(1593.0), Some(250.5), Some(0))
        );
    }

    /// Memory locked clocks: checked against the memory list, reset on restore; a GPU
    /// without the lock refuses with the reason.
    #[test]
    fn fake_gpu_memory_clock_lock() {
        let (d, mut g) = fake();
        let s = g.save(0, GpuKnob::MemLockedClocks).unwrap();
        let e = g
            .set_mem_locked_clocks(0, 2000.0, 2000.0)
            .unwrap_err()
            .to_string();
        assert!(e.contains("nearest: 1593 MHz or 2619 MHz"), "{e}");
        g.set_mem_locked_clocks(0, 1593.0, 1593.0).unwrap();
        assert_eq!(g.mem_locked_clocks(0).unwrap(), Some((1593.0, 1593.0)));
        g.restore(&s).unwrap();
        assert_eq!(g.mem_locked_clocks(0).unwrap(), None);
        std::fs::remove_file(d.path().join("gpu0/mem_locked_clocks_mhz")).unwrap();
        let e = g.check_mem_locked_clocks(0, 1593.0, 1593.0).unwrap_err();
        assert!(
            matches!(e, GpuControlError::NoMemLock { gpu: 0, .. }),
            "{e}"
        );
        assert!(e.to_string().contains("no memory-clock lock"), "{e}");
    }
}
