//! Fallbacks of [`crate::os`] where Linux interfaces are absent: no pinning, no counters.

use super::Pages;

/// One CPU (pinning is unavailable here).
pub fn allowed_cpus() -> Vec<usize> {
    vec![0]
}

/// Pinning is Linux-only here.
///
/// # Errors
/// Always, with the reason.
pub fn pin_current_thread(_cpu: usize) -> Result<(), String> {
    Err("thread pinning is implemented for Linux only".into())
}

/// Real-time scheduling is Linux-only here.
///
/// # Errors
/// Always, with the reason.
pub fn set_realtime(_prio: i32) -> Result<(), String> {
    Err("SCHED_RR is implemented for Linux only".into())
}

/// Monotonic time in nanoseconds (from `Instant`, relative to the first call).
pub fn monotonic_ns() -> u64 {
    use std::sync::OnceLock;
    static START: OnceLock<std::time::Instant> = OnceLock::new();
    START
        .get_or_init(std::time::Instant::now)
        .elapsed()
        .as_nanos() as u64
}

/// Thread CPU time is not read here: monotonic time instead.
pub fn thread_cpu_ns() -> u64 {
    monotonic_ns()
}

/// Zeroed memory (a `Vec`; page size cannot be chosen here).
pub struct Buffer<T: Copy>(Vec<T>);

impl<T: Copy> Buffer<T> {
    /// `len` zeroed elements; `T` must be valid as all-zero bytes.
    pub fn zeroed(len: usize, _pages: Pages) -> Buffer<T> {
        // SAFETY: callers use u64/usize/f64, for which zero bytes are valid.
        Buffer((0..len).map(|_| unsafe { std::mem::zeroed() }).collect())
    }
}

impl<T: Copy> std::ops::Deref for Buffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        &self.0
    }
}

impl<T: Copy> std::ops::DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        &mut self.0
    }
}

/// perf_event is Linux-only.
pub struct TaskClock;

impl TaskClock {
    /// # Errors
    /// Always, with the reason.
    pub fn open() -> Result<TaskClock, String> {
        Err("perf_event_open is Linux-only".into())
    }
    /// Never called (open fails).
    pub fn read(&self) -> u64 {
        0
    }
}
