//! LCPI: PerfExpert's local cycles-per-instruction breakdown (Burtscher et al., SC10; Moore
//! 2012). For each of six categories, an upper bound on the cycles per instruction spent
//! there: Σ (event count × latency of that level) / instructions. The definitions live in
//! `events/lcpi/*.txt` (shipped inside the binary), one file per PMU naming scheme.

use std::collections::BTreeMap;

use super::{load_str, DefinitionSet, LoadOptions, Problem, Syntax};

/// The six categories, as (definition name, label).
pub const CATEGORIES: &[(&str, &str)] = &[
    ("data_accesses", "data accesses"),
    ("instruction_accesses", "instruction accesses"),
    ("data_tlb", "data TLB"),
    ("instruction_tlb", "instruction TLB"),
    ("branches", "branches"),
    ("floating_point", "floating point"),
];

/// Name of the overall CPI definition in each file.
pub const OVERALL: &str = "overall_cpi";

/// The shipped LCPI files: (name, text). Tried in this order.
pub const FILES: &[(&str, &str)] = &[
    ("papi", include_str!("../../../events/lcpi/papi.txt")),
    ("intel", include_str!("../../../events/lcpi/intel.txt")),
    ("amd", include_str!("../../../events/lcpi/amd.txt")),
    ("arm", include_str!("../../../events/lcpi/arm.txt")),
    ("armv7", include_str!("../../../events/lcpi/armv7.txt")),
];

/// One row of the table.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Definition name (`data_accesses`, …).
    pub category: String,
    /// Human label (`data accesses`, …).
    pub label: String,
    /// Cycles per instruction (upper bound), or why it could not be computed.
    pub value: Result<f64, String>,
}

/// An LCPI table.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    /// Which definition file the values come from (`papi`, `intel`, `amd`, `arm`, `armv7`,
    /// or a user file).
    pub source: String,
    /// Measured cycles per instruction, when computable.
    pub overall_cpi: Result<f64, String>,
    pub rows: Vec<Row>,
}

impl std::fmt::Display for Table {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(
            f,
            "LCPI (upper bounds, cycles per instruction; definitions: {})",
            self.source
        )?;
        let show = |v: &Result<f64, String>| match v {
            Ok(x) => format!("{x:.4}"),
            Err(e) => e.clone(),
        };
        writeln!(f, "  {:<22} {}", "overall CPI", show(&self.overall_cpi))?;
        for r in &self.rows {
            writeln!(f, "  {:<22} {}", r.label, show(&r.value))?;
        }
        Ok(())
    }
}

/// The shipped definition set called `name` (`papi`, `intel`, `amd`, `arm`, `armv7`).
///
/// # Errors
/// None for the shipped files (a test compiles each); `None` for an unknown name.
pub fn builtin(name: &str) -> Option<DefinitionSet> {
    FILES.iter().find(|(n, _)| *n == name).and_then(|(n, t)| {
        load_str(
            t,
            &format!("events/lcpi/{n}.txt"),
            Some(Syntax::Infix),
            &LoadOptions::default(),
        )
        .ok()
    })
}

/// Names the shipped machine-constants files define (latencies such as `L1_dlat`).
fn is_constant_name(n: &str) -> bool {
    super::constants::builtin()
        .iter()
        .any(|(_, m)| m.constants.contains_key(n))
        || n.ends_with("_lat")
}

fn problem_text(p: &Option<Problem>) -> String {
    match p {
        Some(Problem::Missing(m)) => {
            let (consts, events): (Vec<&String>, Vec<&String>) =
                m.iter().partition(|n| is_constant_name(n));
            let mut parts = Vec::new();
            if !events.is_empty() {
                parts.push(format!(
                    "missing events {}",
                    events
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            if !consts.is_empty() {
                parts.push(format!(
                    "missing constants {} (give --constants FILE)",
                    consts
                        .iter()
                        .map(|s| s.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                ));
            }
            format!("not computable: {}", parts.join("; "))
        }
        Some(p) => format!("not computable: {p}"),
        None => "not computable".into(),
    }
}

/// The LCPI table of `set` (a file defining [`CATEGORIES`] and [`OVERALL`]) on `lookup`
/// (events and machine constants by name: e.g. an [`super::alias::Resolver`]).
pub fn table_with(
    set: &DefinitionSet,
    source: &str,
    lookup: &dyn Fn(&str) -> Option<f64>,
) -> Table {
    let values = set.evaluate(lookup);
    let get = |name: &str| -> Result<f64, String> {
        match values.iter().find(|v| v.name == name) {
            Some(v) => v.value.ok_or_else(|| problem_text(&v.problem)),
            None => Err(format!("not computable: {source} does not define `{name}`")),
        }
    };
    Table {
        source: source.to_string(),
        overall_cpi: get(OVERALL),
        rows: CATEGORIES
            .iter()
            .map(|(c, l)| Row {
                category: c.to_string(),
                label: l.to_string(),
                value: get(c),
            })
            .collect(),
    }
}

/// The LCPI table from a name → value lookup (events, through the alias table, and machine
/// constants such as `L1_dlat`): every shipped file is evaluated and the one with the most
/// computable categories is shown (ties: the first in [`FILES`]). A category whose events
/// are missing reads `not computable: missing events X, Y`.
pub fn table(lookup: &dyn Fn(&str) -> Option<f64>) -> Table {
    let mut best: Option<(usize, Table)> = None;
    for (name, _) in FILES {
        let Some(set) = builtin(name) else { continue };
        let t = table_with(&set, name, lookup);
        let score = t.rows.iter().filter(|r| r.value.is_ok()).count() * 2
            + usize::from(t.overall_cpi.is_ok());
        if best.as_ref().is_none_or(|(s, _)| score > *s) {
            best = Some((score, t));
        }
    }
    best.map(|b| b.1).unwrap_or_else(|| Table {
        source: "none".into(),
        overall_cpi: Err("no LCPI definitions".into()),
        rows: Vec::new(),
    })
}

/// What [`table_for_totals`] reads of a run: its event totals. powerperf's
/// `store::run::RunTotals` implements it (this crate does not know the run format).
pub trait Totals {
    /// Value by event name and by timeline column name (counts, or joules for energy).
    fn values(&self) -> &BTreeMap<String, f64>;
    /// Events without a value, with the reason.
    fn missing(&self) -> &BTreeMap<String, String>;
    /// Wall-clock duration of the run, seconds.
    fn duration_s(&self) -> f64;
}

/// The LCPI table of a run's totals (`store::run::load_totals`), with machine constants
/// (e.g. from [`super::constants::select`] or [`super::constants::load`]); event names reach
/// the run's columns through the alias table, `duration_time` is the run's duration.
pub fn table_for_totals(
    totals: &dyn Totals,
    constants: Option<&super::constants::MachineConstants>,
) -> Table {
    let r = super::alias::Resolver {
        values: totals.values().clone(),
        constants: constants.map(|m| m.as_map()).unwrap_or_default(),
        duration_s: Some(totals.duration_s()),
        missing: totals.missing().clone(),
    };
    table(&|n: &str| r.get(n))
}
