use super::*;

fn fixture(name: &str) -> (tempfile::TempDir, PathBuf) {
    let src = Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/fixtures/sysfs")
        .join(name);
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&src, dir.path());
    let root = dir.path().to_path_buf();
    (dir, root)
}

pub(crate) fn copy_tree(src: &Path, dst: &Path) {
    for e in std::fs::read_dir(src).unwrap().flatten() {
        let to = dst.join(e.file_name());
        if e.path().is_dir() {
            std::fs::create_dir_all(&to).unwrap();
            copy_tree(&e.path(), &to);
        } else {
            std::fs::copy(e.path(), &to).unwrap();
        }
    }
}

fn read(root: &Path, cpu: u32, f: &str) -> String {
    std::fs::read_to_string(root.join(format!("sys/devices/system/cpu/cpu{cpu}/cpufreq/{f}")))
        .unwrap()
        .trim()
        .to_string()
}

#[test]
fn userspace_set_and_restore() {
    let (_d, root) = fixture("cpufreq-userspace");
    let mut c = CpufreqController::open(&root).unwrap();
    assert_eq!(c.method(), CpufreqMethod::Userspace);
    assert_eq!(c.cpus(), vec![0, 1]);
    let r = c.range().unwrap();
    assert_eq!((r.min_mhz, r.max_mhz), (1200.0, 2400.0));
    let snap = c.snapshot().unwrap();
    let w = c.set(1600.0).unwrap();
    assert_eq!(w.len(), 4);
    assert_eq!(read(&root, 1, "scaling_governor"), "userspace");
    assert_eq!(read(&root, 1, "scaling_setspeed"), "1600000");
    c.restore(&snap).unwrap();
    assert_eq!(read(&root, 0, "scaling_governor"), "schedutil");
    assert_eq!(read(&root, 1, "scaling_governor"), "schedutil");
    // outside the list / range
    let e = c.set(1700.0).unwrap_err().to_string();
    assert!(
        e.contains("1700") && e.contains("1200, 1600, 2000, 2400"),
        "{e}"
    );
    assert!(c.set(3000.0).is_err());
    assert_eq!(read(&root, 0, "scaling_governor"), "schedutil");
}

#[test]
fn intel_pstate_clamps_and_restores_in_a_safe_order() {
    let (_d, root) = fixture("cpufreq-intel-pstate");
    let mut c = CpufreqController::open(&root).unwrap();
    assert_eq!(c.method(), CpufreqMethod::Clamp);
    let snap = c.snapshot().unwrap();
    let w = c.set(1500.0).unwrap();
    // lowering: min (800 -> 1500) is below the current max, so min first
    assert!(w[0].path.ends_with("scaling_min_freq"), "{w:?}");
    assert_eq!(read(&root, 0, "scaling_min_freq"), "1500000");
    assert_eq!(read(&root, 0, "scaling_max_freq"), "1500000");
    let r = c.restore(&snap).unwrap();
    // restoring: new min 800 is below the current max 1500 -> min first too
    assert_eq!(r.len(), 4);
    assert_eq!(read(&root, 1, "scaling_min_freq"), "800000");
    assert_eq!(read(&root, 1, "scaling_max_freq"), "4700000");
    assert!(c
        .set(5000.0)
        .unwrap_err()
        .to_string()
        .contains("800 to 4700 MHz"));
}

/// A cpufreq directory that resolves outside the root (a link planted in a fixture or
/// a hostile tree) is refused before anything is read or written through it.
#[test]
fn a_cpufreq_dir_resolving_outside_the_root_is_refused() {
    let d = tempfile::tempdir().unwrap();
    let root = d.path().join("root");
    std::fs::create_dir(&root).unwrap();
    copy_tree(
        &Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
            .join("tests/fixtures/sysfs/cpufreq-userspace"),
        &root,
    );
    let cpu1 = root.join("sys/devices/system/cpu/cpu1/cpufreq");
    let outside = d.path().join("outside");
    std::fs::rename(&cpu1, &outside).unwrap();
    std::os::unix::fs::symlink(&outside, &cpu1).unwrap();
    let e = CpufreqController::open(&root).unwrap_err().to_string();
    assert!(e.contains("outside the sysfs root"), "{e}");
}

/// Saved settings are checked against the files' own lists before a restore.
#[test]
fn saved_settings_are_validated() {
    let (_d, root) = fixture("cpufreq-userspace");
    let c = CpufreqController::open(&root).unwrap();
    let ok = c.snapshot().unwrap();
    c.validate(&ok).unwrap();
    let one = |path: &str, value: &str| Snapshot {
        files: vec![SavedFile {
            path: path.into(),
            value: value.into(),
        }],
    };
    let d0 = "sys/devices/system/cpu/cpu0/cpufreq";
    for (snap, named) in [
        (
            one(
                &format!("{d0}/../../../../../etc/x/scaling_governor"),
                "performance",
            ),
            "outside",
        ),
        (
            one(&format!("{d0}/scaling_driver"), "acpi"),
            "not a file powerperf writes",
        ),
        (
            one(&format!("{d0}/scaling_governor"), "pwned"),
            "scaling_available_governors",
        ),
        (
            one(&format!("{d0}/scaling_max_freq"), "9999999"),
            "cpuinfo_max_freq",
        ),
        (one(&format!("{d0}/scaling_setspeed"), "-1"), "kHz"),
        (
            one(
                "sys/devices/system/cpu/cpu7/cpufreq/scaling_governor",
                "performance",
            ),
            "outside",
        ),
        (
            one("scaling_governor", "performance"),
            "not a cpufreq file path",
        ),
    ] {
        let e = c.validate(&snap).unwrap_err().to_string();
        assert!(e.contains(named), "{e}");
    }
}

/// A controller restricted to some CPUs sets and snapshots only those.
#[test]
fn only_cpus_sets_only_the_named_cpus() {
    let (_d, root) = fixture("cpufreq-userspace");
    let c = CpufreqController::open(&root).unwrap();
    let mut one = c.only_cpus(&[1]).unwrap();
    assert_eq!(one.cpus(), vec![1]);
    let snap = one.snapshot().unwrap();
    assert!(
        snap.files.iter().all(|f| f.path.contains("cpu1/")),
        "{snap:?}"
    );
    one.set(1600.0).unwrap();
    assert_eq!(read(&root, 1, "scaling_setspeed"), "1600000");
    assert_eq!(read(&root, 0, "scaling_governor"), "schedutil");
    one.restore(&snap).unwrap();
    assert_eq!(read(&root, 1, "scaling_governor"), "schedutil");
    let e = c.only_cpus(&[7]).unwrap_err().to_string();
    assert!(e.contains("CPU 7") && e.contains("[0, 1]"), "{e}");
    assert!(c.only_cpus(&[]).is_err());
}

#[test]
fn missing_cpufreq_is_reported() {
    let d = tempfile::tempdir().unwrap();
    let e = CpufreqController::open(d.path()).unwrap_err().to_string();
    assert!(e.contains("no cpufreq") && e.contains("--dry-run"), "{e}");
}

#[test]
fn fake_and_nvml() {
    let mut f = FakeController::new(&[1000.0, 2000.0]);
    let s = f.snapshot().unwrap();
    f.set(1000.0).unwrap();
    assert!(f.set(1500.0).is_err());
    f.restore(&s).unwrap();
    assert_eq!(
        *f.log.lock().unwrap(),
        vec!["set 1000".to_string(), "restore 2000".to_string()]
    );
    let mut n = NvmlLockedClocks { device: 0 };
    assert!(n.set(900.0).is_err());
    let d = n.describe_set(Some(861.0), Some(3505.0));
    assert_eq!(
        d[0],
        "nvmlDeviceSetGpuLockedClocks(device 0, minGpuClockMHz 861, maxGpuClockMHz 861)"
    );
}

#[test]
fn governors_are_checked_against_the_cpus_list_set_and_restored() {
    let (_d, root) = fixture("cpufreq-intel-pstate");
    let c = CpufreqController::open(&root).unwrap();
    // the clamp method's snapshot has no governor; the one powerperfd saves has
    let snap = c.snapshot_with_governor().unwrap();
    assert!(snap
        .files
        .iter()
        .any(|f| f.path.ends_with("cpu1/cpufreq/scaling_governor") && f.value == "powersave"));
    c.validate(&snap).unwrap();
    for bad in ["userspace", "", "performance\nx", "../scaling_setspeed"] {
        let e = c.plan_governor(bad).unwrap_err().to_string();
        assert!(
            e.contains("is not a governor of this CPU") && e.contains("performance powersave"),
            "{bad}: {e}"
        );
    }
    // already on it: nothing to write
    assert!(c.plan_governor("powersave").unwrap().is_empty());
    let mut one = c.only_cpus(&[1]).unwrap();
    let w = one.set_governor("performance").unwrap();
    assert_eq!(w.len(), 1, "{w:?}");
    assert_eq!(read(&root, 1, "scaling_governor"), "performance");
    assert_eq!(read(&root, 0, "scaling_governor"), "powersave");
    let mut all = c.clone();
    all.restore(&snap).unwrap();
    assert_eq!(read(&root, 1, "scaling_governor"), "powersave");
}
