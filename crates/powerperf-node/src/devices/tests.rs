//! The readers on the fixture trees of issue 43 (tests/fixtures/sysfs/README.md): the value
//! each file gives, in W, J and MHz; counters advancing and going backwards; files missing,
//! unreadable or holding garbage.

use super::*;
use crate::controller::tests::copy_tree;
use crate::nvml::{GpuReading, GpuSource};

fn src(name: &str) -> PathBuf {
    Path::new(concat!(env!("CARGO_MANIFEST_DIR"), "/../.."))
        .join("tests/fixtures/sysfs")
        .join(name)
}

/// A copy of fixture `name` to change.
fn copy(name: &str) -> (tempfile::TempDir, PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    copy_tree(&src(name), dir.path());
    let root = dir.path().to_path_buf();
    (dir, root)
}

const OPTS: DiscoverOptions = DiscoverOptions {
    nvml: false,
    probe_daemon: false,
};

fn find<'a>(d: &'a mut Discovery, stem: &str) -> &'a mut Box<dyn PowerDevice> {
    let stems: Vec<String> = d.devices.iter().map(|x| x.stem().to_string()).collect();
    d.devices
        .iter_mut()
        .find(|x| x.stem() == stem)
        .unwrap_or_else(|| panic!("no device {stem} among {stems:?}"))
}

fn stems(d: &Discovery) -> Vec<&str> {
    d.devices.iter().map(|x| x.stem()).collect()
}

fn controls(d: &Discovery) -> Vec<String> {
    d.listing
        .iter()
        .filter(|s| s.quantity == Quantity::Control)
        .map(|s| s.path.file_name().unwrap().to_string_lossy().into_owned())
        .collect()
}

fn write(root: &Path, rel: &str, text: &str) {
    std::fs::write(root.join(rel), text).unwrap();
}

#[test]
fn amdgpu_power_clock_and_gpu_metrics_energy() {
    let mut d = discover_with(&src("amdgpu-mi250x"), OPTS);
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    assert_eq!(stems(&d), ["amdgpu0"]);
    let g = find(&mut d, "amdgpu0");
    assert_eq!(g.origin(), Origin::Amdgpu);
    assert_eq!(g.power_from(), PowerFrom::Measured);
    assert_eq!(g.energy_from(), EnergyFrom::Counter);
    assert!(g.source().contains("gpu_metrics v1.3"), "{}", g.source());
    let s = g.read();
    assert_eq!(s.power_w, Some(90.0));
    assert_eq!(s.clock_mhz, Some(1700.0));
    // 6,553,600,000 units of 2^-16 J (make_amdgpu_gpu_metrics.py).
    assert_eq!(s.energy_j, Some(100_000.0));
    assert_eq!(
        controls(&d),
        [
            "power1_cap",
            "power_dpm_force_performance_level",
            "pp_dpm_sclk"
        ]
    );
    let cap = d
        .listing
        .iter()
        .find(|s| s.path.ends_with("power1_cap"))
        .unwrap();
    assert!(cap.label.contains("100–560 W"), "{}", cap.label);
    assert_eq!(cap.readable, Access::Yes);
}

#[test]
fn amdgpu_without_gpu_metrics_integrates_power_and_falls_back_to_power1_input() {
    let (_t, root) = copy("amdgpu-mi250x");
    let h = root.join("sys/class/hwmon/hwmon3");
    std::fs::remove_file(h.join("device/gpu_metrics")).unwrap();
    std::fs::remove_file(h.join("power1_average")).unwrap();
    write(&h, "power1_input", "75500000\n");
    let mut d = discover_with(&root, OPTS);
    let g = find(&mut d, "amdgpu0");
    assert_eq!(g.energy_from(), EnergyFrom::PowerIntegral);
    let s = g.read();
    assert_eq!(s.power_w, Some(75.5));
    assert_eq!(s.energy_j, None);
}

/// A driver that lists `power1_average` but cannot read it (here: not a number) falls back
/// to `power1_input`, for amdgpu and for any hwmon power channel.
#[test]
fn an_average_that_does_not_read_falls_back_to_input() {
    let (_t, root) = copy("amdgpu-mi250x");
    let h = root.join("sys/class/hwmon/hwmon3");
    write(&h, "power1_average", "\n");
    write(&h, "power1_input", "88000000\n");
    let mut d = discover_with(&root, OPTS);
    assert_eq!(find(&mut d, "amdgpu0").read().power_w, Some(88.0));
    let (_t, root) = copy("hwmon-arm");
    let h = root.join("sys/class/hwmon/hwmon0");
    write(&h, "power1_average", "x\n");
    let mut d = discover_with(&root, OPTS);
    assert_eq!(
        find(&mut d, "scmi_sensors0_gpu_power").read().power_w,
        Some(2.5)
    );
    assert!(d.problems.is_empty(), "{:?}", d.problems);
}

#[test]
fn gpu_metrics_of_another_version_is_refused_with_a_note() {
    let (_t, root) = copy("amdgpu-mi250x");
    let p = root.join("sys/class/hwmon/hwmon3/device/gpu_metrics");
    let mut b = std::fs::read(&p).unwrap();
    b[2] = 2; // format_revision 2: an APU's table, no energy_accumulator
    b[3] = 1;
    std::fs::write(&p, &b).unwrap();
    let mut d = discover_with(&root, OPTS);
    assert!(
        d.notes.iter().any(|n| n.contains("v2.1 is not parsed")),
        "{:?}",
        d.notes
    );
    assert_eq!(
        find(&mut d, "amdgpu0").energy_from(),
        EnergyFrom::PowerIntegral
    );
    // Too short for its counter.
    std::fs::write(&p, [120, 0, 1, 3, 0, 0]).unwrap();
    assert!(matches!(
        GpuMetricsEnergy::probe(&p),
        Err(GpuMetricsRefusal::Version(e)) if e.contains("too short")
    ));
    // A counter the firmware leaves at all ones.
    let mut b =
        std::fs::read(src("amdgpu-mi250x").join("sys/class/hwmon/hwmon3/device/gpu_metrics"))
            .unwrap();
    b[24..32].copy_from_slice(&[0xff; 8]);
    std::fs::write(&p, &b).unwrap();
    assert_eq!(
        GpuMetricsEnergy::probe(&p),
        Err(GpuMetricsRefusal::NoCounter)
    );
}

#[test]
fn xe_card_and_pkg_energy_advance_and_list_their_controls() {
    let (_t, root) = copy("xe");
    let mut d = discover_with(&root, OPTS);
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    assert_eq!(stems(&d), ["xe0_card", "xe0_pkg"]);
    let card = find(&mut d, "xe0_card");
    assert_eq!(card.power_from(), PowerFrom::EnergyRate);
    assert_eq!(card.label(), "Intel GPU 0 card");
    let s = card.read();
    assert_eq!(s.power_w, None);
    assert_eq!(s.energy_j, Some(1_234_567.890123));
    // The counter advances 5 J.
    write(
        &root,
        "sys/class/hwmon/hwmon2/energy1_input",
        "1234572890123\n",
    );
    let e = card.read().energy_j.unwrap();
    assert!((e - 1_234_572.890123).abs() < 1e-6, "{e}");
    assert_eq!(find(&mut d, "xe0_pkg").read().energy_j, Some(987_654.321));
    assert_eq!(
        controls(&d),
        [
            "power1_max",
            "power2_max",
            "min_freq",
            "max_freq",
            "min_freq",
            "max_freq"
        ]
    );
    let tile1 = d
        .listing
        .iter()
        .filter(|s| s.label.starts_with("tile1/gt1"))
        .count();
    assert_eq!(tile1, 2);
}

#[test]
fn a_counter_going_backwards_keeps_energy_monotonic() {
    let (_t, root) = copy("i915");
    let f = "sys/class/hwmon/hwmon1/energy1_input";
    let mut d = discover_with(&root, OPTS);
    assert_eq!(stems(&d), ["i915_0"]);
    let dev = find(&mut d, "i915_0");
    let first = dev.read().energy_j.unwrap();
    assert_eq!(first, 456_789.012345);
    // A driver reload: the counter restarts near zero.
    write(&root, f, "1000000\n");
    assert_eq!(dev.read().energy_j, Some(first));
    assert_eq!(dev.counter_resets(), 1);
    // Then it advances 2 J from its new value.
    write(&root, f, "3000000\n");
    let e = dev.read().energy_j.unwrap();
    assert!((e - (first + 2.0)).abs() < 1e-6, "{e}");
    let mut c = EnergyCounter::default();
    c.update(10, 1.0);
    c.update(4, 1.0);
    assert_eq!(c.resets(), 1);
    assert_eq!(c.update(6, 1.0), 12.0);
}

/// xe's clock is gt0's `act_freq` (MHz), on its first device (`xe0_card`): not the other
/// tile's gt, and not the pkg channel; a GT asleep (0 MHz) is no value, and the clock stays
/// a column of the device.
#[test]
fn xe_clock_is_gt0_act_freq_and_zero_is_no_value() {
    let (_t, root) = copy("xe");
    let dev = "sys/class/hwmon/hwmon2/device";
    write(&root, &format!("{dev}/tile1/gt1/freq0/act_freq"), "900\n");
    let mut d = discover_with(&root, OPTS);
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    let card = find(&mut d, "xe0_card");
    assert!(card.has_clock());
    assert_eq!(card.sysfs_gpu(), Some(0));
    assert_eq!(card.read().clock_mhz, Some(1550.0));
    assert!(
        card.source().contains("tile0/gt0/freq0/act_freq (MHz"),
        "{}",
        card.source()
    );
    write(&root, &format!("{dev}/tile0/gt0/freq0/act_freq"), "0\n");
    assert_eq!(card.read().clock_mhz, None);
    write(&root, &format!("{dev}/tile0/gt0/freq0/act_freq"), "1200\n");
    assert_eq!(card.read().clock_mhz, Some(1200.0));
    let pkg = find(&mut d, "xe0_pkg");
    assert!(!pkg.has_clock());
    assert_eq!(pkg.sysfs_gpu(), Some(0));
    assert_eq!(pkg.read().clock_mhz, None);
}

/// A hostile actual-frequency file (root reads it in a sweep): a link is not followed, a
/// FIFO does not hang, neither becomes a clock, at discovery or when swapped in later.
#[test]
fn a_hostile_act_freq_is_no_clock() {
    let (_t, root) = copy("xe");
    let act = root.join("sys/class/hwmon/hwmon2/device/tile0/gt0/freq0/act_freq");
    let secret = root.join("secret");
    std::fs::write(&secret, "1234\n").unwrap();
    std::fs::remove_file(&act).unwrap();
    std::os::unix::fs::symlink(&secret, &act).unwrap();
    let mut d = discover_with(&root, OPTS);
    assert!(!find(&mut d, "xe0_card").has_clock());
    // a clock found at discovery, then the file swapped for a link or a FIFO
    std::fs::remove_file(&act).unwrap();
    std::fs::write(&act, "1550\n").unwrap();
    let mut d = discover_with(&root, OPTS);
    let card = find(&mut d, "xe0_card");
    assert_eq!(card.read().clock_mhz, Some(1550.0));
    std::fs::remove_file(&act).unwrap();
    std::os::unix::fs::symlink(&secret, &act).unwrap();
    assert_eq!(card.read().clock_mhz, None);
    std::fs::remove_file(&act).unwrap();
    let c = std::ffi::CString::new(act.to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    assert_eq!(card.read().clock_mhz, None);
}

/// i915's clock is `gt_act_freq_mhz` of the card the controls use (MHz); garbage there is
/// no clock (the file is read like every other: bounded, no link followed).
#[test]
fn i915_clock_is_gt_act_freq_mhz() {
    let (_t, root) = copy("i915");
    let card = "sys/class/hwmon/hwmon1/device/drm/card0";
    let mut d = discover_with(&root, OPTS);
    let dev = find(&mut d, "i915_0");
    assert!(dev.has_clock());
    assert_eq!(dev.read().clock_mhz, Some(2000.0));
    write(&root, &format!("{card}/gt_act_freq_mhz"), "650\n");
    assert_eq!(dev.read().clock_mhz, Some(650.0));
    write(&root, &format!("{card}/gt_act_freq_mhz"), "fast\n");
    assert_eq!(dev.read().clock_mhz, None);
    // without the file, no clock at all
    std::fs::remove_file(root.join(card).join("gt_act_freq_mhz")).unwrap();
    let mut d = discover_with(&root, OPTS);
    assert!(!find(&mut d, "i915_0").has_clock());
}

/// The sysfs GPUs of a tree with all four drivers' cards (the i915, xe and two amdgpu
/// fixtures, hwmon1..hwmon4): [`gpu_hwmons`] orders them as `SysfsGpus` numbers them, and
/// [`gpu_stems`] gives each one's column stem, as collect names it.
#[test]
fn gpu_stems_follow_the_order_of_the_gpu_controls() {
    let dir = tempfile::tempdir().unwrap();
    for f in ["i915", "xe", "amdgpu-mi250x", "amdgpu-mi300x"] {
        copy_tree(&src(f), dir.path());
    }
    let g = gpu_hwmons(dir.path());
    let o: Vec<(Origin, usize)> = g.iter().map(|g| (g.origin, g.rank)).collect();
    assert_eq!(
        o,
        [
            (Origin::I915, 0),
            (Origin::Xe, 0),
            (Origin::Amdgpu, 0),
            (Origin::Amdgpu, 1)
        ]
    );
    assert_eq!(
        gpu_stems(dir.path()),
        [
            Some("i915_0".to_string()),
            Some("xe0_card".into()),
            Some("amdgpu0".into()),
            Some("amdgpu1".into())
        ]
    );
    let s = crate::gpu_control::sysfs::SysfsGpus::open(dir.path(), 0).unwrap();
    let drivers: Vec<&str> = s.cards().iter().map(|c| c.driver.name()).collect();
    assert_eq!(drivers, ["i915", "xe", "amdgpu", "amdgpu"]);
    assert!(gpu_stems(&src("grace-hopper")).is_empty());
}

#[test]
fn i915_controls() {
    let d = discover_with(&src("i915"), OPTS);
    assert_eq!(
        controls(&d),
        ["power1_max", "gt_min_freq_mhz", "gt_max_freq_mhz"]
    );
    assert!(d.listing.iter().all(|s| s.origin == Origin::I915));
}

#[test]
fn grace_hopper_power_meters() {
    let mut d = discover_with(&src("grace-hopper"), OPTS);
    assert!(d.problems.is_empty(), "{:?}", d.problems);
    assert_eq!(
        stems(&d),
        [
            "power_meter0_module",
            "power_meter1_grace",
            "power_meter2_cpu",
            "power_meter3_sysio"
        ]
    );
    for (stem, w, label) in [
        ("power_meter0_module", 450.0, "Module Power Socket 0"),
        ("power_meter1_grace", 120.0, "Grace Power Socket 0"),
        ("power_meter2_cpu", 80.0, "CPU Power Socket 0"),
        ("power_meter3_sysio", 15.0, "SysIO Power Socket 0"),
    ] {
        let m = find(&mut d, stem);
        assert_eq!(m.label(), label);
        assert_eq!(m.energy_from(), EnergyFrom::PowerIntegral);
        assert!(
            m.source().contains("device/power1_average"),
            "{}",
            m.source()
        );
        assert_eq!(m.read().power_w, Some(w));
    }
    assert!(d
        .listing
        .iter()
        .all(|s| s.name.as_deref() == Some("power_meter")));
}

#[test]
fn arm_hwmon_sensors_with_their_labels_and_no_temperature_only_device() {
    let mut d = discover_with(&src("hwmon-arm"), OPTS);
    assert_eq!(
        stems(&d),
        [
            "scmi_sensors0_a57_energy",
            "scmi_sensors0_a53_energy",
            "scmi_sensors0_gpu_power"
        ]
    );
    assert_eq!(
        find(&mut d, "scmi_sensors0_a57_energy").read().energy_j,
        Some(9876.54321)
    );
    assert_eq!(
        find(&mut d, "scmi_sensors0_gpu_power").read().power_w,
        Some(2.5)
    );
    assert!(d
        .listing
        .iter()
        .all(|s| s.name.as_deref() == Some("scmi_sensors")));
}

#[test]
fn unreadable_files_are_named_with_their_fix_also_as_root() {
    let (_t, root) = copy("xe");
    let e1 = root.join("sys/class/hwmon/hwmon2/energy1_input");
    std::fs::remove_file(&e1).unwrap();
    std::fs::create_dir(&e1).unwrap();
    write(&root, "sys/class/hwmon/hwmon2/energy2_input", "12 µJ\n");
    let d = discover_with(&root, OPTS);
    assert!(d.devices.is_empty(), "{:?}", stems(&d));
    assert!(
        d.problems
            .iter()
            .any(|p| p.contains("energy1_input") && p.contains("directory")),
        "{:?}",
        d.problems
    );
    assert!(
        d.problems
            .iter()
            .any(|p| p.contains("energy2_input") && p.contains("`12 µJ`")),
        "{:?}",
        d.problems
    );
    let row = d.listing.iter().find(|s| s.path == e1).unwrap();
    assert!(matches!(&row.readable, Access::No(why) if why.contains("regular file")));
}

#[test]
fn a_root_only_file_says_how_to_read_it() {
    use std::os::unix::fs::PermissionsExt as _;
    if crate::daemon::client::is_root() {
        println!("skipped: running as root, where mode 000 does not stop a read (the test above covers unreadable files as root)");
        return;
    }
    let (_t, root) = copy("grace-hopper");
    let p = root.join("sys/class/hwmon/hwmon0/device/power1_average");
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o000)).unwrap();
    let d = discover_with(&root, OPTS);
    assert_eq!(d.devices.len(), 3);
    assert!(
        d.problems
            .iter()
            .any(|e| e.contains("powerperfd") && e.contains("chmod a+r")),
        "{:?}",
        d.problems
    );
}

#[test]
fn stems_are_lower_case_short_and_unique() {
    assert_eq!(
        hwmon::stem_part("Module Power Socket 0"),
        "module_power_socket_0"
    );
    assert_eq!(hwmon::stem_part("  GPU-Power (W) "), "gpu_power_w");
    assert!(hwmon::stem_part(&"x".repeat(80)).len() <= 24);
    let mut ctx = Ctx {
        out: Discovery::default(),
        stems: BTreeSet::new(),
        daemon: access::DaemonView::Absent,
    };
    assert_eq!(ctx.unique_stem("a0_x".into()), "a0_x");
    assert_eq!(ctx.unique_stem("a0_x".into()), "a0_x_2");
    // Two hwmon devices of one name get ranks 0 and 1.
    let (_t, root) = copy("hwmon-arm");
    let hw = root.join("sys/class/hwmon");
    std::fs::create_dir_all(hw.join("hwmon7")).unwrap();
    copy_tree(&hw.join("hwmon0"), &hw.join("hwmon7"));
    let d = discover_with(&root, OPTS);
    assert!(
        stems(&d).contains(&"scmi_sensors1_gpu_power"),
        "{:?}",
        stems(&d)
    );
}

/// A GPU source with one GPU whose counter is scripted.
struct Scripted(Vec<u64>);

impl GpuSource for Scripted {
    fn count(&self) -> u32 {
        1
    }
    fn name(&self, _: u32) -> String {
        "Scripted GPU".into()
    }
    fn power_source(&self, _: u32) -> &'static str {
        "scripted"
    }
    fn read(&mut self, _: u32) -> GpuReading {
        let mj = self.0.remove(0);
        GpuReading {
            power_w: Some(300.0),
            energy_mj: Some(mj),
            sm_clock_mhz: Some(1980.0),
            ..Default::default()
        }
    }
}

#[test]
fn nvml_gpus_are_devices_named_gpu_i() {
    let mut devs = nvml_devices(Box::new(Scripted(vec![5_000, 7_500, 1_000])));
    let g = &mut devs[0];
    assert_eq!(
        (g.stem(), g.origin(), g.label()),
        ("gpu0", Origin::Nvml, "Scripted GPU")
    );
    let s = g.read();
    assert_eq!(
        (s.power_w, s.energy_j, s.clock_mhz),
        (Some(300.0), Some(5.0), Some(1980.0))
    );
    assert_eq!(g.read().energy_j, Some(7.5));
    assert_eq!(g.read().energy_j, Some(7.5)); // driver reloaded: no step back
    assert_eq!(g.counter_resets(), 1);
}

#[test]
fn no_source_under_an_empty_root() {
    let t = tempfile::tempdir().unwrap();
    let d = discover_with(t.path(), OPTS);
    assert!(d.devices.is_empty() && d.listing.is_empty() && d.problems.is_empty());
    assert!(d.notes.iter().any(|n| n.contains("RAPL")), "{:?}", d.notes);
}

/// On a node with NVIDIA GPUs (the H200): NVML is listed, each GPU a device `gpu<i>` that
/// reads power and energy, and nothing listed is unreadable.
#[test]
fn this_node_lists_nvml_and_nothing_it_cannot_read() {
    let mut d = discover_with(Path::new("/"), DiscoverOptions::default());
    if d.notes.iter().any(|n| n.starts_with("NVML not available")) {
        println!("skipped: no NVML on this machine ({})", d.notes.join("; "));
        return;
    }
    for s in &d.listing {
        println!(
            "{} {:?} {:?} {} {:?} {:?}",
            s.origin.as_str(),
            s.stem,
            s.quantity,
            s.path.display(),
            s.readable,
            s.settable
        );
    }
    for n in d.notes.iter().chain(&d.problems) {
        println!("note/problem: {n}");
    }
    let nvml: Vec<&SourceInfo> = d
        .listing
        .iter()
        .filter(|s| s.origin == Origin::Nvml)
        .collect();
    assert!(
        !nvml.is_empty(),
        "NVML loaded but nothing listed: {:?}",
        d.notes
    );
    assert!(
        d.listing
            .iter()
            .all(|s| !matches!(s.readable, Access::No(_))),
        "a listed source is unreadable"
    );
    let g = find(&mut d, "gpu0");
    let a = g.read();
    std::thread::sleep(std::time::Duration::from_millis(200));
    let b = g.read();
    println!("gpu0 {a:?} then {b:?}");
    assert!(a.power_w.is_some_and(|p| p > 0.0), "{a:?}");
    assert!(b.energy_j >= a.energy_j, "{a:?} {b:?}");
}

/// What powerperfd (root) reads under a sysfs root that someone else may have filled: a
/// FIFO where a value is expected does not hang the read, a link is not followed (to a root
/// file whose digits would pass as a reading), a huge file is not read into memory.
#[test]
fn hostile_files_are_refused_without_hanging_or_following_links() {
    let (_t, root) = copy("grace-hopper");
    let dev = |n: u32| root.join(format!("sys/class/hwmon/hwmon{n}/device/power1_average"));
    std::fs::remove_file(dev(0)).unwrap();
    let c = std::ffi::CString::new(dev(0).to_str().unwrap()).unwrap();
    // SAFETY: a valid NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
    let secret = root.join("secret");
    std::fs::write(&secret, "123456789\n").unwrap();
    std::fs::remove_file(dev(1)).unwrap();
    std::os::unix::fs::symlink(&secret, dev(1)).unwrap();
    let big = std::fs::File::create(dev(2)).unwrap();
    big.set_len(1 << 30).unwrap();
    let mut d = discover_with(&root, OPTS);
    assert_eq!(stems(&d), ["power_meter3_sysio"], "{:?}", d.problems);
    let has = |what: &str, p: &Path| {
        d.problems
            .iter()
            .any(|e| e.contains(what) && e.contains(&*p.to_string_lossy()))
    };
    assert!(has("FIFO", &dev(0)), "{:?}", d.problems);
    assert!(has("symbolic link", &dev(1)), "{:?}", d.problems);
    assert!(has("bytes, more than", &dev(2)), "{:?}", d.problems);
    assert_eq!(
        find(&mut d, "power_meter3_sysio").read().power_w,
        Some(15.0)
    );
}
