//! The plan file (`PLAN.toml`, documented in `docs/plan-format.md`): `[plan]` (objective,
//! bound, model, creation time, totals), `[[device]]` (kind, knobs it owns, default
//! setting) and `[[region]]` (name, setting, predicted time/energy/power, savings against
//! the reference setting).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::path::Path;

/// A setting: knob name (`core_freq_mhz`, `mem_freq_mhz` in MHz, `threads`, `power_limit_w`
/// in W) to its value.
pub type Knobs = BTreeMap<String, f64>;

/// A plan file that cannot be read, parsed or written: the path and what is wrong.
#[derive(Debug, thiserror::Error)]
#[error("{path}: {message}")]
pub struct PlanFileError {
    pub path: String,
    pub message: String,
}

/// What the planner minimises.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum Objective {
    /// Energy, J.
    Energy,
    /// Energy × delay, J·s (Gonzalez & Horowitz, IEEE JSSC 31(9), 1996).
    Edp,
    /// Energy × delay², J·s² (Martin, Nyström, Pénzes, "ET²", PACS 2001).
    Ed2p,
    /// Time, s (with `--power-cap`: the fastest setting under the cap).
    Time,
}

impl Objective {
    /// The objective's value for a total energy (J) and time (s).
    pub fn value(self, energy_j: f64, time_s: f64) -> f64 {
        match self {
            Objective::Energy => energy_j,
            Objective::Edp => energy_j * time_s,
            Objective::Ed2p => energy_j * time_s * time_s,
            Objective::Time => time_s,
        }
    }

    /// The name used on the command line and in plan files.
    pub fn name(self) -> &'static str {
        match self {
            Objective::Energy => "energy",
            Objective::Edp => "edp",
            Objective::Ed2p => "ed2p",
            Objective::Time => "time",
        }
    }
}

/// Whether the regions are independent workloads or consecutive regions of one job.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Each `[[region]]` is a workload planned on its own (its own bound).
    PerWorkload,
    /// The `[[region]]`s run one after another in one job; the bound is on their total.
    Job,
}

/// `[plan]`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanHeader {
    pub objective: Objective,
    /// Fraction (0.05 = 5 %); absent: no bound.
    pub max_slowdown: Option<f64>,
    /// The plan was chosen against `max_slowdown − slowdown_margin` (a guard against
    /// prediction error).
    #[serde(default)]
    pub slowdown_margin: f64,
    /// Path of the model the predictions came from.
    pub model: String,
    /// The model's kind (`analytic`, `linear`, ...).
    #[serde(default)]
    pub model_kind: String,
    /// RFC 3339 UTC time of creation.
    pub created: String,
    pub scope: Scope,
    /// W; absent: no cap.
    pub power_cap_w: Option<f64>,
    #[serde(default)]
    pub transition_latency_s: f64,
    #[serde(default)]
    pub transition_energy_j: f64,
    #[serde(default)]
    pub min_region_s: f64,
    /// The guard against prediction error (issue 20): `none` (the raw plan), `margin`
    /// (`slowdown_margin` taken off the bound), `risk` or `risk-class` (the risk budget).
    /// Absent in plans written before it existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard: Option<String>,
    /// The risk guard's allowed expected share of workloads above the bound (0.05).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub risk: Option<f64>,
    /// The expected share of workloads (regions; for a job, the chance of the job) whose
    /// measured slowdown exceeds `max_slowdown`, under the model's held-out errors.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expected_over_bound: Option<f64>,
    /// Where the guard's errors come from (protocol, count, knob), from the model file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub guard_errors: Option<String>,
    /// Job scope: predicted totals (s, J) of the plan and of the reference setting.
    pub time_s: Option<f64>,
    pub energy_j: Option<f64>,
    pub reference_time_s: Option<f64>,
    pub reference_energy_j: Option<f64>,
}

/// Device kinds a plan sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
#[serde(rename_all = "snake_case")]
pub enum DeviceKind {
    /// CPU cores: `core_freq_mhz` through cpufreq.
    Cpu,
    /// GPU: `core_freq_mhz` is the SM clock, `mem_freq_mhz` the memory clock (NVML).
    Gpu,
}

/// `[[device]]`: a device, the knobs it owns and its default (reference) setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Device {
    pub kind: DeviceKind,
    /// For a GPU: its index (NVML's device index; `gpu<i>` in the set). Absent: GPU 0,
    /// or a plan written before the field existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub index: Option<u32>,
    /// Knob names this device's controller sets (`core_freq_mhz`, `mem_freq_mhz`).
    pub knobs: Vec<String>,
    /// The reference setting of those knobs (the maximum), MHz.
    pub default: Knobs,
}

/// `[[region]]`: a region or workload and its chosen setting.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PlanRegion {
    pub name: String,
    /// Chosen knob values (`core_freq_mhz`, `mem_freq_mhz` in MHz, `threads`).
    pub setting: Knobs,
    /// Regions folded into this one because they were shorter than `min_region_s`.
    #[serde(default)]
    pub folded: Vec<String>,
    /// Predicted at the chosen setting: s, J, W.
    pub time_s: f64,
    pub energy_j: f64,
    pub power_w: f64,
    /// Predicted at the reference setting: s, J.
    pub reference_time_s: f64,
    pub reference_energy_j: f64,
    /// 1 − energy / reference energy.
    pub energy_saving: f64,
    /// time / reference time − 1.
    pub slowdown: f64,
}

/// A whole plan file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Plan {
    pub plan: PlanHeader,
    #[serde(default, rename = "device")]
    pub devices: Vec<Device>,
    #[serde(default, rename = "region")]
    pub regions: Vec<PlanRegion>,
}

impl Device {
    /// The device's name as sets and controllers write it: `cpu`, or `gpu<i>`.
    pub fn name(&self) -> String {
        match self.kind {
            DeviceKind::Cpu => "cpu".into(),
            DeviceKind::Gpu => format!("gpu{}", self.index.unwrap_or(0)),
        }
    }
}

/// The largest plan file read (as the SPANK plugin's `MAX_PLAN_BYTES`).
pub const MAX_PLAN_BYTES: u64 = 1 << 20;

impl Plan {
    /// Check that the controller in use has the device of the plan's `knob` (issue 20,
    /// item 4): a plan written for a GPU is not applied by a CPU controller, nor one for
    /// GPU 1 by a controller of GPU 0. A plan with no `[[device]]` for the knob is the
    /// CPU's (plans written before devices were recorded).
    ///
    /// # Errors
    /// The plan's device and the controller's differ; the message names both and the fix.
    pub fn check_device(
        &self,
        knob: &str,
        controller_device: &str,
        controller: &str,
    ) -> Result<(), String> {
        let want = self
            .device_of(knob)
            .map_or_else(|| "cpu".to_string(), Device::name);
        if want == controller_device {
            return Ok(());
        }
        Err(format!(
            "the plan sets {knob} on `{want}`, and the controller in use ({controller}) has only `{controller_device}`; nothing was changed (fix: apply the plan where `{want}` is, or plan again with --device for the device that runs the command)"
        ))
    }

    /// The device entry owning `knob`, if any.
    pub fn device_of(&self, knob: &str) -> Option<&Device> {
        self.devices
            .iter()
            .find(|d| d.knobs.iter().any(|k| k == knob))
    }

    /// Read and validate a plan file.
    ///
    /// # Errors
    /// [`PlanFileError`] naming the path with the TOML error (line, column) or the
    /// missing part.
    pub fn read(path: &Path) -> Result<Plan, PlanFileError> {
        let err = |m: String| PlanFileError {
            path: path.display().to_string(),
            message: m,
        };
        // a file a user may have written: no link, no FIFO, a stated size (issue 38)
        let text = crate::safe_file::read_to_string_bounded(path, MAX_PLAN_BYTES, "plan")
            .map_err(|e| err(format!("{e:#}")))?;
        Self::from_toml(&text).map_err(err)
    }

    /// Parse and validate the text of a plan file (what [`Plan::read`] does after reading
    /// it).
    ///
    /// # Errors
    /// The message [`Plan::read`] puts in its [`PlanFileError`]: the TOML error (line,
    /// column) or the missing or invalid part.
    pub fn from_toml(text: &str) -> Result<Plan, String> {
        let plan: Plan = toml::from_str(text)
            .map_err(|e| format!("not a plan file (see docs/plan-format.md): {e}"))?;
        if plan.regions.is_empty() {
            return Err("the plan has no [[region]] entries (fix: write the plan with `powerperf plan --model MODEL -o PLAN`, docs/plan-format.md)".into());
        }
        for (i, r) in plan.regions.iter().enumerate() {
            for (k, v) in &r.setting {
                if !(v.is_finite() && *v > 0.0) {
                    return Err(format!(
                        "[[region]] #{} `{}`: setting {k} = {v} is not a positive number (fix: write the plan again with `powerperf plan`, or set {k} to the clock in MHz or the thread count)",
                        i + 1,
                        r.name
                    ));
                }
            }
        }
        Ok(plan)
    }

    /// Write the plan as TOML (atomically: a temporary file, then rename). `-` writes stdout.
    ///
    /// # Errors
    /// [`PlanFileError`] on I/O errors.
    pub fn write(&self, path: &Path) -> Result<(), PlanFileError> {
        let err = |m: String| PlanFileError {
            path: path.display().to_string(),
            message: m,
        };
        let text = self.to_toml();
        if path.as_os_str() == "-" {
            print!("{text}");
            return Ok(());
        }
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir)
                .map_err(|e| err(format!("cannot create its folder: {e}")))?;
        }
        let tmp = path.with_extension("toml.tmp");
        std::fs::write(&tmp, &text).map_err(|e| err(format!("cannot write: {e}")))?;
        std::fs::rename(&tmp, path).map_err(|e| err(format!("cannot write: {e}")))
    }

    /// The plan as TOML text.
    pub fn to_toml(&self) -> String {
        let body = toml::to_string_pretty(self).expect("a plan always serialises");
        format!("# powerperf plan: see docs/plan-format.md\n{body}")
    }
}

/// RFC 3339 UTC text of a Unix time in seconds (days-from-civil inverse, H. Hinnant,
/// "chrono-Compatible Low-Level Date Algorithms", `civil_from_days`).
pub fn rfc3339_utc(unix_s: u64) -> String {
    let days = (unix_s / 86_400) as i64;
    let sod = unix_s % 86_400;
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let y = yoe + era * 400;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = if m <= 2 { y + 1 } else { y };
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z",
        sod / 3600,
        sod / 60 % 60,
        sod % 60
    )
}

/// Now as RFC 3339 UTC.
pub fn now_rfc3339() -> String {
    let s = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    rfc3339_utc(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Plan {
        let k = |f: f64, m: f64| -> Knobs {
            [
                ("core_freq_mhz".to_string(), f),
                ("mem_freq_mhz".to_string(), m),
            ]
            .into_iter()
            .collect()
        };
        Plan {
            plan: PlanHeader {
                guard: Some("risk".into()),
                risk: Some(0.05),
                expected_over_bound: Some(0.031),
                guard_errors: Some(
                    "10-fold cross-validation, 3920 errors at interior values of core_freq_mhz"
                        .into(),
                ),
                objective: Objective::Edp,
                max_slowdown: Some(0.05),
                slowdown_margin: 0.01,
                model: "model.json".into(),
                model_kind: "analytic".into(),
                created: rfc3339_utc(1_700_000_000),
                scope: Scope::PerWorkload,
                power_cap_w: None,
                transition_latency_s: 1e-4,
                transition_energy_j: 0.0,
                min_region_s: 0.01,
                time_s: None,
                energy_j: None,
                reference_time_s: None,
                reference_energy_j: None,
            },
            devices: vec![Device {
                kind: DeviceKind::Gpu,
                index: Some(0),
                knobs: vec!["core_freq_mhz".into(), "mem_freq_mhz".into()],
                default: k(1164.0, 3505.0),
            }],
            regions: vec![PlanRegion {
                name: "stream".into(),
                setting: k(861.0, 3505.0),
                folded: vec!["stream/init".into()],
                time_s: 1.02,
                energy_j: 80.0,
                power_w: 80.0 / 1.02,
                reference_time_s: 1.0,
                reference_energy_j: 100.0,
                energy_saving: 0.2,
                slowdown: 0.02,
            }],
        }
    }

    #[test]
    fn a_controller_without_the_plan_device_is_refused_by_name() {
        use crate::controller::{FakeController, FrequencyController};
        let p = sample(); // a plan for GPU 0
        let cpu = FakeController::new(&[1000.0, 2000.0]);
        let e = p
            .check_device("core_freq_mhz", &cpu.device(), &cpu.describe())
            .unwrap_err();
        assert!(e.contains("`gpu0`") && e.contains("only `cpu`"), "{e}");
        let mut gpu = FakeController::new(&[1000.0, 2000.0]);
        gpu.device = "gpu0".into();
        assert!(p
            .check_device("core_freq_mhz", &gpu.device(), "fake")
            .is_ok());
        gpu.device = "gpu1".into();
        assert!(p
            .check_device("core_freq_mhz", &gpu.device(), "fake")
            .is_err());
        // a plan without [[device]] (written before devices were recorded) is the CPU's
        let mut old = sample();
        old.devices.clear();
        assert!(old
            .check_device("core_freq_mhz", &cpu.device(), "fake")
            .is_ok());
    }

    #[test]
    fn plan_round_trips_through_toml() {
        let p = sample();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("plan.toml");
        p.write(&path).unwrap();
        let q = Plan::read(&path).unwrap();
        assert_eq!(p, q);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(
            text.contains("[[region]]")
                && text.contains("[[device]]")
                && text.contains("objective = \"edp\""),
            "{text}"
        );
    }

    #[test]
    fn bad_plan_names_file_and_position() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("bad.toml");
        std::fs::write(&path, "[plan]\nobjective = \"speed\"\n").unwrap();
        let e = Plan::read(&path).unwrap_err().to_string();
        assert!(e.contains("bad.toml") && e.contains("line 2"), "{e}");
    }

    #[test]
    fn rfc3339_known_dates() {
        assert_eq!(rfc3339_utc(0), "1970-01-01T00:00:00Z");
        assert_eq!(rfc3339_utc(1_700_000_000), "2023-11-14T22:13:20Z");
        assert_eq!(rfc3339_utc(951_782_400), "2000-02-29T00:00:00Z");
    }
}
