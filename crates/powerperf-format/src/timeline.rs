//! The timeline: one row per sample (`t_ns` since the run's start on CLOCK_MONOTONIC,
//! `dur_ns` the sample's length), one f64 column per counter and energy domain (null where
//! a read failed), written to `RUN/timeline.parquet` with polars.
//!
//! While the run goes on, every sample is also appended to `RUN/timeline.journal.csv`
//! ([`Journal`]), flushed every 100 ms: if powerperf is killed or the disk fills up before
//! the Parquet file is written, the samples written so far stay readable ([`read_run`]).

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
    // A file or link already at the path is replaced, never followed (issue 18).
    let f = crate::safe_file::replace(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    ParquetWriter::new(&mut w)
        .finish(df)
        .with_context(|| format!("cannot write {}", path.display()))?;
    w.flush()
        .with_context(|| format!("cannot write {}", path.display()))
}

/// File name of the journal in the run directory.
pub const JOURNAL: &str = "timeline.journal.csv";

/// How often the journal is flushed to the file.
const JOURNAL_FLUSH_NS: u64 = 100_000_000;

/// The timeline as it is sampled, appended to `RUN/timeline.journal.csv` (CSV: header
/// `t_ns,dur_ns,<column>…`, one row per sample, an empty field for a failed read), flushed
/// every 100 ms. After the first write error (a full disk) it stops and keeps the error;
/// what it wrote before stays readable. Removed once `timeline.parquet` is written.
pub struct Journal {
    w: csv::Writer<std::fs::File>,
    /// One field's text, reused.
    field: Vec<u8>,
    /// Rows known to be in the file (flushed).
    rows: u64,
    /// Rows appended since the last flush.
    pending: u64,
    last_flush_ns: u64,
    failed: Option<String>,
}

impl Journal {
    /// Create the journal and write its header.
    ///
    /// # Errors
    /// The file cannot be created or the header written.
    pub fn create(path: &Path, names: &[String]) -> Result<Self> {
        let f = crate::safe_file::replace(path)
            .with_context(|| format!("cannot create {}", path.display()))?;
        let mut w = csv::WriterBuilder::new()
            .buffer_capacity(64 * 1024)
            .from_writer(f);
        let header = ["t_ns", "dur_ns"]
            .into_iter()
            .chain(names.iter().map(String::as_str));
        w.write_record(header)
            .and_then(|_| w.flush().map_err(csv::Error::from))
            .with_context(|| format!("cannot write {}", path.display()))?;
        Ok(Journal {
            w,
            field: Vec::with_capacity(32),
            rows: 0,
            pending: 0,
            last_flush_ns: 0,
            failed: None,
        })
    }

    /// Append one sample (`values` in column order); flushes when 100 ms of samples have
    /// accumulated. Does nothing after a failed write.
    pub fn append(&mut self, t_ns: u64, dur_ns: u64, values: &[Option<f64>]) {
        if self.failed.is_some() {
            return;
        }
        // Fields formatted into one reused buffer: no allocation per sample (the sampler
        // thread's cost counts against powerperf's own CPU time, docs/overhead.md).
        use std::io::Write as _;
        let field = |w: &mut csv::Writer<std::fs::File>, buf: &mut Vec<u8>| {
            let r = w.write_field(&buf[..]);
            buf.clear();
            r
        };
        let buf = &mut self.field;
        buf.clear();
        let _ = write!(buf, "{t_ns}");
        let mut r = field(&mut self.w, buf);
        let _ = write!(buf, "{dur_ns}");
        r = r.and_then(|_| field(&mut self.w, buf));
        for v in values {
            if let Some(x) = v {
                let _ = write!(buf, "{x}");
            }
            r = r.and_then(|_| field(&mut self.w, buf));
        }
        if let Err(e) = r.and_then(|_| self.w.write_record(std::iter::empty::<&[u8]>())) {
            self.failed = Some(e.to_string());
            return;
        }
        self.pending += 1;
        if t_ns.saturating_sub(self.last_flush_ns) >= JOURNAL_FLUSH_NS {
            self.last_flush_ns = t_ns;
            self.flush();
        }
    }

    fn flush(&mut self) {
        match self.w.flush() {
            Ok(()) => {
                self.rows += self.pending;
                self.pending = 0;
            }
            Err(e) => self.failed = Some(e.to_string()),
        }
    }

    /// Flush what is buffered; returns the rows known to be in the file and the first
    /// write error.
    pub fn finish(mut self) -> (u64, Option<String>) {
        if self.failed.is_none() {
            self.flush();
        }
        (self.rows, self.failed)
    }
}

/// Read a journal back (`timeline.journal.csv`). A last row cut short by a crash or a full
/// disk is dropped; returns the timeline and the number of rows dropped.
///
/// # Errors
/// A missing file or a header without `t_ns,dur_ns`.
pub fn read_journal(path: &Path) -> Result<(Timeline, usize)> {
    let mut r = csv::ReaderBuilder::new()
        .flexible(true)
        .from_path(path)
        .with_context(|| format!("cannot open {}", path.display()))?;
    let header = r
        .headers()
        .with_context(|| format!("cannot read {}", path.display()))?
        .clone();
    if header.len() < 2 || &header[0] != "t_ns" || &header[1] != "dur_ns" {
        anyhow::bail!("{} does not start with t_ns,dur_ns", path.display());
    }
    let names: Vec<String> = header.iter().skip(2).map(String::from).collect();
    let mut t = Timeline::new(&names);
    let mut dropped = 0;
    for rec in r.records() {
        let parsed = rec.ok().filter(|r| r.len() == header.len()).and_then(|r| {
            let t_ns = r[0].parse::<u64>().ok()?;
            let dur = r[1].parse::<u64>().ok()?;
            let vals = r
                .iter()
                .skip(2)
                .map(|f| {
                    if f.is_empty() {
                        Ok(None)
                    } else {
                        f.parse().map(Some)
                    }
                })
                .collect::<Result<Vec<Option<f64>>, _>>()
                .ok()?;
            Some((t_ns, dur, vals))
        });
        match parsed {
            Some((t_ns, dur, vals)) => t.push(t_ns, dur, &vals),
            None => dropped += 1,
        }
    }
    Ok((t, dropped))
}

/// The timeline of a run directory: `timeline.parquet`, or, where it was never written
/// (powerperf killed, a full disk), the samples of `timeline.journal.csv`. `None` when the
/// run has neither.
///
/// # Errors
/// An unreadable file.
pub fn read_run(dir: &Path) -> Result<Option<DataFrame>> {
    let pq = dir.join(crate::run::TIMELINE);
    if pq.is_file() {
        return read_parquet(&pq).map(Some);
    }
    let j = dir.join(JOURNAL);
    if j.is_file() {
        return read_journal(&j)?.0.to_frame().map(Some);
    }
    Ok(None)
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

macro_rules! typed_column {
    ($name:ident, $accessor:ident, $t:ty) => {
        #[doc = concat!("The values of a `", stringify!($t), "` column of a run's Parquet table (null where")]
        /// the writer left none).
        ///
        /// # Errors
        /// No such column, or a column of another type.
        pub fn $name(df: &DataFrame, name: &str) -> Result<Vec<Option<$t>>> {
            let c = df
                .column(name)
                .with_context(|| format!("no column `{name}`"))?;
            let ca = c.$accessor().with_context(|| {
                format!("column `{name}` is not {}", stringify!($t))
            })?;
            Ok(ca.iter().collect())
        }
    };
}
typed_column!(column_u32, u32, u32);
typed_column!(column_i32, i32, i32);
typed_column!(column_u64, u64, u64);

/// A column's values with nulls as the type's default (0, ""), for tables whose writer
/// leaves no nulls in that column.
pub fn or_default<T: Default>(values: Vec<Option<T>>) -> Vec<T> {
    values.into_iter().map(Option::unwrap_or_default).collect()
}

/// The values of a string column of a run's Parquet table (null where the writer left none).
///
/// # Errors
/// No such column, or a column that is not a string column.
pub fn column_str(df: &DataFrame, name: &str) -> Result<Vec<Option<String>>> {
    let c = df
        .column(name)
        .with_context(|| format!("no column `{name}`"))?;
    let ca = c
        .str()
        .with_context(|| format!("column `{name}` is not a string column"))?;
    Ok(ca.iter().map(|v| v.map(String::from)).collect())
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

    #[test]
    fn journal_round_trips_and_drops_a_cut_last_row() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(JOURNAL);
        let names = vec!["task-clock".to_string(), "energy_package_0_j".to_string()];
        let mut j = Journal::create(&p, &names).unwrap();
        j.append(10_000_000, 10_000_000, &[Some(9.5e6), Some(0.25)]);
        j.append(20_000_000, 10_000_000, &[Some(9.9e6), None]);
        assert_eq!(j.finish(), (2, None));
        let (t, dropped) = read_journal(&p).unwrap();
        assert_eq!((t.t_ns.clone(), dropped), (vec![10_000_000, 20_000_000], 0));
        assert_eq!(t.columns[1].1, vec![Some(0.25), None]);
        // A row cut short by a crash or a full disk.
        use std::io::Write;
        let mut f = std::fs::OpenOptions::new().append(true).open(&p).unwrap();
        f.write_all(b"30000000,10000000,9.").unwrap();
        drop(f);
        let (t, dropped) = read_journal(&p).unwrap();
        assert_eq!((t.t_ns.len(), dropped), (2, 1));
        // read_run prefers the Parquet file and falls back to the journal.
        assert_eq!(read_run(dir.path()).unwrap().unwrap().height(), 2);
        let mut one = Timeline::new(&names);
        one.push(5, 5, &[Some(1.0), Some(2.0)]);
        one.write_parquet(&dir.path().join(crate::run::TIMELINE))
            .unwrap();
        assert_eq!(read_run(dir.path()).unwrap().unwrap().height(), 1);
    }

    #[test]
    fn journal_keeps_the_first_write_error() {
        // /dev/full fails every write with ENOSPC, as a full disk does.
        if !Path::new("/dev/full").exists() {
            println!("skipped: no /dev/full");
            return;
        }
        let f = std::fs::OpenOptions::new()
            .write(true)
            .open("/dev/full")
            .unwrap();
        let mut j = Journal {
            w: csv::WriterBuilder::new().buffer_capacity(16).from_writer(f),
            field: Vec::new(),
            rows: 0,
            pending: 0,
            last_flush_ns: 0,
            failed: None,
        };
        for i in 0..10 {
            j.append(i * JOURNAL_FLUSH_NS, JOURNAL_FLUSH_NS, &[Some(1.0)]);
        }
        let (rows, err) = j.finish();
        assert_eq!(rows, 0);
        assert!(err.unwrap().contains("No space left"));
    }
}
