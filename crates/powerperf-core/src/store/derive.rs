//! Derived counters over a training set: every definition of an event-DSL file (PAPI,
//! perf, LIKWID, PerfExpert, infix; `docs/events.md`) evaluated on every point, through the
//! vectorised evaluator, and added to the set as a counter of kind `rate` (a derived metric is
//! already a ratio or a rate: `fit` uses it as a feature as it stands).
//!
//! The columns a definition may name: each counter of the set (by its set name, e.g.
//! `cpu_cycles`, and by the name its source gave it, e.g. `CPU_CYCLES`, when the caller
//! passes those), the knobs (`core_freq_mhz`), `time_s` as the duration (`duration_time`), and
//! the alias table (`PAPI_TOT_INS` → `instructions`, …); constants come from a
//! machine-constants file.

use anyhow::{bail, Result};
use powerperf_events::alias::Resolver;
use powerperf_events::DefinitionSet;
use powerperf_format::set::{CounterKind, TrainingSet};
use std::collections::BTreeMap;

/// What [`derive`] added.
#[derive(Debug, Clone, Default)]
pub struct Derived {
    /// The new counter names, in definition order.
    pub added: Vec<String>,
    /// (counter, points where it is undefined, the events it lacked there).
    pub undefined: Vec<(String, usize, Vec<String>)>,
}

/// Evaluate every definition of `defs` on every point of `set` and add each as a counter
/// named after its definition. `source_names` maps other names (a dataset's own column
/// names) to set counters; `constants` are the machine constants by name (with their source).
///
/// # Errors
/// A definition whose name is already a column of the set; a definition that is undefined
/// on every point (nothing it needs is in the set).
pub fn derive(
    set: &mut TrainingSet,
    defs: &DefinitionSet,
    source_names: &BTreeMap<String, String>,
    constants: BTreeMap<String, (f64, String)>,
) -> Result<Derived> {
    let n = set.points.len();
    let mut cols: BTreeMap<String, Vec<f64>> = BTreeMap::new();
    let column = |f: &dyn Fn(&powerperf_format::set::Point) -> Option<f64>| -> Vec<f64> {
        set.points
            .iter()
            .map(|p| f(p).unwrap_or(f64::NAN))
            .collect()
    };
    for name in set.meta.counters.keys() {
        cols.insert(name.clone(), column(&|p| p.counters.get(name).copied()));
    }
    for k in &set.meta.knobs {
        cols.insert(k.clone(), column(&|p| p.knobs.get(k).copied()));
    }
    for (alias, counter) in source_names {
        if let Some(c) = cols.get(counter).cloned() {
            cols.entry(alias.clone()).or_insert(c);
        }
    }
    let dur_s = column(&|p| p.time_s);
    let resolver = Resolver {
        values: cols
            .iter()
            .map(|(k, v)| (k.clone(), v.iter().copied().filter(|x| x.is_finite()).sum()))
            .collect(),
        constants,
        duration_s: Some(1.0),
        missing: BTreeMap::new(),
    };
    let bound = defs.bind_columns(&resolver, &cols, &dur_s);
    let out = defs.evaluate_columns(&|name: &str| bound.get(name).map(|c| c.as_slice()), n);
    let taken = set.column_names()?;
    let mut derived = Derived::default();
    for (i, (d, vals)) in defs.definitions.iter().zip(out).enumerate() {
        if taken.contains(&d.name) {
            bail!(
                "{}: definition `{}` has the name of a column the set already has; rename it",
                defs.file,
                d.name
            );
        }
        let bad = vals.iter().filter(|x| !x.is_finite()).count();
        let lacking: Vec<String> = defs
            .needs(i)
            .into_iter()
            .filter(|v| !bound.contains_key(v))
            .collect();
        if bad == n {
            derived.undefined.push((d.name.clone(), n, lacking));
            continue;
        }
        if bad > 0 {
            derived.undefined.push((d.name.clone(), bad, lacking));
        }
        for (p, x) in set.points.iter_mut().zip(&vals) {
            if x.is_finite() {
                p.counters.insert(d.name.clone(), *x);
            }
        }
        set.meta.counters.insert(d.name.clone(), CounterKind::Rate);
        derived.added.push(d.name.clone());
    }
    if derived.added.is_empty() {
        let why: Vec<String> = derived
            .undefined
            .iter()
            .map(|(name, _, lack)| {
                if lack.is_empty() {
                    format!("{name} (not finite)")
                } else {
                    format!("{name} (needs {})", lack.join(", "))
                }
            })
            .collect();
        bail!(
            "{}: no definition has a value on any point of the set: {}",
            defs.file,
            why.join("; ")
        );
    }
    Ok(derived)
}
/// `import --derive FILE`: load the definitions of `file` (in `syntax`, or the syntax its
/// name or content says), choose the machine constants (`constants` when given, else the
/// machine-constants file of the import spec's `[machine]` CPU vendor, family and model
/// when one matches, else none), [`derive`] them on `set`, and return the notes `import`
/// prints: the constants used, the counters added, and each one undefined on some points
/// with why.
///
/// # Errors
/// An unreadable definition or constants file, or a definition that cannot be evaluated
/// ([`derive`]).
pub fn derive_file(
    set: &mut TrainingSet,
    file: &std::path::Path,
    syntax: Option<powerperf_events::Syntax>,
    constants: Option<&std::path::Path>,
    machine: Option<&super::import::MachineSpec>,
    source_names: &BTreeMap<String, String>,
) -> Result<Vec<String>> {
    let mut notes = Vec::new();
    let defs =
        powerperf_events::load_file(file, syntax, &powerperf_events::LoadOptions::default())?;
    let constants = match (constants, machine) {
        (Some(p), _) => {
            let m = powerperf_events::constants::load(p)?;
            notes.push(format!(
                "constants: {} ({} values)",
                p.display(),
                m.constants.len()
            ));
            m.as_map()
        }
        (
            None,
            Some(super::import::MachineSpec {
                cpu_vendor: Some(v),
                cpu_family: Some(f),
                cpu_model_number: Some(m),
                ..
            }),
        ) => match powerperf_events::constants::select(v, *f, *m) {
            Some((name, c)) => {
                notes.push(format!(
                    "constants: machine-constants/{name} (the spec's [machine])"
                ));
                c.as_map()
            }
            None => Default::default(),
        },
        _ => Default::default(),
    };
    let d = derive(set, &defs, source_names, constants)?;
    notes.push(format!(
        "derived from {}: {}",
        file.display(),
        d.added.join(", ")
    ));
    for (name, bad, lacking) in &d.undefined {
        let why = if lacking.is_empty() {
            "not finite (e.g. a division by zero)".to_string()
        } else {
            format!("needs {}", lacking.join(", "))
        };
        notes.push(format!(
            "derived `{name}`: undefined on {bad} of {} points ({why})",
            set.points.len()
        ));
    }
    Ok(notes)
}
