//! Region-triggered switching: with `POWERPERF_CTL_SOCKET` set, region begins and ends
//! reach a listener as `B name` / `E name` lines, in order, each acknowledged before the
//! call returns; an unreachable socket leaves recording on and says so once.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::os::unix::net::UnixListener;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::Instant;

use common::*;

#[test]
fn fake_listener_receives_begin_end_in_order_and_acks_gate_the_calls() {
    let dir = temp_dir("ctl");
    let sock = dir.join("ctl.sock");
    let listener = UnixListener::bind(&sock).unwrap();
    // Set before the runtime's first use in this test binary (it reads the environment once).
    std::env::set_var(powerperf_rt::ENV_RUN_DIR, dir.join("run"));
    std::env::set_var(powerperf_rt::ENV_CTL_SOCKET, &sock);
    let seen: Arc<Mutex<Vec<String>>> = Arc::default();
    let s2 = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let conn = conn.unwrap();
            let s3 = s2.clone();
            std::thread::spawn(move || {
                let mut w = conn.try_clone().unwrap();
                for line in BufReader::new(conn).lines() {
                    let line = line.unwrap();
                    // refuse one region, to show that a refusal does not stop the program
                    let ack = if line == "B refused" { b"N" } else { b"K" };
                    s3.lock().unwrap().push(line);
                    w.write_all(ack).unwrap();
                }
            });
        }
    });
    assert!(powerperf_rt::enabled());
    {
        let _a = powerperf_rt::region("outer");
        // the acknowledgement came before begin returned: the line is already there
        assert_eq!(*seen.lock().unwrap(), ["B outer"]);
        let h = powerperf_rt::Handle::new("by handle");
        h.begin().unwrap();
        {
            let _r = powerperf_rt::region("refused");
        }
        h.end().unwrap();
        let _n = powerperf_rt::region("tab\there");
    }
    // an end that does not match anything open is not sent
    assert!(powerperf_rt::Handle::new("outer").end().is_err());
    // another thread has its own connection (and its own stack on the controller)
    std::thread::spawn(|| {
        let _w = powerperf_rt::region("worker");
    })
    .join()
    .unwrap();
    let got = seen.lock().unwrap().clone();
    assert_eq!(
        got,
        [
            "B outer",
            "B by handle",
            "B refused",
            "E refused",
            "E by handle",
            "B tab\\there",
            "E tab\\there",
            "E outer",
            "B worker",
            "E worker",
        ]
    );
    // round-trip cost of one switch message (begin or end) with an instant controller
    let n = 2000;
    let t = Instant::now();
    let h = powerperf_rt::Handle::new("lat");
    for _ in 0..n {
        h.begin().unwrap();
        h.end().unwrap();
    }
    let per = t.elapsed().as_nanos() as f64 / (2 * n) as f64;
    eprintln!(
        "region event with a socket round trip: {:.1} us each",
        per / 1e3
    );
    assert_eq!(seen.lock().unwrap().len(), got.len() + 2 * n);
}

#[test]
fn unreachable_socket_keeps_recording_and_warns_once() {
    if !have("gcc", "unreachable_socket_keeps_recording_and_warns_once") {
        return;
    }
    let dir = temp_dir("ctl-unreachable");
    let exe = dir.join("regions");
    compile_c(&rt_dir().join("examples/c/regions.c"), &exe);
    let run = dir.join("run");
    let out = run_ok(Command::new(&exe).env(powerperf_rt::ENV_RUN_DIR, &run).env(
        powerperf_rt::ENV_CTL_SOCKET,
        dir.join("nobody-listens.sock"),
    ));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(
        err.matches("region switching is off").count(),
        1,
        "stderr: {err}"
    );
    let (_, _, st) = read_run(&run);
    assert_eq!(calls(&st, "main/solve/step"), 10);
}
