//! CPU PC sampling through `perf_event_open(2)` (perf-event2) and symbolisation with
//! blazesym: `powerperf collect --pc-sampling cpu`.
//!
//! Opened as `perf record -F HZ CMD` opens it: one sampling event per online CPU with
//! `pid` = the command (paused before exec), `inherit` (its threads and children are
//! sampled too), `enable_on_exec`; the kernel refuses to mmap an inherited per-task event
//! with `cpu = -1`, so the events are per CPU, each with its ring buffer. Hardware `cycles`
//! where the PMU has it, else the software `cpu-clock` (as perf falls back); kernel samples
//! are dropped (`exclude_kernel`, perf's `:u`) when the kernel refuses them.
//!
//! Every sample carries IP, pid/tid, CLOCK_MONOTONIC time (`use_clockid`, the clock of the
//! region events) and period. The events also ask for `mmap`/`mmap2`, `comm`/`comm_exec`
//! and `task` side-band records with `sample_id_all`, so the executable mappings are known
//! with their times after the command has exited (a snapshot of `/proc/PID/maps` would miss
//! short-lived children and later `dlopen`s). A reader thread drains the ring buffers every
//! 10 ms (or when a buffer is a quarter full), so they do not overflow silently; records
//! the kernel still drops are counted from `PERF_RECORD_LOST`.
//!
//! Symbolisation is blazesym's (libbpf/blazesym): file offsets in ELF files (function from
//! the symbol tables, file and line from DWARF, demangled), kernel addresses from
//! `/proc/kallsyms`.

use super::pc_samples::{self, CpuMode, PerfRecord, Symbol, Symbolize};
use perf_event::data::{self, RecordMetadata, Visitor};
use perf_event::events::{Hardware, Software};
use perf_event::{Builder, Clock, SampleFlag, Sampler};
use perf_event_open_sys::bindings;
use powerperf_node::event_spec::EventStatus;
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Default sampling frequency, Hz: `perf record`'s default (`-F 4000` on recent perf,
/// 999 in older ones and in `perf top`); 999 avoids lockstep with 1 kHz timers.
pub const DEFAULT_FREQ_HZ: u64 = 999;

/// Ring buffer per CPU, bytes (a power of two of pages; perf record uses 512 KiB for root).
const RING_BYTES: usize = 256 * 1024;
/// Fallback when the locked-memory limit refuses the larger buffer (`perf_event_mlock_kb`).
const RING_BYTES_SMALL: usize = 32 * 1024;

/// Sampling events opened on a paused command.
pub struct Opened {
    samplers: Vec<Sampler>,
    /// `cycles` or `cpu-clock`.
    pub event: String,
    /// Unit of a sample's period: `cycles` or `ns`.
    pub period_unit: String,
    pub frequency_hz: u64,
    /// Kernel samples excluded after a permission error.
    pub user_only: bool,
    /// Fallbacks taken, for run.toml's notes.
    pub notes: Vec<String>,
    /// `Mmap` records of the mappings that existed when sampling began (`-p`, `-a`, `-C`).
    existing: Vec<PerfRecord>,
}

/// The online CPUs by number (`/sys/devices/system/cpu/online`); without it, the first
/// [`super::sysinfo::available_cpus`].
pub fn online_cpu_list() -> Vec<usize> {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|s| powerperf_node::pmu::parse_cpu_list(s.trim()).ok())
        .unwrap_or_else(|| (0..super::sysinfo::available_cpus()).collect())
}

/// What to sample, as collect's modes: the command (paused before exec), the threads of a
/// running process (`-p`), or every process on some CPUs (`-a`, `-C`).
#[derive(Debug, Clone, Copy)]
pub enum SampleTarget<'a> {
    Command(i32),
    Tasks { pid: i32, tids: &'a [i32] },
    Cpus(&'a [usize]),
}

impl SampleTarget<'_> {
    /// (pid or -1 for any, cpu) of each sampling event.
    fn events(&self, online: &[usize]) -> Vec<(i32, usize)> {
        match self {
            SampleTarget::Command(pid) => online.iter().map(|&c| (*pid, c)).collect(),
            SampleTarget::Tasks { tids, .. } => tids
                .iter()
                .flat_map(|&t| online.iter().map(move |&c| (t, c)))
                .collect(),
            SampleTarget::Cpus(cpus) => cpus.iter().map(|&c| (-1, c)).collect(),
        }
    }
}

fn open_one(
    hw: bool,
    target: &SampleTarget,
    (pid, cpu): (i32, usize),
    freq: u64,
    user_only: bool,
    ring: usize,
) -> std::io::Result<Sampler> {
    let mut b = if hw {
        Builder::new(Hardware::CPU_CYCLES)
    } else {
        Builder::new(Software::CPU_CLOCK)
    };
    match target {
        // perf record CMD: follow the command from its exec on.
        SampleTarget::Command(_) => {
            b.observe_pid(pid)
                .inherit(true)
                .enable_on_exec(true)
                .enabled(false);
        }
        // perf record -p: the threads now, and the threads they start.
        SampleTarget::Tasks { .. } => {
            b.observe_pid(pid).inherit(true).enabled(true);
        }
        // perf record -a / -C: every task on the CPU.
        SampleTarget::Cpus(_) => {
            b.any_pid().enabled(true);
        }
    }
    b.one_cpu(cpu)
        .sample_frequency(freq)
        .sample(SampleFlag::IP | SampleFlag::TID | SampleFlag::TIME | SampleFlag::PERIOD)
        .clockid(Clock::MONOTONIC)
        .sample_id_all(true)
        .mmap(true)
        .mmap2(true)
        .comm(true)
        .comm_exec(true)
        .task(true)
        .exclude_kernel(user_only)
        .exclude_hv(true)
        .wakeup_watermark(ring / 4);
    b.build()?.sampled(ring)
}

/// The executable mappings of process `pid` now, from `/proc/PID/maps` (proc(5)), as
/// `Mmap` records at time 0, as perf record synthesises them for processes that were
/// running before it started (`-p`, `-a`): the kernel reports only mappings made later.
pub fn existing_mappings(pid: u32) -> Vec<PerfRecord> {
    let Ok(text) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    text.lines()
        .filter_map(|line| {
            // start-end perms offset dev inode [path]
            let mut f = line.split_ascii_whitespace();
            let (range, perms, off) = (f.next()?, f.next()?, f.next()?);
            let (_dev, _inode) = (f.next()?, f.next()?);
            if !perms.contains('x') {
                return None;
            }
            let (a, b) = range.split_once('-')?;
            let start = u64::from_str_radix(a, 16).ok()?;
            let end = u64::from_str_radix(b, 16).ok()?;
            let path = f.collect::<Vec<_>>().join(" ");
            Some(PerfRecord::Mmap {
                pid,
                time_ns: 0,
                start,
                len: end.saturating_sub(start),
                pgoff: u64::from_str_radix(off, 16).ok()?,
                path,
            })
        })
        .collect()
}

/// Every process's executable mappings now (`-a`, `-C`).
fn all_existing_mappings() -> Vec<PerfRecord> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .flat_map(existing_mappings)
        .collect()
}

fn max_sample_rate() -> Option<u64> {
    std::fs::read_to_string("/proc/sys/kernel/perf_event_max_sample_rate")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Open the sampling events on `pid` (a child paused before exec: sampling starts at its
/// exec) at `freq` Hz.
///
/// # Errors
/// `(status, reason)` with the fix: a frequency above `kernel.perf_event_max_sample_rate`,
/// a permission error (`perf_event_paranoid`), or no sampling event this machine offers.
pub fn open(target: SampleTarget, freq: u64) -> Result<Opened, (EventStatus, String)> {
    let max = max_sample_rate();
    if freq == 0 {
        return Err((
            EventStatus::NotSupported,
            "--sample-freq 0: give a frequency in Hz (e.g. 999)".into(),
        ));
    }
    if let Some(m) = max.filter(|m| freq > *m) {
        return Err((
            EventStatus::NotSupported,
            format!(
                "--sample-freq {freq} Hz is above kernel.perf_event_max_sample_rate ({m} Hz): lower it, or raise the limit with `sudo sysctl kernel.perf_event_max_sample_rate={freq}`"
            ),
        ));
    }
    let online = online_cpu_list();
    let events = target.events(&online);
    let mut notes = Vec::new();
    let Some(&first) = events.first() else {
        return Err((
            EventStatus::NotSupported,
            "pc sampling: no thread or CPU to sample".into(),
        ));
    };
    // Probe on the first CPU: which event, with the kernel or not, which buffer size.
    let mut chosen = None;
    let mut last_err = None;
    'probe: for hw in [true, false] {
        for user_only in [false, true] {
            for ring in [RING_BYTES, RING_BYTES_SMALL] {
                match open_one(hw, &target, first, freq, user_only, ring) {
                    Ok(s) => {
                        chosen = Some((hw, user_only, ring, s));
                        break 'probe;
                    }
                    Err(e) => {
                        let denied =
                            matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM));
                        last_err = Some(e);
                        // Only a permission error is worth the next attempt on this event
                        // (a smaller buffer, then no kernel samples).
                        if !denied {
                            continue 'probe;
                        }
                    }
                }
            }
        }
    }
    let Some((hw, user_only, ring, s0)) = chosen else {
        let e = last_err.expect("at least one attempt");
        let denied = matches!(e.raw_os_error(), Some(libc::EACCES) | Some(libc::EPERM));
        return Err(if denied {
            (
                EventStatus::PermissionDenied,
                format!(
                    "perf_event_open for cpu-clock sampling: {e}. {}",
                    powerperf_node::perf_event::permission_fix()
                ),
            )
        } else {
            (
                EventStatus::NotSupported,
                format!("perf_event_open for cpu-clock sampling: {e}"),
            )
        });
    };
    if !hw {
        notes.push("pc sampling: hardware cycles are not available here (no PMU counters: a virtual machine without a virtual PMU); sampling the software cpu-clock event instead, as perf record does".into());
    }
    if user_only {
        notes.push(format!(
            "pc sampling: kernel samples excluded after a permission error (perf's `:u`); {}",
            powerperf_node::perf_event::permission_fix()
        ));
    }
    if ring != RING_BYTES {
        notes.push(format!(
            "pc sampling: ring buffers of {} KiB per CPU (the locked-memory limit kernel.perf_event_mlock_kb refused {} KiB)",
            ring / 1024,
            RING_BYTES / 1024
        ));
    }
    let mut samplers = vec![s0];
    for &(pid, cpu) in events.iter().skip(1) {
        match open_one(hw, &target, (pid, cpu), freq, user_only, ring) {
            Ok(s) => samplers.push(s),
            Err(e) => notes.push(format!(
                "pc sampling: not sampled on CPU {cpu}{}: perf_event_open: {e} (samples taken there are missing)",
                if pid > 0 { format!(" for thread {pid}") } else { String::new() }
            )),
        }
    }
    // Mappings made before the sampling began: the kernel reports only later ones.
    let existing = match target {
        SampleTarget::Command(_) => Vec::new(),
        SampleTarget::Tasks { pid, .. } => existing_mappings(pid as u32),
        SampleTarget::Cpus(_) => all_existing_mappings(),
    };
    Ok(Opened {
        samplers,
        event: if hw { "cycles" } else { "cpu-clock" }.into(),
        period_unit: if hw { "cycles" } else { "ns" }.into(),
        frequency_hz: freq,
        user_only,
        notes,
        existing,
    })
}

/// What the reader thread collected.
#[derive(Debug, Default)]
pub struct Collected {
    pub records: Vec<PerfRecord>,
    /// Samples read.
    pub samples: u64,
    /// Records the kernel dropped because a ring buffer was full (`PERF_RECORD_LOST`).
    pub lost: u64,
    /// `PERF_RECORD_THROTTLE` records: the kernel lowered the rate
    /// (`kernel.perf_cpu_time_max_percent`).
    pub throttled: u64,
    /// Records that could not be parsed (skipped).
    pub unparsed: u64,
}

/// The reader thread, draining the ring buffers until [`Reader::finish`].
pub struct Reader {
    stop: Arc<AtomicBool>,
    handle: JoinHandle<Collected>,
}

/// Parses the records into [`PerfRecord`]s (and counts lost and throttle records).
struct Parse;

enum Parsed {
    Record(PerfRecord),
    Lost(u64),
    Throttle,
    Skip,
}

impl<'a> Visitor<'a> for Parse {
    type Output = Parsed;

    fn visit_unimplemented(self, _: RecordMetadata) -> Parsed {
        Parsed::Skip
    }

    fn visit_sample(self, s: data::Sample<'a>, m: RecordMetadata) -> Parsed {
        match (s.pid(), s.tid(), s.time(), s.ip()) {
            (Some(pid), Some(tid), Some(time_ns), Some(ip)) => Parsed::Record(PerfRecord::Sample {
                pid,
                tid,
                time_ns,
                ip,
                period: s.period().unwrap_or(0),
                mode: CpuMode::from_misc(m.misc()),
            }),
            _ => Parsed::Skip,
        }
    }

    fn visit_mmap2(self, r: data::Mmap2<'a>, m: RecordMetadata) -> Parsed {
        mmap_record(r.pid, r.addr, r.len, r.pgoff, &r.filename, &m)
    }

    fn visit_mmap(self, r: data::Mmap<'a>, m: RecordMetadata) -> Parsed {
        mmap_record(r.pid, r.addr, r.len, r.pgoff, &r.filename, &m)
    }

    fn visit_comm(self, r: data::Comm<'a>, m: RecordMetadata) -> Parsed {
        if m.misc() & bindings::PERF_RECORD_MISC_COMM_EXEC as u16 != 0 {
            Parsed::Record(PerfRecord::Exec {
                pid: r.pid,
                time_ns: m.sample_id().time().unwrap_or(0),
            })
        } else {
            Parsed::Skip
        }
    }

    fn visit_fork(self, r: data::Fork, _: RecordMetadata) -> Parsed {
        Parsed::Record(PerfRecord::Fork {
            pid: r.pid,
            ppid: r.ppid,
            time_ns: r.time,
        })
    }

    fn visit_lost(self, r: data::Lost, _: RecordMetadata) -> Parsed {
        Parsed::Lost(r.lost)
    }

    fn visit_throttle(self, _: data::Throttle, _: RecordMetadata) -> Parsed {
        Parsed::Throttle
    }
}

/// `PERF_RECORD_MMAP` and `MMAP2` carry the same fields powerperf keeps.
fn mmap_record(
    pid: u32,
    start: u64,
    len: u64,
    pgoff: u64,
    filename: &[u8],
    m: &RecordMetadata,
) -> Parsed {
    Parsed::Record(PerfRecord::Mmap {
        pid,
        time_ns: m.sample_id().time().unwrap_or(0),
        start,
        len,
        pgoff,
        path: String::from_utf8_lossy(filename).into_owned(),
    })
}

fn drain(s: &mut Sampler, c: &mut Collected) {
    let config = s.as_counter().config().clone();
    while let Some(rec) = s.next_record() {
        match powerperf_node::perf_event::parse_record(&rec, &config, Parse) {
            Ok(Parsed::Record(r)) => {
                if matches!(r, PerfRecord::Sample { .. }) {
                    c.samples += 1;
                }
                c.records.push(r);
            }
            Ok(Parsed::Lost(n)) => c.lost += n,
            Ok(Parsed::Throttle) => c.throttled += 1,
            Ok(Parsed::Skip) => {}
            Err(_) => c.unparsed += 1,
        }
    }
}

/// Start the thread that drains the ring buffers of `opened` (every 10 ms, or sooner when
/// a buffer is a quarter full).
pub fn start(opened: Opened) -> (Reader, OpenedInfo) {
    let info = OpenedInfo {
        event: opened.event,
        period_unit: opened.period_unit,
        frequency_hz: opened.frequency_hz,
        user_only: opened.user_only,
        notes: opened.notes,
        cpus: opened.samplers.len(),
    };
    let mut samplers = opened.samplers;
    let existing = opened.existing;
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let handle = std::thread::spawn(move || {
        let mut c = Collected {
            records: existing,
            ..Collected::default()
        };
        let mut fds: Vec<libc::pollfd> = samplers
            .iter()
            .map(|s| libc::pollfd {
                fd: s.as_counter().as_raw_fd(),
                events: libc::POLLIN,
                revents: 0,
            })
            .collect();
        loop {
            let stopping = stop2.load(Ordering::SeqCst);
            for s in &mut samplers {
                drain(s, &mut c);
            }
            if stopping {
                break;
            }
            // SAFETY: fds is a valid array of pollfd of the given length.
            unsafe {
                libc::poll(
                    fds.as_mut_ptr(),
                    fds.len() as libc::nfds_t,
                    Duration::from_millis(10).as_millis() as i32,
                )
            };
        }
        c
    });
    (Reader { stop, handle }, info)
}

/// What was opened, for run.toml.
#[derive(Debug, Clone)]
pub struct OpenedInfo {
    pub event: String,
    pub period_unit: String,
    pub frequency_hz: u64,
    pub user_only: bool,
    pub notes: Vec<String>,
    /// Sampling events opened: one per CPU (per thread and CPU with `-p`).
    pub cpus: usize,
}

impl Reader {
    /// Stop after a last drain (call once the command has exited) and return what was read.
    pub fn finish(self) -> Collected {
        self.stop.store(true, Ordering::SeqCst);
        self.handle.join().unwrap_or_default()
    }
}

/// blazesym as a [`Symbolize`].
pub struct Blaze {
    symbolizer: blazesym::symbolize::Symbolizer,
}

impl Default for Blaze {
    fn default() -> Self {
        Blaze {
            symbolizer: blazesym::symbolize::Symbolizer::builder()
                .enable_code_info(true)
                // The function is the ELF symbol (as perf report shows it); file and line
                // come from the line table, so they are the innermost (inlined) location.
                .enable_inlined_fns(false)
                .enable_demangling(true)
                .build(),
        }
    }
}

fn to_symbol(s: blazesym::symbolize::Symbolized<'_>) -> Option<Symbol> {
    match s {
        blazesym::symbolize::Symbolized::Sym(sym) => Some(Symbol {
            function: sym.name.to_string(),
            file: sym
                .code_info
                .as_ref()
                .map(|c| c.to_path().display().to_string()),
            line: sym.code_info.as_ref().and_then(|c| c.line),
            module_addr: Some(sym.addr + sym.offset as u64),
        }),
        blazesym::symbolize::Symbolized::Unknown(_) => None,
    }
}

impl Symbolize for Blaze {
    fn file_offsets(&mut self, module: &str, offsets: &[u64]) -> Vec<Option<Symbol>> {
        use blazesym::symbolize::{source::Elf, source::Source, Input};
        let src = Source::Elf(Elf::new(module));
        match self.symbolizer.symbolize(&src, Input::FileOffset(offsets)) {
            Ok(v) => v.into_iter().map(to_symbol).collect(),
            Err(e) => {
                tracing::debug!("symbolising {module}: {e}");
                vec![None; offsets.len()]
            }
        }
    }

    fn kernel(&mut self, addrs: &[u64]) -> Vec<Option<Symbol>> {
        use blazesym::symbolize::{source::Kernel, source::Source, Input};
        use blazesym::MaybeDefault;
        let src = Source::Kernel(Kernel {
            kallsyms: MaybeDefault::Default,
            // A vmlinux search walks several directories; kallsyms has the names.
            vmlinux: MaybeDefault::None,
            ..Kernel::default()
        });
        match self.symbolizer.symbolize(&src, Input::AbsAddr(addrs)) {
            Ok(v) => v
                .into_iter()
                .map(|s| {
                    to_symbol(s).map(|mut y| {
                        y.file = None;
                        y.line = None;
                        y
                    })
                })
                .collect(),
            Err(e) => {
                tracing::debug!("symbolising kernel addresses: {e}");
                vec![None; addrs.len()]
            }
        }
    }
}

/// Totals for run.toml's `[pc_sampling]`.
#[derive(Debug, Clone)]
pub struct Written {
    pub rows: usize,
    pub unknown_samples: u64,
    pub notes: Vec<String>,
}

/// Locate, symbolise, attribute to regions, aggregate and write `RUN/pc_samples.parquet`.
///
/// # Errors
/// Unreadable region events or an unwritable file.
pub fn write(run_dir: &std::path::Path, collected: &Collected) -> anyhow::Result<Written> {
    let located = pc_samples::locate(&collected.records);
    let symbolized = pc_samples::symbolize(located, &mut Blaze::default());
    let mut notes = Vec::new();
    let read = powerperf_rt::events::read_dir_report(run_dir)?;
    let intervals = powerperf_rt::events::analyze(&read.events).intervals;
    let keys: Vec<(u32, u32, u64)> = symbolized
        .iter()
        .map(|s| (s.sample.pid, s.sample.tid, s.sample.time_ns))
        .collect();
    let regions = pc_samples::innermost_regions(&keys, &intervals);
    let unknown = symbolized.iter().filter(|s| s.symbol.is_none()).count() as u64;
    let unmapped = symbolized.iter().filter(|s| s.module.is_none()).count();
    if unmapped > 0 {
        notes.push(format!(
            "pc sampling: {unmapped} sample(s) at addresses no mapping seen covers are [unknown] without a module"
        ));
    }
    let rows = pc_samples::aggregate(&symbolized, &regions);
    pc_samples::write(&rows, &run_dir.join(pc_samples::PC_SAMPLES))?;
    Ok(Written {
        rows: rows.len(),
        unknown_samples: unknown,
        notes,
    })
}
