//! CPU counters through `perf_event_open(2)` (perf-event2), counting a child process and
//! everything it starts (`inherit`), enabled when the child calls `exec` (`enable_on_exec`),
//! as `perf stat CMD` does.
//!
//! Multiplexed counters are scaled by time_enabled / time_running (perf_event_open(2),
//! "read_format"); a counter that never ran has no value ("not counted"), never zero.

use super::events::{EventKind, EventSpec};
use crate::store::run::EventStatus;
use perf_event::events::{Hardware, Raw, Software};
use perf_event::{Builder, Counter};

/// An open counter and its last reading.
pub struct OpenCounter {
    pub spec: EventSpec,
    counter: Counter,
    last_scaled: f64,
    /// Last raw reading: (count, time_enabled ns, time_running ns).
    pub last_raw: (u64, u64, u64),
    /// True when the kernel was excluded after a permission error (perf's `:u` fallback).
    pub fell_back_to_user: bool,
}

/// Outcome of opening one event.
pub enum Opened {
    Counter(Box<OpenCounter>),
    Failed {
        spec: EventSpec,
        status: EventStatus,
        reason: String,
    },
}

fn paranoid() -> Option<i32> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The fix to print when perf_event_open is denied.
pub fn permission_fix() -> String {
    let p = paranoid()
        .map(|p| p.to_string())
        .unwrap_or_else(|| "unknown".into());
    format!(
        "kernel.perf_event_paranoid is {p}: lower it with `sudo sysctl kernel.perf_event_paranoid=1` (or 2 for user-space only), or run as root / with CAP_PERFMON"
    )
}

fn build(spec: &EventSpec, pid: i32, exclude_kernel: bool) -> std::io::Result<Counter> {
    let mut b = match spec.kind {
        EventKind::Hardware(c) => Builder::new(Hardware::from(c)),
        EventKind::Software(c) => Builder::new(Software::from(c)),
        EventKind::Raw(c) => Builder::new(Raw::new(c)),
    };
    b.observe_pid(pid)
        .any_cpu()
        .inherit(true)
        .enable_on_exec(true)
        .exclude_kernel(exclude_kernel || spec.user_only)
        .exclude_user(spec.kernel_only)
        .exclude_hv(true);
    b.build()
}

fn classify(spec: &EventSpec, e: &std::io::Error) -> (EventStatus, String) {
    match e.raw_os_error() {
        Some(libc::EACCES) | Some(libc::EPERM) => (
            EventStatus::PermissionDenied,
            format!(
                "perf_event_open for `{}`: {e}. {}",
                spec.name,
                permission_fix()
            ),
        ),
        Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) | Some(libc::EINVAL) => (
            EventStatus::NotSupported,
            format!(
                "perf_event_open for `{}`: {e}: this machine's PMU does not offer it{}",
                spec.name,
                if matches!(spec.kind, EventKind::Software(_)) {
                    ""
                } else {
                    " (no hardware counters: a virtual machine without a virtual PMU, or an event of another CPU model)"
                }
            ),
        ),
        _ => (
            EventStatus::NotSupported,
            format!("perf_event_open for `{}`: {e}", spec.name),
        ),
    }
}

/// Open `spec` on process `pid` (which must not have called `exec` yet, so that
/// `enable_on_exec` starts it at the exec). Kernel counting is tried first, as `perf stat`
/// does for root; on a permission error the event is reopened for user space only.
pub fn open(spec: &EventSpec, pid: i32) -> Opened {
    let first = build(spec, pid, false);
    let (result, fell_back) = match first {
        Err(e)
            if matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM))
                && !spec.user_only =>
        {
            (build(spec, pid, true), true)
        }
        other => (other, false),
    };
    match result {
        Ok(counter) => Opened::Counter(Box::new(OpenCounter {
            spec: spec.clone(),
            counter,
            last_scaled: 0.0,
            last_raw: (0, 0, 0),
            fell_back_to_user: fell_back,
        })),
        Err(e) => {
            let (status, reason) = classify(spec, &e);
            Opened::Failed {
                spec: spec.clone(),
                status,
                reason,
            }
        }
    }
}

/// Scale a raw count for multiplexing: `count · enabled / running` (perf_event_open(2)).
/// `None` when the counter never ran while enabled.
pub fn scale(count: u64, enabled: u64, running: u64) -> Option<f64> {
    if running == 0 {
        if enabled == 0 && count == 0 {
            Some(0.0)
        } else {
            None
        }
    } else if running >= enabled {
        Some(count as f64)
    } else {
        Some(count as f64 * enabled as f64 / running as f64)
    }
}

impl OpenCounter {
    /// Read the counter; returns the scaled increase since the previous read.
    pub fn sample(&mut self) -> Option<f64> {
        let r = self.counter.read_count_and_time().ok()?;
        self.last_raw = (r.count, r.time_enabled, r.time_running);
        let now = scale(r.count, r.time_enabled, r.time_running)?;
        let d = (now - self.last_scaled).max(0.0);
        self.last_scaled = now;
        Some(d)
    }

    /// Scaled total so far.
    pub fn total(&self) -> Option<f64> {
        let (c, e, r) = self.last_raw;
        scale(c, e, r)
    }

    /// time_running / time_enabled over the run.
    pub fn running_ratio(&self) -> Option<f64> {
        let (_, e, r) = self.last_raw;
        (e > 0).then(|| r as f64 / e as f64)
    }

    /// Whether the counter was scheduled only part of the time.
    pub fn multiplexed(&self) -> bool {
        let (_, e, r) = self.last_raw;
        r < e
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scaling_for_multiplexing() {
        assert_eq!(scale(100, 10, 10), Some(100.0));
        assert_eq!(scale(100, 10, 5), Some(200.0));
        assert_eq!(scale(0, 10, 0), None);
        assert_eq!(scale(0, 0, 0), Some(0.0));
    }
}
