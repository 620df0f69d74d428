//! CPU PC samples: from perf records to `RUN/pc_samples.parquet`.
//!
//! `collect --pc-sampling cpu` samples the command's instruction pointer with perf_event
//! (`crate::collect::pc_sampler`, Linux): every sample carries (pid, tid, CLOCK_MONOTONIC
//! time, IP, period). The kernel also writes the side-band records a profiler needs to
//! find which file an address belongs to after the process has gone: `PERF_RECORD_MMAP2`
//! (an executable mapping: start, length, file offset, path), `PERF_RECORD_FORK` and
//! `PERF_RECORD_COMM` with `PERF_RECORD_MISC_COMM_EXEC` (an exec) (perf_event_open(2)).
//! This module, which compiles everywhere, does what `perf report` does with them:
//!
//! 1. [`locate`] replays the records in time order, keeping each process's executable
//!    mappings (a fork copies the parent's, an exec clears them), and turns each sample's IP
//!    into (module, file offset), or marks it as a kernel address or an unmapped one;
//! 2. a [`Symbolize`] implementation (blazesym in production) turns file offsets into
//!    function, source file and line;
//! 3. [`innermost_regions`] gives each sample the innermost region open on its thread at
//!    its time (the region events of powerperf-rt use the same clock);
//! 4. [`aggregate`] counts samples per (pid, tid, region, module, function, file, line).

use powerperf_rt::events::Interval;
use std::collections::HashMap;

/// The table's file name, row type, writer, reader and summaries: the run format's
/// ([`powerperf_format::pc_samples`]).
pub use powerperf_format::pc_samples::{
    per_region, read, top_functions, write, PcRow, RegionSamples, TopFunction, PC_SAMPLES, UNKNOWN,
};

/// perf's `cpumode` of a sample (`misc & PERF_RECORD_MISC_CPUMODE_MASK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CpuMode {
    Kernel,
    User,
    /// Hypervisor, guest or unknown.
    Other,
}

impl CpuMode {
    /// From `misc & 7` (`PERF_RECORD_MISC_KERNEL` = 1, `PERF_RECORD_MISC_USER` = 2).
    pub fn from_misc(misc: u16) -> Self {
        match misc & 7 {
            1 => CpuMode::Kernel,
            2 => CpuMode::User,
            _ => CpuMode::Other,
        }
    }
}

/// A perf record, parsed and owned: the sample itself and the side-band records needed to
/// locate it. Times are CLOCK_MONOTONIC ns (`use_clockid`; side-band records carry the time
/// through `sample_id_all`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PerfRecord {
    /// `PERF_RECORD_SAMPLE` with `IP | TID | TIME | PERIOD`. `period` is in the sampled
    /// event's unit (ns for cpu-clock, cycles for cycles).
    Sample {
        pid: u32,
        tid: u32,
        time_ns: u64,
        ip: u64,
        period: u64,
        mode: CpuMode,
    },
    /// `PERF_RECORD_MMAP2` (or `MMAP`) of an executable mapping of `path` at
    /// `[start, start + len)` from file offset `pgoff`. `path` may be a pseudo name
    /// (`[vdso]`) or empty (anonymous memory, e.g. JIT code).
    Mmap {
        pid: u32,
        time_ns: u64,
        start: u64,
        len: u64,
        pgoff: u64,
        path: String,
    },
    /// `PERF_RECORD_FORK` of a new process (`pid != ppid`) or thread (`pid == ppid`).
    Fork { pid: u32, ppid: u32, time_ns: u64 },
    /// `PERF_RECORD_COMM` with `PERF_RECORD_MISC_COMM_EXEC`: `pid` called exec.
    Exec { pid: u32, time_ns: u64 },
}

impl PerfRecord {
    /// The record's time, CLOCK_MONOTONIC ns.
    pub fn time_ns(&self) -> u64 {
        match self {
            PerfRecord::Sample { time_ns, .. }
            | PerfRecord::Mmap { time_ns, .. }
            | PerfRecord::Fork { time_ns, .. }
            | PerfRecord::Exec { time_ns, .. } => *time_ns,
        }
    }
}

/// Where a sampled IP lies.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Location {
    /// In a file-backed mapping: the module's path and the offset in that file.
    File { module: String, offset: u64 },
    /// In a mapping without a file (`[vdso]`, `[heap]`, anonymous memory: `module` is the
    /// name the kernel gave, `//anon` for none, as perf names it).
    Pseudo { module: String },
    /// A kernel address (`[kernel.kallsyms]`).
    Kernel { addr: u64 },
    /// No mapping of the process covers the address (its mapping was not seen).
    Unmapped,
}

/// A sample with its location.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Located {
    pub pid: u32,
    pub tid: u32,
    pub time_ns: u64,
    pub ip: u64,
    pub period: u64,
    pub location: Location,
}

#[derive(Debug, Clone)]
struct Map {
    start: u64,
    end: u64,
    pgoff: u64,
    path: String,
}

/// Replay `records` in time order (stable: records with equal times keep their order) and
/// locate every sample (see the module docs). Processes whose first mapping was not seen
/// (they started before sampling) have their samples [`Location::Unmapped`].
pub fn locate(records: &[PerfRecord]) -> Vec<Located> {
    let mut order: Vec<usize> = (0..records.len()).collect();
    order.sort_by_key(|&i| records[i].time_ns());
    let mut maps: HashMap<u32, Vec<Map>> = HashMap::new();
    let mut out = Vec::new();
    for i in order {
        match &records[i] {
            PerfRecord::Mmap {
                pid,
                start,
                len,
                pgoff,
                path,
                ..
            } => {
                let end = start.saturating_add(*len);
                let m = maps.entry(*pid).or_default();
                // A new mapping replaces whatever it overlaps (mmap(2) MAP_FIXED semantics);
                // partly overlapped older mappings stay, and lookups try the newest first.
                m.retain(|o| !(o.start >= *start && o.end <= end));
                m.push(Map {
                    start: *start,
                    end,
                    pgoff: *pgoff,
                    path: path.clone(),
                });
            }
            PerfRecord::Fork { pid, ppid, .. } if pid != ppid => {
                let parent = maps.get(ppid).cloned().unwrap_or_default();
                maps.insert(*pid, parent);
            }
            PerfRecord::Fork { .. } => {}
            PerfRecord::Exec { pid, .. } => {
                maps.remove(pid);
            }
            PerfRecord::Sample {
                pid,
                tid,
                time_ns,
                ip,
                period,
                mode,
            } => {
                let location = match mode {
                    CpuMode::Kernel => Location::Kernel { addr: *ip },
                    _ => match maps
                        .get(pid)
                        .and_then(|m| m.iter().rev().find(|m| m.start <= *ip && *ip < m.end))
                    {
                        Some(m) if m.path.starts_with('/') => Location::File {
                            module: m.path.clone(),
                            offset: ip - m.start + m.pgoff,
                        },
                        Some(m) if m.path.is_empty() => Location::Pseudo {
                            module: "//anon".into(),
                        },
                        Some(m) => Location::Pseudo {
                            module: m.path.clone(),
                        },
                        None => Location::Unmapped,
                    },
                };
                out.push(Located {
                    pid: *pid,
                    tid: *tid,
                    time_ns: *time_ns,
                    ip: *ip,
                    period: *period,
                    location,
                });
            }
        }
    }
    out
}

/// What a symboliser knows of an address.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Symbol {
    /// Demangled function name.
    pub function: String,
    /// Source file (directory joined with the file name, as the DWARF line table has it).
    pub file: Option<String>,
    /// Source line (1-based) of the instruction, from the DWARF line table: the innermost
    /// line, also when the code was inlined from another function.
    pub line: Option<u32>,
    /// The address as the module's ELF file has it (what `objdump -d` shows).
    pub module_addr: Option<u64>,
}

/// Turns locations into symbols. Errors are per address: `None` is "unknown".
pub trait Symbolize {
    /// Symbols of `offsets` (file offsets) in the ELF file `module`, one per offset.
    fn file_offsets(&mut self, module: &str, offsets: &[u64]) -> Vec<Option<Symbol>>;
    /// Symbols of kernel addresses, one per address.
    fn kernel(&mut self, addrs: &[u64]) -> Vec<Option<Symbol>>;
}

/// One symbolised sample: its location's module and symbol.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SymbolizedSample {
    pub sample: Located,
    /// The module: a file path, a pseudo name, `[kernel.kallsyms]`, or `None` (unmapped).
    pub module: Option<String>,
    pub symbol: Option<Symbol>,
}

/// Symbolise located samples, batching the addresses per module.
pub fn symbolize(samples: Vec<Located>, sym: &mut dyn Symbolize) -> Vec<SymbolizedSample> {
    let mut per_module: HashMap<String, Vec<u64>> = HashMap::new();
    let mut kernel: Vec<u64> = Vec::new();
    for s in &samples {
        match &s.location {
            Location::File { module, offset } => {
                per_module.entry(module.clone()).or_default().push(*offset)
            }
            Location::Kernel { addr } => kernel.push(*addr),
            _ => {}
        }
    }
    let mut known: HashMap<(Option<&str>, u64), Option<Symbol>> = HashMap::new();
    for (module, mut offs) in per_module.iter().map(|(m, o)| (m, o.clone())) {
        offs.sort_unstable();
        offs.dedup();
        for (o, s) in offs.iter().zip(sym.file_offsets(module, &offs)) {
            known.insert((Some(module.as_str()), *o), s);
        }
    }
    kernel.sort_unstable();
    kernel.dedup();
    for (a, s) in kernel.iter().zip(sym.kernel(&kernel)) {
        known.insert((None, *a), s);
    }
    samples
        .into_iter()
        .map(|s| {
            let (module, symbol) = match &s.location {
                Location::File { module, offset } => (
                    Some(module.clone()),
                    known
                        .get(&(Some(module.as_str()), *offset))
                        .cloned()
                        .flatten(),
                ),
                Location::Kernel { addr } => (
                    Some("[kernel.kallsyms]".to_string()),
                    known.get(&(None, *addr)).cloned().flatten(),
                ),
                Location::Pseudo { module } => (Some(module.clone()), None),
                Location::Unmapped => (None, None),
            };
            SymbolizedSample {
                sample: s,
                module,
                symbol,
            }
        })
        .collect()
}

/// For each `(pid, tid, time_ns)`, the path of the innermost region instance open on that
/// thread at that time (`start_ns <= t < end_ns`), or `None`.
///
/// `intervals` are powerperf-rt's nested per-thread region instances on CLOCK_MONOTONIC
/// ([`powerperf_rt::events::analyze`]). Cost: O((n + m) log(n + m)) for n samples and m
/// intervals (a sweep per thread).
pub fn innermost_regions(
    samples: &[(u32, u32, u64)],
    intervals: &[Interval],
) -> Vec<Option<String>> {
    let mut by_thread: HashMap<(u32, u32), Vec<&Interval>> = HashMap::new();
    for iv in intervals {
        by_thread.entry((iv.pid, iv.tid)).or_default().push(iv);
    }
    let mut order: Vec<usize> = (0..samples.len()).collect();
    order.sort_by_key(|&i| samples[i]);
    let mut out = vec![None; samples.len()];
    let mut k = 0;
    while k < order.len() {
        let (pid, tid, _) = samples[order[k]];
        let end = k + order[k..]
            .iter()
            .take_while(|&&i| (samples[i].0, samples[i].1) == (pid, tid))
            .count();
        if let Some(ivs) = by_thread.get_mut(&(pid, tid)) {
            ivs.sort_by_key(|iv| (iv.start_ns, iv.depth));
            let mut next = 0;
            // Instances open at the current time; the deepest is the innermost.
            let mut open: Vec<&Interval> = Vec::new();
            for &i in &order[k..end] {
                let t = samples[i].2;
                while next < ivs.len() && ivs[next].start_ns <= t {
                    open.push(ivs[next]);
                    next += 1;
                }
                open.retain(|iv| iv.end_ns > t);
                out[i] = open
                    .iter()
                    .max_by_key(|iv| (iv.depth, iv.start_ns))
                    .map(|iv| iv.path.clone());
            }
        }
        k = end;
    }
    out
}

/// Aggregate symbolised samples with their regions (same order) into rows, most samples
/// first (ties: by function, then line).
pub fn aggregate(samples: &[SymbolizedSample], regions: &[Option<String>]) -> Vec<PcRow> {
    type Key<'a> = (
        u32,
        u32,
        Option<&'a str>,
        Option<&'a str>,
        &'a str,
        Option<&'a str>,
        Option<u32>,
    );
    struct Acc {
        samples: u64,
        period: u64,
        /// ip -> (count, module_addr)
        pcs: HashMap<u64, (u64, Option<u64>)>,
    }
    let mut acc: HashMap<Key<'_>, Acc> = HashMap::new();
    for (s, r) in samples.iter().zip(regions) {
        let sym = s.symbol.as_ref();
        let key = (
            s.sample.pid,
            s.sample.tid,
            r.as_deref(),
            s.module.as_deref(),
            sym.map(|y| y.function.as_str()).unwrap_or(UNKNOWN),
            sym.and_then(|y| y.file.as_deref()),
            sym.and_then(|y| y.line),
        );
        let a = acc.entry(key).or_insert_with(|| Acc {
            samples: 0,
            period: 0,
            pcs: HashMap::new(),
        });
        a.samples += 1;
        a.period += s.sample.period;
        a.pcs
            .entry(s.sample.ip)
            .or_insert((0, sym.and_then(|y| y.module_addr)))
            .0 += 1;
    }
    let mut rows: Vec<PcRow> = acc
        .into_iter()
        .map(|((pid, tid, region, module, function, file, line), a)| {
            let (pc, (_, module_addr)) = a
                .pcs
                .iter()
                .max_by_key(|(ip, (n, _))| (*n, std::cmp::Reverse(**ip)))
                .map(|(ip, v)| (*ip, *v))
                .unwrap_or((0, (0, None)));
            PcRow {
                device: "cpu".into(),
                pid,
                tid,
                region: region.map(String::from),
                module: module.map(String::from),
                function: function.to_string(),
                file: file.map(String::from),
                line,
                pc,
                module_addr,
                stall_reason: None,
                samples: a.samples,
                period: a.period,
            }
        })
        .collect();
    rows.sort_by(|a, b| {
        b.samples
            .cmp(&a.samples)
            .then_with(|| a.function.cmp(&b.function))
            .then_with(|| a.line.cmp(&b.line))
            .then_with(|| (a.pid, a.tid, &a.region).cmp(&(b.pid, b.tid, &b.region)))
    });
    rows
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(pid: u32, tid: u32, t: u64, ip: u64) -> PerfRecord {
        PerfRecord::Sample {
            pid,
            tid,
            time_ns: t,
            ip,
            period: 1000,
            mode: CpuMode::User,
        }
    }

    fn mmap(pid: u32, t: u64, start: u64, path: &str) -> PerfRecord {
        PerfRecord::Mmap {
            pid,
            time_ns: t,
            start,
            len: 0x1000,
            pgoff: 0x2000,
            path: path.into(),
        }
    }

    #[test]
    fn locate_follows_mmap_fork_and_exec_in_time_order() {
        let recs = vec![
            // Out of order on purpose: records come from several per-CPU buffers.
            sample(10, 10, 5, 0x1010),
            mmap(10, 1, 0x1000, "/bin/a"),
            PerfRecord::Fork {
                pid: 11,
                ppid: 10,
                time_ns: 6,
            },
            sample(11, 11, 7, 0x1020),
            PerfRecord::Exec {
                pid: 11,
                time_ns: 8,
            },
            sample(11, 11, 9, 0x1030),
            mmap(11, 10, 0x1000, "[vdso]"),
            sample(11, 12, 11, 0x1040),
            PerfRecord::Sample {
                pid: 10,
                tid: 10,
                time_ns: 12,
                ip: 0xffff_ffff_8100_0000,
                period: 1,
                mode: CpuMode::Kernel,
            },
        ];
        let l = locate(&recs);
        let locs: Vec<_> = l.iter().map(|s| (s.time_ns, s.location.clone())).collect();
        assert_eq!(
            locs,
            vec![
                (
                    5,
                    Location::File {
                        module: "/bin/a".into(),
                        offset: 0x2010
                    }
                ),
                (
                    7,
                    Location::File {
                        module: "/bin/a".into(),
                        offset: 0x2020
                    }
                ),
                (9, Location::Unmapped),
                (
                    11,
                    Location::Pseudo {
                        module: "[vdso]".into()
                    }
                ),
                (
                    12,
                    Location::Kernel {
                        addr: 0xffff_ffff_8100_0000
                    }
                ),
            ]
        );
    }

    fn iv(tid: u32, path: &str, depth: u32, start: u64, end: u64) -> Interval {
        Interval {
            pid: 1,
            tid,
            region: path.rsplit('/').next().unwrap().into(),
            path: path.into(),
            start_ns: start,
            end_ns: end,
            depth,
            closed_by_exit: false,
            counters: vec![],
        }
    }

    #[test]
    fn innermost_region_per_thread() {
        let ivs = vec![
            iv(1, "solve", 0, 100, 200),
            iv(1, "solve/step", 1, 110, 120),
            iv(1, "solve/step", 1, 150, 160),
            iv(2, "worker", 0, 0, 1000),
        ];
        let samples = [
            (1, 1, 50),
            (1, 1, 105),
            (1, 1, 115),
            (1, 1, 120), // the end is exclusive
            (1, 1, 155),
            (1, 1, 250),
            (1, 2, 115),
            (1, 3, 115), // a thread without regions
            (2, 1, 115), // another process
        ];
        let r = innermost_regions(&samples, &ivs);
        let r: Vec<Option<&str>> = r.iter().map(|x| x.as_deref()).collect();
        assert_eq!(
            r,
            vec![
                None,
                Some("solve"),
                Some("solve/step"),
                Some("solve"),
                Some("solve/step"),
                None,
                Some("worker"),
                None,
                None
            ]
        );
    }

    struct Fake;
    impl Symbolize for Fake {
        fn file_offsets(&mut self, module: &str, offsets: &[u64]) -> Vec<Option<Symbol>> {
            offsets
                .iter()
                .map(|o| {
                    (module == "/bin/a").then(|| Symbol {
                        function: if *o < 0x2800 { "hot" } else { "cold" }.into(),
                        file: Some("/src/a.c".into()),
                        line: Some((*o / 0x10) as u32),
                        module_addr: Some(*o + 0x400000),
                    })
                })
                .collect()
        }
        fn kernel(&mut self, addrs: &[u64]) -> Vec<Option<Symbol>> {
            vec![None; addrs.len()]
        }
    }

    #[test]
    fn aggregate_counts_per_function_line_and_region() {
        let mut recs = vec![PerfRecord::Mmap {
            pid: 1,
            time_ns: 0,
            start: 0x1000,
            len: 0x2000,
            pgoff: 0x1000,
            path: "/bin/a".into(),
        }];
        // 30 samples in hot (line 0x121) inside region r, 10 in cold outside, 2 in /lib/b.
        for t in 0..30 {
            recs.push(sample(1, 1, 100 + t, 0x1210 + (t % 2) * 4));
        }
        for t in 0..10 {
            recs.push(sample(1, 1, 300 + t, 0x2900));
        }
        recs.push(mmap(1, 400, 0x8000, "/lib/b"));
        recs.push(sample(1, 1, 401, 0x8004));
        recs.push(sample(1, 1, 402, 0x8004));
        let located = locate(&recs);
        let symd = symbolize(located, &mut Fake);
        let keys: Vec<_> = symd
            .iter()
            .map(|s| (s.sample.pid, s.sample.tid, s.sample.time_ns))
            .collect();
        let regions = innermost_regions(&keys, &[iv(1, "r", 0, 100, 200)]);
        let rows = aggregate(&symd, &regions);
        assert_eq!(rows.len(), 3, "{rows:#?}");
        let hot = &rows[0];
        assert_eq!(
            (
                hot.function.as_str(),
                hot.samples,
                hot.line,
                hot.region.as_deref()
            ),
            ("hot", 30, Some(0x121), Some("r"))
        );
        assert_eq!(hot.period, 30_000);
        // Representative pc: the two IPs have 15 samples each; the lower wins.
        assert_eq!(hot.pc, 0x1210);
        assert_eq!(hot.module_addr, Some(0x1210 + 0x400000));
        let cold = &rows[1];
        assert_eq!((cold.function.as_str(), cold.samples), ("cold", 10));
        assert_eq!(cold.region, None);
        let unk = &rows[2];
        assert_eq!(
            (unk.function.as_str(), unk.module.as_deref(), unk.samples),
            (UNKNOWN, Some("/lib/b"), 2)
        );
        let top = top_functions(&rows, 10);
        assert_eq!(top[0].function, "hot");
        assert!((top[0].overhead_pct - 100.0 * 30.0 / 42.0).abs() < 1e-9);
        let pr = per_region(&rows);
        assert_eq!(pr[0].region.as_deref(), Some("r"));
        assert_eq!(pr[0].top_function, "hot");
        assert_eq!(pr[1].samples, 12);

        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join(PC_SAMPLES);
        write(&rows, &p).unwrap();
        let back = read(dir.path()).unwrap().unwrap();
        assert_eq!(back, rows);
    }
}
