//! `powerperf devices` on the sysfs fixtures of issue 43 (tests/fixtures/sysfs/README.md):
//! the table and the JSON array list each fixture's power, energy and control sources with
//! their stems, and what cannot be read is named with its path and the fix. NVML is absent
//! here (CI has no GPU): its absence is one note, not an error; the H200 case is the node
//! crate's `this_node_lists_nvml_and_nothing_it_cannot_read`.

mod common;
use common::{copy_tree, json_stdout, powerperf};
use std::path::PathBuf;

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/sysfs")
        .join(name)
}

/// `(stem, quantity)` of each JSON row with a stem, and the control files' names.
fn rows(v: &serde_json::Value) -> (Vec<(String, String)>, Vec<String>) {
    let arr = v.as_array().expect("a JSON array");
    let mut sensors = Vec::new();
    let mut controls = Vec::new();
    for r in arr {
        for key in [
            "origin", "label", "path", "quantity", "readable", "settable",
        ] {
            assert!(r.get(key).is_some(), "{key} missing in {r}");
        }
        let q = r["quantity"].as_str().unwrap().to_string();
        if q == "control" {
            let p = r["path"].as_str().unwrap();
            controls.push(p.rsplit('/').next().unwrap().to_string());
        } else {
            sensors.push((r["stem"].as_str().unwrap().to_string(), q));
        }
    }
    (sensors, controls)
}

fn json(name: &str) -> serde_json::Value {
    json_stdout(
        powerperf()
            .args(["devices", "--no-nvml", "--format", "json", "--sysfs-root"])
            .arg(fixture(name)),
    )
}

fn text(root: &std::path::Path) -> String {
    let out = powerperf()
        .args(["devices", "--no-nvml", "--sysfs-root"])
        .arg(root)
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    String::from_utf8(out).unwrap()
}

fn pairs(v: &[(&str, &str)]) -> Vec<(String, String)> {
    v.iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect()
}

#[test]
fn amdgpu_mi250x() {
    let v = json("amdgpu-mi250x");
    let (s, c) = rows(&v);
    assert_eq!(s, pairs(&[("amdgpu0", "power"), ("amdgpu0", "energy")]));
    assert_eq!(
        c,
        [
            "power1_cap",
            "power_dpm_force_performance_level",
            "pp_dpm_sclk"
        ]
    );
    assert_eq!(v[0]["origin"], "amdgpu");
    assert_eq!(v[0]["name"], "amdgpu");
    assert_eq!(v[0]["readable"]["how"], "yes");
    assert_eq!(v[0]["settable"]["how"], "no");
    let t = text(&fixture("amdgpu-mi250x"));
    let head = t.lines().next().unwrap();
    for col in [
        "origin", "name", "stem", "label", "quantity", "path", "read", "set",
    ] {
        assert!(head.contains(col), "{head}");
    }
    assert!(t.contains("power1_cap, W (100–560 W)"), "{t}");
}

/// Without `--no-nvml`, NVML is loaded: where it is absent (CI) that is one note line and
/// exit 0; where it is there, its GPUs are listed as `gpu<i>`.
#[test]
fn nvml_absent_is_one_note() {
    let out = powerperf()
        .args(["devices", "--sysfs-root"])
        .arg(fixture("i915"))
        .assert()
        .success()
        .get_output()
        .stdout
        .clone();
    let out = String::from_utf8(out).unwrap();
    let notes = out
        .lines()
        .filter(|l| l.starts_with("note: NVML not available"))
        .count();
    let gpus = out.lines().filter(|l| l.starts_with("nvml ")).count();
    assert!(notes == 1 || (notes == 0 && gpus > 0), "{out}");
    assert!(out.contains("i915_0"), "{out}");
}

#[test]
fn xe_and_i915() {
    let (s, c) = rows(&json("xe"));
    assert_eq!(s, pairs(&[("xe0_card", "energy"), ("xe0_pkg", "energy")]));
    assert_eq!(
        c,
        [
            "power1_max",
            "power2_max",
            "min_freq",
            "max_freq",
            "min_freq",
            "max_freq"
        ]
    );
    let (s, c) = rows(&json("i915"));
    assert_eq!(s, pairs(&[("i915_0", "energy")]));
    assert_eq!(c, ["power1_max", "gt_min_freq_mhz", "gt_max_freq_mhz"]);
    let t = text(&fixture("xe"));
    assert!(t.contains("tile1/gt1 max_freq, MHz"), "{t}");
}

#[test]
fn grace_hopper_and_arm_hwmon() {
    let v = json("grace-hopper");
    let (s, c) = rows(&v);
    assert!(c.is_empty());
    assert_eq!(
        s,
        pairs(&[
            ("power_meter0_module", "power"),
            ("power_meter1_grace", "power"),
            ("power_meter2_cpu", "power"),
            ("power_meter3_sysio", "power"),
        ])
    );
    assert_eq!(v[0]["name"], "power_meter");
    assert_eq!(v[0]["label"], "Module Power Socket 0");
    assert!(v[0]["path"]
        .as_str()
        .unwrap()
        .ends_with("hwmon0/device/power1_average"));
    let (s, _) = rows(&json("hwmon-arm"));
    assert_eq!(
        s,
        pairs(&[
            ("scmi_sensors0_a57_energy", "energy"),
            ("scmi_sensors0_a53_energy", "energy"),
            ("scmi_sensors0_gpu_power", "power"),
        ])
    );
}

#[test]
fn an_unreadable_file_is_named_with_its_path_and_the_fix() {
    let t = tempfile::tempdir().unwrap();
    copy_tree(&fixture("grace-hopper"), t.path());
    let p = t
        .path()
        .join("sys/class/hwmon/hwmon2/device/power1_average");
    std::fs::write(&p, "n/a\n").unwrap();
    let out = text(t.path());
    assert!(
        out.contains(&format!("problem: {} holds `n/a`", p.display())),
        "{out}"
    );
    let row = out
        .lines()
        .find(|l| l.contains("power_meter2_cpu"))
        .unwrap();
    assert!(row.trim_end().ends_with("no    no"), "{row}");
}

#[test]
fn no_source_says_how_to_check_and_exits_0() {
    let t = tempfile::tempdir().unwrap();
    let out = text(t.path());
    assert!(
        out.starts_with("no power, energy or control source found under"),
        "{out}"
    );
    assert!(out.contains("sys/class/hwmon/*/name"), "{out}");
    let v = json_stdout(
        powerperf()
            .args(["devices", "--format", "json", "--no-nvml", "--sysfs-root"])
            .arg(t.path()),
    );
    assert_eq!(v, serde_json::json!([]));
}

#[test]
fn a_bad_format_exits_non_zero() {
    powerperf()
        .args(["devices", "--format", "xml"])
        .assert()
        .failure();
    powerperf()
        .args(["devices", "--no-nvml", "--format", "csv"])
        .assert()
        .failure()
        .stderr(predicates::str::contains("devices"));
    // `text`, as the issue names it, is the table.
    powerperf()
        .args(["devices", "--no-nvml", "--format", "text", "--sysfs-root"])
        .arg(fixture("xe"))
        .assert()
        .success()
        .stdout(predicates::str::contains("xe0_card"));
}
