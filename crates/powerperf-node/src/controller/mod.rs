//! Frequency controllers behind one trait: cpufreq sysfs (userspace governor +
//! `scaling_setspeed`, or `scaling_min_freq`/`scaling_max_freq` clamps where the driver
//! has no userspace governor, e.g. intel_pstate), a fake controller that logs, and an NVML
//! locked-clocks controller that only describes what it would do.
//!
//! Units: MHz everywhere; kHz only inside [`CpufreqController`] at the sysfs boundary.
//! Sysfs layout: Linux `Documentation/admin-guide/pm/cpufreq.rst` ("Policy Interface in
//! sysfs"): `<root>/sys/devices/system/cpu/cpuN/cpufreq/{cpuinfo_min_freq, cpuinfo_max_freq,
//! scaling_available_frequencies, scaling_available_governors, scaling_governor,
//! scaling_setspeed, scaling_min_freq, scaling_max_freq}` (frequencies in kHz).

use crate::units::MegaHertz;
use serde::{Deserialize, Serialize};
use std::fs::OpenOptions;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

pub mod uncore;
pub use uncore::{UncoreDomain, UNCORE_DIR, UNCORE_FILES};

/// Errors of the controllers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ControllerError {
    /// No cpufreq directory under the root.
    #[error("no cpufreq on this machine: {path} does not exist (the kernel exposes no CPU frequency control here, as on most virtual machines); nothing can be set. Use --dry-run to see what would be done")]
    NoCpufreq { path: PathBuf },
    /// A sysfs file that cannot be read or parsed.
    #[error("{path}: {message}")]
    Sysfs { path: PathBuf, message: String },
    /// A setting outside the available range.
    #[error("{mhz} MHz is outside what this CPU allows: {allowed}; the plan was made for another machine or grid, re-plan with this machine's frequencies")]
    OutOfRange { mhz: f64, allowed: String },
    /// A file that must be written but is not writable.
    #[error("cannot write {path}: {reason}. Changing CPU frequencies needs root: run as root (e.g. `sudo powerperf apply ...`), give this user write access to the cpufreq files (e.g. a udev rule or `chmod`/`chgrp` on {dir}), or use --dry-run")]
    NoPermission {
        path: PathBuf,
        dir: PathBuf,
        reason: String,
    },
    /// Neither the userspace governor nor the min/max clamp files are available.
    #[error("{path}: this cpufreq driver offers neither the userspace governor nor scaling_min_freq/scaling_max_freq")]
    NoMethod { path: PathBuf },
    /// A controller that only describes (NVML in this build).
    #[error("{0} is a dry-run description only: this build never changes GPU clocks")]
    DescribeOnly(String),
    /// A saved setting (restore record) that is not one this controller may write.
    #[error("refusing the saved setting `{path}` = `{value}`: {reason}; nothing was written")]
    BadSaved {
        path: String,
        value: String,
        reason: String,
    },
    /// A governor that is not in a CPU's `scaling_available_governors`.
    #[error("`{governor}` is not a governor of this CPU: {path} lists {available}; ask for one of those")]
    BadGovernor {
        governor: String,
        path: PathBuf,
        available: String,
    },
    /// No Intel uncore frequency control under the root.
    #[error("no uncore frequency control on this machine: {path} {reason}. The intel_uncore_frequency driver provides it on Intel Xeon processors (Broadwell-EP and newer; `modprobe intel-uncore-frequency`, or `intel-uncore-frequency-tpmi` on Granite Rapids and newer); other CPUs, and most virtual machines, have no uncore frequency interface")]
    NoUncore { path: PathBuf, reason: String },
    /// A cpufreq directory that resolves outside the sysfs root.
    #[error(
        "{path} resolves to {resolved}, outside the sysfs root {root}; refusing to write there"
    )]
    OutsideRoot {
        path: PathBuf,
        resolved: PathBuf,
        root: PathBuf,
    },
}

/// The cpufreq files a controller ever writes (and a restore record may name), each checked
/// against its own allowed list when restored: `scaling_governor` against
/// `scaling_available_governors`, the frequencies against
/// `cpuinfo_min_freq`..`cpuinfo_max_freq`, `energy_performance_preference` against
/// `energy_performance_available_preferences`.
pub const CONTROL_FILES: [&str; 5] = [
    "scaling_governor",
    "scaling_min_freq",
    "scaling_max_freq",
    "scaling_setspeed",
    "energy_performance_preference",
];

/// The settings a controller allows, MHz.
#[derive(Debug, Clone, PartialEq)]
pub struct FreqRange {
    pub min_mhz: f64,
    pub max_mhz: f64,
    /// Discrete frequencies, when the driver lists them (`scaling_available_frequencies`).
    pub available_mhz: Option<Vec<f64>>,
}

impl FreqRange {
    /// Whether `mhz` is allowed: inside the range and, when the driver lists frequencies,
    /// one of the listed values to the kHz (issue 38: the userspace governor passes its
    /// target to the driver with `CPUFREQ_RELATION_L`, the lowest listed frequency at or
    /// above it, so 1200.4 MHz would run at the next listed step; it is refused instead).
    pub fn allows(&self, mhz: f64) -> bool {
        self.khz(mhz).is_some()
    }

    /// The kHz written for `mhz` when [`allows`](Self::allows) it: the listed value itself
    /// (`scaling_available_frequencies`), else `mhz` in whole kHz; `None` when it is
    /// outside the range, not a whole kHz, or not listed. The value written is the value
    /// checked.
    pub fn khz(&self, mhz: f64) -> Option<u64> {
        if !mhz.is_finite() || mhz <= 0.0 {
            return None;
        }
        let k = (mhz * 1000.0).round();
        // a whole kHz (the unit of the cpufreq files), up to the rounding of MHz as f64
        if (mhz * 1000.0 - k).abs() > 1e-3 {
            return None;
        }
        let khz = k as u64;
        let (lo, hi) = (
            MegaHertz(self.min_mhz).to_khz(),
            MegaHertz(self.max_mhz).to_khz(),
        );
        if !(lo..=hi).contains(&khz) {
            return None;
        }
        match &self.available_mhz {
            Some(l) => l.iter().map(|a| MegaHertz(*a).to_khz()).find(|a| *a == khz),
            None => Some(khz),
        }
    }

    /// Human description of the allowed values.
    pub fn describe(&self) -> String {
        match &self.available_mhz {
            Some(l) => format!(
                "one of {} MHz",
                l.iter()
                    .map(|f| format!("{f}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            None => format!("{} to {} MHz", self.min_mhz, self.max_mhz),
        }
    }
}

/// One file write: the path (relative to the controller's root for sysfs), old and new value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Write {
    pub path: String,
    pub old: Option<String>,
    pub new: String,
}

impl std::fmt::Display for Write {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}: {} -> {}",
            self.path,
            self.old.as_deref().unwrap_or("?"),
            self.new
        )
    }
}

/// Saved original values (path relative to the root, value as read).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Snapshot {
    #[serde(default, rename = "file")]
    pub files: Vec<SavedFile>,
}

/// One saved file value.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SavedFile {
    pub path: String,
    pub value: String,
}

/// A frequency controller: read current settings and the allowed range, set, restore.
pub trait FrequencyController {
    /// What it controls and how (`cpufreq userspace governor on 2 CPUs`).
    fn describe(&self) -> String;
    /// The allowed settings.
    ///
    /// # Errors
    /// Unreadable or malformed files.
    fn range(&self) -> Result<FreqRange, ControllerError>;
    /// The current values of everything [`set`](Self::set) may change.
    ///
    /// # Errors
    /// Unreadable files.
    fn snapshot(&self) -> Result<Snapshot, ControllerError>;
    /// The writes that setting `mhz` takes, after checking it is allowed. Changes nothing.
    ///
    /// # Errors
    /// [`ControllerError::OutOfRange`], unreadable files.
    fn plan_set(&self, mhz: f64) -> Result<Vec<Write>, ControllerError>;
    /// Check that the writes of [`plan_set`](Self::plan_set) are permitted. Changes nothing.
    ///
    /// # Errors
    /// [`ControllerError::NoPermission`] naming the first file and the fix.
    fn check_access(&self, writes: &[Write]) -> Result<(), ControllerError>;
    /// Set `mhz`; returns the writes done.
    ///
    /// # Errors
    /// As `plan_set`, and write errors.
    fn set(&mut self, mhz: f64) -> Result<Vec<Write>, ControllerError>;
    /// Put back the values of `snap` that differ from the current ones; returns the writes.
    ///
    /// # Errors
    /// Write errors (every file is tried; the first error is returned).
    fn restore(&mut self, snap: &Snapshot) -> Result<Vec<Write>, ControllerError>;
    /// The device whose clock this controller sets, as a plan names it: `cpu`, or
    /// `gpu<i>` (issue 20, item 4: `apply` refuses a plan for another device).
    fn device(&self) -> String {
        "cpu".into()
    }
}

/// How the cpufreq controller pins a frequency.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CpufreqMethod {
    /// `scaling_governor = userspace`, then `scaling_setspeed = kHz`.
    Userspace,
    /// `scaling_min_freq = scaling_max_freq = kHz` (drivers without the userspace governor,
    /// e.g. intel_pstate in active mode).
    Clamp,
}

/// cpufreq through sysfs under a root directory (`/` in production, a fixture in tests).
#[derive(Debug, Clone)]
pub struct CpufreqController {
    root: PathBuf,
    /// `(cpu number, cpufreq dir relative to root)`.
    cpus: Vec<(u32, String)>,
    method: CpufreqMethod,
}

/// The cpufreq directory of CPU 0 under `root`.
pub fn cpufreq_dir(root: &Path) -> PathBuf {
    root.join("sys/devices/system/cpu/cpu0/cpufreq")
}

/// [`crate::sysfs::read_trim`] with the path in the error.
fn read_sysfs(path: &Path) -> Result<String, ControllerError> {
    crate::sysfs::read_trim(path).map_err(|e| ControllerError::Sysfs {
        path: path.to_path_buf(),
        message: format!("cannot read: {e}"),
    })
}

fn read_khz(path: &Path) -> Result<u64, ControllerError> {
    let s = read_sysfs(path)?;
    s.parse::<u64>().map_err(|_| ControllerError::Sysfs {
        path: path.to_path_buf(),
        message: format!("`{s}` is not a frequency in kHz"),
    })
}

impl CpufreqController {
    /// Open the cpufreq policy files of every CPU under `root`.
    ///
    /// # Errors
    /// [`ControllerError::NoCpufreq`] when `<root>/sys/devices/system/cpu/cpu0/cpufreq` is
    /// absent; [`ControllerError::NoMethod`] when neither method is available.
    pub fn open(root: &Path) -> Result<Self, ControllerError> {
        let d0 = cpufreq_dir(root);
        if !d0.is_dir() {
            return Err(ControllerError::NoCpufreq { path: d0 });
        }
        // every path is resolved and must stay inside the canonical root (on a real kernel
        // cpuN/cpufreq is a link to ../cpufreq/policyN, inside it)
        let root = &root.canonicalize().map_err(|e| ControllerError::Sysfs {
            path: root.to_path_buf(),
            message: format!("cannot resolve: {e}"),
        })?;
        let d0 = cpufreq_dir(root);
        let base = root.join("sys/devices/system/cpu");
        let mut cpus = Vec::new();
        let rd = std::fs::read_dir(&base).map_err(|e| ControllerError::Sysfs {
            path: base.clone(),
            message: format!("cannot list: {e}"),
        })?;
        for e in rd.flatten() {
            let name = e.file_name().to_string_lossy().to_string();
            if let Some(n) = name.strip_prefix("cpu").and_then(|n| n.parse::<u32>().ok()) {
                let dir = e.path().join("cpufreq");
                if dir.is_dir() {
                    let resolved = dir.canonicalize().map_err(|e| ControllerError::Sysfs {
                        path: dir.clone(),
                        message: format!("cannot resolve: {e}"),
                    })?;
                    if !resolved.starts_with(root) {
                        return Err(ControllerError::OutsideRoot {
                            path: dir,
                            resolved,
                            root: root.to_path_buf(),
                        });
                    }
                    cpus.push((n, format!("sys/devices/system/cpu/{name}/cpufreq")));
                }
            }
        }
        cpus.sort();
        let govs = read_sysfs(&d0.join("scaling_available_governors")).unwrap_or_default();
        let method = if govs.split_whitespace().any(|g| g == "userspace")
            && d0.join("scaling_setspeed").exists()
        {
            CpufreqMethod::Userspace
        } else if d0.join("scaling_min_freq").exists() && d0.join("scaling_max_freq").exists() {
            CpufreqMethod::Clamp
        } else {
            return Err(ControllerError::NoMethod { path: d0 });
        };
        Ok(CpufreqController {
            root: root.to_path_buf(),
            cpus,
            method,
        })
    }

    /// The method in use.
    pub fn method(&self) -> CpufreqMethod {
        self.method
    }

    /// The CPU numbers controlled.
    pub fn cpus(&self) -> Vec<u32> {
        self.cpus.iter().map(|c| c.0).collect()
    }

    /// The canonical sysfs root.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// The same controller restricted to `cpus` (powerperfd sets and restores per CPU, so
    /// that two sessions may hold different CPUs). Every number must be a CPU this
    /// controller found; the list must not be empty.
    ///
    /// # Errors
    /// [`ControllerError::Sysfs`] naming the unknown CPU and the ones there are.
    pub fn only_cpus(&self, cpus: &[u32]) -> Result<Self, ControllerError> {
        if cpus.is_empty() {
            return Err(ControllerError::Sysfs {
                path: self.root.join("sys/devices/system/cpu"),
                message: "no CPU named".into(),
            });
        }
        let mut keep = Vec::new();
        for n in cpus {
            match self.cpus.iter().find(|c| c.0 == *n) {
                Some(c) if !keep.contains(c) => keep.push(c.clone()),
                Some(_) => {}
                None => {
                    return Err(ControllerError::Sysfs {
                        path: self
                            .root
                            .join(format!("sys/devices/system/cpu/cpu{n}/cpufreq")),
                        message: format!(
                            "CPU {n} has no cpufreq directory here; the CPUs are {:?}",
                            self.cpus()
                        ),
                    })
                }
            }
        }
        keep.sort();
        Ok(CpufreqController {
            root: self.root.clone(),
            cpus: keep,
            method: self.method,
        })
    }

    /// Check saved settings (a restore record) before anything is written: every path must
    /// be `sys/devices/system/cpu/cpuN/cpufreq/FILE` of a CPU this controller found (so
    /// inside the canonical root, no `..`), FILE one of [`CONTROL_FILES`], and every value
    /// one the file's own allowed list has (see [`CONTROL_FILES`]).
    ///
    /// # Errors
    /// [`ControllerError::BadSaved`] naming the first bad entry.
    pub fn validate(&self, snap: &Snapshot) -> Result<(), ControllerError> {
        for f in &snap.files {
            let bad = |reason: String| ControllerError::BadSaved {
                path: f.path.clone(),
                value: f.value.clone(),
                reason,
            };
            if f.path.starts_with(&format!("{UNCORE_DIR}/")) {
                self.validate_uncore(f)?;
                continue;
            }
            let Some((dir, name)) = f.path.rsplit_once('/') else {
                return Err(bad("not a cpufreq file path".into()));
            };
            if !self.cpus.iter().any(|(_, d)| d == dir) {
                return Err(bad(format!(
                    "it is outside the cpufreq directories of {} (sys/devices/system/cpu/cpuN/cpufreq/FILE, N one of {:?})",
                    self.root.display(),
                    self.cpus()
                )));
            }
            if !CONTROL_FILES.contains(&name) {
                return Err(bad(format!(
                    "`{name}` is not a file powerperf writes ({})",
                    CONTROL_FILES.join(", ")
                )));
            }
            let (_, d) = self.file(dir, "");
            let list = |file: &str| -> Result<Vec<String>, ControllerError> {
                Ok(read_sysfs(&d.join(file))?
                    .split_whitespace()
                    .map(str::to_string)
                    .collect())
            };
            match name {
                "scaling_governor" => {
                    let l = list("scaling_available_governors")?;
                    if !l.contains(&f.value) {
                        return Err(bad(format!(
                            "not in scaling_available_governors ({})",
                            l.join(" ")
                        )));
                    }
                }
                "energy_performance_preference" => {
                    let l = list("energy_performance_available_preferences")?;
                    if !l.contains(&f.value) {
                        return Err(bad(format!(
                            "not in energy_performance_available_preferences ({})",
                            l.join(" ")
                        )));
                    }
                }
                _ => {
                    let lo = read_khz(&d.join("cpuinfo_min_freq"))?;
                    let hi = read_khz(&d.join("cpuinfo_max_freq"))?;
                    let k = match f.value.parse::<u64>() {
                        Ok(k) if (lo..=hi).contains(&k) => k,
                        _ => {
                            return Err(bad(format!(
                                "not a frequency in kHz between cpuinfo_min_freq {lo} and cpuinfo_max_freq {hi}"
                            )))
                        }
                    };
                    // the check a live request gets: one of the listed frequencies, where
                    // the driver lists them (issue 38)
                    let avail = d.join("scaling_available_frequencies");
                    if avail.exists() {
                        let l = list("scaling_available_frequencies")?;
                        if !l.iter().any(|x| x.parse::<u64>().ok() == Some(k)) {
                            return Err(bad(format!(
                                "not in scaling_available_frequencies ({})",
                                l.join(" ")
                            )));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// The values a change of governor or of the core frequency may overwrite: what
    /// [`FrequencyController::snapshot`] saves, plus `scaling_governor` for the clamp method
    /// (powerperfd saves this before a session's first change of a CPU, whichever control).
    ///
    /// # Errors
    /// Unreadable files.
    pub fn snapshot_with_governor(&self) -> Result<Snapshot, ControllerError> {
        let mut snap = self.snapshot()?;
        if self.method == CpufreqMethod::Clamp {
            for (_, dir) in &self.cpus {
                let (rel, abs) = self.file(dir, "scaling_governor");
                if abs.exists() {
                    snap.files.push(SavedFile {
                        path: rel,
                        value: read_sysfs(&abs)?,
                    });
                }
            }
        }
        Ok(snap)
    }

    /// The writes that setting the governor `governor` on every CPU takes, after checking
    /// that each CPU's `scaling_available_governors` lists it (so a value never reaches a
    /// file unchecked). Changes nothing; a CPU already on it needs no write.
    ///
    /// # Errors
    /// [`ControllerError::BadGovernor`], unreadable files.
    pub fn plan_governor(&self, governor: &str) -> Result<Vec<Write>, ControllerError> {
        let mut out = Vec::new();
        for (_, dir) in &self.cpus {
            let (_, avail) = self.file(dir, "scaling_available_governors");
            let list = read_sysfs(&avail)?;
            if governor.is_empty() || !list.split_whitespace().any(|g| g == governor) {
                return Err(ControllerError::BadGovernor {
                    governor: governor.chars().take(64).collect(),
                    path: avail,
                    available: list,
                });
            }
            let (rel, abs) = self.file(dir, "scaling_governor");
            let cur = read_sysfs(&abs)?;
            if cur != governor {
                out.push(Write {
                    path: rel,
                    old: Some(cur),
                    new: governor.to_string(),
                });
            }
        }
        Ok(out)
    }

    /// Set the governor of every CPU (checked as [`plan_governor`](Self::plan_governor));
    /// returns the writes done.
    ///
    /// # Errors
    /// As `plan_governor`, and write errors.
    pub fn set_governor(&mut self, governor: &str) -> Result<Vec<Write>, ControllerError> {
        let writes = self.plan_governor(governor)?;
        let mut done = Vec::new();
        for w in writes {
            self.write_file(&w.path, &w.new)?;
            done.push(w);
        }
        Ok(done)
    }

    fn file(&self, dir: &str, name: &str) -> (String, PathBuf) {
        let rel = format!("{dir}/{name}");
        let abs = self.root.join(&rel);
        (rel, abs)
    }

    fn write_file(&self, rel: &str, value: &str) -> Result<(), ControllerError> {
        use std::os::unix::fs::OpenOptionsExt;
        let abs = self.root.join(rel);
        // never through a symbolic link, never creating a file
        let mut f = OpenOptions::new()
            .write(true)
            .truncate(true)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&abs)
            .map_err(|e| self.write_error(&abs, e))?;
        tracing::debug!(file = %abs.display(), value, "cpufreq write");
        // a trailing newline, as `echo VALUE > FILE` writes it; the kernel accepts both
        f.write_all(format!("{value}\n").as_bytes())
            .map_err(|e| self.write_error(&abs, e))
    }

    fn write_error(&self, abs: &Path, e: std::io::Error) -> ControllerError {
        if e.kind() == std::io::ErrorKind::PermissionDenied {
            ControllerError::NoPermission {
                path: abs.to_path_buf(),
                dir: abs.parent().map(Path::to_path_buf).unwrap_or_default(),
                reason: e.to_string(),
            }
        } else {
            ControllerError::Sysfs {
                path: abs.to_path_buf(),
                message: format!("cannot write: {e}"),
            }
        }
    }

    /// Order min/max writes so that min ≤ max holds after each one: when the new minimum is
    /// above the current maximum, the maximum goes first.
    fn minmax_writes(
        &self,
        dir: &str,
        new_min: Option<String>,
        new_max: Option<String>,
    ) -> Result<Vec<Write>, ControllerError> {
        self.minmax_writes_of(
            dir,
            ("scaling_min_freq", "scaling_max_freq"),
            new_min,
            new_max,
        )
    }

    /// [`minmax_writes`](Self::minmax_writes) for a pair of files `(min, max)` of `dir`
    /// (cpufreq's `scaling_min_freq`/`scaling_max_freq`, the uncore's
    /// `min_freq_khz`/`max_freq_khz`).
    fn minmax_writes_of(
        &self,
        dir: &str,
        (min_name, max_name): (&str, &str),
        new_min: Option<String>,
        new_max: Option<String>,
    ) -> Result<Vec<Write>, ControllerError> {
        let (rmin, amin) = self.file(dir, min_name);
        let (rmax, amax) = self.file(dir, max_name);
        let cur_min = read_sysfs(&amin)?;
        let cur_max = read_sysfs(&amax)?;
        let mut w_min = new_min.filter(|v| *v != cur_min).map(|v| Write {
            path: rmin,
            old: Some(cur_min.clone()),
            new: v,
        });
        let mut w_max = new_max.filter(|v| *v != cur_max).map(|v| Write {
            path: rmax,
            old: Some(cur_max.clone()),
            new: v,
        });
        let max_first = match (&w_min, cur_max.parse::<u64>()) {
            (Some(w), Ok(cm)) => w.new.parse::<u64>().map(|nm| nm > cm).unwrap_or(false),
            _ => false,
        };
        let mut out = Vec::new();
        if max_first {
            out.extend(w_max.take());
            out.extend(w_min.take());
        } else {
            out.extend(w_min.take());
            out.extend(w_max.take());
        }
        Ok(out)
    }
}

impl FrequencyController for CpufreqController {
    fn describe(&self) -> String {
        let how = match self.method {
            CpufreqMethod::Userspace => "userspace governor + scaling_setspeed",
            CpufreqMethod::Clamp => {
                "scaling_min_freq/scaling_max_freq clamps (no userspace governor)"
            }
        };
        format!(
            "cpufreq under {} on {} CPUs, {how}",
            self.root.display(),
            self.cpus.len()
        )
    }

    fn range(&self) -> Result<FreqRange, ControllerError> {
        let (_, d0) = self.file(&self.cpus[0].1, "");
        let min = MegaHertz::from_khz(read_khz(&d0.join("cpuinfo_min_freq"))?).0;
        let max = MegaHertz::from_khz(read_khz(&d0.join("cpuinfo_max_freq"))?).0;
        let avail_path = d0.join("scaling_available_frequencies");
        let available_mhz = if avail_path.exists() {
            let text = read_sysfs(&avail_path)?;
            let mut l = Vec::new();
            for tok in text.split_whitespace() {
                let khz = tok.parse::<u64>().map_err(|_| ControllerError::Sysfs {
                    path: avail_path.clone(),
                    message: format!("`{tok}` is not a frequency in kHz"),
                })?;
                l.push(MegaHertz::from_khz(khz).0);
            }
            l.sort_by(f64::total_cmp);
            Some(l)
        } else {
            None
        };
        Ok(FreqRange {
            min_mhz: min,
            max_mhz: max,
            available_mhz,
        })
    }

    fn snapshot(&self) -> Result<Snapshot, ControllerError> {
        let names: &[&str] = match self.method {
            CpufreqMethod::Userspace => {
                &["scaling_governor", "scaling_min_freq", "scaling_max_freq"]
            }
            CpufreqMethod::Clamp => &["scaling_min_freq", "scaling_max_freq"],
        };
        let mut files = Vec::new();
        for (_, dir) in &self.cpus {
            for n in names {
                let (rel, abs) = self.file(dir, n);
                if abs.exists() {
                    files.push(SavedFile {
                        path: rel,
                        value: read_sysfs(&abs)?,
                    });
                }
            }
            if self.method == CpufreqMethod::Userspace {
                // the userspace frequency matters only when userspace was the governor already
                let (_, g) = self.file(dir, "scaling_governor");
                if read_sysfs(&g)? == "userspace" {
                    let (rel, abs) = self.file(dir, "scaling_setspeed");
                    files.push(SavedFile {
                        path: rel,
                        value: read_sysfs(&abs)?,
                    });
                }
            }
        }
        Ok(Snapshot { files })
    }

    fn plan_set(&self, mhz: f64) -> Result<Vec<Write>, ControllerError> {
        let range = self.range()?;
        let Some(khz) = range.khz(mhz) else {
            return Err(ControllerError::OutOfRange {
                mhz,
                allowed: range.describe(),
            });
        };
        let khz = khz.to_string();
        let mut out = Vec::new();
        for (_, dir) in &self.cpus {
            match self.method {
                CpufreqMethod::Userspace => {
                    let (rg, ag) = self.file(dir, "scaling_governor");
                    let g = read_sysfs(&ag)?;
                    if g != "userspace" {
                        out.push(Write {
                            path: rg,
                            old: Some(g),
                            new: "userspace".into(),
                        });
                    }
                    let (rs, as_) = self.file(dir, "scaling_setspeed");
                    out.push(Write {
                        path: rs,
                        old: read_sysfs(&as_).ok(),
                        new: khz.clone(),
                    });
                }
                CpufreqMethod::Clamp => {
                    out.extend(self.minmax_writes(dir, Some(khz.clone()), Some(khz.clone()))?);
                }
            }
        }
        Ok(out)
    }

    fn check_access(&self, writes: &[Write]) -> Result<(), ControllerError> {
        for w in writes {
            let abs = self.root.join(&w.path);
            OpenOptions::new()
                .write(true)
                .open(&abs)
                .map_err(|e| self.write_error(&abs, e))?;
        }
        Ok(())
    }

    fn set(&mut self, mhz: f64) -> Result<Vec<Write>, ControllerError> {
        let writes = self.plan_set(mhz)?;
        let mut done = Vec::new();
        for w in writes {
            self.write_file(&w.path, &w.new)?;
            done.push(w);
        }
        Ok(done)
    }

    fn restore(&mut self, snap: &Snapshot) -> Result<Vec<Write>, ControllerError> {
        let mut done = Vec::new();
        let mut first_err = None;
        // group by directory: governor first, then min/max in a safe order, then setspeed
        let mut dirs: Vec<String> = Vec::new();
        for f in &snap.files {
            let d = f
                .path
                .rsplit_once('/')
                .map(|p| p.0.to_string())
                .unwrap_or_default();
            if !dirs.contains(&d) {
                dirs.push(d);
            }
        }
        for dir in dirs {
            let get = |n: &str| {
                snap.files
                    .iter()
                    .find(|f| f.path == format!("{dir}/{n}"))
                    .map(|f| f.value.clone())
            };
            let mut writes = Vec::new();
            if let Some(g) = get("scaling_governor") {
                let (rel, abs) = self.file(&dir, "scaling_governor");
                let cur = read_sysfs(&abs).ok();
                if cur.as_deref() != Some(g.as_str()) {
                    writes.push(Write {
                        path: rel,
                        old: cur,
                        new: g,
                    });
                }
            }
            if let Some(p) = get("energy_performance_preference") {
                let (rel, abs) = self.file(&dir, "energy_performance_preference");
                let cur = read_sysfs(&abs).ok();
                if cur.as_deref() != Some(p.as_str()) {
                    writes.push(Write {
                        path: rel,
                        old: cur,
                        new: p,
                    });
                }
            }
            let names = if dir.starts_with(UNCORE_DIR) {
                ("min_freq_khz", "max_freq_khz")
            } else {
                ("scaling_min_freq", "scaling_max_freq")
            };
            let mm = (get(names.0), get(names.1));
            let mut minmax = match self.minmax_writes_of(&dir, names, mm.0, mm.1) {
                Ok(w) => w,
                Err(e) => {
                    first_err.get_or_insert(e);
                    vec![]
                }
            };
            if let Some(s) = get("scaling_setspeed") {
                let (rel, abs) = self.file(&dir, "scaling_setspeed");
                let cur = read_sysfs(&abs).ok();
                if cur.as_deref() != Some(s.as_str()) {
                    minmax.push(Write {
                        path: rel,
                        old: cur,
                        new: s,
                    });
                }
            }
            writes.extend(minmax);
            for w in writes {
                match self.write_file(&w.path, &w.new) {
                    Ok(()) => done.push(w),
                    Err(e) => {
                        first_err.get_or_insert(e);
                    }
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(done),
        }
    }
}

/// A controller that changes nothing and logs every call (for tests and `--controller fake`).
#[derive(Debug, Clone)]
pub struct FakeController {
    pub range: FreqRange,
    pub current_mhz: f64,
    /// One line per call: `set 1200`, `restore 2400`.
    pub log: Arc<Mutex<Vec<String>>>,
    /// The device it pretends to be (`cpu` unless a test says otherwise).
    pub device: String,
}

impl FakeController {
    /// A fake CPU with `available` frequencies (MHz), currently at the highest.
    pub fn new(available: &[f64]) -> Self {
        let mut l = available.to_vec();
        l.sort_by(f64::total_cmp);
        FakeController {
            range: FreqRange {
                min_mhz: l[0],
                max_mhz: *l.last().unwrap_or(&l[0]),
                available_mhz: Some(l.clone()),
            },
            current_mhz: *l.last().unwrap_or(&0.0),
            log: Arc::new(Mutex::new(Vec::new())),
            device: "cpu".into(),
        }
    }
    fn note(&self, s: String) {
        if let Ok(mut l) = self.log.lock() {
            l.push(s);
        }
    }
}

impl FrequencyController for FakeController {
    fn device(&self) -> String {
        self.device.clone()
    }
    fn describe(&self) -> String {
        format!("fake controller ({})", self.range.describe())
    }
    fn range(&self) -> Result<FreqRange, ControllerError> {
        Ok(self.range.clone())
    }
    fn snapshot(&self) -> Result<Snapshot, ControllerError> {
        Ok(Snapshot {
            files: vec![SavedFile {
                path: "fake/freq_mhz".into(),
                value: format!("{}", self.current_mhz),
            }],
        })
    }
    fn plan_set(&self, mhz: f64) -> Result<Vec<Write>, ControllerError> {
        if !self.range.allows(mhz) {
            return Err(ControllerError::OutOfRange {
                mhz,
                allowed: self.range.describe(),
            });
        }
        Ok(vec![Write {
            path: "fake/freq_mhz".into(),
            old: Some(format!("{}", self.current_mhz)),
            new: format!("{mhz}"),
        }])
    }
    fn check_access(&self, _writes: &[Write]) -> Result<(), ControllerError> {
        Ok(())
    }
    fn set(&mut self, mhz: f64) -> Result<Vec<Write>, ControllerError> {
        let w = self.plan_set(mhz)?;
        self.note(format!("set {mhz}"));
        self.current_mhz = mhz;
        Ok(w)
    }
    fn restore(&mut self, snap: &Snapshot) -> Result<Vec<Write>, ControllerError> {
        let mut out = Vec::new();
        for f in &snap.files {
            let v: f64 = f.value.parse().map_err(|_| ControllerError::Sysfs {
                path: f.path.clone().into(),
                message: format!("`{}` is not MHz", f.value),
            })?;
            self.note(format!("restore {v}"));
            out.push(Write {
                path: f.path.clone(),
                old: Some(format!("{}", self.current_mhz)),
                new: f.value.clone(),
            });
            self.current_mhz = v;
        }
        Ok(out)
    }
}

/// NVML locked clocks, described only: this build never calls NVML setters. `set`
/// returns [`ControllerError::DescribeOnly`]; [`NvmlLockedClocks::describe_set`] says what a
/// privileged run would call (NVML API reference: `nvmlDeviceSetGpuLockedClocks`,
/// `nvmlDeviceSetMemoryLockedClocks`, `nvmlDeviceResetGpuLockedClocks`,
/// `nvmlDeviceResetMemoryLockedClocks`).
#[derive(Debug, Clone)]
pub struct NvmlLockedClocks {
    pub device: u32,
}

impl NvmlLockedClocks {
    /// The calls that would set the SM clock (and memory clock), and reset them at exit.
    pub fn describe_set(&self, sm_mhz: Option<f64>, mem_mhz: Option<f64>) -> Vec<String> {
        let d = self.device;
        let mut v = Vec::new();
        if let Some(f) = sm_mhz {
            v.push(format!(
                "nvmlDeviceSetGpuLockedClocks(device {d}, minGpuClockMHz {f:.0}, maxGpuClockMHz {f:.0})"
            ));
        }
        if let Some(m) = mem_mhz {
            v.push(format!(
                "nvmlDeviceSetMemoryLockedClocks(device {d}, minMemClockMHz {m:.0}, maxMemClockMHz {m:.0})"
            ));
        }
        if sm_mhz.is_some() {
            v.push(format!(
                "at exit: nvmlDeviceResetGpuLockedClocks(device {d})"
            ));
        }
        if mem_mhz.is_some() {
            v.push(format!(
                "at exit: nvmlDeviceResetMemoryLockedClocks(device {d})"
            ));
        }
        v
    }
}

impl FrequencyController for NvmlLockedClocks {
    fn describe(&self) -> String {
        format!(
            "NVML locked clocks on GPU {} (dry-run description only)",
            self.device
        )
    }
    fn range(&self) -> Result<FreqRange, ControllerError> {
        Err(ControllerError::DescribeOnly(self.describe()))
    }
    fn snapshot(&self) -> Result<Snapshot, ControllerError> {
        Ok(Snapshot::default())
    }
    fn plan_set(&self, _mhz: f64) -> Result<Vec<Write>, ControllerError> {
        Err(ControllerError::DescribeOnly(self.describe()))
    }
    fn check_access(&self, _writes: &[Write]) -> Result<(), ControllerError> {
        Err(ControllerError::DescribeOnly(self.describe()))
    }
    fn set(&mut self, _mhz: f64) -> Result<Vec<Write>, ControllerError> {
        Err(ControllerError::DescribeOnly(self.describe()))
    }
    fn restore(&mut self, _snap: &Snapshot) -> Result<Vec<Write>, ControllerError> {
        Ok(vec![])
    }
}

#[cfg(test)]
pub(crate) mod tests;
