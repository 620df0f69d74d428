//! Reading the kernel's sysfs and procfs attributes (one value per file: cpufreq, powercap,
//! PMU and uncore directories). Here, in the lowest crate that both the analysis and the
//! node code depend on, so that there is one copy.

use std::path::{Path, PathBuf};

/// The text of a sysfs (or procfs) attribute, whitespace trimmed at both ends (a value such
/// as `userspace\n` or `1600000\n`).
///
/// # Errors
/// The file cannot be read (absent, no permission, not UTF-8).
pub fn read_trim(path: &Path) -> std::io::Result<String> {
    std::fs::read_to_string(path).map(|s| s.trim().to_string())
}

/// The most bytes read from one sysfs attribute (the power and energy readers, the sysfs GPU
/// controls). sysfs reports every attribute as 4096 bytes long (a page), and a value is a
/// few digits or a short table.
pub const MAX_ATTR: u64 = 4096;

/// The first 64 bytes of a small sysfs-style file (a counter, a kHz value), trimmed; `None`
/// where it is unreadable or not UTF-8. powerperfd's server and metrics sampler read
/// `energy_uj` and `current_freq_khz` with it.
pub fn read_small(p: &Path) -> Option<String> {
    use std::io::Read as _;
    let mut f = std::fs::File::open(p).ok()?;
    let mut b = [0u8; 64];
    let n = f.read(&mut b).ok()?;
    Some(std::str::from_utf8(&b[..n]).ok()?.trim().to_string())
}

/// The entries of `dir` named `<prefix><N>` (`hwmon3`, `tile0`, `gt1`, `card0`), sorted by N:
/// `(N, path)`. Other names are skipped; an unreadable `dir` gives none.
pub fn numbered_entries(dir: &Path, prefix: &str) -> Vec<(u32, PathBuf)> {
    let mut v: Vec<(u32, PathBuf)> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let n = e.file_name().to_str()?.strip_prefix(prefix)?.parse().ok()?;
            Some((n, e.path()))
        })
        .collect();
    v.sort();
    v
}

/// [`numbered_entries`]' paths, in N order.
pub fn numbered_dirs(dir: &Path, prefix: &str) -> Vec<PathBuf> {
    numbered_entries(dir, prefix)
        .into_iter()
        .map(|(_, p)| p)
        .collect()
}
