//! Event names as `perf stat -e` takes them (perf-list(1)): symbolic hardware and software
//! events with optional `:u`/`:k` modifiers, raw `rNNNN` events ("RAW HARDWARE EVENT
//! DESCRIPTOR"), PMU events `pmu/name/` and `pmu/term=value,.../` resolved through sysfs
//! ("PARAMETERIZED EVENTS"), and groups `{a,b}` scheduled together ("EVENT GROUPS").

use serde::{Deserialize, Serialize};
use thiserror::Error;

/// The events `perf stat` counts by default, minus the ones that only make sense per CPU.
pub const DEFAULT_EVENTS: [&str; 9] = [
    "task-clock",
    "context-switches",
    "page-faults",
    "cycles",
    "instructions",
    "cache-references",
    "cache-misses",
    "branches",
    "branch-misses",
];

/// perf_event_attr type of an event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventKind {
    /// A PMU from sysfs: `pmu/event/` (a named event of that PMU) or `pmu/term=v,.../`.
    Pmu {
        pmu: String,
        event: Option<String>,
        terms: Vec<(String, u64)>,
    },
    /// PERF_TYPE_HARDWARE with a PERF_COUNT_HW_* config.
    Hardware(u64),
    /// PERF_TYPE_SOFTWARE with a PERF_COUNT_SW_* config.
    Software(u64),
    /// PERF_TYPE_RAW with a model-specific config.
    Raw(u64),
}

/// A parsed `-e` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventSpec {
    /// As the user wrote it (used as the timeline column name).
    pub name: String,
    pub kind: EventKind,
    /// `:u` given: count user space only.
    pub user_only: bool,
    /// `:k` given: count kernel only.
    pub kernel_only: bool,
    /// Unit of the value (`ns` for the clocks; from sysfs `.unit` for PMU events).
    pub unit: Option<String>,
    /// Index of the `{...}` group the event belongs to, counting from 0.
    pub group: Option<usize>,
}

/// Errors from parsing an event list.
#[derive(Debug, Error, PartialEq)]
#[non_exhaustive]
pub enum EventParseError {
    #[error("unknown event `{name}` (position {index} in the list); `powerperf collect` knows perf's symbolic names ({known}) and raw events `rNNNN` (hex)")]
    Unknown {
        name: String,
        index: usize,
        known: String,
    },
    #[error("event `{name}`: unknown modifier `{modifier}` (known: u, k)")]
    Modifier { name: String, modifier: String },
    #[error("empty event list")]
    Empty,
    #[error(
        "event `{name}`: {why} (PMU events are written `pmu/event/` or `pmu/term=0x1,term2=3/`)"
    )]
    PmuSyntax { name: String, why: String },
    #[error("unbalanced `{{`/`}}` in the event list `{list}`")]
    Braces { list: String },
}

// PERF_COUNT_HW_* and PERF_COUNT_SW_* values from include/uapi/linux/perf_event.h.
const SYMBOLIC: &[(&str, EventKind, Option<&str>)] = &[
    ("cycles", EventKind::Hardware(0), None),
    ("cpu-cycles", EventKind::Hardware(0), None),
    ("instructions", EventKind::Hardware(1), None),
    ("cache-references", EventKind::Hardware(2), None),
    ("cache-misses", EventKind::Hardware(3), None),
    ("branches", EventKind::Hardware(4), None),
    ("branch-instructions", EventKind::Hardware(4), None),
    ("branch-misses", EventKind::Hardware(5), None),
    ("bus-cycles", EventKind::Hardware(6), None),
    ("stalled-cycles-frontend", EventKind::Hardware(7), None),
    ("stalled-cycles-backend", EventKind::Hardware(8), None),
    ("ref-cycles", EventKind::Hardware(9), None),
    ("cpu-clock", EventKind::Software(0), Some("ns")),
    ("task-clock", EventKind::Software(1), Some("ns")),
    ("page-faults", EventKind::Software(2), None),
    ("faults", EventKind::Software(2), None),
    ("context-switches", EventKind::Software(3), None),
    ("cs", EventKind::Software(3), None),
    ("cpu-migrations", EventKind::Software(4), None),
    ("migrations", EventKind::Software(4), None),
    ("minor-faults", EventKind::Software(5), None),
    ("major-faults", EventKind::Software(6), None),
    ("alignment-faults", EventKind::Software(7), None),
    ("emulation-faults", EventKind::Software(8), None),
];

/// perf's symbolic event names with their kind (`cycles`, `task-clock`, …), aliases included.
pub fn symbolic() -> impl Iterator<Item = (&'static str, EventKind)> {
    SYMBOLIC.iter().map(|(n, k, _)| (*n, k.clone()))
}

/// Parse one event name.
///
/// # Errors
/// [`EventParseError::Unknown`] for a name that is neither symbolic nor raw.
pub fn parse_event(text: &str, index: usize) -> Result<EventSpec, EventParseError> {
    let text = text.trim();
    if let Some((pmu, rest)) = text.split_once('/') {
        return parse_pmu_event(text, pmu, rest);
    }
    let (base, mods) = match text.split_once(':') {
        Some((b, m)) => (b, m),
        None => (text, ""),
    };
    let mut user_only = false;
    let mut kernel_only = false;
    for c in mods.chars() {
        match c {
            'u' => user_only = true,
            'k' => kernel_only = true,
            _ => {
                return Err(EventParseError::Modifier {
                    name: text.into(),
                    modifier: c.to_string(),
                })
            }
        }
    }
    let lower = base.to_ascii_lowercase();
    let (kind, unit) = if let Some((_, k, u)) = SYMBOLIC.iter().find(|(n, _, _)| *n == lower) {
        (k.clone(), *u)
    } else if let Some(hex) = lower
        .strip_prefix('r')
        .filter(|h| !h.is_empty() && h.chars().all(|c| c.is_ascii_hexdigit()))
    {
        (
            EventKind::Raw(
                u64::from_str_radix(hex, 16).map_err(|_| EventParseError::Unknown {
                    name: text.into(),
                    index,
                    known: known(),
                })?,
            ),
            None,
        )
    } else {
        return Err(EventParseError::Unknown {
            name: text.into(),
            index,
            known: known(),
        });
    };
    Ok(EventSpec {
        name: text.to_string(),
        kind,
        user_only,
        kernel_only,
        unit: unit.map(String::from),
        group: None,
    })
}

fn parse_value(v: &str) -> Option<u64> {
    let v = v.trim();
    match v.strip_prefix("0x").or_else(|| v.strip_prefix("0X")) {
        Some(h) => u64::from_str_radix(h, 16).ok(),
        None => v.parse().ok(),
    }
}

fn parse_pmu_event(text: &str, pmu: &str, rest: &str) -> Result<EventSpec, EventParseError> {
    let err = |why: &str| EventParseError::PmuSyntax {
        name: text.into(),
        why: why.into(),
    };
    let (body, mods) = rest
        .rsplit_once('/')
        .ok_or_else(|| err("missing the closing `/`"))?;
    if pmu.is_empty() || body.is_empty() {
        return Err(err("empty PMU or event"));
    }
    let mut user_only = false;
    let mut kernel_only = false;
    for c in mods.trim_start_matches(':').chars() {
        match c {
            'u' => user_only = true,
            'k' => kernel_only = true,
            _ => {
                return Err(EventParseError::Modifier {
                    name: text.into(),
                    modifier: c.to_string(),
                })
            }
        }
    }
    let (event, terms) = if body.contains('=') {
        let mut terms = Vec::new();
        for t in body.split(',') {
            let (k, v) = t
                .split_once('=')
                .ok_or_else(|| err(&format!("term `{t}` has no `=`")))?;
            let v = parse_value(v).ok_or_else(|| err(&format!("`{v}` is not a number")))?;
            terms.push((k.trim().to_string(), v));
        }
        (None, terms)
    } else {
        (Some(body.to_string()), vec![])
    };
    Ok(EventSpec {
        name: text.to_string(),
        kind: EventKind::Pmu {
            pmu: pmu.to_string(),
            event,
            terms,
        },
        user_only,
        kernel_only,
        unit: None,
        group: None,
    })
}

/// Split an event list at top-level commas, keeping `pmu/a=1,b=2/` and `{a,b}` together;
/// returns each event with its group index.
fn split_list(list: &str) -> Result<Vec<(String, Option<usize>)>, EventParseError> {
    fn flush(cur: &mut String, group: Option<usize>, out: &mut Vec<(String, Option<usize>)>) {
        let t = cur.trim().to_string();
        if !t.is_empty() {
            out.push((t, group));
        }
        cur.clear();
    }
    let mut out = Vec::new();
    let mut cur = String::new();
    let mut in_pmu = false;
    let mut group: Option<usize> = None;
    let mut groups = 0usize;
    for c in list.chars() {
        match c {
            '/' => {
                in_pmu = !in_pmu;
                cur.push(c);
            }
            '{' if !in_pmu => {
                if group.is_some() {
                    return Err(EventParseError::Braces { list: list.into() });
                }
                flush(&mut cur, group, &mut out);
                group = Some(groups);
                groups += 1;
            }
            '}' if !in_pmu => {
                if group.is_none() {
                    return Err(EventParseError::Braces { list: list.into() });
                }
                flush(&mut cur, group, &mut out);
                group = None;
            }
            ',' if !in_pmu => flush(&mut cur, group, &mut out),
            _ => cur.push(c),
        }
    }
    if group.is_some() {
        return Err(EventParseError::Braces { list: list.into() });
    }
    flush(&mut cur, group, &mut out);
    Ok(out)
}

fn known() -> String {
    SYMBOLIC
        .iter()
        .map(|(n, _, _)| *n)
        .collect::<Vec<_>>()
        .join(", ")
}

/// Parse a comma-separated `-e` list (or the defaults when `None`).
///
/// # Errors
/// The first bad name, with its position.
pub fn parse_list(list: Option<&str>) -> Result<Vec<EventSpec>, EventParseError> {
    let names: Vec<(String, Option<usize>)> = match list {
        Some(l) => split_list(l)?,
        None => DEFAULT_EVENTS
            .iter()
            .map(|s| (s.to_string(), None))
            .collect(),
    };
    if names.is_empty() {
        return Err(EventParseError::Empty);
    }
    names
        .iter()
        .enumerate()
        .map(|(i, (n, g))| {
            parse_event(n, i + 1).map(|mut e| {
                e.group = *g;
                e
            })
        })
        .collect()
}

/// Keep the first of events listed more than once (by name, the timeline's column name):
/// returns the names dropped with their counts, for a note (`-e task-clock,task-clock` would
/// otherwise give the timeline two columns of one name, which cannot be written).
pub fn dedup_by_name<T>(items: &mut Vec<T>, name: impl Fn(&T) -> &str) -> Option<String> {
    let mut counts: Vec<(String, usize)> = Vec::new();
    items.retain(|it| {
        let n = name(it);
        match counts.iter_mut().find(|(c, _)| c == n) {
            Some((_, k)) => {
                *k += 1;
                false
            }
            None => {
                counts.push((n.to_string(), 1));
                true
            }
        }
    });
    let dups: Vec<String> = counts
        .into_iter()
        .filter(|(_, k)| *k > 1)
        .map(|(n, k)| format!("`{n}` ({k} times)"))
        .collect();
    (!dups.is_empty()).then(|| {
        format!(
            "events listed more than once are counted once: {}",
            dups.join(", ")
        )
    })
}

/// Whether an event was counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum EventStatus {
    Counted,
    /// Counted part of the time; the total is scaled by time_enabled/time_running.
    Multiplexed,
    NotSupported,
    PermissionDenied,
    /// Opened but never scheduled on the PMU (perf's `<not counted>`).
    NotCounted,
    /// Supported here, but the run gave it no sample (a GPM metric of a run with no span of
    /// at least 200 ms, `collect::gpm::MIN_WINDOW`): printed `<no sample>`, the reason in
    /// `reason`.
    NoSample,
}

impl EventStatus {
    /// True when the event has a value.
    pub fn has_value(self) -> bool {
        matches!(self, EventStatus::Counted | EventStatus::Multiplexed)
    }
    /// The marker `perf stat` prints in place of a value.
    pub fn perf_marker(self) -> &'static str {
        match self {
            EventStatus::Counted | EventStatus::Multiplexed => "",
            EventStatus::NotSupported => "<not supported>",
            EventStatus::PermissionDenied => "<permission denied>",
            EventStatus::NotCounted => "<not counted>",
            EventStatus::NoSample => "<no sample>",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_symbolic_raw_and_modifiers() {
        let e = parse_list(Some("cycles:u,r01c2,task-clock")).unwrap();
        assert_eq!(e[0].kind, EventKind::Hardware(0));
        assert!(e[0].user_only);
        assert_eq!(e[1].kind, EventKind::Raw(0x01c2));
        assert_eq!(e[2].unit.as_deref(), Some("ns"));
    }

    #[test]
    fn parses_pmu_events_and_groups() {
        let e = parse_list(Some(
            "{cycles,instructions},cpu/event=0xc2,umask=0x1/u,power/energy-pkg/,task-clock",
        ))
        .unwrap();
        assert_eq!(e.len(), 5);
        assert_eq!(
            (e[0].group, e[1].group, e[2].group, e[4].group),
            (Some(0), Some(0), None, None)
        );
        assert_eq!(
            e[2].kind,
            EventKind::Pmu {
                pmu: "cpu".into(),
                event: None,
                terms: vec![("event".into(), 0xc2), ("umask".into(), 1)]
            }
        );
        assert!(e[2].user_only);
        assert_eq!(
            e[3].kind,
            EventKind::Pmu {
                pmu: "power".into(),
                event: Some("energy-pkg".into()),
                terms: vec![]
            }
        );
        assert!(parse_list(Some("{cycles,instructions")).is_err());
        assert!(parse_list(Some("cpu/event=zz/"))
            .unwrap_err()
            .to_string()
            .contains("`zz` is not a number"));
    }

    #[test]
    fn unknown_event_names_position_and_name() {
        let err = parse_list(Some("cycles,frobnicate")).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.contains("`frobnicate`") && msg.contains("position 2"),
            "{msg}"
        );
    }

    #[test]
    fn defaults_are_perf_stat_defaults() {
        let e = parse_list(None).unwrap();
        assert_eq!(e.len(), 9);
        assert!(e.iter().any(|e| e.name == "branch-misses"));
    }
}
