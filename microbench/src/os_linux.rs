//! Linux implementations of [`crate::os`].

use super::Pages;

/// The CPUs this thread may run on (`sched_getaffinity`), or `[0]` if that fails.
pub fn allowed_cpus() -> Vec<usize> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut set) != 0 {
            return vec![0];
        }
        let v: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect();
        if v.is_empty() {
            vec![0]
        } else {
            v
        }
    }
}

/// Pin the calling thread to `cpu` (`sched_setaffinity`).
///
/// # Errors
/// The OS error as text when the kernel refuses (e.g. a CPU outside the cgroup's set).
pub fn pin_current_thread(cpu: usize) -> Result<(), String> {
    // SAFETY: as above; the set is initialised before use.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) != 0 {
            return Err(format!(
                "sched_setaffinity(cpu {cpu}): {}",
                std::io::Error::last_os_error()
            ));
        }
    }
    Ok(())
}

/// Run the calling thread under `SCHED_RR` at priority `prio` (`sched_setscheduler(2)`
/// with pid 0, which Linux applies to the calling thread): normal (`SCHED_OTHER`) tasks,
/// whatever their nice value or cgroup weight, then no longer take its CPU, so a bandwidth
/// sample on a shared machine measures the memory system and not other tasks' time
/// slices. Round-robin rather than FIFO: a thread of the same priority on the same CPU
/// gets its turn after one time slice (`/proc/sys/kernel/sched_rr_timeslice_ms`, 100 ms),
/// so a spinning thread cannot lock out a peer for good. The kernel's real-time throttling
/// (`/proc/sys/kernel/sched_rt_runtime_us`, by default 0.95 s of every 1 s) still leaves
/// other tasks 5 % of each CPU.
///
/// # Errors
/// The OS error and the fix (root, or `CAP_SYS_NICE`, or an `RLIMIT_RTPRIO` of at least
/// `prio`) when the kernel refuses.
pub fn set_realtime(prio: i32) -> Result<(), String> {
    let param = libc::sched_param {
        sched_priority: prio,
    };
    // SAFETY: param is a valid sched_param; pid 0 is the calling thread.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_RR, &param) } != 0 {
        return Err(format!(
            "sched_setscheduler(SCHED_RR, {prio}): {} (needs root, CAP_SYS_NICE or \
             `ulimit -r {prio}`)",
            std::io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// `clock_gettime(CLOCK_MONOTONIC)` in nanoseconds.
pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// CPU time of the calling thread (`clock_gettime(CLOCK_THREAD_CPUTIME_ID)`) in ns: time
/// while another task had the CPU is left out, so single-threaded samples on a shared
/// machine measure the work and not the wait.
pub fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: ts is a valid timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// Zero-initialised anonymous memory of `len` elements of `T` (`u64`, `usize`, `f64`:
/// types for which all-zero bytes are a valid value), page size per [`Pages`].
pub struct Buffer<T: Copy> {
    ptr: *mut T,
    len: usize,
    bytes: usize,
}

// SAFETY: the buffer owns its mapping exclusively, like a Vec.
unsafe impl<T: Copy + Send> Send for Buffer<T> {}
// SAFETY: shared access is through &[T].
unsafe impl<T: Copy + Sync> Sync for Buffer<T> {}

impl<T: Copy> Buffer<T> {
    /// Map `len` zeroed elements (`T` must be valid as all-zero bytes).
    ///
    /// # Panics
    /// When `mmap` fails (out of memory), like `Vec` allocation.
    pub fn zeroed(len: usize, pages: Pages) -> Buffer<T> {
        let huge = 2 << 20;
        let bytes = (len.max(1) * std::mem::size_of::<T>()).div_ceil(huge) * huge;
        // SAFETY: anonymous private mapping; checked for MAP_FAILED.
        let ptr = unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                bytes,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert!(p != libc::MAP_FAILED, "mmap of {bytes} bytes failed");
            let advice = match pages {
                Pages::Huge => Some(libc::MADV_HUGEPAGE),
                Pages::Small => Some(libc::MADV_NOHUGEPAGE),
                Pages::Default => None,
            };
            // Advice only: a kernel without THP ignores or refuses it, both fine.
            if let Some(advice) = advice {
                libc::madvise(p, bytes, advice);
            }
            p as *mut T
        };
        Buffer { ptr, len, bytes }
    }
}

impl<T: Copy> std::ops::Deref for Buffer<T> {
    type Target = [T];
    fn deref(&self) -> &[T] {
        // SAFETY: ptr is valid for len elements for the lifetime of self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }
}

impl<T: Copy> std::ops::DerefMut for Buffer<T> {
    fn deref_mut(&mut self) -> &mut [T] {
        // SAFETY: as above, and &mut self is exclusive.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }
}

impl<T: Copy> Drop for Buffer<T> {
    fn drop(&mut self) {
        // SAFETY: unmapping the mapping made in zeroed().
        unsafe { libc::munmap(self.ptr as *mut libc::c_void, self.bytes) };
    }
}

/// A perf_event software counter (`PERF_COUNT_SW_TASK_CLOCK`) of the calling thread,
/// read with `read(2)`; opened through the raw `perf_event_open` syscall to keep this
/// crate light (see `perf_event_open(2)`).
pub struct TaskClock {
    fd: libc::c_int,
}

impl TaskClock {
    /// Open the counter.
    ///
    /// # Errors
    /// The reason as text, with the fix when `perf_event_paranoid` forbids it.
    pub fn open() -> Result<TaskClock, String> {
        // perf_event_attr, PERF_ATTR_SIZE_VER0 (64 bytes): type u32 @0, size u32 @4,
        // config u64 @8, flags u64 @40 (bit 5 exclude_kernel, bit 6 exclude_hv).
        let mut attr = [0u64; 8];
        const PERF_TYPE_SOFTWARE: u64 = 1;
        const PERF_COUNT_SW_TASK_CLOCK: u64 = 1;
        attr[0] = PERF_TYPE_SOFTWARE | (64u64 << 32);
        attr[1] = PERF_COUNT_SW_TASK_CLOCK;
        attr[5] = (1 << 5) | (1 << 6);
        // SAFETY: attr is a valid 64-byte perf_event_attr; pid 0 / cpu -1 = this thread.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr.as_ptr(),
                0 as libc::pid_t,
                -1 as libc::c_int,
                -1 as libc::c_int,
                0 as libc::c_ulong,
            )
        } as libc::c_int;
        if fd < 0 {
            let e = std::io::Error::last_os_error();
            let paranoid = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
                .map(|s| s.trim().to_string())
                .unwrap_or_else(|_| "?".into());
            return Err(format!(
                "perf_event_open(task-clock): {e} (perf_event_paranoid is {paranoid}; \
                 `sudo sysctl kernel.perf_event_paranoid=2` allows counting one's own threads)"
            ));
        }
        Ok(TaskClock { fd })
    }

    /// The counter's value (ns of task clock); 0 if the read fails.
    #[inline]
    pub fn read(&self) -> u64 {
        let mut v = 0u64;
        // SAFETY: reading 8 bytes into a u64.
        unsafe { libc::read(self.fd, &mut v as *mut u64 as *mut libc::c_void, 8) };
        v
    }
}

impl Drop for TaskClock {
    fn drop(&mut self) {
        // SAFETY: closing our own fd.
        unsafe { libc::close(self.fd) };
    }
}
