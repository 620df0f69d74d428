//! NVIDIA GPU performance counters through NVML's GPM API (GPU Performance Monitoring,
//! Hopper and newer): the DCGM profiling metrics without DCGM, sampled every `--interval`
//! into the timeline as `gpu<i>_<name>` (docs/run-format.md).
//!
//! Each interval takes one sample (`nvmlGpmSampleGet`) and computes the metrics between it and
//! the previous one (`nvmlGpmMetricsGet`); the first sample of a run only sets the origin.
//! GPM streaming is never switched on or off (`nvmlGpmSetStreamingEnabled` is not called):
//! sampling works without it (NVML API reference, "GPM Functions").
//!
//! Columns are named after DCGM's profiling fields (`dcgm_fields.h`, `DCGM_FI_PROF_*`, as
//! `dcgmi dmon` and DCGM's exporters tag them), from the NVML metric of the same definition:
//!
//! | column | DCGM field | NVML GPM metric | unit |
//! |---|---|---|---|
//! | `gr_engine_active` | `DCGM_FI_PROF_GR_ENGINE_ACTIVE` | `NVML_GPM_METRIC_GRAPHICS_UTIL` | fraction |
//! | `sm_active` | `DCGM_FI_PROF_SM_ACTIVE` | `NVML_GPM_METRIC_SM_UTIL` | fraction |
//! | `sm_occupancy` | `DCGM_FI_PROF_SM_OCCUPANCY` | `NVML_GPM_METRIC_SM_OCCUPANCY` | fraction |
//! | `tensor_active` | `DCGM_FI_PROF_PIPE_TENSOR_ACTIVE` | `NVML_GPM_METRIC_ANY_TENSOR_UTIL` | fraction |
//! | `tensor_dfma_active` | `DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE` | `NVML_GPM_METRIC_DFMA_TENSOR_UTIL` | fraction |
//! | `tensor_hmma_active` | `DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE` | `NVML_GPM_METRIC_HMMA_TENSOR_UTIL` | fraction |
//! | `tensor_imma_active` | `DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE` | `NVML_GPM_METRIC_IMMA_TENSOR_UTIL` | fraction |
//! | `dram_active` | `DCGM_FI_PROF_DRAM_ACTIVE` | `NVML_GPM_METRIC_DRAM_BW_UTIL` | fraction |
//! | `fp64_active` | `DCGM_FI_PROF_PIPE_FP64_ACTIVE` | `NVML_GPM_METRIC_FP64_UTIL` | fraction |
//! | `fp32_active` | `DCGM_FI_PROF_PIPE_FP32_ACTIVE` | `NVML_GPM_METRIC_FP32_UTIL` | fraction |
//! | `fp16_active` | `DCGM_FI_PROF_PIPE_FP16_ACTIVE` | `NVML_GPM_METRIC_FP16_UTIL` | fraction |
//! | `integer_active` | `DCGM_FI_PROF_PIPE_INT_ACTIVE` | `NVML_GPM_METRIC_INTEGER_UTIL` | fraction |
//! | `pcie_tx_bytes` | `DCGM_FI_PROF_PCIE_TX_BYTES` | `NVML_GPM_METRIC_PCIE_TX_PER_SEC` | bytes/s |
//! | `pcie_rx_bytes` | `DCGM_FI_PROF_PCIE_RX_BYTES` | `NVML_GPM_METRIC_PCIE_RX_PER_SEC` | bytes/s |
//! | `nvlink_tx_bytes` | `DCGM_FI_PROF_NVLINK_TX_BYTES` | `NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC` | bytes/s |
//! | `nvlink_rx_bytes` | `DCGM_FI_PROF_NVLINK_RX_BYTES` | `NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC` | bytes/s |
//!
//! NVML gives activity in percent (÷ 100 here: DCGM's fractions 0..1) and traffic in MiB/s
//! (nvml.h; × 2^20 here: DCGM's bytes per second; the unit NVML names with each result is
//! checked, and a run whose unit differs says so in its notes).

use powerperf_format::run::{Backend, EventRecord};
use powerperf_node::event_spec::EventStatus;

/// How NVML's value becomes the column's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    /// Percent → fraction 0..1.
    Fraction,
    /// MiB/s → bytes/s.
    BytesPerSec,
}

impl Unit {
    /// The column's unit as run.toml writes it.
    pub fn name(self) -> &'static str {
        match self {
            Unit::Fraction => "fraction",
            Unit::BytesPerSec => "B/s",
        }
    }
}

/// One metric: the column name (DCGM's tag), the DCGM field and the NVML metric.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Metric {
    pub name: &'static str,
    pub dcgm: &'static str,
    pub nvml: &'static str,
    pub unit: Unit,
}

const fn m(name: &'static str, dcgm: &'static str, nvml: &'static str, unit: Unit) -> Metric {
    Metric {
        name,
        dcgm,
        nvml,
        unit,
    }
}

/// The metrics sampled, in column order (the module's table).
pub const METRICS: [Metric; 16] = [
    m(
        "gr_engine_active",
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE",
        "NVML_GPM_METRIC_GRAPHICS_UTIL",
        Unit::Fraction,
    ),
    m(
        "sm_active",
        "DCGM_FI_PROF_SM_ACTIVE",
        "NVML_GPM_METRIC_SM_UTIL",
        Unit::Fraction,
    ),
    m(
        "sm_occupancy",
        "DCGM_FI_PROF_SM_OCCUPANCY",
        "NVML_GPM_METRIC_SM_OCCUPANCY",
        Unit::Fraction,
    ),
    m(
        "tensor_active",
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
        "NVML_GPM_METRIC_ANY_TENSOR_UTIL",
        Unit::Fraction,
    ),
    m(
        "tensor_dfma_active",
        "DCGM_FI_PROF_PIPE_TENSOR_DFMA_ACTIVE",
        "NVML_GPM_METRIC_DFMA_TENSOR_UTIL",
        Unit::Fraction,
    ),
    m(
        "tensor_hmma_active",
        "DCGM_FI_PROF_PIPE_TENSOR_HMMA_ACTIVE",
        "NVML_GPM_METRIC_HMMA_TENSOR_UTIL",
        Unit::Fraction,
    ),
    m(
        "tensor_imma_active",
        "DCGM_FI_PROF_PIPE_TENSOR_IMMA_ACTIVE",
        "NVML_GPM_METRIC_IMMA_TENSOR_UTIL",
        Unit::Fraction,
    ),
    m(
        "dram_active",
        "DCGM_FI_PROF_DRAM_ACTIVE",
        "NVML_GPM_METRIC_DRAM_BW_UTIL",
        Unit::Fraction,
    ),
    m(
        "fp64_active",
        "DCGM_FI_PROF_PIPE_FP64_ACTIVE",
        "NVML_GPM_METRIC_FP64_UTIL",
        Unit::Fraction,
    ),
    m(
        "fp32_active",
        "DCGM_FI_PROF_PIPE_FP32_ACTIVE",
        "NVML_GPM_METRIC_FP32_UTIL",
        Unit::Fraction,
    ),
    m(
        "fp16_active",
        "DCGM_FI_PROF_PIPE_FP16_ACTIVE",
        "NVML_GPM_METRIC_FP16_UTIL",
        Unit::Fraction,
    ),
    m(
        "integer_active",
        "DCGM_FI_PROF_PIPE_INT_ACTIVE",
        "NVML_GPM_METRIC_INTEGER_UTIL",
        Unit::Fraction,
    ),
    m(
        "pcie_tx_bytes",
        "DCGM_FI_PROF_PCIE_TX_BYTES",
        "NVML_GPM_METRIC_PCIE_TX_PER_SEC",
        Unit::BytesPerSec,
    ),
    m(
        "pcie_rx_bytes",
        "DCGM_FI_PROF_PCIE_RX_BYTES",
        "NVML_GPM_METRIC_PCIE_RX_PER_SEC",
        Unit::BytesPerSec,
    ),
    m(
        "nvlink_tx_bytes",
        "DCGM_FI_PROF_NVLINK_TX_BYTES",
        "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC",
        Unit::BytesPerSec,
    ),
    m(
        "nvlink_rx_bytes",
        "DCGM_FI_PROF_NVLINK_RX_BYTES",
        "NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC",
        Unit::BytesPerSec,
    ),
];

/// Whether a timeline column is a GPM metric (`gpu<i>_<metric>`): a rate over its sample,
/// attributed to regions as a time-weighted mean, not split as a count.
pub fn is_gpm_column(column: &str) -> bool {
    column.strip_prefix("gpu").is_some_and(|rest| {
        let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
        digits > 0
            && rest[digits..]
                .strip_prefix('_')
                .is_some_and(|n| METRICS.iter().any(|m| m.name == n))
    })
}

/// NVML's value (percent, MiB/s) as the column's (fraction, bytes/s); `None` for a value that
/// is not finite or negative.
pub fn convert(unit: Unit, nvml_value: f64) -> Option<f64> {
    if !(nvml_value.is_finite() && nvml_value >= 0.0) {
        return None;
    }
    Some(match unit {
        Unit::Fraction => nvml_value / 100.0,
        Unit::BytesPerSec => nvml_value * 1_048_576.0,
    })
}

/// The seam between the sampler and NVML's GPM (tested on a fake).
pub trait GpmSource: Send {
    /// Number of GPUs.
    fn count(&self) -> u32;
    /// Whether GPU `i` offers GPM, and if not why.
    fn support(&self, i: u32) -> Result<(), String>;
    /// Take a sample of GPU `i` and return, per metric of [`METRICS`], the value since the
    /// previous sample in NVML's units (or why there is none); `None` on the first sample.
    fn read(&mut self, i: u32) -> Option<Vec<Result<f64, String>>>;
    /// Notes on the units NVML named (one per metric whose unit was not the expected one).
    fn notes(&self) -> Vec<String> {
        Vec::new()
    }
}

/// The shortest span GPM metrics are computed over. Measured on an H200 (driver 580.159.04,
/// 2026-11-29, docs/gpu.md): sampled every 10 ms under a kernel that keeps the GPU busy, GPM
/// gave a nonzero value in about one sample in ten (60 of 643) and 0 in the others, so its
/// counters advance about every 100 ms; every 1 ms, `nvmlGpmMetricsGet` failed for every
/// metric. Spans of at least 200 ms hold at least one update each.
pub const MIN_WINDOW: std::time::Duration = std::time::Duration::from_millis(200);

/// Samples the GPM metrics of every GPU into timeline columns: a new GPM sample once at least
/// [`MIN_WINDOW`] has passed since the last one; the timeline row taken then carries the
/// metrics of that span, the rows between carry none (null).
pub struct GpmSampler {
    source: Option<Box<dyn GpmSource>>,
    /// Why there is no source (no NVML, turned off).
    pub unavailable: Option<String>,
    /// Per GPU: `Err(why)` where GPM is not offered.
    support: Vec<Result<(), String>>,
    /// Per GPU and metric: the first error NVML gave, and how many values were read.
    errors: Vec<Vec<Option<String>>>,
    counted: Vec<Vec<u64>>,
    /// Per GPU and metric: Σ value·span and Σ span (s) over the spans that gave a value, for
    /// the run's time-weighted mean (the record's `total`).
    weighted: Vec<Vec<(f64, f64)>>,
    /// When the last GPM sample was taken.
    last: Option<std::time::Instant>,
    /// Time spent taking GPM samples, ns, and how many were taken (every GPU each).
    cost_ns: u64,
    reads: u64,
}

impl GpmSampler {
    /// A sampler over `source`.
    pub fn new(source: Box<dyn GpmSource>) -> Self {
        let n = source.count() as usize;
        let support = (0..source.count()).map(|i| source.support(i)).collect();
        GpmSampler {
            source: Some(source),
            unavailable: None,
            support,
            errors: vec![vec![None; METRICS.len()]; n],
            counted: vec![vec![0; METRICS.len()]; n],
            weighted: vec![vec![(0.0, 0.0); METRICS.len()]; n],
            last: None,
            cost_ns: 0,
            reads: 0,
        }
    }

    /// No GPM, with the reason.
    pub fn none(reason: impl Into<String>) -> Self {
        GpmSampler {
            source: None,
            unavailable: Some(reason.into()),
            support: vec![],
            errors: vec![],
            counted: vec![],
            weighted: vec![],
            last: None,
            cost_ns: 0,
            reads: 0,
        }
    }

    /// Whether any GPU is sampled.
    pub fn is_active(&self) -> bool {
        self.source.is_some() && self.support.iter().any(Result::is_ok)
    }

    fn gpus(&self) -> impl Iterator<Item = u32> + '_ {
        self.support
            .iter()
            .enumerate()
            .filter(|(_, s)| s.is_ok())
            .map(|(i, _)| i as u32)
    }

    /// Timeline columns: `gpu<i>_<metric>` for every GPU that offers GPM.
    pub fn columns(&self) -> Vec<String> {
        self.gpus()
            .flat_map(|i| METRICS.iter().map(move |m| format!("gpu{i}_{}", m.name)))
            .collect()
    }

    /// The mean time one GPM sample of every GPU took, µs, and the number taken.
    pub fn cost_us(&self) -> Option<(f64, u64)> {
        (self.reads > 0).then(|| (self.cost_ns as f64 * 1e-3 / self.reads as f64, self.reads))
    }

    /// A row's values, following [`GpmSampler::columns`]: the metrics since the last GPM
    /// sample when [`MIN_WINDOW`] has passed since it (a new sample is taken), else nulls.
    pub fn sample(&mut self) -> Vec<Option<f64>> {
        self.sample_at(std::time::Instant::now())
    }

    /// [`GpmSampler::sample`] at `now`.
    pub fn sample_at(&mut self, now: std::time::Instant) -> Vec<Option<f64>> {
        let due = self
            .last
            .is_none_or(|l| now.saturating_duration_since(l) >= MIN_WINDOW);
        if !due {
            return vec![None; self.columns().len()];
        }
        let span_s = self
            .last
            .map_or(0.0, |l| now.saturating_duration_since(l).as_secs_f64());
        self.last = Some(now);
        let t = std::time::Instant::now();
        let v = self.read_all(span_s);
        self.cost_ns += t.elapsed().as_nanos() as u64;
        self.reads += 1;
        v
    }

    fn read_all(&mut self, span_s: f64) -> Vec<Option<f64>> {
        let gpus: Vec<u32> = self.gpus().collect();
        let Some(src) = self.source.as_mut() else {
            return vec![];
        };
        let mut out = Vec::with_capacity(gpus.len() * METRICS.len());
        for i in gpus {
            let k = i as usize;
            match src.read(i) {
                None => out.extend(std::iter::repeat_n(None, METRICS.len())),
                Some(v) => {
                    for (j, (r, m)) in v.iter().zip(&METRICS).enumerate() {
                        match r {
                            Ok(x) => {
                                let c = convert(m.unit, *x);
                                if let Some(c) = c {
                                    self.counted[k][j] += 1;
                                    let w = &mut self.weighted[k][j];
                                    w.0 += c * span_s;
                                    w.1 += span_s;
                                }
                                out.push(c);
                            }
                            Err(e) => {
                                self.errors[k][j].get_or_insert_with(|| e.clone());
                                out.push(None);
                            }
                        }
                    }
                    out.resize(out.len() + METRICS.len() - v.len().min(METRICS.len()), None);
                }
            }
        }
        out
    }

    /// Notes for run.toml (units NVML named that differ from nvml.h's).
    pub fn notes(&self) -> Vec<String> {
        self.source.as_ref().map(|s| s.notes()).unwrap_or_default()
    }

    /// The time-weighted mean of GPU `i`'s metric `j` over the spans that gave it a value
    /// (a fraction, or bytes/s): the record's `total`, what `report` prints for it.
    fn run_mean(&self, i: usize, j: usize) -> Option<f64> {
        let (sum, span) = self.weighted.get(i)?.get(j)?;
        (*span > 0.0).then(|| sum / span)
    }

    /// Event records for run.toml: per GPU and metric, counted (its column, and its time-weighted mean over
    /// the run as `total`) or not supported
    /// with the reason (no GPM on this GPU, NVML's error for the metric, no interval read);
    /// without a source, one record saying why when `required`.
    pub fn records(&self, required: bool) -> Vec<EventRecord> {
        let rec =
            |name: String, status, reason: Option<String>, column: Option<String>, unit: Unit| {
                EventRecord {
                    name,
                    backend: Backend::Nvml,
                    status,
                    reason,
                    column,
                    total: None,
                    unit: Some(unit.name().into()),
                    scale: None,
                    running_ratio: None,
                }
            };
        if let Some(why) = &self.unavailable {
            return if required {
                vec![rec(
                    "gpm".into(),
                    EventStatus::NotSupported,
                    Some(why.clone()),
                    None,
                    Unit::Fraction,
                )]
            } else {
                vec![]
            };
        }
        let mut out = Vec::new();
        for (i, s) in self.support.iter().enumerate() {
            for (j, m) in METRICS.iter().enumerate() {
                let name = format!("gpu{i}-{}", m.name);
                let col = format!("gpu{i}_{}", m.name);
                let r = match s {
                    Err(why) => rec(name, EventStatus::NotSupported, Some(why.clone()), None, m.unit),
                    Ok(()) if self.counted[i][j] > 0 => {
                        let mut r = rec(name, EventStatus::Counted, None, Some(col), m.unit);
                        r.total = self.run_mean(i, j);
                        r
                    }
                    Ok(()) => match &self.errors[i][j] {
                        // NVML says this metric is not offered (NVML_ERROR_NOT_SUPPORTED)
                        Some(e) if says_not_supported(e) => rec(
                            name,
                            EventStatus::NotSupported,
                            Some(format!("nvmlGpmMetricsGet({}) on gpu{i}: {e}", m.nvml)),
                            None,
                            m.unit,
                        ),
                        // GPM works on this GPU, but no span gave this metric a value
                        // (nvmlGpmMetricsGet also fails for two samples inside one update of
                        // GPM's counters: docs/gpu.md)
                        Some(e) => rec(
                            name,
                            EventStatus::NoSample,
                            Some(format!(
                                "no sample: gpu{i} has GPM, but nvmlGpmMetricsGet({}) gave no value for any span of the run (NVML: {e}); a command that keeps the GPU busy for longer than {} ms gets values",
                                m.nvml,
                                MIN_WINDOW.as_millis()
                            )),
                            None,
                            m.unit,
                        ),
                        // GPM works on this GPU; the run was too short to give a sample
                        None => rec(
                            name,
                            EventStatus::NoSample,
                            Some(format!(
                                "no sample: gpu{i} has GPM, but no span of at least {} ms ended inside the run (GPM's counters advance about every 100 ms, so each value is taken over at least {} ms); a command that runs longer gets values",
                                MIN_WINDOW.as_millis(),
                                MIN_WINDOW.as_millis()
                            )),
                            None,
                            m.unit,
                        ),
                    },
                };
                out.push(r);
            }
        }
        out
    }
}

/// Whether an NVML error says the metric is not supported (`NVML_ERROR_NOT_SUPPORTED`, in
/// nvml-wrapper's words or NVML's).
fn says_not_supported(e: &str) -> bool {
    let e = e.to_ascii_lowercase();
    e.contains("not supported") || e.contains("not available on the target device")
}

/// Open GPM on every GPU NVML sees. Nothing is switched on: only queries and samples.
///
/// # Errors
/// Why NVML is not available.
#[cfg(target_os = "linux")]
pub fn open_gpm() -> Result<Box<dyn GpmSource>, String> {
    real::NvmlGpm::open().map(|s| Box::new(s) as Box<dyn GpmSource>)
}

/// Whether GPU `i` offers GPM (`nvmlGpmQueryDeviceSupport`), for quickstart's read-only step.
///
/// # Errors
/// Why not (NVML missing, no such GPU, GPM not supported).
#[cfg(target_os = "linux")]
pub fn support(i: u32) -> Result<(), String> {
    real::NvmlGpm::open()?.support(i)
}

#[cfg(target_os = "linux")]
mod real {
    use super::{GpmSource, METRICS};
    use nvml_wrapper::enums::gpm::GpmMetricId;
    use nvml_wrapper::gpm::{gpm_metrics_get, GpmSample};
    use nvml_wrapper::Nvml;
    use std::sync::OnceLock;

    /// One NVML handle for the process's GPM samples (a sample borrows the handle it was
    /// taken with).
    static NVML: OnceLock<Result<Nvml, String>> = OnceLock::new();

    fn nvml() -> Result<&'static Nvml, String> {
        NVML.get_or_init(|| {
            Nvml::builder()
                .lib_path(std::ffi::OsStr::new("libnvidia-ml.so.1"))
                .init()
                .or_else(|_| Nvml::init())
                .map_err(|e| format!("NVML not available for GPM: {e}"))
        })
        .as_ref()
        .map_err(Clone::clone)
    }

    fn id(nvml_name: &str) -> GpmMetricId {
        match nvml_name {
            "NVML_GPM_METRIC_GRAPHICS_UTIL" => GpmMetricId::GraphicsUtil,
            "NVML_GPM_METRIC_SM_UTIL" => GpmMetricId::SmUtil,
            "NVML_GPM_METRIC_SM_OCCUPANCY" => GpmMetricId::SmOccupancy,
            "NVML_GPM_METRIC_ANY_TENSOR_UTIL" => GpmMetricId::AnyTensorUtil,
            "NVML_GPM_METRIC_DFMA_TENSOR_UTIL" => GpmMetricId::DfmaTensorUtil,
            "NVML_GPM_METRIC_HMMA_TENSOR_UTIL" => GpmMetricId::HmmaTensorUtil,
            "NVML_GPM_METRIC_IMMA_TENSOR_UTIL" => GpmMetricId::ImmaTensorUtil,
            "NVML_GPM_METRIC_DRAM_BW_UTIL" => GpmMetricId::DramBwUtil,
            "NVML_GPM_METRIC_FP64_UTIL" => GpmMetricId::Fp64Util,
            "NVML_GPM_METRIC_FP32_UTIL" => GpmMetricId::Fp32Util,
            "NVML_GPM_METRIC_FP16_UTIL" => GpmMetricId::Fp16Util,
            "NVML_GPM_METRIC_INTEGER_UTIL" => GpmMetricId::IntegerUtil,
            "NVML_GPM_METRIC_PCIE_TX_PER_SEC" => GpmMetricId::PcieTxPerSec,
            "NVML_GPM_METRIC_PCIE_RX_PER_SEC" => GpmMetricId::PcieRxPerSec,
            "NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC" => GpmMetricId::NvlinkTotalTxPerSec,
            _ => GpmMetricId::NvlinkTotalRxPerSec,
        }
    }

    pub struct NvmlGpm {
        nvml: &'static Nvml,
        n: u32,
        ids: Vec<GpmMetricId>,
        prev: Vec<Option<GpmSample<'static>>>,
        /// Units NVML named that are not nvml.h's (percent, MiB/s).
        odd_units: std::collections::BTreeSet<String>,
    }

    impl NvmlGpm {
        pub fn open() -> Result<Self, String> {
            let nvml = nvml()?;
            let n = nvml
                .device_count()
                .map_err(|e| format!("NVML not available for GPM: nvmlDeviceGetCount: {e}"))?;
            Ok(NvmlGpm {
                nvml,
                n,
                ids: METRICS.iter().map(|m| id(m.nvml)).collect(),
                prev: (0..n).map(|_| None).collect(),
                odd_units: Default::default(),
            })
        }
    }

    impl GpmSource for NvmlGpm {
        fn count(&self) -> u32 {
            self.n
        }
        fn support(&self, i: u32) -> Result<(), String> {
            let dev = self
                .nvml
                .device_by_index(i)
                .map_err(|e| format!("nvmlDeviceGetHandleByIndex({i}): {e}"))?;
            match dev.gpm_support() {
                Ok(true) => Ok(()),
                Ok(false) => Err(format!(
                    "gpu{i} does not support GPM (nvmlGpmQueryDeviceSupport: isSupportedDevice = 0; GPM needs Hopper or newer)"
                )),
                Err(e) => Err(format!(
                    "gpu{i}: nvmlGpmQueryDeviceSupport failed: {e} (GPM needs Hopper or newer and a driver with the GPM API)"
                )),
            }
        }
        fn read(&mut self, i: u32) -> Option<Vec<Result<f64, String>>> {
            let k = i as usize;
            let now = self
                .nvml
                .device_by_index(i)
                .and_then(|d| d.gpm_sample())
                .map_err(|e| format!("nvmlGpmSampleGet: {e}"));
            let prev = self.prev[k].take();
            let out = match (&prev, &now) {
                (Some(p), Ok(s)) => Some(match gpm_metrics_get(self.nvml, p, s, &self.ids) {
                    Ok(v) => v
                        .into_iter()
                        .zip(&METRICS)
                        .map(|(r, m)| {
                            r.map(|x| {
                                let u = x.metric_info.unit.to_ascii_lowercase();
                                let expected = match m.unit {
                                    super::Unit::Fraction => u.is_empty() || u.contains('%') || u.contains("percent"),
                                    super::Unit::BytesPerSec => u.is_empty() || u.contains("mib"),
                                };
                                if !expected {
                                    self.odd_units.insert(format!(
                                        "{}: NVML names the unit `{}` (nvml.h: {}); converted as nvml.h says",
                                        m.nvml,
                                        x.metric_info.unit,
                                        if m.unit == super::Unit::Fraction { "percent" } else { "MiB/s" }
                                    ));
                                }
                                x.value
                            })
                            .map_err(|e| e.to_string())
                        })
                        .collect(),
                    Err(e) => vec![Err(format!("nvmlGpmMetricsGet: {e}")); METRICS.len()],
                }),
                (Some(_), Err(e)) => Some(vec![Err(e.clone()); METRICS.len()]),
                (None, _) => None,
            };
            self.prev[k] = now.ok();
            out
        }
        fn notes(&self) -> Vec<String> {
            self.odd_units.iter().cloned().collect()
        }
    }
}

#[cfg(test)]
mod tests;
