//! Event names as `perf stat -e` takes them: symbolic hardware and software events with
//! optional `:u`/`:k` modifiers, and raw `rNNNN` events (perf-list(1), "RAW HARDWARE EVENT
//! DESCRIPTOR").

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
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventKind {
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
    /// Unit of the value (`ns` for the clocks).
    pub unit: Option<&'static str>,
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

/// Parse one event name.
///
/// # Errors
/// [`EventParseError::Unknown`] for a name that is neither symbolic nor raw.
pub fn parse_event(text: &str, index: usize) -> Result<EventSpec, EventParseError> {
    let text = text.trim();
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
        (*k, *u)
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
        unit,
    })
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
    let names: Vec<String> = match list {
        Some(l) => l
            .split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(String::from)
            .collect(),
        None => DEFAULT_EVENTS.iter().map(|s| s.to_string()).collect(),
    };
    if names.is_empty() {
        return Err(EventParseError::Empty);
    }
    names
        .iter()
        .enumerate()
        .map(|(i, n)| parse_event(n, i + 1))
        .collect()
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
        assert_eq!(e[2].unit, Some("ns"));
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
