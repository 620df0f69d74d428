//! C, Fortran and Python programs mark regions through the cdylib; the reader sees them.

mod common;

use std::process::Command;

use common::*;

#[test]
fn c_example_records_nested_regions_on_threads() {
    if !have("gcc", "c_example") {
        return;
    }
    let dir = temp_dir("c");
    let exe = dir.join("regions");
    compile_c(&rt_dir().join("examples/c/regions.c"), &exe);

    // Without POWERPERF_RUN_DIR: a no-op, nothing written.
    let out = run_ok(Command::new(&exe).env_remove("POWERPERF_RUN_DIR"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("recording=0 misuse_rc=0 rc=0"));

    let run = dir.join("run");
    let out = run_ok(Command::new(&exe).env("POWERPERF_RUN_DIR", &run));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("recording=1 misuse_rc=-2 rc=0"),
        "{out:?}"
    );
    // The runtime writes the binary form (v2) ...
    let bin = std::fs::read_dir(run.join("region_events"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    assert_eq!(bin.extension().unwrap(), "bin");
    assert!(std::fs::read(&bin)
        .unwrap()
        .starts_with(&powerperf_rt::BIN_MAGIC));
    let before = powerperf_rt::events::read_dir(&run).unwrap();
    // ... which `powerperf collect` turns into the text form (v1), record for record.
    let written = powerperf_rt::events::convert_dir(&run).unwrap();
    assert_eq!(written, [bin.with_extension("tsv")]);
    assert!(!bin.exists());
    let text = std::fs::read_to_string(&written[0]).unwrap();
    assert!(text.starts_with("# powerperf-rt region events v1 pid="));
    assert_eq!(powerperf_rt::events::read_dir(&run).unwrap(), before);

    let (events, iv, st) = read_run(&run);
    assert_eq!(calls(&st, "main"), 1);
    assert_eq!(calls(&st, "main/solve"), 1);
    assert_eq!(calls(&st, "main/solve/step"), 10);
    assert_eq!(calls(&st, "main/solve/step/compute"), 10);
    assert_eq!(calls(&st, "worker"), 2);
    assert_eq!(threads(&st, "worker"), 2);
    assert_eq!(calls(&st, "worker/chunk"), 10);
    assert!(iv
        .iter()
        .all(|i| !i.closed_by_exit && i.end_ns >= i.start_ns));
    // The misuse is in the file.
    let a = powerperf_rt::events::analyze(&events);
    assert_eq!((a.unmatched_ends, a.unterminated), (1, 0));
    // Nested time is inside its parent.
    let main = st.iter().find(|s| s.path == "main").unwrap();
    let solve = st.iter().find(|s| s.path == "main/solve").unwrap();
    assert!(solve.incl_ns <= main.incl_ns);
}

#[test]
fn fortran_example_records_regions() {
    if !have("gfortran", "fortran_example") {
        return;
    }
    let dir = temp_dir("fortran");
    let lib = lib_dir();
    let exe = dir.join("regions");
    run_ok(
        Command::new("gfortran")
            .current_dir(&dir)
            .arg("-J")
            .arg(&dir)
            .arg(rt_dir().join("fortran/powerperf.f90"))
            .arg(rt_dir().join("examples/fortran/regions.f90"))
            .arg("-o")
            .arg(&exe)
            .arg("-L")
            .arg(&lib)
            .arg(format!("-Wl,-rpath,{}", lib.display()))
            .arg("-lpowerperf_rt"),
    );
    let out = run_ok(Command::new(&exe).env_remove("POWERPERF_RUN_DIR"));
    assert!(String::from_utf8_lossy(&out.stdout).contains("recording=0 rc=0"));
    let run = dir.join("run");
    let out = run_ok(Command::new(&exe).env("POWERPERF_RUN_DIR", &run));
    assert!(String::from_utf8_lossy(&out.stdout).contains("recording=1 rc=0"));
    let (_, _, st) = read_run(&run);
    assert_eq!(calls(&st, "main"), 1);
    assert_eq!(
        calls(&st, "main/iterate"),
        4,
        "trailing blanks trimmed: {st:?}"
    );
    assert_eq!(calls(&st, "main/iterate/residual"), 4);
    assert_eq!(st.len(), 3, "{st:?}");
}

#[test]
fn python_example_records_regions() {
    if !have("python3", "python_example") {
        return;
    }
    let dir = temp_dir("python");
    let run = dir.join("run");
    let py = |run: Option<&std::path::Path>| {
        let mut c = Command::new("python3");
        c.arg(rt_dir().join("examples/python/regions.py"))
            .env("PYTHONPATH", rt_dir().join("python"))
            .env("POWERPERF_RT_LIB", lib_dir().join("libpowerperf_rt.so"));
        match run {
            Some(r) => c.env("POWERPERF_RUN_DIR", r),
            None => c.env_remove("POWERPERF_RUN_DIR"),
        };
        String::from_utf8_lossy(&run_ok(&mut c).stdout).into_owned()
    };
    assert!(py(None).contains("recording=0 misuse_rc=0"));
    assert!(py(Some(&run)).contains("recording=1 misuse_rc=-2"));
    let (_, _, st) = read_run(&run);
    assert_eq!(calls(&st, "main"), 1);
    assert_eq!(calls(&st, "main/epoch"), 3);
    assert_eq!(calls(&st, "main/epoch/batch"), 12);
    assert_eq!(calls(&st, "loader"), 1);
    let main_tid = st.iter().find(|s| s.path == "main").unwrap().tid;
    let loader_tid = st.iter().find(|s| s.path == "loader").unwrap().tid;
    assert_ne!(main_tid, loader_tid);
}
