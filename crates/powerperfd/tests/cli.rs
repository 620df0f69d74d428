//! The `powerperfd` binary's command line, run as built by this package (cargo builds the
//! binary for these tests, so `cargo test --workspace` leaves target/<profile>/powerperfd
//! where tests/common/daemon.rs finds it). The daemon itself is tested as root in the
//! powerperf package's tests/daemon*.rs.

use std::process::{Command, Output};

fn powerperfd(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_powerperfd"))
        .args(args)
        .env_remove("RUST_LOG")
        .output()
        .expect("powerperfd runs")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn help_names_the_options_and_the_request_command() {
    let out = powerperfd(&["--help"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let help = text(&out.stdout);
    for want in [
        "--config <FILE>",
        "--socket <PATH>",
        "--state-dir <DIR>",
        "--sysfs-root <DIR>",
        "--fake-gpu <DIR>",
        "--metrics-listen <IP:PORT>",
        "request",
        "powerperfd --config /etc/powerperf/powerperfd.toml",
    ] {
        assert!(help.contains(want), "--help lacks {want}:\n{help}");
    }
}

#[test]
fn an_unknown_option_exits_non_zero_and_names_it() {
    let out = powerperfd(&["--no-such-option"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(err.contains("--no-such-option"), "{err}");
    assert!(out.stdout.is_empty());
}

#[test]
fn a_metrics_address_that_is_not_ip_port_is_refused_before_anything_starts() {
    let out = powerperfd(&["--metrics-listen", "localhost"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    let err = text(&out.stderr);
    assert!(
        err.contains("--metrics-listen `localhost` is not IP:PORT"),
        "{err}"
    );
}

#[test]
fn a_request_to_a_socket_that_does_not_exist_fails_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let sock = dir.path().join("absent.sock");
    let out = powerperfd(&[
        "request",
        "--socket",
        sock.to_str().unwrap(),
        r#"{"op":"status"}"#,
    ]);
    assert!(!out.status.success());
    let err = text(&out.stderr);
    assert!(
        err.contains("cannot reach powerperfd at") && err.contains("absent.sock"),
        "{err}"
    );
}
