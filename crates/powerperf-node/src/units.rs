//! Units in types: newtypes with `from_*` constructors, so a value carries its unit.

use serde::{Deserialize, Serialize};

/// Energy in joules.
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize, Default)]
pub struct Joules(pub f64);

impl Joules {
    /// From microjoules (the powercap `energy_uj` unit).
    pub fn from_micro(uj: f64) -> Self {
        Joules(uj * 1e-6)
    }
}

/// A frequency in megahertz (the unit of every file powerperf writes).
#[derive(Debug, Clone, Copy, PartialEq, PartialOrd, Serialize, Deserialize, Default)]
pub struct MegaHertz(pub f64);

impl MegaHertz {
    /// From kilohertz (the cpufreq sysfs unit).
    pub fn from_khz(khz: u64) -> Self {
        MegaHertz(khz as f64 / 1000.0)
    }
    /// To kilohertz, rounded (for cpufreq sysfs writes).
    pub fn to_khz(self) -> u64 {
        (self.0 * 1000.0).round() as u64
    }
}

/// Frequency units and their factor to MHz, longest name first (so `MHz` is tried before
/// `Hz`). Matched in any case: `GHz`, `ghz`, `GHZ`.
pub const FREQ_UNITS: [(&str, f64); 4] = [("MHz", 1.0), ("GHz", 1e3), ("kHz", 1e-3), ("Hz", 1e-6)];

/// Factor to MHz of a frequency unit name, in any case (`GHz`, `ghz`, `kHz`, `Hz`).
pub fn freq_unit_factor(unit: &str) -> Option<f64> {
    FREQ_UNITS
        .iter()
        .find(|(u, _)| u.eq_ignore_ascii_case(unit))
        .map(|(_, f)| *f)
}

/// A frequency written with its unit (`2.20GHz`, `1200 MHz`, `1200000khz`, `1.2e9Hz`; the
/// unit in any case) in MHz; `None` when `text` is not a number followed by a frequency
/// unit (a bare number is the caller's to read, in its default unit).
pub fn freq_with_unit(text: &str) -> Option<f64> {
    let t = text.trim();
    FREQ_UNITS.iter().find_map(|(u, f)| {
        let cut = t.len().checked_sub(u.len())?;
        let (num, suffix) = (t.get(..cut)?, t.get(cut..)?);
        if !suffix.eq_ignore_ascii_case(u) {
            return None;
        }
        num.trim().parse::<f64>().ok().map(|v| v * f)
    })
}

/// Parse a frequency such as `2.20GHz`, `1200MHz`, `1200000kHz`, `1.2e9Hz` or a bare number
/// (taken as MHz) into MHz.
///
/// # Errors
/// A message naming the text when it is not a number with a known unit.
pub fn parse_freq_mhz(text: &str) -> Result<f64, String> {
    // The one frequency parser (units in any case), shared with `import`.
    let t = text.trim();
    freq_with_unit(t)
        .or_else(|| t.parse::<f64>().ok())
        .ok_or_else(|| format!("`{t}` is not a frequency (expected e.g. 2.2GHz, 1200MHz or 1200)"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_frequencies_with_units() {
        assert_eq!(parse_freq_mhz("2.20GHz").unwrap(), 2200.0);
        assert_eq!(parse_freq_mhz("1200MHz").unwrap(), 1200.0);
        assert_eq!(parse_freq_mhz("1200000kHz").unwrap(), 1200.0);
        assert_eq!(parse_freq_mhz("945").unwrap(), 945.0);
        assert_eq!(parse_freq_mhz("2.2ghz").unwrap(), 2200.0);
        assert_eq!(parse_freq_mhz(" 1200 MHZ ").unwrap(), 1200.0);
        assert!(parse_freq_mhz("fast").is_err());
    }

    #[test]
    fn khz_round_trip() {
        assert_eq!(MegaHertz::from_khz(2_200_000).0, 2200.0);
        assert_eq!(MegaHertz(1200.0).to_khz(), 1_200_000);
        assert!((Joules::from_micro(1_500_000.0).0 - 1.5).abs() < 1e-12);
    }
}

/// The energy used between two readings of a wrapping µJ counter (RAPL `energy_uj`).
///
/// When `now < before` the counter wrapped once: `now + max_range - before`
/// (powercap `max_energy_range_uj`, the range of `energy_uj`).
#[must_use]
pub fn delta_uj(before: u64, now: u64, max_range: u64) -> u64 {
    if now >= before {
        now - before
    } else {
        now.saturating_add(max_range.saturating_sub(before))
    }
}
