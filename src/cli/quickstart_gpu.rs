//! quickstart's GPU parts: the fake GPU a bundled set's GPU plan is dry-run against (that
//! set's own GPU's clocks, never the GPUs of this machine), and the read-only step about the
//! GPUs NVML finds here.

use super::{Ctx, JSON};
use anyhow::{Context, Result};
use powerperf_node::gpu_control::fake_build::FakeGpuSpec;
use powerperf_node::gpu_control::{FakeGpu, GpuControl};
use std::path::Path;

/// A fake GPU in a private temporary directory (mode 0700, a random name) that carries the
/// clocks of the training set in `set_dir`: its `core_freq_mhz` values as the supported
/// graphics clocks and its `mem_freq_mhz` values as the memory clocks. Returns the directory
/// (removed when dropped) and the clocks, for the transcript.
pub(super) fn fake_gpu_of_set(
    set_dir: &Path,
    gpu_name: &str,
) -> Result<(tempfile::TempDir, Vec<u32>, Vec<u32>)> {
    let set = powerperf_format::set::TrainingSet::read(set_dir)?;
    let mhz = |k: &str| -> Vec<u32> {
        set.knob_values(k)
            .into_iter()
            .filter(|v| v.is_finite() && *v > 0.0 && *v < 1e6)
            .map(|v| v.round() as u32)
            .collect()
    };
    let (graphics, memory) = (mhz("core_freq_mhz"), mhz("mem_freq_mhz"));
    let dir = tempfile::Builder::new()
        .prefix("powerperf-fake-gpu-")
        .tempdir()
        .context("cannot create a private temporary directory for the fake GPU")?;
    FakeGpu::create(
        dir.path(),
        &[FakeGpuSpec {
            name: gpu_name.to_string(),
            graphics_clocks_mhz: graphics.clone(),
            memory_clocks_mhz: memory.clone(),
            power_limit_w: None,
        }],
    )
    .with_context(|| format!("building the fake GPU of {}", set_dir.display()))?;
    Ok((dir, graphics, memory))
}

/// Every file under `dir` with its bytes (to show a dry run wrote nothing).
pub(super) fn snapshot(dir: &Path) -> Vec<(std::path::PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push((p.clone(), std::fs::read(&p).unwrap_or_default()));
            }
        }
    }
    out.sort();
    out
}

/// `n` clocks spread evenly (by rank) over `clocks`, lowest to highest, all from the list.
pub(super) fn spread(clocks: &[u32], n: usize) -> Vec<u32> {
    let mut c = clocks.to_vec();
    c.sort_unstable();
    c.dedup();
    if c.len() <= n || n < 2 {
        return c;
    }
    let mut out: Vec<u32> = (0..n)
        .map(|k| c[(k * (c.len() - 1) + (n - 1) / 2) / (n - 1)])
        .collect();
    out.dedup();
    out
}

/// The read-only step about this node's GPUs, where NVML finds any: for each its name,
/// supported clocks, power and energy, whether GPM metrics are available, and the commands
/// that build a training set for it and predict from one run. Nothing is set.
pub(super) fn step_this_gpu(c: &Ctx) -> Result<()> {
    let src = match powerperf_node::nvml::open_nvml() {
        Ok(s) => s,
        Err(why) => {
            out!("    no GPU step: {why}");
            return Ok(());
        }
    };
    let mut src = src;
    c.r.step("1c. this node's GPUs, read only (NVML queries; nothing is set, GPM streaming is not switched)")?;
    let control = powerperf_node::gpu_control::nvml::NvmlGpu::open().ok();
    for i in 0..src.count() {
        out!("    gpu{i}: {}", src.name(i));
        let clocks = match powerperf_node::nvml_clocks::probe(i) {
            Ok(p) => {
                for l in p.lines().iter().skip(2) {
                    out!("      {l}");
                }
                // the graphics clocks at the highest memory clock (what a sweep locks)
                p.graphics_clocks_mhz
                    .iter()
                    .filter_map(|(m, g)| g.as_ref().ok().map(|g| (*m, g.clone())))
                    .max_by_key(|(m, _)| *m)
                    .map(|(_, g)| g)
                    .unwrap_or_default()
            }
            Err(why) => {
                out!("      supported clocks not readable: {why}");
                Vec::new()
            }
        };
        let r = src.read(i);
        let show = |v: Option<f64>, unit: &str| {
            v.map_or("not readable".to_string(), |x| format!("{x:.1} {unit}"))
        };
        out!(
            "      power: {} (from {}); energy counter: {} since the driver was loaded (nvmlDeviceGetTotalEnergyConsumption)",
            show(r.power_w, "W"),
            src.power_source(i),
            show(r.energy_mj.map(|e| e as f64 * 1e-3), "J")
        );
        if let Some(g) = &control {
            match (g.power_limit_w(i), g.power_limit_range_w(i)) {
                (Ok(w), Ok((lo, hi))) => out!(
                    "      power limit: {w:.0} W (allowed {lo:.0}..{hi:.0} W; nvmlDeviceGetPowerManagementLimit, …Constraints)"
                ),
                (Err(e), _) | (_, Err(e)) => out!("      power limit: not readable ({e})"),
            }
        }
        match powerperf_core::collect::gpm::support(i) {
            Ok(()) => out!(
                "      GPM metrics: available (nvmlGpmQueryDeviceSupport): `collect` records sm_active, dram_active, fp64_active, … (each over spans of at least 200 ms)"
            ),
            Err(why) => out!("      GPM metrics: not available: {why}"),
        }
        let pick = spread(&clocks, 5);
        if pick.is_empty() {
            out!("      (no supported SM clock list: no sweep command to suggest)");
            continue;
        }
        let list: Vec<String> = pick.iter().map(u32::to_string).collect();
        out!("    a training set for gpu{i} (SM clocks locked one by one, 3 repeats each, the settings restored afterwards; root, or powerperfd's gpu.locked_clocks grant):");
        out!(
            "      powerperf sweep -o gpu{i}-sweep --gpu {i} --gpu-clock {} --repeat 3 -- ./my_gpu_program",
            list.join(",")
        );
        out!("    its counters in one run, and the time at other SM clocks predicted from them (no model needed; not validated on this GPU):");
        out!("      powerperf collect --gpu -o gpu{i}-run -- ./my_gpu_program");
        out!(
            "      powerperf predict --from gpu{i}-run --knob core_freq_mhz={}",
            list.join(",")
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::spread;

    #[test]
    fn spread_takes_listed_clocks_from_lowest_to_highest() {
        let h200: Vec<u32> = (0..=109).map(|k| 345 + 15 * k).collect();
        let s = spread(&h200, 5);
        assert_eq!(s.len(), 5);
        assert_eq!((s[0], s[4]), (345, 1980));
        assert!(s.iter().all(|c| h200.contains(c)), "{s:?}");
        assert_eq!(spread(&[900, 600], 5), vec![600, 900]);
    }
}
