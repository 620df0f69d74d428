//! `powerperf apply` tests (tests/dvfs_apply.rs, tests/dvfs_apply_attacks.rs): copies of
//! the cpufreq fixture trees with a plan, and the checks that the original settings are
//! back.

use super::copy_tree;

use assert_cmd::Command;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

pub fn fixture_src(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

/// Every file of the tree, relative path -> contents.
pub fn snapshot(root: &Path) -> Vec<(PathBuf, String)> {
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

pub struct Setup {
    pub dir: tempfile::TempDir,
    pub root: PathBuf,
    pub plan: PathBuf,
    pub record: PathBuf,
    pub log: PathBuf,
    pub original: Vec<(PathBuf, String)>,
}

pub fn setup(fixture: &str, mhz: f64) -> Setup {
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
    pub fn args(&self) -> Vec<String> {
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
    pub fn cmd(&self, child: &str) -> Command {
        let mut c = Command::cargo_bin("powerperf").unwrap();
        c.args(self.args()).args(["sh", "-c", child]);
        c
    }
    /// Every file as it was. `scaling_setspeed` reads `<unsupported>` on a real kernel
    /// whenever the governor is not userspace and cannot be written back; a plain fixture
    /// file keeps the last value written, so it is compared only when the original was a
    /// frequency (the governor files, compared too, show the userspace governor is gone).
    pub fn assert_restored(&self) {
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
    pub fn file(&self, cpu: u32, name: &str) -> String {
        std::fs::read_to_string(
            self.root
                .join(format!("sys/devices/system/cpu/cpu{cpu}/cpufreq/{name}")),
        )
        .unwrap()
        .trim()
        .to_string()
    }
}

/// Start powerperf with a child that writes its pid and sleeps; returns (powerperf, child pid).
pub fn start_sleeping(s: &Setup) -> (std::process::Child, i32) {
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

/// A job plan (`scope = "job"`, two regions with different settings) for region switching.
pub fn job_plan(dir: &Path) -> PathBuf {
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

/// A C program linked with powerperf-rt (`libpowerperf_rt.so` in `libdir`, found through
/// its rpath), built in `dir` with gcc: it enters the regions `load` (with `unplanned` nested)
/// and `compute`, and writes the file `argv[1]` (e.g. scaling_setspeed) as seen at the start,
/// in each region and between them into `argv[2]`.
pub fn region_program(dir: &Path, libdir: &Path) -> PathBuf {
    let src = dir.join("prog.c");
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
    let exe = dir.join("prog");
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
    exe
}

/// The region lines of a switch log, as `KIND REGION FROM->TO` (e.g. `B load 2400->1200`),
/// in order.
pub fn region_switches(log: &str) -> Vec<String> {
    log.lines()
        .filter(|l| l.contains("\tregion\t"))
        .map(|l| {
            let c: Vec<&str> = l.split('\t').collect();
            format!("{} {}->{}", c[3], c[4], c[5])
        })
        .collect()
}
