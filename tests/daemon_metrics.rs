//! powerperfd's metrics endpoint (`--metrics-listen`, docs/cluster.md "Metrics") scraped by a
//! real Prometheus server (Debian's `prometheus`), started here with the shipped scrape
//! config (dist/prometheus-powerperfd.yml, its target and intervals replaced) on a free
//! port in a private directory, and queried through its HTTP API (`/api/v1/query`, with
//! curl): a RAPL energy series written into the fixture tree (across a wrap of the
//! counter), a Slurm job's energy, a GPU's energy and power, a CPU's frequency and a
//! session's setting come back exactly. Also: a scraper that never finishes its request
//! is cut off and does not hold up the control socket.

mod common;

use common::daemon::World;
use std::io::{BufRead as _, Read as _, Write as _};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

const CONFIG: &str = r#"[everyone]
read = ["energy"]

[[grant]]
name = "dvfs-users"
users = ["65533"]
write = ["cpu.core_freq"]
[grant.ranges]
"cpu.core_freq" = [1200, 2000]
"#;

/// A Prometheus server of this test, killed when dropped (also when the test fails).
struct Prometheus {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn curl(args: &[&str]) -> Option<String> {
    let o = Command::new("curl")
        .args(["-sS", "--max-time", "5"])
        .args(args)
        .output()
        .expect("curl");
    o.status
        .success()
        .then(|| String::from_utf8_lossy(&o.stdout).into_owned())
}

impl Prometheus {
    /// Start `prometheus` scraping `target` every second, in `dir`; `None` (after
    /// `skipped: …`) when the binary is absent.
    fn start(dir: &Path, target: &str) -> Option<Self> {
        if Command::new("prometheus")
            .arg("--version")
            .output()
            .is_err()
        {
            println!("skipped: daemon_metrics: the `prometheus` binary is absent (Debian: apt-get install prometheus; .ci/run installs it)");
            return None;
        }
        let shipped = std::fs::read_to_string(
            Path::new(env!("CARGO_MANIFEST_DIR")).join("dist/prometheus-powerperfd.yml"),
        )
        .unwrap();
        let mut cfg = shipped.clone();
        for (from, to) in [
            (
                "[\"node001:9712\", \"node002:9712\"]".to_string(),
                format!("[\"{target}\"]"),
            ),
            ("scrape_interval: 15s".into(), "scrape_interval: 1s".into()),
            ("scrape_timeout: 5s".into(), "scrape_timeout: 1s".into()),
        ] {
            assert!(
                cfg.contains(&from),
                "the shipped scrape config lost `{from}`"
            );
            cfg = cfg.replace(&from, &to);
        }
        let dir = dir.join("prometheus");
        std::fs::create_dir_all(dir.join("data")).unwrap();
        std::fs::write(dir.join("prometheus.yml"), cfg).unwrap();
        let port = common::free_port();
        let log = dir.join("prometheus.log");
        let child = Command::new("prometheus")
            .arg(format!(
                "--config.file={}",
                dir.join("prometheus.yml").display()
            ))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address=127.0.0.1:{port}"))
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("prometheus");
        let mut p = Prometheus { child, port, log };
        let t = Instant::now();
        while curl(&[&format!("http://127.0.0.1:{port}/-/ready")]).is_none() {
            if let Some(st) = p.child.try_wait().unwrap() {
                panic!("prometheus exited ({st}): {}", p.log_text());
            }
            assert!(
                t.elapsed() < Duration::from_secs(60),
                "prometheus did not become ready: {}",
                p.log_text()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        Some(p)
    }

    fn log_text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// `/api/v1/query?query=q`: the `data.result` array.
    fn query(&self, q: &str) -> Vec<serde_json::Value> {
        let body = curl(&[
            "-G",
            &format!("http://127.0.0.1:{}/api/v1/query", self.port),
            "--data-urlencode",
            &format!("query={q}"),
        ])
        .unwrap_or_else(|| panic!("the query {q} failed: {}", self.log_text()));
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["status"], "success", "{q}: {v}");
        v["data"]["result"].as_array().unwrap().clone()
    }

    /// The value of the one series `q` selects now, `None` when it selects none.
    fn value(&self, q: &str) -> Option<f64> {
        let r = self.query(q);
        assert!(r.len() <= 1, "{q} selects several series: {r:?}");
        r.first()
            .map(|s| s["value"][1].as_str().unwrap().parse().unwrap())
    }

    /// Wait (at most 30 s) until `q`'s value is exactly `want` (`None`: no series).
    fn wait_value(&self, w: &World, q: &str, want: Option<f64>) {
        let t = Instant::now();
        loop {
            let got = self.value(q);
            if got == want {
                return;
            }
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "{q} is {got:?}, not {want:?}\nprometheus:\n{}\npowerperfd:\n{}",
                self.log_text(),
                w.log_text()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

/// Replace a fixture file at once (a reader never sees it empty).
fn put(p: &Path, v: impl std::fmt::Display) {
    let tmp = p.with_extension("new");
    std::fs::write(&tmp, format!("{v}\n")).unwrap();
    std::fs::rename(&tmp, p).unwrap();
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

#[test]
fn prometheus_scrapes_energy_jobs_gpus_frequencies_and_settings() {
    let Some(mut w) = World::new("daemon_metrics", CONFIG) else {
        return;
    };
    let pkg = w.root.join("sys/class/powercap/intel-rapl:0/energy_uj");
    let pkg_max: u64 = 262_143_328_850; // its max_energy_range_uj
    let gpu_mj = w.dir.path().join("gpu/gpu0/energy_mj");
    let cur_freq = w.file(1, "scaling_cur_freq");
    put(&pkg, 262_143_000_000u64);
    put(&gpu_mj, 1000);
    put(&cur_freq, 1_800_000);
    w.daemon_args = vec!["--metrics-listen".into(), "127.0.0.1:0".into()];
    w.start();
    let addr = metrics_address(&w);

    // the endpoint itself: the text format's content type, and only /metrics
    let text = curl(&[&format!("http://{addr}/metrics")]).unwrap();
    assert!(
        text.contains("# TYPE powerperf_rapl_energy_joules_total counter"),
        "{text}"
    );
    let ct = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{content_type} %{http_code}",
        &format!("http://{addr}/metrics"),
    ])
    .unwrap();
    assert_eq!(ct, "text/plain; version=0.0.4; charset=utf-8 200");
    let nf = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        &format!("http://{addr}/"),
    ])
    .unwrap();
    assert_eq!(nf, "404");

    let Some(prom) = Prometheus::start(w.dir.path(), &addr) else {
        return;
    };
    prom.wait_value(&w, "up{job=\"powerperfd\"}", Some(1.0));

    // a RAPL series: energy since the daemon started, through a wrap of the counter
    let q_pkg = "powerperf_rapl_energy_joules_total{domain=\"package-0\"}";
    let mut raw = 262_143_000_000u64;
    let mut total_uj = 0u64;
    let mut series = vec![0.0];
    prom.wait_value(&w, q_pkg, Some(0.0));
    for step in [100_000u64, 428_850, 500_000] {
        raw = (raw + step) % pkg_max;
        total_uj += step;
        put(&pkg, raw);
        let want = total_uj as f64 / 1e6;
        series.push(want);
        prom.wait_value(&w, q_pkg, Some(want));
    }
    assert!(raw < 1_000_000, "the series did not wrap: {raw}");
    // the stored series, as Prometheus returns it (repeated scrapes of a value merged)
    let r = prom.query(&format!("{q_pkg}[10m]"));
    assert_eq!(r.len(), 1, "{r:?}");
    let mut stored: Vec<f64> = r[0]["values"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v[1].as_str().unwrap().parse().unwrap())
        .collect();
    stored.dedup();
    assert_eq!(stored, series);

    // the other gauges: GPU power (the fake GPU's power_w), a CPU's scaling_cur_freq
    prom.wait_value(&w, "powerperf_gpu_power_watts{gpu=\"0\"}", Some(250.5));
    prom.wait_value(&w, "powerperf_cpu_frequency_hertz{cpu=\"1\"}", Some(1.8e9));
    prom.wait_value(
        &w,
        "powerperf_gpu_energy_joules_total{gpu=\"0\"}",
        Some(0.0),
    );

    // a Slurm job: a root client (as the SPANK plugin) opens a session for uid OTHER and
    // job 4242 and pins CPU 0 at 1600 MHz
    let mut client = Command::new(&w.daemon_bin)
        .args(["request", "--hold", "--socket"])
        .arg(&w.socket)
        .arg(format!(
            r#"{{"op":"hello","on_behalf_of":{{"uid":{},"job":"4242"}}}}"#,
            common::daemon::OTHER
        ))
        .arg(r#"{"op":"set_core_freq","mhz":1600,"cpus":[0]}"#)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = std::io::BufReader::new(client.stdout.take().unwrap());
    for _ in 0..2 {
        let mut l = String::new();
        out.read_line(&mut l).unwrap();
        assert!(l.contains("\"ok\":true"), "{l}\n{}", w.log_text());
    }
    let q_job = "powerperf_job_energy_joules_total{job=\"4242\",domain=\"package-0\"}";
    prom.wait_value(&w, "powerperf_job_sessions{job=\"4242\"}", Some(1.0));
    prom.wait_value(&w, "powerperf_sessions", Some(1.0));
    prom.wait_value(
        &w,
        &format!(
            "powerperf_session_setting_hertz{{job=\"4242\",uid=\"{}\",control=\"cpu.core_freq\",target=\"cpu0\",bound=\"max\"}}",
            common::daemon::OTHER
        ),
        Some(1.6e9),
    );
    // the job's energy: what the node used while its session was open
    let job_uj = 250_000u64;
    raw += job_uj;
    total_uj += job_uj;
    put(&pkg, raw);
    put(&gpu_mj, 1000 + 5000);
    prom.wait_value(&w, q_pkg, Some(total_uj as f64 / 1e6));
    prom.wait_value(&w, q_job, Some(job_uj as f64 / 1e6));
    drop(client.stdin.take());
    assert!(client.wait().unwrap().success());
    prom.wait_value(&w, "powerperf_job_sessions{job=\"4242\"}", Some(0.0));
    // after the job: the node counts on, the job's total stays, the setting is gone
    raw += 1_000_000;
    total_uj += 1_000_000;
    put(&pkg, raw);
    put(&gpu_mj, 1000 + 5000 + 7000);
    prom.wait_value(&w, q_pkg, Some(total_uj as f64 / 1e6));
    prom.wait_value(
        &w,
        "powerperf_gpu_energy_joules_total{gpu=\"0\"}",
        Some(12.0),
    );
    assert_eq!(prom.value(q_job), Some(job_uj as f64 / 1e6));
    assert_eq!(
        prom.value("powerperf_job_gpu_energy_joules_total{job=\"4242\",gpu=\"0\"}"),
        Some(5.0)
    );
    prom.wait_value(&w, "powerperf_session_setting_hertz", None);
    prom.wait_value(&w, "powerperf_sessions", Some(0.0));

    // a scraper that never finishes its request: cut off after the daemon's 2 s header
    // deadline (HEADER_TIMEOUT, issue 38),
    // while the control socket answers and Prometheus goes on scraping
    let mut slow = std::net::TcpStream::connect(&addr).unwrap();
    slow.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n")
        .unwrap();
    let t = Instant::now();
    let status = w.request(0, &[r#"{"op":"status"}"#]);
    assert!(status.status.success(), "{status:?}");
    assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
    slow.set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut rest = Vec::new();
    let _ = slow.read_to_end(&mut rest);
    let cut = t.elapsed();
    assert!(
        cut >= Duration::from_millis(1900) && cut < Duration::from_secs(15),
        "the silent scraper was cut off after {cut:?}"
    );
    // Prometheus scraped (every second) while that connection hung
    let scrapes = prom
        .value("count_over_time(up{job=\"powerperfd\"}[4s])")
        .unwrap_or(0.0);
    assert!(scrapes >= 2.0, "Prometheus scraped {scrapes} times in 4 s");
    prom.wait_value(&w, "up{job=\"powerperfd\"}", Some(1.0));
}

/// The shipped unit and its metrics drop-in (dist/powerperfd.service,
/// dist/powerperfd.service.d/metrics.conf) as systemd reads them: `systemd-analyze verify`
/// on copies whose ExecStart names this build's powerperfd loads both without an error,
/// and the drop-in turns the unit's network on (PrivateNetwork, the address families) and
/// lets only localhost connect until the administrator edits it. Every flag of ExecStart is
/// one powerperfd takes.
#[test]
fn the_shipped_unit_and_its_metrics_drop_in_load_in_systemd() {
    let Ok(v) = Command::new("systemd-analyze").arg("--version").output() else {
        println!("skipped: systemd-analyze is not installed (Debian's systemd package)");
        return;
    };
    assert!(v.status.success());
    let dist = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("dist");
    let daemon = common::daemon::powerperfd_src();
    let unit = std::fs::read_to_string(dist.join("powerperfd.service")).unwrap();
    let exec = unit
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart");
    let mut words = exec.split_whitespace();
    assert_eq!(words.next(), Some("/usr/local/sbin/powerperfd"), "{exec}");
    let help = Command::new(&daemon).arg("--help").output().unwrap();
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    for flag in words.filter(|w| w.starts_with("--")) {
        assert!(
            help.contains(flag),
            "ExecStart's {flag} is not a powerperfd flag: {help}"
        );
    }
    let dir = tempfile::tempdir().unwrap();
    let copy = dir.path().join("powerperfd.service");
    std::fs::write(
        &copy,
        unit.replace("/usr/local/sbin/powerperfd", daemon.to_str().unwrap()),
    )
    .unwrap();
    let verify = || {
        let o = Command::new("systemd-analyze")
            .arg("verify")
            .arg(&copy)
            .env("SYSTEMD_LOG_LEVEL", "debug")
            .output()
            .unwrap();
        let all = format!(
            "{}{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.status.success(), "systemd-analyze verify: {all}");
        all
    };
    let plain = verify();
    assert!(plain.contains("PrivateNetwork: yes"), "{plain}");
    std::fs::create_dir(dir.path().join("powerperfd.service.d")).unwrap();
    std::fs::copy(
        dist.join("powerperfd.service.d/metrics.conf"),
        dir.path().join("powerperfd.service.d/metrics.conf"),
    )
    .unwrap();
    let with = verify();
    for want in [
        "DropIn Path:",
        "metrics.conf",
        "PrivateNetwork: no",
        "IPAddressAllow: 127.0.0.0/8",
        "IPAddressDeny: 0.0.0.0/0",
    ] {
        assert!(with.contains(want), "{want}: {with}");
    }
}
