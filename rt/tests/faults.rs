//! The runtime under faults (exit inside a region, threads never joined, many threads at
//! once) and the Rust API in a child process (the runtime's on/off state is per process).

mod common;

use std::process::Command;

use common::*;
use powerperf_rt::events::{self, Kind};

fn faults_exe(name: &str) -> Option<std::path::PathBuf> {
    if !have("gcc", name) {
        return None;
    }
    let dir = temp_dir(name);
    let exe = dir.join("faults");
    compile_c(&rt_dir().join("examples/c/faults.c"), &exe);
    Some(exe)
}

#[test]
fn exit_inside_a_region_closes_it_with_x_records() {
    let Some(exe) = faults_exe("exit") else {
        return;
    };
    let run = exe.with_file_name("run");
    let st = Command::new(&exe)
        .arg("exit-in-region")
        .env("POWERPERF_RUN_DIR", &run)
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(3));
    let (ev, iv, _) = read_run(&run);
    let x: Vec<_> = ev.iter().filter(|e| e.kind == Kind::ExitClosed).collect();
    assert_eq!(x.len(), 2);
    assert_eq!(x[0].region, "doomed", "innermost closed first");
    let paths: Vec<_> = iv
        .iter()
        .map(|i| (i.path.as_str(), i.closed_by_exit))
        .collect();
    assert_eq!(paths, [("outer", true), ("outer/doomed", true)]);
}

#[test]
fn threads_never_joined_are_written_at_exit() {
    let Some(exe) = faults_exe("unjoined") else {
        return;
    };
    let run = exe.with_file_name("run");
    run_ok(
        Command::new(&exe)
            .args(["unjoined", "4"])
            .env("POWERPERF_RUN_DIR", &run),
    );
    let (ev, iv, st) = read_run(&run);
    assert_eq!(threads(&st, "unjoined/finished-part"), 4);
    assert_eq!(calls(&st, "unjoined/finished-part"), 4);
    assert_eq!(calls(&st, "unjoined/spin"), 4);
    assert_eq!(calls(&st, "unjoined"), 4);
    assert!(iv
        .iter()
        .filter(|i| i.region != "finished-part")
        .all(|i| i.closed_by_exit));
    assert_eq!(ev.iter().filter(|e| e.kind == Kind::ExitClosed).count(), 8);
}

#[test]
fn many_threads_lose_no_events() {
    let Some(exe) = faults_exe("many") else {
        return;
    };
    let run = exe.with_file_name("run");
    // 8 threads x 5000 x 2 pairs = 160000 events: several buffer flushes per thread.
    run_ok(
        Command::new(&exe)
            .args(["many", "8", "5000"])
            .env("POWERPERF_RUN_DIR", &run),
    );
    let (ev, iv, st) = read_run(&run);
    assert_eq!(ev.len(), 8 * 5000 * 4);
    assert_eq!(iv.len(), 8 * 5000 * 2);
    assert_eq!(threads(&st, "hot"), 8);
    assert!(st
        .iter()
        .filter(|s| s.path == "hot/named" || s.path == "hot")
        .all(|s| s.calls == 5000));
    let a = events::analyze(&ev);
    assert_eq!((a.unmatched_ends, a.unterminated), (0, 0));
    // Per thread, times never go back.
    let mut last = std::collections::HashMap::new();
    for e in &ev {
        let t = last.entry(e.tid).or_insert(0);
        assert!(e.t_ns >= *t);
        *t = e.t_ns;
    }
}

#[test]
fn no_op_without_the_env_var() {
    let Some(exe) = faults_exe("noop") else {
        return;
    };
    let dir = exe.parent().unwrap().to_path_buf();
    run_ok(
        Command::new(&exe)
            .args(["many", "2", "1000"])
            .current_dir(&dir)
            .env_remove("POWERPERF_RUN_DIR"),
    );
    let st = Command::new(&exe)
        .arg("exit-in-region")
        .current_dir(&dir)
        .env_remove("POWERPERF_RUN_DIR")
        .status()
        .unwrap();
    assert_eq!(st.code(), Some(3));
    let entries: Vec<_> = std::fs::read_dir(&dir).unwrap().collect();
    assert_eq!(entries.len(), 1, "only the program itself: {entries:?}");
}

/// Child mode: runs only when the parent test sets PP_RT_CHILD.
fn rust_child() {
    use powerperf_rt::{region, Error, Handle};
    let mode = std::env::var("PP_RT_CHILD").unwrap();
    if mode == "off" {
        assert!(!powerperf_rt::enabled());
        let _g = region("x");
        assert_eq!(powerperf_rt::end("never"), Ok(()));
        return;
    }
    assert!(powerperf_rt::enabled());
    let h = Handle::new("kernel");
    {
        let _outer = region("outer");
        for _ in 0..3 {
            let _g = h.enter();
            let _inner = region("inner");
        }
        powerperf_rt::begin("manual").unwrap();
        powerperf_rt::end("manual").unwrap();
    }
    assert_eq!(powerperf_rt::end("never"), Err(Error::NotOpen));
    powerperf_rt::begin("a").unwrap();
    powerperf_rt::begin("b").unwrap();
    assert_eq!(powerperf_rt::end("a"), Err(Error::Nesting));
    assert_eq!(Handle::default().begin(), Err(Error::InvalidHandle));
    std::thread::spawn(|| {
        let _g = region("spawned");
    })
    .join()
    .unwrap();
    powerperf_rt::flush();
    let _left_open = region("left-open"); // guard never dropped before exit
    std::mem::forget(_left_open);
}

#[test]
fn rust_api_in_a_child_process() {
    if std::env::var_os("PP_RT_CHILD").is_some() {
        rust_child();
        return;
    }
    let exe = std::env::current_exe().unwrap();
    let child = |mode: &str, run: Option<&std::path::Path>| {
        let mut c = Command::new(&exe);
        c.args(["--exact", "rust_api_in_a_child_process", "--nocapture"])
            .env("PP_RT_CHILD", mode);
        match run {
            Some(r) => c.env("POWERPERF_RUN_DIR", r),
            None => c.env_remove("POWERPERF_RUN_DIR"),
        };
        run_ok(&mut c);
    };
    let dir = temp_dir("rust");
    child("off", None);
    let run = dir.join("run");
    child("on", Some(&run));
    let (ev, iv, st) = read_run(&run);
    assert_eq!(calls(&st, "outer"), 1);
    assert_eq!(calls(&st, "outer/kernel"), 3);
    assert_eq!(calls(&st, "outer/kernel/inner"), 3);
    assert_eq!(calls(&st, "outer/manual"), 1);
    assert_eq!(calls(&st, "a"), 1);
    assert_eq!(calls(&st, "spawned"), 1);
    assert_eq!(threads(&st, "spawned"), 1);
    let left: Vec<_> = iv.iter().filter(|i| i.region == "left-open").collect();
    assert_eq!(left.len(), 1);
    assert!(left[0].closed_by_exit);
    let a = events::analyze(&ev);
    assert_eq!(a.unmatched_ends, 1, "end(never)");
    assert_eq!(a.unterminated, 1, "b abandoned by end(a)");
}
