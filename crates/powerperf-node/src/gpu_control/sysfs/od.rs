//! amdgpu's overdrive clock table `device/pp_od_clk_voltage`, where the driver shows one with
//! an `OD_SCLK` section (Vega 20 and newer with overdrive, the MI200 and MI300 series): the
//! graphics clock's soft minimum and maximum, set with `s 0 MIN` and `s 1 MAX` and committed
//! with `c` (amdgpu_pm.c, "pp_od_clk_voltage", in `Documentation/gpu/amdgpu/thermal.rst`),
//! after `power_dpm_force_performance_level` = `manual`. Any whole MHz inside
//! `OD_RANGE`'s `SCLK` bounds is accepted (the table holds a range, not a list of levels).

use super::{GpuControlError, SysfsGpus};
use std::path::PathBuf;

/// The `OD_SCLK` pair and the `OD_RANGE` `SCLK` bounds, MHz.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OdSclk {
    pub min: u64,
    pub max: u64,
    pub range: (u64, u64),
}

fn mhz(t: &str) -> Option<u64> {
    let t = t.trim();
    t.strip_suffix("Mhz")
        .or_else(|| t.strip_suffix("MHz"))?
        .trim()
        .parse()
        .ok()
}

/// Parse `pp_od_clk_voltage`'s `OD_SCLK` (`0: 500Mhz`, `1: 2100Mhz`) and `OD_RANGE`'s
/// `SCLK: 500Mhz 2100Mhz`.
///
/// # Errors
/// No `OD_SCLK` section or no `SCLK` range, or values that are not `<n>Mhz`.
pub fn parse_od_sclk(text: &str) -> Result<OdSclk, String> {
    let (mut section, mut min, mut max, mut range) = ("", None, None, None);
    for line in text.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if line.starts_with("OD_") && line.ends_with(':') {
            section = line.trim_end_matches(':');
            continue;
        }
        match section {
            "OD_SCLK" => match line.split_once(':') {
                Some(("0", v)) => min = mhz(v),
                Some(("1", v)) => max = mhz(v),
                _ => {
                    return Err(format!(
                        "`{line}` in OD_SCLK is not `0: <n>Mhz` or `1: <n>Mhz`"
                    ))
                }
            },
            "OD_RANGE" => {
                if let Some(v) = line.strip_prefix("SCLK:") {
                    let b: Vec<u64> = v.split_whitespace().filter_map(mhz).collect();
                    if let [lo, hi] = b[..] {
                        range = Some((lo, hi));
                    } else {
                        return Err(format!("`{line}` is not `SCLK: <lo>Mhz <hi>Mhz`"));
                    }
                }
            }
            _ => {}
        }
    }
    match (min, max, range) {
        (Some(min), Some(max), Some(range)) if range.0 <= range.1 => Ok(OdSclk { min, max, range }),
        _ => Err("no OD_SCLK pair and OD_RANGE SCLK bounds".into()),
    }
}

impl SysfsGpus {
    pub(super) fn od_path(&self, gpu: u32) -> Result<PathBuf, GpuControlError> {
        Ok(self.card(gpu)?.device.join("pp_od_clk_voltage"))
    }

    /// The current `OD_SCLK` pair and its range.
    pub(super) fn od_sclk(&self, gpu: u32) -> Result<OdSclk, GpuControlError> {
        let p = self.od_path(gpu)?;
        let t = self.read(gpu, &p, "pp_od_clk_voltage")?;
        parse_od_sclk(&t).map_err(|why| GpuControlError::Read {
            gpu,
            call: "pp_od_clk_voltage",
            why: format!("{}: {why}", p.display()),
        })
    }

    /// Check `[min, max]` against `OD_RANGE` (whole MHz, min ≤ max).
    pub(super) fn od_check(
        &self,
        gpu: u32,
        min: f64,
        max: f64,
    ) -> Result<(u64, u64), GpuControlError> {
        let (a, b) = super::whole_mhz(gpu, min, max)?;
        let od = self.od_sclk(gpu)?;
        if a < od.range.0 || b > od.range.1 {
            return Err(GpuControlError::OutOfRange {
                gpu,
                what: format!("locked clocks [{a}, {b}] MHz"),
                allowed: format!(
                    "{}..{} MHz (pp_od_clk_voltage OD_RANGE SCLK)",
                    od.range.0, od.range.1
                ),
            });
        }
        Ok((a, b))
    }

    /// `s 0 MIN`, `s 1 MAX` (the maximum first when the new minimum is above the current
    /// maximum, where the table reads), then `c`.
    pub(super) fn od_write(
        &self,
        gpu: u32,
        min: u64,
        max: u64,
    ) -> Result<Vec<String>, GpuControlError> {
        let p = self.od_path(gpu)?;
        let max_first = self.od_sclk(gpu).is_ok_and(|od| min > od.max);
        let (s0, s1) = (format!("s 0 {min}"), format!("s 1 {max}"));
        let order = if max_first { [&s1, &s0] } else { [&s0, &s1] };
        let mut done = Vec::new();
        for cmd in order {
            done.push(self.write(gpu, &p, cmd)?);
        }
        done.push(self.write(gpu, &p, "c")?);
        Ok(done)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn od_table_parses_and_refuses() {
        let t = "OD_SCLK:\n0: 500Mhz\n1: 2100Mhz\nOD_MCLK:\n1: 1300Mhz\nOD_RANGE:\nSCLK:     500Mhz       2100Mhz\nMCLK:     1300Mhz      1300Mhz\n";
        assert_eq!(
            parse_od_sclk(t).unwrap(),
            OdSclk {
                min: 500,
                max: 2100,
                range: (500, 2100)
            }
        );
        for bad in [
            "",
            "c",
            "OD_SCLK:\n0: 500Mhz\n",
            "OD_SCLK:\n0: 500Mhz\n1: 9Mhz\nOD_RANGE:\nSCLK: 9Mhz\n",
            "OD_SCLK:\nx\n",
        ] {
            assert!(parse_od_sclk(bad).is_err(), "{bad}");
        }
    }
}
