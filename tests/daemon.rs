//! powerperfd, the node service (issue 22, docs/cluster.md), end to end: the daemon runs as
//! root on a copy of the cpufreq and powercap fixture trees with a private --socket and
//! --state-dir per test; clients are `powerperf apply`, `powerperf collect` and
//! `powerperfd request`, run as uid 65534 (`nobody`) and uid 65533 through setpriv. Tests
//! print `skipped: …` when not root (CI runs as root).

mod common;

use common::daemon::{as_uid, kill_group, World, CPUFREQ, OTHER};
use common::NOBODY;
use std::io::Write as _;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const GRANT: &str = r#"
[[grant]]
name = "dvfs-users"
users = ["nobody", "65533"]
read = ["energy"]
write = ["cpu.core_freq"]
[grant.ranges]
"cpu.core_freq" = [1200, 2000]
"#;

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[test]
fn a_granted_user_reads_energy_and_sets_a_permitted_frequency_while_the_command_runs() {
    let Some(mut w) = World::new("daemon granted user", GRANT) else {
        return;
    };
    w.start();
    // the socket is 0666 in a 0755 directory, the state directory 0700
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode(&w.socket), 0o666);
    assert_eq!(mode(w.socket.parent().unwrap()), 0o755);
    assert_eq!(mode(&w.state), 0o700);

    // the command sees the setting; afterwards the original is back
    let script = format!(
        "cat {0}/cpu0/cpufreq/scaling_setspeed {0}/cpu1/cpufreq/scaling_setspeed {0}/cpu0/cpufreq/scaling_governor",
        w.root.join(CPUFREQ).display()
    );
    let o = w
        .apply(NOBODY, 1600.0, &["sh", "-c", &script])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "1600000\n1600000\nuserspace\n"
    );
    assert!(stderr(&o).contains("through powerperfd"), "{}", stderr(&o));
    w.assert_original();

    // energy: nobody cannot read energy_uj, collect gets it from the daemon (across the
    // counter's wrap) and says so in run.toml
    let e = w.root.join("sys/class/powercap/intel-rapl:0/energy_uj");
    let direct = as_uid(NOBODY, "cat").arg(&e).output().unwrap();
    assert!(
        !direct.status.success(),
        "energy_uj must be root-only in this test"
    );
    let runs = common::dir_owned_by_nobody(w.dir.path(), "runs");
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let ticker = {
        let (e, stop) = (e.clone(), stop.clone());
        std::thread::spawn(move || {
            // 262143000000 µJ, wrapping at 262143328850: advance 20 mJ every 5 ms
            let max = 262_143_328_850u64;
            let mut v = 262_143_000_000u64;
            let tmp = e.with_file_name(".energy_uj.tmp");
            let mut advanced = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                v = (v + 20_000) % max;
                advanced += 20_000;
                // root-only, as the kernel's
                use std::os::unix::fs::OpenOptionsExt;
                let _ = std::fs::remove_file(&tmp);
                let mut f = std::fs::OpenOptions::new()
                    .write(true)
                    .create_new(true)
                    .mode(0o400)
                    .open(&tmp)
                    .unwrap();
                f.write_all(format!("{v}\n").as_bytes()).unwrap();
                drop(f);
                std::fs::rename(&tmp, &e).unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
            advanced
        })
    };
    let o = as_uid(NOBODY, &w.bin)
        .arg("collect")
        .arg("--daemon")
        .arg(&w.socket)
        .arg("--sysfs-root")
        .arg(&w.root)
        .arg("--interval")
        .arg("20ms")
        .arg("-o")
        .arg(runs.join("r1"))
        .args(["--", "sleep", "0.5"])
        .output()
        .unwrap();
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let advanced_uj = ticker.join().unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    let meta: toml::Value =
        toml::from_str(&std::fs::read_to_string(runs.join("r1/run.toml")).unwrap()).unwrap();
    let notes = meta["notes"].as_array().unwrap();
    assert!(
        notes
            .iter()
            .any(|n| n.as_str().unwrap().contains("through powerperfd")),
        "{notes:?}"
    );
    let pkg = meta["events"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"].as_str() == Some("energy-package-0"))
        .expect("energy-package-0 in run.toml");
    assert_eq!(pkg["status"].as_str(), Some("counted"), "{pkg:?}");
    let total = pkg["total"].as_float().unwrap();
    // the daemon's readings fall inside the ticker's run: more than 0, at most all of it
    assert!(
        total > 0.0 && total <= advanced_uj as f64 * 1e-6 + 1e-9,
        "{total} J, ticker {advanced_uj} µJ"
    );
    println!("collect through powerperfd: package-0 {total:.3} J of the {:.3} J the counter advanced (it wrapped)", advanced_uj as f64 * 1e-6);
}

#[test]
fn a_setting_outside_the_grant_is_refused_naming_the_grant() {
    let Some(mut w) = World::new("daemon outside the grant", GRANT) else {
        return;
    };
    w.start();
    // 2400 MHz is one of the CPU's frequencies, but above the grant's range
    let o = w.apply(NOBODY, 2400.0, &["true"]).output().unwrap();
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("grant `dvfs-users`")
            && err.contains("[1200, 2000] MHz")
            && err.contains("uid 65534"),
        "{err}"
    );
    w.assert_original();
    // a frequency the hardware does not have is refused by the controller's range check
    let o = w.apply(NOBODY, 1700.0, &["true"]).output().unwrap();
    assert!(!o.status.success());
    assert!(
        stderr(&o).contains("1200, 1600, 2000, 2400"),
        "{}",
        stderr(&o)
    );
    w.assert_original();
    // every refusal is logged with uid, pid and reason
    let log = w.log_text();
    let refusals: Vec<&str> = log.lines().filter(|l| l.contains("refused")).collect();
    assert_eq!(refusals.len(), 2, "{log}");
    for l in refusals {
        assert!(
            l.contains("uid=65534") && l.contains("pid=") && l.contains("reason="),
            "{l}"
        );
    }
}

#[test]
fn a_user_without_a_grant_is_refused_every_write() {
    let config = GRANT.replace(r#"users = ["nobody", "65533"]"#, r#"users = ["nobody"]"#);
    let Some(mut w) = World::new("daemon no grant", &config) else {
        return;
    };
    w.start();
    for mhz in [1200.0, 1600.0, 2000.0, 2400.0] {
        let o = w.apply(OTHER, mhz, &["true"]).output().unwrap();
        let err = stderr(&o);
        assert!(!o.status.success(), "{mhz}: {err}");
        // only grants that name the caller are named (issue 38): not `dvfs-users`
        assert!(
            err.contains("uid 65533 may not set")
                && err.contains("no grant of this user allows it")
                && !err.contains("dvfs-users"),
            "{err}"
        );
    }
    // one CPU at a time, too; reading energy is everyone's by default
    let o = w.request(OTHER, &[r#"{"op":"set_core_freq","mhz":1200,"cpus":[1]}"#]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains(r#""ok":false"#) && out.contains("may not set"),
        "{out}"
    );
    let o = w.request(OTHER, &[r#"{"op":"read_energy"}"#]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && out.contains("package-0"), "{out}");
    w.assert_original();
}

#[test]
fn only_root_may_act_on_behalf_of_a_user_and_then_that_users_policy_applies() {
    let Some(mut w) = World::new("daemon on behalf", GRANT) else {
        return;
    };
    w.start();
    let hello =
        |uid: u32| format!(r#"{{"op":"hello","on_behalf_of":{{"uid":{uid},"job":"4242"}}}}"#);
    // not root: refused
    let o = w.request(NOBODY, &[&hello(NOBODY)]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("only uid 0 may act on behalf"), "{out}");
    // root for a user without a grant (uid 4000): that user's policy refuses
    let o = w.request(0, &[&hello(4000), r#"{"op":"set_core_freq","mhz":1600}"#]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("uid 4000 may not set"), "{out}");
    // root for nobody: inside nobody's range it is set (and restored when the session
    // ends), outside it refused although root itself could
    let o = w.request(0, &[&hello(NOBODY), r#"{"op":"set_core_freq","mhz":2400}"#]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("[1200, 2000] MHz"));
    let o = w.request(
        0,
        &[
            &hello(NOBODY),
            r#"{"op":"set_core_freq","mhz":1600}"#,
            r#"{"op":"status"}"#,
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success(), "{out}");
    assert!(
        out.contains("job 4242") && out.contains("holds CPU 1 at 1600 MHz"),
        "{out}"
    );
    w.wait_for("the restore at the end of the session", || {
        w.read(0, "scaling_governor") == "schedutil" && w.read(1, "scaling_governor") == "schedutil"
    });
}

/// Start `apply` (uid `uid`, `mhz`) running `sleep 60` in its own process group and wait
/// until its setting is in place.
fn held_apply(w: &World, uid: u32, mhz: f64) -> Child {
    let mut c = w.apply(uid, mhz, &["sleep", "60"]);
    c.process_group(0)
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let child = c.spawn().unwrap();
    let want = format!("{}", (mhz * 1000.0) as u64);
    // a restore leaves scaling_setspeed as it was (only the governor is put back), so the
    // governor tells a new setting from an earlier one
    w.wait_for("the setting", || {
        [0, 1].iter().all(|&cpu| {
            w.read(cpu, "scaling_governor") == "userspace"
                && w.read(cpu, "scaling_setspeed") == want
        })
    });
    child
}

#[test]
fn the_setting_is_restored_after_the_client_is_sigkilled() {
    let Some(mut w) = World::new("daemon client SIGKILL", GRANT) else {
        return;
    };
    w.start();
    let mut c = held_apply(&w, NOBODY, 1600.0);
    assert_eq!(w.read(0, "scaling_governor"), "userspace");
    // SIGKILL powerperf itself (setpriv exec'd it): no cleanup of its own runs
    // SAFETY: kill(2) on a child of this test.
    unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
    let took = w.wait_for("the restore after SIGKILL", || {
        w.read(0, "scaling_governor") == "schedutil" && w.read(1, "scaling_governor") == "schedutil"
    });
    kill_group(&mut c);
    w.assert_original();
    w.wait_for("the log line", || {
        w.log_text()
            .contains("session ended: its settings restored")
    });
    println!(
        "restored {:.2} ms after the client's SIGKILL",
        took.as_secs_f64() * 1e3
    );
}

#[test]
fn the_setting_is_restored_after_the_daemon_is_sigkilled_and_restarted() {
    let Some(mut w) = World::new("daemon SIGKILL and restart", GRANT) else {
        return;
    };
    w.start();
    let mut c = held_apply(&w, NOBODY, 1600.0);
    w.kill_daemon(); // SIGKILL
                     // nobody restored it: the daemon is gone, the client cannot write sysfs
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(w.read(0, "scaling_setspeed"), "1600000");
    assert_eq!(w.read(0, "scaling_governor"), "userspace");
    let journal = w.state.join("powerperfd-journal.jsonl");
    assert!(std::fs::read_to_string(&journal)
        .unwrap()
        .contains("\"save\""));
    // the restarted daemon replays its journal before its socket accepts
    w.start();
    w.assert_original();
    assert!(w
        .log_text()
        .contains("restored the settings of sessions left by a previous run"));
    kill_group(&mut c);
}

#[test]
fn two_sessions_conflicting_on_one_cpu_the_second_is_refused() {
    let Some(mut w) = World::new("daemon conflicting sessions", GRANT) else {
        return;
    };
    w.start();
    let mut first = held_apply(&w, NOBODY, 1600.0);
    let o = w.apply(OTHER, 2000.0, &["true"]).output().unwrap();
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("is held by session") && err.contains("uid 65534"),
        "{err}"
    );
    // never a silent clamp: the first session's setting is untouched
    assert_eq!(w.read(0, "scaling_setspeed"), "1600000");
    assert_eq!(w.read(1, "scaling_setspeed"), "1600000");
    kill_group(&mut first);
    w.wait_for("the first session's restore", || {
        w.read(0, "scaling_governor") == "schedutil"
    });

    // per CPU: a session holding CPU 0 leaves CPU 1 to another
    let mut a = as_uid(NOBODY, &w.daemon_bin);
    a.arg("request")
        .arg("--socket")
        .arg(&w.socket)
        .arg("--hold")
        .arg(r#"{"op":"set_core_freq","mhz":1600,"cpus":[0]}"#)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped());
    let mut a = a.spawn().unwrap();
    w.wait_for("CPU 0 set", || w.read(0, "scaling_setspeed") == "1600000");
    let o = w.request(OTHER, &[r#"{"op":"set_core_freq","mhz":2000,"cpus":[1]}"#]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stdout));
    let o = w.request(
        OTHER,
        &[r#"{"op":"set_core_freq","mhz":2000,"cpus":[0,1]}"#],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(out.contains("CPU 0 is held by session"), "{out}");
    drop(a.stdin.take());
    a.wait().unwrap();
    w.wait_for("CPU 0 restored", || {
        w.read(0, "scaling_governor") == "schedutil"
    });
    w.assert_original();
}

#[test]
fn oversized_and_malformed_requests_are_refused_and_logged() {
    let Some(mut w) = World::new("daemon bad requests", GRANT) else {
        return;
    };
    w.start();
    let o = w.request(
        NOBODY,
        &[
            r#"{"op":"set_core_freq","mhz":"NaN"}"#,
            r#"{"op":"set_core_freq","mhz":-5}"#,
        ],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("not a request") && out.contains("not a frequency"),
        "{out}"
    );
    // a line over 64 KiB closes the connection
    let mut s = std::os::unix::net::UnixStream::connect(&w.socket).unwrap();
    let _ = s.write_all(&vec![b'x'; 70_000]);
    let mut buf = String::new();
    use std::io::Read as _;
    let _ = s.read_to_string(&mut buf);
    assert!(buf.contains("longer than 65536 bytes"), "{buf}");
    w.assert_original();
}

/// Measured numbers (not a timed test: it asserts only that every switch landed and every
/// restore happened): the round trip of a frequency switch through the daemon and the time
/// from a client's SIGKILL to its settings being back. Printed as a table.
#[test]
fn daemon_switch_round_trip_and_restore_after_sigkill_table() {
    let Some(mut w) = World::new("daemon timings", GRANT) else {
        return;
    };
    w.start();
    let mut c = powerperf_node::daemon::client::Client::connect(&w.socket).unwrap();
    let n = 400;
    let mut rt = Vec::with_capacity(n);
    for i in 0..n {
        let mhz = if i % 2 == 0 { 1200.0 } else { 2400.0 };
        let t = Instant::now();
        c.set_core_freq(mhz, None).unwrap();
        rt.push(t.elapsed().as_secs_f64() * 1e6);
        assert_eq!(
            w.read(1, "scaling_setspeed"),
            format!("{}", (mhz * 1000.0) as u64)
        );
    }
    // the uncore (both domains: 4 writes) and the fake GPU's power limit, same session
    let mut rt_uncore = Vec::with_capacity(n);
    let mut rt_gpu = Vec::with_capacity(n);
    for i in 0..n {
        let (mhz, watts) = if i % 2 == 0 {
            (1200.0, 300.0)
        } else {
            (2400.0, 700.0)
        };
        let t = Instant::now();
        c.set_uncore_freq(mhz, None).unwrap();
        rt_uncore.push(t.elapsed().as_secs_f64() * 1e6);
        let t = Instant::now();
        c.set_gpu_power_limit(0, watts).unwrap();
        rt_gpu.push(t.elapsed().as_secs_f64() * 1e6);
    }
    c.restore().unwrap();
    drop(c);
    w.assert_original();
    let mut kill = Vec::new();
    for _ in 0..20 {
        let mut child = held_apply(&w, NOBODY, 1600.0);
        // SAFETY: kill(2) on a child of this test.
        unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
        let took = w.wait_for("restore", || {
            w.read(0, "scaling_governor") == "schedutil"
                && w.read(1, "scaling_governor") == "schedutil"
        });
        kill.push(took.as_secs_f64() * 1e6);
        kill_group(&mut child);
    }
    let q = |v: &mut Vec<f64>, p: f64| {
        v.sort_by(f64::total_cmp);
        v[((v.len() - 1) as f64 * p).round() as usize]
    };
    println!(
        "| measurement (2 CPUs, cpufreq-userspace fixture) | n | median µs | p90 µs | max µs |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| set_core_freq round trip (client -> daemon -> sysfs -> reply) | {n} | {:.0} | {:.0} | {:.0} |",
        q(&mut rt, 0.5),
        q(&mut rt, 0.9),
        q(&mut rt, 1.0)
    );
    println!(
        "| set_uncore_freq round trip (2 domains, 4 sysfs writes) | {n} | {:.0} | {:.0} | {:.0} |",
        q(&mut rt_uncore, 0.5),
        q(&mut rt_uncore, 0.9),
        q(&mut rt_uncore, 1.0)
    );
    println!(
        "| set_gpu_power_limit round trip (fake GPU, one file write) | {n} | {:.0} | {:.0} | {:.0} |",
        q(&mut rt_gpu, 0.5),
        q(&mut rt_gpu, 0.9),
        q(&mut rt_gpu, 1.0)
    );
    let k = kill.len();
    println!(
        "| restore after the client's SIGKILL (kill -> both governors back) | {k} | {:.0} | {:.0} | {:.0} |",
        q(&mut kill, 0.5),
        q(&mut kill, 0.9),
        q(&mut kill, 1.0)
    );
}

/// Without a daemon, `apply` by a user fails as before (cpufreq not writable, nothing
/// changed) and its message names the daemon as one more fix.
#[test]
fn without_a_daemon_a_users_apply_fails_as_before_naming_the_fix() {
    let Some(w) = World::new("daemon absent", GRANT) else {
        return;
    };
    if Path::new(powerperf_node::daemon::DEFAULT_SOCKET).exists() {
        println!(
            "skipped: daemon absent: {} exists on this machine",
            powerperf_node::daemon::DEFAULT_SOCKET
        );
        return;
    }
    let state = common::dir_owned_by_nobody(w.dir.path(), "nobody-state");
    std::fs::set_permissions(&state, std::os::unix::fs::PermissionsExt::from_mode(0o700)).unwrap();
    let o = as_uid(NOBODY, &w.bin)
        .arg("apply")
        .arg("--plan")
        .arg(w.plan(1600.0))
        .arg("--sysfs-root")
        .arg(&w.root)
        .arg("--state-dir")
        .arg(&state)
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains("cannot write")
            && err.contains("no powerperfd either")
            && err.contains("--daemon PATH"),
        "{err}"
    );
    w.assert_original();
}

#[test]
fn cpu_governor_writes_granted_refused_and_restored_after_sigkill() {
    // nobody may set governors; 65533 only core frequencies
    let config = format!(
        "{GRANT}\n[[grant]]\nname = \"governors\"\nusers = [\"nobody\"]\nwrite = [\"cpu.governor\"]\n"
    );
    let Some(mut w) = World::new("daemon cpu.governor", &config) else {
        return;
    };
    w.start();
    // ungranted: refused, nothing written; the grant of another user is not named (issue 38)
    let o = w.request(
        OTHER,
        &[r#"{"op":"set_governor","governor":"performance"}"#],
    );
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        !o.status.success()
            && out.contains(r#""ok":false"#)
            && out.contains("uid 65533 may not set `cpu.governor`")
            && !out.contains("grant `governors`"),
        "{out}"
    );
    w.assert_original();
    // granted, but a governor the CPU does not list (or not a name at all): refused
    for bad in ["turbo", "../../x", ""] {
        let req = format!(r#"{{"op":"set_governor","governor":"{bad}"}}"#);
        let o = w.request(NOBODY, &[&req]);
        let out = String::from_utf8_lossy(&o.stdout);
        assert!(
            out.contains(r#""ok":false"#)
                && (out.contains("scaling_available_governors")
                    || out.contains("not a governor name")),
            "{bad}: {out}"
        );
    }
    w.assert_original();
    // granted: set on CPU 1 only, held while the session lives
    let mut c = as_uid(NOBODY, &w.daemon_bin);
    c.arg("request")
        .arg("--socket")
        .arg(&w.socket)
        .arg("--hold")
        .arg(r#"{"op":"set_governor","governor":"performance","cpus":[1]}"#)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut c = c.spawn().unwrap();
    w.wait_for("the governor", || {
        w.read(1, "scaling_governor") == "performance"
    });
    assert_eq!(w.read(0, "scaling_governor"), "schedutil");
    // another session may not change the held CPU
    let o = w.request(OTHER, &[r#"{"op":"set_core_freq","mhz":1600,"cpus":[1]}"#]);
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        out.contains("CPU 1 is held by session") && out.contains("governor performance"),
        "{out}"
    );
    assert_eq!(w.read(1, "scaling_governor"), "performance");
    // SIGKILL the client: the daemon puts the governor back
    // SAFETY: kill(2) on a child of this test.
    unsafe { libc::kill(c.id() as i32, libc::SIGKILL) };
    w.wait_for("the restore after SIGKILL", || {
        w.read(1, "scaling_governor") == "schedutil"
    });
    kill_group(&mut c);
    w.assert_original();
    let journal = std::fs::read_to_string(w.state.join("powerperfd-journal.jsonl")).unwrap();
    assert!(journal.contains(r#""control":"cpu.governor""#), "{journal}");
}

#[test]
fn region_switches_of_a_users_job_plan_go_through_the_daemon_session_in_order_and_are_restored() {
    let test = "daemon region switches";
    let gcc_ok = Command::new("gcc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !gcc_ok {
        println!("skipped: {test}: gcc is not installed");
        return;
    }
    let lib = match std::env::var_os("POWERPERF_RT_LIB") {
        Some(p) => Some(PathBuf::from(p)).filter(|p| p.exists()),
        None => common::rt_lib_dir().map(|d| d.join("libpowerperf_rt.so")),
    };
    let Some(lib) = lib else {
        println!("skipped: {test}: libpowerperf_rt.so is not built (run `cargo build -p powerperf-rt`, or set POWERPERF_RT_LIB)");
        return;
    };
    // the job plan's default (2400) and both regions (1200, 2000) inside the grant
    let config = GRANT.replace("[1200, 2000]", "[1200, 2400]");
    let Some(mut w) = World::new(test, &config) else {
        return;
    };
    w.start();
    // the user's own state directory (switch log, controller socket), 0700
    let user_state = common::dir_owned_by_nobody(w.dir.path(), "user-state");
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&user_state, std::fs::Permissions::from_mode(0o700)).unwrap();
    }
    let out_dir = common::dir_owned_by_nobody(w.dir.path(), "out");
    // the runtime library where the user can load it
    let libdir = w.dir.path().join("lib");
    std::fs::create_dir(&libdir).unwrap();
    std::fs::copy(&lib, libdir.join("libpowerperf_rt.so")).unwrap();
    let plan = common::apply::job_plan(w.dir.path());
    let exe = common::apply::region_program(w.dir.path(), &libdir);
    let seen = out_dir.join("seen");
    let setspeed = w.file(0, "scaling_setspeed");
    let o = as_uid(NOBODY, &w.bin)
        .arg("apply")
        .arg("--daemon")
        .arg(&w.socket)
        .arg("--state-dir")
        .arg(&user_state)
        .arg("--plan")
        .arg(&plan)
        .arg("--")
        .arg(&exe)
        .arg(&setspeed)
        .arg(&seen)
        .env_remove("POWERPERF_RUN_DIR")
        .output()
        .unwrap();
    let err = stderr(&o);
    assert!(o.status.success(), "{err}\ndaemon log:\n{}", w.log_text());
    assert!(
        err.contains("switching at region boundaries") && err.contains("through powerperfd"),
        "{err}"
    );
    // each region's setting was in place before its code ran: written by the daemon
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "start 2400000\nload 1200000\nunplanned 1200000\nbetween 2400000\ncompute 2000000\n"
    );
    w.assert_original();
    // the user's switch log: the regions in order, the daemon's writes, the restore last
    let log = std::fs::read_to_string(user_state.join("powerperf-switches.log")).unwrap();
    let regions = common::apply::region_switches(&log);
    assert_eq!(
        regions,
        [
            "B load 2400->1200",
            "E load 1200->2400",
            "B compute 2400->2000",
            "E compute 2000->2400"
        ],
        "{log}"
    );
    let setspeeds: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("\tset\t") && l.contains("cpu0/cpufreq/scaling_setspeed"))
        .map(|l| l.split('\t').nth(5).unwrap())
        .collect();
    assert_eq!(
        setspeeds,
        ["2400000", "1200000", "2400000", "2000000", "2400000"],
        "{log}"
    );
    let t: Vec<u64> = log
        .lines()
        .skip(1)
        .map(|l| l.split('\t').next().unwrap().parse().unwrap())
        .collect();
    assert!(t.windows(2).all(|w| w[0] <= w[1]), "{log}");
    assert!(log.lines().last().unwrap().contains("\trestore\t"), "{log}");
    // one daemon session made them all: the default and four switches
    let dlog = w.log_text();
    let sessions: Vec<&str> = dlog
        .lines()
        .filter(|l| l.contains(r#"control="cpu.core_freq""#))
        .filter_map(|l| l.split_whitespace().find(|x| x.starts_with("session=")))
        .collect();
    assert_eq!(sessions.len(), 5, "{dlog}");
    assert!(sessions.iter().all(|x| *x == sessions[0]), "{dlog}");
    assert!(!user_state.join("powerperf-restore.toml").exists());
}
