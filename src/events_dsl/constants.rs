//! Machine constants: latencies and penalties in cycles per processor, each with its source
//! (`machine-constants/*.toml`, shipped inside the binary), selected by CPU vendor, family and
//! model, or read from a file given with `--constants` (that TOML format or a PerfExpert
//! `machine.properties`).

use std::collections::BTreeMap;
use std::path::Path;

use serde::Deserialize;

use super::error::{DslError, Pos};

/// `[processor]` of a constants file.
#[derive(Debug, Clone, PartialEq, Deserialize, Default)]
#[serde(deny_unknown_fields)]
pub struct Processor {
    pub name: String,
    /// `GenuineIntel`, `AuthenticAMD`, `ARM` (as `/proc/cpuinfo` `vendor_id`).
    pub vendor: Option<String>,
    /// `cpu family`.
    pub family: Option<u32>,
    /// `model` numbers the file applies to.
    #[serde(default)]
    pub models: Vec<u32>,
    pub source: Option<String>,
}

/// One constant.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Constant {
    pub value: f64,
    /// `cycles` for latencies, `Hz` for `CPU_freq`.
    pub unit: Option<String>,
    /// The paper, manual or measurement the value comes from.
    pub source: String,
}

/// A machine-constants file.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MachineConstants {
    pub processor: Processor,
    pub constants: BTreeMap<String, Constant>,
}

/// The shipped files, in selection order: (file name, text).
pub const BUILTIN: &[(&str, &str)] = &[
    (
        "amd-opteron-8358.toml",
        include_str!("../../machine-constants/amd-opteron-8358.toml"),
    ),
    (
        "perfexpert-amd-barcelona.toml",
        include_str!("../../machine-constants/perfexpert-amd-barcelona.toml"),
    ),
    (
        "perfexpert-intel-nehalem.toml",
        include_str!("../../machine-constants/perfexpert-intel-nehalem.toml"),
    ),
];

fn pos_of(text: &str, file: &str, byte: usize) -> Pos {
    let before = &text[..byte.min(text.len())];
    let line = before.matches('\n').count() + 1;
    let col = before
        .rsplit('\n')
        .next()
        .map(|l| l.chars().count())
        .unwrap_or(0)
        + 1;
    Pos {
        file: file.to_string(),
        line,
        col,
    }
}

/// Parse a constants TOML.
///
/// # Errors
/// [`DslError::Constants`] with the line and column of the TOML error.
pub fn parse_toml(text: &str, file: &str) -> Result<MachineConstants, DslError> {
    toml::from_str(text).map_err(|e| {
        let at = e.span().map(|s| s.start).unwrap_or(0);
        DslError::Constants {
            pos: pos_of(text, file, at),
            message: e.message().to_string(),
        }
    })
}

/// Parse a PerfExpert `machine.properties` (`name = number` lines, `#` comments; `version`
/// is metadata).
///
/// # Errors
/// [`DslError::Syntax`] naming the line, column and token of a malformed line.
pub fn parse_properties(text: &str, file: &str) -> Result<MachineConstants, DslError> {
    let mut constants = BTreeMap::new();
    for (ln, line) in text.lines().enumerate() {
        let t = line.trim();
        if t.is_empty() || t.starts_with('#') {
            continue;
        }
        let lead = line.len() - line.trim_start().len();
        let Some(eq) = line.find('=') else {
            return Err(DslError::syntax(
                Pos {
                    file: file.into(),
                    line: ln + 1,
                    col: lead + 1,
                },
                "expected `name = number`, found",
                t,
                None,
            ));
        };
        let name = line[..eq].trim();
        let val = line[eq + 1..].trim();
        if name == "version" {
            continue;
        }
        let vcol = line[..eq + 1].chars().count()
            + 1
            + (line[eq + 1..].len() - line[eq + 1..].trim_start().len());
        let v: f64 = val.parse().map_err(|_| {
            DslError::syntax(
                Pos {
                    file: file.into(),
                    line: ln + 1,
                    col: vcol,
                },
                "a constant must be a number, found",
                val,
                None,
            )
        })?;
        constants.insert(
            name.to_string(),
            Constant {
                value: v,
                unit: None,
                source: format!("{file} line {}", ln + 1),
            },
        );
    }
    Ok(MachineConstants {
        processor: Processor {
            name: file.to_string(),
            source: Some(file.to_string()),
            ..Default::default()
        },
        constants,
    })
}

/// Read `--constants FILE`: a `.properties` file is PerfExpert's format, anything else TOML.
///
/// # Errors
/// [`DslError::Io`] and the parse errors above.
pub fn load(path: &Path) -> Result<MachineConstants, DslError> {
    let text = std::fs::read_to_string(path).map_err(|source| DslError::Io {
        path: path.to_path_buf(),
        source,
    })?;
    let file = path.display().to_string();
    if file.ends_with(".properties") {
        parse_properties(&text, &file)
    } else {
        parse_toml(&text, &file)
    }
}

/// Every shipped constants file.
///
/// # Panics
/// Never for the shipped files (a test parses each of them).
pub fn builtin() -> Vec<(String, MachineConstants)> {
    BUILTIN
        .iter()
        .filter_map(|(n, t)| parse_toml(t, n).ok().map(|m| (n.to_string(), m)))
        .collect()
}

/// The shipped file for a CPU (vendor as `/proc/cpuinfo` `vendor_id`, family, model);
/// `None` when no file names it.
pub fn select(vendor: &str, family: u32, model: u32) -> Option<(String, MachineConstants)> {
    builtin().into_iter().find(|(_, m)| {
        m.processor
            .vendor
            .as_deref()
            .is_some_and(|v| v.eq_ignore_ascii_case(vendor))
            && m.processor.family == Some(family)
            && m.processor.models.contains(&model)
    })
}

impl MachineConstants {
    /// Values by name with the source of each, for [`super::alias::Resolver::constants`].
    pub fn as_map(&self) -> BTreeMap<String, (f64, String)> {
        self.constants
            .iter()
            .map(|(k, c)| (k.clone(), (c.value, c.source.clone())))
            .collect()
    }
}
