//! The whole measurement run behind `powerperf microbench run`: the core clock, the latency
//! curve and per-level latencies, STREAM bandwidth on one thread and on every CPU, FP and
//! branch latencies, the TLB miss penalty and timer/counter overheads; and its outputs (a
//! table, the curve CSV, the machine-constants TOML).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Instant;

use serde::Serialize;

use crate::cache::{data_caches, Cache};
use crate::chase::{tlb_penalty, ChaseBuffer};
use crate::ops::{
    branch_ns, core_clock_ghz, counter_read_ns, fp_latency_ns, timer_overhead_ns, FpOp,
};
use crate::os::{allowed_cpus, pin_current_thread, set_realtime, Pages};
use crate::stats::Stat;
use crate::stream::{stream, StreamConfig, StreamResult, STAGGER};
use crate::MicrobenchError;

/// What to run.
#[derive(Debug, Clone)]
pub struct SuiteConfig {
    /// Fewer repeats, shorter samples, a coarser curve: under 10 s instead of under 60 s.
    pub quick: bool,
    /// Filesystem root holding `devices/system/cpu/cpu0/cache` (`/sys` on a live system).
    pub sysfs_root: PathBuf,
    /// The text of `/proc/cpuinfo` (for the processor's identity in the constants file).
    pub cpuinfo: String,
    /// Run the STREAM threads under `SCHED_RR` where the OS permits (see
    /// [`crate::stream::StreamConfig::realtime`]); `true` in [`SuiteConfig::live`].
    pub realtime: bool,
}

impl SuiteConfig {
    /// The live system's `/sys` and `/proc/cpuinfo`.
    pub fn live(quick: bool) -> SuiteConfig {
        SuiteConfig {
            quick,
            sysfs_root: PathBuf::from("/sys"),
            cpuinfo: std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default(),
            realtime: true,
        }
    }
}

/// Processor identity as `/proc/cpuinfo` gives it.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct CpuId {
    /// `GenuineIntel`, `AuthenticAMD`, or `ARM` (from `CPU implementer 0x41`).
    pub vendor: String,
    /// `cpu family` (x86) or `CPU architecture` (Arm).
    pub family: Option<u32>,
    /// `model` (x86) or `CPU part` (Arm).
    pub model: Option<u32>,
    pub model_name: String,
}

fn num(v: &str) -> Option<u32> {
    let v = v.trim();
    v.strip_prefix("0x")
        .map(|h| u32::from_str_radix(h, 16).ok())
        .unwrap_or_else(|| v.parse().ok())
}

impl CpuId {
    /// Parse the first processor's block of `/proc/cpuinfo`.
    pub fn parse(cpuinfo: &str) -> CpuId {
        let mut id = CpuId::default();
        for line in cpuinfo.lines() {
            if line.trim().is_empty() && !id.vendor.is_empty() {
                break;
            }
            let Some((k, v)) = line.split_once(':') else {
                continue;
            };
            let v = v.trim();
            match k.trim() {
                "vendor_id" => id.vendor = v.to_string(),
                "cpu family" | "CPU architecture" => id.family = num(v),
                "model" | "CPU part" => id.model = num(v),
                "model name" => id.model_name = v.to_string(),
                "CPU implementer" if num(v) == Some(0x41) => id.vendor = "ARM".into(),
                _ => {}
            }
        }
        id
    }
}

/// One measured quantity.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Value {
    /// Human name (`L1 latency`).
    pub name: String,
    /// Name in the machine-constants file (`L1_dlat`), or empty when not written there.
    pub constant: String,
    /// Nanoseconds per operation.
    pub ns: Stat,
    /// Cycles: `ns × core clock (GHz)` with the measured clock's median.
    pub cycles: Option<Stat>,
    /// How it was measured (working-set size, method).
    pub how: String,
}

/// One point of the latency curve (`--curve FILE.csv`).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct CurvePoint {
    pub size_bytes: u64,
    pub ns_per_load: f64,
    pub cycles_per_load: f64,
}

/// Where the latency curve rises around one sysfs cache size.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Step {
    pub level: u32,
    /// The size sysfs reports.
    pub sysfs_bytes: u64,
    /// The largest curve size still within 10 % of this level's latency.
    pub last_flat_bytes: u64,
    /// The first curve size at least half-way to the next level's latency (for random
    /// access and LRU replacement this is at about twice the cache size).
    pub half_way_bytes: Option<u64>,
    /// `last_flat_bytes` within a factor of 2 of `sysfs_bytes`.
    pub at_sysfs_size: bool,
}

/// Everything a run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Report {
    /// UTC date of the run (`YYYY-MM-DD`).
    pub date: String,
    pub quick: bool,
    pub cpu: CpuId,
    /// CPU the single-threaded measurements ran on, when pinning worked.
    pub pinned_cpu: Option<usize>,
    /// The core clock in GHz (dependent-add chain), median over repeats.
    pub core_clock_ghz: Stat,
    pub caches: Vec<Cache>,
    pub values: Vec<Value>,
    pub bandwidth: Vec<StreamResult>,
    pub curve: Vec<CurvePoint>,
    pub steps: Vec<Step>,
    /// Measurements not made: (name, reason).
    pub skipped: Vec<(String, String)>,
    pub elapsed_s: f64,
}

/// Today's UTC date as `YYYY-MM-DD` (Hinnant's `civil_from_days`).
pub fn utc_date() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0) as i64;
    let z = secs.div_euclid(86_400) + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!("{y:04}-{m:02}-{d:02}")
}

/// `n` bytes as `32 KiB`, `1 MiB`, ...
pub fn human_bytes(n: u64) -> String {
    if n >= 1 << 30 && n.is_multiple_of(1 << 30) {
        format!("{} GiB", n >> 30)
    } else if n >= 1 << 20 {
        let m = n as f64 / (1u64 << 20) as f64;
        if m.fract() == 0.0 {
            format!("{m} MiB")
        } else {
            format!("{m:.1} MiB")
        }
    } else if n >= 1 << 10 {
        format!("{} KiB", n >> 10)
    } else {
        format!("{n} B")
    }
}

struct Plan {
    warmup: usize,
    repeats: usize,
    sample_ns: f64,
    curve_repeats: usize,
    curve_sample_ns: f64,
    curve_per_octave: u32,
    stream_repeats: usize,
    llc_multiple: u64,
}

impl Plan {
    fn new(quick: bool) -> Plan {
        if quick {
            Plan {
                warmup: 1,
                repeats: 5,
                sample_ns: 2e6,
                curve_repeats: 3,
                curve_sample_ns: 1.5e6,
                curve_per_octave: 2,
                stream_repeats: 3,
                llc_multiple: 2,
            }
        } else {
            Plan {
                warmup: 2,
                repeats: 9,
                sample_ns: 20e6,
                curve_repeats: 5,
                curve_sample_ns: 8e6,
                curve_per_octave: 4,
                stream_repeats: 10,
                llc_multiple: 4,
            }
        }
    }
}

/// Sizes at which each level's latency is taken: L1 at half its size, each further level at
/// the geometric mean of the previous and its own size (inside its plateau), DRAM at 8×
/// the last level (64 MiB to 1 GiB).
pub fn level_sizes(caches: &[Cache]) -> Vec<(String, String, u64)> {
    let mut out = Vec::new();
    let mut prev = 0u64;
    for c in caches {
        let s = if prev == 0 {
            c.size_bytes / 2
        } else {
            ((prev as f64 * c.size_bytes as f64).sqrt() as u64).max(2 * prev)
        };
        let constant = match c.level {
            1 => "L1_dlat".to_string(),
            l => format!("L{l}_lat"),
        };
        out.push((format!("L{} latency", c.level), constant, s & !63));
        prev = c.size_bytes;
    }
    let dram = (8 * prev).clamp(64 << 20, 1 << 30);
    out.push(("DRAM latency".into(), "mem_lat".into(), dram));
    out
}

/// Curve sizes: 4 KiB to `max`, `per_octave` points per doubling, on whole lines.
pub fn curve_sizes(max: u64, per_octave: u32) -> Vec<u64> {
    let mut v = Vec::new();
    let mut k = 0u32;
    loop {
        let s = (4096.0 * 2f64.powf(k as f64 / per_octave as f64)) as u64 & !63;
        if s > max {
            break;
        }
        v.push(s);
        k += 1;
    }
    v
}

/// Locate the curve's rise around each cache level (see [`Step`]). `plateaus[i]` is the
/// latency of level `i + 1`, `plateaus[caches.len()]` that of DRAM (ns).
pub fn find_steps(curve: &[CurvePoint], caches: &[Cache], plateaus: &[f64]) -> Vec<Step> {
    caches
        .iter()
        .enumerate()
        .filter_map(|(i, c)| {
            let (here, next) = (*plateaus.get(i)?, *plateaus.get(i + 1)?);
            let from = c.size_bytes / 4;
            let pts: Vec<&CurvePoint> = curve.iter().filter(|p| p.size_bytes >= from).collect();
            let first_rise = pts.iter().position(|p| p.ns_per_load > 1.1 * here)?;
            let last_flat_bytes = if first_rise == 0 {
                from
            } else {
                pts[first_rise - 1].size_bytes
            };
            let half = here + 0.5 * (next - here);
            let half_way_bytes = pts
                .iter()
                .find(|p| p.ns_per_load >= half)
                .map(|p| p.size_bytes);
            let r = last_flat_bytes as f64 / c.size_bytes as f64;
            Some(Step {
                level: c.level,
                sysfs_bytes: c.size_bytes,
                last_flat_bytes,
                half_way_bytes,
                at_sysfs_size: (0.5..=2.0).contains(&r),
            })
        })
        .collect()
}

/// Run every measurement. `progress` receives one line per stage.
///
/// # Errors
/// [`MicrobenchError`] when the cache sizes cannot be read from sysfs (the working sets
/// are chosen from them). Measurements that cannot run here are listed in
/// [`Report::skipped`] instead.
pub fn run_suite(
    cfg: &SuiteConfig,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Report, MicrobenchError> {
    let t_start = Instant::now();
    let caches = data_caches(&cfg.sysfs_root)?;
    let plan = Plan::new(cfg.quick);
    let cpus = allowed_cpus();
    let mut skipped = Vec::new();

    // Single-threaded measurements on a thread pinned to the first allowed CPU.
    let cpu0 = cpus[0];
    let single = std::thread::scope(|s| {
        s.spawn(|| single_threaded(&plan, &caches, cpu0, progress))
            .join()
            .map_err(|_| MicrobenchError::Unavailable("a measurement thread panicked".into()))
    })??;
    let (pinned_cpu, ghz, mut values, curve, steps, sk) = single;
    skipped.extend(sk);

    // STREAM, 1 thread and one per CPU.
    let llc = caches.last().map(|c| c.size_bytes).unwrap_or(32 << 20);
    let elems = ((plan.llc_multiple * llc) as usize / 8).max(2 << 20);
    let mut bandwidth = Vec::new();
    if cfg.realtime {
        let probe = std::thread::spawn(|| set_realtime(1)).join();
        if let Ok(Err(why)) = probe {
            skipped.push((
                "SCHED_RR for STREAM (ran under the normal scheduler; other tasks' time slices may enter its wall time)".to_string(),
                why,
            ));
        }
    }
    for set in [vec![cpu0], cpus.clone()] {
        if set.len() > 1 || bandwidth.is_empty() {
            progress(&format!(
                "STREAM on {} thread(s), {} per array",
                set.len(),
                human_bytes(elems as u64 * 8)
            ));
            let sc = StreamConfig {
                elems,
                warmup: 1,
                repeats: plan.stream_repeats,
                realtime: cfg.realtime,
                pages: Pages::Huge,
                stagger: STAGGER,
                memcpy: false,
            };
            bandwidth.extend(stream(&sc, &set));
        }
    }
    values.sort_by_key(|v| v.constant.is_empty());
    Ok(Report {
        date: utc_date(),
        quick: cfg.quick,
        cpu: CpuId::parse(&cfg.cpuinfo),
        pinned_cpu,
        core_clock_ghz: ghz,
        caches,
        values,
        bandwidth,
        curve,
        steps,
        skipped,
        elapsed_s: t_start.elapsed().as_secs_f64(),
    })
}

type Single = (
    Option<usize>,
    Stat,
    Vec<Value>,
    Vec<CurvePoint>,
    Vec<Step>,
    Vec<(String, String)>,
);

fn single_threaded(
    plan: &Plan,
    caches: &[Cache],
    cpu: usize,
    progress: &mut (dyn FnMut(&str) + Send),
) -> Result<Single, MicrobenchError> {
    let mut skipped = Vec::new();
    let pinned_cpu = match pin_current_thread(cpu) {
        Ok(()) => Some(cpu),
        Err(e) => {
            skipped.push(("pinning".to_string(), e));
            None
        }
    };
    let (w, r, sns) = (plan.warmup, plan.repeats, plan.sample_ns);
    progress("core clock (dependent adds)");
    let ghz = core_clock_ghz(sns, w + 2, r)?;
    let g = ghz.median;
    let mut values = Vec::new();
    let push = |values: &mut Vec<Value>, name: &str, constant: &str, ns: Stat, how: String| {
        values.push(Value {
            name: name.into(),
            constant: constant.into(),
            cycles: Some(ns.scaled(g)),
            ns,
            how,
        });
    };

    let levels = level_sizes(caches);
    let max = levels.last().map(|l| l.2).unwrap_or(64 << 20);
    let mut buf = ChaseBuffer::new(max as usize);
    let mut plateaus = Vec::new();
    for (name, constant, size) in &levels {
        progress(&format!(
            "{name}: pointer chase over {}",
            human_bytes(*size)
        ));
        let s = buf.latency(*size as usize, sns, r);
        plateaus.push(s.median);
        push(
            &mut values,
            name,
            constant,
            s,
            format!("random pointer chase over {}", human_bytes(*size)),
        );
    }
    let sizes = curve_sizes(max, plan.curve_per_octave);
    progress(&format!(
        "latency curve: {} sizes, {} to {}",
        sizes.len(),
        human_bytes(sizes[0]),
        human_bytes(max)
    ));
    let curve: Vec<CurvePoint> = sizes
        .iter()
        .map(|&s| {
            let ns = buf
                .latency(s as usize, plan.curve_sample_ns, plan.curve_repeats)
                .median;
            CurvePoint {
                size_bytes: s,
                ns_per_load: ns,
                cycles_per_load: ns * g,
            }
        })
        .collect();
    // A level whose sysfs-chosen working set already runs at DRAM latency (a VM whose
    // host partitions the shared L3, or a neighbour thrashing it) is measured again inside
    // the part of the curve that still runs below half the DRAM latency, and says so.
    let dram = *plateaus.last().unwrap_or(&f64::NAN);
    for i in 1..caches.len() {
        if plateaus[i] < 0.5 * dram {
            continue;
        }
        let prev = caches[i - 1].size_bytes;
        let usable = curve
            .iter()
            .filter(|p| p.size_bytes > prev)
            .take_while(|p| p.ns_per_load < 0.5 * dram && p.size_bytes <= caches[i].size_bytes)
            .last()
            .map(|p| p.size_bytes);
        if let Some(edge) = usable {
            // Stay clear of the edge: the geometric mean of the previous level's size and
            // the last size below half the DRAM latency.
            let size = ((prev as f64 * edge as f64).sqrt() as u64) & !63;
            progress(&format!(
                "{}: {} runs at DRAM latency here; measuring again at {}",
                levels[i].0,
                human_bytes(levels[i].2),
                human_bytes(size)
            ));
            let s = buf.latency(size as usize, sns, r);
            plateaus[i] = s.median;
            let v = &mut values[i];
            v.how = format!(
                "random pointer chase over {} (at {}, the size chosen from sysfs, it ran at {:.1} ns, \
                 like DRAM: only up to about {} of the {} L{} behaves as cache here)",
                human_bytes(size),
                human_bytes(levels[i].2),
                v.ns.median,
                human_bytes(edge),
                human_bytes(caches[i].size_bytes),
                caches[i].level
            );
            v.cycles = Some(s.scaled(g));
            v.ns = s;
        }
    }
    drop(buf);
    let steps = find_steps(&curve, caches, &plateaus);

    progress("branches, FP latencies, TLB, timer and counter overheads");
    let (pred, rand) = branch_ns(1 << 16, sns, w, r);
    let mut miss = rand.clone();
    for v in [
        &mut miss.median,
        &mut miss.min,
        &mut miss.max,
        &mut miss.q1,
        &mut miss.q3,
    ] {
        *v = 2.0 * (*v - pred.median);
    }
    miss.outliers = miss
        .outliers
        .iter()
        .map(|v| 2.0 * (v - pred.median))
        .collect();
    push(
        &mut values,
        "branch (predictable)",
        "BR_lat",
        pred,
        "loop of load + always-taken branch + add, per iteration".into(),
    );
    push(
        &mut values,
        "branch mispredict penalty",
        "BR_miss_lat",
        miss,
        "2 × (random 50 % pattern − predictable), per iteration".into(),
    );
    for (op, name, constant) in [
        (FpOp::Add, "FP add latency", "FP_add_lat"),
        (FpOp::Mul, "FP mul latency", "FP_mul_lat"),
        (FpOp::Fma, "FP FMA latency", "FMA_lat"),
        (FpOp::Div, "FP div latency", "FP_div_lat"),
        (FpOp::Sqrt, "FP sqrt latency", "FP_sqrt_lat"),
    ] {
        match fp_latency_ns(op, sns, w, r) {
            Ok(s) => push(
                &mut values,
                name,
                constant,
                s,
                "dependent chain of f64 operations".into(),
            ),
            Err(e) => skipped.push((name.to_string(), e.to_string())),
        }
    }
    let (pen, strided, packed) = tlb_penalty(8192, sns, r);
    push(
        &mut values,
        "DTLB miss penalty",
        "DTLB_lat",
        pen,
        format!(
            "chase over 8192 4-KiB pages, 1 line each ({:.1} ns) − same lines in 128 pages ({:.1} ns)",
            strided.median, packed.median
        ),
    );
    push(
        &mut values,
        "clock_gettime overhead",
        "timer_overhead",
        timer_overhead_ns(100_000, w, r),
        "back-to-back clock_gettime(CLOCK_MONOTONIC)".into(),
    );
    match counter_read_ns(20_000, w, r) {
        Ok(s) => push(
            &mut values,
            "perf counter read overhead",
            "counter_read_overhead",
            s,
            "read(2) of a perf_event task-clock fd".into(),
        ),
        Err(e) => skipped.push(("perf counter read overhead".into(), e.to_string())),
    }
    Ok((pinned_cpu, ghz, values, curve, steps, skipped))
}

impl Report {
    /// The value named `constant`, if measured.
    pub fn value(&self, constant: &str) -> Option<&Value> {
        self.values.iter().find(|v| v.constant == constant)
    }

    /// The latency curve as CSV: `size_bytes,ns_per_load,cycles_per_load`.
    pub fn curve_csv(&self) -> String {
        let mut s = String::from("size_bytes,ns_per_load,cycles_per_load\n");
        for p in &self.curve {
            let _ = writeln!(
                s,
                "{},{:.4},{:.3}",
                p.size_bytes, p.ns_per_load, p.cycles_per_load
            );
        }
        s
    }

    /// A plain-text table of every value, bandwidth and cache step.
    pub fn table(&self) -> String {
        let mut s = String::new();
        let c = &self.core_clock_ghz;
        let _ = writeln!(
            s,
            "{} (vendor {}, family {}, model {}), {}{}",
            if self.cpu.model_name.is_empty() {
                "unknown CPU"
            } else {
                &self.cpu.model_name
            },
            self.cpu.vendor,
            self.cpu.family.map(|f| f.to_string()).unwrap_or("?".into()),
            self.cpu.model.map(|f| f.to_string()).unwrap_or("?".into()),
            self.date,
            if self.quick { ", --quick" } else { "" }
        );
        let _ = writeln!(
            s,
            "core clock {:.3} GHz (dependent-add chain; min {:.3}, max {:.3}, {} repeats), {}",
            c.median,
            c.min,
            c.max,
            c.repeats,
            match self.pinned_cpu {
                Some(p) => format!("pinned to CPU {p}"),
                None => "not pinned".into(),
            }
        );
        let _ = writeln!(
            s,
            "\n{:<28} {:>10} {:>10} {:>17} {:>4} {:>4}  constant",
            "quantity", "ns", "cycles", "cycles min-max", "n", "out"
        );
        for v in &self.values {
            let cy = v.cycles.as_ref();
            let _ = writeln!(
                s,
                "{:<28} {:>10.3} {:>10.2} {:>17} {:>4} {:>4}  {}",
                v.name,
                v.ns.median,
                cy.map(|c| c.median).unwrap_or(f64::NAN),
                cy.map(|c| format!("{:.2}-{:.2}", c.min, c.max))
                    .unwrap_or_default(),
                v.ns.repeats,
                v.ns.outliers.len(),
                v.constant
            );
        }
        let _ = writeln!(
            s,
            "\n{:<8} {:>7} {:>10} {:>17} {:>4} {:>4} {:>9}  array",
            "STREAM", "threads", "GB/s", "min-max", "n", "out", "preempted"
        );
        for b in &self.bandwidth {
            let g = &b.gb_per_s;
            let _ = writeln!(
                s,
                "{:<8} {:>7} {:>10.2} {:>17} {:>4} {:>4} {:>9}  {}{}{}",
                b.kernel.name(),
                b.threads,
                g.median,
                format!("{:.2}-{:.2}", g.min, g.max),
                g.repeats,
                g.outliers.len(),
                b.preempted,
                human_bytes(b.elems as u64 * 8),
                if b.pinned { ", pinned" } else { "" },
                if b.realtime { ", SCHED_RR" } else { "" }
            );
        }
        let _ = writeln!(
            s,
            "\ncache   sysfs size   curve flat up to   half-way at   step at sysfs size"
        );
        for st in &self.steps {
            let _ = writeln!(
                s,
                "L{:<6} {:>10}   {:>16}   {:>11}   {}",
                st.level,
                human_bytes(st.sysfs_bytes),
                human_bytes(st.last_flat_bytes),
                st.half_way_bytes.map(human_bytes).unwrap_or("-".into()),
                if st.at_sysfs_size { "yes" } else { "no" }
            );
        }
        for (n, why) in &self.skipped {
            let _ = writeln!(s, "skipped: {n}: {why}");
        }
        let _ = writeln!(s, "\nrun took {:.1} s", self.elapsed_s);
        s
    }

    /// The machine-constants TOML (format of `machine-constants/*.toml`): every value with
    /// `unit` and a `source` naming the measurement, date, repeats and spread.
    ///
    /// # Errors
    /// [`MicrobenchError::Toml`] if serialisation fails.
    pub fn constants_toml(&self) -> Result<String, MicrobenchError> {
        #[derive(Serialize)]
        struct Proc<'a> {
            name: String,
            #[serde(skip_serializing_if = "str::is_empty")]
            vendor: &'a str,
            #[serde(skip_serializing_if = "Option::is_none")]
            family: Option<u32>,
            models: Vec<u32>,
            source: String,
        }
        #[derive(Serialize)]
        struct Const {
            value: f64,
            unit: String,
            source: String,
        }
        #[derive(Serialize)]
        struct File<'a> {
            processor: Proc<'a>,
            constants: BTreeMap<String, Const>,
        }
        let round = |x: f64, d: i32| (x * 10f64.powi(d)).round() / 10f64.powi(d);
        let tag = format!(
            "microbench {} (powerperf microbench run{})",
            self.date,
            if self.quick { " --quick" } else { "" }
        );
        let spread = |s: &Stat, unit: &str| {
            format!(
                "median of {} repeats, min {:.2} max {:.2} {unit}, IQR {:.2}-{:.2}, {} outlier(s)",
                s.repeats,
                s.min,
                s.max,
                s.q1,
                s.q3,
                s.outliers.len()
            )
        };
        let g = self.core_clock_ghz.median;
        let mut constants = BTreeMap::new();
        for v in self.values.iter().filter(|v| !v.constant.is_empty()) {
            let (val, unit, st) = match &v.cycles {
                Some(c) if !v.constant.ends_with("overhead") => (round(c.median, 2), "cycles", c),
                _ => (round(v.ns.median, 2), "ns", &v.ns),
            };
            constants.insert(
                v.constant.clone(),
                Const {
                    value: val,
                    unit: unit.into(),
                    source: format!(
                        "{tag}: {}; {}; {:.2} ns at core clock {g:.3} GHz",
                        v.how,
                        spread(st, unit),
                        v.ns.median
                    ),
                },
            );
        }
        let mean_of = |a: &str, b: &str, name: &str| -> Option<(String, Const)> {
            let (x, y) = (
                self.value(a)?.cycles.as_ref()?,
                self.value(b)?.cycles.as_ref()?,
            );
            Some((
                name.to_string(),
                Const {
                    value: round((x.median + y.median) / 2.0, 2),
                    unit: "cycles".into(),
                    source: format!(
                        "{tag}: mean of {a} ({:.2}) and {b} ({:.2}), dependent chains",
                        x.median, y.median
                    ),
                },
            ))
        };
        constants.extend(mean_of("FP_add_lat", "FP_mul_lat", "FP_lat"));
        constants.extend(mean_of("FP_div_lat", "FP_sqrt_lat", "FP_slow_lat"));
        let c = &self.core_clock_ghz;
        constants.insert(
            "CPU_freq".into(),
            Const {
                value: round(g * 1e9, -6),
                unit: "Hz".into(),
                source: format!(
                    "{tag}: chain of dependent register adds (1 cycle each); {}",
                    spread(c, "GHz")
                ),
            },
        );
        for b in &self.bandwidth {
            constants.insert(
                format!("stream_{}_bw_{}t", b.kernel.name(), b.threads),
                Const {
                    value: round(b.gb_per_s.median, 2),
                    unit: "GB/s".into(),
                    source: format!(
                        "{tag}: STREAM {} (bytes counted as STREAM does), {} thread(s){}{}, {} per array, timed from the first thread's start to the last thread's end; {}; {} of {} rounds preempted",
                        b.kernel.name(),
                        b.threads,
                        if b.pinned { " pinned" } else { "" },
                        if b.realtime { " under SCHED_RR" } else { " (SCHED_OTHER)" },
                        human_bytes(b.elems as u64 * 8),
                        spread(&b.gb_per_s, "GB/s"),
                        b.preempted,
                        b.gb_per_s.repeats
                    ),
                },
            );
        }
        let name = if self.cpu.model_name.is_empty() {
            "unknown processor".to_string()
        } else {
            self.cpu.model_name.clone()
        };
        let file = File {
            processor: Proc {
                name,
                vendor: &self.cpu.vendor,
                family: self.cpu.family,
                models: self.cpu.model.into_iter().collect(),
                source: tag.clone(),
            },
            constants,
        };
        let mut s = format!(
            "# Measured by `powerperf microbench run` on {} ({}); caches from sysfs: {}.\n\
             # Latencies in cycles of the measured core clock (CPU_freq), not of the TSC.\n\n",
            self.date,
            self.cpu.model_name,
            self.caches
                .iter()
                .map(|c| format!("L{} {}", c.level, human_bytes(c.size_bytes)))
                .collect::<Vec<_>>()
                .join(", ")
        );
        s.push_str(&toml::to_string(&file)?);
        Ok(s)
    }
}

/// Write `text` to `path`, `-` meaning stdout.
///
/// # Errors
/// [`MicrobenchError::Write`] with the path.
pub fn write_out(path: &Path, text: &str) -> Result<(), MicrobenchError> {
    if path == Path::new("-") {
        print!("{text}");
        return Ok(());
    }
    std::fs::write(path, text).map_err(|source| MicrobenchError::Write {
        path: path.to_path_buf(),
        source,
    })
}
