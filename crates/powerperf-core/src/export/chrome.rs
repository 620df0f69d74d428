//! Chrome's JSON trace event format (the "Trace Event Format" document of the Chromium
//! project, docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU), which
//! chrome://tracing, the Perfetto UI and catapult's trace viewer open:
//!
//! - `{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}`;
//! - `ts` and `dur` in microseconds, exact: the nanoseconds as at most three decimals,
//!   trailing zeros left out (`12.5` is 12,500 ns), from the run's CLOCK_MONOTONIC;
//! - regions and CUDA API calls as `X` (complete) events with `dur` on their thread
//!   (`pid`, `tid`): every slice of a run is known whole (begin and end), so one event
//!   instead of a `B`/`E` pair; written in start order, an enclosing slice before the
//!   slices inside it, which is how viewers nest complete events;
//! - GPU activities as `X` (complete) events with `dur` on one track per stream
//!   (`tid` [`super::stream_tid`], named `GPU d stream s`), with a flow (`s` at the
//!   launching API call, `f` with `bp: "e"` at the activity) between them;
//! - timeline counters as `C` events with numeric args: one event per instant for the
//!   counters of one unit sampled together (see [`write_to`]'s `counters`);
//! - compact: no whitespace between events, no empty `args`, no `cat` on counter and flow
//!   events (optional in the format).
//! - PC-sample hot spots as thread-scoped instant events (`i`, `s: "t"`);
//! - `M` metadata events naming processes (rank, pid, host) and threads.
//!
//! A file name ending in `.gz` is written gzip-compressed (the Perfetto UI opens it as is).

use super::{stream_tid, Arg, Counter, Instant, Slice, SliceKind, Trace};
use anyhow::{Context, Result};
use std::io::Write;
use std::path::{Path, PathBuf};

/// Write `trace` as Chrome JSON to `out` (`-`: stdout); returns the path written.
///
/// # Errors
/// The file cannot be created or written.
pub fn write(trace: &Trace, out: &Path) -> Result<PathBuf> {
    let ctx = || format!("cannot write {}", out.display());
    if out.as_os_str() == "-" {
        let stdout = std::io::stdout();
        let mut w = std::io::BufWriter::with_capacity(1 << 20, stdout.lock());
        write_to(trace, &mut w).with_context(ctx)?;
        w.flush().with_context(ctx)?;
        return Ok(out.to_path_buf());
    }
    let f = super::create_file(out)?;
    let gz = out.extension().is_some_and(|e| e == "gz");
    if gz {
        let mut w = std::io::BufWriter::with_capacity(
            1 << 20,
            flate2::write::GzEncoder::new(f, flate2::Compression::fast()),
        );
        write_to(trace, &mut w).with_context(ctx)?;
        w.into_inner()
            .map_err(|e| e.into_error())
            .with_context(ctx)?
            .finish()
            .with_context(ctx)?;
    } else {
        let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
        write_to(trace, &mut w).with_context(ctx)?;
        w.flush().with_context(ctx)?;
    }
    Ok(out.to_path_buf())
}

/// A JSON string.
fn js(w: &mut dyn Write, s: &str) -> std::io::Result<()> {
    serde_json::to_writer(&mut *w, s).map_err(std::io::Error::other)
}

/// Nanoseconds as microseconds, exact: at most three decimals, trailing zeros left out.
fn us(ns: u64) -> String {
    let (int, frac) = (ns / 1000, ns % 1000);
    match frac {
        0 => int.to_string(),
        f if f % 100 == 0 => format!("{int}.{}", f / 100),
        f if f % 10 == 0 => format!("{int}.{:02}", f / 10),
        f => format!("{int}.{f:03}"),
    }
}

/// A finite f64 as JSON, the shortest text that reads back as the same f64, without a
/// trailing `.0` (non-finite values are left out by the callers).
fn num(v: f64) -> String {
    let mut s = serde_json::Number::from_f64(v)
        .map(|n| n.to_string())
        .unwrap_or_else(|| "0".into());
    if s.ends_with(".0") {
        s.truncate(s.len() - 2);
    }
    s
}

/// `,"args":{...}` with the finite values of `a`; nothing when none is left.
fn args(w: &mut dyn Write, a: &[(String, Arg)]) -> std::io::Result<()> {
    if !a
        .iter()
        .any(|(_, v)| !matches!(v, Arg::F64(x) if !x.is_finite()))
    {
        return Ok(());
    }
    w.write_all(b",\"args\":{")?;
    let mut first = true;
    for (k, v) in a {
        if let Arg::F64(x) = v {
            if !x.is_finite() {
                continue;
            }
        }
        if !first {
            w.write_all(b",")?;
        }
        first = false;
        js(w, k)?;
        w.write_all(b":")?;
        match v {
            Arg::Str(s) => js(w, s)?,
            Arg::U64(n) => write!(w, "{n}")?,
            Arg::F64(x) => w.write_all(num(*x).as_bytes())?,
        }
    }
    w.write_all(b"}")
}

/// Writes the events with the commas between them.
struct Events<'a> {
    w: &'a mut dyn Write,
    first: bool,
    /// Flow ids of the trace renumbered 1, 2, … in order of appearance (shorter).
    flow_ids: std::collections::HashMap<u64, u64>,
}

impl Events<'_> {
    fn start(&mut self) -> std::io::Result<()> {
        if self.first {
            self.first = false;
            Ok(())
        } else {
            self.w.write_all(b",")
        }
    }

    fn meta(&mut self, what: &str, pid: u32, tid: Option<u32>, arg: &str) -> std::io::Result<()> {
        self.start()?;
        write!(self.w, "{{\"name\":\"{what}\",\"ph\":\"M\",\"pid\":{pid},")?;
        if let Some(t) = tid {
            write!(self.w, "\"tid\":{t},")?;
        }
        self.w.write_all(b"\"args\":{\"name\":")?;
        js(self.w, arg)?;
        self.w.write_all(b"}}")
    }

    fn sort_index(
        &mut self,
        what: &str,
        pid: u32,
        tid: Option<u32>,
        i: u64,
    ) -> std::io::Result<()> {
        self.start()?;
        write!(self.w, "{{\"name\":\"{what}\",\"ph\":\"M\",\"pid\":{pid},")?;
        if let Some(t) = tid {
            write!(self.w, "\"tid\":{t},")?;
        }
        write!(self.w, "\"args\":{{\"sort_index\":{i}}}}}")
    }

    fn complete(&mut self, s: &Slice, pid: u32, tid: u32) -> std::io::Result<()> {
        self.start()?;
        self.w.write_all(b"{\"name\":")?;
        js(self.w, &s.name)?;
        write!(
            self.w,
            ",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{pid},\"tid\":{tid}",
            s.kind.category(),
            us(s.start_ns),
            us(s.end_ns - s.start_ns)
        )?;
        args(self.w, &s.args)?;
        self.w.write_all(b"}")
    }

    fn flow(&mut self, id: u64, start: bool, t: u64, pid: u32, tid: u32) -> std::io::Result<()> {
        self.start()?;
        let next = self.flow_ids.len() as u64 + 1;
        let id = *self.flow_ids.entry(id).or_insert(next);
        let (ph, bp) = if start {
            ("s", "")
        } else {
            ("f", ",\"bp\":\"e\"")
        };
        write!(
            self.w,
            "{{\"name\":\"launch\",\"ph\":\"{ph}\",\"id\":{id},\"ts\":{},\"pid\":{pid},\"tid\":{tid}{bp}}}",
            us(t)
        )
    }

    fn instant(&mut self, i: &Instant, pid: u32, tid: u32) -> std::io::Result<()> {
        self.start()?;
        self.w.write_all(b"{\"name\":")?;
        js(self.w, &i.name)?;
        write!(
            self.w,
            ",\"cat\":\"pc_samples\",\"ph\":\"i\",\"s\":\"t\",\"ts\":{},\"pid\":{pid},\"tid\":{tid}",
            us(i.t_ns)
        )?;
        args(self.w, &i.args)?;
        self.w.write_all(b"}")
    }
}

/// One `C` event per counter and instant, named `<name> (<unit>)` with the unit as its one
/// arg (`{"name":"package_0 power (RAPL) (W)","ph":"C","args":{"W":41.2}}`). Counters are not
/// grouped into one event with an arg each, although that would be smaller: chrome://tracing
/// draws the args of one counter event stacked, and a stack of RAPL's `core` on `package`
/// (which contains it) would show their sum. Non-finite values are left out.
fn counters(ev: &mut Events<'_>, counters: &[Counter], pid: u32) -> std::io::Result<()> {
    for c in counters {
        let mut prefix = Vec::new();
        prefix.extend_from_slice(b"{\"name\":");
        js(&mut prefix, &format!("{} ({})", c.name, c.unit))?;
        prefix.extend_from_slice(b",\"ph\":\"C\",\"ts\":");
        let mut key = Vec::new();
        js(&mut key, &c.unit)?;
        for &(t, v) in c.points.iter().filter(|(_, v)| v.is_finite()) {
            ev.start()?;
            ev.w.write_all(&prefix)?;
            write!(ev.w, "{},\"pid\":{pid},\"args\":{{", us(t))?;
            ev.w.write_all(&key)?;
            write!(ev.w, ":{}}}}}", num(v))?;
        }
    }
    Ok(())
}

/// Write the whole JSON document to `w`.
///
/// # Errors
/// The writer's.
pub fn write_to(trace: &Trace, w: &mut dyn Write) -> std::io::Result<()> {
    w.write_all(b"{\"displayTimeUnit\":\"ns\",\"otherData\":{\"tool\":")?;
    js(w, &trace.tool)?;
    w.write_all(b",\"run\":")?;
    js(w, &trace.name)?;
    w.write_all(b",\"clock\":\"CLOCK_MONOTONIC\"},\"traceEvents\":[")?;
    let mut ev = Events {
        w,
        first: true,
        flow_ids: std::collections::HashMap::new(),
    };
    for (pi, p) in trace.processes.iter().enumerate() {
        let pid = p.trace_pid;
        ev.meta("process_name", pid, None, &p.label())?;
        ev.meta(
            "process_labels",
            pid,
            None,
            &format!("{} {}", p.host, p.run_id),
        )?;
        ev.sort_index("process_sort_index", pid, None, pi as u64)?;
        for t in &p.threads {
            let tid = t.trace_tid;
            ev.meta("thread_name", pid, Some(tid), &format!("thread {}", t.tid))?;
            // Start order with enclosing slices first (the order `edges` nests by).
            for s in &t.slices {
                ev.complete(s, pid, tid)?;
                if s.kind == SliceKind::CudaApi {
                    if let Some(id) = s.flow {
                        ev.flow(id, true, s.start_ns, pid, tid)?;
                    }
                }
            }
            for i in &t.instants {
                ev.instant(i, pid, tid)?;
            }
        }
        for (si, s) in p.streams.iter().enumerate() {
            let tid = stream_tid(s);
            ev.meta("thread_name", pid, Some(tid), &s.label())?;
            ev.sort_index("thread_sort_index", pid, Some(tid), (1 << 20) + si as u64)?;
            for k in &s.slices {
                ev.complete(k, pid, tid)?;
                if let Some(id) = k.flow {
                    ev.flow(id, false, k.start_ns, pid, tid)?;
                }
            }
            for i in &s.instants {
                ev.instant(i, pid, tid)?;
            }
        }
        counters(&mut ev, &p.counters, pid)?;
    }
    ev.w.write_all(b"]}\n")
}
