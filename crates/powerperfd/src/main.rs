//! `powerperfd`: powerperf's privileged node service (docs/cluster.md).

use anyhow::{Context, Result};
use clap::Parser;
use powerperfd::policy::Config;
use powerperfd::server::{bind_socket, Daemon, Options};
use std::io::{BufRead as _, Write as _};
use std::path::PathBuf;

/// powerperf's node service: lets users read RAPL energy and set CPU frequencies within the
/// ranges its policy grants them, and restores every setting when the session that made it
/// ends. Runs as root (dist/powerperfd.service); see docs/cluster.md.
#[derive(Debug, Parser)]
#[command(
    name = "powerperfd",
    version,
    after_help = "Examples:\n  powerperfd --config /etc/powerperf/powerperfd.toml\n  powerperfd request '{\"op\":\"status\"}'      # one request, as the calling user\n\nLogging: RUST_LOG (e.g. RUST_LOG=powerperfd=debug); every refusal is logged at warn with uid, pid and reason."
)]
struct Args {
    /// The config file (TOML; dist/powerperfd.toml is the commented default). Without it:
    /// everyone may read energy, nobody may write.
    #[arg(long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// The socket (default: the config's `socket`, else /run/powerperf/powerperfd.sock). Its
    /// directory is created 0755 when missing; the socket is 0666 and every client is
    /// identified by SO_PEERCRED.
    #[arg(long, value_name = "PATH")]
    socket: Option<PathBuf>,
    /// Root's state directory, 0700, holding the journal of changes to undo (default: the
    /// config's `state_dir`, else /var/lib/powerperf).
    #[arg(long, value_name = "DIR")]
    state_dir: Option<PathBuf>,
    /// The sysfs root (default: the config's `sysfs_root`, else /; a fixture tree in tests).
    #[arg(long, value_name = "DIR")]
    sysfs_root: Option<PathBuf>,
    /// GPUs described by files in DIR (gpuN/supported_graphics_clocks_mhz,
    /// power_limit_range_w, power_limit_w, locked_clocks_mhz) instead of NVML: for tests and
    /// demonstrations; no GPU is touched (tests/fixtures/fake-gpu).
    #[arg(long, value_name = "DIR")]
    fake_gpu: Option<PathBuf>,
    /// Serve Prometheus metrics (GET /metrics: energy per RAPL domain, GPU and Slurm job,
    /// power, frequencies, sessions' settings) on IP:PORT, e.g. 127.0.0.1:9712 (default: the
    /// config's `metrics_listen`, else off). Read-only, no authentication, and it shows uids
    /// and job ids: bind it to localhost or a management network (docs/cluster.md,
    /// "Metrics"). Port 0 picks a free port, logged at start.
    #[arg(long, value_name = "IP:PORT", value_parser = parse_metrics_listen)]
    metrics_listen: Option<std::net::SocketAddr>,
    #[command(subcommand)]
    cmd: Option<Cmd>,
}

#[derive(Debug, clap::Subcommand)]
enum Cmd {
    /// Send requests (one JSON object each) on one connection and print each response
    /// line; the session ends (and its settings are restored) when this exits.
    Request {
        /// The socket (default: $POWERPERF_DAEMON, else /run/powerperf/powerperfd.sock).
        #[arg(long, value_name = "PATH")]
        socket: Option<PathBuf>,
        /// After the requests, keep the session open until stdin ends.
        #[arg(long)]
        hold: bool,
        /// The requests, e.g. '{"op":"set_core_freq","mhz":1600}'.
        #[arg(required = true)]
        requests: Vec<String>,
    },
}

fn main() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(false)
        .init();
    let args = Args::parse();
    let r = match args.cmd {
        Some(Cmd::Request {
            socket,
            hold,
            requests,
        }) => request(socket, hold, &requests),
        None => daemon(
            args.config,
            args.socket,
            args.state_dir,
            args.sysfs_root,
            args.fake_gpu,
            args.metrics_listen,
        ),
    };
    match r {
        Ok(code) => std::process::exit(code),
        Err(e) => {
            eprintln!("powerperfd: {e:#}");
            std::process::exit(1);
        }
    }
}

fn daemon(
    config: Option<PathBuf>,
    socket: Option<PathBuf>,
    state_dir: Option<PathBuf>,
    sysfs_root: Option<PathBuf>,
    fake_gpu: Option<PathBuf>,
    metrics_listen: Option<std::net::SocketAddr>,
) -> Result<i32> {
    let cfg = match &config {
        Some(p) => Config::read(p)?,
        None => Config::default(),
    };
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        tracing::warn!("powerperfd is not running as root: it can only do what this user may");
    }
    let cfg_metrics = cfg.metrics_listen;
    let opts = Options {
        socket: socket
            .or_else(|| cfg.socket.clone())
            .unwrap_or_else(|| PathBuf::from(powerperf_node::daemon::DEFAULT_SOCKET)),
        state_dir: state_dir
            .or_else(|| cfg.state_dir.clone())
            .unwrap_or_else(|| PathBuf::from(powerperf_node::state::ROOT_STATE_DIR)),
        sysfs_root: sysfs_root
            .or_else(|| cfg.sysfs_root.clone())
            .unwrap_or_else(|| PathBuf::from("/")),
        config: cfg,
        fake_gpu,
    };
    let socket = opts.socket.clone();
    let metrics_listen = metrics_listen.or(cfg_metrics);
    // the journal is replayed before the socket exists: no client sees the old settings
    let d = Daemon::start(opts)?;
    // the metrics before the socket: every session is seen from its start
    if let Some(addr) = metrics_listen {
        let bound = d.serve_metrics(addr)?;
        if !bound.ip().is_loopback() {
            tracing::warn!(address = %bound, "the metrics endpoint has no authentication and shows uids and job ids: keep it on a management network (docs/cluster.md)");
        }
        tracing::info!(address = %bound, "metrics: serving GET /metrics");
    }
    let listener = bind_socket(&socket)?;
    {
        use signal_hook::consts::{SIGHUP, SIGINT, SIGTERM};
        let mut signals = signal_hook::iterator::Signals::new([SIGTERM, SIGINT, SIGHUP])
            .context("cannot install the signal handlers")?;
        let d = std::sync::Arc::clone(&d);
        let socket = socket.clone();
        std::thread::spawn(move || {
            if let Some(sig) = signals.forever().next() {
                // no new client, no request served, every session restored, then the exit
                // with the state lock held: no window for a new set (issue 38)
                tracing::info!(signal = sig, "stopping: restoring every session's settings");
                let _ = std::fs::remove_file(&socket);
                d.shutdown();
            }
        });
    }
    tracing::info!(socket = %socket.display(), config = ?config, "listening");
    d.serve(listener);
    Ok(0)
}

fn parse_metrics_listen(s: &str) -> Result<std::net::SocketAddr> {
    powerperfd::metrics::parse_listen(s)
}

fn request(socket: Option<PathBuf>, hold: bool, requests: &[String]) -> Result<i32> {
    let path = powerperf_node::daemon::client::socket_path(socket.as_deref())
        .unwrap_or_else(|| PathBuf::from(powerperf_node::daemon::DEFAULT_SOCKET));
    let s = std::os::unix::net::UnixStream::connect(&path)
        .with_context(|| format!("cannot reach powerperfd at {}", path.display()))?;
    let mut reader = std::io::BufReader::new(s.try_clone()?);
    let mut w = s;
    let mut out = std::io::stdout().lock();
    let mut all_ok = true;
    for r in requests {
        w.write_all(r.trim_end().as_bytes())?;
        w.write_all(b"\n")?;
        let mut buf = Vec::new();
        if !powerperf_node::daemon::read_line_bounded(
            &mut reader,
            &mut buf,
            powerperf_node::daemon::MAX_LINE,
        )? {
            anyhow::bail!("powerperfd closed the connection");
        }
        let resp: powerperf_node::daemon::Response = serde_json::from_slice(&buf)
            .context("powerperfd answered something that is not a response")?;
        all_ok &= resp.ok;
        out.write_all(&buf)?;
        out.flush()?;
    }
    if hold {
        let mut line = String::new();
        while std::io::stdin().lock().read_line(&mut line)? > 0 {
            line.clear();
        }
    }
    Ok(if all_ok { 0 } else { 2 })
}
