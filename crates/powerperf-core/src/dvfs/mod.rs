//! DVFS: the planner (a multiple-choice knapsack over predicted time and energy), the plan
//! file, frequency controllers (cpufreq sysfs, a fake one, an NVML dry-run description) and
//! the apply runtime that sets a plan's setting, runs a command and restores every setting
//! it changed on every exit path. User documentation: `docs/dvfs.md`, `docs/plan-format.md`.

pub mod apply;
pub mod evaluate;
pub mod export;
pub mod from_model;
pub mod gpu_session;
pub mod guard;
pub mod planner;
pub mod risk_budget;
pub mod sweep;
pub mod sweep_gpu;

/// Errors of the planner, the plan file and the controllers.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum DvfsError {
    /// A region has no candidate setting.
    #[error("region `{region}` has no candidate setting with a predicted time (check the model's knob grid)")]
    NoCandidates { region: String },
    /// A region lacks the reference setting (the maximum of every knob).
    #[error("region `{region}` has no prediction at the reference setting {knobs} (the maximum of every knob); slowdown is measured against it, so the model's grid must include it")]
    NoReference { region: String, knobs: String },
    /// A prediction that is negative, infinite or NaN.
    #[error("region `{region}` at {knobs}: prediction time {time_s} s, energy {energy_j} J is not a finite non-negative number")]
    BadPrediction {
        region: String,
        knobs: String,
        time_s: f64,
        energy_j: f64,
    },
    /// A slowdown bound that is negative or not a number.
    #[error("max slowdown {0} is not a non-negative fraction (write 5% or 0.05)")]
    BadBound(f64),
    /// No setting of a region meets the power cap.
    #[error("no setting of region `{region}` meets the power cap of {cap_w} W (its lowest predicted power is {lowest_w:.2} W); raise --power-cap to {} or more", (lowest_w * 100.0).ceil() / 100.0)]
    PowerCap {
        region: String,
        cap_w: f64,
        lowest_w: f64,
    },
    /// No combination fits the time budget.
    #[error("no combination of settings fits the time budget of {budget_s:.6} s (reference {reference_s:.6} s){}; raise --max-slowdown above {:.2}% (e.g. --max-slowdown {:.0}%{}){}", if *capped { " under the power cap" } else { "" }, (budget_s / reference_s - 1.0) * 100.0, ((budget_s / reference_s - 1.0) * 100.0 + 5.0).ceil(), if *capped { ", or none" } else { "" }, if *capped { ", or raise --power-cap" } else { "" })]
    Infeasible {
        budget_s: f64,
        reference_s: f64,
        capped: bool,
    },
    /// A plan file that cannot be parsed.
    #[error(transparent)]
    PlanFile(#[from] powerperf_node::plan_file::PlanFileError),
    /// A slowdown text that is not `5%` or `0.05`.
    #[error("`{0}` is not a slowdown: write a percentage like 5% or a fraction like 0.05")]
    BadSlowdown(String),
}

/// Parse a slowdown bound: `5%` → 0.05, `0.05` → 0.05, `none` → no bound.
///
/// # Errors
/// [`DvfsError::BadSlowdown`] for other text or a negative value.
pub fn parse_slowdown(text: &str) -> Result<Option<f64>, DvfsError> {
    let t = text.trim();
    if t.eq_ignore_ascii_case("none") || t.eq_ignore_ascii_case("inf") {
        return Ok(None);
    }
    let v = if let Some(p) = t.strip_suffix('%') {
        p.trim().parse::<f64>().map(|v| v / 100.0)
    } else {
        t.parse::<f64>()
    }
    .map_err(|_| DvfsError::BadSlowdown(t.to_string()))?;
    if !(v >= 0.0 && v.is_finite()) {
        return Err(DvfsError::BadSlowdown(t.to_string()));
    }
    Ok(Some(v))
}

#[cfg(test)]
mod tests {
    #[test]
    fn slowdown_accepts_percent_and_fraction() {
        assert_eq!(super::parse_slowdown("5%").unwrap(), Some(0.05));
        assert_eq!(super::parse_slowdown("0.05").unwrap(), Some(0.05));
        assert_eq!(super::parse_slowdown("none").unwrap(), None);
        assert!(super::parse_slowdown("-1%").is_err());
        assert!(super::parse_slowdown("five")
            .unwrap_err()
            .to_string()
            .contains("`five`"));
    }
}
