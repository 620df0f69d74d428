//! Snapshot tests (insta) of what `report`, `fit`, `predict`, `plan` and `evaluate` print and
//! write, on a committed fixture run (`tests/fixtures/runs/loop`, a shell loop collected with
//! task-clock, context-switches and page-faults) and on the bundled data sets imported by
//! name. They pin today's outputs before the code moves between crates (issue 19): a change
//! of any output shows up as a snapshot diff under `tests/snapshots/`.
//!
//! Each snapshot holds the exit status, stdout and stderr of one command run in a private
//! working directory with relative paths, so no temporary path appears. Files a command
//! writes (the model JSON, the plan TOML) are snapshotted too. To accept an intended change:
//! `INSTA_UPDATE=always cargo test --test snapshots`, then review the diff with git.

mod common;

use std::path::Path;
use std::process::Command;

/// `powerperf ARGS` run in `dir` with the data directory unset (the bundled sets are used),
/// rendered as `exit`, `stdout` and `stderr` sections.
fn run(dir: &Path, args: &[&str]) -> String {
    let o = Command::new(assert_cmd::cargo::cargo_bin("powerperf"))
        .args(args)
        .current_dir(dir)
        .env_remove("POWERPERF_DATA_DIR")
        .env_remove("RUST_LOG")
        .output()
        .unwrap();
    redact(&format!(
        "$ powerperf {}\nexit: {}\n--- stdout\n{}--- stderr\n{}",
        args.join(" "),
        o.status
            .code()
            .map_or("signal".to_string(), |c| c.to_string()),
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    ))
}

/// The plan's creation time (`created = "…"` in TOML, `"created": "…"` in JSON) replaced by
/// `[created]`: the one value that changes from run to run.
fn redact(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for line in text.split_inclusive('\n') {
        let t = line.trim_start();
        let key = ["created = \"", "\"created\": \""]
            .into_iter()
            .find(|k| t.starts_with(k));
        match key {
            Some(k) => {
                let indent = &line[..line.len() - t.len()];
                let rest = &t[k.len()..];
                let tail = rest.find('"').map_or("", |i| &rest[i + 1..]);
                out.push_str(&format!("{indent}{k}[created]\"{tail}"));
            }
            None => out.push_str(line),
        }
    }
    out
}

/// A private directory with the bundled set `name` imported as `set_dir`.
fn with_set(name: &str, set_dir: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let out = run(dir.path(), &["import", name, "-o", set_dir]);
    assert!(out.contains("exit: 0\n"), "{out}");
    dir
}

fn read(dir: &Path, file: &str) -> String {
    redact(&std::fs::read_to_string(dir.join(file)).unwrap())
}

#[test]
fn report_of_the_fixture_run_in_every_format() {
    let fixture = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/runs");
    for (name, args) in [
        ("report_table", vec!["report", "loop"]),
        ("report_json", vec!["report", "loop", "--format", "json"]),
        ("report_csv", vec!["report", "loop", "--format", "csv"]),
        (
            "report_markdown",
            vec!["report", "loop", "--format", "markdown"],
        ),
        ("report_lcpi", vec!["report", "loop", "--lcpi"]),
    ] {
        insta::assert_snapshot!(name, run(&fixture, &args));
    }
}

#[test]
fn import_fit_predict_plan_and_evaluate_on_the_xu3_set() {
    let d = with_set("xu3-cbench", "xu3.set");
    let p = d.path();
    insta::assert_snapshot!("xu3_fit", run(p, &["fit", "xu3.set", "-o", "xu3.json"]));
    insta::assert_snapshot!("xu3_model_file", read(p, "xu3.json"));
    insta::assert_snapshot!(
        "xu3_fit_json",
        run(
            p,
            &["fit", "xu3.set", "-o", "xu3b.json", "--format", "json"]
        )
    );
    let predict = [
        "predict",
        "--model",
        "xu3.json",
        "--workload",
        "automotive_bitcount",
        "--knob",
        "core_freq_mhz=1000,1250,1500,2000",
    ];
    insta::assert_snapshot!("xu3_predict", run(p, &predict));
    for f in ["json", "csv"] {
        let mut a = predict.to_vec();
        a.extend(["--format", f]);
        insta::assert_snapshot!(format!("xu3_predict_{f}"), run(p, &a));
    }
    let plan = [
        "plan",
        "--model",
        "xu3.json",
        "--workload",
        "automotive_bitcount",
        "--workload",
        "security_sha",
        "--objective",
        "edp",
        "--max-slowdown",
        "none",
        "-o",
        "xu3.toml",
    ];
    insta::assert_snapshot!("xu3_plan", run(p, &plan));
    // One OutputFormat on every command (issue 19): fit's held-out error and plan's
    // choices as flat tables.
    insta::assert_snapshot!(
        "xu3_fit_csv",
        run(p, &["fit", "xu3.set", "-o", "xu3c.json", "--format", "csv"])
    );
    let mut a = plan.to_vec();
    let last = a.len() - 1;
    a[last] = "xu3m.toml";
    a.extend(["--format", "markdown"]);
    insta::assert_snapshot!("xu3_plan_markdown", run(p, &a));
    insta::assert_snapshot!("xu3_plan_file", read(p, "xu3.toml"));
    let evaluate = [
        "evaluate",
        "xu3.set",
        "--protocol",
        "knob-holdout",
        "--train",
        "core_freq_mhz=1000,2000",
    ];
    insta::assert_snapshot!("xu3_evaluate", run(p, &evaluate));
    let mut a = evaluate.to_vec();
    a.extend(["--format", "json"]);
    insta::assert_snapshot!("xu3_evaluate_json", run(p, &a));
    insta::assert_snapshot!(
        "xu3_evaluate_workload_holdout",
        run(
            p,
            &["evaluate", "xu3.set", "--protocol", "workload-holdout"]
        )
    );
    insta::assert_snapshot!(
        "xu3_plan_evaluate",
        run(
            p,
            &[
                "plan",
                "--evaluate",
                "xu3.set",
                "--train",
                "core_freq_mhz=1000,2000",
                "--objective",
                "edp",
                "--max-slowdown",
                "none",
            ]
        )
    );
}

#[test]
fn evaluate_and_plan_on_the_titan_x_set() {
    let d = with_set("titanx-micro", "titanx.set");
    let p = d.path();
    let train = "core_freq_mhz=595,861,1164";
    insta::assert_snapshot!(
        "titanx_evaluate_json",
        run(
            p,
            &[
                "evaluate",
                "titanx.set",
                "--protocol",
                "knob-holdout",
                "--train",
                train,
                "--format",
                "json"
            ]
        )
    );
    insta::assert_snapshot!(
        "titanx_plan_evaluate_risk",
        run(
            p,
            &[
                "plan",
                "--evaluate",
                "titanx.set",
                "--train",
                train,
                "--max-slowdown",
                "5%",
                "--slowdown-margin",
                "risk",
            ]
        )
    );
    insta::assert_snapshot!(
        "titanx_fit_no_loo",
        run(p, &["fit", "titanx.set", "--no-loo", "-o", "titanx.json"])
    );
    insta::assert_snapshot!(
        "titanx_plan_gpu",
        run(
            p,
            &[
                "plan",
                "--model",
                "titanx.json",
                "--workload",
                "DP",
                "--workload",
                "SP",
                "--device",
                "gpu",
                "--objective",
                "energy",
                "--max-slowdown",
                "5%",
                "--slowdown-margin",
                "1.4%",
                "-o",
                "titanx.toml",
                "--format",
                "json",
            ]
        )
    );
    insta::assert_snapshot!("titanx_plan_gpu_file", read(p, "titanx.toml"));
}

#[test]
fn fit_and_predict_threads_on_the_i7_set() {
    let d = with_set("multicore-i7", "i7.set");
    let p = d.path();
    insta::assert_snapshot!("i7_fit", run(p, &["fit", "i7.set", "-o", "i7.json"]));
    insta::assert_snapshot!(
        "i7_predict_json",
        run(
            p,
            &[
                "predict",
                "--model",
                "i7.json",
                "--workload",
                "bt",
                "--knob",
                "threads=1,3,8",
                "--format",
                "json",
            ]
        )
    );
    insta::assert_snapshot!(
        "i7_evaluate",
        run(
            p,
            &[
                "evaluate",
                "i7.set",
                "--protocol",
                "knob-holdout",
                "--train",
                "threads=1,2,4"
            ]
        )
    );
}
