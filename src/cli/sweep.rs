//! `powerperf sweep`: collect training runs over a grid of core frequencies and thread
//! counts (see [`powerperf_core::dvfs::sweep`]).

use anyhow::Result;
use powerperf_core::dvfs::apply::{self, SignalForwarder};
use powerperf_core::dvfs::sweep::{self, FreqSpec, SweepConfig};
use std::path::PathBuf;

/// Arguments of `powerperf sweep`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  powerperf sweep -o set1 --freq 1.2GHz,1.8GHz,max --threads 1,2,4,8 --repeat 3 -- ./my_program\n  powerperf sweep -o set1 --freq min,max --dry-run -- ./my_program\n  sudo powerperf sweep -o gpuset --gpu-clock 1200,1500,1980 --warmup 1 --repeat 3 -- ./my_cuda_program\n  powerperf sweep -o gpuset --fake-gpu tests/fixtures/fake-gpu-copy --gpu-clock 1200,1500 -- ./my_cuda_program\n  powerperf sweep -o gpuset --daemon /run/powerperf/powerperfd.sock --gpu-clock 1200,1500 -- ./my_cuda_program   (a user, through powerperfd's gpu.* grants)\n\nFinished runs are skipped when the same command is run again; the original settings are restored at the end."
)]
pub struct SweepArgs {
    /// The training set directory to write (runs under SET/runs/).
    #[arg(short = 'o', long = "output", value_name = "SET")]
    pub output: PathBuf,
    /// Core frequencies, comma-separated: `1.2GHz,1800MHz,max` (`min`/`max` from cpufreq).
    #[arg(long, value_delimiter = ',', value_parser = FreqSpec::parse, value_name = "F,...")]
    pub freq: Vec<FreqSpec>,
    /// Thread counts (OMP_NUM_THREADS), comma-separated.
    #[arg(long, value_delimiter = ',', value_name = "N,...")]
    pub threads: Vec<u32>,
    /// Runs per grid point.
    #[arg(long, default_value_t = 1)]
    pub repeat: u32,
    /// Root of the sysfs tree (a fixture directory in tests): cpufreq, and as root the AMD
    /// and Intel GPUs (amdgpu, xe, i915 hwmon directories) whose clocks and power limit
    /// `--gpu-clock`/`--gpu-power-limit` set, numbered after NVML's.
    #[arg(long, default_value = "/", value_name = "DIR")]
    pub sysfs_root: PathBuf,
    /// Print the grid and the writes, run nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// The restore record (as for `powerperf apply`).
    #[arg(long, value_name = "PATH")]
    pub restore_file: Option<PathBuf>,
    /// The switch log (as for `powerperf apply`).
    #[arg(long, value_name = "PATH")]
    pub log: Option<PathBuf>,
    /// Directory for the restore record and the switch log (as for `powerperf apply`).
    #[arg(long, value_name = "DIR")]
    pub state_dir: Option<PathBuf>,
    /// Workload label of the runs (default: the command's base name).
    #[arg(long)]
    pub workload: Option<String>,
    /// Events to count, as for `powerperf collect -e`.
    #[arg(short = 'e', long = "events")]
    pub events: Option<String>,
    /// Timeline sampling interval, as for `powerperf collect`.
    #[arg(long, default_value = "10ms", value_parser = humantime::parse_duration)]
    pub interval: std::time::Duration,
    /// Output format of the final summary: table (`text` also works), or json (one object on stderr, as
    /// `perf stat -j` does: stdout belongs to the command).
    #[arg(long, default_value = "table")]
    pub format: powerperf_core::output::OutputFormat,
    /// GPU SM clocks to lock, MHz, comma-separated (`nvmlDeviceSetGpuLockedClocks` with
    /// min = max; the knob core_freq_mhz on the GPU, as the bundled GPU sets name it). Each
    /// must be one of the GPU's supported clocks (nvidia-smi -q -d SUPPORTED_CLOCKS);
    /// another is refused, naming the nearest, before anything changes. As root through
    /// NVML, or on --fake-gpu.
    #[arg(long, value_delimiter = ',', value_name = "MHZ,...")]
    pub gpu_clock: Vec<f64>,
    /// GPU memory clocks to lock, MHz, comma-separated (`nvmlDeviceSetMemoryLockedClocks`,
    /// Ampere and newer; the knob mem_freq_mhz on the GPU). Refused, with the reason, where
    /// the GPU or driver has no memory-clock lock.
    #[arg(long, value_delimiter = ',', value_name = "MHZ,...")]
    pub gpu_mem_clock: Vec<f64>,
    /// GPU power limits, W, comma-separated (`nvmlDeviceSetPowerManagementLimit`; the knob
    /// power_limit_w on the GPU, as Zeus profiles it). Each must be inside the GPU's range
    /// (nvmlDeviceGetPowerManagementLimitConstraints).
    #[arg(long, value_delimiter = ',', value_name = "W,...")]
    pub gpu_power_limit: Vec<f64>,
    /// The GPU the GPU settings go to (NVML's index; AMD and Intel GPUs under --sysfs-root
    /// follow NVML's, from 0 where there is no NVML).
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub gpu: u32,
    /// Use the fake GPUs under DIR (the files of `powerperfd --fake-gpu`,
    /// tests/fixtures/fake-gpu) in place of NVML: settings are written to its files and the
    /// runs read its power_w, energy_mj and clocks. Needs neither root nor powerperfd.
    #[arg(long, value_name = "DIR")]
    pub fake_gpu: Option<PathBuf>,
    /// The socket of powerperfd, the node service (docs/cluster.md), through which a user
    /// who is not root sets the GPU settings of the grid (grants gpu.locked_clocks,
    /// gpu.mem_locked_clocks, gpu.power_limit): every point is checked by the daemon before
    /// anything changes, and the daemon restores at the end or when this sweep dies.
    /// Default when powerperf is not root and has no --fake-gpu: $POWERPERF_DAEMON, else
    /// /run/powerperf/powerperfd.sock when it exists. Given with --fake-gpu DIR (the
    /// daemon's own --fake-gpu), the settings still go through the daemon and the runs read
    /// the fake GPU's files.
    #[arg(long, value_name = "PATH")]
    pub daemon: Option<PathBuf>,
    /// Runs made and dropped before the repeats of each grid point (the first runs after a
    /// change are often slower), under SET/warmup/.
    #[arg(long, value_name = "N", default_value_t = 0)]
    pub warmup: u32,
    /// The command and its arguments.
    #[arg(last = true, required = true, value_name = "CMD")]
    pub command: Vec<String>,
}

/// Run `powerperf sweep`. Exit status 0 when every run finished (even when some commands
/// failed: they are listed and left out of the set), 128 + signal when interrupted.
///
/// # Errors
/// See [`powerperf_core::dvfs::sweep::sweep`].
pub fn run(args: SweepArgs) -> Result<i32> {
    args.format
        .check("sweep", &powerperf_core::output::OutputFormat::TABLE_JSON)?;
    powerperf_core::collect::check_interval(args.interval)?;
    let sig = SignalForwarder::install()?;
    // the record and the log are needed only when frequencies are set
    let sets_gpu = !(args.gpu_clock.is_empty()
        && args.gpu_mem_clock.is_empty()
        && args.gpu_power_limit.is_empty());
    let sets = (!args.freq.is_empty() || sets_gpu) && !args.dry_run;
    let restore_file = match args.restore_file {
        Some(p) => p,
        None if sets => apply::default_restore_path(args.state_dir.as_deref())?,
        None => PathBuf::new(),
    };
    let log_file = match args.log {
        Some(p) => p,
        None if sets => apply::default_log_path(args.state_dir.as_deref())?,
        None => PathBuf::new(),
    };
    let cfg = SweepConfig {
        out: args.output.clone(),
        freqs: args.freq,
        threads: args.threads,
        repeat: args.repeat,
        sysfs_root: args.sysfs_root,
        dry_run: args.dry_run,
        restore_file,
        log_file,
        command: args.command,
        workload: args.workload,
        events: args.events,
        interval: args.interval,
        gpu_clocks: args.gpu_clock,
        gpu_mem_clocks: args.gpu_mem_clock,
        gpu_power_limits: args.gpu_power_limit,
        gpu: args.gpu,
        fake_gpu: args.fake_gpu,
        warmup: args.warmup,
        daemon: args.daemon,
    };
    let out = sweep::sweep(&cfg, &sig)?;
    if cfg.dry_run {
        return Ok(0);
    }
    if args.format == powerperf_core::output::OutputFormat::Json {
        let o = powerperf_core::output::commands::SweepOutput {
            set: cfg.out.clone(),
            ran: out.ran,
            skipped: out.skipped,
            points: out.points,
            failed: out
                .failed
                .iter()
                .map(|(d, st)| powerperf_core::output::commands::SweepFailure {
                    run: d.clone(),
                    status: *st,
                })
                .collect(),
            notes: out.notes.clone(),
            interrupted: out.interrupted.is_some(),
            exit_status: out.interrupted.unwrap_or(0),
        };
        // One line, keys in alphabetical order (as when it was a serde_json::Value).
        eprintln!("{}", serde_json::to_string(&serde_json::to_value(&o)?)?);
        return Ok(out.interrupted.unwrap_or(0));
    }
    eprintln!(
        "powerperf sweep: {} runs done, {} skipped (finished earlier); {} points in {}",
        out.ran,
        out.skipped,
        out.points,
        cfg.out.display()
    );
    for (d, st) in &out.failed {
        eprintln!(
            "powerperf sweep: {} ended with status {st}; left out of the set",
            d.display()
        );
    }
    for n in &out.notes {
        eprintln!("powerperf sweep: {n}");
    }
    if let Some(code) = out.interrupted {
        eprintln!("powerperf sweep: interrupted; original settings restored; run the same command again to resume");
        return Ok(code);
    }
    Ok(0)
}
