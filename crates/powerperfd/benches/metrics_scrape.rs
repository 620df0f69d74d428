//! The cost of one scrape of powerperfd's `/metrics` (docs/cluster.md, "Metrics"), and the
//! control socket's latency while a scraper hammers the endpoint.
//!
//! `cargo bench -p powerperfd --bench metrics_scrape` (a release build). The daemon runs in
//! this process on a copy of the fixture trees (`tests/fixtures/sysfs/cpufreq-userspace`,
//! `rapl-wrap`, `intel-uncore`, the fake GPU of `tests/fixtures/fake-gpu`), as powerperfd
//! does with `--metrics-listen 127.0.0.1:0`. One scrape = connect, `GET /metrics`, read the
//! whole answer (the daemon closes the connection after it): the sampler's reads of the
//! fixture files, the rendering by prometheus-client and the HTTP exchange over loopback.
//! Rows: no job; 100 finished jobs; the kept maximum of finished jobs
//! (`metrics::MAX_FINISHED_JOBS`) plus 16 open sessions of jobs each holding a CPU
//! setting. Prints a table; asserts nothing about speed.

use powerperfd::policy::Config;
use powerperfd::server::{bind_socket, Daemon, Options};
use std::io::{BufRead as _, BufReader, Read as _, Write as _};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

fn copy_tree(from: &Path, to: &Path) {
    if from.is_dir() {
        std::fs::create_dir_all(to).unwrap();
        for e in std::fs::read_dir(from).unwrap() {
            let e = e.unwrap();
            copy_tree(&e.path(), &to.join(e.file_name()));
        }
    } else {
        std::fs::copy(from, to).unwrap();
    }
}

/// One scrape: the answer's body length.
fn scrape(addr: SocketAddr) -> usize {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut buf = Vec::with_capacity(1 << 16);
    s.read_to_end(&mut buf).unwrap();
    assert!(
        buf.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&buf)
    );
    buf.len()
}

struct Client {
    r: BufReader<UnixStream>,
    w: UnixStream,
}

impl Client {
    fn new(socket: &Path) -> Self {
        let s = UnixStream::connect(socket).unwrap();
        Client {
            r: BufReader::new(s.try_clone().unwrap()),
            w: s,
        }
    }
    fn ask(&mut self, req: &str) -> String {
        self.w.write_all(req.as_bytes()).unwrap();
        self.w.write_all(b"\n").unwrap();
        let mut l = String::new();
        self.r.read_line(&mut l).unwrap();
        assert!(l.contains("\"ok\":true"), "{req}: {l}");
        l
    }
}

fn hello(job: &str) -> String {
    format!(r#"{{"op":"hello","on_behalf_of":{{"uid":65533,"job":"{job}"}}}}"#)
}

fn stats(mut v: Vec<f64>) -> (f64, f64, f64) {
    v.sort_by(f64::total_cmp);
    let q = |p: f64| v[((v.len() - 1) as f64 * p).round() as usize];
    (v[0], q(0.5), q(0.9))
}

/// Wait until the sampler has seen what the control threads told it (a scrape shows it).
fn wait_for(addr: SocketAddr, needle: &str) {
    let t = Instant::now();
    loop {
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: b\r\n\r\n")
            .unwrap();
        let mut b = String::new();
        s.read_to_string(&mut b).unwrap();
        if b.contains(needle) {
            return;
        }
        assert!(t.elapsed() < Duration::from_secs(30), "{needle} never came");
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn main() {
    let n: usize = std::env::var("SCRAPES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(500);
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("sysfs");
    for t in ["cpufreq-userspace", "rapl-wrap", "intel-uncore"] {
        copy_tree(&repo.join("tests/fixtures/sysfs").join(t), &root);
    }
    let gpu = dir.path().join("gpu");
    copy_tree(&repo.join("tests/fixtures/fake-gpu"), &gpu);
    let socket = dir.path().join("run/powerperfd.sock");
    let cfg_path = dir.path().join("powerperfd.toml");
    std::fs::write(
        &cfg_path,
        "[limits]\nmax_connections_per_uid = 64\n[[grant]]\nusers = [\"65533\"]\nwrite = [\"cpu.governor\"]\n",
    )
    .unwrap();
    let config = Config::read(&cfg_path).unwrap();
    let d = Daemon::start(Options {
        socket: socket.clone(),
        state_dir: dir.path().join("state"),
        sysfs_root: root,
        config,
        fake_gpu: Some(gpu),
    })
    .unwrap();
    let addr = d.serve_metrics("127.0.0.1:0".parse().unwrap()).unwrap();
    let listener = bind_socket(&socket).unwrap();
    {
        let d = std::sync::Arc::clone(&d);
        std::thread::spawn(move || d.serve(listener));
    }

    println!("powerperfd /metrics: {n} scrapes per row, each timed alone (connect, GET, read all)");
    println!(
        "{:<44} {:>8} {:>9} {:>10} {:>10} {:>10}",
        "state", "series", "bytes", "min ms", "median ms", "p90 ms"
    );
    let mut held = Vec::new();
    let rows: [(&str, usize, usize); 3] = [
        ("no job", 0, 0),
        ("100 finished jobs", 100, 0),
        ("1000 finished jobs + 16 open job sessions", 1000, 16),
    ];
    let mut made = 0;
    for (label, finished, open) in rows {
        while made < finished {
            let mut c = Client::new(&socket);
            c.ask(&hello(&format!("done-{made}")));
            drop(c);
            made += 1;
        }
        while held.len() < open {
            let i = held.len();
            let mut c = Client::new(&socket);
            c.ask(&hello(&format!("open-{i}")));
            // one session holds a CPU (two CPUs in the fixture): their settings are served
            if i < 2 {
                c.ask(&format!(
                    r#"{{"op":"set_governor","governor":"performance","cpus":[{i}]}}"#
                ));
            }
            held.push(c);
        }
        if finished > 0 {
            wait_for(addr, &format!("job=\"done-{}\"", finished - 1));
        }
        if open > 0 {
            wait_for(addr, &format!("powerperf_sessions {open}"));
        }
        for _ in 0..20 {
            scrape(addr);
        }
        let mut t = Vec::with_capacity(n);
        let mut bytes = 0;
        for _ in 0..n {
            let s = Instant::now();
            bytes = scrape(addr);
            t.push(s.elapsed().as_secs_f64() * 1e3);
        }
        let mut body = String::new();
        let mut s = TcpStream::connect(addr).unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: b\r\n\r\n")
            .unwrap();
        s.read_to_string(&mut body).unwrap();
        let series = body.lines().filter(|l| l.starts_with("powerperf_")).count();
        let (min, med, p90) = stats(t);
        println!("{label:<44} {series:>8} {bytes:>9} {min:>10.3} {med:>10.3} {p90:>10.3}");
    }

    // the control socket while a scraper scrapes back to back
    let control = |c: &mut Client| {
        let mut t = Vec::new();
        let start = Instant::now();
        while start.elapsed() < Duration::from_secs(2) {
            let s = Instant::now();
            c.ask(r#"{"op":"status"}"#);
            t.push(s.elapsed().as_secs_f64() * 1e6);
            // under the connection's rate limit (1000 requests/s)
            std::thread::sleep(Duration::from_micros(1500));
        }
        stats(t)
    };
    let mut c = Client::new(&socket);
    let quiet = control(&mut c);
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let scraper = {
        let stop = std::sync::Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut k = 0u64;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                scrape(addr);
                k += 1;
            }
            k
        })
    };
    std::thread::sleep(Duration::from_millis(50));
    let busy = control(&mut c);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let scrapes = scraper.join().unwrap();
    println!();
    println!("control socket: `status` requests on one connection for 2 s (state of the last row)");
    println!(
        "{:<44} {:>10} {:>10} {:>10}",
        "", "min µs", "median µs", "p90 µs"
    );
    for (label, (a, b, c)) in [
        ("no scraper", quiet),
        ("a scraper scraping back to back", busy),
    ] {
        println!("{label:<44} {a:>10.1} {b:>10.1} {c:>10.1}");
    }
    println!("(the scraper made {scrapes} scrapes meanwhile)");
}
