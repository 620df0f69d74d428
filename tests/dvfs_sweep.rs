//! `powerperf sweep` end to end through the real binary on a copy of the cpufreq fixture.

mod common;
use common::copy_tree;

use assert_cmd::Command;
use predicates::prelude::*;
use std::path::{Path, PathBuf};

struct Setup {
    dir: tempfile::TempDir,
    root: PathBuf,
}

fn setup() -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    std::fs::create_dir_all(&root).unwrap();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/sysfs/cpufreq-userspace"),
        &root,
    );
    Setup { dir, root }
}

impl Setup {
    fn sweep(&self, extra: &[&str], child: &str) -> Command {
        let mut c = Command::cargo_bin("powerperf").unwrap();
        c.arg("sweep")
            .arg("-o")
            .arg(self.dir.path().join("set"))
            .arg("--sysfs-root")
            .arg(&self.root)
            .arg("--restore-file")
            .arg(self.dir.path().join("restore.toml"))
            .arg("--log")
            .arg(self.dir.path().join("switches.log"))
            .args(["--interval", "0s"])
            .args(extra)
            .args(["--", "sh", "-c", child]);
        c
    }
    fn governor(&self, cpu: u32) -> String {
        std::fs::read_to_string(self.root.join(format!(
            "sys/devices/system/cpu/cpu{cpu}/cpufreq/scaling_governor"
        )))
        .unwrap()
        .trim()
        .to_string()
    }
}

#[test]
fn sweep_runs_the_grid_restores_and_resumes() {
    let s = setup();
    let seen = s.dir.path().join("seen");
    let f0 = s
        .root
        .join("sys/devices/system/cpu/cpu0/cpufreq/scaling_setspeed");
    let child = format!(
        "echo \"$(cat {}) $OMP_NUM_THREADS\" >> {}",
        f0.display(),
        seen.display()
    );
    let grid = ["--freq", "1.2GHz,max", "--threads", "1,2", "--repeat", "2"];
    s.sweep(&grid, &child).assert().success().stderr(
        predicate::str::contains("8 runs done, 0 skipped")
            .and(predicate::str::contains("8 points")),
    );
    // each run saw its frequency (kHz in sysfs) and thread count, frequency outermost
    let lines: Vec<String> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(
        lines,
        [
            "1200000 1",
            "1200000 1",
            "1200000 2",
            "1200000 2",
            "2400000 1",
            "2400000 1",
            "2400000 2",
            "2400000 2"
        ]
    );
    assert_eq!(s.governor(0), "schedutil");
    assert_eq!(s.governor(1), "schedutil");
    assert!(!s.dir.path().join("restore.toml").exists());
    let set = powerperf_format::set::TrainingSet::read(&s.dir.path().join("set")).unwrap();
    assert_eq!(set.points.len(), 8);
    assert_eq!(set.knob_values("core_freq_mhz"), vec![1200.0, 2400.0]);
    assert_eq!(set.knob_values("threads"), vec![1.0, 2.0]);
    // resume: one finished run removed, one left half-written
    let runs = s.dir.path().join("set/runs");
    std::fs::remove_dir_all(runs.join("f2400_t2_r1")).unwrap();
    std::fs::remove_file(runs.join("f1200_t1_r0/run.toml")).unwrap();
    s.sweep(&grid, &child).assert().success().stderr(
        predicate::str::contains("6 of 8 runs already finished")
            .and(predicate::str::contains("2 runs done")),
    );
    assert_eq!(std::fs::read_to_string(&seen).unwrap().lines().count(), 10);
    assert_eq!(s.governor(0), "schedutil");
    // --format json: the summary as one object on the last stderr line (all runs finished)
    let mut g = grid.to_vec();
    g.extend(["--format", "json"]);
    let o = s.sweep(&g, &child).output().unwrap();
    assert!(o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    let j: serde_json::Value = serde_json::from_str(err.lines().last().unwrap()).unwrap();
    assert_eq!(
        (j["ran"].clone(), j["skipped"].clone(), j["points"].clone()),
        (0.into(), 8.into(), 8.into()),
        "{j}"
    );
    assert_eq!(j["exit_status"], 0);
    // dry-run lists and changes nothing
    s.sweep(&["--freq", "min", "--dry-run"], &child)
        .assert()
        .success()
        .stderr(
            predicate::str::contains("cpu1/cpufreq/scaling_governor: schedutil -> userspace")
                .and(predicate::str::contains("-> 1200000")),
        );
    assert_eq!(std::fs::read_to_string(&seen).unwrap().lines().count(), 10);
    // another command into the same set is refused
    s.sweep(&grid, "true")
        .assert()
        .failure()
        .stderr(predicate::str::contains("choose another -o directory"));
}

#[test]
fn sweep_refuses_bad_frequencies_and_missing_cpufreq() {
    let s = setup();
    let marker = s.dir.path().join("ran");
    let child = format!("touch {}", marker.display());
    s.sweep(&["--freq", "1.7GHz"], &child)
        .assert()
        .failure()
        .stderr(predicate::str::contains("1700 MHz is outside"));
    s.sweep(&["--freq", "fast"], &child)
        .assert()
        .failure()
        .stderr(predicate::str::contains("`fast` is not a frequency"));
    assert!(!marker.exists());
    let empty = s.dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    let mut c = Command::cargo_bin("powerperf").unwrap();
    c.arg("sweep")
        .arg("-o")
        .arg(s.dir.path().join("set2"))
        .arg("--sysfs-root")
        .arg(&empty)
        .args(["--freq", "max", "--", "sh", "-c", &child]);
    c.assert().failure().stderr(
        predicate::str::contains("no cpufreq").and(predicate::str::contains("leave out --freq")),
    );
    assert!(!marker.exists());
}

#[test]
fn a_sweep_record_planted_as_a_link_is_refused_and_its_target_untouched() {
    // `sudo powerperf sweep -o DIR`: DIR is the user's, so its sweep.toml may be a link to a
    // file only root can write. The sweep must neither read through it nor write through it.
    let s = setup();
    let set = s.dir.path().join("set");
    std::fs::create_dir_all(set.join("runs")).unwrap();
    let victim = s.dir.path().join("victim");
    std::fs::write(&victim, "keep\n").unwrap();
    std::os::unix::fs::symlink(&victim, set.join("sweep.toml")).unwrap();
    let marker = s.dir.path().join("ran");
    let governor = s.governor(0);
    s.sweep(&["--freq", "max"], &format!("touch {}", marker.display()))
        .assert()
        .failure()
        .stderr(predicate::str::contains("symbolic link"));
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "keep\n");
    assert!(!marker.exists(), "the command ran");
    assert_eq!(s.governor(0), governor);
    // A record that is a FIFO is refused at once instead of hanging the sweep.
    std::fs::remove_file(set.join("sweep.toml")).unwrap();
    let fifo = std::ffi::CString::new(set.join("sweep.toml").to_str().unwrap()).unwrap();
    // SAFETY: fifo is a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o644) }, 0);
    s.sweep(&["--freq", "max"], &format!("touch {}", marker.display()))
        .timeout(std::time::Duration::from_secs(60))
        .assert()
        .failure()
        .stderr(predicate::str::contains("FIFO"));
    assert!(!marker.exists(), "the command ran");
}
