//! Plans for sites' own tools: `srun` arguments (Slurm `--cpu-freq`, `--gpu-freq`) and GEOPM
//! `frequency_map` agent policies.
//!
//! Slurm `srun(1)`: `--cpu-freq=<p1>` with a numeric `p1` in kilohertz requests that
//! frequency (Slurm sets the userspace governor); `--gpu-freq=<value>,memory=<value>` takes
//! the graphics (SM) and memory clocks in MHz.

use anyhow::Result;
use powerperf_node::plan_file::{DeviceKind, Plan, PlanRegion};
use powerperf_node::units::MegaHertz;

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

/// GEOPM's region hash (`geopm_crc32_str` of GEOPM 1.x/2.x): CRC-32C (Castagnoli,
/// reflected polynomial 0x82F63B78) with initial value 0 and no final XOR, over the name's
/// bytes zero-padded to a multiple of 8 (it hashes 64-bit words with the SSE4.2 `crc32`
/// instruction). Checked against the examples of `geopm_agent_frequency_map(7)`:
/// `region_1` → 0xee12ee15, `region_2` → 0xfd421de1.
pub fn geopm_region_hash(name: &str) -> u32 {
    let mut bytes = name.as_bytes().to_vec();
    while !bytes.len().is_multiple_of(8) {
        bytes.push(0);
    }
    let mut crc: u32 = 0;
    for b in bytes {
        crc ^= u32::from(b);
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    crc
}

/// GEOPM `frequency_map` agent policies (`geopm_agent_frequency_map(7)`): frequencies in Hz,
/// `FREQ_DEFAULT`, then `HASH_i`/`FREQ_i` pairs (at most 31).
///
/// - `per_workload` plans: one policy per workload, `FREQ_DEFAULT` = its chosen frequency
///   (a static setting for that job), returned as `(name, policy)`;
/// - `job` plans: one policy (name `job`): `FREQ_DEFAULT` = the device default (maximum), and
///   each region mapped by its name's hash to its chosen frequency.
///
/// # Errors
/// A GPU plan (the agent sets CPU frequencies), a region without `core_freq_mhz`, or more
/// than 31 regions.
pub fn geopm_policies(plan: &Plan) -> Result<Vec<(String, serde_json::Value)>> {
    use powerperf_node::plan_file::Scope;
    if plan
        .device_of("core_freq_mhz")
        .is_some_and(|d| d.kind == DeviceKind::Gpu)
    {
        anyhow::bail!("the GEOPM frequency_map agent sets CPU frequencies; this plan's core_freq_mhz is a GPU clock");
    }
    let hz = |r: &PlanRegion| -> Result<f64> {
        r.setting
            .get("core_freq_mhz")
            .map(|f| f * 1e6)
            .ok_or_else(|| anyhow::anyhow!("region `{}` has no core_freq_mhz", r.name))
    };
    match plan.plan.scope {
        Scope::PerWorkload => plan
            .regions
            .iter()
            .map(|r| {
                Ok((
                    r.name.clone(),
                    serde_json::json!({ "FREQ_DEFAULT": hz(r)? }),
                ))
            })
            .collect(),
        Scope::Job => {
            if plan.regions.len() > 31 {
                let mut t: Vec<f64> = plan.regions.iter().map(|r| r.reference_time_s).collect();
                t.sort_by(|a, b| b.total_cmp(a));
                anyhow::bail!(
                    "GEOPM's frequency map holds at most 31 regions; this plan has {} (fix: plan again with --min-region {:.6} or more, which folds the regions shorter than the 31st longest into their parents)",
                    plan.regions.len(),
                    t[30]
                );
            }
            let default = plan
                .device_of("core_freq_mhz")
                .and_then(|d| d.default.get("core_freq_mhz"))
                .map(|f| f * 1e6)
                .ok_or_else(|| {
                    anyhow::anyhow!("the plan has no CPU device default for core_freq_mhz")
                })?;
            let mut m = serde_json::Map::new();
            m.insert("FREQ_DEFAULT".into(), serde_json::json!(default));
            for (i, r) in plan.regions.iter().enumerate() {
                m.insert(
                    format!("HASH_{i}"),
                    serde_json::json!(geopm_region_hash(&r.name)),
                );
                m.insert(format!("FREQ_{i}"), serde_json::json!(hz(r)?));
            }
            Ok(vec![("job".into(), serde_json::Value::Object(m))])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn geopm_hash_matches_the_manual_examples() {
        assert_eq!(geopm_region_hash("region_1"), 0xee12_ee15);
        assert_eq!(geopm_region_hash("region_2"), 0xfd42_1de1);
        assert_eq!(geopm_region_hash("region_1"), 3_994_218_005);
    }
}
