//! `powerperf collect`.

use powerperf_core::collect::{CollectConfig, Mode};
use std::path::PathBuf;

/// Arguments of `powerperf collect`.
#[derive(Debug, clap::Args)]
#[command(
    after_help = "Examples:\n  powerperf collect -o run1 -- tar czf /tmp/src.tgz src\n  powerperf collect -e task-clock,page-faults,cycles --interval 100ms -o run2 -- ./a.out\n  powerperf collect --pc-sampling cpu -o run4 -- ./a.out   # then: powerperf report run4\n  powerperf collect --backend papi -e PAPI_TOT_INS,perf::TASK-CLOCK -o run3 -- ./a.out   (built with --features papi)\n\nThe run directory holds run.toml and timeline.parquet (docs/run-format.md).\npowerperf exits with the command's status (128 + signal number when it was killed)."
)]
pub struct CollectArgs {
    /// Events to count, comma-separated, as `perf stat -e` takes them (default: perf stat's);
    /// `{a,b}` is a group, scheduled on the PMU together and read with one read.
    /// with `--backend papi`, PAPI names: presets (`PAPI_TOT_INS`) and native events
    /// (`perf::TASK-CLOCK`), as papi_avail and papi_native_avail list them.
    #[arg(short = 'e', long = "events")]
    pub events: Option<String>,
    /// Library that counts the events: perf (perf_event_open, default) or papi (PAPI's
    /// presets and native events; needs a powerperf built with `--features papi`,
    /// docs/papi.md).
    #[arg(long, default_value = "perf")]
    pub backend: powerperf_core::collect::CounterBackend,
    /// Sampling interval of the timeline (e.g. 10ms, 1s; 0 for totals only). The minimum is
    /// 1ms, as perf stat -I's: shorter intervals are refused.
    #[arg(long, default_value = "10ms", value_parser = humantime::parse_duration)]
    pub interval: std::time::Duration,
    /// Who reads the counters for the timeline: `kernel` (leader sampling, perf's
    /// `{cpu-clock,…}:S`: the kernel reads each group in the command's context every
    /// interval of its CPU time, powerperf drains the buffers 4 times a second), `thread`
    /// (a powerperf thread reads every source every interval), or `auto` (kernel where the
    /// command's only timeline sources are perf_event counters). docs/overhead.md.
    #[arg(long, default_value = "auto")]
    pub sampler: powerperf_core::collect::TimelineSampler,
    /// Filesystem root for sysfs reads (a fixture tree in tests).
    #[arg(long, default_value = "/")]
    pub sysfs_root: PathBuf,
    /// The socket of powerperfd, the node service (docs/cluster.md), that reads RAPL for a
    /// user when energy_uj is root-only (default: $POWERPERF_DAEMON, else
    /// /run/powerperf/powerperfd.sock when it exists). Used only when direct reads are denied.
    #[arg(long, value_name = "PATH")]
    pub daemon: Option<PathBuf>,
    /// Run directory to write; `%r` becomes the MPI rank and `%h` the host name, so each
    /// rank under srun/mpirun writes its own shard.
    #[arg(short = 'o', long = "output")]
    pub output: String,
    /// Attach to a running process (all its threads) instead of starting a command.
    #[arg(short = 'p', long = "pid", conflicts_with_all = ["all_cpus", "cpus"])]
    pub pid: Option<i32>,
    /// System-wide: count every task on all online CPUs.
    #[arg(short = 'a', long = "all-cpus")]
    pub all_cpus: bool,
    /// System-wide on these CPUs only (e.g. 0-3,8).
    #[arg(short = 'C', long = "cpu", value_name = "LIST")]
    pub cpus: Option<String>,
    /// Workload label stored in run.toml (default: the command's base name).
    #[arg(long)]
    pub workload: Option<String>,
    /// With -p PID: keep each thread's totals apart, as `perf stat --per-thread`
    /// (`[[threads]]` in run.toml, one line per thread and event in the report).
    #[arg(long, requires = "pid")]
    pub per_thread: bool,
    /// Counters powerperf-rt reads at every region begin and end, comma-separated perf
    /// generic events (e.g. `instructions,cycles,page-faults`): exact per-region counts,
    /// `rt_<event>` in regions.parquet (sets POWERPERF_RT_COUNTERS for the command).
    #[arg(long, value_name = "EVENTS")]
    pub region_counters: Option<String>,
    /// NVIDIA GPU sampling through NVML (power, energy counter, clocks, utilisation,
    /// temperature, throttle reasons per interval): auto samples where NVML is present,
    /// on also records NVML as not supported where it is missing.
    #[arg(long, default_value = "auto")]
    pub nvml: powerperf_core::collect::NvmlMode,
    /// GPU performance metrics through NVML's GPM API (Hopper and newer), sampled every
    /// interval with NVML: `gpu<i>_sm_active`, `_dram_active`, `_fp64_active`, … named after
    /// DCGM's profiling fields (fractions 0..1; PCIe and NVLink traffic in bytes/s;
    /// docs/run-format.md). auto samples where the GPU offers GPM, on also records each metric
    /// as not supported (with the reason) where it does not, off takes no GPM sample.
    /// GPM streaming is never switched on or off.
    #[arg(long, default_value = "auto")]
    pub gpm: powerperf_core::collect::NvmlMode,
    /// Read the fake GPUs under DIR (the files of `powerperfd --fake-gpu`,
    /// tests/fixtures/fake-gpu) in place of NVML: their power_w, energy_mj and clocks (the
    /// locked clock, else the highest supported one) become the run's gpuN_* columns. For
    /// tests and demonstrations; needs neither root nor a GPU.
    #[arg(long, value_name = "DIR")]
    pub fake_gpu: Option<PathBuf>,
    /// Do not turn NVTX ranges (nvtxRangePush/Pop, torch.cuda.nvtx.range_push/pop) into
    /// regions (by default collect sets NVTX_INJECTION64_PATH to libpowerperf_rt.so).
    #[arg(long)]
    pub no_nvtx: bool,
    /// CUDA activity through CUPTI, with no change to the program: kernels, copies, memsets,
    /// synchronisations and allocations with HPCToolkit's metrics, attributed to regions,
    /// and host idle (sets CUDA_INJECTION64_PATH to libpowerperf_rt_cuda.so; docs/gpu.md).
    #[arg(long)]
    pub gpu: bool,
    /// PC sampling, a comma-separated list: `cpu` samples the command's instruction pointer
    /// (perf record's way: hardware cycles, else cpu-clock) into pc_samples.parquet, per
    /// function, source line and region (docs/pc-sampling.md); `gpu` samples GPU PCs with their stall reasons
    /// through CUPTI's PC Sampling API (implies --gpu; gpu_pc_samples.parquet, HPCToolkit's
    /// GINST:STL_* and GSAMP:* metrics in `report`; docs/gpu.md).
    #[arg(long, value_delimiter = ',', value_name = "LIST")]
    pub pc_sampling: Vec<powerperf_core::collect::PcTarget>,
    /// GPU PC sampling period: one sample per SM every 2^N cycles (5..=31). The default 12
    /// (4096 cycles) is measured: CUPTI's own default on an H100 (2^11) overflowed its
    /// hardware buffer and lost about 80 % of the samples (docs/gpu.md).
    #[arg(long, value_name = "N", default_value_t = 12, value_parser = clap::value_parser!(u32).range(5..=31))]
    pub gpu_pc_period: u32,
    /// GPU PC sampling in CUPTI's kernel-serialised mode: samples get the launching region,
    /// but kernels no longer run concurrently.
    #[arg(long)]
    pub gpu_pc_serialized: bool,
    /// Sampling frequency of --pc-sampling cpu, Hz (perf record's -F).
    #[arg(
        long = "sample-freq",
        value_name = "HZ",
        default_value_t = 999,
        requires = "pc_sampling"
    )]
    pub sample_freq: u64,
    /// Format of the summary printed (to stderr, as perf stat does) after the run.
    #[arg(long, default_value = "table")]
    pub format: powerperf_core::output::OutputFormat,
    /// Replace files named like run outputs (timeline.parquet, regions.parquet,
    /// region_events/, cubins/, …) in an -o directory that is not a powerperf run (has no
    /// run.toml); without it such a directory is refused, never emptied.
    #[arg(long)]
    pub force: bool,
    /// Do not print the summary after the run.
    #[arg(short, long)]
    pub quiet: bool,
    /// The command and its arguments (optional with -p, -a and -C: then the measurement
    /// lasts until the process exits or powerperf is interrupted).
    #[arg(last = true)]
    pub command: Vec<String>,
}

/// Run `powerperf collect`.
///
/// # Errors
/// Bad events, an unwritable run directory, or a failed fork.
#[cfg(target_os = "linux")]
pub fn run(args: CollectArgs) -> anyhow::Result<i32> {
    powerperf_core::collect::check_interval(args.interval)?;
    if let Some(d) = &args.daemon {
        powerperf_node::daemon::client::set_explicit_socket(d.clone());
    }
    if let Some(d) = &args.fake_gpu {
        powerperf_node::gpu_control::FakeGpu::open(d)
            .map_err(|e| anyhow::anyhow!("--fake-gpu {}: {e}", d.display()))?;
    }
    let (host, _) = powerperf_core::collect::sysinfo::host_and_kernel();
    let out = PathBuf::from(powerperf_core::collect::expand_output(
        &args.output,
        powerperf_core::collect::global_rank(),
        &host,
    ));
    let mode = if let Some(pid) = args.pid {
        Mode::Attach(pid)
    } else if let Some(list) = &args.cpus {
        Mode::SystemWide(powerperf_node::pmu::parse_cpu_list(list).map_err(anyhow::Error::msg)?)
    } else if args.all_cpus {
        Mode::SystemWide((0..powerperf_core::collect::sysinfo::available_cpus()).collect())
    } else {
        if args.command.is_empty() {
            anyhow::bail!("no command given: `powerperf collect -o RUN -- CMD ARGS...` (or -p PID, -a, -C LIST)");
        }
        Mode::Command
    };
    let cfg = CollectConfig {
        mode,
        events: args.events,
        backend: args.backend,
        interval: args.interval,
        sysfs_root: args.sysfs_root,
        out: out.clone(),
        command: args.command,
        workload: args.workload,
        env: args
            .region_counters
            .map(|c| vec![(powerperf_rt::counters::ENV_COUNTERS.to_string(), c)])
            .unwrap_or_default(),
        nvml: args.nvml,
        gpm: args.gpm,
        fake_gpu: args.fake_gpu,
        nvtx: !args.no_nvtx,
        gpu: args.gpu,
        per_thread: args.per_thread,
        cpu_pc_sampling_hz: args
            .pc_sampling
            .contains(&powerperf_core::collect::PcTarget::Cpu)
            .then_some(args.sample_freq),
        pc_sampling: args.pc_sampling,
        gpu_pc_period: Some(args.gpu_pc_period),
        gpu_pc_serialized: args.gpu_pc_serialized,
        sampler: args.sampler,
        force: args.force,
    };
    let outcome = powerperf_core::collect::collect_run(&cfg)?;
    if let Some(e) = &outcome.meta.run.error {
        eprintln!("powerperf: {e}");
    }
    if !args.quiet {
        let text = powerperf_core::report::render(&outcome.meta, args.format)?;
        eprint!("{text}");
        if args.format == powerperf_core::output::OutputFormat::Table {
            eprintln!("run directory: {}", out.display());
        }
    }
    Ok(outcome.shell_status)
}

/// Run `powerperf collect` (Linux only).
#[cfg(not(target_os = "linux"))]
pub fn run(_args: CollectArgs) -> anyhow::Result<i32> {
    anyhow::bail!("`powerperf collect` needs Linux perf_event; this platform has none")
}
