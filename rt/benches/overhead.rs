//! Overhead of powerperf-rt region markers, measured in one run:
//!
//!   cargo bench -p powerperf-rt --bench overhead
//!
//! Prints ns per `clock_gettime(CLOCK_MONOTONIC)`, per begin/end pair by name and by
//! handle (C ABI and Rust guard) with recording on, and per pair with recording off
//! (measured in a child process started without POWERPERF_RUN_DIR: the on/off state is
//! fixed per process). Each figure is the median over repeats of a loop timed on the
//! thread's CPU time (CLOCK_THREAD_CPUTIME_ID: user and system time, so the writes of the
//! events file count, and time other tasks of a shared machine take does not); the repeats
//! of the different figures are interleaved.
//! Target (issue 4 item 8): a handle pair <= 2 x the cost of two clock reads.

use std::ffi::CStr;
use std::hint::black_box;
use std::process::Command;

use powerperf_rt::ffi::{
    pp_region_begin, pp_region_begin_h, pp_region_end, pp_region_end_h, pp_region_handle,
};

const ITERS: u32 = 200_000;
const REPEATS: usize = 21;

/// CPU time of the calling thread (user + system), ns: on a shared machine the time other
/// tasks take from this thread is left out, as in the microbench crate; the writes of the
/// events file are system time of this thread and stay in.
fn thread_cpu_ns() -> u64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

thread_local! {
    /// Wall-clock ns per iteration of every `per_iter` call on this thread, in call order.
    static WALL: std::cell::RefCell<Vec<f64>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Thread CPU ns per iteration of `f`; the wall-clock figure goes to `WALL`.
fn per_iter(f: impl Fn()) -> f64 {
    let w = std::time::Instant::now();
    let t = thread_cpu_ns();
    for _ in 0..ITERS {
        f();
    }
    let cpu = (thread_cpu_ns() - t) as f64 / f64::from(ITERS);
    let wall = w.elapsed().as_nanos() as f64 / f64::from(ITERS);
    WALL.with(|v| v.borrow_mut().push(wall));
    cpu
}

/// Medians of the wall-clock figures of the last `pairs()` call: (clock read, handle pair).
fn wall_medians() -> (f64, f64) {
    WALL.with(|v| {
        let v = v.borrow();
        // pairs() calls per_iter 4 times a repeat: clock, name pair, handle pair, guard.
        let col = |k: usize| median(v.iter().skip(k).step_by(4).copied().collect());
        (col(0), col(2))
    })
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn clock_read() {
    black_box(powerperf_rt::now_ns());
}

/// (clock read, name pair, handle pair, rust guard pair) medians, repeats interleaved.
fn pairs() -> [f64; 4] {
    let name: &CStr = c"bench-by-name";
    // SAFETY: NUL-terminated literal.
    let h = unsafe { pp_region_handle(c"bench-by-handle".as_ptr()) };
    let rh = powerperf_rt::Handle::new("bench-guard");
    let mut r = [Vec::new(), Vec::new(), Vec::new(), Vec::new()];
    for _ in 0..REPEATS {
        r[3].push(per_iter(clock_read));
        r[0].push(per_iter(|| unsafe {
            // SAFETY: NUL-terminated literal.
            black_box(pp_region_begin(black_box(name.as_ptr())));
            black_box(pp_region_end(black_box(name.as_ptr())));
        }));
        r[1].push(per_iter(|| {
            black_box(pp_region_begin_h(black_box(h)));
            black_box(pp_region_end_h(black_box(h)));
        }));
        r[2].push(per_iter(|| {
            let _g = black_box(rh).enter();
        }));
    }
    let [n, h, g, c] = r.map(median);
    [c, n, h, g]
}

fn main() {
    if std::env::args().any(|a| a == "--child-off") {
        assert!(!powerperf_rt::enabled());
        let [_, n, h, g] = pairs();
        println!("{n} {h} {g}");
        return;
    }
    if std::env::args().any(|a| a == "--child-counters") {
        assert!(powerperf_rt::enabled());
        let [_, _, h, _] = pairs();
        powerperf_rt::flush();
        println!("{h}");
        return;
    }
    if std::env::args().any(|a| a == "--list") {
        return; // `cargo bench -- --list` / `cargo test --benches` probe
    }
    let exe = std::env::current_exe().unwrap();
    let off = Command::new(&exe)
        .arg("--child-off")
        .env_remove(powerperf_rt::ENV_RUN_DIR)
        .output()
        .expect("start the recording-off child");
    assert!(off.status.success(), "{off:?}");
    let off: Vec<f64> = String::from_utf8_lossy(&off.stdout)
        .split_whitespace()
        .map(|s| s.parse().unwrap())
        .collect();

    // Recording with counters read at every begin and end (POWERPERF_RT_COUNTERS): in a
    // child too, the runtime reads its environment once.
    let ctr_run = std::env::temp_dir().join(format!("pp-rt-bench-ctr-{}", std::process::id()));
    let ctr = Command::new(&exe)
        .arg("--child-counters")
        .env(powerperf_rt::ENV_RUN_DIR, &ctr_run)
        .env(
            powerperf_rt::counters::ENV_COUNTERS,
            "instructions,cycles,page-faults,context-switches",
        )
        .output()
        .expect("start the counters child");
    assert!(ctr.status.success(), "{ctr:?}");
    let with_counters: f64 = String::from_utf8_lossy(&ctr.stdout).trim().parse().unwrap();
    let counter_names = powerperf_rt::events::read_dir_report(&ctr_run)
        .map(|r| r.counter_names)
        .unwrap_or_default();
    let _ = std::fs::remove_dir_all(&ctr_run);

    let run = std::env::temp_dir().join(format!("pp-rt-bench-{}", std::process::id()));
    // SAFETY (edition 2021: safe fn): single-threaded, before the runtime reads it.
    std::env::set_var(powerperf_rt::ENV_RUN_DIR, &run);
    assert!(
        powerperf_rt::enabled(),
        "recording must be on in the parent"
    );
    WALL.with(|v| v.borrow_mut().clear());
    let [clock, by_name, by_handle, guard] = pairs();
    let (wall_clock, wall_handle) = wall_medians();
    powerperf_rt::flush();
    let _ = std::fs::remove_dir_all(&run);

    let two = 2.0 * clock;
    println!("powerperf-rt overhead ({ITERS} iterations x {REPEATS} repeats, median)");
    println!("{:<44} {:>9} {:>16}", "operation", "ns", "x 2 clock reads");
    let row = |what: &str, ns: f64| println!("{what:<44} {ns:>9.1} {:>16.2}", ns / two);
    row("clock_gettime(CLOCK_MONOTONIC)", clock);
    row("begin/end pair by name (C ABI)", by_name);
    row("begin/end pair by handle (C ABI)", by_handle);
    row("begin/end pair, Rust Handle::enter guard", guard);
    row(
        &format!("handle pair + counters ({})", counter_names.join(",")),
        with_counters,
    );
    println!(
        "{:<44} {wall_clock:>9.1} {:>16.2}   (wall clock, same loops)",
        "clock_gettime, wall clock",
        wall_clock / (2.0 * wall_clock)
    );
    println!(
        "{:<44} {wall_handle:>9.1} {:>16.2}   (wall clock, same loops)",
        "begin/end pair by handle, wall clock",
        wall_handle / (2.0 * wall_clock)
    );
    row("no-op pair by name (env var unset)", off[0]);
    row("no-op pair by handle (env var unset)", off[1]);
    row("no-op Rust guard (env var unset)", off[2]);
    let verdict = if by_handle <= 2.0 * two {
        "met"
    } else {
        "NOT met"
    };
    println!(
        "target: handle pair <= 2 x two clock reads = {:.1} ns: {verdict} ({:.2}x)",
        2.0 * two,
        by_handle / two
    );
    let groups = powerperf_rt::counters::groups_of(&counter_names).max(1);
    let read = (with_counters - by_handle) / 2.0 / groups as f64;
    println!(
        "target: one counter read (read(2) of a group of {} counters in {groups} group(s), at a begin or an end) <= 1500 ns: {} ({read:.1} ns)",
        counter_names.len(),
        if read <= 1500.0 { "met" } else { "NOT met" }
    );
}
