//! GPU settings through powerperfd (docs/cluster.md) for a user who is not root: one daemon
//! session holds the GPU's SM clock lock, memory clock lock and power limit
//! (`gpu.locked_clocks`, `gpu.mem_locked_clocks`, `gpu.power_limit` grants) while a
//! `powerperf sweep` runs its grid or a `powerperf apply` switches at region boundaries.
//! Every setting is first checked with the daemon's `check` request (grants, the device's
//! own list or range, another session's hold) before anything changes; the daemon restores
//! what the session changed when it is asked to, when the connection closes, or when this
//! process dies (its journal covers a daemon restart).

use anyhow::{Context, Result};
use powerperf_node::daemon::client::Client;
use powerperf_node::daemon::Request;
use powerperf_node::gpu_control::GpuSetting;
use std::path::Path;

/// The requests that put `s` in place on GPU `gpu`, in the order a session makes them:
/// SM clock, memory clock, power limit (each locked range is one clock: min = max).
pub fn gpu_requests(gpu: u32, s: &GpuSetting) -> Vec<Request> {
    let mut v = Vec::new();
    if let Some(f) = s.sm_clock_mhz {
        v.push(Request::SetGpuLockedClocks {
            gpu,
            min_mhz: f,
            max_mhz: Some(f),
        });
    }
    if let Some(f) = s.mem_clock_mhz {
        v.push(Request::SetGpuMemLockedClocks {
            gpu,
            min_mhz: f,
            max_mhz: Some(f),
        });
    }
    if let Some(w) = s.power_limit_w {
        v.push(Request::SetGpuPowerLimit { gpu, watts: w });
    }
    v
}

/// A powerperfd session setting one GPU.
pub struct DaemonGpuSession {
    client: Client,
    gpu: u32,
    log: Option<super::SwitchLog>,
    /// Something was set and not yet restored.
    active: bool,
    /// The setting now in place (the log's `old` column).
    current: GpuSetting,
    /// `powerperfd at SOCKET (session N)`.
    what: String,
}

impl DaemonGpuSession {
    /// Connect to the daemon at `socket` for GPU `gpu`; `log`: the user's switch log.
    /// Changes nothing.
    ///
    /// # Errors
    /// No daemon there, a log that cannot be opened.
    pub fn connect(socket: &Path, gpu: u32, log: Option<&Path>) -> Result<Self> {
        let log = log.map(super::SwitchLog::open).transpose()?;
        let client = Client::connect(socket)?;
        let what = super::daemon::describe_session(socket, &client);
        Ok(DaemonGpuSession {
            client,
            gpu,
            log,
            active: false,
            current: GpuSetting::default(),
            what,
        })
    }

    /// `powerperfd at SOCKET (session N)`.
    pub fn describe(&self) -> &str {
        &self.what
    }

    /// The GPU.
    pub fn gpu(&self) -> u32 {
        self.gpu
    }

    /// Ask the daemon whether every part of `s` would be allowed (`check`), changing
    /// nothing; returns its `info` lines.
    ///
    /// # Errors
    /// The daemon's refusal (a grant that does not cover it, a clock not in the GPU's
    /// list naming the nearest, a limit outside the range, another session's hold), or a
    /// daemon too old to know `check`.
    pub fn check(&mut self, s: &GpuSetting) -> Result<Vec<String>> {
        let mut info = Vec::new();
        for req in gpu_requests(self.gpu, s) {
            let r = self.client.check(&req).map_err(|e| {
                let old = e.to_string().contains("unknown variant `check`");
                if old {
                    e.context("this powerperfd does not know the `check` request (an older version): update it, as the sweep checks every point before it changes anything")
                } else {
                    e
                }
            })?;
            info.extend(r.info);
        }
        Ok(info)
    }

    /// Put `s` in place; returns the daemon's writes.
    ///
    /// # Errors
    /// A refusal or a failed write (what this session set stays held until
    /// [`restore`](Self::restore), the connection's end or this process's).
    pub fn set(&mut self, s: &GpuSetting) -> Result<Vec<String>> {
        let mut writes = Vec::new();
        for req in gpu_requests(self.gpu, s) {
            self.active = true;
            let r = self.client.request(&req)?;
            writes.extend(r.writes);
        }
        if let Some(l) = &mut self.log {
            l.note(
                "set",
                &format!("gpu{} (powerperfd)", self.gpu),
                &self.current.describe(),
                &s.describe(),
            );
        }
        self.current = *s;
        Ok(writes)
    }

    /// Ask the daemon to put back what this session changed; returns its writes.
    ///
    /// # Errors
    /// The daemon's failure (it keeps the saved values in its journal).
    pub fn restore(&mut self) -> Result<Vec<String>> {
        if !self.active {
            return Ok(vec![]);
        }
        self.active = false;
        let r = self.client.restore().context(
            "the restore through powerperfd failed; the daemon restores a session's settings when it ends or restarts (its journal), see `journalctl -u powerperfd`",
        )?;
        if let Some(l) = &mut self.log {
            l.note(
                "restore",
                &format!("gpu{} (powerperfd)", self.gpu),
                &self.current.describe(),
                "saved settings",
            );
        }
        Ok(r.writes)
    }
}

/// Region-triggered switching of the GPU's SM clock through the daemon (`apply` of a job
/// plan whose `core_freq_mhz` is a GPU's, by a user who is not root).
impl super::Switcher for DaemonGpuSession {
    fn set(&mut self, mhz: f64) -> Result<()> {
        DaemonGpuSession::set(
            self,
            &GpuSetting {
                sm_clock_mhz: Some(mhz),
                ..Default::default()
            },
        )
        .map(|_| ())
    }
    fn note(&mut self, action: &str, what: &str, old: &str, new: &str) {
        if let Some(l) = &mut self.log {
            l.note(action, what, old, new);
        }
    }
    fn restore(&mut self) -> Result<()> {
        let w = DaemonGpuSession::restore(self)?;
        eprintln!(
            "powerperf: original GPU settings restored by powerperfd ({} write(s))",
            w.len()
        );
        Ok(())
    }
}

impl Drop for DaemonGpuSession {
    fn drop(&mut self) {
        // the daemon restores when the connection closes; asking first makes it happen
        // before this process goes on
        if let Err(e) = self.restore() {
            eprintln!("powerperf: {e:#}");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_gpu_setting_becomes_its_requests_in_order() {
        let s = GpuSetting {
            sm_clock_mhz: Some(1200.0),
            mem_clock_mhz: Some(1593.0),
            power_limit_w: Some(300.0),
        };
        assert_eq!(
            gpu_requests(1, &s),
            vec![
                Request::SetGpuLockedClocks {
                    gpu: 1,
                    min_mhz: 1200.0,
                    max_mhz: Some(1200.0)
                },
                Request::SetGpuMemLockedClocks {
                    gpu: 1,
                    min_mhz: 1593.0,
                    max_mhz: Some(1593.0)
                },
                Request::SetGpuPowerLimit {
                    gpu: 1,
                    watts: 300.0
                },
            ]
        );
        assert!(gpu_requests(0, &GpuSetting::default()).is_empty());
    }
}
