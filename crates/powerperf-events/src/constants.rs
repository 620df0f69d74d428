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
        include_str!("../../../machine-constants/amd-opteron-8358.toml"),
    ),
    (
        "perfexpert-amd-barcelona.toml",
        include_str!("../../../machine-constants/perfexpert-amd-barcelona.toml"),
    ),
    (
        "arm-cortex-a15.toml",
        include_str!("../../../machine-constants/arm-cortex-a15.toml"),
    ),
    (
        "perfexpert-intel-nehalem.toml",
        include_str!("../../../machine-constants/perfexpert-intel-nehalem.toml"),
    ),
    (
        "amd-epyc-zen4-genoa.toml",
        include_str!("../../../machine-constants/amd-epyc-zen4-genoa.toml"),
    ),
    (
        "amd-epyc-zen3-milan.toml",
        include_str!("../../../machine-constants/amd-epyc-zen3-milan.toml"),
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

/// The libpfm4 PMU name PAPI's `papi_events.csv` uses for a CPU (its `CPU,<pmu>` section),
/// from vendor, family and model (on Arm: `ARM`, architecture, MIDR part number). Model
/// lists follow libpfm4's `pfmlib_intel_*.c` / `pfmlib_amd64.c` / `pfmlib_arm*.c` tables;
/// `None` for a CPU not in this table.
pub fn papi_pmu_name(vendor: &str, family: u32, model: u32) -> Option<&'static str> {
    match (vendor, family) {
        ("GenuineIntel", 6) => Some(match model {
            26 | 30 | 31 => "nhm",
            46 => "nhm_ex",
            37 => "wsm",
            44 | 47 => "wsm_dp",
            42 => "snb",
            45 => "snb_ep",
            58 => "ivb",
            62 => "ivb_ep",
            60 | 69 | 70 => "hsw",
            63 => "hsw_ep",
            61 | 71 => "bdw",
            79 | 86 => "bdw_ep",
            78 | 94 | 142 | 158 | 165 | 166 => "skl",
            85 => "skx",
            106 | 108 => "icx",
            125 | 126 => "icl",
            143 => "spr",
            207 => "emr",
            173 | 174 => "gnr",
            151 | 154 => "adl_glc",
            87 => "knl",
            133 => "knm",
            _ => return None,
        }),
        ("AuthenticAMD", 16) => Some(match model {
            2 => "amd64_fam10h_barcelona",
            4..=6 => "amd64_fam10h_shanghai",
            8 | 9 => "amd64_fam10h_istanbul",
            _ => return None,
        }),
        ("AuthenticAMD", 21) => Some("amd64_fam15h_interlagos"),
        ("AuthenticAMD", 22) => Some("amd64_fam16h"),
        ("AuthenticAMD", 23) => Some(if model < 0x30 {
            "amd64_fam17h_zen1"
        } else {
            "amd64_fam17h_zen2"
        }),
        ("AuthenticAMD", 25) => Some(match model {
            0x00..=0x0f | 0x20..=0x5f => "amd64_fam19h_zen3",
            _ => "amd64_fam19h_zen4",
        }),
        ("AuthenticAMD", 26) => Some("amd64_fam1ah_zen5"),
        ("ARM", _) => Some(match model {
            0xc07 => "arm_ac7",
            0xc08 => "arm_ac8",
            0xc09 => "arm_ac9",
            0xc0f => "arm_ac15",
            0xd03 => "arm_ac53",
            0xd07 => "arm_ac57",
            0xd08 => "arm_ac72",
            0xd0b => "arm_ac76",
            0xd0c => "arm_n1",
            0xd49 => "arm_n2",
            0xd40 => "arm_v1",
            0xd4f => "arm_v2",
            _ => return None,
        }),
        _ => None,
    }
}
