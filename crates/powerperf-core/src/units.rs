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

/// Parse a frequency such as `2.20GHz`, `1200MHz`, `1200000kHz`, `1.2e9Hz` or a bare number
/// (taken as MHz) into MHz.
///
/// # Errors
/// A message naming the text when it is not a number with a known unit.
pub fn parse_freq_mhz(text: &str) -> Result<f64, String> {
    // The one frequency parser (units in any case), shared with `import`.
    let t = text.trim();
    powerperf_format::quantity::freq_with_unit(t)
        .or_else(|| t.parse::<f64>().ok())
        .ok_or_else(|| format!("`{t}` is not a frequency (expected e.g. 2.2GHz, 1200MHz or 1200)"))
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
