//! Issue 43, item 1 (`sweep` and `apply` go through the one device abstraction): as root,
//! without powerperfd and without NVML, `powerperf sweep` and `powerperf apply` set the
//! clocks and power limit of an Intel GPU found under `--sysfs-root` (copies of
//! `tests/fixtures/sysfs/{i915,xe}`), the command sees the values in the files, and the
//! tree is byte-identical afterwards; a clock outside RPn..RP0 is refused with nothing
//! changed; after a SIGKILL, `apply --restore` reopens the same tree from the GPU restore
//! record's `sysfs_root` and puts it back. The GPU controls are those of powerperfd
//! (`powerperf_node::gpu_control::node::open_node_gpus`). Tests print `skipped: …` when not
//! root (CI runs as root) and when NVML has a GPU here (the sysfs GPU would not be GPU 0).

mod common;
use common::{copy_tree, files, is_root, powerperf as pp};

use predicates::prelude::*;
use std::path::{Path, PathBuf};

const I915: &str = "sys/class/hwmon/hwmon1";
const I915_FREQ: &str = "sys/class/hwmon/hwmon1/device/drm/card0";
const XE: &str = "sys/class/hwmon/hwmon2";
const XE_GT0: &str = "sys/class/hwmon/hwmon2/device/tile0/gt0/freq0";
const XE_GT1: &str = "sys/class/hwmon/hwmon2/device/tile1/gt1/freq0";

struct Tree {
    dir: tempfile::TempDir,
    root: PathBuf,
    fixture: PathBuf,
}

/// A copy of the fixture tree `name` in a temporary directory; `None` (with `skipped: …`)
/// when not root or when NVML has a GPU (then NVML's GPU is GPU 0).
fn tree(test: &str, name: &str) -> Option<Tree> {
    if !is_root() {
        println!("skipped: {test}: needs root (sweep and apply write GPU controls only as root)");
        return None;
    }
    tree_any_user(test, name)
}

/// As [`tree`], for any user (a dry run writes nothing).
fn tree_any_user(test: &str, name: &str) -> Option<Tree> {
    if powerperf_node::gpu_control::nvml::NvmlGpu::open().is_ok() {
        println!("skipped: {test}: NVML has a GPU here, so the sysfs GPU is not GPU 0 (and no real GPU is touched by this test)");
        return None;
    }
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("root");
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name);
    std::fs::create_dir_all(&root).unwrap();
    copy_tree(&fixture, &root);
    Some(Tree { dir, root, fixture })
}

impl Tree {
    fn p(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }
    /// The tree is the fixture, byte for byte.
    fn assert_restored(&self) {
        assert_eq!(
            files(&self.root),
            files(&self.fixture),
            "the tree is not restored"
        );
    }
    /// A command that appends the contents of `paths` (relative to the root), one line
    /// each, to the file `seen`.
    fn cat(&self, paths: &[&str]) -> String {
        let f: Vec<String> = paths
            .iter()
            .map(|p| self.root.join(p).display().to_string())
            .collect();
        format!("cat {} >> {}", f.join(" "), self.p("seen").display())
    }
    fn seen(&self) -> Vec<String> {
        std::fs::read_to_string(self.p("seen"))
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
    /// `--sysfs-root ROOT --restore-file … --log …`.
    fn args(&self) -> Vec<std::ffi::OsString> {
        vec![
            "--sysfs-root".into(),
            self.root.clone().into(),
            "--restore-file".into(),
            self.p("restore.toml").into(),
            "--log".into(),
            self.p("switches.log").into(),
        ]
    }
}

/// A static plan for GPU 0 (`[[device]] kind = "gpu"`) with one region `a`.
fn static_gpu_plan(knobs: &str, default: &str, setting: &str) -> String {
    format!(
        "[plan]\nobjective = \"energy\"\nmodel = \"hand-written\"\ncreated = \"2026-01-01T00:00:00Z\"\nscope = \"per_workload\"\n\n[[device]]\nkind = \"gpu\"\nindex = 0\nknobs = [{knobs}]\ndefault = {{ {default} }}\n\n[[region]]\nname = \"a\"\nsetting = {{ {setting} }}\ntime_s = 1.0\nenergy_j = 1.0\npower_w = 1.0\nreference_time_s = 1.0\nreference_energy_j = 1.0\nenergy_saving = 0.0\nslowdown = 0.0\n"
    )
}

#[test]
fn sweep_locks_i915_clocks_and_power_limit_at_each_point_and_restores() {
    let Some(t) = tree(
        "sweep_locks_i915_clocks_and_power_limit_at_each_point_and_restores",
        "i915",
    ) else {
        return;
    };
    let child = t.cat(&[
        &format!("{I915_FREQ}/gt_min_freq_mhz"),
        &format!("{I915_FREQ}/gt_max_freq_mhz"),
        &format!("{I915}/power1_max"),
    ]);
    pp().arg("sweep")
        .arg("-o")
        .arg(t.p("set"))
        .args(t.args())
        .args(["--gpu-clock", "500,1000", "--gpu-power-limit", "120"])
        .args(["--", "sh", "-c", &child])
        .assert()
        .success()
        .stderr(predicate::str::contains("gt_min_freq_mhz = 500"));
    // i915 takes any MHz in RPn..RP0 (300..2050): min = max = the point, power1_max in µW
    assert_eq!(
        t.seen(),
        ["500", "500", "120000000", "1000", "1000", "120000000"],
        "the command did not see each point's setting"
    );
    t.assert_restored();
    assert!(
        !t.p("restore.toml.gpu").exists(),
        "the GPU restore record was left"
    );
    let log = std::fs::read_to_string(t.p("switches.log")).unwrap();
    assert!(log.contains("gpu0"), "{log}");
}

#[test]
fn sweep_refuses_a_clock_outside_rpn_rp0_with_nothing_changed() {
    let Some(t) = tree(
        "sweep_refuses_a_clock_outside_rpn_rp0_with_nothing_changed",
        "i915",
    ) else {
        return;
    };
    let child = t.cat(&[&format!("{I915_FREQ}/gt_min_freq_mhz")]);
    pp().arg("sweep")
        .arg("-o")
        .arg(t.p("set"))
        .args(t.args())
        .args(["--gpu-clock", "500,2500"])
        .args(["--", "sh", "-c", &child])
        .assert()
        .failure()
        .stderr(predicate::str::contains("2500"));
    assert!(t.seen().is_empty(), "the command ran: {:?}", t.seen());
    t.assert_restored();
}

#[test]
fn apply_sets_an_xe_gpu_plan_on_every_gt_and_restores() {
    let Some(t) = tree("apply_sets_an_xe_gpu_plan_on_every_gt_and_restores", "xe") else {
        return;
    };
    let plan = t.p("plan.toml");
    std::fs::write(
        &plan,
        static_gpu_plan(
            "\"core_freq_mhz\", \"power_limit_w\"",
            "core_freq_mhz = 1600.0, power_limit_w = 300.0",
            "core_freq_mhz = 900.0, power_limit_w = 250.0",
        ),
    )
    .unwrap();
    let child = t.cat(&[
        &format!("{XE_GT0}/min_freq"),
        &format!("{XE_GT0}/max_freq"),
        &format!("{XE_GT1}/min_freq"),
        &format!("{XE_GT1}/max_freq"),
        &format!("{XE}/power1_max"),
    ]);
    pp().args(["apply", "--plan"])
        .arg(&plan)
        .args(t.args())
        .args(["--", "sh", "-c", &child])
        .assert()
        .success()
        .stderr(predicate::str::contains("restored"));
    assert_eq!(t.seen(), ["900", "900", "900", "900", "250000000"]);
    t.assert_restored();
    assert!(
        !t.p("restore.toml.gpu").exists(),
        "the GPU restore record was left"
    );
}

#[test]
fn after_sigkill_apply_restore_reopens_the_recorded_sysfs_root() {
    let Some(t) = tree(
        "after_sigkill_apply_restore_reopens_the_recorded_sysfs_root",
        "i915",
    ) else {
        return;
    };
    let started = t.p("started");
    let pidfile = t.p("pid");
    let child = format!(
        "echo $$ > {}; touch {}; exec sleep 30",
        pidfile.display(),
        started.display()
    );
    let p = std::process::Command::new(env!("CARGO_BIN_EXE_powerperf"))
        .arg("sweep")
        .arg("-o")
        .arg(t.p("set"))
        .args(t.args())
        .args([
            "--gpu-clock",
            "700",
            "--gpu-power-limit",
            "100",
            "--interval",
            "0s",
        ])
        .args(["--", "sh", "-c", &child])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    while !started.exists() {
        assert!(t0.elapsed().as_secs() < 30, "the command never started");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // SAFETY: kill(2) takes two integers and touches no memory of ours; the pid is our
    // child's, not yet reaped, so it names no other process.
    unsafe { libc::kill(p.id() as i32, libc::SIGKILL) };
    let _ = p.wait_with_output();
    let min = std::fs::read_to_string(t.root.join(I915_FREQ).join("gt_min_freq_mhz")).unwrap();
    assert_eq!(min.trim(), "700");
    let record = t.p("restore.toml.gpu");
    let text = std::fs::read_to_string(&record).expect("no GPU restore record after SIGKILL");
    assert!(
        text.contains(&format!(
            "sysfs_root = \"{}\"",
            t.root.canonicalize().unwrap().display()
        )),
        "{text}"
    );
    // no --sysfs-root here: the record names the tree
    pp().args(["apply", "--restore", "--restore-file"])
        .arg(t.p("restore.toml"))
        .assert()
        .success()
        .stderr(predicate::str::contains("restored 2 GPU setting(s)"));
    t.assert_restored();
    assert!(!record.exists());
    if let Some(pid) = std::fs::read_to_string(&pidfile)
        .ok()
        .and_then(|s| s.trim().parse::<i32>().ok())
    {
        // SAFETY: kill(2) takes two integers and touches no memory of ours (the pid is the
        // workload the killed powerperf started, read from its pid file).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
}

/// amdgpu (MI250X-like, no overdrive table): a plan's clock must be one of `pp_dpm_sclk`'s
/// levels; apply sets `manual` and the level's index, then puts back `auto` and the full
/// level mask. A fixture file keeps what was written last where the driver would list the
/// levels again, so `pp_dpm_sclk` holds the mask `0 1 2` afterwards; every other file is
/// byte-identical. (For the same reason a sweep over several amdgpu points can be run on
/// real sysfs only: the fixture's level list is gone after the first write.)
#[test]
fn apply_sets_an_amdgpu_level_and_restores() {
    let Some(t) = tree("apply_sets_an_amdgpu_level_and_restores", "amdgpu-mi250x") else {
        return;
    };
    const DEV: &str = "sys/class/hwmon/hwmon3/device";
    let plan = t.p("plan.toml");
    std::fs::write(
        &plan,
        static_gpu_plan(
            "\"core_freq_mhz\", \"power_limit_w\"",
            "core_freq_mhz = 1700.0, power_limit_w = 500.0",
            "core_freq_mhz = 800.0, power_limit_w = 300.0",
        ),
    )
    .unwrap();
    let child = t.cat(&[
        &format!("{DEV}/power_dpm_force_performance_level"),
        &format!("{DEV}/pp_dpm_sclk"),
        "sys/class/hwmon/hwmon3/power1_cap",
    ]);
    pp().args(["apply", "--plan"])
        .arg(&plan)
        .args(t.args())
        .args(["--", "sh", "-c", &child])
        .assert()
        .success();
    assert_eq!(t.seen(), ["manual", "1", "300000000"]);
    let mut after = files(&t.root);
    let mut want = files(&t.fixture);
    let sclk = PathBuf::from(format!("{DEV}/pp_dpm_sclk"));
    assert_eq!(after.remove(&sclk).unwrap(), b"0 1 2\n");
    want.remove(&sclk);
    assert_eq!(after, want, "the tree is not restored");
    // a clock that is not a level is refused before anything changes (the level list put
    // back as the driver would show it)
    std::fs::copy(t.fixture.join(&sclk), t.root.join(&sclk)).unwrap();
    std::fs::write(
        &plan,
        static_gpu_plan(
            "\"core_freq_mhz\"",
            "core_freq_mhz = 1700.0",
            "core_freq_mhz = 1000.0",
        ),
    )
    .unwrap();
    let before = files(&t.root);
    pp().args(["apply", "--plan"])
        .arg(&plan)
        .args(t.args())
        .args(["--", "sh", "-c", &child])
        .assert()
        .failure()
        .stderr(predicate::str::contains("800 MHz or 1700 MHz"));
    assert_eq!(files(&t.root), before);
    assert_eq!(t.seen().len(), 3, "the command ran");
}

/// `sweep --dry-run` checks each point against the sysfs GPU (the range RPn..RP0) and names
/// the files it would write, not NVML calls; nothing is written, by any user.
#[test]
fn dry_run_checks_points_on_the_sysfs_gpu_and_names_it() {
    let Some(t) = tree_any_user(
        "dry_run_checks_points_on_the_sysfs_gpu_and_names_it",
        "i915",
    ) else {
        return;
    };
    let child = t.cat(&[&format!("{I915_FREQ}/gt_min_freq_mhz")]);
    pp().arg("sweep")
        .arg("-o")
        .arg(t.p("set"))
        .args(["--dry-run", "--sysfs-root"])
        .arg(&t.root)
        .args(["--gpu-clock", "500,1000", "--gpu-power-limit", "120"])
        .args(["--", "sh", "-c", &child])
        .assert()
        .success()
        .stderr(
            predicate::str::contains("would write the sysfs files of i915")
                .and(predicate::str::contains("checked against"))
                .and(predicate::str::contains("nvmlDeviceSetGpuLockedClocks").not()),
        );
    pp().arg("sweep")
        .arg("-o")
        .arg(t.p("set2"))
        .args(["--dry-run", "--sysfs-root"])
        .arg(&t.root)
        .args(["--gpu-clock", "2500"])
        .args(["--", "sh", "-c", &child])
        .assert()
        .failure()
        .stderr(predicate::str::contains("300..2050 MHz"));
    assert!(t.seen().is_empty(), "a dry run ran the command");
    t.assert_restored();
}

/// `apply --dry-run` of a GPU plan where GPU 0 is an xe GPU under `--sysfs-root`: the clock
/// is checked against every gt's RPn..RP0 (1600 MHz is RP0 here), the GPU is named, nothing
/// is written; a clock above RP0 is refused before the command runs.
#[test]
fn apply_dry_run_checks_the_plan_on_the_sysfs_gpu() {
    let Some(t) = tree_any_user("apply_dry_run_checks_the_plan_on_the_sysfs_gpu", "xe") else {
        return;
    };
    let child = t.cat(&[&format!("{XE_GT0}/max_freq")]);
    for (mhz, ok) in [("900.0", true), ("2000.0", false)] {
        let plan = t.p("plan.toml");
        std::fs::write(
            &plan,
            static_gpu_plan(
                "\"core_freq_mhz\"",
                "core_freq_mhz = 1600.0",
                &format!("core_freq_mhz = {mhz}"),
            ),
        )
        .unwrap();
        let a = pp()
            .args(["apply", "--dry-run", "--plan"])
            .arg(&plan)
            .arg("--sysfs-root")
            .arg(&t.root)
            .args(["--", "sh", "-c", &child])
            .assert();
        if ok {
            a.success().stderr(
                predicate::str::contains("GPU 0 is xe")
                    .and(predicate::str::contains("checked against it")),
            );
        } else {
            a.failure()
                .stderr(predicate::str::contains("300..1600 MHz"));
        }
    }
    // the dry run ran the command once (900 MHz), at the files' own values
    assert_eq!(t.seen(), ["1600"]);
    t.assert_restored();
}

/// The GPU's hardware, played by a thread while a sweep runs: each gt whose `min` and `max`
/// frequency files hold one clock (locked) runs at `min × factor` (its `act` file), an
/// unlocked one at its own clock (the fixture's `act` bytes); the card's energy counter
/// (µJ) advances at [`W_PER_MHZ`] × the first gt's actual clock. Every 2 ms, until dropped,
/// which puts the counter's own bytes back (so the restored tree is the fixture again).
struct Hardware {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    energy: (PathBuf, Vec<u8>),
}

/// The power of the played GPU per MHz of its clock, W.
const W_PER_MHZ: f64 = 0.1;

impl Hardware {
    /// `gts`: `(min, max, act)` paths under `root`; `energy`: the card's `energyN_input`.
    fn start(root: &Path, gts: &[(&str, &str, &str)], energy: &str, factor: f64) -> Hardware {
        let read =
            |p: &Path| -> Option<f64> { std::fs::read_to_string(p).ok()?.trim().parse().ok() };
        let gts: Vec<(PathBuf, PathBuf, PathBuf, Vec<u8>)> = gts
            .iter()
            .map(|(min, max, act)| {
                let act = root.join(act);
                let own = std::fs::read(&act).unwrap();
                (root.join(min), root.join(max), act, own)
            })
            .collect();
        let energy = root.join(energy);
        let own_energy = std::fs::read(&energy).unwrap();
        let mut uj = read(&energy).unwrap();
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let s = stop.clone();
        let counter = energy.clone();
        // a file is replaced whole (written beside the tree, then renamed), as sysfs shows a
        // value whole: a reader never sees it empty
        let tmp = root.parent().unwrap().join("hardware.tmp");
        let put = move |p: &Path, b: &[u8]| {
            std::fs::write(&tmp, b).and_then(|()| std::fs::rename(&tmp, p))
        };
        let thread = std::thread::spawn(move || {
            let mut last = std::time::Instant::now();
            while !s.load(std::sync::atomic::Ordering::Relaxed) {
                for (min, max, act, own) in &gts {
                    let want = match (read(min), read(max)) {
                        (Some(a), Some(b)) if a == b => {
                            format!("{}\n", (a * factor).round()).into_bytes()
                        }
                        _ => own.clone(),
                    };
                    if std::fs::read(act).ok().as_ref() != Some(&want) {
                        put(act, &want).unwrap();
                    }
                }
                let mhz = read(&gts[0].2).unwrap_or(0.0);
                let now = std::time::Instant::now();
                uj += W_PER_MHZ * mhz * 1e6 * (now - last).as_secs_f64();
                last = now;
                put(&counter, format!("{}\n", uj.round()).as_bytes()).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        });
        Hardware {
            stop,
            thread: Some(thread),
            energy: (energy, own_energy),
        }
    }
}

impl Drop for Hardware {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
        let _ = std::fs::write(&self.energy.0, &self.energy.1);
    }
}

/// The i915 card's frequency files: `gt_{min,max,act}_freq_mhz`.
fn i915_gts() -> Vec<(String, String, String)> {
    let f = |n: &str| format!("{I915_FREQ}/gt_{n}_freq_mhz");
    vec![(f("min"), f("max"), f("act"))]
}

/// The xe card's two gts: `freq0/{min,max,act}_freq`.
fn xe_gts() -> Vec<(String, String, String)> {
    [XE_GT0, XE_GT1]
        .iter()
        .map(|g| {
            (
                format!("{g}/min_freq"),
                format!("{g}/max_freq"),
                format!("{g}/act_freq"),
            )
        })
        .collect()
}

/// Sweep `clocks` on the sysfs GPU of `t` while [`Hardware`] runs the locked gts at
/// `factor` × the lock (its energy counter `energy`); the command sleeps 1 s, sampled every
/// 20 ms (about 50 samples: one sample taken before the played hardware caught up, on a
/// loaded machine, moves the mean less than 2 %).
fn sweep_observed(
    t: &Tree,
    gts: &[(String, String, String)],
    energy: &str,
    clocks: &str,
    factor: f64,
) {
    let gts: Vec<(&str, &str, &str)> = gts
        .iter()
        .map(|(a, b, c)| (a.as_str(), b.as_str(), c.as_str()))
        .collect();
    let hw = Hardware::start(&t.root, &gts, energy, factor);
    pp().arg("sweep")
        .arg("-o")
        .arg(t.p("set"))
        .args(t.args())
        .args(["--gpu-clock", clocks, "--interval", "20ms"])
        .args(["--", "sh", "-c", "sleep 1"])
        .assert()
        .success();
    drop(hw);
}

/// The `[gpu_setting]` of run `f-_t-_r0_g<mhz>` of the set.
fn gpu_setting(t: &Tree, mhz: u32) -> powerperf_format::run::GpuRunSetting {
    let dir = t.p("set").join(format!("runs/f-_t-_r0_g{mhz}"));
    powerperf_format::run::RunMeta::read(&dir)
        .unwrap()
        .gpu_setting
        .unwrap_or_else(|| panic!("no [gpu_setting] in {}", dir.display()))
}

/// The observed power is the mean of the card's Δenergy/Δt, which [`Hardware`] advances at
/// [`W_PER_MHZ`] × the clock: within 40 % (the counter is written every 2 ms and sampled
/// every 20 ms by two processes on a shared machine: each sample's Δt and Δenergy jitter).
fn assert_power(g: &powerperf_format::run::GpuRunSetting, mhz: u32) {
    let want = W_PER_MHZ * f64::from(mhz);
    let p = g
        .observed_power_w
        .unwrap_or_else(|| panic!("no observed power: {g:?}"));
    println!(
        "{mhz} MHz requested: observed {:?} MHz and {p:.2} W (played {want} W) over {} samples of {:?}",
        g.observed_sm_clock_mhz, g.samples, g.observed_from
    );
    assert!(
        (p - want).abs() < 0.4 * want,
        "observed {p} W, played {want} W: {g:?}"
    );
}

/// `powerperf fit SET --no-loo -o MODEL`: whether it succeeded, and its stderr.
fn fit_stderr(t: &Tree) -> (bool, String) {
    let o = pp()
        .arg("fit")
        .arg(t.p("set"))
        .arg("--no-loo")
        .arg("-o")
        .arg(t.p("model.json"))
        .output()
        .unwrap();
    println!(
        "fit: {}\n{}{}",
        o.status,
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    (
        o.status.success(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

/// Issue 44o: a sweep over an i915 GPU reads the observed clock from its power device's
/// `i915_0_clock_mhz` (`gt_act_freq_mhz`): each point's observed SM clock is the clock the
/// GPU ran at, no point is flagged, fit warns of none, and the tree is the fixture again.
#[test]
fn i915_sweep_records_the_observed_clock_and_flags_nothing() {
    let Some(t) = tree(
        "i915_sweep_records_the_observed_clock_and_flags_nothing",
        "i915",
    ) else {
        return;
    };
    sweep_observed(
        &t,
        &i915_gts(),
        &format!("{I915}/energy1_input"),
        "500,1000",
        1.0,
    );
    observed_and_unflagged(&t, &[500, 1000], "i915_0");
}

/// As for i915, on the xe card (two tiles): the clock is gt0's `act_freq`, the device
/// `xe0_card`.
#[test]
fn xe_sweep_records_the_observed_clock_and_flags_nothing() {
    let Some(t) = tree(
        "xe_sweep_records_the_observed_clock_and_flags_nothing",
        "xe",
    ) else {
        return;
    };
    sweep_observed(
        &t,
        &xe_gts(),
        &format!("{XE}/energy1_input"),
        "900,1200",
        1.0,
    );
    observed_and_unflagged(&t, &[900, 1200], "xe0_card");
}

/// Every swept clock of `t`'s sweep observed exactly, from device `stem`, with samples and
/// the played power, and unflagged; sweep.toml has no off setting, fit warns of none, and
/// the tree is the fixture again.
fn observed_and_unflagged(t: &Tree, clocks: &[u32], stem: &str) {
    for &mhz in clocks {
        let g = gpu_setting(t, mhz);
        assert_eq!(g.observed_sm_clock_mhz, Some(f64::from(mhz)), "{g:?}");
        assert_eq!(g.observed_from.as_deref(), Some(stem), "{g:?}");
        assert!(g.samples > 0, "{g:?}");
        assert_power(&g, mhz);
        assert_eq!(g.flag, None, "{g:?}");
    }
    let rec = std::fs::read_to_string(t.p("set/sweep.toml")).unwrap();
    assert!(!rec.contains("off_setting"), "{rec}");
    let (ok, err) = fit_stderr(t);
    assert!(ok, "{err}");
    assert!(!err.contains("not at their requested GPU setting"), "{err}");
    t.assert_restored();
}

/// A GPU that runs 5 % below its lock (`act_freq` = 0.95 × the lock: PCODE's decision,
/// throttling) is flagged by the 2 % rule: in run.toml, in sweep.toml and by fit, with the
/// column it was read from.
#[test]
fn an_xe_gpu_off_its_locked_clock_is_flagged() {
    let Some(t) = tree("an_xe_gpu_off_its_locked_clock_is_flagged", "xe") else {
        return;
    };
    sweep_observed(&t, &xe_gts(), &format!("{XE}/energy1_input"), "1000", 0.95);
    let g = gpu_setting(&t, 1000);
    assert_eq!(g.observed_sm_clock_mhz, Some(950.0), "{g:?}");
    let flag = g.flag.unwrap();
    assert!(
        flag.contains("observed mean SM clock 950.0 MHz is 5.0 % off the requested 1000 MHz"),
        "{flag}"
    );
    assert!(
        flag.contains("collect records none for an AMD or Intel GPU"),
        "{flag}"
    );
    let rec: powerperf_core::dvfs::sweep::SweepRecord =
        toml::from_str(&std::fs::read_to_string(t.p("set/sweep.toml")).unwrap()).unwrap();
    assert_eq!(rec.off_setting.len(), 1, "{rec:?}");
    let (_, err) = fit_stderr(&t);
    assert!(
        err.contains("1 point(s)") && err.contains("not at their requested GPU setting"),
        "{err}"
    );
    t.assert_restored();
}
