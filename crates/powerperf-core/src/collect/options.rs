//! What `powerperf collect` is asked to do: the configuration and its choices (modes,
//! samplers, backends), with the checks on them that need no system.

use std::path::PathBuf;
use std::time::Duration;

/// What to measure, as perf stat's modes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Mode {
    /// The command (and everything it starts).
    #[default]
    Command,
    /// A running process and its threads (`-p PID`), until it exits, the optional command
    /// ends, or powerperf is interrupted.
    Attach(i32),
    /// Every task on these CPUs (`-a`: all online CPUs; `-C LIST`).
    SystemWide(Vec<usize>),
}

/// Whether to sample NVIDIA GPUs through NVML (`collect --nvml`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum NvmlMode {
    /// Sample every GPU NVML sees; without NVML, a note in the run.
    #[default]
    Auto,
    /// Sample, and record NVML as not supported (with the reason) where it is missing.
    On,
    /// Do not load NVML.
    Off,
}

/// Who reads the counters for the timeline (`--sampler`, docs/overhead.md).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum TimelineSampler {
    /// `kernel` for a command whose only timeline sources are perf_event counters; `thread`
    /// otherwise (RAPL, NVML and PAPI are read by a thread).
    #[default]
    Auto,
    /// Leader sampling, perf's `{cpu-clock,…}:S`: the kernel reads each counter group
    /// every interval of the command's CPU time and powerperf drains the buffers 4 times a
    /// second (a command only; Linux 6.12 or later; falls back to `thread` with a note).
    Kernel,
    /// A powerperf thread wakes every interval and reads every source.
    Thread,
}

/// Which library counts the CPU events of `-e` (`collect --backend`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum CounterBackend {
    /// perf_event_open(2) directly, with perf stat's event names (`cycles`, `pmu/event/`).
    #[default]
    #[cfg_attr(feature = "clap", value(name = "perf", alias = "perf_event"))]
    Perf,
    /// PAPI (feature `papi`): preset (`PAPI_TOT_INS`) and native (`perf::TASK-CLOCK`) names.
    Papi,
}

/// The error for `--backend papi` in a powerperf built without the `papi` feature.
pub fn papi_not_built() -> anyhow::Error {
    anyhow::anyhow!(
        "this powerperf was built without PAPI: rebuild it with `cargo build --release --features papi` (the build needs the Debian/Ubuntu packages libpapi-dev, libclang-dev and pkg-config: `apt-get install libpapi-dev libclang-dev pkg-config`; papi-tools adds papi_avail and papi_native_avail), or use `--backend perf`"
    )
}

/// The shortest sampling interval (`collect --interval`), as `perf stat -I` allows: 1 ms.
/// Below it the sampler thread cannot keep its deadlines (one sample costs 30-100 µs of
/// CPU here, docs/overhead.md), and the timeline grows by a row per interval: at 1 ns a
/// 49 ms command took 32 s, 4.9 GB and 48 million rows (issue 18). 0 (totals only) stays
/// allowed.
pub const MIN_INTERVAL: Duration = Duration::from_millis(1);

/// Refuse a sampling interval below [`MIN_INTERVAL`] (0 is allowed: totals only).
///
/// # Errors
/// The interval, the minimum and the fix.
pub fn check_interval(interval: Duration) -> anyhow::Result<()> {
    if !interval.is_zero() && interval < MIN_INTERVAL {
        anyhow::bail!(
            "--interval {} is below the minimum of 1ms (as perf stat -I): each sample costs powerperf 30-100 µs of CPU and a timeline row; use --interval 1ms or more, or --interval 0 for totals only",
            humantime::format_duration(interval)
        );
    }
    Ok(())
}

/// What `powerperf collect` does, as a plain struct.
#[derive(Debug, Clone)]
pub struct CollectConfig {
    pub mode: Mode,
    /// Comma-separated `-e` list; `None` for perf stat's defaults (PAPI's names of them with
    /// the PAPI backend, `papi::DEFAULT_EVENTS`).
    pub events: Option<String>,
    /// Which library counts the events of `events`.
    pub backend: CounterBackend,
    pub interval: Duration,
    /// Filesystem root for sysfs reads (`/` in production).
    pub sysfs_root: PathBuf,
    /// The run directory to write.
    pub out: PathBuf,
    pub command: Vec<String>,
    /// Workload label stored in run.toml (default: the command's base name).
    pub workload: Option<String>,
    /// Extra environment for the command (e.g. OMP_NUM_THREADS for sweeps).
    pub env: Vec<(String, String)>,
    /// NVML GPU sampling.
    pub nvml: NvmlMode,
    /// NVML GPM performance metrics (`collect --gpm`), sampled with NVML: `auto` where the
    /// GPU offers them, `on` also records them as not supported (with the reason) where it
    /// does not, `off` takes no GPM sample.
    pub gpm: NvmlMode,
    /// Read the fake GPUs of this directory (`--fake-gpu DIR`, [`powerperf_node::fake_gpu::FileGpus`])
    /// in place of NVML: their `power_w`, `energy_mj` and clocks become the run's GPU
    /// columns.
    pub fake_gpu: Option<PathBuf>,
    /// Turn NVTX ranges into regions through NVTX injection (`NVTX_INJECTION64_PATH`).
    pub nvtx: bool,
    /// CUDA activity through CUPTI: start the command with `CUDA_INJECTION64_PATH` naming
    /// `libpowerperf_rt_cuda.so` (docs/gpu.md).
    pub gpu: bool,
    /// Keep each thread's totals apart (`-p PID` only, as `perf stat --per-thread`):
    /// `[[threads]]` in run.toml.
    pub per_thread: bool,
    /// PC sampling targets (`--pc-sampling`); `Gpu` implies `gpu`.
    pub pc_sampling: Vec<PcTarget>,
    /// GPU PC sampling period exponent (one sample per SM every 2^N cycles, 5..=31);
    /// `None`: CUPTI's default.
    pub gpu_pc_period: Option<u32>,
    /// GPU PC sampling in CUPTI's kernel-serialised mode (each PC record carries its launch,
    /// so samples get the launching region; kernels no longer overlap).
    pub gpu_pc_serialized: bool,
    /// CPU PC sampling (`--pc-sampling cpu`) at this frequency, Hz: `RUN/pc_samples.parquet`
    /// (command mode only).
    pub cpu_pc_sampling_hz: Option<u64>,
    /// Who reads the counters for the timeline.
    pub sampler: TimelineSampler,
    /// Replace files named like run outputs (`timeline.parquet`, `region_events/`, …) also
    /// in a directory that holds no `run.toml` (`collect --force`); without it such a
    /// directory is refused, never emptied.
    pub force: bool,
}

/// What `--pc-sampling` samples.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum PcTarget {
    /// CPU PCs of the command, perf record's way (docs/pc-sampling.md).
    Cpu,
    /// GPU PCs with stall reasons through CUPTI's PC Sampling API (docs/gpu.md).
    Gpu,
}
