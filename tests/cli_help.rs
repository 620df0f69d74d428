//! CLI polish (issue 9, item 4): every subcommand's --help has examples; shell completions
//! and man pages are generated from the clap definitions.

use assert_cmd::Command;

fn pp() -> Command {
    Command::cargo_bin("powerperf").unwrap()
}

#[test]
fn every_subcommand_help_has_examples() {
    for sub in [
        vec!["collect"],
        vec!["report"],
        vec!["events", "eval"],
        vec!["events", "check"],
        vec!["events", "list"],
        vec!["events", "lcpi"],
        vec!["import"],
        vec!["fit"],
        vec!["predict"],
        vec!["evaluate"],
        vec!["plan"],
        vec!["apply"],
        vec!["sweep"],
        vec!["microbench", "run"],
        vec!["microbench", "kernel"],
        vec!["quickstart"],
        vec!["completions"],
        vec!["man"],
    ] {
        let o = pp().args(&sub).arg("--help").output().unwrap();
        assert!(o.status.success(), "{sub:?}");
        let t = String::from_utf8(o.stdout).unwrap();
        assert!(
            t.contains("Example"),
            "`powerperf {} --help` has no example:\n{t}",
            sub.join(" ")
        );
        assert!(t.contains("powerperf "), "{sub:?}");
    }
}

#[test]
fn completions_and_man_pages_are_generated() {
    let o = pp().args(["completions", "bash"]).output().unwrap();
    assert!(o.status.success());
    let t = String::from_utf8(o.stdout).unwrap();
    assert!(
        t.contains("_powerperf") && t.contains("collect") && t.contains("--interval"),
        "{}",
        &t[..t.len().min(400)]
    );
    let dir = tempfile::tempdir().unwrap();
    pp().args(["man", "-o"]).arg(dir.path()).assert().success();
    let main = std::fs::read_to_string(dir.path().join("powerperf.1")).unwrap();
    assert!(
        main.starts_with(".ie") || main.contains(".TH"),
        "{}",
        &main[..main.len().min(200)]
    );
    let collect = std::fs::read_to_string(dir.path().join("powerperf-collect.1")).unwrap();
    assert!(collect.contains("interval"));
}
