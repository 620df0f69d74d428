//! The GPUs of a node as one [`GpuControl`]: NVML's GPUs (or the fake GPUs standing for
//! them) first, GPUs `0..n`, then the AMD and Intel GPUs of the sysfs tree
//! ([`SysfsGpus`], GPUs `n..`). powerperfd's `gpu.power_limit` and `gpu.locked_clocks` go
//! through it, so a node with both kinds controls each with its own driver, and an NVIDIA
//! node keeps its NVML numbering unchanged.

use super::nvml::NvmlGpu;
use super::sysfs::SysfsGpus;
use super::{FakeGpu, GpuControl, GpuControlError, GpuKnob, GpuSaved};
use std::path::Path;

/// Open the GPUs of a node as one [`GpuControl`]: the fake GPUs of `fake` when given, else
/// NVML (opened writable when `writable`, else read-only: [`NvmlGpu::open_writable`],
/// [`NvmlGpu::open`]), GPUs `0..n`; then the AMD and Intel GPUs of the sysfs tree `root`
/// ([`SysfsGpus`]), numbered `n..` ([`NodeGpus`]). Without sysfs GPUs the first alone,
/// unchanged (an NVIDIA node keeps NVML's numbering). The one place powerperfd (its GPU
/// controls) and `powerperf sweep`/`apply` as root open the GPUs. The sysfs GPUs are
/// always written directly (their files are the control; `writable` does not apply).
///
/// Returns the controls and notes (why a part is absent while the other is there).
///
/// # Errors
/// [`GpuControlError::Unavailable`]: `fake` given and no fake GPU there (named); neither
/// part opens (both reasons).
pub fn open_node_gpus(
    fake: Option<&Path>,
    root: &Path,
    writable: bool,
) -> Result<(Box<dyn GpuControl>, Vec<String>), GpuControlError> {
    let first: Result<Box<dyn GpuControl>, GpuControlError> = match fake {
        // A fake GPU directory asked for and not there is an error, not a fallback.
        Some(d) => Ok(FakeGpu::open(d)
            .map(|g| Box::new(g) as Box<dyn GpuControl>)
            .map_err(|e| {
                GpuControlError::Unavailable(format!("--fake-gpu {}: {e}", d.display()))
            })?),
        None if writable => NvmlGpu::open_writable().map(|g| Box::new(g) as Box<dyn GpuControl>),
        None => NvmlGpu::open().map(|g| Box::new(g) as Box<dyn GpuControl>),
    };
    let n = first.as_ref().map_or(0, |g| g.count());
    match (first, SysfsGpus::open(root, n)) {
        (first, Ok(sys)) => {
            let mut notes = Vec::new();
            if let Err(e) = &first {
                notes.push(format!(
                    "no NVML GPU control ({e}); the sysfs GPUs are GPU 0 on"
                ));
            }
            let g = NodeGpus::new(first.ok(), Some(sys))?;
            Ok((Box::new(g), notes))
        }
        (Ok(g), Err(_)) => Ok((g, Vec::new())),
        (Err(e), Err(s)) => Err(GpuControlError::Unavailable(format!("{e}; {s}"))),
    }
}

/// The index among the sysfs GPUs of root `root` of GPU `g` of `ctl` (opened by
/// [`open_node_gpus`] with that root; the sysfs GPUs are numbered last, from `ctl.count()`
/// minus their count); `None` for an NVML or fake GPU, or no such GPU.
fn sysfs_index(ctl: &dyn GpuControl, root: &Path, g: u32) -> Option<(SysfsGpus, usize)> {
    let s = SysfsGpus::open(root, 0).ok()?;
    let first = ctl.count().checked_sub(s.count())?;
    let i = g.checked_sub(first)? as usize;
    (i < s.cards().len()).then_some((s, i))
}

/// The driver and hwmon directory (`i915 (/sys/class/hwmon/hwmon1)`) of GPU `g` of `ctl`
/// (opened by [`open_node_gpus`] with the sysfs root `root`) where it is an AMD or Intel
/// GPU of that tree (numbered last: from `ctl.count()` minus their count); `None` for an
/// NVML or fake GPU, or no such GPU. For messages that name what would be written.
pub fn sysfs_card(ctl: &dyn GpuControl, root: &Path, g: u32) -> Option<String> {
    let (s, i) = sysfs_index(ctl, root, g)?;
    let c = &s.cards()[i];
    Some(format!("{} ({})", c.driver.name(), c.hwmon.display()))
}

/// The timeline columns `collect` records of a node GPU (docs/run-format.md), which
/// `sweep` reads the observed clock and power from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GpuColumns {
    /// NVML's GPU `N` (or a fake one): `gpu<N>_sm_clock_mhz`, `gpu<N>_mem_clock_mhz`,
    /// `gpu<N>_power_w`, `gpu<N>_throttle_reasons`.
    Nvml(u32),
    /// An AMD or Intel GPU of the sysfs tree: the columns of its power device,
    /// `<stem>_clock_mhz` (amdgpu's sclk, xe's and i915's actual GT frequency) and
    /// `<stem>_power_w`; no memory clock and no throttle reasons. `stem` is `None` where
    /// collect records no device of it (no readable power or energy file).
    Sysfs {
        /// `amdgpu`, `xe` or `i915`.
        driver: &'static str,
        /// `amdgpu0`, `xe0_card`, `i915_0`.
        stem: Option<String>,
    },
}

impl GpuColumns {
    fn col(&self, nvml: &str, sysfs: Option<&str>) -> Option<String> {
        match self {
            GpuColumns::Nvml(n) => Some(format!("gpu{n}_{nvml}")),
            GpuColumns::Sysfs { stem, .. } => Some(format!("{}_{}", stem.as_ref()?, sysfs?)),
        }
    }
    /// The SM (graphics) clock column, MHz.
    pub fn sm_clock(&self) -> Option<String> {
        self.col("sm_clock_mhz", Some("clock_mhz"))
    }
    /// The memory clock column, MHz (NVML only).
    pub fn mem_clock(&self) -> Option<String> {
        self.col("mem_clock_mhz", None)
    }
    /// The power column, W.
    pub fn power(&self) -> Option<String> {
        self.col("power_w", Some("power_w"))
    }
    /// The throttle-reason mask column (NVML only).
    pub fn throttle_reasons(&self) -> Option<String> {
        self.col("throttle_reasons", None)
    }
    /// The column stem: `gpu0`, `xe0_card`; `None` for a sysfs GPU without a device.
    pub fn stem(&self) -> Option<String> {
        match self {
            GpuColumns::Nvml(n) => Some(format!("gpu{n}")),
            GpuColumns::Sysfs { stem, .. } => stem.clone(),
        }
    }
}

/// The timeline columns collect records of GPU `g` of `ctl` (opened by [`open_node_gpus`]
/// with the sysfs root `root`, which collect's `--sysfs-root` must also be): `gpu<g>_*` for
/// an NVML or fake GPU (or no such GPU), else the columns of the sysfs GPU's power device,
/// found through [`crate::devices::gpu_stems`], whose order is the one [`SysfsGpus`]
/// numbers the GPUs in ([`crate::devices::gpu_hwmons`]).
pub fn gpu_columns(ctl: &dyn GpuControl, root: &Path, g: u32) -> GpuColumns {
    match sysfs_index(ctl, root, g) {
        None => GpuColumns::Nvml(g),
        Some((s, i)) => GpuColumns::Sysfs {
            driver: s.cards()[i].driver.name(),
            stem: crate::devices::gpu_stems(root).get(i).cloned().flatten(),
        },
    }
}

/// NVML's (or the fake) GPUs, then the sysfs GPUs.
#[derive(Debug)]
pub struct NodeGpus {
    nvml: Option<Box<dyn GpuControl>>,
    sysfs: Option<SysfsGpus>,
}

impl NodeGpus {
    /// `sysfs` must have been opened with `first` = the count of `nvml` (0 without it).
    ///
    /// # Errors
    /// [`GpuControlError::Unavailable`] when neither is given, or the numbering does not
    /// follow.
    pub fn new(
        nvml: Option<Box<dyn GpuControl>>,
        sysfs: Option<SysfsGpus>,
    ) -> Result<Self, GpuControlError> {
        let n = nvml.as_ref().map_or(0, |g| g.count());
        match (&nvml, &sysfs) {
            (None, None) => Err(GpuControlError::Unavailable(
                "neither NVML nor an amdgpu, xe or i915 GPU in sysfs".into(),
            )),
            (_, Some(s)) if s.first() != n => Err(GpuControlError::Unavailable(format!(
                "the sysfs GPUs start at {} but NVML has {n}",
                s.first()
            ))),
            _ => Ok(NodeGpus { nvml, sysfs }),
        }
    }

    fn nvml_count(&self) -> u32 {
        self.nvml.as_ref().map_or(0, |g| g.count())
    }

    fn part(&self, gpu: u32) -> Result<&dyn GpuControl, GpuControlError> {
        match (&self.nvml, &self.sysfs) {
            (Some(g), _) if gpu < g.count() => Ok(g.as_ref()),
            (_, Some(s)) if gpu >= self.nvml_count() && gpu < s.count() => Ok(s),
            _ => Err(GpuControlError::NoDevice {
                gpu,
                count: self.count(),
            }),
        }
    }

    fn part_mut(&mut self, gpu: u32) -> Result<&mut dyn GpuControl, GpuControlError> {
        let n = self.nvml_count();
        let count = self.count();
        match (&mut self.nvml, &mut self.sysfs) {
            (Some(g), _) if gpu < n => Ok(g.as_mut()),
            (_, Some(s)) if gpu >= n && gpu < count => Ok(s),
            _ => Err(GpuControlError::NoDevice { gpu, count }),
        }
    }
}

impl GpuControl for NodeGpus {
    fn describe(&self) -> String {
        let v: Vec<String> = self
            .nvml
            .iter()
            .map(|g| g.describe())
            .chain(self.sysfs.iter().map(GpuControl::describe))
            .collect();
        v.join("; ")
    }
    fn count(&self) -> u32 {
        match &self.sysfs {
            Some(s) => s.count(),
            None => self.nvml_count(),
        }
    }
    /// True only when every part describes only (the sysfs GPUs always write).
    fn describe_only(&self) -> bool {
        self.sysfs.is_none() && self.nvml.as_ref().is_some_and(|g| g.describe_only())
    }
    fn check_gpu(&self, gpu: u32) -> Result<(), GpuControlError> {
        self.part(gpu).map(|_| ())
    }
    fn check_locked_clocks(
        &self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<Vec<String>, GpuControlError> {
        self.part(gpu)?.check_locked_clocks(gpu, min_mhz, max_mhz)
    }
    fn power_limit_w(&self, gpu: u32) -> Result<f64, GpuControlError> {
        self.part(gpu)?.power_limit_w(gpu)
    }
    fn power_limit_range_w(&self, gpu: u32) -> Result<(f64, f64), GpuControlError> {
        self.part(gpu)?.power_limit_range_w(gpu)
    }
    fn check_power_limit(&self, gpu: u32, watts: f64) -> Result<(), GpuControlError> {
        self.part(gpu)?.check_power_limit(gpu, watts)
    }
    fn set_locked_clocks(
        &mut self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<String, GpuControlError> {
        self.part_mut(gpu)?.set_locked_clocks(gpu, min_mhz, max_mhz)
    }
    fn reset_locked_clocks(&mut self, gpu: u32) -> Result<String, GpuControlError> {
        self.part_mut(gpu)?.reset_locked_clocks(gpu)
    }
    fn set_power_limit_w(&mut self, gpu: u32, watts: f64) -> Result<String, GpuControlError> {
        self.part_mut(gpu)?.set_power_limit_w(gpu, watts)
    }
    fn check_mem_locked_clocks(
        &self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<Vec<String>, GpuControlError> {
        self.part(gpu)?
            .check_mem_locked_clocks(gpu, min_mhz, max_mhz)
    }
    fn set_mem_locked_clocks(
        &mut self,
        gpu: u32,
        min_mhz: f64,
        max_mhz: f64,
    ) -> Result<String, GpuControlError> {
        self.part_mut(gpu)?
            .set_mem_locked_clocks(gpu, min_mhz, max_mhz)
    }
    fn reset_mem_locked_clocks(&mut self, gpu: u32) -> Result<String, GpuControlError> {
        self.part_mut(gpu)?.reset_mem_locked_clocks(gpu)
    }
    fn save(&self, gpu: u32, knob: GpuKnob) -> Result<GpuSaved, GpuControlError> {
        self.part(gpu)?.save(gpu, knob)
    }
    fn validate(&self, s: &GpuSaved) -> Result<(), GpuControlError> {
        self.part(s.gpu)
            .map_err(|e| GpuControlError::BadSaved {
                saved: s.to_string(),
                reason: e.to_string(),
            })?
            .validate(s)
    }
    fn restore(&mut self, s: &GpuSaved) -> Result<String, GpuControlError> {
        self.part_mut(s.gpu)?.restore(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    fn fixtures() -> PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures")
    }

    /// The fake GPU (standing for NVML) is GPU 0, the i915 card of the sysfs tree GPU 1;
    /// nothing is written by opening (the fixture is read in place).
    #[test]
    fn fake_then_sysfs_numbered_after_it() {
        let (g, notes) = open_node_gpus(
            Some(&fixtures().join("fake-gpu")),
            &fixtures().join("sysfs/i915"),
            true,
        )
        .unwrap();
        assert_eq!(g.count(), 2);
        assert!(notes.is_empty(), "{notes:?}");
        assert!(g.describe().contains("i915"), "{}", g.describe());
        // GPU 1 is the i915 card: its range is RPn..RP0 (300..2050 MHz)
        g.check_locked_clocks(1, 500.0, 500.0).unwrap();
        assert!(g.check_locked_clocks(1, 2500.0, 2500.0).is_err());
        assert!(g.check_gpu(2).is_err());
    }

    /// What collect records of each node GPU: the fake GPU (standing for NVML) its
    /// `gpu0_*` columns, the i915 card (GPU 1) its power device's `i915_0_*`; an index past
    /// them the NVML names, as before.
    #[test]
    fn gpu_columns_name_nvml_then_the_sysfs_device() {
        let root = fixtures().join("sysfs/i915");
        let (g, _) = open_node_gpus(Some(&fixtures().join("fake-gpu")), &root, false).unwrap();
        let c0 = gpu_columns(g.as_ref(), &root, 0);
        assert_eq!(c0, GpuColumns::Nvml(0));
        assert_eq!(c0.sm_clock().as_deref(), Some("gpu0_sm_clock_mhz"));
        assert_eq!(
            c0.throttle_reasons().as_deref(),
            Some("gpu0_throttle_reasons")
        );
        let c1 = gpu_columns(g.as_ref(), &root, 1);
        assert_eq!(
            c1,
            GpuColumns::Sysfs {
                driver: "i915",
                stem: Some("i915_0".into())
            }
        );
        assert_eq!(c1.sm_clock().as_deref(), Some("i915_0_clock_mhz"));
        assert_eq!(c1.power().as_deref(), Some("i915_0_power_w"));
        assert_eq!(c1.mem_clock(), None);
        assert_eq!(c1.throttle_reasons(), None);
        assert_eq!(gpu_columns(g.as_ref(), &root, 2), GpuColumns::Nvml(2));
    }

    /// A fake GPU directory asked for and not there is an error naming it, not a fallback
    /// to the sysfs GPUs.
    #[test]
    fn a_missing_fake_gpu_is_named() {
        let missing = fixtures().join("no-such-fake-gpu");
        let e = open_node_gpus(Some(&missing), &fixtures().join("sysfs/i915"), true)
            .expect_err("opened a missing fake GPU");
        assert!(e.to_string().contains("--fake-gpu"), "{e}");
        assert!(e.to_string().contains("no-such-fake-gpu"), "{e}");
    }

    /// Without NVML (this VM, CI) the sysfs GPUs are GPU 0 on, with a note saying why; with
    /// neither, both reasons.
    #[test]
    fn without_nvml_the_sysfs_gpus_come_first() {
        if NvmlGpu::open().is_ok() {
            println!("skipped: NVML has a GPU here, so the sysfs GPUs do not come first");
            return;
        }
        let (g, notes) = open_node_gpus(None, &fixtures().join("sysfs/xe"), false).unwrap();
        assert_eq!(g.count(), 1);
        assert!(g.describe().contains("xe"), "{}", g.describe());
        assert_eq!(notes.len(), 1, "{notes:?}");
        assert!(notes[0].contains("GPU 0"), "{notes:?}");
        let empty = tempfile::tempdir().unwrap();
        let e = open_node_gpus(None, empty.path(), false)
            .err()
            .unwrap()
            .to_string();
        assert!(e.contains(';'), "one reason only: {e}");
    }
}
