//! Chrome's JSON trace event format (the "Trace Event Format" document of the Chromium
//! project, docs.google.com/document/d/1CvAClvFfyA5R-PhYUmn5OOQtYMH4h6I0nSsKchNAySU), which
//! chrome://tracing, the Perfetto UI and catapult's trace viewer open:
//!
//! - `{"traceEvents": [...], "displayTimeUnit": "ns", "otherData": {...}}`;
//! - `ts` and `dur` in microseconds (with the nanoseconds as three decimals), from the run's
//!   CLOCK_MONOTONIC;
//! - regions and CUDA API calls as `B`/`E` pairs on their thread (`pid`, `tid`), properly
//!   nested, every `B` with its `E` on the same track;
//! - GPU activities as `X` (complete) events with `dur` on one track per stream
//!   (`tid` [`super::stream_tid`], named `GPU d stream s`), with a flow (`s` at the
//!   launching API call, `f` with `bp: "e"` at the activity) between them;
//! - timeline counters as `C` events with one numeric arg named by the unit;
//! - PC-sample hot spots as thread-scoped instant events (`i`, `s: "t"`);
//! - `M` metadata events naming processes (rank, pid, host) and threads.
//!
//! A file name ending in `.gz` is written gzip-compressed (the Perfetto UI opens it as is).

use super::{edges, stream_tid, Arg, Edge, Instant, Slice, SliceKind, Trace};
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

/// Nanoseconds as microseconds with three decimals (exact).
fn us(ns: u64) -> String {
    format!("{}.{:03}", ns / 1000, ns % 1000)
}

/// A finite f64 as JSON (non-finite values are left out by the callers).
fn num(v: f64) -> String {
    serde_json::Number::from_f64(v)
        .map(|n| n.to_string())
        .unwrap_or_else(|| "0".into())
}

fn args(w: &mut dyn Write, a: &[(String, Arg)]) -> std::io::Result<()> {
    w.write_all(b"{")?;
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
}

impl Events<'_> {
    fn start(&mut self) -> std::io::Result<()> {
        if self.first {
            self.first = false;
            self.w.write_all(b"\n")
        } else {
            self.w.write_all(b",\n")
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

    /// `B` (with name, category, args) or `E` of `s`.
    fn edge(&mut self, s: &Slice, begin: bool, t: u64, pid: u32, tid: u32) -> std::io::Result<()> {
        self.start()?;
        if begin {
            self.w.write_all(b"{\"name\":")?;
            js(self.w, &s.name)?;
            write!(
                self.w,
                ",\"cat\":\"{}\",\"ph\":\"B\",\"ts\":{},\"pid\":{pid},\"tid\":{tid},\"args\":",
                s.kind.category(),
                us(t)
            )?;
            args(self.w, &s.args)?;
            self.w.write_all(b"}")
        } else {
            write!(
                self.w,
                "{{\"ph\":\"E\",\"ts\":{},\"pid\":{pid},\"tid\":{tid}}}",
                us(t)
            )
        }
    }

    fn complete(&mut self, s: &Slice, pid: u32, tid: u32) -> std::io::Result<()> {
        self.start()?;
        self.w.write_all(b"{\"name\":")?;
        js(self.w, &s.name)?;
        write!(
            self.w,
            ",\"cat\":\"{}\",\"ph\":\"X\",\"ts\":{},\"dur\":{},\"pid\":{pid},\"tid\":{tid},\"args\":",
            s.kind.category(),
            us(s.start_ns),
            us(s.end_ns - s.start_ns)
        )?;
        args(self.w, &s.args)?;
        self.w.write_all(b"}")
    }

    fn flow(&mut self, id: u64, start: bool, t: u64, pid: u32, tid: u32) -> std::io::Result<()> {
        self.start()?;
        let (ph, bp) = if start {
            ("s", "")
        } else {
            ("f", ",\"bp\":\"e\"")
        };
        write!(
            self.w,
            "{{\"name\":\"launch\",\"cat\":\"cuda_flow\",\"ph\":\"{ph}\",\"id\":{id},\"ts\":{},\"pid\":{pid},\"tid\":{tid}{bp}}}",
            us(t)
        )
    }

    fn instant(&mut self, i: &Instant, pid: u32, tid: u32) -> std::io::Result<()> {
        self.start()?;
        self.w.write_all(b"{\"name\":")?;
        js(self.w, &i.name)?;
        write!(
            self.w,
            ",\"cat\":\"pc_samples\",\"ph\":\"i\",\"s\":\"t\",\"ts\":{},\"pid\":{pid},\"tid\":{tid},\"args\":",
            us(i.t_ns)
        )?;
        args(self.w, &i.args)?;
        self.w.write_all(b"}")
    }
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
    let mut ev = Events { w, first: true };
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
            for (at, e) in edges(&t.slices) {
                let (i, begin) = match e {
                    Edge::Begin(i) => (i, true),
                    Edge::End(i) => (i, false),
                };
                let s = &t.slices[i];
                ev.edge(s, begin, at, pid, tid)?;
                if begin && s.kind == SliceKind::CudaApi {
                    if let Some(id) = s.flow {
                        ev.flow(id, true, at, pid, tid)?;
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
        for c in &p.counters {
            let name = format!("{} ({})", c.name, c.unit);
            let mut prefix = Vec::new();
            prefix.extend_from_slice(b"{\"name\":");
            js(&mut prefix, &name)?;
            prefix.extend_from_slice(b",\"cat\":\"timeline\",\"ph\":\"C\",\"ts\":");
            let mut key = Vec::new();
            js(&mut key, &c.unit)?;
            for (t, v) in &c.points {
                if !v.is_finite() {
                    continue;
                }
                ev.start()?;
                ev.w.write_all(&prefix)?;
                write!(ev.w, "{},\"pid\":{pid},\"args\":{{", us(*t))?;
                ev.w.write_all(&key)?;
                write!(ev.w, ":{}}}}}", num(*v))?;
            }
        }
    }
    ev.w.write_all(b"\n]}\n")
}
