//! Physical dimensions of a training set's columns (`points.parquet`): their units, the
//! range a value must lie in ([`check_value`], used by `import` on every cell and by
//! [`crate::set::TrainingSet::read`] on every number), and the one parser of frequency
//! units ([`powerperf_node::units::freq_with_unit`], any case), which `import` and the CLI's
//! `units` use.

use powerperf_node::units::{freq_unit_factor, FREQ_UNITS};

/// Physical dimension of a column, for unit parsing.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dimension {
    /// Seconds.
    Time,
    /// Watts.
    Power,
    /// Joules.
    Energy,
    /// Megahertz.
    Frequency,
    /// Dimensionless (thread counts, event counts).
    Count,
}

impl Dimension {
    /// Accepted unit names and their factor to the base unit (s, W, J, MHz, 1).
    pub fn units(self) -> &'static [(&'static str, f64)] {
        match self {
            Dimension::Time => &[
                ("s", 1.0),
                ("ms", 1e-3),
                ("us", 1e-6),
                ("ns", 1e-9),
                ("min", 60.0),
                ("h", 3600.0),
            ],
            Dimension::Power => &[("W", 1.0), ("mW", 1e-3), ("kW", 1e3)],
            Dimension::Energy => &[
                ("J", 1.0),
                ("mJ", 1e-3),
                ("uJ", 1e-6),
                ("kJ", 1e3),
                ("Wh", 3600.0),
                ("kWh", 3.6e6),
            ],
            Dimension::Frequency => &FREQ_UNITS,
            Dimension::Count => &[("", 1.0)],
        }
    }

    /// Factor of `unit` to the base unit.
    ///
    /// # Errors
    /// A message listing the accepted units.
    pub fn factor(self, unit: &str) -> Result<f64, String> {
        let found = match self {
            // Frequency units in any case, as everywhere a frequency is read.
            Dimension::Frequency => freq_unit_factor(unit),
            _ => self
                .units()
                .iter()
                .find(|(u, _)| *u == unit)
                .map(|(_, f)| *f),
        };
        found.ok_or_else(|| {
            let names: Vec<String> = self.units().iter().map(|(u, _)| format!("`{u}`")).collect();
            format!(
                "unknown unit `{unit}` for a {self:?} column; accepted: {}",
                names.join(", ")
            )
        })
    }

    /// Dimension of a knob by its name: `*_mhz` is a frequency, anything else a count.
    pub fn of_knob(name: &str) -> Dimension {
        if name.ends_with("_mhz") {
            Dimension::Frequency
        } else {
            Dimension::Count
        }
    }

    /// Default unit: the base unit.
    pub fn base_unit(self) -> &'static str {
        self.units()[0].0
    }
}

/// Check that `x` (in `dim`'s base unit) is a value a `role` column can hold: finite, and in
/// a physical range (frequencies above 0 and at most 1 THz; times, powers, energies and counts
/// not negative and below absurd magnitudes). Timestamps only need to be finite; static
/// features may be negative. Issue 18: 0, -1000, NaN, inf and 1e308 MHz were imported and
/// fitted.
///
/// # Errors
/// Why, with the range (for import's `ImportError::BadValue`'s `why`).
pub fn check_value(dim: Dimension, role: &str, x: f64) -> Result<(), String> {
    if !x.is_finite() {
        return Err("is not a finite number".into());
    }
    if role.contains("timestamp") {
        return Ok(());
    }
    let (ok, range) = match dim {
        Dimension::Frequency => (
            x > 0.0 && x <= 1e6,
            "a frequency must be above 0 and at most 1e6 MHz (1 THz)",
        ),
        Dimension::Time => ((0.0..=1e9).contains(&x), "a time must be from 0 to 1e9 s"),
        Dimension::Power => ((0.0..=1e9).contains(&x), "a power must be from 0 to 1e9 W"),
        Dimension::Energy => (
            (0.0..=1e18).contains(&x),
            "an energy must be from 0 to 1e18 J",
        ),
        Dimension::Count if role == "static feature" => {
            (x.abs() <= 1e18, "a static feature must be within ±1e18")
        }
        Dimension::Count => ((0.0..=1e20).contains(&x), "a count must be from 0 to 1e20"),
    };
    if ok {
        Ok(())
    } else {
        Err(format!("is out of range: {range}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use powerperf_node::units::freq_with_unit;

    /// One frequency parser for import and the CLI: units in any case (the CLI's parser
    /// took any case, import's only `GHz`, `MHz`, `kHz`, `Hz`; both are accepted now).
    #[test]
    fn frequency_units_in_any_case() {
        for (text, mhz) in [
            ("2.20GHz", 2200.0),
            ("2.20ghz", 2200.0),
            ("2.20GHZ", 2200.0),
            ("1200MHz", 1200.0),
            ("1200 mhz", 1200.0),
            ("1200000kHz", 1200.0),
            ("1200000KHZ", 1200.0),
            ("1.2e9Hz", 1200.0),
            ("1.2e9hz", 1200.0),
        ] {
            assert_eq!(freq_with_unit(text), Some(mhz), "{text}");
        }
        for text in ["945", "fast", "GHz", "2.2 W", "", "é"] {
            assert_eq!(freq_with_unit(text), None, "{text}");
        }
        assert_eq!(freq_unit_factor("ghz"), Some(1e3));
        assert_eq!(Dimension::Frequency.factor("GHz"), Ok(1e3));
        assert_eq!(Dimension::Frequency.factor("khz"), Ok(1e-3));
        assert!(Dimension::Frequency.factor("MW").is_err());
        // Other dimensions keep their exact unit names (`mW` is not `MW`).
        assert!(Dimension::Power.factor("MW").is_err());
    }
}
