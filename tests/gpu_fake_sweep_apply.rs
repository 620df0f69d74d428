//! Issue 39, items 4 to 6, on a copy of tests/fixtures/fake-gpu (no GPU, no root needed):
//! `sweep --gpu-clock` with repeats → `fit` → `plan --model` (a GPU plan) → `apply`, the
//! command seeing the locked clock and the fake GPU's files byte-identical afterwards; an
//! unsupported clock refused with nothing changed; the restore on SIGTERM, SIGINT, a
//! crashing command, and (through `apply --restore`) after a SIGKILL.

mod common;
use common::{copy_tree, powerperf as pp};

use predicates::prelude::*;
use std::collections::BTreeMap;
use std::ffi::OsString;
use std::path::{Path, PathBuf};

struct Fake {
    dir: tempfile::TempDir,
    gpu: PathBuf,
}

fn fake() -> Fake {
    let dir = tempfile::tempdir().unwrap();
    let gpu = dir.path().join("fake-gpu");
    std::fs::create_dir_all(&gpu).unwrap();
    copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/fake-gpu"),
        &gpu,
    );
    Fake { dir, gpu }
}

impl Fake {
    /// Every file of the fake GPU, bytes.
    fn files(&self) -> BTreeMap<String, Vec<u8>> {
        let mut m = BTreeMap::new();
        for e in std::fs::read_dir(self.gpu.join("gpu0")).unwrap() {
            let e = e.unwrap();
            m.insert(
                e.file_name().to_string_lossy().to_string(),
                std::fs::read(e.path()).unwrap(),
            );
        }
        m
    }
    fn p(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    fn locked(&self) -> String {
        std::fs::read_to_string(self.gpu.join("gpu0/locked_clocks_mhz"))
            .unwrap()
            .trim()
            .to_string()
    }
    /// `--fake-gpu DIR --restore-file … --log …`: the fake GPU, the record and log in the
    /// temporary directory.
    fn fake_args(&self) -> Vec<OsString> {
        vec![
            "--fake-gpu".into(),
            self.gpu.clone().into(),
            "--restore-file".into(),
            self.p("restore.toml").into(),
            "--log".into(),
            self.p("switches.log").into(),
        ]
    }
    /// The arguments of `powerperf sweep -o SET` on the fake GPU running `sh -c child`.
    fn sweep_args(&self, set: &str, extra: &[&str], child: &str) -> Vec<OsString> {
        let mut a: Vec<OsString> = vec!["sweep".into(), "-o".into(), self.p(set).into()];
        a.extend(self.fake_args());
        a.extend(extra.iter().map(OsString::from));
        a.extend(["--", "sh", "-c", child].map(OsString::from));
        a
    }
    /// `powerperf sweep` on the fake GPU.
    fn sweep(&self, set: &str, extra: &[&str], child: &str) -> assert_cmd::Command {
        let mut c = pp();
        c.args(self.sweep_args(set, extra, child));
        c
    }
    /// The same sweep as a `std` command (to be signalled), its stderr piped.
    fn sweep_std(&self, set: &str, extra: &[&str], child: &str) -> std::process::Command {
        let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_powerperf"));
        c.args(self.sweep_args(set, extra, child))
            .stderr(std::process::Stdio::piped());
        c
    }
    /// `powerperf apply --plan PLAN` on the fake GPU; the caller adds `-- COMMAND`.
    fn apply(&self, plan: &Path) -> assert_cmd::Command {
        let mut c = pp();
        c.args(["apply", "--plan"]).arg(plan).args(self.fake_args());
        c
    }
    /// `powerperf fit SET --no-loo EXTRA -o MODEL` of the set `set`.
    fn fit(&self, set: &str, extra: &[&str], model: &Path) -> assert_cmd::Command {
        let mut c = pp();
        c.arg("fit")
            .arg(self.p(set))
            .arg("--no-loo")
            .args(extra)
            .arg("-o")
            .arg(model);
        c
    }
    /// `powerperf plan --model MODEL --objective energy --slowdown-margin 0 -o PLAN`, run.
    fn plan_energy(&self, model: &Path, plan: &Path) -> powerperf_node::plan_file::Plan {
        pp().args(["plan", "--model"])
            .arg(model)
            .args(["--objective", "energy", "--slowdown-margin", "0", "-o"])
            .arg(plan)
            .assert()
            .success();
        powerperf_node::plan_file::Plan::read(plan).unwrap()
    }
    /// Wait (up to 30 s) until the command of a spawned sweep has made `started`.
    fn wait_for(started: &Path) {
        let t0 = std::time::Instant::now();
        while !started.exists() {
            assert!(t0.elapsed().as_secs() < 30, "the command never started");
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}

/// A static (per-workload) plan for GPU 0 with one region `a`: the device's knobs, its
/// default and the region's setting as TOML inline-table bodies.
fn static_gpu_plan(knobs: &str, default: &str, setting: &str) -> String {
    format!(
        "[plan]\nobjective = \"energy\"\nmodel = \"hand-written\"\ncreated = \"2026-01-01T00:00:00Z\"\nscope = \"per_workload\"\n\n[[device]]\nkind = \"gpu\"\nindex = 0\nknobs = [{knobs}]\ndefault = {{ {default} }}\n\n[[region]]\nname = \"a\"\nsetting = {{ {setting} }}\ntime_s = 1.0\nenergy_j = 1.0\npower_w = 1.0\nreference_time_s = 1.0\nreference_energy_j = 1.0\nenergy_saving = 0.0\nslowdown = 0.0\n"
    )
}

/// A command whose run time is 60/f s at the fake GPU's locked SM clock f (a compute-bound
/// kernel's 1/f), that appends the lock it saw to `seen`.
fn clock_bound(f: &Fake, seen: &Path) -> String {
    format!(
        "l=$(cat {0}/gpu0/locked_clocks_mhz); echo \"$l\" >> {1}; c=${{l#* }}; sleep $(awk -v c=$c 'BEGIN {{ printf \"%.3f\", 60 / c }}')",
        f.gpu.display(),
        seen.display()
    )
}

#[test]
fn sweep_fit_plan_apply_on_a_fake_gpu_restores_every_file() {
    let f = fake();
    let before = f.files();
    let seen = f.p("seen");
    let child = clock_bound(&f, &seen);
    f.sweep(
        "set",
        &[
            "--gpu-clock",
            "1200,1500,1980",
            "--repeat",
            "2",
            "--warmup",
            "1",
            "--interval",
            "5ms",
            "--workload",
            "kernel",
        ],
        &child,
    )
    .assert()
    .success()
    .stderr(
        predicate::str::contains("9 runs done")
            .and(predicate::str::contains("6 points"))
            .and(predicate::str::contains(
                "nvmlDeviceSetGpuLockedClocks(device 0, minGpuClockMHz 1200, maxGpuClockMHz 1200)",
            ))
            .and(predicate::str::contains(
                "restored: nvmlDeviceResetGpuLockedClocks(device 0)",
            )),
    );
    // each run (one warm-up and two repeats per clock) saw its clock locked
    let lines: Vec<String> = std::fs::read_to_string(&seen)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    let want: Vec<String> = ["1200 1200", "1500 1500", "1980 1980"]
        .iter()
        .flat_map(|l| std::iter::repeat_n(l.to_string(), 3))
        .collect();
    assert_eq!(lines, want);
    assert_eq!(f.files(), before, "the fake GPU's files changed");
    assert!(!f.p("powerperf-gpu-restore.toml").exists() && !f.p("restore.toml.gpu").exists());
    // the set: GPU knobs on gpu0, the warm-up runs left out, requested = observed
    let set = powerperf_format::set::TrainingSet::read(&f.p("set")).unwrap();
    assert_eq!(set.points.len(), 6);
    assert_eq!(
        set.knob_values("core_freq_mhz"),
        vec![1200.0, 1500.0, 1980.0]
    );
    assert_eq!(set.meta.knob_devices["core_freq_mhz"], "gpu0");
    assert!(f.p("set/warmup").is_dir());
    for p in &set.points {
        // energy is the fake GPU's: its constant 250.5 W integrated over the run
        let pw = p.power_w.expect("GPU power");
        assert!((pw - 250.5).abs() < 30.0, "{p:?}");
    }
    let run = powerperf_format::run::RunMeta::read(&f.p("set/runs/f-_t-_r0_g1500")).unwrap();
    let g = run.gpu_setting.expect("[gpu_setting]");
    assert_eq!(
        (
            g.requested_sm_clock_mhz,
            g.observed_sm_clock_mhz,
            g.flag.as_deref()
        ),
        (Some(1500.0), Some(1500.0), None)
    );
    assert!(g.samples > 0 && g.observed_power_w == Some(250.5), "{g:?}");
    // fit, then a GPU plan
    let model = f.p("model.json");
    f.fit("set", &[], &model).assert().success();
    let plan = f.p("plan.toml");
    let pl = f.plan_energy(&model, &plan);
    let dev = pl.device_of("core_freq_mhz").expect("a device");
    assert_eq!(dev.kind, powerperf_node::plan_file::DeviceKind::Gpu);
    let clock = pl.regions[0].setting["core_freq_mhz"];
    assert!([1200.0, 1500.0, 1980.0].contains(&clock), "{clock}");
    // apply: the command sees the plan's clock locked (the maximum too), all put back
    let seen2 = f.p("seen2");
    f.apply(&plan)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "cat {} > {}",
            f.gpu.join("gpu0/locked_clocks_mhz").display(),
            seen2.display()
        ))
        .assert()
        .success()
        .stderr(predicate::str::contains("original GPU settings restored"));
    assert_eq!(
        std::fs::read_to_string(&seen2).unwrap().trim(),
        format!("{clock} {clock}")
    );
    assert_eq!(f.files(), before, "the fake GPU's files changed");
    // the switch log has the GPU's set and restore
    let log = std::fs::read_to_string(f.p("switches.log")).unwrap();
    assert!(
        log.contains("\tset\tgpu0\t") && log.contains("\trestore\tgpu0\t"),
        "{log}"
    );
}

#[test]
fn unsupported_clock_and_limit_are_refused_with_nothing_changed() {
    let f = fake();
    let before = f.files();
    let marker = f.p("ran");
    let child = format!("touch {}", marker.display());
    // 1234 MHz where 1200 and 1500 are listed: refused before anything runs or changes
    f.sweep("set", &["--gpu-clock", "1500,1234"], &child)
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("1234 MHz is not a supported clock")
                .and(predicate::str::contains("1200 MHz or 1500 MHz")),
        );
    f.sweep("set", &["--gpu-power-limit", "900"], &child)
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("power limit 900 W")
                .and(predicate::str::contains("200..700 W")),
        );
    f.sweep("set", &["--gpu-clock", "1200", "--gpu", "3"], &child)
        .assert()
        .failure()
        .stderr(predicate::str::contains("GPU 3 does not exist"));
    // no memory-clock lock on this GPU: refused with the reason
    std::fs::remove_file(f.gpu.join("gpu0/mem_locked_clocks_mhz")).unwrap();
    f.sweep("set", &["--gpu-mem-clock", "1593"], &child)
        .assert()
        .failure()
        .stderr(predicate::str::contains("has no memory-clock lock"));
    let mut before_no_mem = before.clone();
    before_no_mem.remove("mem_locked_clocks_mhz");
    assert!(!marker.exists());
    assert_eq!(f.files(), before_no_mem);
    assert!(!f.p("set/runs").exists());
    // the same clock in a plan given to apply
    let plan = f.p("plan.toml");
    std::fs::write(
        &plan,
        static_gpu_plan(
            "\"core_freq_mhz\"",
            "core_freq_mhz = 1234.0",
            "core_freq_mhz = 1234.0",
        ),
    )
    .unwrap();
    f.apply(&plan)
        .args(["--", "sh", "-c", &child])
        .assert()
        .failure()
        .stderr(
            predicate::str::contains("1200 MHz or 1500 MHz")
                .and(predicate::str::contains("the command did not run")),
        );
    assert!(!marker.exists());
    assert_eq!(f.files(), before_no_mem);
}

/// Start a sweep whose command sleeps; wait until the clock is locked; signal powerperf.
fn sweep_signalled(sig: i32) {
    let f = fake();
    let before = f.files();
    let started = f.p("started");
    let child = format!("touch {}; exec sleep 30", started.display());
    let p = f
        .sweep_std("set", &["--gpu-clock", "1200", "--interval", "0s"], &child)
        .spawn()
        .unwrap();
    Fake::wait_for(&started);
    assert_eq!(f.locked(), "1200 1200");
    // SAFETY: kill(2) takes two integers and touches no memory of ours; the pid is our child's,
    // not yet reaped, so it names no other process.
    unsafe { libc::kill(p.id() as i32, sig) };
    let out = p.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(128 + sig), "{out:?}");
    assert_eq!(f.files(), before, "not restored after signal {sig}");
    assert!(!f.p("powerperf-gpu-restore.toml").exists() && !f.p("restore.toml.gpu").exists());
}

#[test]
fn sigterm_during_a_gpu_sweep_restores() {
    sweep_signalled(libc::SIGTERM);
}

#[test]
fn sigint_during_a_gpu_sweep_restores() {
    sweep_signalled(libc::SIGINT);
}

#[test]
fn a_crashing_command_is_left_out_and_the_gpu_restored() {
    let f = fake();
    let before = f.files();
    f.sweep(
        "set",
        &[
            "--gpu-clock",
            "1200,1500",
            "--gpu-power-limit",
            "300",
            "--interval",
            "0s",
        ],
        "kill -SEGV $$",
    )
    .assert()
    .failure()
    .stderr(predicate::str::contains("no usable run"));
    assert_eq!(f.files(), before);
    // apply: the command crashes, the GPU is put back
    let plan = f.p("plan.toml");
    std::fs::write(
        &plan,
        static_gpu_plan(
            "\"core_freq_mhz\", \"power_limit_w\"",
            "core_freq_mhz = 1980.0, power_limit_w = 700.0",
            "core_freq_mhz = 1980.0, power_limit_w = 450.0",
        ),
    )
    .unwrap();
    let seen = f.p("seen");
    f.apply(&plan)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "cat {0}/gpu0/locked_clocks_mhz {0}/gpu0/power_limit_w > {1}; kill -SEGV $$",
            f.gpu.display(),
            seen.display()
        ))
        .assert()
        .code(128 + libc::SIGSEGV);
    // the maximum clock is locked too, and the power limit set
    assert_eq!(std::fs::read_to_string(&seen).unwrap(), "1980 1980\n450\n");
    assert_eq!(f.files(), before);
}

#[test]
fn after_sigkill_apply_restore_replays_the_gpu_record() {
    let f = fake();
    let before = f.files();
    let started = f.p("started");
    let pidfile = f.p("pid");
    let child = format!(
        "echo $$ > {}; touch {}; exec sleep 30",
        pidfile.display(),
        started.display()
    );
    let p = f
        .sweep_std(
            "set",
            &[
                "--gpu-clock",
                "1200",
                "--gpu-power-limit",
                "300",
                "--interval",
                "0s",
            ],
            &child,
        )
        .spawn()
        .unwrap();
    Fake::wait_for(&started);
    // SAFETY: kill(2) takes two integers and touches no memory of ours; the pid is our child's,
    // not yet reaped, so it names no other process.
    unsafe { libc::kill(p.id() as i32, libc::SIGKILL) };
    let _ = p.wait_with_output();
    assert_eq!(f.locked(), "1200 1200");
    let record = f.p("restore.toml.gpu");
    assert!(record.exists(), "no GPU restore record after SIGKILL");
    pp().args(["apply", "--restore", "--restore-file"])
        .arg(f.p("restore.toml"))
        .assert()
        .success()
        .stderr(predicate::str::contains("restored 2 GPU setting(s)"));
    assert_eq!(f.files(), before);
    assert!(!record.exists());
    // the sleeping command, orphaned by the SIGKILL, is ended by the test (by its pid)
    if let Some(pid) = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|t| t.trim().parse::<i32>().ok())
    {
        // SAFETY: kill(2) takes two integers and touches no memory of ours (the pid is the
        // workload the killed powerperf started, read from its pid file).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// The 2 % rule: a GPU that does not reach its locked clock (the fake GPU's `sm_clock_mhz`
/// file stands for throttling) gives flagged points: in run.toml, in sweep.toml and by fit.
#[test]
fn a_point_off_its_requested_clock_is_flagged_in_the_set_and_by_fit() {
    let f = fake();
    std::fs::write(f.gpu.join("gpu0/sm_clock_mhz"), "1100\n").unwrap();
    // NVML's SwPowerCap | SwThermalSlowdown: the flag names them
    std::fs::write(f.gpu.join("gpu0/throttle_reasons"), "36\n").unwrap();
    let before = f.files();
    f.sweep(
        "set",
        &[
            "--gpu-clock",
            "1200,1980",
            "--repeat",
            "2",
            "--interval",
            "5ms",
        ],
        "sleep 0.05",
    )
    .assert()
    .success()
    .stderr(
        predicate::str::contains("f-_t-_r0_g1980 is flagged").and(predicate::str::contains(
            "1100.0 MHz is 44.4 % off the requested 1980 MHz",
        )),
    );
    assert_eq!(f.files(), before);
    let run = powerperf_format::run::RunMeta::read(&f.p("set/runs/f-_t-_r1_g1980")).unwrap();
    let g = run.gpu_setting.unwrap();
    assert_eq!(g.observed_sm_clock_mhz, Some(1100.0));
    assert_eq!(g.throttle_reasons, Some(36));
    let flag = g.flag.unwrap();
    assert!(flag.contains("more than 2 %"), "{flag}");
    assert!(
        flag.contains("throttle reasons over the run (NVML): SwPowerCap (power cap), SwThermalSlowdown (thermal, software)"),
        "{flag}"
    );
    assert_eq!(run.knobs.core_freq_mhz, Some(1980.0));
    assert_eq!(run.knobs.gpu_sm_clock_mhz, Some(1100.0));
    // 1200 requested, 1100 observed: 8.3 % off, flagged too
    let rec: powerperf_core::dvfs::sweep::SweepRecord =
        toml::from_str(&std::fs::read_to_string(f.p("set/sweep.toml")).unwrap()).unwrap();
    assert_eq!(rec.off_setting.len(), 4, "{rec:?}");
    assert!(
        rec.off_setting
            .iter()
            .all(|o| o.flag.contains("SwPowerCap (power cap)")),
        "{rec:?}"
    );
    f.fit("set", &[], &f.p("model.json"))
        .assert()
        .success()
        .stderr(
            predicate::str::contains("4 point(s)")
                .and(predicate::str::contains(
                    "not at their requested GPU setting",
                ))
                .and(predicate::str::contains(
                    "f-_t-_r0_g1200: observed mean SM clock 1100.0 MHz",
                ))
                .and(predicate::str::contains(
                    "throttle reasons over the run (NVML): SwPowerCap (power cap)",
                )),
        );
}

/// `collect --fake-gpu`: the fake GPU's power, clocks and energy become the gpu0_* columns,
/// without root or NVML.
#[test]
fn collect_reads_the_fake_gpu_as_it_would_nvml() {
    let f = fake();
    let run = f.p("run");
    pp().args(["collect", "--interval", "5ms", "--fake-gpu"])
        .arg(&f.gpu)
        .arg("-o")
        .arg(&run)
        .args(["--", "sleep", "0.05"])
        .assert()
        .success();
    let df = powerperf_format::timeline::read_run(&run).unwrap().unwrap();
    let col = |c: &str| powerperf_format::timeline::column_f64(&df, c).unwrap();
    assert!(!col("gpu0_power_w").is_empty());
    assert!(col("gpu0_power_w").iter().flatten().all(|w| *w == 250.5));
    assert!(col("gpu0_sm_clock_mhz")
        .iter()
        .flatten()
        .all(|c| *c == 1980.0));
    let meta = powerperf_format::run::RunMeta::read(&run).unwrap();
    assert!(
        meta.notes.iter().any(|n| n.contains("fake GPUs under")),
        "{:?}",
        meta.notes
    );
    pp().args(["collect", "--fake-gpu"])
        .arg(f.p("nowhere"))
        .arg("-o")
        .arg(f.p("run2"))
        .args(["--", "true"])
        .assert()
        .failure()
        .stderr(predicate::str::contains("holds no gpu0 directory"));
}

/// Issue 39, item 5: a job plan's GPU clocks switched at region boundaries on the fake
/// GPU, the default locked even though it is the maximum, everything put back; the time of
/// a switch on the fake GPU printed (the software path only: no value for
/// --transition-latency, which is the GPU's own transition).
#[test]
fn gpu_clocks_follow_regions_and_are_restored() {
    if !std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        println!("skipped: python3 is not installed");
        return;
    }
    let f = fake();
    let before = f.files();
    let plan = f.p("plan.toml");
    std::fs::write(
        &plan,
        common::gpu_job_plan(1980.0, &[("dgemm", 1500.0), ("stream", 1200.0)]),
    )
    .unwrap();
    let script = f.p("regions.py");
    std::fs::write(&script, common::GPU_REGIONS_PY).unwrap();
    let seen = f.p("seen");
    f.apply(&plan)
        .arg("--")
        .arg("python3")
        .arg(&script)
        .arg(&f.gpu)
        .arg(&seen)
        .assert()
        .success()
        .stderr(predicate::str::contains(
            "switching GPU 0's SM clock at region boundaries",
        ));
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "start 1980 1980\ndgemm 1500 1500\ninner 1500 1500\nbetween 1980 1980\nstream 1200 1200\nend 1980 1980\n"
    );
    assert_eq!(f.files(), before);
    // the switch log: each `region` line is followed by the GPU's `set`; the time between
    // them is one switch through the fake GPU
    let log = std::fs::read_to_string(f.p("switches.log")).unwrap();
    let rows: Vec<Vec<&str>> = log
        .lines()
        .skip(1)
        .map(|l| l.split('\t').collect())
        .collect();
    let mut dt: Vec<u64> = rows
        .windows(2)
        .filter(|w| w[0][2] == "region" && w[1][2] == "set")
        .map(|w| w[1][0].parse::<u64>().unwrap() - w[0][0].parse::<u64>().unwrap())
        .collect();
    assert!(dt.len() >= 40, "{log}");
    dt.sort_unstable();
    println!(
        "GPU clock switch on the fake GPU (software path: region event to locked_clocks_mhz written and logged), {} switches: median {:.1} µs, max {:.1} µs; not the GPU's own transition, no value for --transition-latency",
        dt.len(),
        dt[dt.len() / 2] as f64 / 1e3,
        dt[dt.len() - 1] as f64 / 1e3
    );
    assert!(
        log.lines().last().unwrap().contains("\trestore\tgpu0\t"),
        "{log}"
    );
}

/// As root, a fake GPU directory another user can write is refused (docs/security.md):
/// that user could point `gpu0` elsewhere and have root write the fake GPU's files there.
#[test]
fn as_root_a_fake_gpu_another_user_can_write_is_refused() {
    if !common::is_root() {
        println!("skipped: not root");
        return;
    }
    let f = fake();
    common::chown_nobody(&f.gpu.join("gpu0"));
    let before = f.files();
    let marker = f.p("ran");
    f.sweep(
        "set",
        &["--gpu-clock", "1200"],
        &format!("touch {}", marker.display()),
    )
    .assert()
    .failure()
    .stderr(predicate::str::contains("must be a directory of root's"));
    assert!(!marker.exists());
    assert_eq!(f.files(), before);
}

/// `power_limit_w` is a knob of the GPU like a clock: sweep → fit (scaling; the analytic
/// form has no power-limit term and says so) → a GPU plan → apply sets the limit (the
/// maximum too) and puts it back.
#[test]
fn a_power_limit_sweep_gives_a_gpu_plan_that_apply_sets() {
    let f = fake();
    let before = f.files();
    let child = format!(
        "l=$(cat {}/gpu0/power_limit_w); sleep $(awk -v c=$l 'BEGIN {{ printf \"%.3f\", 15 / c }}')",
        f.gpu.display()
    );
    f.sweep(
        "set",
        &[
            "--gpu-power-limit",
            "300,500,700",
            "--repeat",
            "2",
            "--interval",
            "5ms",
        ],
        &child,
    )
    .assert()
    .success();
    assert_eq!(f.files(), before);
    let set = powerperf_format::set::TrainingSet::read(&f.p("set")).unwrap();
    assert_eq!(set.knob_values("power_limit_w"), vec![300.0, 500.0, 700.0]);
    assert_eq!(set.meta.knob_devices["power_limit_w"], "gpu0");
    f.fit("set", &["--model", "analytic"], &f.p("auto.json"))
        .assert()
        .failure()
        .stderr(predicate::str::contains(
            "--model scaling (or linear) for a GPU power-limit sweep",
        ));
    let model = f.p("model.json");
    f.fit("set", &["--model", "auto"], &model)
        .assert()
        .success();
    let plan = f.p("plan.toml");
    let pl = f.plan_energy(&model, &plan);
    assert_eq!(
        pl.device_of("power_limit_w").map(|d| d.kind),
        Some(powerperf_node::plan_file::DeviceKind::Gpu)
    );
    let w = pl.regions[0].setting["power_limit_w"];
    let seen = f.p("seen");
    f.apply(&plan)
        .args(["--", "sh", "-c"])
        .arg(format!(
            "cat {}/gpu0/power_limit_w > {}",
            f.gpu.display(),
            seen.display()
        ))
        .assert()
        .success();
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap().trim(),
        format!("{w}")
    );
    assert_eq!(f.files(), before);
}
