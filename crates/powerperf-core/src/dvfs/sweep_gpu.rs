//! The GPU side of `powerperf sweep` (issue 39, item 4): the grid of GPU settings
//! (`--gpu-clock`, `--gpu-mem-clock`, `--gpu-power-limit`), and what each run observed
//! (mean SM and memory clocks, mean power and the throttle reasons over the run's
//! timeline samples of that GPU: `gpu<N>_*` for an NVML GPU, `<stem>_clock_mhz` and
//! `<stem>_power_w` of an AMD or Intel GPU's power device, [`GpuColumns`]), with the 2 %
//! rule: a run whose observed clock is more than [`MAX_CLOCK_OFF`] away from the requested
//! one, or that has no observed clock, is flagged, the flag naming the throttle reasons
//! NVML reported over the run ([`throttle_reason_names`]), in its `run.toml`
//! (`[gpu_setting] flag`), in `SET/sweep.toml` (`[[off_setting]]`) and by `powerperf fit`.

use powerperf_format::run::GpuRunSetting;
pub use powerperf_node::gpu_control::node::GpuColumns;
use powerperf_node::gpu_control::GpuSetting;
use serde::{Deserialize, Serialize};
use std::path::Path;

/// The largest relative difference between the observed mean clock and the requested one
/// that a point may have and not be flagged.
pub const MAX_CLOCK_OFF: f64 = 0.02;

/// A point of the set not at its requested GPU setting (`[[off_setting]]` of
/// `SET/sweep.toml`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OffSetting {
    /// The run directory's name under `SET/runs/`.
    pub run: String,
    /// Why.
    pub flag: String,
}

/// Every combination of the GPU lists, SM clock outermost; `[empty]` when all are empty.
pub fn gpu_grid(sm: &[f64], mem: &[f64], pl: &[f64]) -> Vec<GpuSetting> {
    let opt = |v: &[f64]| -> Vec<Option<f64>> {
        if v.is_empty() {
            vec![None]
        } else {
            v.iter().copied().map(Some).collect()
        }
    };
    let mut out = Vec::new();
    for s in opt(sm) {
        for m in opt(mem) {
            for p in opt(pl) {
                let g = GpuSetting {
                    sm_clock_mhz: s,
                    mem_clock_mhz: m,
                    power_limit_w: p,
                };
                if !out.contains(&g) {
                    out.push(g);
                }
            }
        }
    }
    out
}

/// The run directory name's GPU part: `_g1200`, `_m1593`, `_p300` for what is set.
pub fn dir_suffix(g: &GpuSetting) -> String {
    let mut s = String::new();
    if let Some(f) = g.sm_clock_mhz {
        s.push_str(&format!("_g{f}"));
    }
    if let Some(f) = g.mem_clock_mhz {
        s.push_str(&format!("_m{f}"));
    }
    if let Some(w) = g.power_limit_w {
        s.push_str(&format!("_p{w}"));
    }
    s
}

/// NVML's clock throttle reasons (`nvmlClocksThrottleReason*`, since CUDA 12.2 also named
/// `nvmlClocksEventReason*`; nvml.h): bit, NVML's name, and what it means.
pub const THROTTLE_REASONS: [(u64, &str, &str); 9] = [
    (0x1, "GpuIdle", "GPU idle"),
    (
        0x2,
        "ApplicationsClocksSetting",
        "application clocks setting",
    ),
    (0x4, "SwPowerCap", "power cap"),
    (0x8, "HwSlowdown", "hardware slowdown"),
    (0x10, "SyncBoost", "sync boost"),
    (0x20, "SwThermalSlowdown", "thermal, software"),
    (0x40, "HwThermalSlowdown", "thermal, hardware"),
    (0x80, "HwPowerBrakeSlowdown", "power brake"),
    (0x100, "DisplayClockSetting", "display clock setting"),
];

/// The reasons of a throttle-reason mask, by NVML's names: `SwPowerCap (power cap)`; a bit
/// NVML does not define is named by its value.
pub fn throttle_reason_names(mask: u64) -> Vec<String> {
    let mut v: Vec<String> = THROTTLE_REASONS
        .iter()
        .filter(|(b, _, _)| mask & b != 0)
        .map(|(_, n, w)| format!("{n} ({w})"))
        .collect();
    let known = THROTTLE_REASONS.iter().fold(0, |a, (b, _, _)| a | b);
    if mask & !known != 0 {
        v.push(format!("unknown bits {:#x}", mask & !known));
    }
    v
}

/// What the flag of an off-setting point says about throttling: the reasons NVML reported
/// over the run (the OR of the samples' masks); `column` `None`: the GPU's driver gives none
/// that collect records (an AMD or Intel GPU of sysfs).
fn throttle_words(column: Option<&str>, mask: Option<u64>) -> String {
    match (column, mask) {
        (None, _) => "no throttle reasons: collect records none for an AMD or Intel GPU".into(),
        (Some(c), None) => format!("throttle reasons not read (no {c} samples)"),
        (Some(_), Some(0)) => "NVML reported no throttle reason over the run".into(),
        (Some(_), Some(m)) => format!(
            "throttle reasons over the run (NVML): {}",
            throttle_reason_names(m).join(", ")
        ),
    }
}

fn mean(v: &[Option<f64>]) -> (Option<f64>, u64) {
    let x: Vec<f64> = v
        .iter()
        .flatten()
        .copied()
        .filter(|x| x.is_finite())
        .collect();
    if x.is_empty() {
        (None, 0)
    } else {
        (Some(x.iter().sum::<f64>() / x.len() as f64), x.len() as u64)
    }
}

/// The flag of a clock: requested vs observed (`what`: `SM clock`, `memory clock`), the
/// observed one being the mean of the timeline column `column` (`None`: the GPU has no such
/// column).
fn clock_flag(
    what: &str,
    column: Option<&str>,
    requested: Option<f64>,
    observed: Option<f64>,
) -> Option<String> {
    let r = requested?;
    match (observed, column) {
        (None, Some(c)) => Some(format!(
            "no observed {what}: the run has no samples of {c} (a run shorter than --interval, or no GPU readings); the requested {r} MHz is not confirmed"
        )),
        (None, None) => Some(format!(
            "no observed {what}: collect records no {what} of this GPU (an AMD or Intel GPU without a power device, or a memory clock, which only NVML gives); the requested {r} MHz is not confirmed"
        )),
        (Some(o), _) if (o - r).abs() > MAX_CLOCK_OFF * r => Some(format!(
            "observed mean {what} {o:.1} MHz is {:.1} % off the requested {r} MHz (more than {} %)",
            100.0 * (o - r).abs() / r,
            MAX_CLOCK_OFF * 100.0
        )),
        (Some(_), _) => None,
    }
}

/// What the run in `dir` observed on GPU `gpu` under the requested setting `g`, from the
/// timeline columns `cols` collect recorded for that GPU: the means of its SM clock,
/// memory clock and power columns (NVML's `gpu<N>_sm_clock_mhz`, `gpu<N>_mem_clock_mhz`,
/// `gpu<N>_power_w`; an AMD or Intel GPU's `<stem>_clock_mhz` and `<stem>_power_w`), the
/// OR of `gpu<N>_throttle_reasons`, and the flag of the 2 % rule.
///
/// # Errors
/// An unreadable timeline.
pub fn observe(
    dir: &Path,
    gpu: u32,
    cols: &GpuColumns,
    g: &GpuSetting,
) -> anyhow::Result<GpuRunSetting> {
    use powerperf_format::timeline;
    let df = timeline::read_run(dir)?;
    let col = |name: Option<&str>| -> Vec<Option<f64>> {
        df.as_ref()
            .zip(name)
            .and_then(|(d, n)| timeline::column_f64(d, n).ok())
            .unwrap_or_default()
    };
    let (sm_col, mem_col, throttle_col) =
        (cols.sm_clock(), cols.mem_clock(), cols.throttle_reasons());
    let (sm, n) = mean(&col(sm_col.as_deref()));
    let (mem, _) = mean(&col(mem_col.as_deref()));
    let (power, _) = mean(&col(cols.power().as_deref()));
    let throttle = col(throttle_col.as_deref())
        .into_iter()
        .flatten()
        .filter(|m| m.is_finite() && *m >= 0.0)
        .map(|m| m as u64)
        .reduce(|a, b| a | b);
    let mut flags: Vec<String> = [
        clock_flag("SM clock", sm_col.as_deref(), g.sm_clock_mhz, sm),
        clock_flag("memory clock", mem_col.as_deref(), g.mem_clock_mhz, mem),
    ]
    .into_iter()
    .flatten()
    .collect();
    if !flags.is_empty() {
        flags.push(throttle_words(throttle_col.as_deref(), throttle));
    }
    Ok(GpuRunSetting {
        gpu,
        requested_sm_clock_mhz: g.sm_clock_mhz,
        requested_mem_clock_mhz: g.mem_clock_mhz,
        requested_power_limit_w: g.power_limit_w,
        observed_sm_clock_mhz: sm,
        observed_mem_clock_mhz: mem,
        observed_power_w: power,
        throttle_reasons: throttle,
        samples: n,
        flag: (!flags.is_empty()).then(|| flags.join("; ")),
        observed_from: cols.stem(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn grid_and_names() {
        let g = gpu_grid(&[1200.0, 1500.0], &[], &[300.0, 700.0]);
        assert_eq!(g.len(), 4);
        assert_eq!(dir_suffix(&g[0]), "_g1200_p300");
        assert_eq!(dir_suffix(&g[3]), "_g1500_p700");
        assert_eq!(gpu_grid(&[], &[], &[]), vec![GpuSetting::default()]);
    }

    #[test]
    fn two_percent_rule() {
        let c = Some("gpu0_sm_clock_mhz");
        assert_eq!(clock_flag("SM clock", c, Some(1200.0), Some(1223.0)), None);
        let f = clock_flag("SM clock", c, Some(1200.0), Some(1230.0)).unwrap();
        assert!(f.contains("2.5 % off the requested 1200 MHz"), "{f}");
        let f = clock_flag("SM clock", c, Some(1200.0), None).unwrap();
        assert!(f.contains("no observed SM clock"), "{f}");
        assert!(f.contains("no samples of gpu0_sm_clock_mhz"), "{f}");
        assert_eq!(clock_flag("SM clock", c, None, Some(1.0)), None);
        // a sysfs GPU's clock is checked alike; a memory clock it has no column for is named
        let x = Some("xe0_card_clock_mhz");
        assert_eq!(clock_flag("SM clock", x, Some(900.0), Some(900.0)), None);
        let f = clock_flag("memory clock", None, Some(1593.0), None).unwrap();
        assert!(
            f.contains("collect records no memory clock of this GPU"),
            "{f}"
        );
    }

    #[test]
    fn throttle_reasons_by_nvml_name() {
        assert_eq!(
            throttle_reason_names(0x24),
            vec![
                "SwPowerCap (power cap)",
                "SwThermalSlowdown (thermal, software)"
            ]
        );
        assert_eq!(
            throttle_reason_names(0x1000 | 0x40),
            vec![
                "HwThermalSlowdown (thermal, hardware)",
                "unknown bits 0x1000"
            ]
        );
        assert!(throttle_reason_names(0).is_empty());
        let c = Some("gpu0_throttle_reasons");
        assert!(throttle_words(c, Some(0)).contains("no throttle reason"));
        assert!(throttle_words(c, None).contains("not read"));
        assert!(throttle_words(None, None).contains("AMD or Intel"));
        assert_eq!(
            throttle_words(c, Some(4)),
            "throttle reasons over the run (NVML): SwPowerCap (power cap)"
        );
    }
}
