//! Reading one hwmon attribute (a decimal integer in µW, µJ or Hz) or amdgpu's binary
//! `gpu_metrics`, the way everything that may run as root reads files under a sysfs root
//! that a user may have made ([`crate::safe_file::read_bounded`]: `O_NOFOLLOW|O_NONBLOCK`,
//! `fstat` says a regular file, at most a stated size), and a counter that undoes its own
//! resets.

use std::path::Path;

/// A text attribute, trimmed: `Err` names the path, the error and the fix.
pub(crate) fn read_text(path: &Path) -> Result<String, String> {
    let bytes = crate::safe_file::read_bounded(path, crate::sysfs::MAX_ATTR, "sysfs attribute")
        .map_err(|e| with_fix(path, &format!("{e:#}")))?;
    let text = String::from_utf8(bytes)
        .map_err(|_| with_fix(path, &format!("{} is not text", path.display())))?;
    Ok(text.trim().to_string())
}

/// A decimal integer attribute (hwmon: `power1_average` µW, `energy1_input` µJ,
/// `freq1_input` Hz). `Err` names the path, the value and the fix.
pub(crate) fn read_u64(path: &Path) -> Result<u64, String> {
    let text = read_text(path)?;
    text.parse::<u64>().map_err(|_| {
        format!(
            "{} holds `{}`, not a non-negative integer (hwmon gives µW, µJ or Hz as a decimal integer): check the driver (a newer kernel, or `cat` the file by hand)",
            path.display(),
            text.chars().take(40).collect::<String>()
        )
    })
}

/// The error of a read, with the fix for the usual causes.
fn with_fix(path: &Path, err: &str) -> String {
    if err.contains("ermission denied") {
        format!(
            "{err}: {} is readable by root only on this node; run as root, or start powerperfd (its read_power reads it for you), or let users read it with `sudo chmod a+r {}` (until reboot)",
            path.display(),
            path.display()
        )
    } else if err.contains("No such file") {
        format!("{err}: the driver does not give this file (an older kernel or driver?)")
    } else {
        err.to_string()
    }
}

/// Whether this user (the effective uid) may open `path` for `mode` (`libc::R_OK`,
/// `libc::W_OK`): `faccessat(…, AT_EACCESS)`.
pub(crate) fn may(path: &Path, mode: libc::c_int) -> bool {
    use std::os::unix::ffi::OsStrExt as _;
    let Ok(c) = std::ffi::CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: `c` is a valid NUL-terminated string for the duration of the call.
    unsafe { libc::faccessat(libc::AT_FDCWD, c.as_ptr(), mode, libc::AT_EACCESS) == 0 }
}

/// An energy counter kept monotonic across the device's own resets.
///
/// `energy_j` starts at the counter's first value (in J) and then adds each non-negative
/// step. A step backwards (a wrap of a counter whose range the driver does not publish —
/// hwmon's `energyN_input` has no `max_energy_range`; a driver reload; a GPU reset) adds
/// nothing for that interval: the counter continues from the new value, and
/// [`EnergyCounter::resets`] counts such steps. So `energy_j` never decreases and never
/// jumps by a wrap's range; the energy of the one interval with the reset is lost.
/// [`super::Meter::read`] sees `resets` grow and leaves that interval without energy or power
/// (unknown, not zero W), and the run's notes say how many intervals were lost.
#[derive(Debug, Clone, Default)]
pub struct EnergyCounter {
    last_raw: Option<u64>,
    total_j: f64,
    resets: u64,
}

impl EnergyCounter {
    /// Add a raw reading, `raw` units of `joules_per_unit` J each; returns the total, J.
    pub fn update(&mut self, raw: u64, joules_per_unit: f64) -> f64 {
        match self.last_raw {
            None => self.total_j = raw as f64 * joules_per_unit,
            Some(last) if raw >= last => self.total_j += (raw - last) as f64 * joules_per_unit,
            Some(_) => self.resets += 1,
        }
        self.last_raw = Some(raw);
        self.total_j
    }

    /// How many times the counter went backwards.
    pub fn resets(&self) -> u64 {
        self.resets
    }
}
