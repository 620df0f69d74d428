//! CLI polish (issue 9, item 4): every subcommand's --help has examples; shell completions
//! and man pages are generated from the clap definitions.

mod common;
use common::powerperf as pp;

#[test]
fn every_subcommand_help_has_examples() {
    for sub in [
        vec!["collect"],
        vec!["report"],
        vec!["export"],
        vec!["events", "eval"],
        vec!["events", "check"],
        vec!["events", "list"],
        vec!["events", "lcpi"],
        vec!["import"],
        vec!["datasets", "list"],
        vec!["datasets", "extract"],
        vec!["fit"],
        vec!["predict"],
        vec!["evaluate"],
        vec!["plan"],
        vec!["apply"],
        vec!["sweep"],
        vec!["microbench", "run"],
        vec!["microbench", "kernel"],
        vec!["devices"],
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

/// Colours: clap colours help on a terminal only, and not with NO_COLOR; piped output has no
/// escape codes. The terminal is a pseudo-terminal from util-linux `script`.
#[test]
fn colours_only_on_a_terminal_and_never_with_no_color() {
    let bin = assert_cmd::cargo::cargo_bin("powerperf");
    let piped = std::process::Command::new(&bin)
        .arg("--help")
        .output()
        .unwrap();
    assert!(!piped.stdout.contains(&0x1b), "escape codes in a pipe");
    let tty = |no_color: bool| {
        let mut c = std::process::Command::new("script");
        c.args(["-qec", &format!("{} --help", bin.display()), "/dev/null"]);
        if no_color {
            c.env("NO_COLOR", "1");
        } else {
            c.env_remove("NO_COLOR");
        }
        c.output()
    };
    match tty(false) {
        Ok(o) if o.status.success() => {
            assert!(o.stdout.contains(&0x1b), "help is coloured on a terminal");
            let o = tty(true).unwrap();
            assert!(!o.stdout.contains(&0x1b), "NO_COLOR turns colours off");
        }
        _ => println!("skipped: util-linux `script` is not available to make a pseudo-terminal"),
    }
}

/// `-v`/`-vv` raise the log level, `RUST_LOG` takes precedence, `-q` keeps errors only, and
/// log lines go to stderr (stdout keeps the command's report), without colour in a pipe.
#[test]
fn verbosity_flags_and_rust_log_control_the_log() {
    let stderr = |args: &[&str], rust_log: Option<&str>| {
        let mut c = pp();
        c.args(args).env_remove("RUST_LOG");
        if let Some(v) = rust_log {
            c.env("RUST_LOG", v);
        }
        let o = c.assert().success().get_output().clone();
        assert!(String::from_utf8_lossy(&o.stdout).contains("titanx-micro"));
        String::from_utf8_lossy(&o.stderr).into_owned()
    };
    assert!(!stderr(&["datasets", "list"], None).contains("DEBUG"));
    let debug = stderr(&["-vv", "datasets", "list"], None);
    assert!(debug.contains("DEBUG powerperf::cli"), "{debug}");
    assert!(
        !debug.contains('\u{1b}'),
        "no ANSI colour in a pipe: {debug:?}"
    );
    assert!(stderr(&["datasets", "list"], Some("powerperf=debug")).contains("DEBUG"));
    assert!(!stderr(&["-q", "datasets", "list"], Some("")).contains("DEBUG"));
    let bad = stderr(&["datasets", "list"], Some("[["));
    assert!(bad.contains("RUST_LOG ignored"), "{bad}");
    pp().args(["-q", "-v", "datasets", "list"])
        .assert()
        .failure();
}
