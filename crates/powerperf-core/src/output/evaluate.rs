//! `powerperf evaluate --format json`: [`EvaluateOutput`].

use crate::models::baseline::Versus;
use crate::models::scoring::TargetError;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The naive baseline of `evaluate --format json` (issue 21): its rule, its error per target
/// over the points it predicts, and how many held-out points it could not predict.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct BaselineOutput {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<TargetError>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<TargetError>,
    /// Held-out points the baseline cannot predict.
    pub refused: usize,
    /// The rule, in words.
    pub rule: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<TargetError>,
}

/// A held-out point the model did not predict, and why.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Refusal {
    /// The workload and knob values.
    pub point: String,
    pub reason: String,
}

/// What `evaluate --format json` prints (keys in alphabetical order, see
/// [`super::json_sorted`]). A target without a measurable error is left out.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct EvaluateOutput {
    /// Workload holdout with `auto`: per target (`time_s`, `power_w`, `energy_j`), how often
    /// each candidate was chosen by the nested cross-validation on the held-out workloads'
    /// training points (`chosen`), the chosen candidates' mean inner MAPE (`inner_mape_pct`)
    /// and the held-out MAPE (`outer_mape_pct`), percent (added by issue 41).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub auto_choice: Option<BTreeMap<String, crate::models::eval::AutoChoice>>,
    /// Error of `energy_j`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub energy: Option<TargetError>,
    /// The naive baseline on the same split (added by issue 21).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub baseline: Option<BaselineOutput>,
    /// Held-out points that could not be predicted (left out when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failures: Option<usize>,
    /// Held-out points in all, predicted or not (added by issue 21).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub held_out: Option<usize>,
    /// The model kind evaluated (`auto` resolved).
    pub model: String,
    /// Held-out points predicted.
    pub points: usize,
    /// Error of `power_w`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub power: Option<TargetError>,
    /// The protocol, in words.
    pub protocol: String,
    /// Each point the model did not predict, with the reason (left out when none).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Vec<Refusal>>,
    /// Error of `time_s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub time: Option<TargetError>,
    /// Per target (`time_s`, `power_w`, `energy_j`): the model's and the baseline's error and
    /// coverage, and their ratio on the points both predict (added by issue 21).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub versus_baseline: Option<BTreeMap<String, Versus>>,
}

impl EvaluateOutput {
    /// The summary of an evaluation.
    pub fn new(
        ev: &crate::models::eval::Evaluation,
        meta: &powerperf_format::set::SetMeta,
    ) -> Self {
        let t = |name: &str| ev.summary.targets.get(name).copied();
        let bs = crate::models::scoring::summarise(meta, &ev.baseline.results, "baseline");
        let b = |name: &str| bs.targets.get(name).copied();
        EvaluateOutput {
            auto_choice: (!ev.auto_choice.is_empty()).then(|| ev.auto_choice.clone()),
            baseline: Some(BaselineOutput {
                energy: b("energy_j"),
                power: b("power_w"),
                refused: ev.baseline.failures.len(),
                rule: ev.baseline.rule.clone(),
                time: b("time_s"),
            }),
            energy: t("energy_j"),
            failures: (!ev.failures.is_empty()).then_some(ev.failures.len()),
            held_out: Some(ev.held_out_points),
            model: ev.kind.name().to_string(),
            points: ev.summary.points,
            power: t("power_w"),
            protocol: ev.summary.protocol.clone(),
            refused: (!ev.failures.is_empty()).then(|| {
                ev.failures
                    .iter()
                    .map(|(point, reason)| Refusal {
                        point: point.clone(),
                        reason: reason.clone(),
                    })
                    .collect()
            }),
            time: t("time_s"),
            versus_baseline: Some(ev.versus(meta)),
        }
    }

    /// Parse the JSON `evaluate --format json` printed.
    ///
    /// # Errors
    /// Text that is not such JSON.
    pub fn from_json(text: &str) -> serde_json::Result<Self> {
        serde_json::from_str(text)
    }

    /// Pretty JSON, byte for byte what `evaluate --format json` printed before it had a type.
    ///
    /// # Errors
    /// Serialisation errors.
    pub fn to_json(&self) -> serde_json::Result<String> {
        super::json_sorted(self)
    }
}

/// The held-out error as a flat table (`--format csv|markdown` of `evaluate` and `fit`): one
/// row per target with a measured error, in the order `time_s`, `power_w`, `energy_j`.
pub fn error_table(
    targets: &std::collections::BTreeMap<String, crate::models::scoring::TargetError>,
) -> super::Table {
    let rows = powerperf_format::set::TARGETS
        .iter()
        .filter_map(|t| {
            let e = targets.get(*t)?;
            Some(vec![
                t.to_string(),
                e.mape_pct.to_string(),
                e.max_pct.to_string(),
                e.n.to_string(),
            ])
        })
        .collect();
    super::Table {
        header: ["target", "mape_pct", "max_pct", "n"]
            .map(String::from)
            .to_vec(),
        rows,
    }
}

/// The model beside its baseline as text (`evaluate` and `fit`): the rule, then per target
/// the model's MAPE and coverage, the baseline's, the total held out and the ratio on the
/// points both predict; then one line per target where the model loses to the baseline.
pub fn versus_text(rule: &str, versus: &BTreeMap<String, Versus>) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(s, "baseline on the same split: {rule}");
    let _ = writeln!(
        s,
        "{:<9} {:>13} {:>7} {:>16} {:>7} {:>9} {:>15} {:>7}",
        "target",
        "model MAPE_%",
        "points",
        "baseline MAPE_%",
        "points",
        "held out",
        "model/baseline",
        "on"
    );
    let f = |v: Option<f64>, d: usize| v.map_or("-".to_string(), |v| format!("{v:.d$}"));
    for t in powerperf_format::set::TARGETS {
        let Some(v) = versus.get(t) else { continue };
        let m = (v.model.n > 0).then_some(v.model.mape_pct);
        let b = (v.baseline.n > 0).then_some(v.baseline.mape_pct);
        let _ = writeln!(
            s,
            "{:<9} {:>13} {:>7} {:>16} {:>7} {:>9} {:>15} {:>7}",
            t,
            f(m, 3),
            v.model.n,
            f(b, 3),
            v.baseline.n,
            v.held_out,
            f(v.ratio, 3),
            v.common_n
        );
    }
    for t in powerperf_format::set::TARGETS {
        let Some(v) = versus.get(t) else { continue };
        if let Some(r) = v.ratio.filter(|r| *r > 1.0) {
            let _ = writeln!(
                s,
                "the model LOSES to its baseline on {t}: {r:.3}× the baseline's error on the {} points both predict",
                v.common_n
            );
        }
        if v.model.n < v.held_out {
            let _ = writeln!(
                s,
                "the model predicts {t} at {} of {} held-out points (the baseline at {})",
                v.model.n, v.held_out, v.baseline.n
            );
        }
    }
    s
}

/// [`error_table`] with the baseline beside it (issue 21): extra columns `baseline_mape_pct`,
/// `baseline_n`, `held_out` and `ratio` (model/baseline on the points both predict; empty
/// when none).
pub fn error_table_versus(
    targets: &BTreeMap<String, TargetError>,
    versus: &BTreeMap<String, Versus>,
) -> super::Table {
    let mut t = error_table(targets);
    t.header
        .extend(["baseline_mape_pct", "baseline_n", "held_out", "ratio"].map(String::from));
    for row in &mut t.rows {
        let v = versus.get(&row[0]).copied().unwrap_or_default();
        row.extend([
            if v.baseline.n > 0 {
                v.baseline.mape_pct.to_string()
            } else {
                String::new()
            },
            v.baseline.n.to_string(),
            v.held_out.to_string(),
            v.ratio.map_or(String::new(), |r| r.to_string()),
        ]);
    }
    t
}
