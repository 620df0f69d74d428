//! Reader of the region events files (`RUN/region_events/<pid>.bin`, binary v2, as the
//! runtime writes them, and `<pid>.tsv`, text v1, as `powerperf collect` leaves them), their
//! per-thread nested intervals, and GPTL-style per-thread statistics.
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

use crate::runtime::{BIN_MAGIC, FILE_MAGIC, TAG_EVENTS, TAG_NAMES};

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
    /// Values of the file's `# counters` at this record, in that order (empty when the
    /// runtime read none: no `POWERPERF_RT_COUNTERS`, a failed read, an `X` record).
    pub counters: Vec<u64>,
}

/// Everything [`read_dir_report`] read.
#[derive(Debug, Clone, Default)]
pub struct ReadReport {
    /// Events of all files: files in name order, each file's records in file order.
    pub events: Vec<RegionEvent>,
    /// The files read.
    pub files: Vec<PathBuf>,
    /// Files whose last line had no newline, or whose last frame is incomplete (a writer
    /// cut off mid-write); that line or frame is skipped.
    pub truncated_files: Vec<PathBuf>,
    /// The counters read at every begin and end (`# counters` line of the files), in the
    /// order of [`RegionEvent::counters`]; empty when none were read.
    pub counter_names: Vec<String>,
}

/// Prefix of the events file line naming the counters (`# counters\t<name>\t…`).
pub const COUNTERS_LINE: &str = "# counters\t";

/// The counter names of an events file's `# counters` line (empty without one).
pub fn counter_names(text: &str) -> Vec<String> {
    text.lines()
        .take(3)
        .find_map(|l| l.strip_prefix(COUNTERS_LINE))
        .map(|rest| rest.split('\t').map(String::from).collect())
        .unwrap_or_default()
}

fn bad(path: &Path, line: usize, what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("{}:{line}: {what}", path.display()),
    )
}

/// Undo the `\\`, `\t`, `\n`, `\r` escapes of a region name (in events files and in the
/// controller protocol, rt/README.md).
pub fn unescape(s: &str) -> String {
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
        let mut f = line.split('\t');
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
        let counters = f
            .map(|v| v.parse::<u64>())
            .collect::<Result<Vec<u64>, _>>()
            .map_err(|_| bad(path, n, format!("bad counter value in {line:?}")))?;
        events.push(RegionEvent {
            t_ns,
            tid,
            pid,
            region,
            kind,
            counters,
        });
    }
    Ok((events, truncated))
}

/// One binary (v2) events file, parsed.
#[derive(Debug, Clone, Default)]
pub struct BinFile {
    pub pid: u32,
    pub counter_names: Vec<String>,
    pub events: Vec<RegionEvent>,
    /// The last frame was incomplete (a writer cut off mid-write) and is skipped.
    pub truncated: bool,
}

struct Cursor<'a> {
    b: &'a [u8],
    pos: usize,
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|s| u32::from_le_bytes(s.try_into().unwrap()))
    }
}

/// Parse one binary (v2) events file (rt/README.md, "File format"). `path` is only used
/// in error messages.
///
/// # Errors
/// `InvalidData` naming the path and byte offset for a bad header, an unknown frame, a
/// malformed complete frame, or an event whose region id has no name before it.
pub fn parse_bin(path: &Path, bytes: &[u8]) -> io::Result<BinFile> {
    let at = |off: usize, what: String| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: byte {off}: {what}", path.display()),
        )
    };
    let mut c = Cursor { b: bytes, pos: 0 };
    let mut out = BinFile::default();
    if bytes.is_empty() {
        return Ok(out);
    }
    let head = (|| {
        if c.take(8)? != BIN_MAGIC {
            return Some(Err(()));
        }
        let pid = c.u32()?;
        let n = c.u32()?;
        let mut names = Vec::new();
        for _ in 0..n.min(64) {
            let len = c.u32()? as usize;
            names.push(String::from_utf8_lossy(c.take(len)?).into_owned());
        }
        Some(Ok((pid, names)))
    })();
    match head {
        None => {
            out.truncated = true;
            return Ok(out);
        }
        Some(Err(())) => return Err(at(0, "not a region events v2 file".into())),
        Some(Ok((pid, names))) => {
            out.pid = pid;
            out.counter_names = names;
        }
    }
    let mut names: HashMap<u32, String> = HashMap::new();
    while c.pos < bytes.len() {
        let off = c.pos;
        let (Some(tag), Some(len)) = (c.u32(), c.u32()) else {
            out.truncated = true;
            break;
        };
        let Some(payload) = c.take(len as usize) else {
            out.truncated = true;
            break;
        };
        let mut p = Cursor { b: payload, pos: 0 };
        let bad_frame = |what: &str| at(off, format!("{what} (frame tag {tag}, {len} bytes)"));
        match tag {
            TAG_NAMES => {
                while p.pos < payload.len() {
                    let (Some(id), Some(n)) = (p.u32(), p.u32()) else {
                        return Err(bad_frame("short name record"));
                    };
                    let name = p.take(n as usize).ok_or_else(|| bad_frame("short name"))?;
                    names.insert(id, String::from_utf8_lossy(name).into_owned());
                }
            }
            TAG_EVENTS => {
                let (Some(tid), Some(count), Some(nc), Some(_)) =
                    (p.u32(), p.u32(), p.u32(), p.u32())
                else {
                    return Err(bad_frame("short events header"));
                };
                let (count, nc) = (count as usize, nc as usize);
                count
                    .checked_mul(12 + 8 * nc)
                    .filter(|&n| n == payload.len() - 16)
                    .ok_or_else(|| {
                        bad_frame(&format!("{count} events of {nc} counters do not fill it"))
                    })?;
                let ts = p.take(8 * count).unwrap();
                let iks = p.take(4 * count).unwrap();
                let ctr = p.take(8 * nc * count).unwrap();
                for i in 0..count {
                    let t_ns = u64::from_le_bytes(ts[8 * i..8 * i + 8].try_into().unwrap());
                    let ik = u32::from_le_bytes(iks[4 * i..4 * i + 4].try_into().unwrap());
                    let kind = match ik & 3 {
                        0 => Kind::Begin,
                        1 => Kind::End,
                        2 => Kind::ExitClosed,
                        k => return Err(bad_frame(&format!("unknown record kind {k}"))),
                    };
                    let id = ik >> 2;
                    let region = names
                        .get(&id)
                        .ok_or_else(|| bad_frame(&format!("region id {id} has no name before it")))?
                        .clone();
                    let vals = &ctr[8 * nc * i..8 * nc * (i + 1)];
                    let counters: Vec<u64> = vals
                        .chunks_exact(8)
                        .map(|v| u64::from_le_bytes(v.try_into().unwrap()))
                        .collect();
                    let counters = if counters.first().is_some_and(|&v| v != u64::MAX) {
                        counters
                    } else {
                        Vec::new()
                    };
                    out.events.push(RegionEvent {
                        t_ns,
                        tid,
                        pid: out.pid,
                        region,
                        kind,
                        counters,
                    });
                }
            }
            _ => return Err(bad_frame("unknown frame")),
        }
    }
    Ok(out)
}

/// The text (v1) form of a binary events file's content: the same records in the same
/// order, each region's `R` line before its first use.
pub fn to_text(file: &BinFile) -> String {
    use std::fmt::Write as _;
    let mut s = format!("{FILE_MAGIC} pid={}\n", file.pid);
    if !file.counter_names.is_empty() {
        s.push_str(COUNTERS_LINE);
        s.push_str(&file.counter_names.join("\t"));
        s.push('\n');
    }
    let mut ids: HashMap<&str, usize> = HashMap::new();
    for e in &file.events {
        let next = ids.len() + 1;
        let id = *ids.entry(e.region.as_str()).or_insert_with(|| {
            let mut name = String::new();
            crate::ctl::escape_into(&mut name, &e.region);
            let _ = writeln!(s, "R\t{next}\t{name}");
            next
        });
        let tag = match e.kind {
            Kind::Begin => 'B',
            Kind::End => 'E',
            Kind::ExitClosed => 'X',
        };
        let _ = write!(s, "{tag}\t{}\t{}\t{id}", e.t_ns, e.tid);
        for v in &e.counters {
            let _ = write!(s, "\t{v}");
        }
        s.push('\n');
    }
    if file.truncated {
        // v1's mark of a write cut short: a last line without a newline (readers skip it).
        s.push_str("# the binary file's last frame was cut short");
    }
    s
}

/// The files of `run_dir/region_events/` with one of the extensions `exts`, in name order;
/// none when the run has no such directory.
fn event_files(run_dir: &Path, exts: &[&str]) -> io::Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(run_dir.join("region_events")) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e),
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| {
            p.extension()
                .and_then(|x| x.to_str())
                .is_some_and(|x| exts.contains(&x))
        })
        .collect();
    files.sort();
    Ok(files)
}

/// Turn every binary `run_dir/region_events/<pid>.bin` into the text `<pid>.tsv` (v1) and
/// remove the binary file; what `powerperf collect` and `apply` do once the command has
/// exited. A truncated last frame is dropped, as the readers drop it. Returns the files
/// written.
///
/// # Errors
/// I/O errors; `InvalidData` as in [`parse_bin`] (the binary file is then kept).
pub fn convert_dir(run_dir: &Path) -> io::Result<Vec<PathBuf>> {
    let mut written = Vec::new();
    for bin in event_files(run_dir, &["bin"])? {
        let f = parse_bin(&bin, &std::fs::read(&bin)?)?;
        let tsv = bin.with_extension("tsv");
        std::fs::write(&tsv, to_text(&f))?;
        std::fs::remove_file(&bin)?;
        written.push(tsv);
    }
    Ok(written)
}

/// Read every `run_dir/region_events/*.tsv` and `*.bin`, reporting truncated files.
/// A run without a `region_events` directory has no events.
///
/// # Errors
/// I/O errors reading the directory or a file; `InvalidData` as in [`parse_file`].
pub fn read_dir_report(run_dir: &Path) -> io::Result<ReadReport> {
    let mut report = ReadReport::default();
    for path in event_files(run_dir, &["tsv", "bin"])? {
        let bytes = std::fs::read(&path)?;
        let (events, truncated, names) = if path.extension().is_some_and(|x| x == "bin") {
            let f = parse_bin(&path, &bytes)?;
            (f.events, f.truncated, f.counter_names)
        } else {
            let text = String::from_utf8_lossy(&bytes);
            let (events, truncated) = parse_file(&path, &text)?;
            (events, truncated, counter_names(&text))
        };
        if report.counter_names.is_empty() {
            report.counter_names = names;
        }
        report.events.extend(events);
        if truncated {
            report.truncated_files.push(path.clone());
        }
        report.files.push(path);
    }
    Ok(report)
}

/// Read every `run_dir/region_events/*.tsv` and `*.bin` (truncated ends skipped; use
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
    /// Counter increases from begin to end (inclusive of nested regions), in the order of
    /// [`ReadReport::counter_names`]; empty when either end has no values.
    pub counters: Vec<u64>,
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
        counters: &'a [u64],
    }
    let mut a = Analysis::default();
    let mut stacks: HashMap<(u32, u32), Vec<Open<'_>>> = HashMap::new();
    for e in events {
        let stack = stacks.entry((e.pid, e.tid)).or_default();
        match e.kind {
            Kind::Begin => stack.push(Open {
                region: &e.region,
                start_ns: e.t_ns,
                counters: &e.counters,
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
                    counters: if !open.counters.is_empty()
                        && open.counters.len() == e.counters.len()
                    {
                        e.counters
                            .iter()
                            .zip(open.counters)
                            .map(|(end, begin)| end.wrapping_sub(*begin))
                            .collect()
                    } else {
                        Vec::new()
                    },
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
    /// Sums of the instances' counter increases ([`Interval::counters`]) over the
    /// `counted_calls` instances that have them.
    pub counters: Vec<u64>,
    /// Instances with counter values.
    pub counted_calls: u64,
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
            counters: Vec::new(),
            counted_calls: 0,
        });
        if !i.counters.is_empty() {
            if s.counters.is_empty() {
                s.counters = vec![0; i.counters.len()];
            }
            if s.counters.len() == i.counters.len() {
                // Saturating: counter values come from the events files (input; an
                // overflow panic in debug builds).
                for (t, v) in s.counters.iter_mut().zip(&i.counters) {
                    *t = t.saturating_add(*v);
                }
                s.counted_calls += 1;
            }
        }
        s.calls += 1;
        s.incl_ns = s.incl_ns.saturating_add(d);
        s.min_ns = s.min_ns.min(d);
        s.max_ns = s.max_ns.max(d);
        s.exit_closed += u64::from(i.closed_by_exit);
    }
    by.into_values().collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> (Vec<RegionEvent>, bool) {
        parse_file(Path::new("t.tsv"), text).unwrap()
    }

    const HDR: &str = "# powerperf-rt region events v1 pid=42\n";

    fn file(body: &str) -> String {
        format!("{HDR}{body}")
    }

    /// A v2 file as the runtime writes it: header, a names frame, an events frame.
    fn bin_file(counters: &[&str], events: &[(u64, u32, u32, Option<&[u64]>)]) -> Vec<u8> {
        let u32le = |v: u32| v.to_le_bytes().to_vec();
        let mut b = BIN_MAGIC.to_vec();
        b.extend(u32le(4242));
        b.extend(u32le(counters.len() as u32));
        for c in counters {
            b.extend(u32le(c.len() as u32));
            b.extend(c.as_bytes());
        }
        let mut names = Vec::new();
        for (id, n) in [(1u32, "solve"), (2, "a\tb")] {
            names.extend(u32le(id));
            names.extend(u32le(n.len() as u32));
            names.extend(n.as_bytes());
        }
        b.extend(u32le(TAG_NAMES));
        b.extend(u32le(names.len() as u32));
        b.extend(names);
        let nc = counters.len();
        let mut ev = Vec::new();
        ev.extend(u32le(4243));
        ev.extend(u32le(events.len() as u32));
        ev.extend(u32le(nc as u32));
        ev.extend(u32le(0));
        for e in events {
            ev.extend(e.0.to_le_bytes());
        }
        for e in events {
            ev.extend(u32le(e.1 << 2 | e.2));
        }
        for e in events {
            for k in 0..nc {
                let v = e.3.map_or(u64::MAX, |v| v[k]);
                ev.extend(v.to_le_bytes());
            }
        }
        b.extend(u32le(TAG_EVENTS));
        b.extend(u32le(ev.len() as u32));
        b.extend(ev);
        b
    }

    #[test]
    fn binary_file_reads_back_and_converts_to_the_same_text_records() {
        let evs: &[(u64, u32, u32, Option<&[u64]>)] = &[
            (100, 1, 0, Some(&[5, 7])),
            (150, 2, 0, None),
            (160, 2, 1, Some(&[6, 9])),
            (200, 1, 1, Some(&[8, 11])),
            (300, 2, 2, None),
        ];
        let bytes = bin_file(&["page-faults", "context-switches"], evs);
        let f = parse_bin(Path::new("t.bin"), &bytes).unwrap();
        assert!(!f.truncated);
        assert_eq!(f.pid, 4242);
        assert_eq!(f.counter_names, ["page-faults", "context-switches"]);
        let kinds: Vec<Kind> = f.events.iter().map(|e| e.kind).collect();
        assert_eq!(
            kinds,
            [
                Kind::Begin,
                Kind::Begin,
                Kind::End,
                Kind::End,
                Kind::ExitClosed
            ]
        );
        assert_eq!(f.events[1].region, "a\tb");
        assert_eq!(f.events[0].counters, [5, 7]);
        assert!(f.events[1].counters.is_empty());
        assert!(f.events.iter().all(|e| e.tid == 4243 && e.pid == 4242));
        // The text form holds the same records, with the name escaped on its R line.
        let text = to_text(&f);
        assert!(text.contains("R\t2\ta\\tb\n"), "{text}");
        let (back, truncated) = parse_file(Path::new("t.tsv"), &text).unwrap();
        assert!(!truncated);
        assert_eq!(back, f.events);
        assert_eq!(counter_names(&text), f.counter_names);
    }

    #[test]
    fn binary_file_cut_short_keeps_its_complete_frames_and_says_so() {
        let bytes = bin_file(&[], &[(1, 1, 0, None), (2, 1, 1, None)]);
        let whole = parse_bin(Path::new("t.bin"), &bytes).unwrap();
        for cut in [bytes.len() - 1, bytes.len() - 20, 30] {
            let f = parse_bin(Path::new("t.bin"), &bytes[..cut]).unwrap();
            assert!(f.truncated, "cut at {cut}");
            assert!(f.events.is_empty());
        }
        // A cut inside the header: nothing, truncated.
        assert!(
            parse_bin(Path::new("t.bin"), &bytes[..10])
                .unwrap()
                .truncated
        );
        assert_eq!(whole.events.len(), 2);
        // The text form of a cut file ends in a line without a newline (v1's mark).
        let cut = parse_bin(Path::new("t.bin"), &bytes[..bytes.len() - 1]).unwrap();
        let (_, truncated) = parse_file(Path::new("t.tsv"), &to_text(&cut)).unwrap();
        assert!(truncated);
    }

    #[test]
    fn binary_file_errors_name_the_file_and_byte() {
        let e = parse_bin(Path::new("x.bin"), b"hello world, no magic").unwrap_err();
        assert!(e.to_string().contains("x.bin: byte 0"), "{e}");
        let mut bytes = bin_file(&[], &[(1, 1, 0, None)]);
        // An event naming region 9, which has no name: the events frame starts after the
        // header (16) and the names frame.
        let n = bytes.len();
        bytes[n - 4..].copy_from_slice(&(9u32 << 2).to_le_bytes());
        let e = parse_bin(Path::new("x.bin"), &bytes).unwrap_err();
        assert!(e.to_string().contains("region id 9 has no name"), "{e}");
    }

    #[test]
    fn counter_values_become_interval_deltas_and_stat_sums() {
        let text = format!(
            "{HDR}# counters\tinstructions\tpage-faults\nR\t1\tsolve\nR\t2\tstep\n\
             B\t10\t7\t1\t1000\t5\nB\t11\t7\t2\t1100\t5\nE\t12\t7\t2\t1400\t9\n\
             B\t13\t7\t2\t1500\t9\nE\t14\t7\t2\t1600\t9\nE\t20\t7\t1\t2000\t12\n\
             B\t30\t7\t2\nX\t40\t7\t2\n"
        );
        assert_eq!(counter_names(&text), ["instructions", "page-faults"]);
        let (ev, _) = parse(&text);
        assert_eq!(ev[0].counters, [1000, 5]);
        assert!(ev[6].counters.is_empty());
        let iv = intervals(&ev);
        let solve = iv.iter().find(|i| i.path == "solve").unwrap();
        assert_eq!(solve.counters, [1000, 7]);
        let st = stats(&iv);
        let step = st.iter().find(|s| s.path == "solve/step").unwrap();
        assert_eq!((step.calls, step.counted_calls), (2, 2));
        assert_eq!(step.counters, [400, 4]);
        // The instance closed by X has no values: counted apart from the calls.
        let lone = st.iter().find(|s| s.path == "step").unwrap();
        assert_eq!((lone.calls, lone.counted_calls), (1, 0));
        assert!(lone.counters.is_empty());
        // A bad value names the line.
        let bad = parse_file(Path::new("t.tsv"), &file("R\t1\ta\nB\t1\t2\t1\tx\n"));
        assert!(bad.unwrap_err().to_string().contains("t.tsv:3"));
    }

    #[test]
    fn parses_records_and_escaped_names() {
        let (ev, trunc) = parse(&file(
            "R\t1\tmain\nR\t2\ta\\tb\\\\c\nB\t10\t7\t1\nB\t11\t7\t2\nE\t12\t7\t2\nX\t20\t7\t1\n",
        ));
        assert!(!trunc);
        assert_eq!(ev.len(), 4);
        assert_eq!(
            ev[1],
            RegionEvent {
                t_ns: 11,
                tid: 7,
                pid: 42,
                region: "a\tb\\c".into(),
                kind: Kind::Begin,
                counters: vec![],
            }
        );
        assert_eq!(ev[3].kind, Kind::ExitClosed);
    }

    #[test]
    fn nesting_paths_depths_and_stats() {
        let (ev, _) = parse(&file(
            "R\t1\tmain\nR\t2\tstep\nR\t3\tio\n\
             B\t0\t1\t1\nB\t10\t1\t2\nE\t30\t1\t2\nB\t40\t1\t2\nE\t50\t1\t2\n\
             B\t60\t1\t3\nE\t90\t1\t3\nE\t100\t1\t1\nB\t200\t1\t3\nE\t205\t1\t3\n",
        ));
        let iv = intervals(&ev);
        let paths: Vec<_> = iv.iter().map(|i| (i.path.as_str(), i.depth)).collect();
        assert_eq!(
            paths,
            [
                ("main", 0),
                ("main/step", 1),
                ("main/step", 1),
                ("main/io", 1),
                ("io", 0)
            ]
        );
        let st = stats(&iv);
        let row = |p: &str| st.iter().find(|s| s.path == p).unwrap().clone();
        assert_eq!(st.len(), 4);
        assert_eq!((row("main/step").calls, row("main/step").incl_ns), (2, 30));
        assert_eq!((row("main/step").min_ns, row("main/step").max_ns), (10, 20));
        assert_eq!((row("main").calls, row("main").incl_ns), (1, 100));
        assert_eq!((row("io").calls, row("main/io").incl_ns), (1, 30));
        // Tree order: a parent right before its children, whatever the characters.
        let order: Vec<_> = st.iter().map(|s| s.path.as_str()).collect();
        assert_eq!(order, ["io", "main", "main/io", "main/step"]);
    }

    #[test]
    fn recursion_of_the_same_name() {
        let (ev, _) = parse(&file(
            "R\t1\tfib\nB\t0\t1\t1\nB\t1\t1\t1\nB\t2\t1\t1\nE\t3\t1\t1\nE\t5\t1\t1\nE\t9\t1\t1\n",
        ));
        let iv = intervals(&ev);
        let got: Vec<_> = iv
            .iter()
            .map(|i| (i.path.as_str(), i.start_ns, i.end_ns, i.depth))
            .collect();
        assert_eq!(
            got,
            [
                ("fib", 0, 9, 0),
                ("fib/fib", 1, 5, 1),
                ("fib/fib/fib", 2, 3, 2)
            ]
        );
    }

    #[test]
    fn end_without_begin_and_mismatched_nesting() {
        let (ev, _) = parse(&file(
            "R\t1\ta\nR\t2\tb\nR\t3\tc\n\
             E\t1\t1\t1\n\
             B\t2\t1\t1\nB\t3\t1\t2\nE\t4\t1\t1\nE\t5\t1\t2\n",
        ));
        let a = analyze(&ev);
        // E a (not open), then a ends while b is open inside: b abandoned, later E b unmatched.
        assert_eq!(a.unmatched_ends, 2);
        assert_eq!(a.unterminated, 1);
        assert_eq!(a.intervals.len(), 1);
        assert_eq!(
            (a.intervals[0].path.as_str(), a.intervals[0].dur_ns()),
            ("a", 2)
        );
    }

    #[test]
    fn unterminated_and_exit_closed_regions() {
        let (ev, _) = parse(&file(
            "R\t1\touter\nR\t2\tinner\n\
             B\t0\t1\t1\nB\t5\t1\t2\nX\t9\t1\t2\nX\t9\t1\t1\n\
             B\t3\t2\t1\n",
        ));
        let a = analyze(&ev);
        assert_eq!(a.unterminated, 1, "thread 2 never closed outer");
        assert_eq!(a.intervals.len(), 2);
        assert!(a.intervals.iter().all(|i| i.closed_by_exit && i.tid == 1));
        let st = stats(&a.intervals);
        assert_eq!(st[0].exit_closed, 1);
    }

    #[test]
    fn threads_and_processes_are_separate() {
        let mut ev = parse(&file(
            "R\t1\tr\nB\t0\t1\t1\nB\t1\t2\t1\nE\t4\t1\t1\nE\t6\t2\t1\n",
        ))
        .0;
        let other = "# powerperf-rt region events v1 pid=43\nR\t1\tr\nB\t0\t1\t1\nE\t7\t1\t1\n";
        ev.extend(parse_file(Path::new("u.tsv"), other).unwrap().0);
        let st = stats(&intervals(&ev));
        let got: Vec<_> = st.iter().map(|s| (s.pid, s.tid, s.incl_ns)).collect();
        assert_eq!(got, [(42, 1, 4), (42, 2, 5), (43, 1, 7)]);
    }

    #[test]
    fn truncated_last_line_is_skipped_and_reported() {
        let (ev, trunc) = parse(&file("R\t1\tr\nB\t0\t1\t1\nE\t12\t1"));
        assert!(trunc);
        assert_eq!(ev.len(), 1);
        let (ev, trunc) = parse("# powerperf-rt region ev");
        assert!(trunc && ev.is_empty());
        let (ev, trunc) = parse("");
        assert!(!trunc && ev.is_empty());
    }

    #[test]
    fn malformed_lines_are_errors_with_position() {
        let e = parse_file(Path::new("t.tsv"), &file("R\t1\tr\nB\tzz\t1\t1\n")).unwrap_err();
        assert!(e.to_string().contains("t.tsv:3"), "{e}");
        let e = parse_file(Path::new("t.tsv"), &file("B\t1\t1\t9\n")).unwrap_err();
        assert!(e.to_string().contains("no R line"), "{e}");
        let e = parse_file(Path::new("t.tsv"), "hello\n").unwrap_err();
        assert!(e.to_string().contains("t.tsv:1"), "{e}");
    }

    #[test]
    fn read_dir_reads_every_file_and_reports_truncation() {
        let dir = std::env::temp_dir().join(format!("pp-rt-events-{}", std::process::id()));
        let ev_dir = dir.join("region_events");
        std::fs::create_dir_all(&ev_dir).unwrap();
        assert!(read_dir(&dir.join("nope")).unwrap().is_empty());
        std::fs::write(
            ev_dir.join("1.tsv"),
            file("R\t1\tr\nB\t0\t1\t1\nE\t5\t1\t1\n"),
        )
        .unwrap();
        std::fs::write(ev_dir.join("2.tsv"), file("R\t1\tr\nB\t0\t3\t1\nE\t5\t3")).unwrap();
        std::fs::write(ev_dir.join("notes.txt"), "ignored").unwrap();
        let r = read_dir_report(&dir).unwrap();
        assert_eq!(r.files.len(), 2);
        assert_eq!(r.truncated_files, [ev_dir.join("2.tsv")]);
        assert_eq!(r.events.len(), 3);
        assert_eq!(read_dir(&dir).unwrap(), r.events);
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
