//! A Parquet file is input: before polars decodes one, its footer and page headers are
//! checked against the file's size and sane limits, so that a damaged file is an error
//! naming it, never a process aborted by a huge allocation (issue 18: a points.parquet whose
//! data page said `num_values = -39` made polars reserve 2^61 bytes;
//! `fuzz/crashes/set_parquet-alloc-2pow61.parquet`).
//!
//! Checked: the footer parses; the row count is at most [`MAX_ROWS`] and the row groups add
//! up to it; every column chunk lies inside the file, has 0 to [`MAX_ROWS`] values and an
//! uncompressed size from 0 to [`MAX_UNCOMPRESSED`]; every page header of every chunk has a
//! value count from 0 to the chunk's (the pages' counts add up to at most the chunk's), sizes
//! that are not negative, a compressed size inside the chunk and an uncompressed size of at
//! most [`MAX_UNCOMPRESSED`]. Page contents are not read (only one chunk's bytes are in
//! memory at a time).

use anyhow::{Context, Result};
use polars_parquet::parquet::page::{CompressedPage, DataPageHeader};
use polars_parquet::parquet::read::{read_metadata, PageReader};
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

/// Most rows a run or set table may have (2^32; a timeline at 1 ms holds 3.6 million an
/// hour).
pub const MAX_ROWS: u64 = 1 << 32;

/// Largest uncompressed size of a column chunk or page, bytes (16 GiB).
pub const MAX_UNCOMPRESSED: u64 = 1 << 34;

/// Check the Parquet file in `r` (`name` for messages) before it is decoded, and leave `r`
/// at its start.
///
/// # Errors
/// A footer that does not parse, or one of the checks above, naming the file, the row group,
/// the column and the value.
pub fn check<R: Read + Seek>(r: &mut R, name: &Path) -> Result<()> {
    // polars' metadata and page-header readers panic on some damaged input (a slice index
    // out of range, found by tests/readers_random.rs): the file is input, its panic is this
    // error.
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| check_inner(r, name))).map_err(
        |panic| {
            let why = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_default();
            anyhow::anyhow!(
                "{} is not a readable Parquet file (the Parquet reader failed: {why})",
                name.display()
            )
        },
    )?
}

fn check_inner<R: Read + Seek>(r: &mut R, name: &Path) -> Result<()> {
    let bad =
        |why: String| anyhow::anyhow!("{} is not a readable Parquet file: {why}", name.display());
    let len = r
        .seek(SeekFrom::End(0))
        .with_context(|| format!("cannot read {}", name.display()))?;
    r.seek(SeekFrom::Start(0))
        .with_context(|| format!("cannot read {}", name.display()))?;
    let meta = read_metadata(r).map_err(|e| bad(format!("its footer cannot be read: {e}")))?;
    let rows = meta.num_rows as u64;
    if rows > MAX_ROWS {
        return Err(bad(format!(
            "it says it has {rows} rows (at most {MAX_ROWS})"
        )));
    }
    let sum: u64 = meta.row_groups.iter().map(|g| g.num_rows() as u64).sum();
    if sum != rows {
        return Err(bad(format!(
            "its row groups have {sum} rows, its footer says {rows}"
        )));
    }
    for (g, rg) in meta.row_groups.iter().enumerate() {
        for c in rg.parquet_columns() {
            let col = c.descriptor().path_in_schema.join(".");
            let at = |why: String| bad(format!("row group {g}, column `{col}`: {why}"));
            let nv = c.num_values();
            if nv < 0 || nv as u64 > MAX_ROWS {
                return Err(at(format!("{nv} values")));
            }
            let (comp, unc) = (c.compressed_size(), c.uncompressed_size());
            if comp < 0 || unc < 0 || unc as u64 > MAX_UNCOMPRESSED {
                return Err(at(format!(
                    "sizes {comp} (compressed) and {unc} (uncompressed) bytes"
                )));
            }
            let range = c.byte_range();
            if range.start > range.end || range.end > len {
                return Err(at(format!(
                    "bytes {}..{} lie outside the file of {len} bytes",
                    range.start, range.end
                )));
            }
            let mut bytes = vec![0u8; (range.end - range.start) as usize];
            r.seek(SeekFrom::Start(range.start))
                .and_then(|_| r.read_exact(&mut bytes))
                .with_context(|| format!("cannot read {}", name.display()))?;
            let chunk_len = bytes.len();
            let reader = std::io::Cursor::new(polars_buffer::Buffer::from(bytes));
            let mut seen: i64 = 0;
            for page in PageReader::new(reader, c, Vec::new(), chunk_len) {
                let page = page.map_err(|e| at(format!("a page cannot be read: {e}")))?;
                let unc = match &page {
                    // A dictionary page's sizes and count are checked by the page reader
                    // (negative ones are its errors).
                    CompressedPage::Dict(_) => 0,
                    CompressedPage::Data(d) => {
                        let (n, extra) = match d.header() {
                            DataPageHeader::V1(h) => (h.num_values, 0),
                            DataPageHeader::V2(h) => (h.num_values, h.num_nulls.min(h.num_rows)),
                        };
                        if n < 0 || extra < 0 || i64::from(n) > nv - seen {
                            return Err(at(format!(
                                "a data page says it has {n} values ({} of the chunk's {nv} left)",
                                nv - seen
                            )));
                        }
                        seen += i64::from(n);
                        d.uncompressed_size()
                    }
                };
                if unc as u64 > MAX_UNCOMPRESSED {
                    return Err(at(format!("a page of {unc} bytes uncompressed")));
                }
            }
        }
    }
    r.seek(SeekFrom::Start(0))
        .with_context(|| format!("cannot read {}", name.display()))?;
    Ok(())
}

/// [`check`] the file at `path`.
///
/// # Errors
/// As [`check`]; a file that cannot be opened.
pub fn check_file(path: &Path) -> Result<()> {
    let mut f =
        std::fs::File::open(path).with_context(|| format!("cannot open {}", path.display()))?;
    check(&mut f, path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn crash() -> Vec<u8> {
        std::fs::read(
            Path::new(env!("CARGO_MANIFEST_DIR"))
                .join("../../fuzz/crashes/set_parquet-alloc-2pow61.parquet"),
        )
        .unwrap()
    }

    /// The fuzzer's crash file: a data page of `workload` says -39 values; polars reserved
    /// 2^61 bytes for it and the process aborted.
    #[test]
    fn a_negative_page_value_count_is_refused_before_decoding() {
        let e = check(
            &mut std::io::Cursor::new(crash()),
            Path::new("points.parquet"),
        )
        .unwrap_err()
        .to_string();
        assert!(
            e.contains("points.parquet") && e.contains("-39 values"),
            "{e}"
        );
    }

    #[test]
    fn a_sound_file_passes_and_is_left_at_its_start() {
        // Written with polars directly: this module sits below the timeline, which uses it.
        use polars::prelude::{Column, DataFrame, ParquetWriter};
        let a: Vec<f64> = (0..1000).map(f64::from).collect();
        let mut df = DataFrame::new(a.len(), vec![Column::new("a".into(), a)]).unwrap();
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("t.parquet");
        ParquetWriter::new(std::fs::File::create(&p).unwrap())
            .finish(&mut df)
            .unwrap();
        let mut f = std::fs::File::open(&p).unwrap();
        check(&mut f, &p).unwrap();
        assert_eq!(f.stream_position().unwrap(), 0);
        // Cut short: the footer is gone.
        let bytes = std::fs::read(&p).unwrap();
        let cut = &bytes[..bytes.len() / 2];
        assert!(check(&mut std::io::Cursor::new(cut), &p).is_err());
    }
}
