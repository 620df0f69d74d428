//! `powerperf apply` end to end through the real binary on copies of the cpufreq fixture
//! trees: the original settings must be back after every exit path.

mod common;
use common::copy_tree;

use assert_cmd::Command;
use predicates::prelude::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn fixture_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

/// Every file of the tree, relative path -> contents.
fn snapshot(root: &Path) -> Vec<(PathBuf, String)> {
    let mut out = Vec::new();
    fn walk(base: &Path, d: &Path, out: &mut Vec<(PathBuf, String)>) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            if e.path().is_dir() {
                walk(base, &e.path(), out);
            } else {
                out.push((
                    e.path().strip_prefix(base).unwrap().to_path_buf(),
                    std::fs::read_to_string(e.path())
                        .unwrap()
                        .trim()
                        .to_string(),
                ));
            }
        }
    }
    walk(root, root, &mut out);
    out.sort();
    out
}

struct Setup {
    dir: tempfile::TempDir,
    root: PathBuf,
    plan: PathBuf,
    record: PathBuf,
    log: PathBuf,
    original: Vec<(PathBuf, String)>,
}

fn setup(fixture: &str, mhz: f64) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    copy_tree(&fixture_src(fixture), &root);
    let plan = dir.path().join("plan.toml");
    std::fs::write(
        &plan,
        format!(
            r#"[plan]
objective = "energy"
max_slowdown = 0.05
model = "hand-written"
created = "2026-01-01T00:00:00Z"
scope = "per_workload"

[[device]]
kind = "cpu"
knobs = ["core_freq_mhz"]
default = {{ core_freq_mhz = 2400.0 }}

[[region]]
name = "w"
setting = {{ core_freq_mhz = {mhz:.1} }}
time_s = 1.03
energy_j = 80.0
power_w = 77.7
reference_time_s = 1.0
reference_energy_j = 100.0
energy_saving = 0.2
slowdown = 0.03
"#
        ),
    )
    .unwrap();
    let original = snapshot(&root);
    Setup {
        record: dir.path().join("restore.toml"),
        log: dir.path().join("switches.log"),
        dir,
        root,
        plan,
        original,
    }
}

impl Setup {
    fn args(&self) -> Vec<String> {
        vec![
            "apply".into(),
            "--plan".into(),
            self.plan.display().to_string(),
            "--sysfs-root".into(),
            self.root.display().to_string(),
            "--restore-file".into(),
            self.record.display().to_string(),
            "--log".into(),
            self.log.display().to_string(),
            "--".into(),
        ]
    }
    fn cmd(&self, child: &str) -> Command {
        let mut c = Command::cargo_bin("powerperf").unwrap();
        c.args(self.args()).args(["sh", "-c", child]);
        c
    }
    /// Every file as it was. `scaling_setspeed` reads `<unsupported>` on a real kernel
    /// whenever the governor is not userspace and cannot be written back; a plain fixture
    /// file keeps the last value written, so it is compared only when the original was a
    /// frequency (the governor files, compared too, show the userspace governor is gone).
    fn assert_restored(&self) {
        let now = snapshot(&self.root);
        assert_eq!(now.len(), self.original.len());
        for ((p, v), (q, w)) in now.iter().zip(&self.original) {
            assert_eq!(p, q);
            if p.ends_with("scaling_setspeed") && w == "<unsupported>" {
                continue;
            }
            assert_eq!(v, w, "{} not restored", p.display());
        }
        assert!(!self.record.exists(), "restore record left behind");
    }
    fn file(&self, cpu: u32, name: &str) -> String {
        std::fs::read_to_string(
            self.root
                .join(format!("sys/devices/system/cpu/cpu{cpu}/cpufreq/{name}")),
        )
        .unwrap()
        .trim()
        .to_string()
    }
}

#[test]
fn child_exit_0_sees_the_setting_and_everything_is_restored() {
    let s = setup("cpufreq-userspace", 1600.0);
    let seen = s.dir.path().join("seen");
    let f = s.root.join("sys/devices/system/cpu/cpu1/cpufreq");
    s.cmd(&format!(
        "cat {0}/scaling_governor {0}/scaling_setspeed > {1}",
        f.display(),
        seen.display()
    ))
    .assert()
    .code(0);
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "userspace\n1600000\n"
    );
    s.assert_restored();
    let log = std::fs::read_to_string(&s.log).unwrap();
    let lines: Vec<&str> = log.lines().collect();
    assert_eq!(lines[0], "t_monotonic_ns\tpid\taction\tpath\told\tnew");
    // 2 CPUs x (governor + setspeed) set, 2 governors restored
    assert_eq!(
        lines.iter().filter(|l| l.contains("\tset\t")).count(),
        4,
        "{log}"
    );
    assert_eq!(
        lines.iter().filter(|l| l.contains("\trestore\t")).count(),
        2,
        "{log}"
    );
    let t: Vec<u64> = lines[1..]
        .iter()
        .map(|l| l.split('\t').next().unwrap().parse().unwrap())
        .collect();
    assert!(t.windows(2).all(|w| w[0] <= w[1]) && t[0] > 0);
}

/// `--format json`: one object as the last stderr line, with the setting, the controller,
/// the log and the command's exit status.
#[test]
fn json_summary_is_the_last_line_of_stderr() {
    let s = setup("cpufreq-userspace", 1200.0);
    let mut args = s.args();
    args.insert(1, "--format".into());
    args.insert(2, "json".into());
    let o = Command::cargo_bin("powerperf")
        .unwrap()
        .args(args)
        .args(["sh", "-c", "exit 3"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr);
    let last = err.lines().last().unwrap();
    let j: serde_json::Value = serde_json::from_str(last).unwrap_or_else(|e| panic!("{e}: {err}"));
    assert_eq!(j["exit_status"], 3);
    assert_eq!(j["setting"]["core_freq_mhz"], 1200.0);
    assert_eq!(j["dry_run"], false);
    assert!(
        j["controller"]
            .as_str()
            .unwrap()
            .contains("userspace governor"),
        "{j}"
    );
    assert_eq!(j["log"].as_str().unwrap(), s.log.display().to_string());
    s.assert_restored();
}

#[test]
fn child_exit_3_is_passed_on_and_restored() {
    let s = setup("cpufreq-userspace", 1200.0);
    s.cmd("exit 3").assert().code(3);
    s.assert_restored();
}

#[test]
fn child_killed_by_sigkill_and_sigsegv_is_restored() {
    let s = setup("cpufreq-userspace", 2000.0);
    s.cmd("kill -KILL $$").assert().code(128 + 9);
    s.assert_restored();
    s.cmd("kill -SEGV $$").assert().code(128 + 11);
    s.assert_restored();
}

#[test]
fn intel_pstate_clamps_are_restored() {
    let s = setup("cpufreq-intel-pstate", 1500.0);
    let seen = s.dir.path().join("seen");
    let f = s.root.join("sys/devices/system/cpu/cpu0/cpufreq");
    s.cmd(&format!(
        "cat {0}/scaling_min_freq {0}/scaling_max_freq {0}/scaling_governor > {1}; exit 7",
        f.display(),
        seen.display()
    ))
    .assert()
    .code(7);
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "1500000\n1500000\npowersave\n"
    );
    s.assert_restored();
}

/// Start powerperf with a child that writes its pid and sleeps; returns (powerperf, child pid).
fn start_sleeping(s: &Setup) -> (std::process::Child, i32) {
    let pidfile = s.dir.path().join("child.pid");
    let bin = assert_cmd::cargo::cargo_bin("powerperf");
    let p = std::process::Command::new(bin)
        .args(s.args())
        .args([
            "sh",
            "-c",
            &format!(
                "echo $$ > {}.tmp && mv {0}.tmp {0} && exec sleep 30",
                pidfile.display()
            ),
        ])
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while !pidfile.exists() {
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "child did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let pid: i32 = std::fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    (p, pid)
}

fn signal_powerperf(sig: i32) {
    let s = setup("cpufreq-userspace", 1200.0);
    let (mut p, _child) = start_sleeping(&s);
    assert_eq!(s.file(0, "scaling_governor"), "userspace");
    assert!(
        s.record.exists(),
        "no restore record while the command runs"
    );
    unsafe { libc::kill(p.id() as i32, sig) };
    let st = p.wait().unwrap();
    assert_eq!(st.code(), Some(128 + sig), "{st:?}");
    s.assert_restored();
}

#[test]
fn sigterm_to_powerperf_is_forwarded_and_restored() {
    signal_powerperf(libc::SIGTERM);
}

#[test]
fn sigint_to_powerperf_is_forwarded_and_restored() {
    signal_powerperf(libc::SIGINT);
}

#[test]
fn restore_replays_the_record_after_powerperf_is_sigkilled() {
    let s = setup("cpufreq-userspace", 1600.0);
    let (mut p, child) = start_sleeping(&s);
    unsafe { libc::kill(p.id() as i32, libc::SIGKILL) };
    p.wait().unwrap();
    unsafe { libc::kill(child, libc::SIGKILL) };
    assert_eq!(s.file(1, "scaling_setspeed"), "1600000");
    assert!(s.record.exists());
    // a new apply refuses while the record is there
    s.cmd("true")
        .assert()
        .failure()
        .stderr(predicates::str::contains("apply --restore"));
    Command::cargo_bin("powerperf")
        .unwrap()
        .args(["apply", "--restore", "--restore-file"])
        .arg(&s.record)
        .assert()
        .success()
        .stderr(predicates::str::contains("restored 2 setting(s)"));
    s.assert_restored();
    // nothing left: a second replay says so
    Command::cargo_bin("powerperf")
        .unwrap()
        .args(["apply", "--restore", "--restore-file"])
        .arg(&s.record)
        .assert()
        .success()
        .stderr(predicates::str::contains("nothing to restore"));
}

#[test]
fn out_of_range_setting_is_refused_before_the_command_runs() {
    let s = setup("cpufreq-userspace", 1700.0);
    let marker = s.dir.path().join("ran");
    s.cmd(&format!("touch {}", marker.display()))
        .assert()
        .failure()
        .stderr(
            predicates::str::contains("1700 MHz is outside")
                .and(predicates::str::contains("1200, 1600, 2000, 2400")),
        );
    assert!(!marker.exists());
    s.assert_restored();
}

#[test]
fn no_cpufreq_says_so_and_dry_run_runs_the_command() {
    let s = setup("cpufreq-userspace", 1600.0);
    let empty = s.dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let marker = s.dir.path().join("ran");
    let mut args = s.args();
    args[4] = empty.display().to_string();
    Command::cargo_bin("powerperf")
        .unwrap()
        .args(&args)
        .args(["touch", &marker.display().to_string()])
        .assert()
        .failure()
        .stderr(
            predicates::str::contains("no cpufreq").and(predicates::str::contains(
                "with --dry-run powerperf would set core_freq_mhz = 1600",
            )),
        );
    assert!(!marker.exists());
    let mut dry = args.clone();
    dry.insert(1, "--dry-run".into());
    Command::cargo_bin("powerperf")
        .unwrap()
        .args(&dry)
        .args(["sh", "-c", &format!("touch {}; exit 4", marker.display())])
        .assert()
        .code(4)
        .stderr(predicates::str::contains("dry-run"));
    assert!(marker.exists());
    // dry-run on the fixture lists the writes and changes nothing
    let mut dry = s.args();
    dry.insert(1, "--dry-run".into());
    Command::cargo_bin("powerperf")
        .unwrap()
        .args(&dry)
        .arg("true")
        .assert()
        .success()
        .stderr(predicates::str::contains(
            "cpu1/cpufreq/scaling_setspeed: <unsupported> -> 1600000",
        ));
    s.assert_restored();
}

#[test]
fn missing_write_permission_is_reported_before_the_command_runs() {
    use std::os::unix::fs::PermissionsExt;
    let s = setup("cpufreq-userspace", 1600.0);
    let marker = s.dir.path().join("ran");
    let child = format!("touch {}", marker.display());
    let assert = if unsafe { libc::geteuid() } != 0 {
        let f = s
            .root
            .join("sys/devices/system/cpu/cpu1/cpufreq/scaling_setspeed");
        std::fs::set_permissions(&f, std::fs::Permissions::from_mode(0o444)).unwrap();
        s.cmd(&child).assert()
    } else {
        // As root, file modes do not stop writes: run powerperf as `nobody` through setpriv,
        // from a hard link (or copy) of the binary inside the world-readable test directory.
        if !common::root_with_setpriv(
            "missing_write_permission_is_reported_before_the_command_runs",
        ) {
            return;
        }
        let bin = common::world_readable_bin(s.dir.path());
        std::fs::set_permissions(&s.root, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut c = Command::from_std(common::as_nobody(&bin));
        c.args(s.args()).args(["sh", "-c", &child]);
        c.assert()
    };
    assert.failure().stderr(
        predicate::str::contains("cannot write")
            .and(predicate::str::contains("run as root"))
            .and(predicate::str::contains("--dry-run")),
    );
    assert!(!marker.exists(), "the command ran");
    assert!(!s.record.exists());
    s.assert_restored();
}

#[test]
fn gpu_clocks_are_only_described_and_threads_reach_the_command() {
    let s = setup("cpufreq-userspace", 1600.0);
    let plan = s.dir.path().join("gpu.toml");
    std::fs::write(
        &plan,
        r#"[plan]
objective = "energy"
max_slowdown = 0.05
model = "hand-written"
created = "2026-01-01T00:00:00Z"
scope = "per_workload"

[[device]]
kind = "gpu"
knobs = ["core_freq_mhz", "mem_freq_mhz"]
default = { core_freq_mhz = 1164.0, mem_freq_mhz = 3505.0 }

[[region]]
name = "a"
setting = { core_freq_mhz = 861.0, mem_freq_mhz = 3505.0, threads = 2.0 }
time_s = 1.0
energy_j = 1.0
power_w = 1.0
reference_time_s = 1.0
reference_energy_j = 1.0
energy_saving = 0.0
slowdown = 0.0

[[region]]
name = "b"
setting = { core_freq_mhz = 1164.0, mem_freq_mhz = 810.0, threads = 2.0 }
time_s = 1.0
energy_j = 1.0
power_w = 1.0
reference_time_s = 1.0
reference_energy_j = 1.0
energy_saving = 0.0
slowdown = 0.0
"#,
    )
    .unwrap();
    let mut args = s.args();
    args[2] = plan.display().to_string();
    // two regions with different settings: the one to apply must be named
    Command::cargo_bin("powerperf")
        .unwrap()
        .args(&args)
        .arg("true")
        .assert()
        .failure()
        .stderr(predicate::str::contains("--workload NAME").and(predicate::str::contains("a, b")));
    let seen = s.dir.path().join("seen");
    let mut args2 = args.clone();
    args2.insert(1, "--workload".into());
    args2.insert(2, "a".into());
    Command::cargo_bin("powerperf")
        .unwrap()
        .args(&args2)
        .args([
            "sh",
            "-c",
            &format!("echo $OMP_NUM_THREADS > {}; exit 5", seen.display()),
        ])
        .assert()
        .code(5)
        .stderr(
            predicate::str::contains(
                "nvmlDeviceSetGpuLockedClocks(device 0, minGpuClockMHz 861, maxGpuClockMHz 861)",
            )
            .and(predicate::str::contains("GPU clocks are never changed")),
        );
    assert_eq!(std::fs::read_to_string(&seen).unwrap().trim(), "2");
    // no CPU knob in the plan: the CPU settings were not touched and no record was written
    s.assert_restored();
    assert!(!s.log.exists() || !std::fs::read_to_string(&s.log).unwrap().contains("\tset\t"));
}

/// `libpowerperf_rt.so` of this target directory (`cargo build -p powerperf-rt`), or
/// `POWERPERF_RT_LIB`.
fn rt_lib() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("POWERPERF_RT_LIB") {
        return Some(PathBuf::from(p)).filter(|p| p.exists());
    }
    common::rt_lib_dir().map(|d| d.join("libpowerperf_rt.so"))
}

#[test]
fn region_switches_from_a_c_program_are_logged_in_order_and_restored() {
    let test = "region_switches_from_a_c_program";
    let gcc_ok = std::process::Command::new("gcc")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !gcc_ok {
        eprintln!("skipped: {test}: gcc is not installed");
        return;
    }
    let Some(lib) = rt_lib() else {
        eprintln!("skipped: {test}: libpowerperf_rt.so is not built in this target directory (run `cargo build -p powerperf-rt` first, or set POWERPERF_RT_LIB)");
        return;
    };
    let s = setup("cpufreq-userspace", 2400.0);
    let plan = job_plan(s.dir.path());
    let setspeed = s
        .root
        .join("sys/devices/system/cpu/cpu0/cpufreq/scaling_setspeed");
    let src = s.dir.path().join("prog.c");
    std::fs::write(
        &src,
        r#"#include <stdio.h>
#include "powerperf.h"
static void show(FILE *out, const char *path, const char *where) {
    char buf[64] = {0};
    FILE *f = fopen(path, "r");
    if (f) { if (!fgets(buf, sizeof buf, f)) buf[0] = 0; fclose(f); }
    fprintf(out, "%s %s", where, buf);
}
int main(int argc, char **argv) {
    if (argc < 3) return 2;
    FILE *out = fopen(argv[2], "w");
    if (!out) return 2;
    show(out, argv[1], "start");
    pp_region_begin("load");
    show(out, argv[1], "load");
    pp_region_begin("unplanned");
    show(out, argv[1], "unplanned");
    pp_region_end("unplanned");
    pp_region_end("load");
    show(out, argv[1], "between");
    pp_region_begin("compute");
    show(out, argv[1], "compute");
    pp_region_end("compute");
    fclose(out);
    return 0;
}
"#,
    )
    .unwrap();
    let exe = s.dir.path().join("prog");
    let libdir = lib.parent().unwrap();
    let st = std::process::Command::new("gcc")
        .arg("-I")
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("rt/include"))
        .arg(&src)
        .arg("-o")
        .arg(&exe)
        .arg("-L")
        .arg(libdir)
        .arg(format!("-Wl,-rpath,{}", libdir.display()))
        .arg("-lpowerperf_rt")
        .status()
        .unwrap();
    assert!(st.success(), "gcc failed");
    let seen = s.dir.path().join("seen");
    let mut args = s.args();
    args[2] = plan.display().to_string();
    Command::cargo_bin("powerperf")
        .unwrap()
        .args(&args)
        .arg(&exe)
        .arg(&setspeed)
        .arg(&seen)
        .env_remove("POWERPERF_RUN_DIR")
        .assert()
        .code(0)
        .stderr(predicate::str::contains("switching at region boundaries"));
    // each region's setting was in place before its code ran
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "start 2400000\nload 1200000\nunplanned 1200000\nbetween 2400000\ncompute 2000000\n"
    );
    s.assert_restored();
    let log = std::fs::read_to_string(&s.log).unwrap();
    let regions: Vec<String> = log
        .lines()
        .filter(|l| l.contains("\tregion\t"))
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            format!("{} {}->{}", c[3], c[4], c[5])
        })
        .collect();
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
    let t: Vec<u64> = log
        .lines()
        .skip(1)
        .map(|l| l.split('\t').next().unwrap().parse().unwrap())
        .collect();
    assert!(t.windows(2).all(|w| w[0] <= w[1]), "{log}");
    assert!(log.lines().last().unwrap().contains("\trestore\t"), "{log}");
}

/// `examples/plans/gpu-static.toml` in a dry run: on a machine with an NVIDIA GPU the NVML
/// reads (supported clocks) are printed and the setting checked; the set and reset calls are
/// printed either way and nothing is changed.
#[test]
fn gpu_plan_dry_run_reads_nvml_and_prints_the_calls() {
    let plan =
        std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/plans/gpu-static.toml");
    let out = Command::cargo_bin("powerperf")
        .unwrap()
        .args(["apply", "--dry-run", "--plan"])
        .arg(&plan)
        .args(["--", "true"])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{err}");
    assert!(
        err.contains(
            "nvmlDeviceSetGpuLockedClocks(device 0, minGpuClockMHz 1200, maxGpuClockMHz 1200)"
        ) && err.contains("nvmlDeviceResetGpuLockedClocks(device 0)"),
        "{err}"
    );
    if err.contains("NVML not available") {
        println!("skipped: no NVIDIA GPU (the calls were printed unchecked)");
        return;
    }
    assert!(
        err.contains("nvmlDeviceGetSupportedGraphicsClocks"),
        "{err}"
    );
}

// ---- Hardening (issue 18, part A): apply runs as root, so every path, record and number it
// reads is hostile. Attacks run as uid 65534 (`common::as_nobody`) against powerperf running
// as root on copies of the fixture trees; each test prints `skipped: …` when not root.

fn powerperf() -> Command {
    let mut c = Command::cargo_bin("powerperf").unwrap();
    c.env_remove("XDG_RUNTIME_DIR")
        .env_remove("POWERPERF_STATE_DIR")
        .env_remove("SUDO_UID")
        .env_remove("SUDO_GID")
        .env_remove("SUDO_USER");
    c
}

fn chmod(p: &Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap();
}

/// Item 1: a restore record forged by another user (an attacker's `sysfs_root`, `../` in a
/// path) must not make root write outside a sysfs root; neither may a record whose content
/// names files outside the root, files apply never writes, or values the files do not allow.
/// Root's default record is not in a shared /tmp name.
#[test]
fn forged_restore_record_cannot_make_root_write_outside_the_sysfs_root() {
    let test = "forged_restore_record_cannot_make_root_write_outside_the_sysfs_root";
    if !common::root_with_setpriv(test) {
        return;
    }
    let s = setup("cpufreq-userspace", 1600.0);
    chmod(s.dir.path(), 0o755);
    // the victim: a root-owned file outside any sysfs root
    let victim_dir = s.dir.path().join("victim");
    std::fs::create_dir(&victim_dir).unwrap();
    let victim = victim_dir.join("scaling_governor");
    std::fs::write(&victim, "original\n").unwrap();
    // the attacker's own directory (as /tmp is for the default record of the old code)
    let atk = s.dir.path().join("atk");
    std::fs::create_dir(&atk).unwrap();
    common::chown_nobody(&atk);
    let escape = format!(
        "sys/devices/system/cpu/cpu0/cpufreq/{}{}/scaling_governor",
        "../".repeat(40),
        victim_dir.display().to_string().trim_start_matches('/')
    );
    common::sh_as_nobody(&format!(
        r#"set -e
cd {atk}
mkdir -p evil/sys/devices/system/cpu/cpu0/cpufreq
cd evil/sys/devices/system/cpu/cpu0/cpufreq
echo 'userspace schedutil' > scaling_available_governors
echo schedutil > scaling_governor
echo '<unsupported>' > scaling_setspeed
echo 1200000 > scaling_min_freq
echo 2400000 > scaling_max_freq
echo 1200000 > cpuinfo_min_freq
echo 2400000 > cpuinfo_max_freq
cd {atk}
cat > rec.toml <<END
pid = 2147483646
created_unix_ns = 0
sysfs_root = "{atk}/evil"
controller = "forged"
command = ["x"]

[[file]]
path = "{escape}"
value = "pwned"
END
"#,
        atk = atk.display()
    ));
    let forged = atk.join("rec.toml");
    let o = powerperf()
        .args(["apply", "--restore", "--restore-file"])
        .arg(&forged)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        std::fs::read_to_string(&victim).unwrap(),
        "original\n",
        "root wrote the attacker's text outside the sysfs root: {err}"
    );
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(&forged.display().to_string())
            && err.contains(&format!("uid {}", common::NOBODY)),
        "{err}"
    );
    // The same content in a root-owned record, replayed onto the fixture copy: refused, nothing
    // written. Then a record naming a file apply never writes, and a governor the file's
    // own list does not have.
    let own = s.dir.path().join("own.toml");
    let cases = [
        (std::fs::read_to_string(&forged).unwrap(), "outside"),
        (
            "pid = 2147483646\ncreated_unix_ns = 0\nsysfs_root = \"/\"\ncontroller = \"x\"\ncommand = []\n\n[[file]]\npath = \"sys/devices/system/cpu/cpu0/cpufreq/scaling_driver\"\nvalue = \"pwned\"\n".to_string(),
            "scaling_driver",
        ),
        (
            "pid = 2147483646\ncreated_unix_ns = 0\nsysfs_root = \"/\"\ncontroller = \"x\"\ncommand = []\n\n[[file]]\npath = \"sys/devices/system/cpu/cpu0/cpufreq/scaling_governor\"\nvalue = \"pwned\"\n\n[[file]]\npath = \"sys/devices/system/cpu/cpu1/cpufreq/scaling_max_freq\"\nvalue = \"99999999\"\n".to_string(),
            "pwned",
        ),
    ];
    for (text, named) in cases {
        std::fs::write(&own, text).unwrap();
        chmod(&own, 0o600);
        let o = powerperf()
            .args(["apply", "--restore", "--restore-file"])
            .arg(&own)
            .arg("--sysfs-root")
            .arg(&s.root)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            std::fs::read_to_string(&victim).unwrap(),
            "original\n",
            "{err}"
        );
        assert_eq!(s.file(0, "scaling_governor"), "schedutil", "{err}");
        assert_eq!(s.file(1, "scaling_max_freq"), "2400000", "{err}");
        assert!(!o.status.success(), "{err}");
        assert!(
            err.contains(named) && err.contains(&own.display().to_string()),
            "{err}"
        );
        assert!(own.exists(), "a refused record must be kept");
    }
    // root's default record lives in a root-owned directory, not in a shared /tmp name
    if Path::new("/var/lib/powerperf/powerperf-restore.toml").exists() {
        println!("skipped: {test}: default path: this machine has a restore record in /var/lib/powerperf");
        return;
    }
    let o = powerperf()
        .args(["apply", "--restore", "--sysfs-root"])
        .arg(&s.root)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert!(
        err.contains("no record at /var/lib/powerperf/powerperf-restore.toml"),
        "{err}"
    );
}

/// Item 2: predictable record and log paths planted as symbolic links by another user are
/// not followed (the old code opened `<record>.tmp` with O_TRUNC and the log with O_APPEND
/// through them).
#[test]
fn symlinks_planted_at_the_record_and_log_paths_are_not_followed() {
    let test = "symlinks_planted_at_the_record_and_log_paths_are_not_followed";
    if !common::root_with_setpriv(test) {
        return;
    }
    let s = setup("cpufreq-userspace", 1600.0);
    chmod(s.dir.path(), 0o755);
    let victims = s.dir.path().join("victims");
    std::fs::create_dir(&victims).unwrap();
    let (v1, v2) = (victims.join("v1"), victims.join("v2"));
    std::fs::write(&v1, "keep1\n").unwrap();
    std::fs::write(&v2, "keep2\n").unwrap();
    let shared = s.dir.path().join("shared");
    std::fs::create_dir(&shared).unwrap();
    common::chown_nobody(&shared);
    common::sh_as_nobody(&format!(
        "set -e; ln -s {v1} {d}/restore.toml.tmp; ln -s {v2} {d}/switches.log",
        v1 = v1.display(),
        v2 = v2.display(),
        d = shared.display()
    ));
    let marker = s.dir.path().join("ran");
    let o = powerperf()
        .arg("apply")
        .arg("--plan")
        .arg(&s.plan)
        .arg("--sysfs-root")
        .arg(&s.root)
        .arg("--restore-file")
        .arg(shared.join("restore.toml"))
        .arg("--log")
        .arg(shared.join("switches.log"))
        .args(["--", "touch"])
        .arg(&marker)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(std::fs::read_to_string(&v1).unwrap(), "keep1\n", "{err}");
    assert_eq!(std::fs::read_to_string(&v2).unwrap(), "keep2\n", "{err}");
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(&shared.join("switches.log").display().to_string())
            && err.contains("symbolic link"),
        "{err}"
    );
    assert!(!marker.exists(), "the command ran");
    s.assert_restored();
}

/// Item 5: one lock per canonical sysfs root. A second apply on the same tree with another
/// record and log (another XDG_RUNTIME_DIR) is refused while the first runs.
#[test]
fn two_applies_on_one_sysfs_root_exclude_each_other() {
    let s = setup("cpufreq-intel-pstate", 1500.0);
    let (mut a, _child) = start_sleeping(&s);
    assert_eq!(s.file(0, "scaling_min_freq"), "1500000");
    let other = s.dir.path().join("xdg2");
    std::fs::create_dir(&other).unwrap();
    chmod(&other, 0o700);
    // the same tree, reached through a symbolic link: still one lock
    let alias = s.dir.path().join("alias");
    std::os::unix::fs::symlink(&s.root, &alias).unwrap();
    let marker = s.dir.path().join("ran");
    let o = powerperf()
        .arg("apply")
        .arg("--plan")
        .arg(&s.plan)
        .arg("--sysfs-root")
        .arg(&alias)
        .arg("--restore-file")
        .arg(other.join("powerperf-restore.toml"))
        .arg("--log")
        .arg(other.join("powerperf-switches.log"))
        .args(["--", "touch"])
        .arg(&marker)
        .env("XDG_RUNTIME_DIR", &other)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let still_a = s.file(0, "scaling_min_freq");
    unsafe { libc::kill(a.id() as i32, libc::SIGTERM) };
    a.wait().unwrap();
    assert!(
        !o.status.success(),
        "a second apply ran on the same sysfs tree: {err}"
    );
    assert!(!marker.exists(), "the second apply's command ran");
    assert!(
        err.contains(&format!("pid {}", a.id())) && err.contains("lock"),
        "{err}"
    );
    assert_eq!(still_a, "1500000");
    s.assert_restored();
}

/// Item 5: `apply --restore` refuses while the apply that wrote the record still runs (it
/// would reset that apply's settings mid-run).
#[test]
fn restore_refuses_while_the_apply_that_wrote_the_record_runs() {
    let s = setup("cpufreq-userspace", 1600.0);
    let (mut a, _child) = start_sleeping(&s);
    let o = powerperf()
        .args(["apply", "--restore", "--restore-file"])
        .arg(&s.record)
        .arg("--sysfs-root")
        .arg(&s.root)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    let gov = s.file(0, "scaling_governor");
    let speed = s.file(1, "scaling_setspeed");
    unsafe { libc::kill(a.id() as i32, libc::SIGTERM) };
    a.wait().unwrap();
    assert_eq!(
        (gov.as_str(), speed.as_str()),
        ("userspace", "1600000"),
        "--restore reset a running apply: {err}"
    );
    assert!(!o.status.success(), "{err}");
    assert!(
        err.contains(&format!("pid {}", a.id())) && err.contains("still running"),
        "{err}"
    );
    s.assert_restored();
}

/// A job plan (`scope = "job"`, two regions with different settings) for region switching.
fn job_plan(dir: &Path) -> PathBuf {
    let plan = dir.join("regions.toml");
    let region = |name: &str, mhz: f64| {
        format!(
            "[[region]]\nname = \"{name}\"\nsetting = {{ core_freq_mhz = {mhz:.1} }}\ntime_s = 1.0\nenergy_j = 1.0\npower_w = 1.0\nreference_time_s = 1.0\nreference_energy_j = 1.0\nenergy_saving = 0.0\nslowdown = 0.0\n\n"
        )
    };
    std::fs::write(
        &plan,
        format!(
            "[plan]\nobjective = \"energy\"\nmax_slowdown = 0.05\nmodel = \"hand-written\"\ncreated = \"2026-01-01T00:00:00Z\"\nscope = \"job\"\n\n[[device]]\nkind = \"cpu\"\nknobs = [\"core_freq_mhz\"]\ndefault = {{ core_freq_mhz = 2400.0 }}\n\n{}{}",
            region("load", 1200.0),
            region("compute", 2000.0)
        ),
    )
    .unwrap();
    plan
}

/// Item 11: the control socket bounds its lines. One 64 MiB line (no newline needed) used
/// to be read whole into powerperf's memory (200 MB took the root process to 213 MB); now
/// the connection is closed after the limit, the refusal is logged, and powerperf's peak
/// memory stays far below the line's size.
#[test]
fn a_control_line_longer_than_the_limit_is_refused_and_memory_stays_bounded() {
    let test = "a_control_line_longer_than_the_limit_is_refused_and_memory_stays_bounded";
    if std::process::Command::new("python3")
        .arg("-c")
        .arg("pass")
        .status()
        .map(|s| !s.success())
        .unwrap_or(true)
    {
        println!("skipped: {test}: python3 is not installed");
        return;
    }
    let s = setup("cpufreq-userspace", 2400.0);
    let plan = job_plan(s.dir.path());
    let out = s.dir.path().join("hwm");
    let client = format!(
        r#"
import os, socket
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["POWERPERF_CTL_SOCKET"])
line = b"B " + b"x" * (64 << 20) + b"\n"
try:
    s.sendall(line)
    ack = s.recv(1)
except OSError as e:
    ack = b"closed"
del line
hwm = [l for l in open("/proc/%d/status" % os.getppid()) if l.startswith("VmHWM:")][0]
open("{}", "w").write("%s %s" % (ack.decode() or "eof", hwm.split()[1]))
"#,
        out.display()
    );
    let mut args = s.args();
    args[2] = plan.display().to_string();
    let o = powerperf()
        .args(&args)
        .args(["python3", "-c", &client])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(0), "{err}");
    let got = std::fs::read_to_string(&out).unwrap();
    let (ack, hwm_kb) = got.split_once(' ').unwrap();
    let hwm_kb: u64 = hwm_kb.trim().parse().unwrap();
    assert!(
        hwm_kb < 32 * 1024,
        "powerperf's peak memory reached {hwm_kb} kB for one 64 MiB control line (answer: {ack})"
    );
    assert_ne!(ack, "K", "a 64 MiB line was acknowledged");
    let log = std::fs::read_to_string(&s.log).unwrap();
    assert!(log.contains("\trefuse\tline longer than"), "{log}");
    s.assert_restored();
}

/// Item 12: `sudo powerperf apply --as-invoking-user -- CMD` runs CMD as SUDO_UID/SUDO_GID
/// with no supplementary groups, while powerperf (root) sets and restores the frequencies.
#[test]
fn as_invoking_user_runs_the_command_as_sudo_uid_without_root_groups() {
    let test = "as_invoking_user_runs_the_command_as_sudo_uid_without_root_groups";
    if !common::is_root() {
        println!("skipped: {test}: needs root (it stands for `sudo powerperf apply`)");
        return;
    }
    let s = setup("cpufreq-userspace", 1600.0);
    let f = s.root.join("sys/devices/system/cpu/cpu0/cpufreq");
    let script = format!("id -u; id -g; id -G; cat {0}/scaling_setspeed", f.display());
    let mut args = s.args();
    args.insert(1, "--as-invoking-user".into());
    let o = powerperf()
        .args(&args)
        .args(["sh", "-c", &script])
        .current_dir("/")
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .env("SUDO_USER", "nobody")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(
        String::from_utf8_lossy(&o.stdout),
        "65534\n65534\n65534\n1600000\n",
        "{err}"
    );
    s.assert_restored();
    // without the option the command runs as root, as under perf and likwid-perfctr, and
    // powerperf says how to drop
    let o = powerperf()
        .args(s.args())
        .args(["id", "-u"])
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "0\n");
    assert!(err.contains("--as-invoking-user"), "{err}");
    // no sudo: the option cannot guess a user
    let o = powerperf().args(&args).arg("true").output().unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(!o.status.success());
    assert!(err.contains("SUDO_UID"), "{err}");
    s.assert_restored();
}

/// Item 12 with region switching: the command runs as SUDO_UID and its connection (from
/// that uid) is accepted: the socket and its directory are handed to that user, the peer
/// check expects that uid.
#[test]
fn as_invoking_user_region_switching_accepts_the_commands_connection() {
    let test = "as_invoking_user_region_switching_accepts_the_commands_connection";
    if !common::is_root() {
        println!("skipped: {test}: needs root (it stands for `sudo powerperf apply`)");
        return;
    }
    // a python3 every user can run (a pyenv shim under /root is not)
    let Some(py) = ["/usr/bin/python3", "/usr/local/bin/python3"]
        .into_iter()
        .find(|p| Path::new(p).exists())
    else {
        println!("skipped: {test}: no /usr/bin/python3");
        return;
    };
    let s = setup("cpufreq-userspace", 2400.0);
    let plan = job_plan(s.dir.path());
    let client = r#"
import os, socket
s = socket.socket(socket.AF_UNIX)
s.connect(os.environ["POWERPERF_CTL_SOCKET"])
out = [str(os.getuid())]
for m in ["B load", "E load"]:
    s.sendall((m + "\n").encode())
    out.append(s.recv(1).decode())
print(" ".join(out))
"#;
    // the record and the log in a root-only state directory (as /var/lib/powerperf): the
    // command's user must still reach the socket
    let state = s.dir.path().join("state");
    let o = powerperf()
        .args(["apply", "--as-invoking-user", "--plan"])
        .arg(&plan)
        .arg("--sysfs-root")
        .arg(&s.root)
        .arg("--state-dir")
        .arg(&state)
        .args(["--", py, "-c", client])
        .current_dir("/")
        .env("SUDO_UID", "65534")
        .env("SUDO_GID", "65534")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(o.status.success(), "{err}");
    assert_eq!(String::from_utf8_lossy(&o.stdout), "65534 K K\n", "{err}");
    let log = std::fs::read_to_string(state.join("powerperf-switches.log")).unwrap();
    assert!(log.contains("\tregion\tB load\t2400\t1200"), "{log}");
    assert!(!log.contains("\tdeny\t"), "{log}");
    assert!(!state.join("powerperf-restore.toml").exists());
    s.assert_restored();
}

/// `--state-dir` (and `POWERPERF_STATE_DIR`) must be a private directory of this user: a
/// symbolic link or a directory others can open is refused with the fix, before anything
/// changes; a missing one is created 0700 and holds the record and the log.
#[test]
fn state_dir_must_be_private() {
    use std::os::unix::fs::PermissionsExt;
    let s = setup("cpufreq-userspace", 1600.0);
    let run = |extra: &[&str], env: Option<&Path>| {
        let mut c = powerperf();
        c.arg("apply")
            .args(extra)
            .arg("--plan")
            .arg(&s.plan)
            .arg("--sysfs-root")
            .arg(&s.root);
        if let Some(e) = env {
            c.env("POWERPERF_STATE_DIR", e);
        }
        c.args(["--", "true"]).output().unwrap()
    };
    let open = s.dir.path().join("open");
    std::fs::create_dir(&open).unwrap();
    chmod(&open, 0o755);
    let link = s.dir.path().join("link");
    std::os::unix::fs::symlink(&open, &link).unwrap();
    for (o, named) in [
        (
            run(&["--state-dir", &open.display().to_string()], None),
            "mode 0755",
        ),
        (
            run(&["--state-dir", &link.display().to_string()], None),
            "symbolic link",
        ),
        (run(&[], Some(&open)), "POWERPERF_STATE_DIR"),
        (run(&["--state-dir", "relative/dir"], None), "absolute"),
    ] {
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!o.status.success(), "{err}");
        assert!(err.contains(named), "{err}");
        s.assert_restored();
    }
    let fresh = s.dir.path().join("fresh");
    let o = run(&["--state-dir", &fresh.display().to_string()], None);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(
        std::fs::metadata(&fresh).unwrap().permissions().mode() & 0o777,
        0o700
    );
    assert!(fresh.join("powerperf-switches.log").exists());
    assert!(!fresh.join("powerperf-restore.toml").exists());
    s.assert_restored();
}
