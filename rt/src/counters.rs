//! Counters read at every region begin and end (`POWERPERF_RT_COUNTERS`), so a region gets
//! its exact counter deltas, as GPTL does with PAPI.
//!
//! Each thread opens the counters on itself (`perf_event_open(2)` with pid 0, cpu -1,
//! through perf-event-open-sys2) the first time it records an event, one group per PMU
//! (hardware events together; software events of the `software` PMU together; `cpu-clock`
//! and `task-clock`, which have PMUs of their own, alone), and a begin or an end reads
//! each group with one `read(2)` of its leader (`PERF_FORMAT_GROUP`). One group per PMU
//! because Linux 6.18 (seen on the development VM) does not count a `page-faults` member
//! in a group led by `task-clock` or `cpu-clock`: it reads 0 while the same event alone
//! counts every fault. Names
//! are perf's generic events (`perf list`: `cycles`, `instructions`, `task-clock`,
//! `page-faults`, …). Which of them this machine counts is decided once, on the thread
//! that starts the runtime: a counter that cannot be opened there is left out with one
//! line on stderr, and the events file's `# counters` line lists what is recorded.

use perf_event_open_sys as sys;

/// Environment variable with the comma-separated counter names (set by
/// `powerperf collect --region-counters`).
pub const ENV_COUNTERS: &str = "POWERPERF_RT_COUNTERS";

/// Most counters a thread reads at a region boundary.
pub const MAX_COUNTERS: usize = 8;

/// perf's generic event `name` as (perf type, config) (`perf list`, linux/perf_event.h).
pub fn lookup(name: &str) -> Option<(u32, u64)> {
    let hw = |c: u32| (sys::bindings::PERF_TYPE_HARDWARE, u64::from(c));
    let sw = |c: u32| (sys::bindings::PERF_TYPE_SOFTWARE, u64::from(c));
    use sys::bindings as b;
    Some(match name {
        "cycles" | "cpu-cycles" => hw(b::PERF_COUNT_HW_CPU_CYCLES),
        "instructions" => hw(b::PERF_COUNT_HW_INSTRUCTIONS),
        "cache-references" => hw(b::PERF_COUNT_HW_CACHE_REFERENCES),
        "cache-misses" => hw(b::PERF_COUNT_HW_CACHE_MISSES),
        "branches" | "branch-instructions" => hw(b::PERF_COUNT_HW_BRANCH_INSTRUCTIONS),
        "branch-misses" => hw(b::PERF_COUNT_HW_BRANCH_MISSES),
        "cpu-clock" => sw(b::PERF_COUNT_SW_CPU_CLOCK),
        "task-clock" => sw(b::PERF_COUNT_SW_TASK_CLOCK),
        "page-faults" | "faults" => sw(b::PERF_COUNT_SW_PAGE_FAULTS),
        "context-switches" | "cs" => sw(b::PERF_COUNT_SW_CONTEXT_SWITCHES),
        "cpu-migrations" | "migrations" => sw(b::PERF_COUNT_SW_CPU_MIGRATIONS),
        "minor-faults" => sw(b::PERF_COUNT_SW_PAGE_FAULTS_MIN),
        "major-faults" => sw(b::PERF_COUNT_SW_PAGE_FAULTS_MAJ),
        _ => return None,
    })
}

/// Open one counter on the calling thread; `group` is the leader's fd (or -1 to lead).
/// Kernel counting is tried first, then user space only (perf's `:u`) after a permission
/// error.
fn open(ev: (u32, u64), group: i32) -> std::io::Result<i32> {
    let mut last = std::io::Error::from_raw_os_error(libc::EINVAL);
    for exclude_kernel in [0, 1] {
        let mut attr = sys::bindings::perf_event_attr::default();
        attr.type_ = ev.0;
        attr.size = std::mem::size_of::<sys::bindings::perf_event_attr>() as u32;
        attr.config = ev.1;
        if group < 0 {
            attr.read_format = u64::from(sys::bindings::PERF_FORMAT_GROUP);
        }
        attr.set_exclude_kernel(exclude_kernel);
        attr.set_exclude_hv(1);
        // SAFETY: attr is a valid perf_event_attr of the size it states.
        let fd = unsafe {
            sys::perf_event_open(
                &mut attr,
                0,
                -1,
                group,
                sys::bindings::PERF_FLAG_FD_CLOEXEC as _,
            )
        };
        if fd >= 0 {
            return Ok(fd);
        }
        last = std::io::Error::last_os_error();
        if !matches!(last.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM)) {
            break;
        }
    }
    Err(last)
}

/// The counters this machine can count, out of `spec` (comma-separated names), with a
/// line on stderr for each one left out. At most [`MAX_COUNTERS`].
pub(crate) fn probe(spec: &str) -> Vec<(String, (u32, u64))> {
    let mut ok = Vec::new();
    for name in spec.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let Some(ev) = lookup(name) else {
            eprintln!("powerperf-rt: unknown counter `{name}` in {ENV_COUNTERS} (perf's generic events: cycles, instructions, cache-misses, branch-misses, task-clock, page-faults, context-switches, …): not recorded");
            continue;
        };
        if ok.len() == MAX_COUNTERS {
            eprintln!("powerperf-rt: more than {MAX_COUNTERS} counters in {ENV_COUNTERS}: `{name}` is not recorded");
            continue;
        }
        match open(ev, -1) {
            Ok(fd) => {
                // SAFETY: fd was just opened by us.
                unsafe { libc::close(fd) };
                ok.push((name.to_string(), ev));
            }
            Err(e) => eprintln!(
                "powerperf-rt: counter `{name}` cannot be opened on this machine ({e}): not recorded"
            ),
        }
    }
    ok
}

/// The PMU an event is scheduled on, for grouping: the perf type, with `cpu-clock` and
/// `task-clock` apart from the other software events.
fn pmu_key(ev: (u32, u64)) -> (u32, u64) {
    use sys::bindings as b;
    let own_pmu = [
        u64::from(b::PERF_COUNT_SW_CPU_CLOCK),
        u64::from(b::PERF_COUNT_SW_TASK_CLOCK),
    ];
    if ev.0 == b::PERF_TYPE_SOFTWARE && own_pmu.contains(&ev.1) {
        ev
    } else {
        (ev.0, u64::MAX)
    }
}

/// How many groups (so `read(2)` calls per region begin or end) these counter names take.
pub fn groups_of(names: &[String]) -> usize {
    let mut keys: Vec<(u32, u64)> = names
        .iter()
        .filter_map(|n| lookup(n))
        .map(pmu_key)
        .collect();
    keys.sort_unstable();
    keys.dedup();
    keys.len()
}

/// One group: its fds (leader first) and where each value goes.
struct Group {
    fds: Vec<i32>,
    slots: Vec<usize>,
}

/// One thread's counters, one group per PMU.
pub(crate) struct ThreadCounters {
    groups: Vec<Group>,
    n: usize,
}

impl ThreadCounters {
    /// Open `events` on the calling thread, one group per PMU; `None` if any fails (that
    /// thread's records then carry no counter values).
    pub(crate) fn open(events: &[(u32, u64)]) -> Option<ThreadCounters> {
        let mut t = ThreadCounters {
            groups: Vec::new(),
            n: events.len(),
        };
        let mut keys: Vec<(u32, u64)> = Vec::new();
        for (slot, ev) in events.iter().enumerate() {
            let key = pmu_key(*ev);
            let g = match keys.iter().position(|k| *k == key) {
                Some(g) => g,
                None => {
                    keys.push(key);
                    t.groups.push(Group {
                        fds: Vec::new(),
                        slots: Vec::new(),
                    });
                    t.groups.len() - 1
                }
            };
            let grp = &mut t.groups[g];
            let leader = grp.fds.first().copied().unwrap_or(-1);
            grp.fds.push(open(*ev, leader).ok()?);
            grp.slots.push(slot);
        }
        (t.n > 0).then_some(t)
    }

    /// Read every counter into `out` (in the order of the events given to
    /// [`open`](Self::open)), one `read(2)` per group. Returns false when a read fails.
    #[inline]
    pub(crate) fn read(&self, out: &mut [u64; MAX_COUNTERS]) -> bool {
        for g in &self.groups {
            // PERF_FORMAT_GROUP without times: { u64 nr; u64 values[nr]; }
            let mut buf = [0u64; MAX_COUNTERS + 1];
            // SAFETY: buf is writable for its whole size.
            let n = unsafe {
                libc::read(
                    g.fds[0],
                    buf.as_mut_ptr().cast(),
                    std::mem::size_of_val(&buf),
                )
            };
            let nr = g.fds.len();
            if n < ((nr + 1) * 8) as isize || buf[0] as usize != nr {
                return false;
            }
            for (k, &slot) in g.slots.iter().enumerate() {
                out[slot] = buf[1 + k];
            }
        }
        true
    }

    /// Number of counters.
    pub(crate) fn len(&self) -> usize {
        self.n
    }
}

impl Drop for ThreadCounters {
    fn drop(&mut self) {
        for g in &self.groups {
            for &fd in g.fds.iter().rev() {
                // SAFETY: the fds are ours and closed once.
                unsafe { libc::close(fd) };
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn software_group_counts_page_faults_of_this_thread() {
        let evs = [
            lookup("task-clock").unwrap(),
            lookup("page-faults").unwrap(),
            lookup("minor-faults").unwrap(),
        ];
        let Some(c) = ThreadCounters::open(&evs) else {
            println!("skipped: perf_event_open is not permitted here");
            return;
        };
        let mut a = [0u64; MAX_COUNTERS];
        let mut b = [0u64; MAX_COUNTERS];
        assert!(c.read(&mut a));
        // Touch 256 fresh anonymous pages (mmap: malloc may reuse memory already faulted
        // in): at least one fault per page.
        let pages = 256;
        let len = pages * 4096;
        // SAFETY: a private anonymous mapping of `len` bytes, written within bounds and
        // unmapped below.
        unsafe {
            let p = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            );
            assert_ne!(p, libc::MAP_FAILED);
            for i in 0..pages {
                p.cast::<u8>().add(i * 4096).write_volatile(1);
            }
            assert!(c.read(&mut b));
            libc::munmap(p, len);
        }
        assert!(b[0] > a[0], "task-clock advances");
        assert!(
            b[1] - a[1] >= pages as u64,
            "page faults {} for {pages} pages (before {a:?}, after {b:?})",
            b[1] - a[1]
        );
        // page-faults and minor-faults share a group: one read, the same instant; they
        // differ only by major faults (pages read from disk), few here.
        let (pf, minor) = (b[1] - a[1], b[2] - a[2]);
        assert!(
            pf >= minor && pf - minor <= 10,
            "{pf} faults, {minor} minor"
        );
        assert_eq!((c.len(), c.groups.len()), (3, 2));
        assert!(lookup("no-such-event").is_none());
    }
}
