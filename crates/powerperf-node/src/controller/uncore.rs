//! Intel uncore frequency through the `intel_uncore_frequency` driver, written by the same
//! [`CpufreqController`] (same root, same `O_NOFOLLOW` writes, same min/max ordering, same
//! restore and validation of saved values) that writes cpufreq: `powerperfd`'s
//! `cpu.uncore_freq` and anything run as root call this code.
//!
//! Sysfs layout: Linux `Documentation/admin-guide/pm/intel_uncore_frequency_scaling.rst`
//! ("Sysfs Interface"): `<root>/sys/devices/system/cpu/intel_uncore_frequency/` holds one
//! directory per package and die, `package_XX_die_YY`, with `initial_min_freq_khz`,
//! `initial_max_freq_khz` (the limits sampled when the driver loaded: the hardware range),
//! `min_freq_khz`, `max_freq_khz` (the current limits, read-write) and `current_freq_khz`.
//! Kernels with TPMI (6.5 and later, Granite Rapids and newer) add `uncoreNN` directories,
//! one per power domain and fabric cluster, with the same files plus `package_id`,
//! `domain_id`, `fabric_cluster_id`; where they exist they are the ones controlled (the
//! legacy `package_XX_die_YY` directories are then kept for compatibility only).
//! The driver converts kHz to a ratio of 100 MHz (`UNCORE_FREQ_KHZ_MULTIPLIER`,
//! drivers/platform/x86/intel/uncore-frequency), so a setting must be a multiple of 100 MHz.

use super::{read_sysfs, ControllerError, CpufreqController, SavedFile, Snapshot, Write};
use crate::units::MegaHertz;
use std::path::{Path, PathBuf};

/// The driver's directory, relative to the sysfs root.
pub const UNCORE_DIR: &str = "sys/devices/system/cpu/intel_uncore_frequency";
/// The files powerperf writes in an uncore directory (and a restore record may name).
pub const UNCORE_FILES: [&str; 2] = ["min_freq_khz", "max_freq_khz"];
/// The step of uncore settings, MHz (one ratio unit of MSR 0x620).
pub const UNCORE_STEP_MHZ: f64 = 100.0;

/// One uncore frequency domain (a package and die, or a TPMI cluster).
#[derive(Debug, Clone, PartialEq)]
pub struct UncoreDomain {
    /// The directory's name: `package_00_die_00` or `uncore00`.
    pub name: String,
    /// The directory relative to the root.
    pub rel: String,
    /// `initial_min_freq_khz`, `initial_max_freq_khz` in MHz: what may be set.
    pub min_mhz: f64,
    pub max_mhz: f64,
    /// `current_freq_khz` in MHz, when the driver has it.
    pub current_mhz: Option<f64>,
}

fn is_legacy(name: &str) -> bool {
    // package_XX_die_YY
    let Some(rest) = name.strip_prefix("package_") else {
        return false;
    };
    let Some((p, d)) = rest.split_once("_die_") else {
        return false;
    };
    !p.is_empty()
        && !d.is_empty()
        && p.bytes().all(|b| b.is_ascii_digit())
        && d.bytes().all(|b| b.is_ascii_digit())
}

fn is_tpmi(name: &str) -> bool {
    name.strip_prefix("uncore")
        .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
}

fn read_khz(p: &Path) -> Result<u64, ControllerError> {
    let t = read_sysfs(p)?;
    t.parse().map_err(|_| ControllerError::Sysfs {
        path: p.to_path_buf(),
        message: format!("`{t}` is not a frequency in kHz"),
    })
}

impl CpufreqController {
    /// The uncore directory under this controller's root.
    pub fn uncore_dir(&self) -> PathBuf {
        self.root.join(UNCORE_DIR)
    }

    /// The uncore frequency domains: the `uncoreNN` directories where the kernel has them,
    /// else the `package_XX_die_YY` ones, sorted by name. Every directory must resolve
    /// inside the root.
    ///
    /// # Errors
    /// [`ControllerError::NoUncore`] when the driver's directory is absent or holds no
    /// domain (the message says what is missing and the fix); unreadable files.
    pub fn uncore_domains(&self) -> Result<Vec<UncoreDomain>, ControllerError> {
        let base = self.uncore_dir();
        let rd = std::fs::read_dir(&base).map_err(|e| ControllerError::NoUncore {
            path: base.clone(),
            reason: if e.kind() == std::io::ErrorKind::NotFound {
                "does not exist".into()
            } else {
                format!("cannot be listed: {e}")
            },
        })?;
        let mut names: Vec<String> = rd
            .flatten()
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| is_legacy(n) || is_tpmi(n))
            .collect();
        if names.iter().any(|n| is_tpmi(n)) {
            names.retain(|n| is_tpmi(n));
        }
        names.sort();
        if names.is_empty() {
            return Err(ControllerError::NoUncore {
                path: base,
                reason: "holds no package_XX_die_YY or uncoreNN directory".into(),
            });
        }
        let mut out = Vec::new();
        for name in names {
            let rel = format!("{UNCORE_DIR}/{name}");
            let abs = self.root.join(&rel);
            let resolved = abs.canonicalize().map_err(|e| ControllerError::Sysfs {
                path: abs.clone(),
                message: format!("cannot resolve: {e}"),
            })?;
            if !resolved.starts_with(&self.root) {
                return Err(ControllerError::OutsideRoot {
                    path: abs,
                    resolved,
                    root: self.root.clone(),
                });
            }
            let lo = read_khz(&abs.join("initial_min_freq_khz"))?;
            let hi = read_khz(&abs.join("initial_max_freq_khz"))?;
            let current_mhz = read_khz(&abs.join("current_freq_khz"))
                .ok()
                .map(|k| MegaHertz::from_khz(k).0);
            out.push(UncoreDomain {
                name,
                rel,
                min_mhz: MegaHertz::from_khz(lo).0,
                max_mhz: MegaHertz::from_khz(hi).0,
                current_mhz,
            });
        }
        Ok(out)
    }

    /// The domains named (all when `names` is `None`), each one this controller found.
    ///
    /// # Errors
    /// As [`uncore_domains`](Self::uncore_domains), and a name that is not a domain.
    pub fn uncore_select(
        &self,
        names: Option<&[String]>,
    ) -> Result<Vec<UncoreDomain>, ControllerError> {
        let all = self.uncore_domains()?;
        let Some(names) = names else {
            return Ok(all);
        };
        if names.is_empty() {
            return Err(ControllerError::Sysfs {
                path: self.uncore_dir(),
                message: "no uncore domain named".into(),
            });
        }
        let mut out: Vec<UncoreDomain> = Vec::new();
        for n in names {
            match all.iter().find(|d| &d.name == n) {
                Some(d) if !out.contains(d) => out.push(d.clone()),
                Some(_) => {}
                None => {
                    return Err(ControllerError::Sysfs {
                        path: self.uncore_dir(),
                        message: format!(
                            "`{}` is not an uncore domain here; the domains are {}",
                            n.chars().take(64).collect::<String>().escape_debug(),
                            all.iter()
                                .map(|d| d.name.as_str())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ),
                    })
                }
            }
        }
        out.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(out)
    }

    /// The current `min_freq_khz` and `max_freq_khz` of `domains` (what a setting
    /// overwrites).
    ///
    /// # Errors
    /// Unreadable files.
    pub fn uncore_snapshot(&self, domains: &[UncoreDomain]) -> Result<Snapshot, ControllerError> {
        let mut files = Vec::new();
        for d in domains {
            for n in UNCORE_FILES {
                let (rel, abs) = self.file(&d.rel, n);
                files.push(SavedFile {
                    path: rel,
                    value: read_sysfs(&abs)?,
                });
            }
        }
        Ok(Snapshot { files })
    }

    /// The writes that pin the uncore frequency of `domains` to `mhz` (`min_freq_khz` =
    /// `max_freq_khz`, ordered so that min ≤ max after each write), after checking `mhz`
    /// against each domain's `initial_min_freq_khz`..`initial_max_freq_khz` and the
    /// 100 MHz step. Changes nothing.
    ///
    /// # Errors
    /// [`ControllerError::OutOfRange`], unreadable files.
    pub fn plan_uncore(
        &self,
        mhz: f64,
        domains: &[UncoreDomain],
    ) -> Result<Vec<Write>, ControllerError> {
        let steps = mhz / UNCORE_STEP_MHZ;
        if !(mhz.is_finite() && (steps - steps.round()).abs() < 1e-9) {
            return Err(ControllerError::OutOfRange {
                mhz,
                allowed: format!(
                    "a multiple of {UNCORE_STEP_MHZ} MHz (the uncore ratio unit of the intel_uncore_frequency driver)"
                ),
            });
        }
        let khz = MegaHertz(mhz).to_khz().to_string();
        let mut out = Vec::new();
        for d in domains {
            if mhz < d.min_mhz - 1e-6 || mhz > d.max_mhz + 1e-6 {
                return Err(ControllerError::OutOfRange {
                    mhz,
                    allowed: format!(
                        "{} to {} MHz for the uncore of {} (initial_min_freq_khz..initial_max_freq_khz)",
                        d.min_mhz, d.max_mhz, d.name
                    ),
                });
            }
            out.extend(self.minmax_writes_of(
                &d.rel,
                ("min_freq_khz", "max_freq_khz"),
                Some(khz.clone()),
                Some(khz.clone()),
            )?);
        }
        Ok(out)
    }

    /// Pin the uncore frequency of `domains` (checked as [`plan_uncore`](Self::plan_uncore));
    /// returns the writes done.
    ///
    /// # Errors
    /// As `plan_uncore`, and write errors.
    pub fn set_uncore(
        &mut self,
        mhz: f64,
        domains: &[UncoreDomain],
    ) -> Result<Vec<Write>, ControllerError> {
        let writes = self.plan_uncore(mhz, domains)?;
        let mut done = Vec::new();
        for w in writes {
            self.write_file(&w.path, &w.new)?;
            done.push(w);
        }
        Ok(done)
    }

    /// Check one saved uncore file (a journal or restore record entry): the directory one
    /// this controller finds, the file one of [`UNCORE_FILES`], the value kHz within the
    /// domain's initial range.
    pub(super) fn validate_uncore(&self, f: &SavedFile) -> Result<(), ControllerError> {
        let bad = |reason: String| ControllerError::BadSaved {
            path: f.path.clone(),
            value: f.value.clone(),
            reason,
        };
        let Some((dir, name)) = f.path.rsplit_once('/') else {
            return Err(bad("not an uncore file path".into()));
        };
        let domains = self.uncore_domains().map_err(|e| bad(e.to_string()))?;
        let Some(d) = domains.iter().find(|d| d.rel == dir) else {
            return Err(bad(format!(
                "it is outside the uncore directories of {} ({UNCORE_DIR}/NAME/FILE, NAME one of {})",
                self.root.display(),
                domains
                    .iter()
                    .map(|d| d.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            )));
        };
        if !UNCORE_FILES.contains(&name) {
            return Err(bad(format!(
                "`{name}` is not an uncore file powerperf writes ({})",
                UNCORE_FILES.join(", ")
            )));
        }
        let (lo, hi) = (MegaHertz(d.min_mhz).to_khz(), MegaHertz(d.max_mhz).to_khz());
        let step = MegaHertz(UNCORE_STEP_MHZ).to_khz();
        match f.value.parse::<u64>() {
            // the checks a live request gets: the range and the 100 MHz step (issue 38)
            Ok(k) if (lo..=hi).contains(&k) && k % step == 0 => Ok(()),
            _ => Err(bad(format!(
                "not a frequency in kHz between initial_min_freq_khz {lo} and initial_max_freq_khz {hi} on the {UNCORE_STEP_MHZ} MHz step"
            ))),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::FrequencyController;

    fn tree() -> (tempfile::TempDir, CpufreqController) {
        let d = tempfile::tempdir().unwrap();
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/sysfs");
        for f in ["cpufreq-userspace", "intel-uncore"] {
            crate::controller::tests::copy_tree(&src.join(f), d.path());
        }
        let c = CpufreqController::open(d.path()).unwrap();
        (d, c)
    }

    fn read(c: &CpufreqController, dom: &str, f: &str) -> String {
        std::fs::read_to_string(c.uncore_dir().join(dom).join(f))
            .unwrap()
            .trim()
            .to_string()
    }

    #[test]
    fn uncore_is_pinned_checked_and_restored_through_the_cpufreq_controller() {
        let (_d, mut c) = tree();
        let doms = c.uncore_domains().unwrap();
        let names: Vec<&str> = doms.iter().map(|d| d.name.as_str()).collect();
        assert_eq!(names, ["package_00_die_00", "package_01_die_00"]);
        assert_eq!((doms[0].min_mhz, doms[0].max_mhz), (800.0, 2400.0));
        let one = c
            .uncore_select(Some(&["package_01_die_00".to_string()]))
            .unwrap();
        let snap = c.uncore_snapshot(&one).unwrap();
        // pin at 1800 MHz: min 800000 -> 1800000, max 2400000 -> 1800000
        let w = c.set_uncore(1800.0, &one).unwrap();
        assert_eq!(w.len(), 2, "{w:?}");
        assert_eq!(read(&c, "package_01_die_00", "min_freq_khz"), "1800000");
        assert_eq!(read(&c, "package_01_die_00", "max_freq_khz"), "1800000");
        assert_eq!(read(&c, "package_00_die_00", "min_freq_khz"), "800000");
        // saved values validate and are put back by the same restore as cpufreq's
        c.validate(&snap).unwrap();
        c.restore(&snap).unwrap();
        assert_eq!(read(&c, "package_01_die_00", "min_freq_khz"), "800000");
        assert_eq!(read(&c, "package_01_die_00", "max_freq_khz"), "2400000");
        // out of range, off the 100 MHz step, unknown domain: refused, nothing written
        for (mhz, want) in [(2500.0, "800 to 2400 MHz"), (1850.0, "multiple of 100")] {
            let e = c.set_uncore(mhz, &one).unwrap_err().to_string();
            assert!(e.contains(want), "{e}");
        }
        let e = c
            .uncore_select(Some(&["../cpu0".to_string()]))
            .unwrap_err()
            .to_string();
        assert!(e.contains("not an uncore domain"), "{e}");
        assert_eq!(read(&c, "package_01_die_00", "max_freq_khz"), "2400000");
    }

    #[test]
    fn forged_uncore_saves_are_refused() {
        let (_d, c) = tree();
        let dir = format!("{UNCORE_DIR}/package_00_die_00");
        for (path, value, want) in [
            (format!("{dir}/min_freq_khz"), "100", "between"),
            (
                format!("{dir}/current_freq_khz"),
                "800000",
                "not an uncore file",
            ),
            (
                format!("{UNCORE_DIR}/../cpu0/min_freq_khz"),
                "800000",
                "outside",
            ),
        ] {
            let s = Snapshot {
                files: vec![SavedFile {
                    path: path.clone(),
                    value: value.into(),
                }],
            };
            let e = c.validate(&s).unwrap_err().to_string();
            assert!(e.contains(want), "{path}: {e}");
        }
    }

    #[test]
    fn tpmi_directories_are_preferred_and_a_missing_driver_is_named() {
        let (d, c) = tree();
        let t = d.path().join(UNCORE_DIR).join("uncore00");
        std::fs::create_dir_all(&t).unwrap();
        for (f, v) in [
            ("initial_min_freq_khz", "800000"),
            ("initial_max_freq_khz", "2200000"),
            ("min_freq_khz", "800000"),
            ("max_freq_khz", "2200000"),
        ] {
            std::fs::write(t.join(f), format!("{v}\n")).unwrap();
        }
        let names: Vec<String> = c
            .uncore_domains()
            .unwrap()
            .into_iter()
            .map(|d| d.name)
            .collect();
        assert_eq!(names, ["uncore00"]);
        std::fs::remove_dir_all(d.path().join(UNCORE_DIR)).unwrap();
        let e = c.uncore_domains().unwrap_err().to_string();
        assert!(
            e.contains("intel_uncore_frequency")
                && e.contains("does not exist")
                && e.contains("modprobe intel-uncore-frequency"),
            "{e}"
        );
    }
}
