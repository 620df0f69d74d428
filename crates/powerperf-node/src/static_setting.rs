//! The static setting a plan gives (one region or workload, or the whole plan when every
//! region has the same setting), sorted by controller: what `powerperf apply` sets for a
//! static plan, and what the Slurm SPANK plugin asks powerperfd for.

use anyhow::{Context, Result};
use std::path::Path;

/// A plan's static setting for one region or workload, sorted by controller: what
/// `powerperf apply` sets for a static plan and what the Slurm SPANK plugin
/// (crates/spank-powerperf) asks powerperfd for ([`StaticSetting::daemon_requests`]).
#[derive(Debug, Clone, PartialEq)]
pub struct StaticSetting {
    /// The plan region or workload chosen.
    pub region: String,
    /// Its knob settings as the plan has them.
    pub knobs: std::collections::BTreeMap<String, f64>,
    /// CPU core frequency, MHz (`core_freq_mhz` of a CPU device or of no device).
    pub core_mhz: Option<f64>,
    /// GPU SM clock, MHz, and the GPU's index (`core_freq_mhz` of a GPU device; index 0
    /// when the plan names none).
    pub gpu_core_mhz: Option<(u32, f64)>,
    /// GPU memory clock, MHz (`mem_freq_mhz` of a GPU device).
    pub gpu_mem_mhz: Option<(u32, f64)>,
    /// GPU power limit, W (`power_limit_w` of a GPU device).
    pub gpu_power_limit_w: Option<(u32, f64)>,
    /// Environment for the command: `OMP_NUM_THREADS` from `threads`.
    pub env: Vec<(String, String)>,
    /// Knobs no controller sets (left unchanged), one sentence each.
    pub notes: Vec<String>,
}

/// The plan region or workload whose setting is applied: `name` when given, else the
/// first when every region has the same setting.
///
/// # Errors
/// `name` is not in the plan (the message lists the names), or no name for a plan whose
/// regions differ.
pub fn select_region<'a>(
    plan: &'a crate::plan_file::Plan,
    name: Option<&str>,
    path: &Path,
) -> Result<&'a crate::plan_file::PlanRegion> {
    let names = || {
        plan.regions
            .iter()
            .map(|r| r.name.as_str())
            .collect::<Vec<_>>()
            .join(", ")
    };
    if let Some(n) = name {
        return plan.regions.iter().find(|r| r.name == n).with_context(|| {
            format!(
                "{} has no region or workload `{n}`; it has: {}",
                path.display(),
                names()
            )
        });
    }
    let first = plan
        .regions
        .first()
        .with_context(|| format!("{} has no [[region]] entries", path.display()))?;
    if plan.regions.iter().all(|r| r.setting == first.setting) {
        return Ok(first);
    }
    anyhow::bail!(
        "{} has {} workloads with different settings ({}); name the one to apply with --workload NAME (switching at region boundaries needs a plan with scope = \"job\")",
        path.display(),
        plan.regions.len(),
        names()
    )
}

/// The static setting of `plan` for `workload` (see [`select_region`]), sorted by
/// controller.
///
/// # Errors
/// As [`select_region`].
pub fn static_setting(
    plan: &crate::plan_file::Plan,
    workload: Option<&str>,
    path: &Path,
) -> Result<StaticSetting> {
    use crate::plan_file::DeviceKind;
    let region = select_region(plan, workload, path)?;
    let mut s = StaticSetting {
        region: region.name.clone(),
        knobs: region
            .setting
            .iter()
            .map(|(k, v)| (k.clone(), *v))
            .collect(),
        core_mhz: None,
        gpu_core_mhz: None,
        gpu_mem_mhz: None,
        gpu_power_limit_w: None,
        env: Vec::new(),
        notes: Vec::new(),
    };
    for (knob, v) in &region.setting {
        let dev = plan.device_of(knob);
        let gpu = dev.and_then(|d| d.index).unwrap_or(0);
        match (knob.as_str(), dev.map(|d| d.kind)) {
            ("threads", _) => s.env.push((
                "OMP_NUM_THREADS".to_string(),
                format!("{}", v.round() as u64),
            )),
            ("core_freq_mhz", Some(DeviceKind::Gpu)) => s.gpu_core_mhz = Some((gpu, *v)),
            ("mem_freq_mhz", Some(DeviceKind::Gpu)) => s.gpu_mem_mhz = Some((gpu, *v)),
            ("power_limit_w", Some(DeviceKind::Gpu)) => s.gpu_power_limit_w = Some((gpu, *v)),
            ("core_freq_mhz", _) => s.core_mhz = Some(*v),
            (k, _) => s
                .notes
                .push(format!("no controller for knob {k} = {v}: left unchanged")),
        }
    }
    Ok(s)
}

impl StaticSetting {
    /// The GPU part of the setting and its GPU (`None`: no GPU knob). The knobs of one
    /// region name one GPU; the SM clock's index wins where they differ.
    pub fn gpu_setting(&self) -> Option<(u32, crate::gpu_control::GpuSetting)> {
        let idx = self
            .gpu_core_mhz
            .or(self.gpu_mem_mhz)
            .or(self.gpu_power_limit_w)?
            .0;
        Some((
            idx,
            crate::gpu_control::GpuSetting {
                sm_clock_mhz: self.gpu_core_mhz.map(|x| x.1),
                mem_clock_mhz: self.gpu_mem_mhz.map(|x| x.1),
                power_limit_w: self.gpu_power_limit_w.map(|x| x.1),
            },
        ))
    }

    /// The powerperfd requests that put this setting in place in one session: the CPU core
    /// frequency on every CPU (`set_core_freq`), the GPU SM clock locked
    /// (`set_gpu_locked_clocks`), the GPU memory clock locked (`set_gpu_mem_locked_clocks`)
    /// and the GPU power limit (`set_gpu_power_limit`). The notes are empty today.
    pub fn daemon_requests(&self) -> (Vec<crate::daemon::Request>, Vec<String>) {
        use crate::daemon::Request;
        let mut reqs = Vec::new();
        let notes = Vec::new();
        if let Some(mhz) = self.core_mhz {
            reqs.push(Request::SetCoreFreq { mhz, cpus: None });
        }
        if let Some((gpu, mhz)) = self.gpu_core_mhz {
            reqs.push(Request::SetGpuLockedClocks {
                gpu,
                min_mhz: mhz,
                max_mhz: Some(mhz),
            });
        }
        if let Some((gpu, watts)) = self.gpu_power_limit_w {
            reqs.push(Request::SetGpuPowerLimit { gpu, watts });
        }
        if let Some((gpu, mhz)) = self.gpu_mem_mhz {
            reqs.push(Request::SetGpuMemLockedClocks {
                gpu,
                min_mhz: mhz,
                max_mhz: Some(mhz),
            });
        }
        (reqs, notes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::daemon::Request;
    use crate::plan_file::Plan;

    const TWO: &str = r#"
[plan]
objective = "energy"
model = "m.json"
model_kind = "none"
created = "2026-01-01T00:00:00Z"
scope = "per_workload"
transition_latency_s = 0.0
transition_energy_j = 0.0
min_region_s = 0.0

[[device]]
kind = "cpu"
knobs = ["core_freq_mhz"]
default = { core_freq_mhz = 2400.0 }

[[region]]
name = "dgemm"
setting = { core_freq_mhz = 2000.0, threads = 4.0 }
time_s = 1.0
energy_j = 1.0
power_w = 1.0
reference_time_s = 1.0
reference_energy_j = 1.0
energy_saving = 0.0
slowdown = 0.0

[[region]]
name = "stream"
setting = { core_freq_mhz = 1200.0, uncore_freq_mhz = 1800.0 }
time_s = 1.0
energy_j = 1.0
power_w = 1.0
reference_time_s = 1.0
reference_energy_j = 1.0
energy_saving = 0.0
slowdown = 0.0
"#;

    #[test]
    fn a_workload_becomes_daemon_requests() {
        let plan = Plan::from_toml(TWO).unwrap();
        let p = Path::new("plan.toml");
        let s = static_setting(&plan, Some("dgemm"), p).unwrap();
        assert_eq!(s.region, "dgemm");
        assert_eq!(s.core_mhz, Some(2000.0));
        assert_eq!(s.env, vec![("OMP_NUM_THREADS".into(), "4".into())]);
        let (reqs, notes) = s.daemon_requests();
        assert_eq!(
            reqs,
            vec![Request::SetCoreFreq {
                mhz: 2000.0,
                cpus: None
            }]
        );
        assert!(notes.is_empty());
        let s = static_setting(&plan, Some("stream"), p).unwrap();
        assert_eq!(s.notes.len(), 1, "{:?}", s.notes);
        assert!(s.notes[0].contains("uncore_freq_mhz"));
    }

    #[test]
    fn a_plan_with_different_workloads_needs_a_name() {
        let plan = Plan::from_toml(TWO).unwrap();
        let e = static_setting(&plan, None, Path::new("plan.toml")).unwrap_err();
        assert!(e.to_string().contains("dgemm, stream"), "{e}");
        let e = static_setting(&plan, Some("nope"), Path::new("plan.toml")).unwrap_err();
        assert!(
            e.to_string().contains("no region or workload `nope`"),
            "{e}"
        );
    }
}
