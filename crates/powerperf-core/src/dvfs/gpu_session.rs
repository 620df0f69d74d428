//! A GPU settings session for `sweep` and `apply` (issue 39): every setting is checked
//! before anything changes; what each control overwrites is saved ([`GpuSaved`]) and
//! written to a GPU restore record before the first write; the saved settings are put
//! back by [`GpuSession::restore`], or, failing that, when the session is dropped (early
//! returns, errors, panics). After a SIGKILL, `powerperf apply --restore` replays the
//! record ([`replay_gpu_restore`]).
//!
//! The controls: the fake GPUs for `--fake-gpu DIR` (no root, no GPU), or NVML opened
//! writable (`NvmlGpu::open_writable`) as root: every write goes through
//! `NvmlGpu::nvml_set`, the one function that calls NVML's setters; then, as root, the AMD
//! and Intel GPUs of `--sysfs-root` (`powerperf_node::gpu_control::sysfs::SysfsGpus`:
//! amdgpu `pp_dpm_sclk`/`pp_od_clk_voltage` and `power1_cap`, xe/i915 min/max frequency
//! and `power1_max`), numbered after NVML's ([`open_control`]).

use crate::dvfs::apply::SwitchLog;
use anyhow::{Context, Result};
use powerperf_node::gpu_control::node::open_node_gpus;
use powerperf_node::gpu_control::{GpuControl, GpuKnob, GpuSaved, GpuSetting};
use powerperf_node::state;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The GPU restore record's name in the state directory (next to `powerperf-restore.toml`).
pub const GPU_RECORD_NAME: &str = "powerperf-gpu-restore.toml";

/// Check `s` on `gpu` against what the GPU allows (supported clocks, power limit range,
/// a memory-clock lock at all). Changes nothing.
///
/// # Errors
/// The first refusal: no such GPU, a clock not in the supported list (naming the nearest
/// ones), a limit outside the range, no memory-clock lock.
pub fn check_setting(ctl: &dyn GpuControl, gpu: u32, s: &GpuSetting) -> Result<()> {
    ctl.check_gpu(gpu)?;
    if let Some(f) = s.sm_clock_mhz {
        ctl.check_locked_clocks(gpu, f, f)?;
    }
    if let Some(f) = s.mem_clock_mhz {
        ctl.check_mem_locked_clocks(gpu, f, f)?;
    }
    if let Some(w) = s.power_limit_w {
        ctl.check_power_limit(gpu, w)?;
    }
    Ok(())
}

/// Open the GPU controls that write, for root only: the fake GPUs under `fake` when given,
/// else NVML, writable; then the AMD and Intel GPUs (amdgpu, xe, i915) of the sysfs tree
/// `root`, numbered after them. The same opening as powerperfd's
/// ([`powerperf_node::gpu_control::node::open_node_gpus`]).
///
/// # Errors
/// No fake GPU there; not root (the message names `--fake-gpu` and powerperfd); neither
/// NVML nor a sysfs GPU (both reasons).
pub fn open_control(fake: Option<&Path>, root: &Path) -> Result<Box<dyn GpuControl>> {
    // SAFETY: geteuid has no preconditions.
    let is_root = unsafe { libc::geteuid() } == 0;
    match fake {
        Some(d) if is_root => check_fake_dir_for_root(d)?,
        Some(_) => {}
        None if !is_root => anyhow::bail!(
            "setting GPU clocks or power limits needs root (NVML's setters and the amdgpu, xe and i915 sysfs files do); run powerperf as root, go through powerperfd (a grant of gpu.locked_clocks, gpu.mem_locked_clocks or gpu.power_limit, docs/cluster.md), or use --fake-gpu DIR to try it on a fake GPU"
        ),
        None => {}
    }
    let (g, notes) = open_node_gpus(fake, root, true).map_err(|e| match fake {
        Some(_) => anyhow::Error::new(e),
        None => anyhow::anyhow!(
            "{e} (GPU controls looked for: NVML, and amdgpu, xe and i915 hwmon directories under --sysfs-root {})",
            root.display()
        ),
    })?;
    for n in notes {
        tracing::debug!("{n}");
    }
    Ok(g)
}

/// As root, the fake GPU directory and its `gpuN` directories must be real directories
/// (not symbolic links) of root's, not writable by group or others: otherwise another user
/// could point a `gpuN` at a directory of their choice and have root write the fake GPU's
/// file names there (docs/security.md).
///
/// # Errors
/// The first directory that is not, named with its owner and mode.
pub fn check_fake_dir_for_root(dir: &Path) -> Result<()> {
    use std::os::unix::fs::MetadataExt;
    let mut dirs = vec![dir.to_path_buf()];
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.file_name().to_string_lossy().starts_with("gpu") {
                dirs.push(e.path());
            }
        }
    }
    for d in dirs {
        let m = std::fs::symlink_metadata(&d)
            .with_context(|| format!("--fake-gpu: cannot read {}", d.display()))?;
        if !m.file_type().is_dir() || m.uid() != 0 || m.mode() & 0o022 != 0 {
            anyhow::bail!(
                "--fake-gpu: as root, {} must be a directory of root's that only root can write (it is {}, uid {}, mode {:o}); copy the fake GPU to such a directory",
                d.display(),
                if m.file_type().is_symlink() { "a symbolic link" } else if m.is_dir() { "a directory" } else { "not a directory" },
                m.uid(),
                m.mode() & 0o7777
            );
        }
    }
    Ok(())
}

/// The GPU restore record: what a GPU session overwrote, written before the first write.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuRestoreRecord {
    /// The powerperf process that wrote it.
    pub pid: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid_start_ticks: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub boot_id: Option<String>,
    /// The fake GPU directory (absolute) when the session wrote fake GPUs; absent: NVML.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fake_gpu: Option<PathBuf>,
    /// The sysfs root (absolute) the session's AMD and Intel GPUs were found under
    /// (`--sysfs-root`); absent in records written before it was kept: `/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sysfs_root: Option<PathBuf>,
    pub command: Vec<String>,
    /// The settings to put back, in order.
    pub saved: Vec<GpuSaved>,
}

impl GpuRestoreRecord {
    /// Read a record: this user's own regular file, at most [`state::MAX_RECORD_BYTES`].
    ///
    /// # Errors
    /// Unreadable, someone else's, too long, not a record.
    pub fn read(path: &Path) -> Result<Self> {
        use std::io::Read as _;
        let f = state::open_own_read(path, "GPU restore record")?;
        let mut text = String::new();
        f.take(state::MAX_RECORD_BYTES + 1)
            .read_to_string(&mut text)
            .with_context(|| format!("cannot read the GPU restore record {}", path.display()))?;
        if text.len() as u64 > state::MAX_RECORD_BYTES {
            anyhow::bail!(
                "{} is longer than {} bytes: not a powerperf GPU restore record",
                path.display(),
                state::MAX_RECORD_BYTES
            );
        }
        toml::from_str(&text)
            .with_context(|| format!("{} is not a powerperf GPU restore record", path.display()))
    }

    fn write(&self, path: &Path) -> Result<()> {
        let text = format!(
            "# powerperf GPU restore record: GPU settings to put back. Replay with `powerperf apply --restore --restore-file {}`\n{}",
            path.display(),
            toml::to_string_pretty(self).context("serialising the GPU restore record")?
        );
        state::write_new_atomically(path, &text, "GPU restore record")
    }
}

/// The GPU restore record that goes with the CPU record `cpu_record`: its name with
/// `powerperf-gpu-` in place of `powerperf-` when it has that prefix, else `.gpu` added.
pub fn gpu_record_path(cpu_record: &Path) -> PathBuf {
    let name = cpu_record
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let gpu = match name.strip_prefix("powerperf-") {
        Some(rest) => format!("powerperf-gpu-{rest}"),
        None => format!("{name}.gpu"),
    };
    cpu_record.with_file_name(gpu)
}

/// Where a session's GPUs were opened from ([`open_control`]'s arguments), kept in the GPU
/// restore record so that a replay reopens the same GPUs.
#[derive(Debug, Clone, Copy)]
pub struct GpuOrigin<'a> {
    /// `--fake-gpu DIR`.
    pub fake_gpu: Option<&'a Path>,
    /// `--sysfs-root DIR` (the AMD and Intel GPUs).
    pub sysfs_root: &'a Path,
}

/// A GPU session on one GPU.
pub struct GpuSession {
    ctl: Box<dyn GpuControl>,
    gpu: u32,
    saved: Vec<GpuSaved>,
    record: PathBuf,
    log: Option<SwitchLog>,
    active: bool,
    /// The setting now in place (for the log's `old` column).
    current: GpuSetting,
}

impl GpuSession {
    /// Save what the controls of `knobs` hold on `gpu`, and write the restore record
    /// (exclusively: a left-over record is refused, as for the CPU's). Changes nothing on
    /// the GPU.
    ///
    /// # Errors
    /// A left-over record, an unreadable setting, an unwritable record or log.
    pub fn begin(
        ctl: Box<dyn GpuControl>,
        gpu: u32,
        knobs: &[GpuKnob],
        record: &Path,
        log: Option<&Path>,
        origin: GpuOrigin<'_>,
        command: &[String],
    ) -> Result<Self> {
        let GpuOrigin {
            fake_gpu,
            sysfs_root,
        } = origin;
        if std::fs::symlink_metadata(record).is_ok() {
            anyhow::bail!(
                "a GPU restore record is still at {}: its settings may not have been put back. Run `powerperf apply --restore --restore-file {}` first, or give another --restore-file",
                record.display(),
                gpu_record_cpu_hint(record).display()
            );
        }
        let mut saved = Vec::new();
        for k in knobs {
            saved.push(ctl.save(gpu, *k)?);
        }
        let me = state::ProcessId::current();
        let rec = GpuRestoreRecord {
            pid: me.pid,
            pid_start_ticks: me.start_ticks,
            boot_id: me.boot_id,
            fake_gpu: fake_gpu.map(|d| d.canonicalize().unwrap_or_else(|_| d.to_path_buf())),
            sysfs_root: Some(
                sysfs_root
                    .canonicalize()
                    .unwrap_or_else(|_| sysfs_root.to_path_buf()),
            ),
            command: command.to_vec(),
            saved: saved.clone(),
        };
        let log = log.map(SwitchLog::open).transpose()?;
        rec.write(record)?;
        Ok(GpuSession {
            ctl,
            gpu,
            saved,
            record: record.to_path_buf(),
            log,
            active: true,
            current: GpuSetting::default(),
        })
    }

    /// The GPU.
    pub fn gpu(&self) -> u32 {
        self.gpu
    }

    /// The controls.
    pub fn control(&self) -> &dyn GpuControl {
        self.ctl.as_ref()
    }

    /// Put `s` in place (each part checked by the control first); returns the calls made.
    ///
    /// # Errors
    /// A refusal or a failed write (the session stays active: a later restore undoes any
    /// partial write).
    pub fn set(&mut self, s: &GpuSetting) -> Result<Vec<String>> {
        let g = self.gpu;
        let mut done = Vec::new();
        if let Some(f) = s.sm_clock_mhz {
            done.push(self.ctl.set_locked_clocks(g, f, f)?);
        }
        if let Some(f) = s.mem_clock_mhz {
            done.push(self.ctl.set_mem_locked_clocks(g, f, f)?);
        }
        if let Some(w) = s.power_limit_w {
            done.push(self.ctl.set_power_limit_w(g, w)?);
        }
        if let Some(l) = &mut self.log {
            l.note(
                "set",
                &format!("gpu{g}"),
                &self.current.describe(),
                &s.describe(),
            );
        }
        self.current = *s;
        Ok(done)
    }

    /// Put every saved setting back, remove the record; returns the calls made.
    ///
    /// # Errors
    /// A failed write: the record is kept and the message says how to replay it.
    pub fn restore(&mut self) -> Result<Vec<String>> {
        if !self.active {
            return Ok(vec![]);
        }
        self.active = false;
        let mut done = Vec::new();
        let mut failed = Vec::new();
        for s in &self.saved {
            match self.ctl.restore(s) {
                Ok(c) => done.push(c),
                Err(e) => failed.push(format!("{s}: {e}")),
            }
        }
        if let Some(l) = &mut self.log {
            l.note(
                "restore",
                &format!("gpu{}", self.gpu),
                &self.current.describe(),
                "saved settings",
            );
        }
        if failed.is_empty() {
            let _ = std::fs::remove_file(&self.record);
            Ok(done)
        } else {
            anyhow::bail!(
                "restoring the GPU settings failed ({}); the record {} is kept: run `powerperf apply --restore --restore-file {}` with the needed privileges",
                failed.join("; "),
                self.record.display(),
                gpu_record_cpu_hint(&self.record).display()
            )
        }
    }
}

impl GpuSession {
    /// Log a line that is not a write (`region`, `refuse`, `deny`) in the switch log.
    pub fn note(&mut self, action: &str, what: &str, old: &str, new: &str) {
        if let Some(l) = &mut self.log {
            l.note(action, what, old, new);
        }
    }
}

/// Region-triggered switching of the GPU's SM clock (`apply` with a job plan whose
/// `core_freq_mhz` is a GPU's): each switch locks the clock through the session.
impl crate::dvfs::apply::Switcher for GpuSession {
    fn set(&mut self, mhz: f64) -> Result<()> {
        GpuSession::set(
            self,
            &GpuSetting {
                sm_clock_mhz: Some(mhz),
                ..Default::default()
            },
        )
        .map(|_| ())
    }
    fn note(&mut self, action: &str, what: &str, old: &str, new: &str) {
        GpuSession::note(self, action, what, old, new);
    }
    fn restore(&mut self) -> Result<()> {
        GpuSession::restore(self).map(|_| ())
    }
}

impl Drop for GpuSession {
    fn drop(&mut self) {
        if let Err(e) = self.restore() {
            eprintln!("powerperf: {e:#}");
        }
    }
}

/// The `--restore-file` that names `gpu_record` (the inverse of [`gpu_record_path`]).
fn gpu_record_cpu_hint(gpu_record: &Path) -> PathBuf {
    let name = gpu_record
        .file_name()
        .map(|n| n.to_string_lossy().to_string())
        .unwrap_or_default();
    let cpu = match (
        name.strip_prefix("powerperf-gpu-"),
        name.strip_suffix(".gpu"),
    ) {
        (Some(rest), _) => format!("powerperf-{rest}"),
        (None, Some(base)) => base.to_string(),
        _ => name,
    };
    gpu_record.with_file_name(cpu)
}

/// Replay a GPU restore record left by a powerperf that did not finish (SIGKILL): checked
/// first (this user's own file, the writer no longer running, every saved setting inside
/// what the GPU allows: [`GpuControl::validate`]), then put back. Returns the calls made;
/// `Ok(None)` when there is no record.
///
/// # Errors
/// A refused record, the writer still running, no GPU control, a failed write (the record
/// is kept in every case).
pub fn replay_gpu_restore(path: &Path) -> Result<Option<Vec<String>>> {
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        _ => {}
    }
    let rec = GpuRestoreRecord::read(path)?;
    let owner = state::ProcessId {
        pid: rec.pid,
        start_ticks: rec.pid_start_ticks,
        boot_id: rec.boot_id.clone(),
    };
    if owner.pid != std::process::id() && owner.is_alive() {
        anyhow::bail!(
            "the powerperf that wrote the GPU restore record {} (pid {}) is still running; it puts the settings back itself when it ends. Stop it (`kill -TERM {}`) instead",
            path.display(),
            owner.pid,
            owner.pid
        );
    }
    let root = rec.sysfs_root.as_deref().unwrap_or(Path::new("/"));
    let mut ctl = open_control(rec.fake_gpu.as_deref(), root)?;
    for s in &rec.saved {
        ctl.validate(s).with_context(|| {
            format!(
                "refusing the GPU restore record {} (kept; check it, then remove it)",
                path.display()
            )
        })?;
    }
    let mut done = Vec::new();
    for s in &rec.saved {
        done.push(ctl.restore(s).with_context(|| {
            format!(
                "restoring from {} failed; the record is kept (run again as root)",
                path.display()
            )
        })?);
    }
    std::fs::remove_file(path).with_context(|| format!("removing {}", path.display()))?;
    Ok(Some(done))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A record written before `sysfs_root` was kept loads (the restore then opens `/`);
    /// a new one keeps the root through a write and a read.
    #[test]
    fn records_with_and_without_sysfs_root_load() {
        let old = "pid = 4242\ncommand = [\"sleep\", \"1\"]\nsaved = []\n";
        let rec: GpuRestoreRecord = toml::from_str(old).unwrap();
        assert_eq!(rec.sysfs_root, None);
        assert_eq!(rec.fake_gpu, None);
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("powerperf-gpu-restore.toml");
        let new = GpuRestoreRecord {
            sysfs_root: Some(PathBuf::from("/srv/fixture")),
            ..rec
        };
        new.write(&path).unwrap();
        let back = GpuRestoreRecord::read(&path).unwrap();
        assert_eq!(back, new);
        assert!(std::fs::read_to_string(&path)
            .unwrap()
            .contains("sysfs_root = \"/srv/fixture\""));
    }
}
