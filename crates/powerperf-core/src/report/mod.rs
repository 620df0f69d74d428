//! Reports of a run, like `perf stat`: totals, rates, IPC, energy per domain, mean power,
//! unsupported events shown as such. One exporter per format (table, JSON, CSV, Markdown);
//! plots ([`plots`]) and a self-contained HTML report ([`html`]).

mod csv_out;
pub mod gpu;
pub mod html;
mod json;
mod markdown;
pub mod pc;
pub mod plots;
pub mod ranks;
pub mod regions;
mod table;

use crate::output::OutputFormat;
use powerperf_format::run::{Backend, Ending, RunMeta};
use powerperf_node::event_spec::EventStatus;
use serde::Serialize;

/// One event line of a report.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Row {
    pub event: String,
    pub backend: String,
    pub status: String,
    /// Total (counts; ns for clocks; J for energy). `None` when not counted.
    pub value: Option<f64>,
    pub unit: Option<String>,
    /// A derived rate (per second, CPUs utilized, IPC, % of parent, mean W).
    pub rate: Option<f64>,
    pub rate_unit: Option<String>,
    /// Why there is no value, when there is none.
    pub reason: Option<String>,
}

/// GPU energy of a run, from NVML.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct GpuEnergy {
    pub gpu: String,
    /// From `nvmlDeviceGetTotalEnergyConsumption` deltas, J.
    pub energy_j: f64,
    /// Mean power, energy / duration, W.
    pub mean_power_w: f64,
    /// ∫ sampled power dt (trapezoid rule), J; `None` without power samples.
    pub power_integral_j: Option<f64>,
    /// 100 · (integral − counter) / counter.
    pub integral_vs_counter_pct: Option<f64>,
}

/// The whole report of one run.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct Summary {
    pub command: String,
    pub workload: Option<String>,
    pub ended: String,
    pub exit_status: Option<i32>,
    pub signal: Option<String>,
    pub duration_s: f64,
    /// instructions / cycles, where both were counted.
    pub ipc: Option<f64>,
    /// Joules per RAPL domain (only domains with a value).
    pub energy_j: std::collections::BTreeMap<String, f64>,
    /// Mean power per RAPL domain, W (energy / duration).
    pub mean_power_w: std::collections::BTreeMap<String, f64>,
    /// Per NVIDIA GPU (`gpu0`, …): energy from NVML's energy counter, the integral of the
    /// sampled power over the same samples, and their difference.
    pub gpus: Vec<GpuEnergy>,
    /// The sysfs power devices (amdgpu, xe, i915, hwmon; run.toml's `[[power_devices]]`):
    /// energy (J) and mean power (W) with where and how each was read.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub power_devices: Vec<powerperf_format::run::PowerDeviceRecord>,
    /// `regions.parquet`, where the program marked regions (powerperf-rt).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub regions: Vec<powerperf_format::regions::RegionRecord>,
    /// `gpu_activity.parquet` (collect --gpu): CUPTI activities summarised.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gpu_activity: Option<gpu::GpuActivity>,
    /// `pc_samples.parquet` (collect --pc-sampling cpu): top functions and regions.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pc_samples: Option<pc::PcReport>,
    pub events: Vec<Row>,
    /// Per-thread totals (`collect -p PID --per-thread`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub threads: Vec<powerperf_format::run::ThreadCounts>,
    pub notes: Vec<String>,
}

fn status_name(s: EventStatus) -> &'static str {
    match s {
        EventStatus::Counted => "counted",
        EventStatus::Multiplexed => "multiplexed",
        EventStatus::NotSupported => "not_supported",
        EventStatus::PermissionDenied => "permission_denied",
        EventStatus::NotCounted => "not_counted",
        EventStatus::NoSample => "no_sample",
    }
}

/// Build the summary of a run.
pub fn summarize(meta: &RunMeta) -> Summary {
    let dur = meta.duration_s();
    let totals = meta.totals().values;
    let get = |n: &str| totals.get(n).copied();
    let ipc = match (
        get("instructions"),
        get("cycles").or_else(|| get("cpu-cycles")),
    ) {
        (Some(i), Some(c)) if c > 0.0 => Some(i / c),
        _ => None,
    };
    let mut energy_j = std::collections::BTreeMap::new();
    let mut mean_power_w = std::collections::BTreeMap::new();
    let mut rows = Vec::new();
    for e in &meta.events {
        let value = if e.status.has_value() { e.total } else { None };
        let (rate, rate_unit) = match (value, e.backend, e.name.as_str()) {
            (Some(v), Backend::Rapl, _) if dur > 0.0 => {
                let domain = e.name.trim_start_matches("energy-").to_string();
                energy_j.insert(domain.clone(), v);
                mean_power_w.insert(domain, v / dur);
                (Some(v / dur), Some("W".to_string()))
            }
            (Some(v), Backend::Import, n) if dur > 0.0 && e.unit.as_deref() == Some("J") => {
                energy_j.insert(n.to_string(), v);
                mean_power_w.insert(n.to_string(), v / dur);
                (Some(v / dur), Some("W".to_string()))
            }
            (Some(v), Backend::Nvml, n) if dur > 0.0 && n.ends_with("-energy") => {
                (Some(v / dur), Some("W".to_string()))
            }
            (Some(_), Backend::Nvml, _) => (None, None),
            (Some(v), Backend::Sysfs, n) if dur > 0.0 && n.ends_with("-energy") => {
                (Some(v / dur), Some("W".to_string()))
            }
            (Some(v), _, "task-clock") if dur > 0.0 => {
                (Some(v * 1e-9 / dur), Some("CPUs utilized".into()))
            }
            (Some(_), _, "instructions") if ipc.is_some() => (ipc, Some("insn per cycle".into())),
            (Some(v), _, "cycles" | "cpu-cycles") if get("task-clock").is_some_and(|t| t > 0.0) => {
                (Some(v / get("task-clock").unwrap()), Some("GHz".into()))
            }
            (Some(v), _, "branch-misses") if get("branches").is_some_and(|b| b > 0.0) => (
                Some(100.0 * v / get("branches").unwrap()),
                Some("% of all branches".into()),
            ),
            (Some(v), _, "cache-misses") if get("cache-references").is_some_and(|b| b > 0.0) => (
                Some(100.0 * v / get("cache-references").unwrap()),
                Some("% of all cache refs".into()),
            ),
            (Some(v), _, _) if dur > 0.0 && e.unit.as_deref() != Some("ns") => {
                (Some(v / dur), Some("/sec".into()))
            }
            _ => (None, None),
        };
        rows.push(Row {
            event: e.name.clone(),
            backend: serde_json::to_value(e.backend)
                .ok()
                .and_then(|v| v.as_str().map(String::from))
                .unwrap_or_default(),
            status: status_name(e.status).into(),
            value,
            unit: e.unit.clone(),
            rate,
            rate_unit,
            reason: e.reason.clone(),
        });
    }
    let gpus = meta
        .events
        .iter()
        .filter(|e| e.backend == Backend::Nvml && e.name.ends_with("-energy"))
        .filter_map(|e| {
            let energy_j = e.total.filter(|_| e.status.has_value())?;
            let gpu = e.name.trim_end_matches("-energy").to_string();
            let integral = meta
                .events
                .iter()
                .find(|p| p.name == format!("{gpu}-power-integral") && p.status.has_value())
                .and_then(|p| p.total);
            Some(GpuEnergy {
                gpu,
                energy_j,
                mean_power_w: if dur > 0.0 { energy_j / dur } else { f64::NAN },
                power_integral_j: integral,
                integral_vs_counter_pct: integral.map(|i| 100.0 * (i - energy_j) / energy_j),
            })
        })
        .collect();
    Summary {
        command: meta.run.command.join(" "),
        workload: meta.run.workload.clone(),
        ended: match meta.run.ended {
            Ending::Exited => "exited",
            Ending::Signaled => "signaled",
            Ending::NotStarted => "not_started",
            Ending::Unknown => "unknown",
            Ending::Running => "running",
        }
        .into(),
        exit_status: meta.run.exit_status,
        signal: meta.run.signal_name.clone(),
        duration_s: dur,
        ipc,
        energy_j,
        mean_power_w,
        gpus,
        power_devices: power_devices(meta),
        regions: vec![],
        gpu_activity: None,
        pc_samples: None,
        events: rows,
        threads: meta.threads.clone(),
        notes: meta.notes.clone(),
    }
}

/// The run's `[[power_devices]]`, their energy taken from the `<stem>-energy` events (so a
/// run rebuilt from its journal has it too) and their mean power = energy / duration.
fn power_devices(meta: &RunMeta) -> Vec<powerperf_format::run::PowerDeviceRecord> {
    let dur = meta.duration_s();
    meta.power_devices
        .iter()
        .map(|d| {
            let energy = meta
                .events
                .iter()
                .find(|e| e.backend == Backend::Sysfs && e.name == format!("{}-energy", d.stem))
                .filter(|e| e.status.has_value())
                .and_then(|e| e.total)
                .or(d.energy_j);
            powerperf_format::run::PowerDeviceRecord {
                energy_j: energy,
                mean_power_w: energy.filter(|_| dur > 0.0).map(|e| e / dur),
                ..d.clone()
            }
        })
        .collect()
}

/// Render a run's report in `format`.
///
/// # Errors
/// Serialisation errors (JSON, CSV).
pub fn render(meta: &RunMeta, format: OutputFormat) -> anyhow::Result<String> {
    render_summary(&summarize(meta), format)
}

/// Render a summary (with its regions, if any) in `format`.
///
/// # Errors
/// Serialisation errors (JSON, CSV).
pub fn render_summary(s: &Summary, format: OutputFormat) -> anyhow::Result<String> {
    let s = s.clone();
    match format {
        OutputFormat::Table => Ok(table::render(&s)),
        OutputFormat::Json => json::render(&s),
        OutputFormat::Csv => csv_out::render(&s),
        OutputFormat::Markdown => Ok(markdown::render(&s)),
    }
}

/// Group digits like perf stat (`1,234,567`).
pub fn thousands(v: f64) -> String {
    let neg = v < 0.0;
    let mut digits = format!("{:.0}", v.abs());
    let mut out = String::new();
    while digits.len() > 3 {
        let tail = digits.split_off(digits.len() - 3);
        out = format!(",{tail}{out}");
    }
    format!("{}{digits}{out}", if neg { "-" } else { "" })
}

/// A value in `unit` as perf stat prints it, and the unit it prints: clocks (`ns`) in msec
/// with two decimals, energy (`J`) in joules, GPM activity (`fraction`, the run's mean) with
/// three decimals, GPM traffic (`B/s`) and counts (any other unit) as integers grouped by
/// thousands.
pub fn perf_value(v: f64, unit: Option<&str>) -> (String, &'static str) {
    match unit {
        Some("ns") => {
            // Rounded to hundredths of a msec first, so that 1.999999 msec prints 2.00.
            let h = (v.abs() * 1e-4).round();
            let sign = if v < 0.0 && h > 0.0 { "-" } else { "" };
            (
                format!(
                    "{sign}{}.{:02}",
                    thousands((h / 100.0).trunc()),
                    (h % 100.0) as u64
                ),
                "msec",
            )
        }
        Some("J") => (format!("{v:.2}"), "Joules"),
        // GPM activity (a time-weighted mean over the run, 0..1) and traffic (mean bytes/s)
        Some("fraction") => (format!("{v:.3}"), "fraction"),
        Some("B/s") => (thousands(v), "B/s"),
        _ => (thousands(v), ""),
    }
}

/// A value and its unit as perf stat prints them ([`perf_value`]); the marker (`<not
/// supported>`) where there is no value.
pub fn value_and_unit(r: &Row) -> (String, &'static str) {
    match (r.value, r.unit.as_deref()) {
        (None, _) => (
            match r.status.as_str() {
                "permission_denied" => "<permission denied>",
                "not_counted" => "<not counted>",
                "no_sample" => "<no sample>",
                _ => "<not supported>",
            }
            .into(),
            "",
        ),
        (Some(v), u) => perf_value(v, u),
    }
}

/// [`value_and_unit`] as one string.
pub fn display_value(r: &Row) -> String {
    match value_and_unit(r) {
        (v, "") => v,
        (v, u) => format!("{v} {u}"),
    }
}

fn ending_line(s: &Summary) -> String {
    match (s.ended.as_str(), s.exit_status, &s.signal) {
        ("exited", Some(c), _) => format!("exited with status {c}"),
        ("signaled", _, Some(sig)) => format!("killed by {sig}"),
        ("not_started", _, _) => "could not be started".into(),
        ("exited", None, _) => "exited (status not recorded: an imported run)".into(),
        _ => "ended in an unknown way (powerperf stopped first)".into(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use powerperf_format::run::*;

    pub(crate) fn sample_meta() -> RunMeta {
        let ev =
            |name: &str, status, total: Option<f64>, unit: Option<&str>, backend| EventRecord {
                name: name.into(),
                backend,
                status,
                reason: (!status.has_value()).then(|| "no PMU".into()),
                column: total.map(|_| name.to_string()),
                total,
                unit: unit.map(String::from),
                scale: None,
                running_ratio: None,
            };
        RunMeta {
            run: RunInfo {
                id: "x".into(),
                command: vec!["gzip".into(), "-9".into()],
                workload: Some("gzip".into()),
                ended: Ending::Exited,
                exit_status: Some(0),
                signal: None,
                signal_name: None,
                core_dumped: false,
                error: None,
                start_unix_ns: 0,
                start_monotonic_ns: 0,
                duration_ns: 2_000_000_000,
                host: "h".into(),
                cpu_model: "c".into(),
                cpu_vendor: None,
                cpu_family: None,
                cpu_model_number: None,
                kernel: "k".into(),
                tool_version: "0".into(),
                rank: None,
                local_rank: None,
                node_sources: None,
                interval_ns: 10_000_000,
                samples: 200,
                truncated: false,
                self_cpu_ns: None,
                timeline_sampler: None,
            },
            knobs: Knobs::default(),
            events: vec![
                ev(
                    "task-clock",
                    EventStatus::Counted,
                    Some(1.5e9),
                    Some("ns"),
                    Backend::PerfEvent,
                ),
                ev(
                    "page-faults",
                    EventStatus::Counted,
                    Some(1234.0),
                    None,
                    Backend::PerfEvent,
                ),
                ev(
                    "cycles",
                    EventStatus::Counted,
                    Some(4e9),
                    None,
                    Backend::PerfEvent,
                ),
                ev(
                    "instructions",
                    EventStatus::Counted,
                    Some(6e9),
                    None,
                    Backend::PerfEvent,
                ),
                ev(
                    "branch-misses",
                    EventStatus::NotSupported,
                    None,
                    None,
                    Backend::PerfEvent,
                ),
                ev(
                    "energy-package-0",
                    EventStatus::Counted,
                    Some(50.0),
                    Some("J"),
                    Backend::Rapl,
                ),
            ],
            notes: vec![],
            threads: vec![],
            pc_sampling: None,
            gpu_attribution: None,
            gpu_setting: None,
            power_devices: vec![],
        }
    }

    #[test]
    fn summary_rates_ipc_and_power() {
        let s = summarize(&sample_meta());
        assert_eq!(s.ipc, Some(1.5));
        assert_eq!(s.energy_j["package-0"], 50.0);
        assert_eq!(s.mean_power_w["package-0"], 25.0);
        let tc = &s.events[0];
        assert!((tc.rate.unwrap() - 0.75).abs() < 1e-12);
        assert_eq!(s.events[1].rate, Some(617.0));
        assert_eq!(s.events[4].value, None);
        assert_eq!(s.events[4].status, "not_supported");
    }

    #[test]
    fn table_marks_unsupported_like_perf() {
        let t = render(&sample_meta(), OutputFormat::Table).unwrap();
        let line = |ev: &str| {
            t.lines()
                .find(|l| l.contains(ev))
                .unwrap_or_else(|| panic!("{ev}: {t}"))
                .to_string()
        };
        assert!(
            line("branch-misses")
                .trim_start()
                .starts_with("<not supported>"),
            "{t}"
        );
        assert!(
            line("task-clock").contains("1,500.00 msec task-clock"),
            "{t}"
        );
        assert!(line("task-clock").contains("0.75  CPUs utilized"), "{t}");
        assert!(line("instructions").contains("1.50  insn per cycle"), "{t}");
        assert!(line("cycles ").contains("2.667 GHz"), "{t}");
        assert!(
            line("energy-package-0").contains("50.00 Joules energy-package-0"),
            "{t}"
        );
    }

    #[test]
    fn json_csv_markdown_carry_the_same_rows() {
        let m = sample_meta();
        let j: serde_json::Value =
            serde_json::from_str(&render(&m, OutputFormat::Json).unwrap()).unwrap();
        assert_eq!(j["events"].as_array().unwrap().len(), 6);
        assert_eq!(j["events"][4]["value"], serde_json::Value::Null);
        assert_eq!(j["ipc"], 1.5);
        let c = render(&m, OutputFormat::Csv).unwrap();
        assert_eq!(c.lines().count(), 7);
        assert!(
            c.lines()
                .nth(5)
                .unwrap()
                .starts_with("branch-misses,perf_event,not_supported,,"),
            "{c}"
        );
        let md = render(&m, OutputFormat::Markdown).unwrap();
        assert!(md.contains("| branch-misses | <not supported> |"), "{md}");
    }

    #[test]
    fn thousands_grouping() {
        assert_eq!(thousands(1234567.0), "1,234,567");
        assert_eq!(thousands(12.0), "12");
    }
}
