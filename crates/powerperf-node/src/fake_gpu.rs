//! The readings of fake GPUs described by files (`collect --fake-gpu DIR`, the layout of
//! `powerperf_node::gpu_control::FakeGpu` and `powerperfd --fake-gpu`, tests/fixtures/fake-gpu), as a
//! [`GpuSource`]: the seam NVML's readings use, so a run on a fake GPU has the same
//! `gpu<N>_*` columns as one on a real GPU.
//!
//! Per `DIR/gpuN/` (N = 0, 1, … without gaps), all optional (a missing or unreadable file is
//! a missing value): `power_w` (W), `energy_mj` (the total energy counter, mJ); the SM clock
//! is `sm_clock_mhz` where that file exists (a GPU that misses its lock), else the upper end
//! of `locked_clocks_mhz` (`MIN MAX`), else the highest of `supported_graphics_clocks_mhz`
//! (unlocked: boost); the memory clock likewise from `mem_locked_clocks_mhz` and
//! `supported_memory_clocks_mhz`; `throttle_reasons` (a number, else 0: none). Files are
//! read up to 4 KiB.

use crate::nvml::{GpuReading, GpuSource};
use std::io::Read as _;
use std::path::{Path, PathBuf};

/// The fake GPUs of a directory, read-only.
#[derive(Debug, Clone)]
pub struct FileGpus {
    dir: PathBuf,
    count: u32,
}

/// The largest file read.
const MAX_FILE: u64 = 4096;

impl FileGpus {
    /// Count `DIR/gpu0`, `gpu1`, ….
    ///
    /// # Errors
    /// No `gpu0`: the text names the directory and the layout.
    pub fn open(dir: &Path) -> Result<Self, String> {
        let mut count = 0;
        while dir.join(format!("gpu{count}")).is_dir() {
            count += 1;
        }
        if count == 0 {
            return Err(format!(
                "{} holds no gpu0 directory (the fake GPU layout: gpuN/supported_graphics_clocks_mhz, power_limit_range_w, power_limit_w, locked_clocks_mhz)",
                dir.display()
            ));
        }
        Ok(FileGpus {
            dir: dir.to_path_buf(),
            count,
        })
    }

    /// The trimmed text of `gpuN/f`, or `None`.
    pub fn text(&self, gpu: u32, f: &str) -> Option<String> {
        let p = self.dir.join(format!("gpu{gpu}")).join(f);
        let mut s = String::new();
        std::fs::File::open(p)
            .ok()?
            .take(MAX_FILE)
            .read_to_string(&mut s)
            .ok()?;
        Some(s.trim().to_string())
    }

    fn number(&self, gpu: u32, f: &str) -> Option<f64> {
        self.text(gpu, f)?
            .parse::<f64>()
            .ok()
            .filter(|v| v.is_finite() && *v >= 0.0)
    }

    /// The clock a run sees: the lock's upper end, else the highest listed clock.
    fn clock(&self, gpu: u32, lock: &str, list: &str) -> Option<f64> {
        let t = self.text(gpu, lock)?;
        if t != "none" {
            return t
                .split_whitespace()
                .nth(1)
                .and_then(|x| x.parse::<f64>().ok())
                .filter(|v| v.is_finite());
        }
        self.text(gpu, list)?
            .split_whitespace()
            .filter_map(|x| x.parse::<f64>().ok())
            .filter(|v| v.is_finite())
            .reduce(f64::max)
    }
}

impl GpuSource for FileGpus {
    fn count(&self) -> u32 {
        self.count
    }
    fn name(&self, i: u32) -> String {
        format!("fake GPU {i}")
    }
    fn power_source(&self, _: u32) -> &'static str {
        "the file power_w"
    }
    fn read(&mut self, i: u32) -> GpuReading {
        GpuReading {
            power_w: self.number(i, "power_w"),
            energy_mj: self.text(i, "energy_mj").and_then(|t| t.parse().ok()),
            sm_clock_mhz: self
                .number(i, "sm_clock_mhz")
                .or_else(|| self.clock(i, "locked_clocks_mhz", "supported_graphics_clocks_mhz")),
            mem_clock_mhz: self.clock(i, "mem_locked_clocks_mhz", "supported_memory_clocks_mhz"),
            throttle_reasons: Some(
                self.text(i, "throttle_reasons")
                    .and_then(|t| t.parse().ok())
                    .unwrap_or(0),
            ),
            ..Default::default()
        }
    }
}
