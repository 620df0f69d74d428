//! powerperfd's `gpu.power_limit` and `gpu.locked_clocks` on AMD and Intel GPUs (issue 43,
//! items 2, 3, 6 and 7), end to end as root: the daemon on a copy of each fixture tree
//! (`tests/fixtures/sysfs/{amdgpu-mi250x,amdgpu-mi300x,xe,i915}`) under its `--sysfs-root`, with the fake
//! GPU of `--fake-gpu` standing for NVML (GPU 0), so the sysfs GPU is GPU 1. Each test: the
//! grant and the device's own range refuse (nothing written), a session sets the cap and
//! the clocks and ends (the tree is byte-identical afterwards), and a daemon SIGKILLed
//! mid-session restores from its journal when restarted. Clients are `powerperfd request`
//! as uid 65534 through setpriv. Tests print `skipped: …` when not root.

mod common;

use common::daemon::{fixture, kill_group, World};
use common::NOBODY;
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};

const GRANT: &str = r#"
[[grant]]
name = "gpu-users"
users = ["nobody"]
write = ["gpu.locked_clocks", "gpu.power_limit"]
[grant.ranges]
"gpu.locked_clocks" = [200, 1600]
"gpu.power_limit" = [50, 520]
"#;

/// One fixture's case: where the cap is, a cap to set, a cap the grant refuses (inside the
/// device's range), one the device refuses (inside the grant), a clock range to lock and the
/// files that show it, a clock the grant refuses, and what the device refuses.
struct Case {
    fixture: &'static str,
    cap: &'static str,
    set_w: u32,
    grant_refuses_w: u32,
    device_refuses_w: (u32, &'static str),
    clocks: (u32, u32),
    clock_files: &'static [(&'static str, &'static str)],
    grant_refuses_mhz: u32,
    device_refuses_mhz: ((u32, u32), &'static str),
    /// A file the restore leaves as a driver would take it but a fixture cannot re-render,
    /// with what it holds then.
    re_rendered: Option<(&'static str, &'static str)>,
}

const AMD: &str = "sys/class/hwmon/hwmon3";
const XE: &str = "sys/class/hwmon/hwmon2";
const I915: &str = "sys/class/hwmon/hwmon1";
const MI300X: &str = "sys/class/hwmon/hwmon4";

const CASES: [Case; 4] = [
    Case {
        fixture: "amdgpu-mi250x",
        cap: "sys/class/hwmon/hwmon3/power1_cap",
        set_w: 300,
        grant_refuses_w: 540,
        device_refuses_w: (
            60,
            "100..560 W, whole watts (power1_cap_min..power1_cap_max",
        ),
        clocks: (500, 800),
        clock_files: &[
            (
                "sys/class/hwmon/hwmon3/device/power_dpm_force_performance_level",
                "manual",
            ),
            ("sys/class/hwmon/hwmon3/device/pp_dpm_sclk", "0 1"),
        ],
        grant_refuses_mhz: 1700,
        device_refuses_mhz: (
            (600, 800),
            "600 MHz is not a supported clock (pp_dpm_sclk); nearest: 500 MHz or 800 MHz",
        ),
        re_rendered: Some(("sys/class/hwmon/hwmon3/device/pp_dpm_sclk", "0 1 2")),
    },
    Case {
        fixture: "xe",
        cap: "sys/class/hwmon/hwmon2/power1_max",
        set_w: 250,
        grant_refuses_w: 40,
        device_refuses_w: (350, "(0, 300] W"),
        clocks: (900, 1200),
        clock_files: &[
            (
                "sys/class/hwmon/hwmon2/device/tile0/gt0/freq0/min_freq",
                "900",
            ),
            (
                "sys/class/hwmon/hwmon2/device/tile0/gt0/freq0/max_freq",
                "1200",
            ),
            (
                "sys/class/hwmon/hwmon2/device/tile1/gt1/freq0/min_freq",
                "900",
            ),
            (
                "sys/class/hwmon/hwmon2/device/tile1/gt1/freq0/max_freq",
                "1200",
            ),
        ],
        grant_refuses_mhz: 1650,
        device_refuses_mhz: ((250, 1200), "300..1600 MHz (rpn_freq and rp0_freq"),
        re_rendered: None,
    },
    Case {
        fixture: "i915",
        cap: "sys/class/hwmon/hwmon1/power1_max",
        set_w: 120,
        grant_refuses_w: 40,
        device_refuses_w: (200, "(0, 150] W"),
        clocks: (1000, 1000),
        clock_files: &[
            (
                "sys/class/hwmon/hwmon1/device/drm/card0/gt_min_freq_mhz",
                "1000",
            ),
            (
                "sys/class/hwmon/hwmon1/device/drm/card0/gt_max_freq_mhz",
                "1000",
            ),
        ],
        grant_refuses_mhz: 1800,
        device_refuses_mhz: (
            (250, 1000),
            "300..2050 MHz (gt_RPn_freq_mhz and gt_RP0_freq_mhz",
        ),
        re_rendered: None,
    },
    Case {
        fixture: "amdgpu-mi300x",
        cap: "sys/class/hwmon/hwmon4/power1_cap",
        set_w: 300,
        grant_refuses_w: 540,
        device_refuses_w: (100, "200..750 W, whole watts"),
        clocks: (600, 1500),
        clock_files: &[
            (
                "sys/class/hwmon/hwmon4/device/power_dpm_force_performance_level",
                "manual",
            ),
            ("sys/class/hwmon/hwmon4/device/pp_od_clk_voltage", "c"),
        ],
        grant_refuses_mhz: 1700,
        device_refuses_mhz: (
            (400, 1500),
            "500..2100 MHz (pp_od_clk_voltage OD_RANGE SCLK)",
        ),
        re_rendered: Some(("sys/class/hwmon/hwmon4/device/pp_od_clk_voltage", "c")),
    },
];

fn text(w: &World, rel: &str) -> String {
    std::fs::read_to_string(w.root.join(rel))
        .unwrap()
        .trim()
        .to_string()
}

fn hold(w: &World, reqs: &[String]) -> Child {
    let mut c = common::daemon::as_uid(NOBODY, &w.daemon_bin);
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

fn power(w: u32) -> String {
    format!(r#"{{"op":"set_gpu_power_limit","gpu":1,"watts":{w}}}"#)
}

fn clocks((a, b): (u32, u32)) -> String {
    format!(r#"{{"op":"set_gpu_locked_clocks","gpu":1,"min_mhz":{a},"max_mhz":{b}}}"#)
}

fn run(c: &Case) {
    let Some(mut w) = World::new(&format!("daemon GPU sysfs {}", c.fixture), GRANT) else {
        return;
    };
    common::copy_tree(&fixture(c.fixture), &w.root);
    let before = common::files(&w.root);
    let cap_before = text(&w, c.cap);
    w.start();
    let out = |o: &std::process::Output| String::from_utf8_lossy(&o.stdout).into_owned();
    // refused: outside the grant, outside the device's own range; nothing is written
    for (req, want) in [
        (
            power(c.grant_refuses_w),
            "grant `gpu-users` (users nobody) allows [50, 520] W".to_string(),
        ),
        (
            power(c.device_refuses_w.0),
            c.device_refuses_w.1.to_string(),
        ),
        (
            clocks((c.grant_refuses_mhz, c.grant_refuses_mhz)),
            "allows [200, 1600] MHz".into(),
        ),
        (
            clocks(c.device_refuses_mhz.0),
            c.device_refuses_mhz.1.to_string(),
        ),
    ] {
        let o = w.request(NOBODY, &[&req]);
        assert!(
            !o.status.success() && out(&o).contains(&want),
            "{}: {req}: {}",
            c.fixture,
            out(&o)
        );
        assert_eq!(common::files(&w.root), before, "{}: {req} wrote", c.fixture);
    }
    // the cap set, the session ends (stdin closed): the tree is byte-identical
    let mut s = hold(&w, &[power(c.set_w)]);
    let want_cap = format!("{}", u64::from(c.set_w) * 1_000_000);
    w.wait_for("the cap", || text(&w, c.cap) == want_cap);
    drop(s.stdin.take());
    let took = w.wait_for("the cap restored at session end", || {
        common::files(&w.root) == before
    });
    let _ = s.wait();
    println!(
        "{}: cap {} -> {want_cap} µW, restored byte-identical {:.2} ms after the session ended",
        c.fixture,
        cap_before,
        took.as_secs_f64() * 1e3
    );
    // the clocks and the cap in one session, which ends
    let mut s = hold(&w, &[clocks(c.clocks), power(c.set_w)]);
    w.wait_for("the clocks", || {
        c.clock_files.iter().all(|(f, v)| text(&w, f) == *v) && text(&w, c.cap) == want_cap
    });
    drop(s.stdin.take());
    let _ = s.wait();
    let restored = |w: &World| {
        let mut t = common::files(&w.root);
        if let Some((f, v)) = c.re_rendered {
            if t.get(Path::new(f))
                .map(|b| String::from_utf8_lossy(b).trim().to_string())
                != Some(v.to_string())
            {
                return false;
            }
            t.insert(f.into(), before[Path::new(f)].clone());
        }
        t == before
    };
    w.wait_for("the clocks restored at session end", || restored(&w));
    // the daemon SIGKILLed mid-session and restarted: restored from its journal
    common::copy_tree(&fixture(c.fixture), &w.root); // the fixture's own pp_dpm_sclk again
    let mut s = hold(&w, &[power(c.set_w), clocks(c.clocks)]);
    w.wait_for("the settings", || {
        c.clock_files.iter().all(|(f, v)| text(&w, f) == *v) && text(&w, c.cap) == want_cap
    });
    w.kill_daemon();
    let journal = std::fs::read_to_string(w.state.join("powerperfd-journal.jsonl")).unwrap();
    assert!(
        journal.contains(r#""control":"gpu.power_limit""#)
            && journal.contains(r#""control":"gpu.locked_clocks""#)
            && journal.contains(r#""sysfs":{"#),
        "{journal}"
    );
    assert_eq!(
        text(&w, c.cap),
        want_cap,
        "the SIGKILLed daemon restored nothing"
    );
    w.start();
    assert!(
        restored(&w),
        "{}: not restored from the journal: {}",
        c.fixture,
        w.log_text()
    );
    kill_group(&mut s);
}

#[test]
fn amdgpu_power_cap_and_sclk_levels_granted_refused_and_restored() {
    run(&CASES[0]);
}

/// amdgpu with an overdrive table: the clocks through `pp_od_clk_voltage` (`s 0`, `s 1`,
/// `c`; a fixture file keeps the last command, `c`).
#[test]
fn amdgpu_overdrive_power_cap_and_sclk_range_granted_refused_and_restored() {
    run(&CASES[3]);
}

#[test]
fn xe_power_max_and_gt_frequencies_granted_refused_and_restored() {
    run(&CASES[1]);
}

#[test]
fn i915_power_max_and_gt_frequencies_granted_refused_and_restored() {
    run(&CASES[2]);
}

/// The constants name the hwmon directories the cases use.
#[test]
fn cases_use_the_fixture_directories() {
    for (c, d) in CASES.iter().zip([AMD, XE, I915, MI300X]) {
        assert!(
            c.cap.starts_with(d) && fixture(c.fixture).join(c.cap).is_file(),
            "{}",
            c.cap
        );
        for (f, _) in c.clock_files {
            assert!(
                f.starts_with(d) && fixture(c.fixture).join(f).is_file(),
                "{f}"
            );
        }
    }
}

/// `powerperf apply --daemon` of a static GPU plan for GPU 1 (the i915 card) as uid 65534:
/// the daemon locks the gt frequency, the command sees it, the files are put back after.
#[test]
fn a_users_apply_of_a_gpu_plan_reaches_an_intel_gpu_through_powerperfd() {
    let Some(mut w) = World::new("apply of a GPU plan on i915 through powerperfd", GRANT) else {
        return;
    };
    common::copy_tree(&fixture("i915"), &w.root);
    let before = common::files(&w.root);
    w.start();
    let plan = std::fs::read_to_string(
        PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("examples/plans/gpu-static.toml"),
    )
    .unwrap()
    .replace("kind = \"gpu\"\n", "kind = \"gpu\"\nindex = 1\n")
    .replace(
        "[region.setting]\ncore_freq_mhz = 1200.0",
        "[region.setting]\ncore_freq_mhz = 1000.0",
    );
    let plan_path = w.dir.path().join("i915-plan.toml");
    std::fs::write(&plan_path, plan).unwrap();
    let out_dir = common::dir_owned_by_nobody(w.dir.path(), "out");
    let seen = out_dir.join("seen");
    let card = w.root.join("sys/class/hwmon/hwmon1/device/drm/card0");
    let script = format!(
        "cat {} {} > {}",
        card.join("gt_min_freq_mhz").display(),
        card.join("gt_max_freq_mhz").display(),
        seen.display()
    );
    let o = common::daemon::as_uid(NOBODY, &w.bin)
        .arg("apply")
        .arg("--daemon")
        .arg(&w.socket)
        .arg("--plan")
        .arg(&plan_path)
        .args(["--", "sh", "-c", &script])
        .env_remove("POWERPERF_RUN_DIR")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}\ndaemon log:\n{}", w.log_text());
    assert_eq!(
        std::fs::read_to_string(&seen).unwrap(),
        "1000\n1000\n",
        "{err}"
    );
    w.wait_for("the i915 clocks put back", || {
        common::files(&w.root) == before
    });
}
