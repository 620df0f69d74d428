//! The AMD and Intel GPU controls on copies of tests/fixtures/sysfs/{amdgpu-mi250x,xe,i915}.

use super::*;
use crate::gpu_control::node::NodeGpus;
use crate::gpu_control::FakeGpu;
use std::collections::BTreeMap;

fn fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    std::fs::create_dir(&root).unwrap();
    crate::controller::tests::copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../tests/fixtures/sysfs")
            .join(name),
        &root,
    );
    (d, root)
}

/// Every file under `dir` with its bytes.
fn tree(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(p.clone(), std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

fn read(p: &Path) -> String {
    std::fs::read_to_string(p).unwrap()
}

#[test]
fn dpm_levels_parse_and_refuse() {
    let l = parse_dpm_levels("0: 500Mhz\n1: 800Mhz\n2: 1700Mhz *\n").unwrap();
    assert_eq!(
        l.iter().map(|l| l.mhz).collect::<Vec<_>>(),
        vec![500, 800, 1700]
    );
    // a deep-sleep line is not a level
    assert_eq!(
        parse_dpm_levels("S: 19Mhz *\n0: 500Mhz\n").unwrap().len(),
        1
    );
    for bad in ["", "0 1", "0: fastMhz", "1: 500Mhz", "x1: 5Mhz"] {
        assert!(parse_dpm_levels(bad).is_err(), "{bad}");
    }
}

#[test]
fn amdgpu_power_cap_set_refused_and_restored_byte_identical() {
    let (_d, root) = fixture("amdgpu-mi250x");
    let before = tree(&root);
    let mut g = SysfsGpus::open(&root, 0).unwrap();
    assert_eq!(g.count(), 1);
    assert!(g.describe().contains("amdgpu"), "{}", g.describe());
    let cap = root.join("sys/class/hwmon/hwmon3/power1_cap");
    assert_eq!(g.power_limit_w(0).unwrap(), 500.0);
    assert_eq!(g.power_limit_range_w(0).unwrap(), (100.0, 560.0));
    let s = g.save(0, GpuKnob::PowerLimit).unwrap();
    assert_eq!(s.power_limit_w, Some(500.0));
    let w = g.set_power_limit_w(0, 300.0).unwrap();
    assert!(w.contains("power1_cap = 300000000"), "{w}");
    assert_eq!(read(&cap), "300000000\n");
    // outside power1_cap_min..max, not whole watts: refused, nothing written
    for (watts, want) in [
        (600.0, "100..560 W"),
        (50.0, "100..560 W"),
        (300.5, "whole watts"),
        (f64::NAN, "whole watts"),
    ] {
        let e = g.set_power_limit_w(0, watts).unwrap_err().to_string();
        assert!(e.contains(want), "{watts}: {e}");
        assert_eq!(read(&cap), "300000000\n");
    }
    g.validate(&s).unwrap();
    g.restore(&s).unwrap();
    assert_eq!(tree(&root), before);
}

#[test]
fn amdgpu_sclk_levels_locked_and_restored() {
    let (_d, root) = fixture("amdgpu-mi250x");
    let dev = root.join("sys/class/hwmon/hwmon3/device");
    let before = tree(&root);
    let mut g = SysfsGpus::open(&root, 0).unwrap();
    // both ends must be listed levels: the nearest are named, nothing is written
    let e = g
        .set_locked_clocks(0, 600.0, 800.0)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("600 MHz is not a supported clock (pp_dpm_sclk); nearest: 500 MHz or 800 MHz"),
        "{e}"
    );
    let e = g
        .set_locked_clocks(0, 500.0, 2000.0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("500..1700 MHz (pp_dpm_sclk)"), "{e}");
    assert_eq!(tree(&root), before);
    let s = g.save(0, GpuKnob::LockedClocks).unwrap();
    let ss = s.sysfs.clone().unwrap();
    assert_eq!(
        (ss.perf_level.as_deref(), ss.sclk_levels),
        (Some("auto"), Some(3))
    );
    let w = g.set_locked_clocks(0, 500.0, 800.0).unwrap();
    assert_eq!(
        read(&dev.join("power_dpm_force_performance_level")),
        "manual\n"
    );
    assert_eq!(read(&dev.join("pp_dpm_sclk")), "0 1\n", "{w}");
    g.validate(&s).unwrap();
    g.restore(&s).unwrap();
    // the level is back; every level is enabled again (a fixture file cannot re-render
    // the driver's level list, so pp_dpm_sclk keeps the mask written: all levels)
    assert_eq!(
        read(&dev.join("power_dpm_force_performance_level")),
        "auto\n"
    );
    assert_eq!(read(&dev.join("pp_dpm_sclk")), "0 1 2\n");
    let mut after = tree(&root);
    after.insert(
        dev.join("pp_dpm_sclk"),
        before[&dev.join("pp_dpm_sclk")].clone(),
    );
    assert_eq!(after, before);
    // no memory-clock lock, with the reason
    let e = g.set_mem_locked_clocks(0, 1600.0, 1600.0).unwrap_err();
    assert!(
        matches!(e, GpuControlError::NoMemLock { gpu: 0, .. }),
        "{e}"
    );
    assert!(g.save(0, GpuKnob::MemLockedClocks).is_err());
}

fn forged(gpu: u32, knob: GpuKnob, w: Option<f64>, ss: Option<SysfsSaved>) -> GpuSaved {
    GpuSaved {
        gpu,
        knob,
        power_limit_w: w,
        sysfs: ss,
    }
}

fn amd(level: &str, n: u32) -> Option<SysfsSaved> {
    Some(SysfsSaved {
        perf_level: Some(level.into()),
        sclk_levels: Some(n),
        freq_mhz: vec![],
        od_sclk_mhz: None,
    })
}

fn intel(v: &[[u64; 2]]) -> Option<SysfsSaved> {
    Some(SysfsSaved {
        perf_level: None,
        sclk_levels: None,
        freq_mhz: v.to_vec(),
        od_sclk_mhz: None,
    })
}

/// A stale or forged journal entry writes nothing: every one is refused by `validate` (and
/// by `restore`, which validates first), and the tree is unchanged.
#[test]
fn forged_saves_are_refused_and_nothing_is_written() {
    for (fx, cases) in [
        (
            "amdgpu-mi250x",
            vec![
                forged(0, GpuKnob::PowerLimit, Some(1e9), None),
                forged(0, GpuKnob::PowerLimit, Some(0.0), None),
                forged(0, GpuKnob::PowerLimit, Some(300.5), None),
                forged(0, GpuKnob::PowerLimit, None, None),
                forged(0, GpuKnob::PowerLimit, Some(500.0), amd("auto", 3)),
                forged(0, GpuKnob::LockedClocks, None, amd("auto; rm -rf /", 3)),
                forged(0, GpuKnob::LockedClocks, None, amd("auto", 1000)),
                forged(0, GpuKnob::LockedClocks, None, amd("auto", 5)),
                forged(0, GpuKnob::LockedClocks, None, intel(&[[300, 1600]])),
                forged(0, GpuKnob::LockedClocks, None, None),
                forged(1, GpuKnob::PowerLimit, Some(500.0), None),
            ],
        ),
        (
            "xe",
            vec![
                forged(0, GpuKnob::PowerLimit, Some(301.0), None),
                forged(0, GpuKnob::PowerLimit, Some(200.000_000_4), None),
                forged(0, GpuKnob::PowerLimit, Some(f64::INFINITY), None),
                forged(0, GpuKnob::LockedClocks, None, intel(&[[300, 1600]])),
                forged(
                    0,
                    GpuKnob::LockedClocks,
                    None,
                    intel(&[[300, 1600], [200, 1600]]),
                ),
                forged(
                    0,
                    GpuKnob::LockedClocks,
                    None,
                    intel(&[[300, 1600], [900, 800]]),
                ),
                forged(0, GpuKnob::LockedClocks, None, amd("auto", 3)),
            ],
        ),
        (
            "i915",
            vec![
                forged(0, GpuKnob::PowerLimit, Some(151.0), None),
                forged(0, GpuKnob::LockedClocks, None, intel(&[[300, 9000]])),
            ],
        ),
    ] {
        let (_d, root) = fixture(fx);
        let before = tree(&root);
        let mut g = SysfsGpus::open(&root, 0).unwrap();
        for s in cases {
            let e = g.validate(&s).unwrap_err();
            assert!(
                matches!(e, GpuControlError::BadSaved { .. }),
                "{fx} {s:?}: {e}"
            );
            assert!(g.restore(&s).is_err(), "{fx} {s:?}");
            assert_eq!(tree(&root), before, "{fx} {s:?}");
        }
    }
}

#[test]
fn xe_power_max_and_gt_frequencies_set_refused_and_restored() {
    let (_d, root) = fixture("xe");
    let before = tree(&root);
    let h = root.join("sys/class/hwmon/hwmon2");
    let mut g = SysfsGpus::open(&root, 0).unwrap();
    assert_eq!(g.cards()[0].freq_dirs.len(), 2, "tile0/gt0 and tile1/gt1");
    assert_eq!(g.power_limit_range_w(0).unwrap(), (0.0, 300.0));
    let s = g.save(0, GpuKnob::PowerLimit).unwrap();
    g.set_power_limit_w(0, 250.5).unwrap();
    assert_eq!(read(&h.join("power1_max")), "250500000\n");
    for (watts, want) in [(0.0, "(0, 300] W"), (300.001, "(0, 300] W")] {
        let e = g.set_power_limit_w(0, watts).unwrap_err().to_string();
        assert!(e.contains(want), "{watts}: {e}");
    }
    assert_eq!(read(&h.join("power1_max")), "250500000\n");
    g.restore(&s).unwrap();
    assert_eq!(tree(&root), before);

    let s = g.save(0, GpuKnob::LockedClocks).unwrap();
    assert_eq!(s.sysfs.as_ref().unwrap().freq_mhz, vec![[300, 1600]; 2]);
    let e = g
        .set_locked_clocks(0, 200.0, 900.0)
        .unwrap_err()
        .to_string();
    assert!(e.contains("300..1600 MHz (rpn_freq and rp0_freq"), "{e}");
    assert!(g.set_locked_clocks(0, 900.5, 1000.0).is_err());
    assert_eq!(tree(&root), before);
    g.set_locked_clocks(0, 300.0, 600.0).unwrap();
    // min 1200 is above the max 600 now: max is written first, so min <= max holds
    let w = g.set_locked_clocks(0, 1200.0, 1200.0).unwrap();
    let (imax, imin) = (w.find("max_freq").unwrap(), w.find("min_freq").unwrap());
    assert!(imax < imin, "{w}");
    for gt in ["tile0/gt0", "tile1/gt1"] {
        let f = h.join("device").join(gt).join("freq0");
        assert_eq!(read(&f.join("min_freq")), "1200\n", "{gt}");
        assert_eq!(read(&f.join("max_freq")), "1200\n", "{gt}");
    }
    g.validate(&s).unwrap();
    g.restore(&s).unwrap();
    assert_eq!(tree(&root), before);
}

#[test]
fn i915_power_max_and_gt_frequencies_set_and_restored() {
    let (_d, root) = fixture("i915");
    let before = tree(&root);
    let card = root.join("sys/class/hwmon/hwmon1/device/drm/card0");
    let mut g = SysfsGpus::open(&root, 0).unwrap();
    let sp = g.save(0, GpuKnob::PowerLimit).unwrap();
    let sc = g.save(0, GpuKnob::LockedClocks).unwrap();
    g.set_power_limit_w(0, 120.0).unwrap();
    g.set_locked_clocks(0, 1000.0, 1000.0).unwrap();
    assert_eq!(read(&card.join("gt_min_freq_mhz")), "1000\n");
    assert_eq!(read(&card.join("gt_max_freq_mhz")), "1000\n");
    assert_eq!(
        read(&root.join("sys/class/hwmon/hwmon1/power1_max")),
        "120000000\n"
    );
    let e = g
        .set_locked_clocks(0, 300.0, 2100.0)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("300..2050 MHz (gt_RPn_freq_mhz and gt_RP0_freq_mhz"),
        "{e}"
    );
    g.restore(&sc).unwrap();
    g.restore(&sp).unwrap();
    assert_eq!(tree(&root), before);
}

/// Root-side rules: a cap file replaced by a symbolic link is neither read nor written
/// through (its target keeps its bytes); a FIFO is refused without blocking; a hwmon
/// directory that resolves outside the root is refused at open.
#[test]
fn links_fifos_and_paths_outside_the_root_are_refused() {
    let (d, root) = fixture("xe");
    let h = root.join("sys/class/hwmon/hwmon2");
    let target = d.path().join("elsewhere");
    std::fs::write(&target, "keep\n").unwrap();
    std::fs::remove_file(h.join("power1_max")).unwrap();
    std::os::unix::fs::symlink(&target, h.join("power1_max")).unwrap();
    let mut g = SysfsGpus::open(&root, 0).unwrap();
    let e = g.power_limit_w(0).unwrap_err().to_string();
    assert!(e.contains("symbolic link"), "{e}");
    assert!(g.set_power_limit_w(0, 200.0).is_err());
    assert_eq!(read(&target), "keep\n");
    // a FIFO at power1_rated_max: refused at once
    std::fs::remove_file(h.join("power1_rated_max")).unwrap();
    let c = std::ffi::CString::new(h.join("power1_rated_max").to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path of this test's directory.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let e = g.power_limit_range_w(0).unwrap_err().to_string();
    assert!(e.contains("FIFO"), "{e}");
    // hwmon2 a link to a directory outside the root
    let out = d.path().join("outside");
    std::fs::rename(&h, &out).unwrap();
    std::os::unix::fs::symlink(&out, &h).unwrap();
    let e = SysfsGpus::open(&root, 0).unwrap_err().to_string();
    assert!(e.contains("outside the sysfs root"), "{e}");
    // a missing file is named with its path
    let (_d2, root2) = fixture("i915");
    std::fs::remove_file(root2.join("sys/class/hwmon/hwmon1/power1_rated_max")).unwrap();
    let g = SysfsGpus::open(&root2, 0).unwrap();
    let e = g.check_power_limit(0, 100.0).unwrap_err().to_string();
    assert!(
        e.contains("hwmon1/power1_rated_max") && e.contains("i915 driver"),
        "{e}"
    );
    assert!(SysfsGpus::open(&d.path().join("nothing"), 0).is_err());
}

/// NVML's GPUs (here the fake GPU standing for them) first, then the sysfs GPUs; a save of
/// one kind is refused on the other.
#[test]
fn node_gpus_number_nvml_first_then_sysfs() {
    let (d, root) = fixture("amdgpu-mi250x");
    crate::controller::tests::copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/sysfs/xe"),
        &root,
    );
    let gpu = d.path().join("gpu");
    std::fs::create_dir(&gpu).unwrap();
    crate::controller::tests::copy_tree(
        &Path::new(env!("CARGO_MANIFEST_DIR")).join("../../tests/fixtures/fake-gpu"),
        &gpu,
    );
    let fake = FakeGpu::open(&gpu).unwrap();
    let sys = SysfsGpus::open(&root, 1).unwrap();
    assert!(NodeGpus::new(None, Some(sys.clone())).is_err(), "numbering");
    let mut n = NodeGpus::new(Some(Box::new(fake)), Some(sys)).unwrap();
    assert_eq!(n.count(), 3, "{}", n.describe());
    assert_eq!(n.power_limit_w(0).unwrap(), 700.0);
    assert_eq!(n.power_limit_w(1).unwrap(), 300.0, "xe is hwmon2");
    assert_eq!(n.power_limit_w(2).unwrap(), 500.0, "amdgpu is hwmon3");
    assert!(matches!(
        n.power_limit_w(3),
        Err(GpuControlError::NoDevice { gpu: 3, count: 3 })
    ));
    let s2 = n.save(2, GpuKnob::LockedClocks).unwrap();
    n.set_locked_clocks(2, 800.0, 1700.0).unwrap();
    let s0 = n.save(0, GpuKnob::LockedClocks).unwrap();
    // the amdgpu save moved to the fake GPU, and the fake's to the amdgpu: refused
    assert!(n
        .validate(&GpuSaved {
            gpu: 0,
            ..s2.clone()
        })
        .is_err());
    assert!(n.validate(&GpuSaved { gpu: 2, ..s0 }).is_err());
    n.restore(&s2).unwrap();
    assert_eq!(
        read(&root.join("sys/class/hwmon/hwmon3/device/power_dpm_force_performance_level")),
        "auto\n"
    );
}

/// Journal entries written before issue 43 (no `sysfs`) load, and a new one round-trips.
#[test]
fn saved_json_old_and_new() {
    let old: GpuSaved =
        serde_json::from_str(r#"{"gpu":0,"knob":"power_limit","power_limit_w":700}"#).unwrap();
    assert_eq!(old.sysfs, None);
    let s = forged(1, GpuKnob::LockedClocks, None, intel(&[[300, 1600]]));
    let j = serde_json::to_string(&s).unwrap();
    assert_eq!(
        j,
        r#"{"gpu":1,"knob":"locked_clocks","sysfs":{"freq_mhz":[[300,1600]]}}"#
    );
    assert_eq!(serde_json::from_str::<GpuSaved>(&j).unwrap(), s);
    assert_eq!(
        s.to_string(),
        "GPU 1 locked clocks (gt min/max [300, 1600] MHz)"
    );
    assert_eq!(
        forged(0, GpuKnob::LockedClocks, None, amd("auto", 3)).to_string(),
        r#"GPU 0 locked clocks (performance level "auto", 3 sclk levels)"#
    );
    assert!(serde_json::from_str::<GpuSaved>(
        r#"{"gpu":1,"knob":"locked_clocks","sysfs":{"path":"/etc/passwd"}}"#
    )
    .is_err());
}

/// xe/i915: a limit that was off (`power1_max` 0) is put back as 0; a set of 0 is refused.
#[test]
fn an_intel_limit_that_was_off_is_put_back_off() {
    let (_d, root) = fixture("i915");
    let cap = root.join("sys/class/hwmon/hwmon1/power1_max");
    std::fs::write(&cap, "0\n").unwrap();
    let mut g = SysfsGpus::open(&root, 0).unwrap();
    let s = g.save(0, GpuKnob::PowerLimit).unwrap();
    assert_eq!(s.power_limit_w, Some(0.0));
    assert!(g.set_power_limit_w(0, 0.0).is_err());
    g.set_power_limit_w(0, 100.0).unwrap();
    assert_eq!(read(&cap), "100000000\n");
    g.restore(&s).unwrap();
    assert_eq!(read(&cap), "0\n");
}

/// amdgpu with an overdrive table (tests/fixtures/sysfs/amdgpu-mi300x): any whole MHz inside
/// `OD_RANGE` is taken, written as `s 0`, `s 1`, `c` after `manual`, and put back the same
/// way; a fixture file keeps only the last command (`c`), so the commands are checked in the
/// answers, and the rest of the tree byte for byte.
#[test]
fn amdgpu_overdrive_sclk_range_set_refused_and_restored() {
    let (_d, root) = fixture("amdgpu-mi300x");
    let dev = root.join("sys/class/hwmon/hwmon4/device");
    let before = tree(&root);
    let mut g = SysfsGpus::open(&root, 0).unwrap();
    assert!(g.cards()[0].od);
    let e = g
        .set_locked_clocks(0, 400.0, 1800.0)
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("500..2100 MHz (pp_od_clk_voltage OD_RANGE SCLK)"),
        "{e}"
    );
    assert!(g.check_locked_clocks(0, 600.5, 1800.0).is_err());
    assert_eq!(tree(&root), before);
    // a forged pair outside OD_RANGE, a level count on an overdrive save
    let mut f = forged(0, GpuKnob::LockedClocks, None, amd("auto", 3));
    assert!(g.validate(&f).is_err());
    f.sysfs = Some(SysfsSaved {
        perf_level: Some("auto".into()),
        sclk_levels: None,
        freq_mhz: vec![],
        od_sclk_mhz: Some([100, 2100]),
    });
    assert!(g
        .validate(&f)
        .unwrap_err()
        .to_string()
        .contains("outside OD_RANGE"));
    let s = g.save(0, GpuKnob::LockedClocks).unwrap();
    assert_eq!(s.sysfs.as_ref().unwrap().od_sclk_mhz, Some([500, 2100]));
    g.validate(&s).unwrap();
    let w = g.set_locked_clocks(0, 600.0, 1800.0).unwrap();
    let at = |k: &str| w.find(k).unwrap_or_else(|| panic!("{k} in {w}"));
    assert!(
        at("= manual") < at("= s 0 600") && at("= s 0 600") < at("= s 1 1800"),
        "{w}"
    );
    assert!(
        w.ends_with("pp_od_clk_voltage = c (reads back `c`)") || w.ends_with("= c"),
        "{w}"
    );
    assert_eq!(
        read(&dev.join("power_dpm_force_performance_level")),
        "manual\n"
    );
    let r = g.restore(&s).unwrap();
    assert!(
        r.contains("= s 0 500") && r.contains("= s 1 2100") && r.contains("= auto"),
        "{r}"
    );
    let mut after = tree(&root);
    assert_eq!(read(&dev.join("pp_od_clk_voltage")), "c\n");
    after.insert(
        dev.join("pp_od_clk_voltage"),
        before[&dev.join("pp_od_clk_voltage")].clone(),
    );
    assert_eq!(after, before);
}
