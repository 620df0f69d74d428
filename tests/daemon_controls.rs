//! powerperfd's uncore, GPU and power controls (issue 22, items 2–4; docs/cluster.md), end
//! to end as root: `cpu.uncore_freq` on a copy of `tests/fixtures/sysfs/intel-uncore`,
//! `gpu.locked_clocks` and `gpu.power_limit` on the fake GPUs of `tests/fixtures/fake-gpu`
//! (`powerperfd --fake-gpu`; no GPU is touched), and `read_power` (the perf power PMU and
//! NVML: the policy, and the refusal naming what is missing where neither is present).
//! Clients are `powerperfd request` as uid 65534 and 65533 through setpriv. Tests print
//! `skipped: …` when not root.

mod common;

use common::daemon::{as_uid, kill_group, World, OTHER};
use common::NOBODY;
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Stdio};

const UNCORE: &str = "sys/devices/system/cpu/intel_uncore_frequency";

const GRANT: &str = r#"
[[grant]]
name = "uncore-users"
users = ["nobody", "65533"]
write = ["cpu.uncore_freq"]
[grant.ranges]
"cpu.uncore_freq" = [1200, 2000]

[[grant]]
name = "gpu-users"
users = ["nobody", "65533"]
read = ["power"]
write = ["gpu.locked_clocks", "gpu.power_limit"]
[grant.ranges]
"gpu.locked_clocks" = [900, 1500]
"gpu.power_limit" = [300, 500]

[[grant]]
name = "wide-uncore"
users = ["4242"]
write = ["cpu.uncore_freq"]
"#;

fn uncore(w: &World, dom: &str, f: &str) -> String {
    std::fs::read_to_string(w.root.join(UNCORE).join(dom).join(f))
        .unwrap()
        .trim()
        .to_string()
}

fn gpu_file(w: &World, f: &str) -> String {
    std::fs::read_to_string(w.dir.path().join("gpu/gpu0").join(f))
        .unwrap()
        .trim()
        .to_string()
}

fn uncore_original(w: &World) {
    for d in ["package_00_die_00", "package_01_die_00"] {
        assert_eq!(uncore(w, d, "min_freq_khz"), "800000", "{d}");
        assert_eq!(uncore(w, d, "max_freq_khz"), "2400000", "{d}");
    }
}

fn gpu_original(w: &World) {
    assert_eq!(gpu_file(w, "locked_clocks_mhz"), "none");
    assert_eq!(gpu_file(w, "power_limit_w"), "700");
}

/// `powerperfd request --hold REQ...` as `uid`, in its own process group: the session
/// lives until it is killed.
fn hold(w: &World, uid: u32, reqs: &[&str]) -> Child {
    let mut c = as_uid(uid, &w.daemon_bin);
    c.arg("request")
        .arg("--socket")
        .arg(&w.socket)
        .arg("--hold")
        .args(reqs)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c.spawn().unwrap()
}

fn out(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

#[test]
fn uncore_frequency_granted_refused_held_and_restored_after_client_and_daemon_sigkill() {
    let Some(mut w) = World::new("daemon cpu.uncore_freq", GRANT) else {
        return;
    };
    w.start();
    uncore_original(&w);
    // inside the hardware's 800..2400 MHz but outside the grant: refused naming the grant
    let o = w.request(NOBODY, &[r#"{"op":"set_uncore_freq","mhz":2200}"#]);
    let t = out(&o);
    assert!(
        !o.status.success()
            && t.contains("may not set `cpu.uncore_freq` = 2200 MHz")
            && t.contains("grant `uncore-users` (users nobody, 65533) allows [1200, 2000] MHz")
            // grants of other users are not named, and an uncore domain is no CPU (issue 38)
            && !t.contains("wide-uncore")
            && !t.contains("CPUs []"),
        "{t}"
    );
    // a user without a grant
    let o = w.request(4243, &[r#"{"op":"set_uncore_freq","mhz":1800}"#]);
    assert!(
        out(&o).contains("uid 4243 may not set `cpu.uncore_freq`"),
        "{}",
        out(&o)
    );
    // not a domain, not on the 100 MHz step: refused, nothing written
    for (req, want) in [
        (
            r#"{"op":"set_uncore_freq","mhz":1800,"domains":["../cpu0"]}"#,
            "not an uncore domain",
        ),
        (r#"{"op":"set_uncore_freq","mhz":1850}"#, "multiple of 100"),
    ] {
        let o = w.request(NOBODY, &[req]);
        assert!(out(&o).contains(want), "{req}: {}", out(&o));
    }
    uncore_original(&w);
    // granted: package 1 pinned at 1800 MHz while the session lives
    let mut c = hold(
        &w,
        NOBODY,
        &[r#"{"op":"set_uncore_freq","mhz":1800,"domains":["package_01_die_00"]}"#],
    );
    w.wait_for("the uncore setting", || {
        uncore(&w, "package_01_die_00", "min_freq_khz") == "1800000"
            && uncore(&w, "package_01_die_00", "max_freq_khz") == "1800000"
    });
    assert_eq!(uncore(&w, "package_00_die_00", "max_freq_khz"), "2400000");
    // another session may not set the held domain, but may set the other one
    let o = w.request(OTHER, &[r#"{"op":"set_uncore_freq","mhz":1200}"#]);
    assert!(
        out(&o).contains("uncore package_01_die_00 is held by session")
            && out(&o).contains("uncore 1800 MHz"),
        "{}",
        out(&o)
    );
    assert_eq!(uncore(&w, "package_00_die_00", "min_freq_khz"), "800000");
    // SIGKILL the client: put back
    // SAFETY: kill(2) on a child of this test.
    unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
    let took = w.wait_for("the uncore restore after SIGKILL", || {
        uncore(&w, "package_01_die_00", "min_freq_khz") == "800000"
            && uncore(&w, "package_01_die_00", "max_freq_khz") == "2400000"
    });
    kill_group(&mut c);
    uncore_original(&w);
    println!(
        "uncore restored {:.2} ms after the client's SIGKILL",
        took.as_secs_f64() * 1e3
    );
    // the daemon SIGKILLed while a session holds both packages: the restart restores
    let mut c = hold(&w, NOBODY, &[r#"{"op":"set_uncore_freq","mhz":1200}"#]);
    w.wait_for("the uncore setting", || {
        uncore(&w, "package_00_die_00", "max_freq_khz") == "1200000"
            && uncore(&w, "package_01_die_00", "max_freq_khz") == "1200000"
    });
    w.kill_daemon();
    assert_eq!(uncore(&w, "package_00_die_00", "min_freq_khz"), "1200000");
    let journal = std::fs::read_to_string(w.state.join("powerperfd-journal.jsonl")).unwrap();
    assert!(
        journal.contains(r#""control":"cpu.uncore_freq""#),
        "{journal}"
    );
    w.start();
    uncore_original(&w);
    kill_group(&mut c);
}

#[test]
fn without_the_uncore_driver_the_refusal_names_what_is_missing() {
    let Some(mut w) = World::new("daemon cpu.uncore_freq absent", GRANT) else {
        return;
    };
    std::fs::remove_dir_all(w.root.join(UNCORE)).unwrap();
    w.start();
    let o = w.request(NOBODY, &[r#"{"op":"set_uncore_freq","mhz":1800}"#]);
    let t = out(&o);
    assert!(
        !o.status.success()
            && t.contains("no uncore frequency control on this machine")
            && t.contains("intel_uncore_frequency does not exist")
            && t.contains("modprobe intel-uncore-frequency"),
        "{t}"
    );
    // the core frequency still works as before on the same node
    w.assert_original();
}

#[test]
fn gpu_locked_clocks_and_power_limit_on_the_fake_gpu_granted_refused_and_restored() {
    let Some(mut w) = World::new("daemon gpu controls", GRANT) else {
        return;
    };
    w.start();
    gpu_original(&w);
    for (uid, req, want) in [
        // no grant
        (
            4243,
            r#"{"op":"set_gpu_power_limit","gpu":0,"watts":400}"#,
            "uid 4243 may not set `gpu.power_limit` = 400 W",
        ),
        // outside the grant (inside the GPU's 200..700 W)
        (
            NOBODY,
            r#"{"op":"set_gpu_power_limit","gpu":0,"watts":600}"#,
            "grant `gpu-users` (users nobody, 65533) allows [300, 500] W",
        ),
        (
            NOBODY,
            r#"{"op":"set_gpu_locked_clocks","gpu":0,"min_mhz":345}"#,
            "allows [900, 1500] MHz",
        ),
        // no such GPU, min above max, not a number
        (
            NOBODY,
            r#"{"op":"set_gpu_locked_clocks","gpu":3,"min_mhz":1200}"#,
            "GPU 3 does not exist",
        ),
        (
            NOBODY,
            r#"{"op":"set_gpu_locked_clocks","gpu":0,"min_mhz":1400,"max_mhz":1000}"#,
            "min_mhz is above max_mhz",
        ),
        (
            NOBODY,
            r#"{"op":"set_gpu_power_limit","gpu":0,"watts":-5}"#,
            "is not a number in (0, 1e6]",
        ),
    ] {
        let o = w.request(uid, &[req]);
        assert!(
            !o.status.success() && out(&o).contains(want),
            "{req}: {}",
            out(&o)
        );
    }
    gpu_original(&w);
    // granted: both controls in one session
    let mut c = hold(
        &w,
        NOBODY,
        &[
            r#"{"op":"set_gpu_locked_clocks","gpu":0,"min_mhz":1200,"max_mhz":1500}"#,
            r#"{"op":"set_gpu_power_limit","gpu":0,"watts":400}"#,
        ],
    );
    w.wait_for("the GPU settings", || {
        gpu_file(&w, "locked_clocks_mhz") == "1200 1500" && gpu_file(&w, "power_limit_w") == "400"
    });
    // the GPU is held: another user's session is refused
    let o = w.request(
        OTHER,
        &[r#"{"op":"set_gpu_power_limit","gpu":0,"watts":300}"#],
    );
    assert!(out(&o).contains("GPU 0 is held by session"), "{}", out(&o));
    // SIGKILL: locked clocks reset, power limit back to 700 W
    // SAFETY: kill(2) on a child of this test.
    unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
    let took = w.wait_for("the GPU restore after SIGKILL", || {
        gpu_file(&w, "locked_clocks_mhz") == "none" && gpu_file(&w, "power_limit_w") == "700"
    });
    kill_group(&mut c);
    println!(
        "GPU settings restored {:.2} ms after the client's SIGKILL",
        took.as_secs_f64() * 1e3
    );
    // the daemon SIGKILLed and restarted: restored from the journal
    let mut c = hold(
        &w,
        NOBODY,
        &[r#"{"op":"set_gpu_power_limit","gpu":0,"watts":350}"#],
    );
    w.wait_for("the power limit", || gpu_file(&w, "power_limit_w") == "350");
    w.kill_daemon();
    let journal = std::fs::read_to_string(w.state.join("powerperfd-journal.jsonl")).unwrap();
    assert!(
        journal.contains(r#""control":"gpu.power_limit""#)
            && journal.contains(r#""power_limit_w":700"#),
        "{journal}"
    );
    w.start();
    gpu_original(&w);
    kill_group(&mut c);
}

#[test]
fn power_reads_follow_the_policy_and_name_what_is_missing() {
    let Some(mut w) = World::new("daemon read_power", GRANT) else {
        return;
    };
    // the perf power PMU described by the fixture tree (its events parsed by the daemon)
    common::copy_tree(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/power-pmu"),
        &w.root,
    );
    w.start();
    // no grant for `power` (only `energy` is everyone's): refused; the grant of other users
    // that allows it is not named (issue 38)
    let o = w.request(4243, &[r#"{"op":"read_power"}"#]);
    assert!(
        out(&o).contains("uid 4243 may not read `power`")
            && !out(&o).contains("gpu-users")
            && out(&o).contains("no grant of this user allows it"),
        "{}",
        out(&o)
    );
    // granted: the fake GPU's readings (the files power_w and energy_mj of --fake-gpu, the
    // GPUs the controls act on), the perf power PMU's where this kernel has it, else its
    // reasons per event in the notes
    let o = w.request(NOBODY, &[r#"{"op":"read_power"}"#]);
    let t = out(&o);
    assert!(o.status.success(), "{t}");
    let v: serde_json::Value = serde_json::from_str(t.lines().next().unwrap()).unwrap();
    let power = v["power"].as_array().unwrap();
    for r in power {
        println!(
            "{} {}: {} J, {} W",
            r["name"], r["source"], r["energy_j"], r["power_w"]
        );
    }
    let gpu: Vec<_> = power.iter().filter(|r| r["origin"] == "nvml").collect();
    assert_eq!(gpu.len(), 1, "{t}");
    assert_eq!(gpu[0]["name"], "gpu-0");
    assert_eq!(gpu[0]["power_w"].as_f64(), Some(250.5), "{t}");
    assert_eq!(gpu[0]["energy_j"].as_f64(), Some(1.0), "{t}");
    assert!(
        gpu[0]["source"].as_str().unwrap().starts_with("fake GPU 0"),
        "{t}"
    );
    if power.iter().all(|r| r["origin"] != "perf_power_pmu") {
        // the daemon parsed the PMU's sysfs description (events, scale, unit, cpumask) and
        // tried each event on its package CPU; this kernel has no such PMU
        let info = v["info"].to_string();
        for ev in [
            "power/energy-pkg/ on CPU 0",
            "power/energy-ram/ on CPU 0",
            "power/energy-psys/ on CPU 0",
        ] {
            assert!(info.contains(ev), "{ev}: {t}");
        }
        println!("skipped: real perf power PMU reads: {info}");
    }
    // without the PMU's directory and without GPUs, the refusal names both missing sources
    w.kill_daemon();
    std::fs::remove_dir_all(w.root.join("sys/bus/event_source/devices/power")).unwrap();
    std::fs::remove_dir_all(w.dir.path().join("gpu/gpu0")).unwrap();
    w.start();
    let o = w.request(NOBODY, &[r#"{"op":"read_power"}"#]);
    let t = out(&o);
    if o.status.success() {
        println!("skipped: the refusal (this node has NVML): {t}");
    } else {
        assert!(
            t.contains("no power readings on this node")
                && t.contains("no perf power PMU")
                && t.contains("event_source/devices/power does not exist")
                && t.contains("fake GPUs")
                && t.contains("no gpu0 directory"),
            "{t}"
        );
    }
}

/// `collect` by a user who may not open the perf power PMU (perf_event_paranoid ≥ 1: the
/// open fails with EACCES) on a node without powercap asks the daemon's `read_power`; here
/// the daemon cannot open the fixture PMU either (this kernel has no such PMU), so run.toml
/// records the daemon's refusal with each event's reason and the run goes on. The success
/// path (a real PMU) ran on the H100 host: docs/gpu-nvml-dryrun/powerperfd-collect-h100.txt.
#[test]
fn collect_asks_the_daemon_for_the_power_pmu_a_user_may_not_open() {
    let paranoid: i32 = std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid")
        .ok()
        .and_then(|t| t.trim().parse().ok())
        .unwrap_or(2);
    if paranoid < 1 {
        println!(
            "skipped: perf_event_paranoid is {paranoid}: uid 65534 may open the power PMU itself"
        );
        return;
    }
    let Some(mut w) = World::new("daemon collect power PMU", GRANT) else {
        return;
    };
    common::copy_tree(
        &PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/power-pmu"),
        &w.root,
    );
    std::fs::remove_dir_all(w.root.join("sys/class/powercap")).unwrap();
    w.start();
    let runs = common::dir_owned_by_nobody(w.dir.path(), "runs");
    let o = as_uid(NOBODY, &w.bin)
        .arg("collect")
        .arg("--daemon")
        .arg(&w.socket)
        .arg("--sysfs-root")
        .arg(&w.root)
        .arg("-o")
        .arg(runs.join("r1"))
        .args(["--", "true"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let meta = std::fs::read_to_string(runs.join("r1/run.toml")).unwrap();
    match meta.find("RAPL (perf power PMU) through powerperfd") {
        Some(i) => {
            let note = &meta[i..meta[i..].find('\n').map_or(meta.len(), |j| i + j)];
            // the daemon answers with the fake GPU's readings and the PMU's reasons
            assert!(
                note.contains("no perf power PMU readings")
                    && note.contains("power/energy-pkg/ on CPU 0"),
                "{note}"
            );
            println!("skipped: the daemon's power PMU read (no such PMU here): {note}");
        }
        None => {
            // a node whose kernel has this PMU: the readings came through the daemon
            assert!(meta.contains("from the perf power PMU"), "{meta}");
        }
    }
    assert!(
        meta.contains("Permission denied") && meta.contains("perf_event_paranoid"),
        "the user's own open was denied: {meta}"
    );
}

const MEM_GRANT: &str = r#"
[[grant]]
name = "gpu-mem"
users = ["nobody"]
write = ["gpu.mem_locked_clocks"]
[grant.ranges]
"gpu.mem_locked_clocks" = [1500, 2000]
"#;

/// Issue 39, item 4: `gpu.mem_locked_clocks` (`nvmlDeviceSetMemoryLockedClocks` on the
/// fake GPU): granted, refused outside the grant, at an unsupported clock (naming the
/// nearest) and where the GPU has no memory-clock lock; reset after the client's SIGKILL.
#[test]
fn gpu_memory_locked_clocks_granted_refused_and_restored() {
    let Some(mut w) = World::new("daemon gpu memory clocks", MEM_GRANT) else {
        return;
    };
    w.start();
    for (uid, req, want) in [
        (
            OTHER,
            r#"{"op":"set_gpu_mem_locked_clocks","gpu":0,"min_mhz":1593}"#,
            "may not set `gpu.mem_locked_clocks`",
        ),
        (
            NOBODY,
            r#"{"op":"set_gpu_mem_locked_clocks","gpu":0,"min_mhz":2619}"#,
            "allows [1500, 2000] MHz",
        ),
        (
            NOBODY,
            r#"{"op":"set_gpu_mem_locked_clocks","gpu":0,"min_mhz":1600}"#,
            "nearest: 1593 MHz",
        ),
    ] {
        let o = w.request(uid, &[req]);
        assert!(
            !o.status.success() && out(&o).contains(want),
            "{req}: {}",
            out(&o)
        );
    }
    assert_eq!(gpu_file(&w, "mem_locked_clocks_mhz"), "none");
    let mut c = hold(
        &w,
        NOBODY,
        &[r#"{"op":"set_gpu_mem_locked_clocks","gpu":0,"min_mhz":1593}"#],
    );
    w.wait_for("the memory clock lock", || {
        gpu_file(&w, "mem_locked_clocks_mhz") == "1593 1593"
    });
    // SAFETY: kill(2) on a child of this test.
    unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
    w.wait_for("the memory clock reset after SIGKILL", || {
        gpu_file(&w, "mem_locked_clocks_mhz") == "none"
    });
    kill_group(&mut c);
    // a GPU without the lock: refused with the reason
    std::fs::remove_file(w.dir.path().join("gpu/gpu0/mem_locked_clocks_mhz")).unwrap();
    let o = w.request(
        NOBODY,
        &[r#"{"op":"set_gpu_mem_locked_clocks","gpu":0,"min_mhz":1593}"#],
    );
    assert!(
        !o.status.success() && out(&o).contains("no memory-clock lock"),
        "{}",
        out(&o)
    );
}

/// `examples/plans/gpu-static.toml` with its region's SM clock at `mhz`, in the test's
/// directory.
fn gpu_plan(w: &World, mhz: f64) -> PathBuf {
    let text = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/plans/gpu-static.toml"),
    )
    .unwrap()
    .replace(
        "[region.setting]\ncore_freq_mhz = 1200.0",
        &format!("[region.setting]\ncore_freq_mhz = {mhz:.1}"),
    );
    let p = w.dir.path().join(format!("gpu-plan-{mhz}.toml"));
    std::fs::write(&p, text).unwrap();
    p
}

#[test]
fn a_users_apply_of_a_gpu_plan_goes_through_powerperfd_and_is_restored() {
    // issue 39, item 4/5 for a user who is not root: `powerperf apply` of a static GPU plan
    // asks powerperfd (its gpu.locked_clocks grant) instead of only printing the NVML calls
    let Some(mut w) = World::new("apply of a GPU plan through powerperfd", GRANT) else {
        return;
    };
    w.start();
    gpu_original(&w);
    let out_dir = common::dir_owned_by_nobody(w.dir.path(), "out");
    let seen = out_dir.join("seen");
    let locked = w.dir.path().join("gpu/gpu0/locked_clocks_mhz");
    let script = format!("cat {} > {}", locked.display(), seen.display());
    let apply = |mhz: f64| {
        as_uid(NOBODY, &w.bin)
            .arg("apply")
            .arg("--daemon")
            .arg(&w.socket)
            .arg("--plan")
            .arg(gpu_plan(&w, mhz))
            .args(["--", "sh", "-c", &script])
            .env_remove("POWERPERF_RUN_DIR")
            .output()
            .unwrap()
    };
    let o = apply(1200.0);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}\ndaemon log:\n{}", w.log_text());
    assert!(
        err.contains("GPU 0 SM clock locked at 1200..1200 MHz set through powerperfd"),
        "{err}"
    );
    // the command ran at the planned clock, written by the daemon; put back afterwards
    assert_eq!(std::fs::read_to_string(&seen).unwrap().trim(), "1200 1200");
    gpu_original(&w);
    // outside the grant ([900, 1500]): refused, nothing set, the command does not run
    std::fs::remove_file(&seen).unwrap();
    let o = apply(1980.0);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("allows [900, 1500] MHz") && err.contains("the command did not run"),
        "{err}"
    );
    assert!(!seen.exists(), "the command ran");
    gpu_original(&w);
}

/// `powerperf sweep --gpu-clock …` as uid 65534 through powerperfd (`--daemon`; the runs
/// read the daemon's fake GPU, `--fake-gpu`), writing `SET` under a directory of nobody's.
fn user_sweep(w: &World, set: &str, clocks: &str, script: &str) -> std::process::Command {
    use std::os::unix::fs::PermissionsExt as _;
    let out = common::dir_owned_by_nobody(w.dir.path(), "sweeps");
    // the state directory (restore record, switch log) must be the user's, 0700
    let state = common::dir_owned_by_nobody(w.dir.path(), "state-nobody");
    std::fs::set_permissions(&state, std::fs::Permissions::from_mode(0o700)).unwrap();
    let mut c = as_uid(NOBODY, &w.bin);
    c.arg("sweep")
        .arg("-o")
        .arg(out.join(set))
        .arg("--daemon")
        .arg(&w.socket)
        .arg("--fake-gpu")
        .arg(w.dir.path().join("gpu"))
        .arg("--state-dir")
        .arg(&state)
        .args(["--gpu-clock", clocks, "--", "sh", "-c", script])
        .env_remove("POWERPERF_RUN_DIR");
    c
}

/// Issue 39: a user's `sweep` of GPU clocks goes through powerperfd's gpu.locked_clocks
/// grant: every point checked before anything changes (a clock outside the grant is
/// refused, no run made, the GPU untouched), each point set by the daemon and seen by the
/// command, the observed clock recorded, the GPU put back at the end, after SIGTERM and
/// after the sweep's SIGKILL (the daemon's session restore).
#[test]
fn a_users_gpu_sweep_goes_through_powerperfd_and_is_restored() {
    let Some(mut w) = World::new("sweep of GPU clocks through powerperfd", GRANT) else {
        return;
    };
    w.start();
    gpu_original(&w);
    let locked = w.dir.path().join("gpu/gpu0/locked_clocks_mhz");
    let seen = common::dir_owned_by_nobody(w.dir.path(), "seen").join("seen");
    let script = format!("cat {} >> {}", locked.display(), seen.display());
    let o = user_sweep(&w, "set", "990,1200", &script).output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}\ndaemon log:\n{}", w.log_text());
    assert!(
        err.contains("2 GPU setting(s) allowed by powerperfd at"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "990 990\n1200 1200\n"
    );
    gpu_original(&w);
    let set = w.dir.path().join("sweeps/set");
    for (run, mhz) in [("g990", 990.0), ("g1200", 1200.0)] {
        let dir = set.join("runs").join(format!("f-_t-_r0_{run}"));
        let meta: toml::Value =
            toml::from_str(&std::fs::read_to_string(dir.join("run.toml")).unwrap()).unwrap();
        let g = &meta["gpu_setting"];
        assert_eq!(g["requested_sm_clock_mhz"].as_float(), Some(mhz), "{g}");
        assert_eq!(g["observed_sm_clock_mhz"].as_float(), Some(mhz), "{g}");
        assert!(g.get("flag").is_none(), "{g}");
    }
    let sweep = std::fs::read_to_string(set.join("sweep.toml")).unwrap();
    assert!(!sweep.contains("off_setting"), "{sweep}");
    // outside the grant ([900, 1500]): refused before anything changed, no run made
    std::fs::remove_file(&seen).unwrap();
    let o = user_sweep(&w, "set2", "1200,1980", &script)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("allows [900, 1500] MHz") && err.contains("before anything was changed"),
        "{err}"
    );
    assert!(!seen.exists(), "a run was made");
    assert!(!w.dir.path().join("sweeps/set2/runs").exists());
    gpu_original(&w);
    // a crashing command (SIGSEGV): the clock put back by the daemon at the end
    let o = user_sweep(&w, "set5", "1200", "kill -SEGV $$")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(
        err.contains("status 139") && err.contains("restored: nvmlDeviceResetGpuLockedClocks"),
        "{err}"
    );
    gpu_original(&w);
    // SIGTERM during a run, then SIGKILL: the clock is put back each time
    for (sig, set) in [(libc::SIGTERM, "set3"), (libc::SIGKILL, "set4")] {
        let started = seen.with_file_name(format!("started-{set}"));
        let script = format!("touch {}; exec sleep 30", started.display());
        let mut c = user_sweep(&w, set, "1200", &script)
            .process_group(0)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        w.wait_for("the sweep's command", || started.exists());
        assert_eq!(
            std::fs::read_to_string(&locked).unwrap().trim(),
            "1200 1200"
        );
        // SAFETY: kill(2) on a child of this test (setpriv execs powerperf in place).
        unsafe { libc::kill(c.id() as i32, sig) };
        w.wait_for("the clock put back", || {
            std::fs::read_to_string(&locked).unwrap().trim() == "none"
        });
        if sig == libc::SIGTERM {
            assert_eq!(c.wait().unwrap().code(), Some(128 + sig));
        }
        kill_group(&mut c);
        gpu_original(&w);
    }
}

/// Issue 39: a user's `apply` of a job plan whose GPU clocks differ per region switches
/// them at region boundaries through powerperfd (each switch a `set_gpu_locked_clocks` in
/// one session), puts the GPU back; a plan with a clock outside the grant is refused
/// before anything changes and the command does not run.
#[test]
fn a_users_gpu_region_switches_go_through_powerperfd() {
    let Some(mut w) = World::new("GPU region switches through powerperfd", GRANT) else {
        return;
    };
    w.start();
    gpu_original(&w);
    let out_dir = common::dir_owned_by_nobody(w.dir.path(), "out");
    let script = out_dir.join("regions.py");
    std::fs::write(&script, common::GPU_REGIONS_PY).unwrap();
    let seen = out_dir.join("seen");
    let apply = |default: f64, dgemm: f64| {
        let plan = out_dir.join(format!("plan-{dgemm}.toml"));
        std::fs::write(
            &plan,
            common::gpu_job_plan(default, &[("dgemm", dgemm), ("stream", 990.0)]),
        )
        .unwrap();
        as_uid(NOBODY, &w.bin)
            .arg("apply")
            .arg("--daemon")
            .arg(&w.socket)
            .arg("--plan")
            .arg(&plan)
            .arg("--log")
            .arg(out_dir.join("switches.log"))
            .args(["--", "/usr/bin/python3"])
            .arg(&script)
            .arg(w.dir.path().join("gpu"))
            .arg(&seen)
            .env_remove("POWERPERF_RUN_DIR")
            .output()
            .unwrap()
    };
    let o = apply(1500.0, 1200.0);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}\ndaemon log:\n{}", w.log_text());
    assert!(
        err.contains("switching GPU 0's SM clock at region boundaries")
            && err.contains("through powerperfd at"),
        "{err}"
    );
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "start 1500 1500\ndgemm 1200 1200\ninner 1200 1200\nbetween 1500 1500\nstream 990 990\nend 1500 1500\n"
    );
    gpu_original(&w);
    let log = std::fs::read_to_string(out_dir.join("switches.log")).unwrap();
    assert!(
        log.lines().any(|l| l.contains("\tregion\t"))
            && log
                .lines()
                .last()
                .unwrap()
                .contains("\trestore\tgpu0 (powerperfd)\t"),
        "{log}"
    );
    // a region's clock outside the grant: refused before anything changed
    std::fs::remove_file(&seen).unwrap();
    let o = apply(1500.0, 1980.0);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("region `dgemm`")
            && err.contains("allows [900, 1500] MHz")
            && err.contains("the command did not run"),
        "{err}"
    );
    assert!(!seen.exists(), "the command ran");
    gpu_original(&w);
}
