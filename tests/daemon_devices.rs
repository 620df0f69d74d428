//! powerperfd and the sysfs power devices of issue 43, as root on fixture trees: `read_power`
//! returns each device's reading (origin, stem, files, W and J) besides RAPL's and NVML's,
//! and the metrics endpoint exports `powerperf_device_power_watts`,
//! `powerperf_device_energy_joules_total` and `powerperf_device_clock_hertz`. The daemon runs
//! on a copy of the Grace Hopper fixture (four ACPI power meters) with an xe card and an
//! amdgpu card added as other hwmon devices. Prints `skipped: …` when not root.

mod common;

use common::daemon::World;
use common::NOBODY;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

const CONFIG: &str = r#"
[[grant]]
name = "power-readers"
users = ["nobody"]
read = ["power"]
"#;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

const XE: &str = "sys/class/hwmon/hwmon7";

/// The world's root with the Grace meters (hwmon0–3), the xe card as hwmon7 and the amdgpu
/// card as hwmon8.
fn with_devices(w: &World) {
    common::copy_tree(&fixture("grace-hopper"), &w.root);
    common::copy_tree(&fixture("xe/sys/class/hwmon/hwmon2"), &w.root.join(XE));
    common::copy_tree(
        &fixture("amdgpu-mi250x/sys/class/hwmon/hwmon3"),
        &w.root.join("sys/class/hwmon/hwmon8"),
    );
}

/// Write a whole number into `p` at once (a new file renamed over it).
fn put(dir: &Path, p: &Path, v: u64) {
    let tmp = dir.join("next-value");
    std::fs::write(&tmp, format!("{v}\n")).unwrap();
    std::fs::rename(&tmp, p).unwrap();
}

#[test]
fn read_power_returns_the_sysfs_devices_in_watts_and_joules() {
    let Some(mut w) = World::new("daemon read_power devices", CONFIG) else {
        return;
    };
    with_devices(&w);
    w.start();
    let o = w.request(NOBODY, &[r#"{"op":"read_power"}"#]);
    let t = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{t}");
    let v: serde_json::Value = serde_json::from_str(t.lines().next().unwrap()).unwrap();
    let power = v["power"].as_array().unwrap();
    let get = |name: &str| {
        power
            .iter()
            .find(|r| r["name"] == name)
            .unwrap_or_else(|| panic!("no {name}: {t}"))
    };
    for (stem, watts) in [
        ("power_meter0_module", 450.0),
        ("power_meter1_grace", 120.0),
        ("power_meter2_cpu", 80.0),
        ("power_meter3_sysio", 15.0),
    ] {
        let r = get(stem);
        assert_eq!(r["origin"], "hwmon", "{r}");
        assert_eq!(r["power_w"].as_f64(), Some(watts), "{r}");
        assert!(r["energy_j"].is_null(), "a power meter has no counter: {r}");
        assert!(
            r["source"]
                .as_str()
                .unwrap()
                .contains("device/power1_average"),
            "{r}"
        );
    }
    let amd = get("amdgpu0");
    assert_eq!(
        (amd["origin"].as_str(), amd["power_w"].as_f64()),
        (Some("amdgpu"), Some(90.0))
    );
    // xe: energy1_input is 1234567890123 µJ in the fixture
    let xe = get("xe0_card");
    assert_eq!(xe["origin"], "xe");
    assert_eq!(xe["energy_j"].as_f64(), Some(1_234_567.890123), "{xe}");
    assert!(xe["power_w"].is_null(), "{xe}");
    assert!(
        xe["source"]
            .as_str()
            .unwrap()
            .contains("hwmon7/energy1_input"),
        "{xe}"
    );
    // the fake GPU is still there, unchanged (NVML's readings keep their origin)
    assert!(power.iter().any(|r| r["origin"] == "nvml"), "{t}");
}

/// The metrics address powerperfd logged at start.
fn metrics_address(w: &World) -> String {
    let t = Instant::now();
    loop {
        if let Some(a) = w
            .log_text()
            .lines()
            .filter(|l| l.contains("metrics: serving GET /metrics"))
            .find_map(|l| l.split("address=").nth(1))
        {
            return a.split_whitespace().next().unwrap().to_string();
        }
        assert!(t.elapsed() < Duration::from_secs(10), "{}", w.log_text());
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn scrape(addr: &str) -> String {
    let o = Command::new("curl")
        .args(["-sS", "--max-time", "5", &format!("http://{addr}/metrics")])
        .output()
        .expect("curl");
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    String::from_utf8_lossy(&o.stdout).into_owned()
}

/// The value of the one sample of `metric` whose labels contain `device="stem"`.
fn sample(text: &str, metric: &str, stem: &str) -> Option<f64> {
    let dev = format!("device=\"{stem}\"");
    text.lines()
        .filter(|l| l.starts_with(&format!("{metric}{{")) && l.contains(&dev))
        .find_map(|l| l.rsplit(' ').next()?.parse().ok())
}

#[test]
fn metrics_export_device_power_energy_and_clock() {
    let Some(mut w) = World::new("daemon metrics devices", CONFIG) else {
        return;
    };
    with_devices(&w);
    let counter = w.root.join(XE).join("energy1_input");
    let start_uj = 1_234_567_890_123u64;
    w.daemon_args = vec!["--metrics-listen".into(), "127.0.0.1:0".into()];
    w.start();
    let addr = metrics_address(&w);
    let text = scrape(&addr);
    assert!(
        text.contains("# TYPE powerperf_device_power_watts gauge")
            && text.contains("# TYPE powerperf_device_energy_joules_total counter")
            && text.contains("# TYPE powerperf_device_clock_hertz gauge"),
        "{text}"
    );
    assert!(
        text.contains(
            "powerperf_device_power_watts{origin=\"hwmon\",device=\"power_meter0_module\",label=\"Module Power Socket 0\"} 450.0"
        ),
        "{text}"
    );
    assert_eq!(
        sample(&text, "powerperf_device_clock_hertz", "amdgpu0"),
        Some(1.7e9),
        "amdgpu's sclk (freq1_input, Hz): {text}"
    );
    // the xe card's counter advances 30 J in 1.5 s: its energy counts exactly that, and its
    // power is the counter's rate over the window (at least 1 s) between two reads
    put(w.dir.path(), &counter, start_uj + 30_000_000);
    std::thread::sleep(Duration::from_millis(1500));
    let text = scrape(&addr);
    assert_eq!(
        sample(&text, "powerperf_device_energy_joules_total", "xe0_card"),
        Some(30.0),
        "{text}"
    );
    let p = sample(&text, "powerperf_device_power_watts", "xe0_card")
        .unwrap_or_else(|| panic!("no xe0_card power: {text}"));
    // 30 J over the time from the daemon's first read to this scrape (≥ 1.5 s, a little more
    // on a loaded machine)
    assert!(p > 5.0 && p <= 20.0, "{p} W: {text}");
    // the power meters' energy is the integral of 450 W since the first read
    let e = sample(
        &text,
        "powerperf_device_energy_joules_total",
        "power_meter0_module",
    )
    .unwrap();
    assert!(e >= 450.0 * 1.4, "{e} J: {text}");
}

/// A sensor file replaced by a FIFO (or a link) after powerperfd started: `read_power`
/// answers at once, with no value for that device, and the other devices' values.
#[test]
fn a_sensor_swapped_for_a_fifo_or_link_gives_no_value_and_no_hang() {
    let Some(mut w) = World::new("daemon read_power hostile sensor", CONFIG) else {
        return;
    };
    with_devices(&w);
    w.start();
    let grace = w.root.join("sys/class/hwmon/hwmon1/device/power1_average");
    std::fs::remove_file(&grace).unwrap();
    let c = std::ffi::CString::new(grace.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo(3) on a NUL-terminated path we own.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o666) }, 0);
    let cpu = w.root.join("sys/class/hwmon/hwmon2/device/power1_average");
    std::fs::remove_file(&cpu).unwrap();
    std::os::unix::fs::symlink("/proc/self/status", &cpu).unwrap();
    let t = Instant::now();
    let o = w.request(NOBODY, &[r#"{"op":"read_power"}"#]);
    assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
    let text = String::from_utf8_lossy(&o.stdout).into_owned();
    assert!(o.status.success(), "{text}");
    let v: serde_json::Value = serde_json::from_str(text.lines().next().unwrap()).unwrap();
    let power = v["power"].as_array().unwrap();
    let get = |name: &str| power.iter().find(|r| r["name"] == name).unwrap().clone();
    assert!(get("power_meter1_grace")["power_w"].is_null(), "{text}");
    assert!(get("power_meter2_cpu")["power_w"].is_null(), "{text}");
    assert_eq!(
        get("power_meter0_module")["power_w"].as_f64(),
        Some(450.0),
        "{text}"
    );
}
