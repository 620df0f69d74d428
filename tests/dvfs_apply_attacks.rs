//! `powerperf apply` hardened against its inputs: attacks by another user on the restore
//! record, the log, the lock, the control socket and the state directory, and the command
//! run as the invoking user, through the real binary on copies of the cpufreq fixture trees.

mod common;
use common::apply::{job_plan, setup, start_sleeping};

use assert_cmd::Command;
use std::path::Path;

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
    // SAFETY: kill(2) takes two integers and touches no memory of ours; the pid is our child's,
    // not yet reaped, so it names no other process.
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
    // SAFETY: kill(2) takes two integers and touches no memory of ours; the pid is our child's,
    // not yet reaped, so it names no other process.
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
