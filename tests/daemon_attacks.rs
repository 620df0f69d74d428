//! powerperfd under attack (issue 38; docs/security.md): the journal's growth, frequencies
//! that are not the CPU's own, a stop while clients set and restore, and the metrics
//! endpoint held by slow connections. The daemon runs as root on copies of the fixture
//! trees (tests/common/daemon.rs); the attackers are uid 65534 and 65533 through setpriv.
//! Tests print `skipped: …` when not root (CI runs as root).

mod common;

use common::daemon::{as_uid, kill_group, World, OTHER};
use common::NOBODY;
use std::io::{Read as _, Write as _};
use std::os::unix::process::CommandExt as _;
use std::path::PathBuf;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

const GRANT: &str = r#"
[[grant]]
name = "dvfs-users"
users = ["nobody", "65533"]
read = ["energy"]
write = ["cpu.core_freq", "cpu.governor", "gpu.locked_clocks", "gpu.power_limit"]
[grant.ranges]
"cpu.core_freq" = [1200, 1400]
"gpu.locked_clocks" = [900, 1500]
"gpu.power_limit" = [300, 500]

[limits]
requests_per_second = 100000
"#;

fn out(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn journal(w: &World) -> PathBuf {
    w.state.join("powerperfd-journal.jsonl")
}

/// Send SIGTERM to the daemon and wait for it (at most 20 s); its exit status.
fn term(w: &mut World) -> std::process::ExitStatus {
    let mut c = w.daemon.take().expect("a daemon");
    // SAFETY: kill(2) on the daemon this test started.
    unsafe { libc::kill(c.id() as i32, libc::SIGTERM) };
    let t = Instant::now();
    loop {
        if let Some(st) = c.try_wait().unwrap() {
            return st;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "powerperfd did not stop: {}",
            w.log_text()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Every cpufreq file a session may change, on both CPUs.
fn cpufreq_state(w: &World) -> Vec<(String, String)> {
    let mut v = Vec::new();
    for cpu in [0, 1] {
        for f in ["scaling_governor", "scaling_min_freq", "scaling_max_freq"] {
            v.push((format!("cpu{cpu}/{f}"), w.read(cpu, f)));
        }
    }
    v
}

/// High 1: every set-then-restore used to append a `save` and an `end` for good; past
/// 16 MiB the daemon refused to start. 2,000 cycles now leave a journal under 64 KiB, the
/// daemon stops and starts again, and a journal of 17 MiB whose sessions all ended (left
/// by an older daemon) does not stop the start.
#[test]
fn the_journal_stays_small_over_2000_set_restore_cycles_and_never_blocks_a_start() {
    let Some(mut w) = World::new("daemon journal compaction", GRANT) else {
        return;
    };
    w.start();
    let before = cpufreq_state(&w);
    let mut reqs = Vec::new();
    for i in 0..2000 {
        reqs.push(if i % 2 == 0 {
            r#"{"op":"set_core_freq","mhz":1200}"#
        } else {
            r#"{"op":"set_core_freq","mhz":1200,"cpus":[1]}"#
        });
        reqs.push(r#"{"op":"restore"}"#);
    }
    let o = w.request(NOBODY, &reqs);
    let t = out(&o);
    assert!(
        o.status.success(),
        "{}",
        t.lines().find(|l| !l.contains("\"ok\":true")).unwrap_or("")
    );
    assert_eq!(
        t.lines().filter(|l| l.contains("\"ok\":true")).count(),
        4000
    );
    let len = std::fs::metadata(journal(&w)).unwrap().len();
    println!("journal after 2000 set/restore cycles: {len} bytes");
    assert!(
        len < 64 << 10,
        "the journal has {len} bytes after 2000 cycles"
    );
    assert_eq!(cpufreq_state(&w), before);
    // a clean stop, a start
    assert!(term(&mut w).success(), "{}", w.log_text());
    w.start();
    assert_eq!(cpufreq_state(&w), before);
    // an old daemon's journal of 17 MiB, every session ended: the start goes on
    w.kill_daemon();
    let j = journal(&w);
    std::fs::remove_file(&j).unwrap();
    let save = r#"{"kind":"save","session":SID,"uid":65534,"pid":1,"job":null,"control":"cpu.core_freq","snapshot":{"files":[{"path":"sys/devices/system/cpu/cpu0/cpufreq/scaling_governor","value":"schedutil"}]}}"#;
    let mut text = String::with_capacity(18 << 20);
    let mut sid = 1u64;
    while text.len() < 17 << 20 {
        text.push_str(&save.replace("SID", &sid.to_string()));
        text.push('\n');
        text.push_str(&format!("{{\"kind\":\"end\",\"session\":{sid}}}\n"));
        sid += 1;
    }
    {
        use std::os::unix::fs::OpenOptionsExt as _;
        let mut f = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&j)
            .unwrap();
        f.write_all(text.as_bytes()).unwrap();
    }
    let t = Instant::now();
    w.start();
    println!(
        "a start over a journal of {} bytes took {:?}",
        text.len(),
        t.elapsed()
    );
    assert!(!w.log_text().contains("larger than"), "{}", w.log_text());
    assert_eq!(cpufreq_state(&w), before);
    assert!(std::fs::metadata(&j).unwrap().len() < 4096);
}

/// High 2: 1200.4 MHz used to pass as "within 0.5 MHz of 1200" and be written as 1200400
/// to scaling_setspeed, which the userspace governor rounds up to the next listed step
/// (1600 MHz, above the [1200, 1400] grant). It is refused now; 1200 is written as
/// 1200000. GPU clocks and power limits that NVML would round are refused too.
#[test]
fn a_frequency_not_in_the_cpus_list_is_refused_not_rounded_up() {
    let Some(mut w) = World::new("daemon unlisted frequency", GRANT) else {
        return;
    };
    w.start();
    let before = cpufreq_state(&w);
    for mhz in ["1200.4", "1200.0004", "1399.9", "1400.0001"] {
        let o = w.request(
            NOBODY,
            &[&format!(r#"{{"op":"set_core_freq","mhz":{mhz}}}"#)],
        );
        let t = out(&o);
        assert!(
            !o.status.success() && t.contains("\"ok\":false"),
            "{mhz}: {t}"
        );
        assert_eq!(cpufreq_state(&w), before, "{mhz}");
        assert_eq!(w.read(0, "scaling_setspeed"), "<unsupported>", "{mhz}");
    }
    // the listed value itself is written as listed
    let mut c = hold(&w, NOBODY, &[r#"{"op":"set_core_freq","mhz":1200.0}"#]);
    w.wait_for("1200000 in scaling_setspeed", || {
        w.read(0, "scaling_setspeed") == "1200000" && w.read(1, "scaling_setspeed") == "1200000"
    });
    kill_group(&mut c);
    w.wait_for("the restore", || cpufreq_state(&w) == before);
    // GPU: whole MHz and whole mW only, nothing written otherwise
    let gpu = |f: &str| {
        std::fs::read_to_string(w.dir.path().join("gpu/gpu0").join(f))
            .unwrap()
            .trim()
            .to_string()
    };
    for (req, want) in [
        (
            r#"{"op":"set_gpu_locked_clocks","gpu":0,"min_mhz":1004.6}"#,
            "whole MHz",
        ),
        (
            r#"{"op":"set_gpu_locked_clocks","gpu":0,"min_mhz":990,"max_mhz":1499.6}"#,
            "whole MHz",
        ),
        (
            r#"{"op":"set_gpu_power_limit","gpu":0,"watts":400.0004}"#,
            "whole milliwatts",
        ),
    ] {
        let o = w.request(OTHER, &[req]);
        assert!(
            !o.status.success() && out(&o).contains(want),
            "{req}: {}",
            out(&o)
        );
        assert_eq!(gpu("locked_clocks_mhz"), "none", "{req}");
        assert_eq!(gpu("power_limit_w"), "700", "{req}");
    }
    w.kill_daemon();
}

/// `powerperfd request --hold REQ...` as `uid`, in its own process group.
fn hold(w: &World, uid: u32, reqs: &[&str]) -> Child {
    let mut c = as_uid(uid, &w.daemon_bin);
    c.arg("request")
        .arg("--socket")
        .arg(&w.socket)
        .arg("--hold")
        .args(reqs)
        .process_group(0)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c.spawn().unwrap()
}

/// A small xorshift: random delays, reproducible from the seed printed.
fn xorshift(s: &mut u64) -> u64 {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    *s
}

/// High 3: SIGTERM while two users set and restore in a loop used to leave a governor or a
/// frequency changed (the restore released the lock before the exit, and a connection set
/// again in that gap). Ten randomly timed SIGTERMs now leave every governor, min and max as
/// it was, and the journal holds no save without its end.
#[test]
fn randomly_timed_sigterms_during_set_restore_cycles_leave_every_setting_as_it_was() {
    let Some(mut w) = World::new("daemon SIGTERM", GRANT) else {
        return;
    };
    let mut seed = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
        | 1;
    println!("seed {seed}");
    let before = {
        w.start();
        let b = cpufreq_state(&w);
        w.kill_daemon();
        b
    };
    // long loops: each client sets and restores until the daemon goes
    let cycle = |cpu: u32| -> Vec<String> {
        let mut v = Vec::new();
        for _ in 0..5000 {
            v.push(format!(
                r#"{{"op":"set_governor","governor":"performance","cpus":[{cpu}]}}"#
            ));
            v.push(format!(
                r#"{{"op":"set_core_freq","mhz":1200,"cpus":[{cpu}]}}"#
            ));
            v.push(r#"{"op":"restore"}"#.into());
        }
        v
    };
    let (c0, c1) = (cycle(0), cycle(1));
    let mut busy = 0;
    for round in 0..10 {
        w.start();
        let mut clients: Vec<Child> = [(NOBODY, &c0), (OTHER, &c1)]
            .iter()
            .map(|(uid, reqs)| {
                let mut c = as_uid(*uid, &w.daemon_bin);
                c.arg("request")
                    .arg("--socket")
                    .arg(&w.socket)
                    .args(reqs.iter())
                    .process_group(0)
                    .stdout(Stdio::null())
                    .stderr(Stdio::null());
                c.spawn().unwrap()
            })
            .collect();
        // let the clients connect, then a random moment within their cycles
        let delay = 50 + xorshift(&mut seed) % 250;
        std::thread::sleep(Duration::from_millis(delay));
        let st = term(&mut w);
        for c in &mut clients {
            kill_group(c);
        }
        assert!(
            st.success(),
            "round {round}: powerperfd exited {st}: {}",
            w.log_text()
        );
        assert_eq!(
            cpufreq_state(&w),
            before,
            "round {round} (SIGTERM after {delay} ms): a setting outlived the daemon; log:\n{}",
            w.log_text()
        );
        // the stop came while sessions held settings (their restore is logged), in most
        // rounds; and nothing is left for the next start to undo
        let j = std::fs::read_to_string(journal(&w)).unwrap_or_default();
        let mut open = std::collections::BTreeSet::new();
        for l in j.lines() {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            match v["kind"].as_str() {
                Some("save") => open.insert(v["session"].as_u64()),
                Some("end") => open.remove(&v["session"].as_u64()),
                _ => false,
            };
        }
        assert!(
            open.is_empty(),
            "round {round}: the journal keeps saves without their end:\n{j}"
        );
        let log = w.log_text();
        busy = log.matches("restored at shutdown").count();
    }
    println!("{busy} sessions were restored at shutdown over the 10 rounds");
    assert!(
        busy >= 3,
        "the clients were rarely at work when the daemon stopped: {}",
        w.log_text()
    );
}

/// Bind a TCP socket to `src` and connect it to `dst` (libc: std cannot choose the source
/// address).
fn connect_from(
    src: std::net::Ipv4Addr,
    dst: std::net::SocketAddrV4,
) -> Option<std::net::TcpStream> {
    use std::os::fd::FromRawFd as _;
    let sa = |a: std::net::Ipv4Addr, port: u16| libc::sockaddr_in {
        sin_family: libc::AF_INET as libc::sa_family_t,
        sin_port: port.to_be(),
        sin_addr: libc::in_addr {
            s_addr: u32::from(a).to_be(),
        },
        sin_zero: [0; 8],
    };
    let len = std::mem::size_of::<libc::sockaddr_in>() as libc::socklen_t;
    // SAFETY: socket, bind and connect on a new descriptor with valid sockaddr_in values;
    // the descriptor is owned by the TcpStream or closed.
    unsafe {
        let fd = libc::socket(libc::AF_INET, libc::SOCK_STREAM | libc::SOCK_CLOEXEC, 0);
        if fd < 0 {
            return None;
        }
        let s = sa(src, 0);
        let d = sa(*dst.ip(), dst.port());
        if libc::bind(fd, (&s as *const libc::sockaddr_in).cast(), len) != 0
            || libc::connect(fd, (&d as *const libc::sockaddr_in).cast(), len) != 0
        {
            libc::close(fd);
            return None;
        }
        Some(std::net::TcpStream::from_raw_fd(fd))
    }
}

/// One scrape from 127.0.0.1: whether it got `200 OK` with the metrics.
fn scrape(addr: std::net::SocketAddrV4) -> bool {
    let Ok(mut s) = std::net::TcpStream::connect_timeout(&addr.into(), Duration::from_secs(2))
    else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_secs(5)));
    if s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n")
        .is_err()
    {
        return false;
    }
    let mut r = Vec::new();
    let _ = s.read_to_end(&mut r);
    let t = String::from_utf8_lossy(&r);
    t.starts_with("HTTP/1.1 200") && t.contains("powerperf_")
}

/// Slow connections from `addrs` (`per` each), one byte a second, reopened when closed,
/// until `stop`. Run as uid 65534 by the caller (setpriv in `attack`).
fn slow_connections(
    addrs: &[std::net::Ipv4Addr],
    per: usize,
    dst: std::net::SocketAddrV4,
    stop: Instant,
) {
    let mut open: Vec<(std::net::Ipv4Addr, std::net::TcpStream)> = Vec::new();
    while Instant::now() < stop {
        for a in addrs {
            let n = open.iter().filter(|(x, _)| x == a).count();
            for _ in n..per {
                if let Some(s) = connect_from(*a, dst) {
                    let _ = s.set_nonblocking(true);
                    open.push((*a, s));
                }
            }
        }
        open.retain_mut(|(_, s)| {
            let mut b = [0u8; 64];
            // the daemon closed it: reopen it in the next round
            !matches!(s.read(&mut b), Ok(0)) && s.write_all(b"G").is_ok()
        });
        std::thread::sleep(Duration::from_millis(1000));
    }
}

/// Run [`slow_connections`] as uid 65534 in a child process (this test binary again,
/// through setpriv, running the ignored test `attacker`).
fn attack(w: &World, addrs: &str, per: usize, dst: std::net::SocketAddrV4, secs: u64) -> Child {
    // this test binary, where uid 65534 can run it
    let exe = w.dir.path().join("daemon_attacks");
    if !exe.exists() {
        std::fs::copy(std::env::current_exe().unwrap(), &exe).unwrap();
    }
    let mut c = as_uid(NOBODY, &exe);
    c.args(["--exact", "attacker", "--ignored", "--nocapture"])
        .env("POWERPERF_ATTACK", format!("{addrs};{per};{dst};{secs}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    c.spawn().unwrap()
}

/// The attacker of [`metrics_scrapes_go_on_while_one_user_holds_slow_connections`] (run
/// only through `attack`, as uid 65534).
#[test]
#[ignore = "the attacker process of the metrics test"]
fn attacker() {
    let Ok(spec) = std::env::var("POWERPERF_ATTACK") else {
        return;
    };
    let p: Vec<&str> = spec.split(';').collect();
    let (lo, hi) = p[0].split_once('-').unwrap();
    let (lo, hi): (u32, u32) = (
        u32::from(lo.parse::<std::net::Ipv4Addr>().unwrap()),
        u32::from(hi.parse::<std::net::Ipv4Addr>().unwrap()),
    );
    let addrs: Vec<std::net::Ipv4Addr> = (lo..=hi).map(std::net::Ipv4Addr::from).collect();
    slow_connections(
        &addrs,
        p[1].parse().unwrap(),
        p[2].parse().unwrap(),
        Instant::now() + Duration::from_secs(p[3].parse().unwrap()),
    );
}

/// Medium 4: 32 connections sending one byte a second used to hold the endpoint's 16
/// slots, and 49–50 of 50 scrapes failed. With a limit per peer address, a total limit in
/// which a new address closes the oldest connection of the busiest one, and a 2 s header
/// deadline: 32 slow connections from 127.0.0.2 leave at least 9 of 10 scrapes from
/// 127.0.0.1 working; so do 4 from each of 64 addresses (the measurement docs/cluster.md
/// gives).
#[test]
fn metrics_scrapes_go_on_while_one_user_holds_slow_connections() {
    let Some(mut w) = World::new("daemon metrics slow connections", GRANT) else {
        return;
    };
    w.daemon_args = vec!["--metrics-listen".into(), "127.0.0.1:0".into()];
    w.start();
    let addr: std::net::SocketAddrV4 = {
        let t = Instant::now();
        loop {
            if let Some(a) = w
                .log_text()
                .lines()
                .filter(|l| l.contains("metrics: serving GET /metrics"))
                .find_map(|l| l.split("address=").nth(1))
            {
                break a.split_whitespace().next().unwrap().parse().unwrap();
            }
            assert!(t.elapsed() < Duration::from_secs(10), "{}", w.log_text());
            std::thread::sleep(Duration::from_millis(20));
        }
    };
    assert!(scrape(addr), "{}", w.log_text());
    for (addrs, per, want) in [
        ("127.0.0.2-127.0.0.2", 32, 9),
        ("127.0.1.1-127.0.1.64", 4, 9),
    ] {
        let mut a = attack(&w, addrs, per, addr, 12);
        // let it open its connections
        std::thread::sleep(Duration::from_millis(1500));
        let mut ok = 0;
        for _ in 0..10 {
            ok += usize::from(scrape(addr));
            std::thread::sleep(Duration::from_millis(300));
        }
        let _ = a.kill();
        let _ = a.wait();
        // the attack was on: the daemon closed connections over its limits
        let closed = w
            .log_text()
            .matches("metrics: a connection over the limit closed")
            .count();
        println!("{addrs}, {per} slow connections each: {ok} of 10 scrapes answered ({closed} connections closed over the limits so far)");
        assert!(closed > 0, "the attacker did not connect: {}", w.log_text());
        assert!(
            ok >= want,
            "{addrs} x {per}: only {ok} of 10 scrapes answered"
        );
    }
    w.kill_daemon();
}
