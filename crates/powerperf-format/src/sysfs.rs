//! Reading the kernel's sysfs and procfs attributes (one value per file: cpufreq, powercap,
//! PMU and uncore directories). Here, in the lowest crate that both the analysis and the
//! node code depend on, so that there is one copy.

use std::path::Path;

/// The text of a sysfs (or procfs) attribute, whitespace trimmed at both ends (a value such
/// as `userspace\n` or `1600000\n`).
///
/// # Errors
/// The file cannot be read (absent, no permission, not UTF-8).
pub fn read_trim(path: &Path) -> std::io::Result<String> {
    std::fs::read_to_string(path).map(|s| s.trim().to_string())
}
