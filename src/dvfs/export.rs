//! Static plans for sites' own tools: `srun` arguments (Slurm `--cpu-freq`, `--gpu-freq`).
//!
//! Slurm `srun(1)`: `--cpu-freq=<p1>` with a numeric `p1` in kilohertz requests that
//! frequency (Slurm sets the userspace governor); `--gpu-freq=<value>,memory=<value>` takes
//! the graphics (SM) and memory clocks in MHz.

use super::plan_file::{DeviceKind, Plan, PlanRegion};
use crate::units::MegaHertz;
use anyhow::Result;

/// `srun` arguments that apply `region`'s setting as a static setting for a job step.
///
/// # Errors
/// A knob `srun` cannot set (only `core_freq_mhz`, `mem_freq_mhz` on a GPU, `threads`).
pub fn srun_args(plan: &Plan, region: &PlanRegion) -> Result<String> {
    let mut out = Vec::new();
    let kind = plan
        .device_of("core_freq_mhz")
        .map(|d| d.kind)
        .unwrap_or(DeviceKind::Cpu);
    let core = region.setting.get("core_freq_mhz");
    let mem = region.setting.get("mem_freq_mhz");
    match kind {
        DeviceKind::Cpu => {
            if let Some(f) = core {
                out.push(format!("--cpu-freq={}", MegaHertz(*f).to_khz()));
            }
            if mem.is_some() {
                anyhow::bail!(
                    "region `{}`: srun cannot set a CPU memory clock (mem_freq_mhz)",
                    region.name
                );
            }
        }
        DeviceKind::Gpu => {
            let mut g = Vec::new();
            if let Some(f) = core {
                g.push(format!("{}", f.round() as u64));
            }
            if let Some(m) = mem {
                g.push(format!("memory={}", m.round() as u64));
            }
            if !g.is_empty() {
                out.push(format!("--gpu-freq={}", g.join(",")));
            }
        }
    }
    if let Some(t) = region.setting.get("threads") {
        out.push(format!("--export=ALL,OMP_NUM_THREADS={}", t.round() as u64));
    }
    for k in region.setting.keys() {
        if !["core_freq_mhz", "mem_freq_mhz", "threads"].contains(&k.as_str()) {
            anyhow::bail!(
                "region `{}`: srun has no option for knob `{k}`",
                region.name
            );
        }
    }
    Ok(out.join(" "))
}
