//! Reader of the region events files (`RUN/region_events/<pid>.tsv`), their per-thread
//! nested intervals, and GPTL-style per-thread statistics.
//!
//! ```no_run
//! use powerperf_rt::events;
//! let evs = events::read_dir(std::path::Path::new("run1"))?;
//! for s in events::stats(&events::intervals(&evs)) {
//!     println!("{} {} {} calls {} ns", s.tid, s.path, s.calls, s.incl_ns);
//! }
//! # Ok::<(), std::io::Error>(())
//! ```

use std::collections::{BTreeMap, HashMap};
use std::io;
use std::path::{Path, PathBuf};

use crate::runtime::FILE_MAGIC;

/// What a record says happened.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `B`: the program began the region.
    Begin,
    /// `E`: the program ended the region.
    End,
    /// `X`: the region was still open when its thread or the process exited; the runtime
    /// closed it.
    ExitClosed,
}

/// One record of an events file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegionEvent {
    /// CLOCK_MONOTONIC, nanoseconds.
    pub t_ns: u64,
    /// OS thread id (gettid).
    pub tid: u32,
    /// Process id (from the file's header).
    pub pid: u32,
    /// Region name.
    pub region: String,
    pub kind: Kind,
}

/// Everything [`read_dir_report`] read.
#[derive(Debug, Clone, Default)]
pub struct ReadReport {
    /// Events of all files: files in name order, each file's records in file order.
    pub events: Vec<RegionEvent>,
    /// The files read.
    pub files: Vec<PathBuf>,
    /// Files whose last line had no newline (a writer cut off mid-line); that line is
    /// skipped.
    pub truncated_files: Vec<PathBuf>,
}

fn bad(path: &Path, line: usize, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}:{line}: {what}", path.display()),
    )
}

fn unescape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    let mut it = s.chars();
    while let Some(c) = it.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match it.next() {
            Some('t') => out.push('\t'),
            Some('n') => out.push('\n'),
            Some('r') => out.push('\r'),
            Some(o) => out.push(o),
            None => out.push('\\'),
        }
    }
    out
}

/// Parse one events file's text. Returns the events and whether the last line was cut
/// off (and skipped). `path` is only used in error messages.
///
/// # Errors
/// `InvalidData` naming the path and line for a bad header, a malformed complete line, or
/// an event whose region id has no `R` line before it.
pub fn parse_file(path: &Path, text: &str) -> io::Result<(Vec<RegionEvent>, bool)> {
    let (body, truncated) = match text.rfind('\n') {
        Some(i) if i + 1 == text.len() => (text, false),
        Some(i) => (&text[..=i], true),
        None => ("", !text.is_empty()),
    };
    let mut lines = body.lines().enumerate();
    let pid = match lines.next() {
        None => return Ok((Vec::new(), truncated)),
        Some((_, header)) => {
            let rest = header
                .strip_prefix(FILE_MAGIC)
                .ok_or_else(|| bad(path, 1, format!("not a region events v1 file: {header:?}")))?;
            rest.trim()
                .strip_prefix("pid=")
                .and_then(|p| p.parse::<u32>().ok())
                .ok_or_else(|| bad(path, 1, format!("header without pid=: {header:?}")))?
        }
    };
    let mut names: HashMap<u32, String> = HashMap::new();
    let mut events = Vec::new();
    for (i, line) in lines {
        let n = i + 1;
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let mut f = line.splitn(4, '\t');
        let tag = f.next().unwrap_or("");
        if tag == "R" {
            let id = f
                .next()
                .and_then(|s| s.parse::<u32>().ok())
                .ok_or_else(|| bad(path, n, format!("bad region id in {line:?}")))?;
            let name = f
                .next()
                .ok_or_else(|| bad(path, n, format!("region line without a name: {line:?}")))?;
            names.insert(id, unescape(name));
            continue;
        }
        let kind = match tag {
            "B" => Kind::Begin,
            "E" => Kind::End,
            "X" => Kind::ExitClosed,
            _ => return Err(bad(path, n, format!("unknown record {tag:?}"))),
        };
        let mut num = |what: &str| -> io::Result<u64> {
            f.next()
                .and_then(|s| s.parse::<u64>().ok())
                .ok_or_else(|| bad(path, n, format!("bad {what} in {line:?}")))
        };
        let t_ns = num("time")?;
        let tid = u32::try_from(num("tid")?).map_err(|_| bad(path, n, "tid out of range"))?;
        let id = u32::try_from(num("region id")?).map_err(|_| bad(path, n, "id out of range"))?;
        let region = names
            .get(&id)
            .ok_or_else(|| bad(path, n, format!("region id {id} has no R line before it")))?
            .clone();
        events.push(RegionEvent {
            t_ns,
            tid,
            pid,
            region,
            kind,
        });
    }
    Ok((events, truncated))
}

/// Read every `run_dir/region_events/*.tsv`, reporting truncated files.
/// A run without a `region_events` directory has no events.
///
/// # Errors
/// I/O errors reading the directory or a file; `InvalidData` as in [`parse_file`].
pub fn read_dir_report(run_dir: &Path) -> io::Result<ReadReport> {
    let dir = run_dir.join("region_events");
    let mut report = ReadReport::default();
    let entries = match std::fs::read_dir(&dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(report),
        Err(e) => return Err(e),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "tsv"))
        .collect();
    files.sort();
    for path in files {
        let bytes = std::fs::read(&path)?;
        let text = String::from_utf8_lossy(&bytes);
        let (events, truncated) = parse_file(&path, &text)?;
        report.events.extend(events);
        if truncated {
            report.truncated_files.push(path.clone());
        }
        report.files.push(path);
    }
    Ok(report)
}

/// Read every `run_dir/region_events/*.tsv` (truncated last lines skipped; use
/// [`read_dir_report`] to learn about them).
///
/// # Errors
/// As [`read_dir_report`].
pub fn read_dir(run_dir: &Path) -> io::Result<Vec<RegionEvent>> {
    Ok(read_dir_report(run_dir)?.events)
}

/// One completed region instance on one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    pub pid: u32,
    pub tid: u32,
    /// Region name.
    pub region: String,
    /// Names of the enclosing open regions and this one, outermost first, joined by `/`.
    pub path: String,
    /// CLOCK_MONOTONIC ns.
    pub start_ns: u64,
    /// CLOCK_MONOTONIC ns.
    pub end_ns: u64,
    /// 0 for an outermost region.
    pub depth: u32,
    /// Closed by an `X` record (thread or process exit), not by the program.
    pub closed_by_exit: bool,
}

impl Interval {
    /// `end_ns - start_ns`.
    pub fn dur_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }
}

/// [`intervals`] plus the misuse it found.
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    /// Sorted by (pid, tid, start_ns, depth).
    pub intervals: Vec<Interval>,
    /// `E`/`X` records for a region not open on their thread (end without begin).
    pub unmatched_ends: usize,
    /// Regions abandoned: open inside a region whose end came first (mismatched nesting),
    /// or still open at the end of their file without an `X` (the process was killed).
    pub unterminated: usize,
}

/// Pair begins and ends per (pid, tid) into nested intervals, as the runtime does:
/// an end closes the innermost open instance of its region; regions opened inside that
/// instance and not yet ended are abandoned; an end of a region not open is counted and
/// skipped.
pub fn analyze(events: &[RegionEvent]) -> Analysis {
    struct Open<'a> {
        region: &'a str,
        start_ns: u64,
    }
    let mut a = Analysis::default();
    let mut stacks: HashMap<(u32, u32), Vec<Open<'_>>> = HashMap::new();
    for e in events {
        let stack = stacks.entry((e.pid, e.tid)).or_default();
        match e.kind {
            Kind::Begin => stack.push(Open {
                region: &e.region,
                start_ns: e.t_ns,
            }),
            Kind::End | Kind::ExitClosed => {
                let Some(pos) = stack.iter().rposition(|o| o.region == e.region) else {
                    a.unmatched_ends += 1;
                    continue;
                };
                a.unterminated += stack.len() - pos - 1;
                stack.truncate(pos + 1);
                let path = stack.iter().map(|o| o.region).collect::<Vec<_>>().join("/");
                let open = stack.pop().expect("pos is in the stack");
                a.intervals.push(Interval {
                    pid: e.pid,
                    tid: e.tid,
                    region: e.region.clone(),
                    path,
                    start_ns: open.start_ns,
                    end_ns: e.t_ns,
                    depth: pos as u32,
                    closed_by_exit: e.kind == Kind::ExitClosed,
                });
            }
        }
    }
    a.unterminated += stacks.values().map(Vec::len).sum::<usize>();
    a.intervals
        .sort_by_key(|i| (i.pid, i.tid, i.start_ns, i.depth));
    a
}

/// Nested per-thread intervals of `events` (see [`analyze`] for the rules and the misuse
/// counts).
pub fn intervals(events: &[RegionEvent]) -> Vec<Interval> {
    analyze(events).intervals
}

/// GPTL-style statistics of one region path on one thread.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stats {
    pub pid: u32,
    pub tid: u32,
    /// `outer/inner`.
    pub path: String,
    /// Last component of `path`.
    pub region: String,
    /// 0 for an outermost region.
    pub depth: u32,
    /// Completed instances.
    pub calls: u64,
    /// Sum of the instances' durations (inclusive of nested regions), ns.
    pub incl_ns: u64,
    pub min_ns: u64,
    pub max_ns: u64,
    /// Instances closed by thread or process exit (included in `calls`).
    pub exit_closed: u64,
}

/// Per (pid, tid, path) statistics, sorted by pid, tid, path (so a parent comes before its
/// children, as in GPTL's tree).
pub fn stats(intervals: &[Interval]) -> Vec<Stats> {
    let mut by: BTreeMap<(u32, u32, Vec<&str>), Stats> = BTreeMap::new();
    for i in intervals {
        let d = i.dur_ns();
        let key = (i.pid, i.tid, i.path.split('/').collect());
        let s = by.entry(key).or_insert_with(|| Stats {
            pid: i.pid,
            tid: i.tid,
            path: i.path.clone(),
            region: i.region.clone(),
            depth: i.depth,
            calls: 0,
            incl_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
            exit_closed: 0,
        });
        s.calls += 1;
        s.incl_ns += d;
        s.min_ns = s.min_ns.min(d);
        s.max_ns = s.max_ns.max(d);
        s.exit_closed += u64::from(i.closed_by_exit);
    }
    by.into_values().collect()
}
