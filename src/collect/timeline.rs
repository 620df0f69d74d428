//! The timeline: one row per sample (`t_ns` since the run's start on CLOCK_MONOTONIC,
//! `dur_ns` the sample's length), one f64 column per counter and energy domain (null where
//! a read failed), written to `RUN/timeline.parquet` with polars.

use anyhow::{Context, Result};
use polars::prelude::{Column, DataFrame, ParquetReader, ParquetWriter, SerReader};
use std::path::Path;

/// Samples in memory, column-major.
#[derive(Debug, Default, Clone)]
pub struct Timeline {
    pub t_ns: Vec<u64>,
    pub dur_ns: Vec<u64>,
    /// (column name, values), each as long as `t_ns`.
    pub columns: Vec<(String, Vec<Option<f64>>)>,
}

impl Timeline {
    /// An empty timeline with these value columns.
    pub fn new(names: &[String]) -> Self {
        Timeline {
            t_ns: vec![],
            dur_ns: vec![],
            columns: names.iter().map(|n| (n.clone(), vec![])).collect(),
        }
    }

    /// Append one sample; `values` in column order.
    pub fn push(&mut self, t_ns: u64, dur_ns: u64, values: &[Option<f64>]) {
        self.t_ns.push(t_ns);
        self.dur_ns.push(dur_ns);
        for ((_, col), v) in self.columns.iter_mut().zip(values) {
            col.push(*v);
        }
    }

    /// Drop a column by name.
    pub fn remove(&mut self, name: &str) {
        self.columns.retain(|(n, _)| n != name);
    }

    /// As a polars DataFrame.
    ///
    /// # Errors
    /// Column length mismatches (a bug).
    pub fn to_frame(&self) -> Result<DataFrame> {
        let mut cols: Vec<Column> = vec![
            Column::new("t_ns".into(), &self.t_ns),
            Column::new("dur_ns".into(), &self.dur_ns),
        ];
        for (name, vals) in &self.columns {
            cols.push(Column::new(name.as_str().into(), vals));
        }
        DataFrame::new(self.t_ns.len(), cols).context("building the timeline table")
    }

    /// Write `path` as Parquet.
    ///
    /// # Errors
    /// I/O errors with the path.
    pub fn write_parquet(&self, path: &Path) -> Result<()> {
        write_frame(&mut self.to_frame()?, path)
    }
}

/// Write a table as Parquet through a buffer (the writer issues many small writes), and
/// report a failed final flush (a full disk) instead of losing it in a drop.
///
/// # Errors
/// I/O errors with the path.
pub fn write_frame(df: &mut DataFrame, path: &Path) -> Result<()> {
    use std::io::Write;
    let f =
        std::fs::File::create(path).with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    ParquetWriter::new(&mut w)
        .finish(df)
        .with_context(|| format!("cannot write {}", path.display()))?;
    w.flush()
        .with_context(|| format!("cannot write {}", path.display()))
}

/// Read a timeline Parquet file back as a DataFrame.
///
/// # Errors
/// A missing or unreadable file.
pub fn read_parquet(path: &Path) -> Result<DataFrame> {
    let f = std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    ParquetReader::new(f)
        .finish()
        .with_context(|| format!("cannot read {}", path.display()))
}

/// The values of an f64 column of a timeline (null where a read failed).
///
/// # Errors
/// No such column, or a column that is not f64.
pub fn column_f64(df: &DataFrame, name: &str) -> Result<Vec<Option<f64>>> {
    let c = df
        .column(name)
        .with_context(|| format!("the timeline has no column `{name}`"))?;
    let ca = c
        .f64()
        .with_context(|| format!("column `{name}` is not f64"))?;
    Ok(ca.iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_through_parquet_with_nulls() {
        let mut t = Timeline::new(&["task-clock".into(), "energy_package_0_j".into()]);
        t.push(10_000_000, 10_000_000, &[Some(9.5e6), Some(0.25)]);
        t.push(20_000_000, 10_000_000, &[Some(9.9e6), None]);
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("timeline.parquet");
        t.write_parquet(&p).unwrap();
        let df = read_parquet(&p).unwrap();
        assert_eq!(df.height(), 2);
        let e = df.column("energy_package_0_j").unwrap().f64().unwrap();
        assert_eq!(e.get(0), Some(0.25));
        assert_eq!(e.get(1), None);
        assert_eq!(
            df.column("t_ns").unwrap().u64().unwrap().get(1),
            Some(20_000_000)
        );
    }
}
