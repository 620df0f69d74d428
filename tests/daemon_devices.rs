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

// ---- `powerperf devices` through powerperfd's `access` (44d) -------------------------------

/// The world of [`with_devices`] with every sensor file root-only (mode 0400), as on a node
/// where the drivers' hwmon files are readable by root alone: this user must go through
/// powerperfd. The controls stay root-writable only (0644), as in sysfs.
fn with_root_only_sensors(w: &World) {
    use std::os::unix::fs::PermissionsExt as _;
    with_devices(w);
    fn walk(d: &Path) {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            let name = e.file_name().to_string_lossy().into_owned();
            if p.is_dir() && !p.is_symlink() {
                walk(&p);
            } else if (name.starts_with("power") || name.starts_with("energy"))
                && (name.ends_with("_average") || name.ends_with("_input"))
                || name == "gpu_metrics"
            {
                std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o400)).unwrap();
            }
        }
    }
    walk(&w.root.join("sys/class/hwmon"));
}

/// `powerperf devices --format json` as `uid` against the world's daemon: the rows and stderr.
fn devices_as(w: &World, uid: u32) -> (Vec<serde_json::Value>, String) {
    let o = common::daemon::as_uid(uid, &w.bin)
        .args(["devices", "--no-nvml", "--format", "json", "--sysfs-root"])
        .arg(&w.root)
        .env(powerperf_node::daemon::ENV_DAEMON, &w.socket)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert!(o.status.success(), "{err}");
    let v: serde_json::Value = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)));
    (v.as_array().unwrap().clone(), err)
}

/// The rows whose path ends with one of `files`.
fn rows_of<'a>(rows: &'a [serde_json::Value], files: &[&str]) -> Vec<&'a serde_json::Value> {
    let r: Vec<_> = rows
        .iter()
        .filter(|r| {
            files
                .iter()
                .any(|f| r["path"].as_str().unwrap().ends_with(f))
        })
        .collect();
    assert!(!r.is_empty(), "no row of {files:?}: {rows:?}");
    r
}

/// The sysfs sensors (Grace meters, xe, amdgpu): every power and energy row but RAPL's.
fn sensors(rows: &[serde_json::Value]) -> Vec<&serde_json::Value> {
    let s: Vec<_> = rows
        .iter()
        .filter(|r| r["quantity"] != "control" && r["origin"] != "rapl")
        .collect();
    // four Grace meters, xe card and pkg, amdgpu power (and its energy)
    assert!(s.len() >= 7, "{s:?}");
    s
}

const POWER_LIMITS: [&str; 2] = ["power1_cap", "power1_max"];
const CLOCKS: [&str; 3] = ["pp_dpm_sclk", "min_freq", "max_freq"];

const READ_AND_CLOCKS: &str = r#"
[[grant]]
name = "clock-tuners"
users = ["nobody"]
read = ["power"]
write = ["gpu.locked_clocks"]
[grant.ranges]
"gpu.locked_clocks" = [900, 1500]
"#;

#[test]
fn devices_says_daemon_for_what_the_grant_covers_and_names_the_missing_grant() {
    let Some(mut w) = World::new("devices: a grant of power and clocks", READ_AND_CLOCKS) else {
        return;
    };
    with_root_only_sensors(&w);
    w.start();
    let (rows, err) = devices_as(&w, NOBODY);
    for s in sensors(&rows) {
        assert_eq!(s["readable"], serde_json::json!({"how": "daemon"}), "{s}");
    }
    // RAPL's root-only energy_uj: `energy` is [everyone]'s by default
    for r in rows.iter().filter(|r| r["origin"] == "rapl") {
        assert_eq!(r["readable"]["how"], "daemon", "{r}");
    }
    for c in rows_of(&rows, &CLOCKS) {
        assert_eq!(c["settable"], serde_json::json!({"how": "daemon"}), "{c}");
    }
    let config = w.config.display().to_string();
    for c in rows_of(&rows, &POWER_LIMITS) {
        assert_eq!(c["settable"]["how"], "no", "{c}");
        let why = c["settable"]["why"].as_str().unwrap();
        assert!(
            why.contains(r#"write = ["gpu.power_limit"]"#)
                && why.contains(&config)
                && why.contains("uid 65534 (nobody)"),
            "{why}"
        );
    }
    assert!(
        err.contains("lets uid 65534 (nobody) read energy, power and set gpu.locked_clocks [900, 1500] MHz (grant clock-tuners)"),
        "{err}"
    );
    // the table says the same, and the refusal follows it
    let o = common::daemon::as_uid(NOBODY, &w.bin)
        .args(["devices", "--no-nvml", "--sysfs-root"])
        .arg(&w.root)
        .env(powerperf_node::daemon::ENV_DAEMON, &w.socket)
        .output()
        .unwrap();
    let t = String::from_utf8_lossy(&o.stdout);
    assert!(
        t.lines()
            .any(|l| l.contains("/power1_cap") && l.trim_end().ends_with("no")),
        "{t}"
    );
    assert!(
        t.lines().any(|l| l.starts_with("cannot set ")
            && l.contains("power1_cap")
            && l.contains("gpu.power_limit")),
        "{t}"
    );
    // each `access` is logged with the caller
    assert!(
        w.log_text()
            .lines()
            .any(|l| l.contains("access: answered the caller's own grants")
                && l.contains("uid=65534")),
        "{}",
        w.log_text()
    );
}

#[test]
fn devices_says_daemon_for_power_limits_where_the_grant_has_them() {
    let both = format!("{READ_AND_CLOCKS}\n[[grant]]\nname = \"cappers\"\nusers = [\"nobody\"]\nwrite = [\"gpu.power_limit\"]\n");
    let Some(mut w) = World::new("devices: a grant of power limits", &both) else {
        return;
    };
    with_root_only_sensors(&w);
    w.start();
    let (rows, _) = devices_as(&w, NOBODY);
    for c in rows_of(&rows, &POWER_LIMITS)
        .into_iter()
        .chain(rows_of(&rows, &CLOCKS))
    {
        assert_eq!(c["settable"], serde_json::json!({"how": "daemon"}), "{c}");
    }
    for s in sensors(&rows) {
        assert_eq!(s["readable"]["how"], "daemon", "{s}");
    }
    // xe's package limit: powerperfd's gpu.power_limit writes power1_max only
    for c in rows_of(&rows, &["power2_max"]) {
        assert_eq!(c["settable"]["how"], "no", "{c}");
        assert!(
            c["settable"]["why"]
                .as_str()
                .unwrap()
                .contains("GPU controls do not write it"),
            "{c}"
        );
    }
}

#[test]
fn devices_says_no_to_a_user_no_grant_names() {
    let Some(mut w) = World::new("devices: a user without a grant", READ_AND_CLOCKS) else {
        return;
    };
    with_root_only_sensors(&w);
    w.start();
    // uid 65533: no passwd entry, named by no grant
    let (rows, err) = devices_as(&w, common::daemon::OTHER);
    for s in sensors(&rows) {
        assert_eq!(s["readable"]["how"], "no", "{s}");
        let why = s["readable"]["why"].as_str().unwrap();
        assert!(
            why.contains(r#"read = ["power"]"#) && why.contains("uid 65533"),
            "{why}"
        );
    }
    for (files, control) in [
        (&POWER_LIMITS[..], "gpu.power_limit"),
        (&CLOCKS[..], "gpu.locked_clocks"),
    ] {
        for c in rows_of(&rows, files) {
            assert_eq!(c["settable"]["how"], "no", "{c}");
            let why = c["settable"]["why"].as_str().unwrap();
            assert!(why.contains(&format!(r#"write = ["{control}"]"#)), "{why}");
        }
    }
    // [everyone] reads energy: RAPL through the daemon still
    for r in rows.iter().filter(|r| r["origin"] == "rapl") {
        assert_eq!(r["readable"]["how"], "daemon", "{r}");
    }
    // nobody's grant is not named to uid 65533 (issue 38)
    assert!(
        err.contains("lets uid 65533 read energy and set nothing") && !err.contains("clock-tuners"),
        "{err}"
    );
    assert!(!serde_json::to_string(&rows)
        .unwrap()
        .contains("clock-tuners"));
}

/// `access` answers the caller's own grants only: another user's grant is never in it, a
/// field naming a uid is refused, and only uid 0 may ask on behalf of a user.
#[test]
fn access_answers_only_the_callers_own_grant() {
    let two = format!("{READ_AND_CLOCKS}\n[[grant]]\nname = \"other-users-grant\"\nusers = [\"65533\"]\nwrite = [\"gpu.power_limit\"]\n[grant.ranges]\n\"gpu.power_limit\" = [100, 200]\n");
    let Some(mut w) = World::new("daemon access: own grant only", &two) else {
        return;
    };
    w.start();
    let answer = |o: std::process::Output| -> serde_json::Value {
        let t = String::from_utf8_lossy(&o.stdout).into_owned();
        serde_json::from_str(t.lines().last().unwrap()).unwrap()
    };
    let mine = answer(w.request(NOBODY, &[r#"{"op":"access"}"#]));
    assert_eq!(mine["ok"], true, "{mine}");
    let a = &mine["access"];
    assert_eq!(a["uid"], NOBODY);
    assert_eq!(a["read"], serde_json::json!(["energy", "power"]));
    assert_eq!(
        a["write"],
        serde_json::json!([{"control": "gpu.locked_clocks", "grant": "clock-tuners", "range": [900.0, 1500.0], "cpus": null}])
    );
    assert_eq!(a["config"], w.config.display().to_string());
    let text = mine.to_string();
    assert!(
        !text.contains("other-users-grant") && !text.contains("[100.0,200.0]"),
        "{text}"
    );
    // no field names another user
    for bad in [
        r#"{"op":"access","uid":65533}"#,
        r#"{"op":"access","user":"root"}"#,
    ] {
        let r = answer(w.request(NOBODY, &[bad]));
        assert_eq!(r["ok"], false, "{bad}: {r}");
        assert!(r.get("access").is_none(), "{r}");
    }
    // a non-root client cannot ask as another uid
    let r = answer(w.request(
        NOBODY,
        &[
            r#"{"op":"hello","on_behalf_of":{"uid":65533}}"#,
            r#"{"op":"access"}"#,
        ],
    ));
    assert_eq!(r["access"]["uid"], NOBODY, "{r}");
    // root acting for a job's user (the SPANK plugin) gets that user's grants; alone, root's
    let r = answer(w.request(
        0,
        &[
            r#"{"op":"hello","on_behalf_of":{"uid":65533,"job":"7"}}"#,
            r#"{"op":"access"}"#,
        ],
    ));
    assert_eq!(r["access"]["uid"], 65533, "{r}");
    assert_eq!(r["access"]["write"][0]["grant"], "other-users-grant", "{r}");
    assert!(!r.to_string().contains("clock-tuners"), "{r}");
    let r = answer(w.request(0, &[r#"{"op":"access"}"#]));
    assert_eq!(
        (&r["access"]["unrestricted"], &r["access"]["write"]),
        (&serde_json::json!(true), &serde_json::json!([])),
        "{r}"
    );
    // a line over the limit closes the connection, as for every request
    let long = format!(r#"{{"op":"access","x":"{}"}}"#, "a".repeat(70_000));
    let o = w.request(NOBODY, &[&long]);
    assert!(!o.status.success());
    assert!(
        w.log_text().contains("a request longer than"),
        "{}",
        w.log_text()
    );
}
