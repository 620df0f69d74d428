//! One alias table from the event names definition files use (PAPI presets, Linux perf
//! generic names, Intel/AMD/Arm PMU names, LIKWID fixed counters) to the columns of a
//! powerperf run (`instructions`, `cycles`, `task-clock`, `energy_package_0_j`, …).
//!
//! A name is looked up as written first; only when the run has no such column are its
//! aliases tried. Entries marked approximate in [`ALIASES`] count a close but not identical
//! quantity; `events check` shows which alias a name resolved through.

use std::collections::BTreeMap;

/// `(run column, names that mean it, exact?)`. The run column is the perf event name
/// `powerperf collect` records (or a timeline column). Sources: PAPI presets in
/// `papi_events.csv`, perf's generic hardware events (perf_event_open(2)), Intel SDM
/// vol. 3B ch. 20 architectural events, Arm ARM D7 (PMUv3 common events), ARMv7 PMU events
/// (Cortex-A15 TRM ch. 11), AMD PPR (Zen 4) via perf's amdzen4 JSON, LIKWID fixed counters.
pub const ALIASES: &[(&str, &[&str], bool)] = &[
    (
        "instructions",
        &[
            "PAPI_TOT_INS",
            "INST_RETIRED",
            "INST_RETIRED.ANY",
            "INST_RETIRED_ANY",
            "INSTR_RETIRED_ANY",
            "INST_RETIRED.ANY_P",
            "INSTRUCTION_RETIRED",
            "INSTRUCTIONS_RETIRED",
            "RETIRED_INSTRUCTIONS",
            "ex_ret_instr",
            "instructions:u",
            "cpu@instructions@",
        ],
        true,
    ),
    (
        "cycles",
        &[
            "PAPI_TOT_CYC",
            "CPU_CYCLES",
            "cpu-cycles",
            "CPU_CLK_UNHALTED.THREAD",
            "CPU_CLK_UNHALTED.CORE",
            "CPU_CLK_UNHALTED_CORE",
            "CPU_CLK_UNHALTED.THREAD_P",
            "UNHALTED_CORE_CYCLES",
            "CPU_CLOCKS_UNHALTED",
            "ACTUAL_CPU_CLOCK",
            "ls_not_halted_cyc",
            "cpu@cycles@",
        ],
        true,
    ),
    (
        "ref-cycles",
        &[
            "UNHALTED_REFERENCE_CYCLES",
            "PAPI_REF_CYC",
            "CPU_CLK_UNHALTED.REF_TSC",
            "CPU_CLK_UNHALTED_REF",
            "MAX_CPU_CLOCK",
        ],
        true,
    ),
    (
        "branches",
        &[
            "PAPI_BR_INS",
            "branch-instructions",
            "BR_INST_RETIRED.ALL_BRANCHES",
            "BR_RETIRED",
            "RETIRED_BRANCH_INSTRUCTIONS",
            "ex_ret_brn",
            "BR_INST_RETIRED_ALL_BRANCHES",
            "BRANCH_INSTRUCTIONS_RETIRED",
        ],
        true,
    ),
    (
        "branches",
        &["BRANCH_PRED", "BR_PRED", "PC_WRITE_RETIRED"],
        false,
    ),
    (
        "branch-misses",
        &[
            "PAPI_BR_MSP",
            "BR_MISP_RETIRED.ALL_BRANCHES",
            "BR_MIS_PRED_RETIRED",
            "RETIRED_MISPREDICTED_BRANCH_INSTRUCTIONS",
            "ex_ret_brn_misp",
            "BR_MISP_RETIRED_ALL_BRANCHES",
            "MISPREDICTED_BRANCH_RETIRED",
        ],
        true,
    ),
    ("branch-misses", &["BRANCH_MISPRED", "BR_MIS_PRED"], false),
    (
        "cache-references",
        &["LONGEST_LAT_CACHE.REFERENCE", "LLC_REFERENCES"],
        true,
    ),
    (
        "cache-misses",
        &["LONGEST_LAT_CACHE.MISS", "LLC_MISSES"],
        true,
    ),
    ("cache-misses", &["PAPI_L3_TCM"], false),
    (
        "L1-dcache-loads",
        &[
            "PAPI_LD_INS",
            "MEM_INST_RETIRED.ALL_LOADS",
            "L1D_CACHE_ACCESS",
            "L1D_CACHE",
            "PAPI_L1_DCA",
        ],
        false,
    ),
    (
        "L1-dcache-load-misses",
        &[
            "PAPI_L1_LDM",
            "PAPI_L1_DCM",
            "L1D_CACHE_REFILL",
            "L1D.REPLACEMENT",
        ],
        false,
    ),
    (
        "L1-icache-load-misses",
        &["PAPI_L1_ICM", "L1I_CACHE_REFILL", "ICACHE.MISSES"],
        false,
    ),
    ("L1-icache-loads", &["PAPI_L1_ICA", "L1I_CACHE"], false),
    (
        "dTLB-load-misses",
        &[
            "PAPI_TLB_DM",
            "L1D_TLB_REFILL",
            "DTLB_LOAD_MISSES.WALK_COMPLETED",
        ],
        false,
    ),
    (
        "iTLB-load-misses",
        &[
            "PAPI_TLB_IM",
            "L1I_TLB_REFILL",
            "ITLB_MISSES.WALK_COMPLETED",
        ],
        false,
    ),
    (
        "stalled-cycles-frontend",
        &["STALL_FRONTEND", "PAPI_STL_ICY"],
        false,
    ),
    (
        "stalled-cycles-backend",
        &["STALL_BACKEND", "PAPI_RES_STL"],
        false,
    ),
    ("task-clock", &["cpu-clock"], false),
    ("context-switches", &["cs"], true),
    ("cpu-migrations", &["migrations"], true),
    ("page-faults", &["faults"], true),
    (
        "energy_package_0_j",
        &[
            "energy-pkg",
            "power@energy-pkg@",
            "power/energy-pkg/",
            "PWR_PKG_ENERGY",
        ],
        true,
    ),
    (
        "energy_dram_0_j",
        &[
            "energy-ram",
            "power@energy-ram@",
            "power/energy-ram/",
            "PWR_DRAM_ENERGY",
        ],
        true,
    ),
    (
        "energy_core_0_j",
        &["energy-cores", "power@energy-cores@", "PWR_PP0_ENERGY"],
        true,
    ),
];

/// Names whose value is the run's wall-clock duration in seconds (perf's `duration_time` is
/// used in seconds by metrics; LIKWID's `time` is the RDTSC runtime in seconds).
pub const DURATION_NAMES: &[&str] = &["duration_time", "time", "duration_s"];

/// Strip a perf PMU wrapper (`cpu@NAME@`, `cpu/NAME/`, `NAME:u`) down to the event name.
fn strip_pmu(name: &str) -> &str {
    let n = name.trim();
    if let Some((_, rest)) = n.split_once('@') {
        if let Some(inner) = rest.strip_suffix('@') {
            if !inner.contains(',') && !inner.contains('=') {
                return inner;
            }
        }
    }
    if let Some(rest) = n.strip_prefix("cpu/").and_then(|r| r.strip_suffix('/')) {
        return rest;
    }
    n.strip_suffix(":u")
        .or_else(|| n.strip_suffix(":k"))
        .unwrap_or(n)
}

/// The run columns `name` may mean, best first, with whether the match is exact.
///
/// Names compare without regard to case, and libpfm's `EVENT:UMASK` matches perf's
/// `EVENT.UMASK` (`CPU_CLK_UNHALTED:THREAD_P` is `CPU_CLK_UNHALTED.THREAD_P`).
pub fn candidates(name: &str) -> Vec<(&'static str, bool)> {
    let stripped = strip_pmu(name);
    let dotted = stripped.replace(':', ".");
    let mut out = Vec::new();
    for (col, names, exact) in ALIASES {
        if *col == stripped
            || names.iter().any(|n| {
                n.eq_ignore_ascii_case(name)
                    || n.eq_ignore_ascii_case(stripped)
                    || n.eq_ignore_ascii_case(&dotted)
            })
        {
            out.push((*col, *exact));
        }
    }
    out
}

/// How a name was resolved.
#[derive(Debug, Clone, PartialEq)]
#[non_exhaustive]
pub enum Resolution {
    /// A constant (from `--constants` or a machine-constants file).
    Constant { value: f64, source: String },
    /// A run column of that name.
    Column { column: String, value: f64 },
    /// Through the alias table (`exact` false for an approximate alias).
    Alias {
        column: String,
        value: f64,
        exact: bool,
    },
    /// The run's duration in seconds.
    Duration { value: f64 },
    /// No value; `reason` from the run's `missing` list when it names the event.
    Missing { reason: Option<String> },
}

impl Resolution {
    /// The value, when there is one.
    pub fn value(&self) -> Option<f64> {
        match self {
            Resolution::Constant { value, .. }
            | Resolution::Column { value, .. }
            | Resolution::Alias { value, .. }
            | Resolution::Duration { value } => Some(*value),
            Resolution::Missing { .. } => None,
        }
    }
}

impl std::fmt::Display for Resolution {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Resolution::Constant { value, source } => write!(f, "constant {value} ({source})"),
            Resolution::Column { column, .. } => write!(f, "column `{column}`"),
            Resolution::Alias {
                column,
                exact: true,
                ..
            } => write!(f, "alias of column `{column}`"),
            Resolution::Alias {
                column,
                exact: false,
                ..
            } => write!(f, "approximate alias of column `{column}`"),
            Resolution::Duration { .. } => f.write_str("run duration, s"),
            Resolution::Missing { reason: Some(r) } => write!(f, "missing: {r}"),
            Resolution::Missing { reason: None } => f.write_str("missing"),
        }
    }
}

/// Values a definition set is evaluated on: run values by name, constants, the duration, and
/// the reasons the run gives for events it lacks.
#[derive(Debug, Clone, Default)]
pub struct Resolver {
    /// Event and column values (a run's totals, or `--values`).
    pub values: BTreeMap<String, f64>,
    /// Constants by name, with where each came from.
    pub constants: BTreeMap<String, (f64, String)>,
    /// Wall-clock duration, seconds.
    pub duration_s: Option<f64>,
    /// Why events are missing (a run's `missing`).
    pub missing: BTreeMap<String, String>,
}

impl Resolver {
    /// Resolve `name`: constants, then an exact column, then the duration names, then aliases.
    pub fn resolve(&self, name: &str) -> Resolution {
        if let Some((v, s)) = self.constants.get(name) {
            return Resolution::Constant {
                value: *v,
                source: s.clone(),
            };
        }
        if let Some(v) = self.values.get(name) {
            return Resolution::Column {
                column: name.to_string(),
                value: *v,
            };
        }
        if DURATION_NAMES.contains(&name) {
            if let Some(d) = self.duration_s {
                return Resolution::Duration { value: d };
            }
        }
        let cands = candidates(name);
        for (col, exact) in &cands {
            if let Some(v) = self.values.get(*col) {
                return Resolution::Alias {
                    column: col.to_string(),
                    value: *v,
                    exact: *exact,
                };
            }
        }
        let reason = self
            .missing
            .get(name)
            .map(|r| format!("{name}: {r}"))
            .or_else(|| {
                cands
                    .iter()
                    .find_map(|(c, _)| self.missing.get(*c).map(|r| format!("{c}: {r}")))
            });
        Resolution::Missing { reason }
    }

    /// The value of `name`, if any.
    pub fn get(&self, name: &str) -> Option<f64> {
        self.resolve(name).value()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exact_column_wins_then_aliases() {
        let mut r = Resolver::default();
        r.values.insert("instructions".into(), 10.0);
        r.values.insert("PAPI_TOT_INS".into(), 99.0);
        assert_eq!(r.get("PAPI_TOT_INS"), Some(99.0));
        r.values.remove("PAPI_TOT_INS");
        assert_eq!(
            r.resolve("PAPI_TOT_INS"),
            Resolution::Alias {
                column: "instructions".into(),
                value: 10.0,
                exact: true
            }
        );
        assert_eq!(r.get("cpu@instructions@"), Some(10.0));
        assert_eq!(r.get("INST_RETIRED.ANY"), Some(10.0));
    }

    #[test]
    fn missing_reason_follows_alias() {
        let mut r = Resolver::default();
        r.missing
            .insert("branch-misses".into(), "<not supported>".into());
        assert_eq!(
            r.resolve("PAPI_BR_MSP"),
            Resolution::Missing {
                reason: Some("branch-misses: <not supported>".into())
            }
        );
        r.duration_s = Some(2.0);
        assert_eq!(r.get("duration_time"), Some(2.0));
        r.constants
            .insert("L1_dlat".into(), (3.0, "Moore 2012".into()));
        assert_eq!(r.get("L1_dlat"), Some(3.0));
    }
}
