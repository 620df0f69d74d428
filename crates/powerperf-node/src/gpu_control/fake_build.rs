//! Building a [`FakeGpu`] from known clocks (quickstart's dry runs: a GPU plan checked against
//! the clocks of the GPU it was made for, never against the GPU of the machine it runs on),
//! and reading one the way [`crate::nvml_clocks::probe`] reads NVML, so the same check
//! ([`crate::nvml_clocks::check_plan`]) serves both.

use super::{FakeGpu, GpuControlError};
use crate::nvml_clocks::NvmlProbe;
use std::io::Write as _;
use std::path::Path;

/// What a fake GPU carries.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FakeGpuSpec {
    /// Written to `name` (e.g. `GeForce GTX Titan X (clocks of the titanx-micro set)`).
    pub name: String,
    /// `supported_graphics_clocks_mhz`, MHz (written descending, as NVML lists them).
    pub graphics_clocks_mhz: Vec<u32>,
    /// `supported_memory_clocks_mhz`, MHz; empty: no file (memory clocks then cannot be
    /// checked, as on a GPU whose list NVML cannot read).
    pub memory_clocks_mhz: Vec<u32>,
    /// `power_limit_range_w` and `power_limit_w`, W; `None`: no files (a power-limit read
    /// then fails, naming the missing file).
    pub power_limit_w: Option<((f64, f64), f64)>,
}

fn write_new(path: &Path, text: &str) -> Result<(), GpuControlError> {
    use std::os::unix::fs::OpenOptionsExt;
    let err = |e: std::io::Error| GpuControlError::Write {
        gpu: 0,
        call: "creating the fake GPU".into(),
        why: format!("{}: {e}", path.display()),
    };
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .custom_flags(libc::O_NOFOLLOW)
        .open(path)
        .map_err(err)?;
    f.write_all(text.as_bytes()).map_err(err)
}

fn list(v: &[u32]) -> String {
    let mut v = v.to_vec();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v.dedup();
    let s: Vec<String> = v.iter().map(u32::to_string).collect();
    format!("{}\n", s.join(" "))
}

impl FakeGpu {
    /// Write `gpus` as `dir/gpu0`, `dir/gpu1`, … (each created, never reused: `dir` should be
    /// a private directory, e.g. [`tempfile::tempdir`]) and open them. Locked clocks (SM, and
    /// memory where memory clocks are given) start unset (`none`).
    ///
    /// # Errors
    /// No GPU or one without graphics clocks; a directory or file that exists or cannot be
    /// created.
    pub fn create(dir: &Path, gpus: &[FakeGpuSpec]) -> Result<FakeGpu, GpuControlError> {
        if gpus.is_empty() || gpus.iter().any(|g| g.graphics_clocks_mhz.is_empty()) {
            return Err(GpuControlError::Unavailable(
                "a fake GPU needs at least one supported graphics clock".into(),
            ));
        }
        for (i, g) in gpus.iter().enumerate() {
            let d = dir.join(format!("gpu{i}"));
            std::fs::create_dir(&d).map_err(|e| GpuControlError::Write {
                gpu: i as u32,
                call: "creating the fake GPU".into(),
                why: format!("{}: {e}", d.display()),
            })?;
            write_new(
                &d.join("supported_graphics_clocks_mhz"),
                &list(&g.graphics_clocks_mhz),
            )?;
            if !g.memory_clocks_mhz.is_empty() {
                write_new(
                    &d.join("supported_memory_clocks_mhz"),
                    &list(&g.memory_clocks_mhz),
                )?;
                write_new(&d.join("mem_locked_clocks_mhz"), "none\n")?;
            }
            write_new(&d.join("locked_clocks_mhz"), "none\n")?;
            if let Some(((lo, hi), w)) = g.power_limit_w {
                write_new(&d.join("power_limit_range_w"), &format!("{lo} {hi}\n"))?;
                write_new(&d.join("power_limit_w"), &format!("{w}\n"))?;
            }
            if !g.name.is_empty() {
                write_new(&d.join("name"), &format!("{}\n", g.name))?;
            }
        }
        FakeGpu::open(dir)
    }

    /// GPU `gpu` read as [`crate::nvml_clocks::probe`] reads a real one: the supported
    /// memory clocks (`supported_memory_clocks_mhz`), the graphics clocks (the one list of
    /// `supported_graphics_clocks_mhz`, at every memory clock), and the locked clock as the
    /// current SM clock (the highest supported one when unlocked). Application clocks and the
    /// API restriction have no file: they read "not read". `euid` is this process's.
    ///
    /// # Errors
    /// No such GPU, or an unreadable graphics clock list.
    pub fn probe(&self, gpu: u32) -> Result<NvmlProbe, GpuControlError> {
        let as_u32 = |v: Vec<f64>| -> Vec<u32> {
            v.into_iter()
                .filter(|x| *x >= 0.0 && *x < 1e6)
                .map(|x| x.round() as u32)
                .collect()
        };
        let graphics = as_u32(self.numbers(gpu, "supported_graphics_clocks_mhz")?);
        let mems = self
            .numbers(gpu, "supported_memory_clocks_mhz")
            .map(as_u32)
            .map_err(|e| {
                format!(
                    "{e} (this fake GPU lists no memory clocks: add supported_memory_clocks_mhz)"
                )
            });
        let graphics_clocks_mhz = match &mems {
            Ok(m) if !m.is_empty() => m.iter().map(|m| (*m, Ok(graphics.clone()))).collect(),
            _ => vec![(0, Ok(graphics.clone()))],
        };
        let current = match self.locked_clocks(gpu) {
            Ok(Some((_, hi))) => Ok(hi.round() as u32),
            Ok(None) => graphics
                .iter()
                .max()
                .copied()
                .ok_or_else(|| "no supported graphics clock".to_string()),
            Err(e) => Err(e.to_string()),
        };
        let max_mem = mems
            .as_ref()
            .ok()
            .and_then(|m| m.iter().max().copied())
            .ok_or_else(|| "no supported memory clock listed".to_string());
        Ok(NvmlProbe {
            device_count: self.count,
            device: gpu,
            name: self
                .read_file(gpu, "name")
                .ok()
                .filter(|n| !n.is_empty() && n.len() <= 256)
                .unwrap_or_else(|| format!("fake GPU {gpu}")),
            memory_clocks_mhz: mems,
            graphics_clocks_mhz,
            current_sm_mhz: current,
            current_mem_mhz: max_mem.clone(),
            max_sm_mhz: graphics
                .iter()
                .max()
                .copied()
                .ok_or_else(|| "no supported graphics clock".to_string()),
            max_mem_mhz: max_mem,
            // SAFETY: geteuid has no preconditions.
            euid: unsafe { libc::geteuid() },
            ..NvmlProbe::default()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nvml_clocks::{check_plan, NvmlClockError};

    fn titanx(dir: &Path) -> FakeGpu {
        FakeGpu::create(
            dir,
            &[FakeGpuSpec {
                name: "GeForce GTX Titan X (clocks of the titanx-micro set)".into(),
                graphics_clocks_mhz: vec![595, 1164, 861, 1088],
                memory_clocks_mhz: vec![810, 3505],
                power_limit_w: None,
            }],
        )
        .unwrap()
    }

    #[test]
    fn a_built_fake_gpu_checks_a_plan_as_nvml_would() {
        let d = tempfile::tempdir().unwrap();
        let g = titanx(d.path());
        let p = g.probe(0).unwrap();
        assert_eq!(
            p.name,
            "GeForce GTX Titan X (clocks of the titanx-micro set)"
        );
        assert_eq!(p.memory_clocks_mhz, Ok(vec![3505, 810]));
        assert_eq!(p.current_sm_mhz, Ok(1164));
        // the Titan X plan's setting (810 MHz memory, which an H200's 2201..3201 refuses)
        let c = check_plan(&p, Some(861.0), Some(810.0)).unwrap();
        assert_eq!(
            c.set,
            vec![
                "nvmlDeviceSetGpuLockedClocks(device 0, minGpuClockMHz 861, maxGpuClockMHz 861)",
                "nvmlDeviceSetMemoryLockedClocks(device 0, minMemClockMHz 810, maxMemClockMHz 810)"
            ]
        );
        // a clock outside the set's range is refused, with the range
        let e = check_plan(&p, Some(2000.0), None).unwrap_err();
        assert!(
            matches!(
                e,
                NvmlClockError::OutOfRange {
                    min: 595,
                    max: 1164,
                    ..
                }
            ),
            "{e}"
        );
        // nothing was written: the files are as created
        assert_eq!(
            std::fs::read_to_string(d.path().join("gpu0/locked_clocks_mhz")).unwrap(),
            "none\n"
        );
        assert_eq!(
            std::fs::read_to_string(d.path().join("gpu0/supported_graphics_clocks_mhz")).unwrap(),
            "1164 1088 861 595\n"
        );
    }

    #[test]
    fn create_refuses_an_existing_gpu_and_empty_clocks() {
        let d = tempfile::tempdir().unwrap();
        titanx(d.path());
        let e = FakeGpu::create(
            d.path(),
            &[FakeGpuSpec {
                graphics_clocks_mhz: vec![100],
                ..Default::default()
            }],
        )
        .unwrap_err();
        assert!(e.to_string().contains("gpu0"), "{e}");
        let e = FakeGpu::create(d.path(), &[FakeGpuSpec::default()]).unwrap_err();
        assert!(e.to_string().contains("graphics clock"), "{e}");
    }

    #[test]
    fn without_memory_clocks_a_memory_setting_is_unreadable_with_the_reason() {
        let d = tempfile::tempdir().unwrap();
        let g = FakeGpu::create(
            d.path(),
            &[FakeGpuSpec {
                graphics_clocks_mhz: vec![1200, 1500],
                ..Default::default()
            }],
        )
        .unwrap();
        let p = g.probe(0).unwrap();
        assert_eq!(p.name, "fake GPU 0");
        assert!(check_plan(&p, Some(1200.0), None).is_ok());
        let e = check_plan(&p, Some(1200.0), Some(1000.0))
            .unwrap_err()
            .to_string();
        assert!(e.contains("supported_memory_clocks_mhz"), "{e}");
        // the shipped fixture lists memory clocks: one of them is accepted
        let f = tempfile::tempdir().unwrap();
        crate::controller::tests::copy_tree(
            &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/fake-gpu"),
            f.path(),
        );
        let p = FakeGpu::open(f.path()).unwrap().probe(0).unwrap();
        assert!(check_plan(&p, Some(1200.0), Some(1593.0)).is_ok());
    }
}
