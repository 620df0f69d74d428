//! NVTX injection: an unmodified NVTX program (the Python `nvtx` package, a real NVTX v3
//! client) run with `NVTX_INJECTION64_PATH=libpowerperf_rt.so` records its ranges as regions.

mod common;

use std::process::Command;

use common::*;

/// Whether `python3 -c "import nvtx"` works; prints `skipped: <reason>` when not.
fn have_python_nvtx(test: &str) -> bool {
    let out = Command::new("python3").args(["-c", "import nvtx"]).output();
    match out {
        Ok(o) if o.status.success() => true,
        Ok(_) => {
            eprintln!(
                "skipped: {test}: the Python module `nvtx` is not installed (pip install nvtx)"
            );
            false
        }
        Err(e) => {
            eprintln!("skipped: {test}: python3 does not run: {e} (pip install nvtx)");
            false
        }
    }
}

/// Run the example with the injection; `run: None` sets `POWERPERF_RUN_DIR=""` (off) and
/// runs in `cwd`.
fn run_example(run: Option<&std::path::Path>, cwd: &std::path::Path) -> String {
    let mut c = Command::new("python3");
    c.arg(rt_dir().join("examples/python/nvtx_ranges.py"))
        .env(
            "NVTX_INJECTION64_PATH",
            lib_dir().join("libpowerperf_rt.so"),
        )
        .env_remove("PYTHONPATH")
        .current_dir(cwd)
        .env("POWERPERF_RUN_DIR", run.unwrap_or("".as_ref()));
    String::from_utf8_lossy(&run_ok(&mut c).stdout).into_owned()
}

#[test]
fn python_nvtx_ranges_become_regions() {
    if !have_python_nvtx("python_nvtx_ranges_become_regions") {
        return;
    }
    let dir = temp_dir("nvtx-py");
    let run = dir.join("run");
    let out = run_example(Some(&run), &dir);
    assert!(out.contains("nvtx_enabled=1"), "{out}");

    let (events, iv, st) = read_run(&run);
    let a = powerperf_rt::events::analyze(&events);
    assert_eq!((a.unmatched_ends, a.unterminated), (0, 0), "{st:?}");
    assert!(iv
        .iter()
        .all(|i| !i.closed_by_exit && i.end_ns >= i.start_ns));

    // push/pop nesting, annotate (registered strings) and the decorator.
    assert_eq!(calls(&st, "train"), 1, "{st:?}");
    assert_eq!(calls(&st, "train/epoch"), 3);
    assert_eq!(calls(&st, "train/epoch/step"), 12);
    assert_eq!(calls(&st, "train/epoch/step/kernel"), 12);
    // start/end on the same thread, a range without a message, another domain.
    assert_eq!(calls(&st, "train/checkpoint"), 1);
    assert_eq!(calls(&st, "train/(unnamed)"), 1);
    assert_eq!(calls(&st, "train/io"), 1);
    // Two threads, each its own stack, in domain "pool".
    assert_eq!(calls(&st, "worker"), 2);
    assert_eq!(threads(&st, "worker"), 2);
    assert_eq!(calls(&st, "worker/chunk"), 10);
    assert_eq!(threads(&st, "worker/chunk"), 2);
    let main_tid = st.iter().find(|s| s.path == "train").unwrap().tid;
    assert!(st
        .iter()
        .filter(|s| s.path.starts_with("worker"))
        .all(|s| s.tid != main_tid));
    assert_eq!(st.len(), 11, "{st:?}"); // stats are per (thread, path)

    // Nested time is inside its parent.
    let train = st.iter().find(|s| s.path == "train").unwrap();
    let epoch = st.iter().find(|s| s.path == "train/epoch").unwrap();
    assert!(epoch.incl_ns <= train.incl_ns);
}

#[test]
fn python_nvtx_without_run_dir_records_nothing() {
    if !have_python_nvtx("python_nvtx_without_run_dir_records_nothing") {
        return;
    }
    let dir = temp_dir("nvtx-py-off");
    // Recording off: the init returns 0, NVTX unloads the library, the program runs.
    let out = run_example(None, &dir);
    assert!(out.contains("nvtx_enabled="), "{out}");
    assert_eq!(
        std::fs::read_dir(&dir).unwrap().count(),
        0,
        "nothing written"
    );
}

#[test]
fn c_loader_stand_in_exercises_every_range_slot() {
    if !have("gcc", "c_loader_stand_in_exercises_every_range_slot") {
        return;
    }
    let dir = temp_dir("nvtx-c");
    let exe = dir.join("nvtx_client");
    run_ok(
        Command::new("gcc")
            .args(["-O2", "-Wall", "-Wextra", "-Werror", "-pthread"])
            .arg(rt_dir().join("examples/c/nvtx_client.c"))
            .arg("-o")
            .arg(&exe)
            .arg("-ldl"),
    );
    let lib = lib_dir().join("libpowerperf_rt.so");
    let out = run_ok(
        Command::new(&exe)
            .env("NVTX_INJECTION64_PATH", &lib)
            .env("POWERPERF_RUN_DIR", ""),
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout), "init=0\n");

    let run = dir.join("run");
    let out = run_ok(
        Command::new(&exe)
            .env("NVTX_INJECTION64_PATH", &lib)
            .env("POWERPERF_RUN_DIR", &run),
    );
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "init=1\nlevels=3 extra_pop=-1\n"
    );
    let (events, _, st) = read_run(&run);
    assert_eq!(calls(&st, "outer"), 1, "{st:?}");
    assert_eq!(calls(&st, "outer/wide"), 1);
    assert_eq!(calls(&st, "outer/wide/résumé"), 1);
    assert_eq!(calls(&st, "outer/(unnamed)"), 1);
    assert_eq!(calls(&st, "outer/registered"), 1);
    assert_eq!(calls(&st, "outer/registered/started"), 1);
    // "moved" ended on another thread: not recorded; the end of "outer" abandoned it.
    assert_eq!(st.len(), 6, "{st:?}");
    assert!(events.iter().any(|e| e.region == "moved"));
    let a = powerperf_rt::events::analyze(&events);
    assert_eq!(a.unmatched_ends, 0);
}

// ---- The other direction: powerperf-rt markers as NVTX ranges (src/nvtx_emit.rs) ----

/// Build the test NVTX tool (`tests/fixtures/nvtx-tool/record_tool.c`) and the C example.
fn build_tool_and_example(dir: &std::path::Path) -> (std::path::PathBuf, std::path::PathBuf) {
    let tool = dir.join("librecord_tool.so");
    run_ok(
        Command::new("gcc")
            .args([
                "-shared", "-fPIC", "-O2", "-Wall", "-Wextra", "-Werror", "-pthread",
            ])
            .arg(rt_dir().join("tests/fixtures/nvtx-tool/record_tool.c"))
            .arg("-o")
            .arg(&tool),
    );
    let exe = dir.join("regions");
    compile_c(&rt_dir().join("examples/c/regions.c"), &exe);
    (tool, exe)
}

/// Calls per (thread-independent) path from the tool's log, and whether every thread's
/// pushes were all popped.
fn nvtx_log_paths(log: &str) -> (std::collections::BTreeMap<String, u64>, bool) {
    let mut stacks: std::collections::HashMap<&str, Vec<&str>> = Default::default();
    let mut calls = std::collections::BTreeMap::new();
    for line in log.lines() {
        let mut f = line.splitn(3, ' ');
        let (tid, op, arg) = (f.next().unwrap(), f.next().unwrap(), f.next().unwrap_or(""));
        let s = stacks.entry(tid).or_default();
        match op {
            "push" => {
                s.push(arg);
                *calls.entry(s.join("/")).or_insert(0) += 1;
            }
            "pop" => {
                s.pop().expect("pop without push");
                assert_eq!(arg, s.len().to_string(), "{line}");
            }
            _ => assert!(op == "init", "{line}"),
        }
    }
    (calls, stacks.values().all(|s| s.is_empty()))
}

const C_EXAMPLE_PATHS: [(&str, u64); 6] = [
    ("main", 1),
    ("main/solve", 1),
    ("main/solve/step", 10),
    ("main/solve/step/compute", 10),
    ("worker", 2),
    ("worker/chunk", 10),
];

#[test]
fn c_markers_open_nvtx_ranges_in_an_injected_tool() {
    if !have("gcc", "c_markers_open_nvtx_ranges_in_an_injected_tool") {
        return;
    }
    let dir = temp_dir("nvtx-emit");
    let (tool, exe) = build_tool_and_example(&dir);
    for recording in [false, true] {
        let log = dir.join(format!("nvtx-{recording}.log"));
        let run = dir.join(format!("run-{recording}"));
        let mut c = Command::new(&exe);
        c.env("NVTX_INJECTION64_PATH", &tool)
            .env("PP_TEST_NVTX_LOG", &log)
            .env_remove("POWERPERF_RUN_DIR");
        if recording {
            c.env("POWERPERF_RUN_DIR", &run);
        }
        let out = run_ok(&mut c);
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(
            stdout.starts_with(&format!("recording={}", u8::from(recording))),
            "{stdout}"
        );
        let text = std::fs::read_to_string(&log).unwrap();
        // One NVTX instance (the runtime's), initialised once; CORE has 16 slots.
        assert_eq!(text.matches(" init core_size=16").count(), 1, "{text}");
        let (nvtx_calls, balanced) = nvtx_log_paths(&text);
        assert!(balanced, "{text}");
        let want: std::collections::BTreeMap<String, u64> = C_EXAMPLE_PATHS
            .iter()
            .map(|&(p, n)| (p.to_string(), n))
            .collect();
        // The handle region ("compute") is named too; the end of "never-begun" pops nothing.
        assert_eq!(nvtx_calls, want, "{text}");
        if recording {
            // Recorded once by the runtime as well: forwarding does not feed it back.
            let (_, _, st) = read_run(&run);
            for (path, n) in C_EXAMPLE_PATHS {
                assert_eq!(calls(&st, path), n, "{path}: {st:?}");
            }
        } else {
            assert!(!run.exists());
        }
    }
}

#[test]
fn markers_are_not_forwarded_to_powerperf_rt_itself() {
    if !have("gcc", "markers_are_not_forwarded_to_powerperf_rt_itself") {
        return;
    }
    // What `powerperf collect` sets: NVTX_INJECTION64_PATH names libpowerperf_rt.so, to
    // record the program's own NVTX ranges. Forwarding the markers there would record
    // every region twice.
    let dir = temp_dir("nvtx-emit-own");
    let (_, exe) = build_tool_and_example(&dir);
    let run = dir.join("run");
    let log = dir.join("nvtx.log");
    run_ok(
        Command::new(&exe)
            .env(
                "NVTX_INJECTION64_PATH",
                lib_dir().join("libpowerperf_rt.so"),
            )
            .env("PP_TEST_NVTX_LOG", &log)
            .env("POWERPERF_RUN_DIR", &run),
    );
    let (events, _, st) = read_run(&run);
    for (path, n) in C_EXAMPLE_PATHS {
        assert_eq!(calls(&st, path), n, "{path}: {st:?}");
    }
    let a = powerperf_rt::events::analyze(&events);
    // Only the example's deliberate misuse (the end of "never-begun").
    assert_eq!((a.unmatched_ends, a.unterminated), (1, 0));
    assert!(!log.exists());
}
