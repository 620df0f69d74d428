//! The output layer: one [`OutputFormat`] for every command that prints a summary, the
//! exporters of flat tables ([`Exporter`]: CSV, Markdown), and one typed output struct per
//! command ([`predict::PredictOutput`], [`fit::FitOutput`], [`plan::PlanOutput`],
//! [`evaluate::EvaluateOutput`]): what `--format json` prints, and what plots, notebooks and
//! tests read back with the same types.
//!
//! In the style of hyperfine's `export/` (a trait per exporter, an enum of formats). The
//! name `export` is kept for trace export. This module is library code: it does not depend
//! on clap or on [`crate::cli`], which parses `--format` into an [`OutputFormat`].

pub mod commands;
pub mod evaluate;
pub mod fit;
pub mod plan;
pub mod predict;

use serde::Serialize;
use std::fmt;

/// The formats of a command's summary (`--format`). `--help` lists the names only
/// (`[possible values: table, json, csv, markdown]`), so each value's doc comment is kept
/// out of it (`help = None`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[cfg_attr(feature = "clap", derive(clap::ValueEnum))]
pub enum OutputFormat {
    /// Aligned text for people (`text` is an old name of it).
    #[default]
    #[cfg_attr(feature = "clap", value(alias = "text", help = None::<&str>))]
    Table,
    /// One JSON document for scripts.
    #[cfg_attr(feature = "clap", value(help = None::<&str>))]
    Json,
    /// Comma-separated values, one header line.
    #[cfg_attr(feature = "clap", value(help = None::<&str>))]
    Csv,
    /// A Markdown table.
    #[cfg_attr(feature = "clap", value(help = None::<&str>))]
    Markdown,
}

impl OutputFormat {
    /// Every format, in the order `--help` lists them.
    pub const ALL: [OutputFormat; 4] = [
        OutputFormat::Table,
        OutputFormat::Json,
        OutputFormat::Csv,
        OutputFormat::Markdown,
    ];

    /// The formats of a command whose output is not one flat table.
    pub const TABLE_JSON: [OutputFormat; 2] = [OutputFormat::Table, OutputFormat::Json];

    /// The name `--format` takes.
    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Table => "table",
            OutputFormat::Json => "json",
            OutputFormat::Csv => "csv",
            OutputFormat::Markdown => "markdown",
        }
    }

    /// `Ok` when `command` can print this format (one of `supported`), else the error that
    /// says which formats it prints.
    ///
    /// # Errors
    /// [`Unsupported`] for a format not in `supported`.
    pub fn check(self, command: &str, supported: &[OutputFormat]) -> Result<(), Unsupported> {
        if supported.contains(&self) {
            Ok(())
        } else {
            Err(Unsupported {
                command: command.to_string(),
                format: self,
                supported: supported.to_vec(),
            })
        }
    }
}

impl fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for OutputFormat {
    type Err = String;

    /// A format by its name, or by its old name (`text` for `table`).
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "table" | "text" => Ok(OutputFormat::Table),
            "json" => Ok(OutputFormat::Json),
            "csv" => Ok(OutputFormat::Csv),
            "markdown" => Ok(OutputFormat::Markdown),
            _ => Err(format!(
                "unknown output format `{s}` (expected table, json, csv or markdown)"
            )),
        }
    }
}

/// A format a command does not print.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("`{command} --format {format}` is not available: {command} prints {} (its output is not one flat table)", list(.supported))]
pub struct Unsupported {
    pub command: String,
    pub format: OutputFormat,
    pub supported: Vec<OutputFormat>,
}

fn list(f: &[OutputFormat]) -> String {
    let names: Vec<&str> = f.iter().map(|f| f.name()).collect();
    match names.split_last() {
        None => String::new(),
        Some((last, [])) => (*last).to_string(),
        Some((last, rest)) => format!("{} or {last}", rest.join(", ")),
    }
}

/// Pretty JSON of `value` with the keys of every object in alphabetical order: the layout
/// of the summaries that were built as `serde_json::Value`s (predict, fit, plan, evaluate),
/// kept byte for byte.
///
/// # Errors
/// Serialisation errors (a map with non-string keys).
pub fn json_sorted<T: Serialize>(value: &T) -> serde_json::Result<String> {
    serde_json::to_string_pretty(&serde_json::to_value(value)?)
}

/// A flat table: a header and rows of cells, for the [`Exporter`]s.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Table {
    pub header: Vec<String>,
    pub rows: Vec<Vec<String>>,
}

/// One exporter of a flat [`Table`] (hyperfine's `Exporter`).
pub trait Exporter {
    /// The table as this exporter's text.
    fn export(&self, table: &Table) -> String;
}

/// CSV (RFC 4180 quoting, `\n` line ends).
pub struct CsvExporter;

/// A GitHub-flavoured Markdown table.
pub struct MarkdownExporter;

impl Exporter for CsvExporter {
    /// Through the `csv` crate's writer (quotes only where needed, `\n` line ends).
    fn export(&self, t: &Table) -> String {
        let mut w = csv::WriterBuilder::new()
            .terminator(csv::Terminator::Any(b'\n'))
            .flexible(true)
            .from_writer(Vec::new());
        for line in std::iter::once(&t.header).chain(&t.rows) {
            // Writing to a Vec cannot fail; a record that could not be written is left out.
            let _ = w.write_record(line);
        }
        w.into_inner()
            .map(|b| String::from_utf8_lossy(&b).into_owned())
            .unwrap_or_default()
    }
}

impl Exporter for MarkdownExporter {
    fn export(&self, t: &Table) -> String {
        let row = |cells: &[String]| {
            let cells: Vec<String> = cells
                .iter()
                .map(|c| c.replace('|', "\\|").replace('\n', " "))
                .collect();
            format!("| {} |\n", cells.join(" | "))
        };
        let mut o = row(&t.header);
        o += &format!("|{}\n", "---|".repeat(t.header.len()));
        for r in &t.rows {
            o += &row(r);
        }
        o
    }
}

impl Table {
    /// The table in `format` (CSV or Markdown); `None` for the other formats.
    pub fn render(&self, format: OutputFormat) -> Option<String> {
        match format {
            OutputFormat::Csv => Some(CsvExporter.export(self)),
            OutputFormat::Markdown => Some(MarkdownExporter.export(self)),
            OutputFormat::Table | OutputFormat::Json => None,
        }
    }
}

/// Quote a CSV cell when needed (RFC 4180).
pub fn csv_cell(s: &str) -> String {
    if s.contains([',', '"', '\n']) {
        format!("\"{}\"", s.replace('"', "\"\""))
    } else {
        s.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_and_old_names_parse() {
        for f in OutputFormat::ALL {
            assert_eq!(f.name().parse::<OutputFormat>(), Ok(f));
        }
        assert_eq!("text".parse(), Ok(OutputFormat::Table));
        assert!("html".parse::<OutputFormat>().is_err());
    }

    #[test]
    fn unsupported_names_what_is() {
        let e = OutputFormat::Csv
            .check("fit", &[OutputFormat::Table, OutputFormat::Json])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("`fit --format csv`") && e.contains("table or json"),
            "{e}"
        );
        assert!(OutputFormat::Json
            .check("fit", &[OutputFormat::Table, OutputFormat::Json])
            .is_ok());
    }

    #[test]
    fn csv_and_markdown_of_a_table() {
        let t = Table {
            header: vec!["a".into(), "b".into()],
            rows: vec![vec!["x,y".into(), "1|2".into()]],
        };
        assert_eq!(t.render(OutputFormat::Csv).unwrap(), "a,b\n\"x,y\",1|2\n");
        assert_eq!(
            t.render(OutputFormat::Markdown).unwrap(),
            "| a | b |\n|---|---|\n| x,y | 1\\|2 |\n"
        );
        assert_eq!(t.render(OutputFormat::Json), None);
    }
}
