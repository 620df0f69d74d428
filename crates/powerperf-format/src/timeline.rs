//! The timeline: one row per sample (`t_ns` since the run's start on CLOCK_MONOTONIC,
//! `dur_ns` the sample's length), one f64 column per counter and energy domain (null where
//! a read failed), written to `RUN/timeline.parquet` with polars.
//!
//! While the run goes on, every sample is also appended to `RUN/timeline.journal.csv`
//! ([`Journal`]), flushed every 100 ms: if powerperf is killed or the disk fills up before
//! the Parquet file is written, the samples written so far stay readable ([`read_run`]).
//!
//! Memory stays bounded however long the run: [`TimelineWriter`] keeps at most
//! [`WRITE_BUFFER_ROWS`] rows and writes each full buffer as a Parquet row group to an
//! unnamed file on disk; `timeline.parquet` is written from it at the end, one buffer at a
//! time. Readers of a whole run read it in chunks of that size ([`for_each_chunk`]).

use anyhow::{Context, Result};
use polars::io::parquet::write::BatchedWriter;
use polars::prelude::{Column, DataFrame, ParquetReader, ParquetWriter, SerReader};
use std::path::Path;

/// File name of the timeline inside a run directory. The timeline module owns its file
/// names ([`TIMELINE`], [`JOURNAL`]) and imports nothing of [`crate::run`], so the run
/// directory's modules import it, never the other way.
pub const TIMELINE: &str = "timeline.parquet";

/// Rows [`TimelineWriter`] keeps in memory before it writes them as a row group (and the
/// chunk size of [`for_each_chunk`]): 64 Ki rows, 16 + 16 × columns bytes each (about
/// 13 MB with perf stat's default events and RAPL), 65 s of samples at the 1 ms minimum
/// interval.
pub const WRITE_BUFFER_ROWS: usize = 65_536;

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

    /// Rows held.
    pub fn len(&self) -> usize {
        self.t_ns.len()
    }

    /// No rows.
    pub fn is_empty(&self) -> bool {
        self.t_ns.is_empty()
    }

    /// Drop every row, keep the columns (and the vectors' capacity).
    pub fn clear(&mut self) {
        self.t_ns.clear();
        self.dur_ns.clear();
        for (_, v) in &mut self.columns {
            v.clear();
        }
    }

    /// A timeline table read back (`t_ns`, `dur_ns`, then the f64 value columns).
    ///
    /// # Errors
    /// A missing `t_ns` or `dur_ns`, or a value column that is not f64.
    pub fn from_frame(df: &DataFrame) -> Result<Self> {
        let t_ns = or_default(column_u64(df, "t_ns")?);
        let dur_ns = or_default(column_u64(df, "dur_ns")?);
        let mut columns = Vec::new();
        for c in df.columns() {
            let name = c.name().as_str();
            if name != "t_ns" && name != "dur_ns" {
                columns.push((name.to_string(), column_f64(df, name)?));
            }
        }
        Ok(Timeline {
            t_ns,
            dur_ns,
            columns,
        })
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
    let f = powerperf_node::safe_file::replace(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let mut w = std::io::BufWriter::new(f);
    ParquetWriter::new(&mut w)
        .finish(df)
        .with_context(|| format!("cannot write {}", path.display()))?;
    w.flush()
        .with_context(|| format!("cannot write {}", path.display()))
}

/// A `Write` over a buffered file that the [`TimelineWriter`] keeps a handle to, so that the
/// final flush's error is seen (polars' writer owns what it writes to).
#[derive(Clone)]
struct SharedFile(std::sync::Arc<std::sync::Mutex<std::io::BufWriter<std::fs::File>>>);

impl std::io::Write for SharedFile {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("timeline writer lock poisoned"))?
            .write(buf)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.0
            .lock()
            .map_err(|_| std::io::Error::other("timeline writer lock poisoned"))?
            .flush()
    }
}

/// The timeline as it is sampled, with bounded memory: rows are buffered up to a bound
/// ([`WRITE_BUFFER_ROWS`]) and each full buffer is written as a Parquet row group to an
/// unnamed file in the run directory ([`powerperf_node::safe_file::anonymous`]: nothing is left
/// behind when powerperf is killed, and readers keep reading the journal until the end).
/// [`TimelineWriter::finish`] writes `timeline.parquet` from it, one buffer at a time,
/// without the columns [`TimelineWriter::remove`] named. After a write error (a full disk)
/// it stops writing and buffering and keeps the error.
pub struct TimelineWriter {
    buf: Timeline,
    bound: usize,
    /// The unnamed file and polars' writer on it; `None` where no file could be made (rows
    /// are then kept in memory until the end, as before the bound).
    spill: Option<(SharedFile, BatchedWriter<SharedFile>)>,
    /// Rows pushed.
    rows: u64,
    /// The most rows the buffer held at once.
    max_buffered: usize,
    dropped: Vec<String>,
    failed: Option<String>,
}

impl TimelineWriter {
    /// A writer with the [`WRITE_BUFFER_ROWS`] bound whose row groups go to an unnamed file
    /// in `dir`.
    ///
    /// # Errors
    /// The file cannot be created or the writer started.
    pub fn create(dir: &Path, names: &[String]) -> Result<Self> {
        Self::with_bound(dir, names, WRITE_BUFFER_ROWS)
    }

    /// [`TimelineWriter::create`] with another bound (at least 1 row).
    ///
    /// # Errors
    /// As [`TimelineWriter::create`].
    pub fn with_bound(dir: &Path, names: &[String], bound: usize) -> Result<Self> {
        let f = powerperf_node::safe_file::anonymous(dir).with_context(|| {
            format!(
                "cannot create a temporary timeline file in {}",
                dir.display()
            )
        })?;
        let shared = SharedFile(std::sync::Arc::new(std::sync::Mutex::new(
            std::io::BufWriter::new(f),
        )));
        let buf = Timeline::new(names);
        let schema = buf.to_frame()?.schema().as_ref().clone();
        let w = ParquetWriter::new(shared.clone())
            .batched(&schema)
            .context("starting the timeline's Parquet writer")?;
        Ok(TimelineWriter {
            buf,
            bound: bound.max(1),
            spill: Some((shared, w)),
            rows: 0,
            max_buffered: 0,
            dropped: Vec::new(),
            failed: None,
        })
    }

    /// A writer that keeps every row in memory until [`TimelineWriter::finish`] (where no
    /// temporary file can be created).
    pub fn in_memory(names: &[String]) -> Self {
        TimelineWriter {
            buf: Timeline::new(names),
            bound: usize::MAX,
            spill: None,
            rows: 0,
            max_buffered: 0,
            dropped: Vec::new(),
            failed: None,
        }
    }

    /// Number of value columns (as created; [`TimelineWriter::remove`] takes effect at the
    /// end).
    pub fn columns(&self) -> usize {
        self.buf.columns.len()
    }

    /// Rows pushed so far.
    pub fn rows(&self) -> u64 {
        self.rows
    }

    /// Rows in memory now.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// The most rows that were in memory at once.
    pub fn max_buffered(&self) -> usize {
        self.max_buffered
    }

    /// Whether rows stream to disk (false: kept in memory, [`TimelineWriter::in_memory`]).
    pub fn streams(&self) -> bool {
        self.spill.is_some()
    }

    /// Append one sample (`values` in column order); writes a row group when the buffer is
    /// full.
    pub fn push(&mut self, t_ns: u64, dur_ns: u64, values: &[Option<f64>]) {
        self.rows += 1;
        if self.failed.is_some() {
            return;
        }
        self.buf.push(t_ns, dur_ns, values);
        self.max_buffered = self.max_buffered.max(self.buf.len());
        if self.buf.len() >= self.bound {
            self.spill_buffer();
        }
    }

    /// Write the buffer as a row group and empty it.
    fn spill_buffer(&mut self) {
        let Some((_, w)) = &mut self.spill else {
            return;
        };
        if self.buf.is_empty() {
            return;
        }
        let r = self
            .buf
            .to_frame()
            .and_then(|df| w.write_batch(&df).map_err(anyhow::Error::from));
        self.buf.clear();
        if let Err(e) = r {
            self.failed = Some(format!("{e:#}"));
        }
    }

    /// Leave the column `name` out of `timeline.parquet` (an event found to have no value).
    pub fn remove(&mut self, name: &str) {
        if !self.dropped.iter().any(|d| d == name) {
            self.dropped.push(name.to_string());
        }
    }

    /// Write `path` (`RUN/timeline.parquet`) with every row pushed, less the removed
    /// columns, reading the row groups back one buffer at a time. Returns the rows written.
    ///
    /// # Errors
    /// The first write error (a full disk), or the final file's; `path` may then hold a
    /// partial file (the caller removes it).
    pub fn finish(mut self, path: &Path) -> Result<u64> {
        if let Some(e) = &self.failed {
            anyhow::bail!("cannot write {}: {e}", path.display());
        }
        if self.spill.is_none() {
            for d in &self.dropped {
                self.buf.remove(d);
            }
            self.buf.write_parquet(path)?;
            return Ok(self.rows);
        }
        self.spill_buffer();
        let Some((shared, w)) = self.spill.take() else {
            anyhow::bail!("cannot write {}: no temporary file", path.display());
        };
        if let Some(e) = &self.failed {
            anyhow::bail!("cannot write {}: {e}", path.display());
        }
        let tmp_err = |e: &dyn std::fmt::Display| {
            anyhow::anyhow!(
                "cannot write {}: its temporary file failed: {e}",
                path.display()
            )
        };
        w.finish().map_err(|e| tmp_err(&e))?;
        drop(w);
        let tmp = {
            use std::io::Write as _;
            let mut g = shared
                .0
                .lock()
                .map_err(|_| tmp_err(&"timeline writer lock poisoned"))?;
            g.flush().map_err(|e| tmp_err(&e))?;
            g.get_ref().try_clone().map_err(|e| tmp_err(&e))?
        };
        drop(shared);
        let kept: Vec<String> = self
            .buf
            .columns
            .iter()
            .map(|(n, _)| n.clone())
            .filter(|n| !self.dropped.contains(n))
            .collect();
        copy_chunks(&tmp, &kept, self.bound, path)?;
        Ok(self.rows)
    }
}

/// Copy the timeline in `tmp` (Parquet, as [`TimelineWriter`] wrote it) to `path`, keeping
/// `t_ns`, `dur_ns` and the value columns `kept`, `chunk` rows at a time.
fn copy_chunks(tmp: &std::fs::File, kept: &[String], chunk: usize, path: &Path) -> Result<()> {
    use std::io::Write;
    let ctx = || format!("cannot write {}", path.display());
    let columns: Vec<String> = ["t_ns".to_string(), "dur_ns".to_string()]
        .into_iter()
        .chain(kept.iter().cloned())
        .collect();
    let rows = ParquetReader::new(tmp.try_clone().with_context(ctx)?)
        .num_rows()
        .with_context(ctx)?;
    let read = |offset: usize| -> Result<DataFrame> {
        ParquetReader::new(tmp.try_clone().with_context(ctx)?)
            .with_columns(Some(columns.clone()))
            .with_slice(Some((offset, chunk)))
            .finish()
            .with_context(ctx)
    };
    let f = powerperf_node::safe_file::replace(path)
        .with_context(|| format!("cannot create {}", path.display()))?;
    let mut out = std::io::BufWriter::new(f);
    let first = read(0)?;
    let mut w = ParquetWriter::new(&mut out)
        .batched(first.schema().as_ref())
        .with_context(ctx)?;
    if first.height() > 0 {
        w.write_batch(&first).with_context(ctx)?;
    }
    let mut offset = first.height();
    drop(first);
    while offset < rows {
        let df = read(offset)?;
        if df.height() == 0 {
            break;
        }
        w.write_batch(&df).with_context(ctx)?;
        offset += df.height();
    }
    w.finish().with_context(ctx)?;
    drop(w);
    out.flush().with_context(ctx)
}

/// Call `f` with the timeline of the run in `dir` in chunks of at most
/// [`WRITE_BUFFER_ROWS`] rows, in order: `timeline.parquet`, or, where it was never written,
/// the samples of `timeline.journal.csv` (in one chunk). `columns` limits the value columns
/// read (`None`: all; names the file lacks are left out). `f` is called at least once (with
/// an empty timeline for a run without rows); not at all when the run has neither file.
///
/// # Errors
/// An unreadable file, or `f`'s error.
pub fn for_each_chunk(
    dir: &Path,
    columns: Option<&[String]>,
    f: &mut dyn FnMut(&Timeline) -> Result<()>,
) -> Result<()> {
    let pq = dir.join(TIMELINE);
    if pq.is_file() {
        crate::parquet_check::check_file(&pq)?;
        let ctx = || format!("cannot read {}", pq.display());
        let open =
            || std::fs::File::open(&pq).with_context(|| format!("cannot open {}", pq.display()));
        let mut reader = ParquetReader::new(open()?);
        let have: Vec<String> = reader
            .schema()
            .with_context(ctx)?
            .iter_names()
            .map(|n| n.to_string())
            .collect();
        let rows = reader.num_rows().with_context(ctx)?;
        let want: Vec<String> = have
            .iter()
            .filter(|n| {
                *n == "t_ns" || *n == "dur_ns" || columns.is_none_or(|c| c.iter().any(|x| x == *n))
            })
            .cloned()
            .collect();
        let mut offset = 0;
        loop {
            let df = ParquetReader::new(open()?)
                .with_columns(Some(want.clone()))
                .with_slice(Some((offset, WRITE_BUFFER_ROWS)))
                .finish()
                .with_context(ctx)?;
            let t = Timeline::from_frame(&df).with_context(ctx)?;
            offset += t.len();
            f(&t)?;
            if t.is_empty() || offset >= rows {
                return Ok(());
            }
        }
    }
    let j = dir.join(JOURNAL);
    if j.is_file() {
        let (mut t, _) = read_journal(&j)?;
        if let Some(c) = columns {
            t.columns.retain(|(n, _)| c.contains(n));
        }
        return f(&t);
    }
    Ok(())
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
        let f = powerperf_node::safe_file::replace(path)
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
    // a file a user may have written: no link, no FIFO (issue 38)
    let f = powerperf_node::safe_file::open_regular(path, JOURNAL)?;
    let mut r = csv::ReaderBuilder::new()
        .flexible(true)
        .from_reader(std::io::BufReader::new(f));
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
    let pq = dir.join(TIMELINE);
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
    let mut f =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    // A damaged file is an error, not a huge allocation (issue 18).
    crate::parquet_check::check(&mut f, path)?;
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
        one.write_parquet(&dir.path().join(TIMELINE)).unwrap();
        assert_eq!(read_run(dir.path()).unwrap().unwrap().height(), 1);
    }

    /// Issue 18: the timeline's memory stays bounded however many rows a run has. N ≫
    /// bound rows are pushed; the writer never holds more than the bound, and the file it
    /// writes has every row, in order, without the removed column.
    #[test]
    fn writer_memory_is_bounded_and_every_row_reaches_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec![
            "task-clock".to_string(),
            "energy_package_0_j".to_string(),
            "gone".to_string(),
        ];
        let bound = 1000;
        let n: u64 = 25_437;
        let mut w = TimelineWriter::with_bound(dir.path(), &names, bound).unwrap();
        assert!(w.streams());
        for i in 0..n {
            let e = (i % 7 != 0).then_some(i as f64 * 0.5);
            w.push(
                (i + 1) * 1_000_000,
                1_000_000,
                &[Some(i as f64), e, Some(1.0)],
            );
            assert!(w.buffered() <= bound, "{} rows buffered", w.buffered());
        }
        assert_eq!(w.max_buffered(), bound);
        assert_eq!(w.rows(), n);
        w.remove("gone");
        // Nothing named is left in the run directory while the run goes on.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 0);
        let p = dir.path().join(TIMELINE);
        assert_eq!(w.finish(&p).unwrap(), n);
        let df = read_parquet(&p).unwrap();
        assert_eq!(df.height() as u64, n);
        let cols: Vec<&str> = df.get_column_names().iter().map(|c| c.as_str()).collect();
        assert_eq!(cols, ["t_ns", "dur_ns", "task-clock", "energy_package_0_j"]);
        let t = column_u64(&df, "t_ns").unwrap();
        assert!(t
            .iter()
            .enumerate()
            .all(|(i, v)| *v == Some((i as u64 + 1) * 1_000_000)));
        let e = column_f64(&df, "energy_package_0_j").unwrap();
        assert_eq!(e[7], None);
        assert_eq!(e[n as usize - 1], Some((n - 1) as f64 * 0.5));
        // Read back in chunks of at most the buffer size, in order.
        let (mut rows, mut chunks) = (0, 0);
        for_each_chunk(dir.path(), None, &mut |c| {
            assert!(c.len() <= WRITE_BUFFER_ROWS);
            assert_eq!(c.t_ns.first().copied(), Some((rows as u64 + 1) * 1_000_000));
            rows += c.len();
            chunks += 1;
            Ok(())
        })
        .unwrap();
        assert_eq!((rows as u64, chunks), (n, 1));
    }

    #[test]
    fn writer_of_no_rows_and_in_memory_writer_write_readable_files() {
        let dir = tempfile::tempdir().unwrap();
        let names = vec!["a".to_string()];
        let p = dir.path().join("empty.parquet");
        TimelineWriter::create(dir.path(), &names)
            .unwrap()
            .finish(&p)
            .unwrap();
        let df = read_parquet(&p).unwrap();
        assert_eq!((df.height(), df.width()), (0, 3));
        let mut m = TimelineWriter::in_memory(&names);
        m.push(5, 5, &[Some(2.0)]);
        m.remove("a");
        let p = dir.path().join("mem.parquet");
        assert_eq!(m.finish(&p).unwrap(), 1);
        assert_eq!(read_parquet(&p).unwrap().width(), 2);
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
