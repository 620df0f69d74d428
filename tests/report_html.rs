//! `powerperf report RUN --html` and `--plot` end to end (issue 9, items 1 and 2): a real
//! program runs under `powerperf collect`, the report is written, and, where Debian's
//! chromium is installed, opened headless: a screenshot must not be blank and the rendered
//! DOM must hold the tables and the inline SVG plots. Without chromium the test prints
//! `skipped: chromium not installed (apt-get install chromium)` and checks the HTML text.

mod common;
use common::powerperf as pp;

use std::path::{Path, PathBuf};

const CHROMIUM: &str = "/usr/bin/chromium";

fn collect(run: &Path, prog: &[&str]) {
    pp().args(["collect", "-q", "--nvml", "off", "--interval", "5ms", "-o"])
        .arg(run)
        .arg("--")
        .args(prog)
        .assert()
        .success();
}

fn html_of(run: &Path, out: &Path) -> String {
    pp().arg("report")
        .arg(run)
        .arg("--html")
        .arg(out)
        .assert()
        .success();
    std::fs::read_to_string(out).unwrap()
}

/// Checks on the HTML text that need no browser.
fn check_text(html: &str) {
    assert!(html.starts_with("<!DOCTYPE html>"), "{}", &html[..200]);
    for needle in [
        "<table class=\"kv\">",
        "<table class=\"events\">",
        "<td>task-clock</td>",
        "<svg",
        "Power over time",
        "id=\"regions\"",
        "id=\"notes\"",
        "</html>",
    ] {
        if needle == "Power over time" && !html.contains("<table class=\"rapl\">") {
            continue; // no RAPL on this machine: no power plot
        }
        assert!(html.contains(needle), "no {needle:?} in the HTML");
    }
    // Self-contained: nothing fetched from elsewhere.
    for bad in ["<script", "<link", "src=\"http", "href=\"http", "url(http"] {
        assert!(!html.contains(bad), "{bad:?} in the HTML");
    }
}

fn chromium(args: &[&str], html: &Path, tmp: &Path) -> std::process::Output {
    let profile = tmp.join("chromium-profile");
    std::process::Command::new(CHROMIUM)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(format!("file://{}", html.display()))
        .output()
        .expect("running chromium")
}

/// Fraction of pixels that are not (near) white in an RGB(A) PNG.
fn non_white_fraction(png_path: &Path) -> f64 {
    let decoder = png::Decoder::new(std::fs::File::open(png_path).unwrap());
    let mut reader = decoder.read_info().unwrap();
    let mut buf = vec![0; reader.output_buffer_size()];
    let info = reader.next_frame(&mut buf).unwrap();
    let ch = match info.color_type {
        png::ColorType::Rgb => 3,
        png::ColorType::Rgba => 4,
        png::ColorType::Grayscale => 1,
        png::ColorType::GrayscaleAlpha => 2,
        png::ColorType::Indexed => panic!("indexed PNG from chromium"),
    };
    let px = &buf[..info.buffer_size()];
    let n = px.len() / ch;
    let dark = px
        .chunks(ch)
        .filter(|p| p.iter().take(3.min(ch)).any(|&v| v < 235))
        .count();
    dark as f64 / n as f64
}

/// Open the report in headless chromium: a screenshot that is not blank, and a rendered DOM
/// with the tables and the plots. Returns the screenshot's path, or None when skipped.
fn check_in_browser(html_path: &Path, tmp: &Path, events: &[&str]) -> Option<PathBuf> {
    if !Path::new(CHROMIUM).exists() {
        println!("skipped: chromium not installed (apt-get install chromium)");
        return None;
    }
    let shot = tmp.join("shot.png");
    let out = chromium(
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,2000",
        ],
        html_path,
        tmp,
    );
    assert!(
        shot.is_file(),
        "no screenshot; chromium said: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let frac = non_white_fraction(&shot);
    assert!(
        frac > 0.02,
        "screenshot nearly blank: {:.4} non-white",
        frac
    );
    let out = chromium(&["--dump-dom"], html_path, tmp);
    let dom = String::from_utf8_lossy(&out.stdout);
    assert!(
        dom.contains("<table"),
        "no table in the DOM: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(dom.contains("<svg"), "no svg in the DOM");
    for e in events {
        assert!(dom.contains(e), "event {e} not in the rendered DOM");
    }
    println!(
        "screenshot: {} ({:.1} % non-white)",
        shot.display(),
        100.0 * frac
    );
    Some(shot)
}

#[test]
fn html_report_of_a_shell_loop_renders_in_chromium() {
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    collect(
        &run,
        &[
            "sh",
            "-c",
            "i=0; while [ $i -lt 200000 ]; do i=$((i+1)); done",
        ],
    );
    let out = dir.path().join("report.html");
    let html = html_of(&run, &out);
    check_text(&html);
    assert!(html.contains("sh -c i=0; while [ $i -lt 200000 ]"));
    check_in_browser(&out, dir.path(), &["task-clock"]);
}

/// A Python program writes region events (the documented v1 format, rt/README.md) itself,
/// so the report has regions: shaded in the plots and in the GPTL/IPM tables.
#[test]
fn html_report_with_regions() {
    let ok = std::process::Command::new("python3")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if !ok {
        println!("skipped: python3 is not installed (apt-get install python3)");
        return;
    }
    let prog = r##"
import os, time, threading
d = os.path.join(os.environ["POWERPERF_RUN_DIR"], "region_events")
os.makedirs(d, exist_ok=True)
pid = os.getpid()
recs = []
def now(): return time.clock_gettime_ns(time.CLOCK_MONOTONIC)
def spin(s):
    t = time.time() + s
    x = 0
    while time.time() < t: x += 1
tid = threading.get_native_id()
recs.append(("B", now(), tid, 1)); spin(0.15); recs.append(("E", now(), tid, 1))
for _ in range(3):
    recs.append(("B", now(), tid, 2)); spin(0.05)
    recs.append(("B", now(), tid, 3)); spin(0.05); recs.append(("E", now(), tid, 3))
    recs.append(("E", now(), tid, 2))
with open(os.path.join(d, f"{pid}.tsv"), "w") as f:
    f.write(f"# powerperf-rt region events v1 pid={pid}\n")
    f.write("R\t1\tinit <setup>\nR\t2\tsolve\nR\t3\tstep\n")
    for k, t, th, i in recs: f.write(f"{k}\t{t}\t{th}\t{i}\n")
"##;
    let dir = tempfile::tempdir().unwrap();
    let run = dir.path().join("run");
    collect(&run, &["python3", "-c", prog]);
    let out = dir.path().join("report.html");
    let html = html_of(&run, &out);
    check_text(&html);
    assert!(
        html.contains("<table class=\"regions\">"),
        "no regions table"
    );
    assert!(html.contains("<table class=\"banner\">"));
    assert!(
        html.contains("init &lt;setup&gt;"),
        "region name not escaped"
    );
    assert!(html.contains("solve/step"));
    assert!(
        html.contains("region solve"),
        "regions not shaded in a plot"
    );
    // --plot writes the same plots as files, SVG and PNG.
    let plots = dir.path().join("plots");
    pp().arg("report")
        .arg(&run)
        .arg("--plot")
        .arg(&plots)
        .assert()
        .success();
    pp().arg("report")
        .arg(&run)
        .args(["--plot-format", "png", "--plot"])
        .arg(&plots)
        .assert()
        .success();
    let svg = std::fs::read_to_string(plots.join("timeline_rates.svg"))
        .or_else(|_| std::fs::read_to_string(plots.join("timeline_clocks.svg")))
        .expect("a timeline plot");
    assert!(svg.contains("region solve"));
    assert!(
        std::fs::read_dir(&plots).unwrap().any(|e| e
            .unwrap()
            .path()
            .extension()
            .is_some_and(|x| x == "png")),
        "no PNG written"
    );
    if let Some(shot) = check_in_browser(&out, dir.path(), &["task-clock", "solve"]) {
        if let Ok(keep) = std::env::var("POWERPERF_KEEP_SHOT") {
            std::fs::copy(&shot, &keep).unwrap();
            std::fs::copy(&out, format!("{keep}.html")).unwrap();
        }
    }
}

#[test]
fn plots_of_evaluate_csv_and_predictions() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("points.csv");
    std::fs::write(
        &csv,
        "workload,core_freq_mhz,measured_time_s,predicted_time_s,measured_power_w,predicted_power_w,measured_energy_j,predicted_energy_j\n\
         gzip,1000,2.0,2.1,30,29,60,61\n\
         gzip,2000,1.1,1.0,45,47,49.5,47\n\
         \"a,b\",1500,3.0,2.7,35,36,105,97.2\n",
    )
    .unwrap();
    let json = dir.path().join("pred.json");
    std::fs::write(
        &json,
        r#"{"model":"m.json","kind":"analytic","predictions":[
        {"workload":"gzip","knobs":{"core_freq_mhz":1000},"time_s":2.0,"power_w":30,"energy_j":60},
        {"workload":"gzip","knobs":{"core_freq_mhz":1500},"time_s":1.4,"power_w":38,"energy_j":53.2},
        {"workload":"gzip","knobs":{"core_freq_mhz":2000},"time_s":1.1,"power_w":50,"energy_j":55},
        {"workload":"gzip","knobs":{"core_freq_mhz":2500},"time_s":1.05,"power_w":70,"energy_j":73.5}]}"#,
    )
    .unwrap();
    let plan = dir.path().join("plan.toml");
    std::fs::write(
        &plan,
        r#"[plan]
objective = "energy"
max_slowdown = 0.5
slowdown_margin = 0.0
model = "m.json"
model_kind = "analytic"
created = "2026-11-21T21:53:48Z"
scope = "per_workload"
transition_latency_s = 0.0
transition_energy_j = 0.0
min_region_s = 0.0

[[region]]
name = "gzip"
folded = []
time_s = 1.4
energy_j = 53.2
power_w = 38.0
reference_time_s = 1.05
reference_energy_j = 73.5
energy_saving = 0.276
slowdown = 0.333

[region.setting]
core_freq_mhz = 1500.0
"#,
    )
    .unwrap();
    let plots = dir.path().join("plots");
    pp().arg("report")
        .arg("--evaluate")
        .arg(&csv)
        .arg("--predictions")
        .arg(&json)
        .arg("--plan")
        .arg(&plan)
        .arg("--plot")
        .arg(&plots)
        .assert()
        .success();
    let pvm = std::fs::read_to_string(plots.join("predicted_vs_measured.svg")).unwrap();
    for s in ["y = x", "time_s", "power_w", "energy_j", "gzip", "a,b"] {
        assert!(
            pvm.contains(s),
            "{s} missing from predicted_vs_measured.svg"
        );
    }
    let pa = std::fs::read_to_string(plots.join("pareto.svg")).unwrap();
    assert!(
        pa.contains("plan: core_freq_mhz=1500"),
        "plan's choice not marked"
    );
    assert!(pa.contains("Pareto front"));
    // PNG through the bitmap backend, with the embedded font.
    pp().arg("report")
        .arg("--evaluate")
        .arg(&csv)
        .args(["--plot-format", "png", "--plot"])
        .arg(&plots)
        .assert()
        .success();
    let png = std::fs::read(plots.join("predicted_vs_measured.png")).unwrap();
    assert_eq!(&png[1..4], b"PNG");
    // Without --plot the model inputs are refused with the fix.
    pp().arg("report")
        .arg("--evaluate")
        .arg(&csv)
        .assert()
        .failure()
        .stderr(predicates::str::contains("give --plot DIR"));
}
