//! Operating-system services the measurements need: thread pinning, page-size control of
//! large buffers, `clock_gettime` and a perf_event software counter. Linux has the real
//! implementations; elsewhere pinning and counters report why they are unavailable.

/// How a [`Buffer`] asks the kernel to back its pages.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Pages {
    /// `madvise(MADV_HUGEPAGE)`: transparent 2 MiB pages where the kernel allows, so that a
    /// pointer chase over tens of MiB measures the caches and not the TLB.
    Huge,
    /// `madvise(MADV_NOHUGEPAGE)`: 4 KiB pages, for the TLB-miss measurement.
    Small,
    /// No advice: what `malloc` gives other programs, huge pages only where
    /// `/sys/kernel/mm/transparent_hugepage/enabled` is `always` (STREAM, likwid-bench and
    /// mbw allocate this way).
    Default,
}

#[cfg(target_os = "linux")]
#[path = "os_linux.rs"]
mod imp;

#[cfg(not(target_os = "linux"))]
#[path = "os_other.rs"]
mod imp;

pub use imp::{
    allowed_cpus, monotonic_ns, pin_current_thread, set_realtime, thread_cpu_ns, Buffer, TaskClock,
};
