//! The run directory: `RUN/run.toml` (what ran, how it ended, the knobs, every event and its
//! status and total) and `RUN/timeline.parquet` (one row per sample). Column and field names
//! carry their unit (`dur_ns`, `energy_package_0_j`). See `docs/run-format.md`.

use anyhow::{Context, Result};
use powerperf_node::event_spec::EventStatus;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// File name of the run metadata inside a run directory.
pub const RUN_TOML: &str = "run.toml";

/// What `collect` writes into a run directory besides `run.toml` (files and folders). A
/// run collected into the directory of an earlier one removes these first, so the earlier
/// run's region events, GPU recordings or tables never mix into the new one (as `perf
/// record` replaces perf.data).
pub const RUN_OUTPUTS: [&str; 11] = [
    crate::timeline::TIMELINE,
    crate::timeline::JOURNAL,
    crate::regions::REGIONS,
    crate::regions::REGION_EVENTS,
    crate::gpu_activity::RECORDINGS,
    crate::gpu_activity::ACTIVITY_FILE,
    crate::gpu_activity::API_FILE,
    crate::gpu_pcsamp::SAMPLES_FILE,
    crate::gpu_pcsamp::SUMMARY_FILE,
    CUBINS,
    crate::pc_samples::PC_SAMPLES,
];

/// Folder of the GPU modules' cubins (`<crc>.cubin`, `collect --pc-sampling gpu`) inside a
/// run directory.
pub const CUBINS: &str = "cubins";

/// How the measured command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Ending {
    /// The command exited by itself; `exit_status` says with what.
    Exited,
    /// The command was killed by a signal; `signal` says which.
    Signaled,
    /// The command could not be started (`error` says why).
    NotStarted,
    /// powerperf stopped before the command ended (e.g. powerperf was interrupted).
    Unknown,
    /// The run is going on: run.toml as written when it started. A run.toml still saying
    /// so after the run is a powerperf that was killed; [`RunMeta::read`] then rebuilds the
    /// totals from the journal (docs/run-format.md).
    Running,
}

/// `run.node_sources` of a run that sampled the node-wide sources (RAPL, NVML) itself.
pub const NODE_SOURCES_SAMPLED: &str = "sampled";
/// `run.node_sources` of a rank that left the node-wide sources to local rank 0 of its node.
pub const NODE_SOURCES_LEFT: &str = "local_rank_0";

/// `run.node_sources` for a run of node-local rank `local_rank` (`None`: no launcher):
/// only local rank 0 samples the node-wide sources, once per node.
pub fn node_sources_for(local_rank: Option<u32>) -> &'static str {
    match local_rank {
        Some(l) if l > 0 => NODE_SOURCES_LEFT,
        _ => NODE_SOURCES_SAMPLED,
    }
}

/// `[run]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunInfo {
    pub id: String,
    pub command: Vec<String>,
    /// A label for the workload (`--workload`, else the command's base name).
    pub workload: Option<String>,
    pub ended: Ending,
    pub exit_status: Option<i32>,
    pub signal: Option<i32>,
    pub signal_name: Option<String>,
    #[serde(default)]
    pub core_dumped: bool,
    /// Error text when the command could not be started.
    pub error: Option<String>,
    pub start_unix_ns: u64,
    /// CLOCK_MONOTONIC at start, ns: the origin of the timeline's `t_ns`.
    pub start_monotonic_ns: u64,
    pub duration_ns: u64,
    pub host: String,
    pub cpu_model: String,
    pub cpu_vendor: Option<String>,
    pub cpu_family: Option<u32>,
    pub cpu_model_number: Option<u32>,
    pub kernel: String,
    pub tool_version: String,
    pub rank: Option<u32>,
    /// The node-local rank under an MPI launcher (`OMPI_COMM_WORLD_LOCAL_RANK`,
    /// `SLURM_LOCALID`, `MPI_LOCALRANKID`, `PMI_LOCAL_RANK`); absent without one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_rank: Option<u32>,
    /// Who sampled the node-wide sources (RAPL, NVML) for this run's node:
    /// [`NODE_SOURCES_SAMPLED`] (this run: no launcher, or local rank 0) or
    /// [`NODE_SOURCES_LEFT`] (left to local rank 0 of the node, whose shard holds them).
    /// Absent in runs of older versions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_sources: Option<String>,
    pub interval_ns: u64,
    pub samples: u64,
    /// True when the run could not be written completely (e.g. a full disk).
    #[serde(default)]
    pub truncated: bool,
    /// CPU time powerperf itself used during the run (user + system, getrusage
    /// RUSAGE_SELF: the sampler, signal and writer threads), ns.
    #[serde(default)]
    pub self_cpu_ns: Option<u64>,
    /// Who read the counters for the timeline: `kernel` (leader samples) or `thread`
    /// (`collect --sampler`, docs/overhead.md).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timeline_sampler: Option<String>,
}

/// `[knobs]`: the settings the run was made under, where readable.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct Knobs {
    /// Current core frequency of CPU 0 from cpufreq, MHz.
    pub core_freq_mhz: Option<f64>,
    pub core_freq_min_mhz: Option<f64>,
    pub core_freq_max_mhz: Option<f64>,
    pub governor: Option<String>,
    pub scaling_driver: Option<String>,
    pub mem_freq_mhz: Option<f64>,
    pub gpu_sm_clock_mhz: Option<f64>,
    /// From OMP_NUM_THREADS.
    pub threads: Option<u32>,
    /// Why the CPU frequency knobs are absent, when they are.
    pub cpufreq_note: Option<String>,
    /// Mean of `scaling_cur_freq` over the online CPUs at the start, MHz.
    pub effective_freq_mhz: Option<f64>,
    /// Turbo/boost enabled (`intel_pstate/no_turbo` inverted, or `cpufreq/boost`).
    pub turbo: Option<bool>,
    /// `energy_performance_preference` of CPU 0 (intel_pstate / amd-pstate).
    pub energy_performance_preference: Option<String>,
    /// RAPL power limits by zone and constraint (`package-0.long_term`), watts.
    #[serde(default)]
    pub rapl_power_limits_w: std::collections::BTreeMap<String, f64>,
    /// The GPU power limit the run was made under, W (`powerperf sweep --gpu-power-limit`;
    /// the knob `power_limit_w`, device gpu).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power_limit_w: Option<f64>,
}

/// `[gpu_setting]`: the GPU setting a run of `powerperf sweep --gpu-clock/--gpu-mem-clock/
/// --gpu-power-limit` was made under: what was requested, and what the GPU's samples
/// (`gpu<N>_*` timeline columns, or an AMD or Intel GPU's `<stem>_*`: `observed_from`) show
/// over the run.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GpuRunSetting {
    /// The GPU index (the node's: NVML's GPUs, then the AMD and Intel GPUs of sysfs).
    pub gpu: u32,
    /// The locked SM clock requested, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_sm_clock_mhz: Option<f64>,
    /// The locked memory clock requested, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_mem_clock_mhz: Option<f64>,
    /// The power limit requested, W.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub requested_power_limit_w: Option<f64>,
    /// Mean SM clock over the run's samples, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_sm_clock_mhz: Option<f64>,
    /// Mean memory clock over the run's samples, MHz.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_mem_clock_mhz: Option<f64>,
    /// Mean power over the run's samples, W.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_power_w: Option<f64>,
    /// The clock throttle reasons seen in any sample (bitwise OR of NVML's
    /// `nvmlClocksEventReasons` masks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub throttle_reasons: Option<u64>,
    /// The number of samples the means are over.
    pub samples: u64,
    /// The timeline column stem the observed values are the means of: `gpu<N>` for an
    /// NVML (or fake) GPU (`gpu<N>_sm_clock_mhz`, …), the power device's stem for an AMD or
    /// Intel GPU of the sysfs tree (`amdgpu0`, `xe0_card`, `i915_0`: `<stem>_clock_mhz`,
    /// `<stem>_power_w`). Absent in runs made before it was recorded, and where the GPU has
    /// no device collect records.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_from: Option<String>,
    /// Why the point is not at the setting requested (an observed clock more than 2 % off
    /// the requested one, or no observed clock at all); absent when it is.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flag: Option<String>,
}

/// Backend an event came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Backend {
    PerfEvent,
    Papi,
    Rapl,
    Nvml,
    Cupti,
    /// Values read from a dataset by `import --as-runs`, not measured by powerperf.
    Import,
    /// Power and energy read from sysfs by `powerperf_node::devices` (amdgpu, xe, i915, ACPI
    /// power meters and other hwmon sensors); `[[power_devices]]` says how.
    Sysfs,
}

/// `[[events]]`: one requested event and what became of it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EventRecord {
    /// The name the user asked for (`cycles`, `task-clock`, `energy-package-0`).
    pub name: String,
    pub backend: Backend,
    pub status: EventStatus,
    /// Why the event has no value, when it has none.
    pub reason: Option<String>,
    /// The timeline column holding its per-sample deltas.
    pub column: Option<String>,
    /// Total over the run, already scaled (and in `unit`).
    pub total: Option<f64>,
    pub unit: Option<String>,
    pub scale: Option<f64>,
    /// time_running / time_enabled over the run (1 when never multiplexed).
    pub running_ratio: Option<f64>,
}

/// `run.toml` as a whole.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunMeta {
    pub run: RunInfo,
    pub knobs: Knobs,
    #[serde(default)]
    pub events: Vec<EventRecord>,
    /// Notes for the user (fallbacks taken, sources unavailable and why).
    #[serde(default)]
    pub notes: Vec<String>,
    /// Per-thread totals (`collect -p PID --per-thread`, as `perf stat --per-thread`).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<ThreadCounts>,
    /// `[pc_sampling]`: how PC samples were taken (`collect --pc-sampling cpu`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pc_sampling: Option<PcSampling>,
    /// `[gpu_attribution]`: how GPU activities were attributed to regions (`collect --gpu`
    /// with regions or NVTX ranges); absent in runs without GPU activity and in older runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_attribution: Option<GpuAttribution>,
    /// `[gpu_setting]`: the GPU setting of a sweep's run, requested and observed; absent
    /// in other runs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gpu_setting: Option<GpuRunSetting>,
    /// `[[power_devices]]`: the sysfs power devices sampled into the timeline (issue 43);
    /// absent in runs without any and in older runs.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub power_devices: Vec<PowerDeviceRecord>,
}

/// `[[power_devices]]`: one power device of the timeline (`<stem>_power_w`,
/// `<stem>_energy_j`; docs/run-format.md): where it is read and how.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PowerDeviceRecord {
    /// The column stem (`amdgpu0`, `power_meter0_module`).
    pub stem: String,
    /// `amdgpu`, `xe`, `i915` or `hwmon`.
    pub origin: String,
    /// What it measures (the hwmon label, `power1_oem_info`, the card).
    pub label: String,
    /// The file it is read from.
    pub source: String,
    /// `measured` (read from the device) or `energy_rate` (Δenergy/Δt of its counter).
    pub power_from: String,
    /// `counter` (its energy counter) or `power_integral` (trapezoid rule over the sampled
    /// power).
    pub energy_from: String,
    /// Energy over the run, J; absent where no sample gave one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy_j: Option<f64>,
    /// `energy_j` / the run's duration, W.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mean_power_w: Option<f64>,
    /// The mean of the `<stem>_power_w` samples, W (each sample weighs the same).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sampled_power_w: Option<f64>,
    /// Reads that failed or gave a value that is not finite and non-negative (empty cells).
    #[serde(default)]
    pub failed_reads: u64,
}

/// `[gpu_attribution]`: the rules that gave each GPU activity of `gpu_activity.parquet` its
/// region, and how many activities (and kernels) each attributed (docs/gpu.md, "Attribution
/// to regions"; the per-activity rule is the `region_rule` column).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
pub struct GpuAttribution {
    /// The rules in the order they are tried: `thread,process,process_latest`.
    pub rules: String,
    /// Every activity (kernels, copies, memsets, synchronisations, allocations, frees).
    pub activities: RuleCounts,
    /// Kernels only.
    pub kernels: RuleCounts,
}

/// How many activities each attribution rule gave a region, and how many got none.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct RuleCounts {
    /// The region open on the launching thread.
    pub thread: u64,
    /// Launching thread without a region; the only other thread of the process with one.
    pub process: u64,
    /// Launching thread without a region; several other threads with one: the latest begun.
    pub process_latest: u64,
    /// Launched while no thread of the process had a region open: `(no region)`.
    pub no_region: u64,
    /// No recorded launching API call (work the driver started itself, or calls not
    /// recorded): `(no region)`.
    pub no_launch: u64,
}

/// One thread's event totals (`[[threads]]` in run.toml).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ThreadCounts {
    /// Thread id (the kernel's tid).
    pub tid: i32,
    /// `/proc/PID/task/TID/comm` when the counters were opened.
    pub comm: String,
    /// Event name -> total over the run, scaled for multiplexing, in the event's unit
    /// (ns for task-clock). An event without a value for this thread is absent.
    pub counts: BTreeMap<String, f64>,
}

/// `[pc_sampling]`: the sampling behind `RUN/pc_samples.parquet`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PcSampling {
    /// `cpu` (later `gpu<i>`).
    pub device: String,
    pub backend: Backend,
    /// The sampled event: `cycles`, or `cpu-clock` where the machine has no hardware
    /// counters (as perf record falls back).
    pub event: String,
    /// `counted` when samples were taken; `not_supported` / `permission_denied` with
    /// `reason` otherwise.
    pub status: EventStatus,
    pub reason: Option<String>,
    /// Requested frequency (perf's `-F`), Hz; the kernel adapts the period to it.
    pub frequency_hz: u64,
    /// Unit of the `period` column: `ns` (cpu-clock) or `cycles`.
    pub period_unit: Option<String>,
    /// Kernel samples were excluded after a permission error.
    #[serde(default)]
    pub user_only: bool,
    /// Samples read from the ring buffers.
    #[serde(default)]
    pub samples: u64,
    /// Records the kernel dropped because a ring buffer was full (`PERF_RECORD_LOST`).
    #[serde(default)]
    pub lost: u64,
    /// Times the kernel throttled the sampling rate (`PERF_RECORD_THROTTLE`).
    #[serde(default)]
    pub throttled: u64,
    /// Samples that could not be symbolised (function `[unknown]`).
    #[serde(default)]
    pub unknown_samples: u64,
    /// Rows of `pc_samples.parquet`.
    #[serde(default)]
    pub rows: u64,
}

/// The largest run.toml read (one written by `powerperf collect` is a few KiB to a few
/// hundred KiB: one table per event, the notes).
pub const MAX_RUN_TOML_BYTES: u64 = 16 << 20;

impl RunMeta {
    /// Read `DIR/run.toml` (at most [`MAX_RUN_TOML_BYTES`], through
    /// [`powerperf_node::safe_file::read_to_string_bounded`]).
    ///
    /// # Errors
    /// A missing directory or file, or TOML that is not a run.
    pub fn read(dir: &Path) -> Result<Self> {
        let path = dir.join(RUN_TOML);
        // a file a user may have written: no link followed, no FIFO waited on, at most
        // MAX_RUN_TOML_BYTES read (issue 38)
        let text =
            powerperf_node::safe_file::read_to_string_bounded(&path, MAX_RUN_TOML_BYTES, RUN_TOML)
                .with_context(|| {
                    format!(
                        "cannot read {} (is {} a run directory written by `powerperf collect`?)",
                        path.display(),
                        dir.display()
                    )
                })?;
        let mut meta = Self::from_toml(&text)
            .with_context(|| format!("{} is not a valid run.toml", path.display()))?;
        meta.rebuild_from_journal(dir);
        Ok(meta)
    }

    /// Parse the text of a `run.toml` (what [`RunMeta::read`] does after reading the file,
    /// before rebuilding the totals of an unfinished run from its journal).
    ///
    /// # Errors
    /// TOML that is not a run (the toml crate's error, with line and column).
    pub fn from_toml(text: &str) -> Result<Self, toml::de::Error> {
        toml::from_str(text)
    }

    /// A run.toml that is incomplete (`ended` is `running` or `unknown` and no samples are
    /// counted: powerperf was killed, or is still running) gets its totals, sample count and
    /// duration from `timeline.journal.csv`, with a note. Events the journal has a column for
    /// but run.toml does not list are added (named after the column). Does nothing without a
    /// journal, or when it cannot be read.
    pub fn rebuild_from_journal(&mut self, dir: &Path) {
        if !matches!(self.run.ended, Ending::Running | Ending::Unknown) || self.run.samples > 0 {
            return;
        }
        let path = dir.join(crate::timeline::JOURNAL);
        if std::fs::symlink_metadata(&path).is_err() {
            return;
        }
        let Ok((t, dropped)) = crate::timeline::read_journal(&path) else {
            return;
        };
        for (col, vals) in &t.columns {
            let present: Vec<f64> = vals.iter().flatten().copied().collect();
            let total = (!present.is_empty()).then(|| present.iter().sum::<f64>());
            match self
                .events
                .iter_mut()
                .find(|e| e.column.as_deref() == Some(col.as_str()))
            {
                Some(e) => {
                    if e.total.is_none() && e.status.has_value() {
                        e.total = total;
                    }
                }
                None => {
                    let (name, backend, unit) = if let Some(d) = col
                        .strip_prefix("energy_")
                        .and_then(|c| c.strip_suffix("_j"))
                    {
                        (
                            format!("energy-{}", d.replace('_', "-")),
                            Backend::Rapl,
                            Some("J".to_string()),
                        )
                    } else if col.starts_with("gpu") {
                        (col.clone(), Backend::Nvml, None)
                    } else {
                        let unit = matches!(col.as_str(), "task-clock" | "cpu-clock")
                            .then(|| "ns".to_string());
                        (col.clone(), Backend::PerfEvent, unit)
                    };
                    self.events.push(EventRecord {
                        name,
                        backend,
                        status: if total.is_some() {
                            EventStatus::Counted
                        } else {
                            EventStatus::NotCounted
                        },
                        reason: total
                            .is_none()
                            .then(|| "no value in timeline.journal.csv".to_string()),
                        column: Some(col.clone()),
                        total,
                        unit,
                        scale: None,
                        running_ratio: None,
                    });
                }
            }
        }
        self.run.samples = t.t_ns.len() as u64;
        self.run.duration_ns = t.t_ns.iter().copied().max().unwrap_or(0);
        self.notes.push(format!(
            "run.toml is incomplete (ended = \"{}\": powerperf was killed before the run ended, or it is still running): totals, samples and duration were rebuilt from {} ({} rows{}, up to the last flush, every 100 ms)",
            match self.run.ended {
                Ending::Running => "running",
                _ => "unknown",
            },
            crate::timeline::JOURNAL,
            t.t_ns.len(),
            if dropped > 0 {
                format!(", {dropped} cut short and dropped")
            } else {
                String::new()
            }
        ));
    }

    /// Write `DIR/run.toml` atomically: a new temporary file of an unpredictable name,
    /// created with O_EXCL|O_NOFOLLOW, then renamed ([`powerperf_node::safe_file::write_atomic`]), so
    /// a link planted in the directory is never followed.
    ///
    /// # Errors
    /// I/O errors, with the path.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let text = toml::to_string_pretty(self).context("serialising run.toml")?;
        powerperf_node::safe_file::write_atomic(dir, RUN_TOML, text.as_bytes())
            .with_context(|| format!("cannot write {}", dir.join(RUN_TOML).display()))
    }

    /// Duration of the run in seconds.
    pub fn duration_s(&self) -> f64 {
        self.run.duration_ns as f64 * 1e-9
    }

    /// Totals of the events that have a value, by event name and by column name.
    pub fn totals(&self) -> RunTotals {
        let mut values = BTreeMap::new();
        let mut missing = BTreeMap::new();
        for e in &self.events {
            match (e.status.has_value(), e.total) {
                (true, Some(v)) => {
                    values.insert(e.name.clone(), v);
                    if let Some(c) = &e.column {
                        values.insert(c.clone(), v);
                    }
                }
                _ => {
                    let why = e
                        .reason
                        .clone()
                        .unwrap_or_else(|| e.status.perf_marker().to_string());
                    missing.insert(e.name.clone(), why);
                }
            }
        }
        RunTotals {
            values,
            missing,
            duration_s: self.duration_s(),
        }
    }

    /// The exit status a shell would report for this run: the exit code, or 128 + signal.
    pub fn shell_status(&self) -> i32 {
        match self.run.ended {
            Ending::Exited => self.run.exit_status.unwrap_or(0),
            // Saturating: run.toml is input, its signal number any i32 (an overflow panic
            // in debug builds otherwise).
            Ending::Signaled => 128i32.saturating_add(self.run.signal.unwrap_or(0)),
            Ending::NotStarted => 127,
            Ending::Unknown | Ending::Running => 1,
        }
    }
}

/// Event totals of a run, for derived events and reports.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct RunTotals {
    /// Value by event name and by timeline column name (counts, or joules for energy).
    pub values: BTreeMap<String, f64>,
    /// Events without a value, with the reason.
    pub missing: BTreeMap<String, String>,
    /// Wall-clock duration of the run, seconds.
    pub duration_s: f64,
}

/// What the event DSL's LCPI table reads of a run (`lcpi::table_for_totals`).
impl powerperf_events::lcpi::Totals for RunTotals {
    fn values(&self) -> &BTreeMap<String, f64> {
        &self.values
    }
    fn missing(&self) -> &BTreeMap<String, String> {
        &self.missing
    }
    fn duration_s(&self) -> f64 {
        self.duration_s
    }
}

/// Read the totals of the run in `dir` (its `run.toml`).
///
/// # Errors
/// As [`RunMeta::read`].
pub fn load_totals(dir: &Path) -> Result<RunTotals> {
    Ok(RunMeta::read(dir)?.totals())
}
