//! `RUN/gpu_activity.parquet` and `RUN/gpu_api.parquet` (`collect --gpu`): the GPU activities
//! and CUDA API calls CUPTI recorded, their row types, writer and reader, and the summaries
//! `report` prints over them with HPCToolkit's metric names (docs/gpu.md, docs/run-format.md).
//! Decoding the CUPTI recordings (`RUN/gpu_activity/<pid>.bin`) and attributing them to
//! regions is `collect`'s (`powerperf_core::collect::gpu_activity`).

use std::collections::BTreeMap;

/// Folder of the CUPTI recordings (`<pid>.bin`, written by `libpowerperf_rt_cuda.so`) inside
/// a run directory.
pub const RECORDINGS: &str = "gpu_activity";

/// What an activity was.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Kind {
    Kernel,
    Memcpy,
    Memset,
    Sync,
    Alloc,
    Free,
}

impl Kind {
    /// The name in `gpu_activity.parquet`.
    pub fn name(self) -> &'static str {
        match self {
            Kind::Kernel => "kernel",
            Kind::Memcpy => "memcpy",
            Kind::Memset => "memset",
            Kind::Sync => "sync",
            Kind::Alloc => "alloc",
            Kind::Free => "free",
        }
    }

    /// HPCToolkit's coarse metric for this kind.
    pub fn metric(self) -> &'static str {
        match self {
            Kind::Kernel => "GKER",
            Kind::Memcpy => "GXCOPY",
            Kind::Memset => "GMSET",
            Kind::Sync => "GSYNC",
            Kind::Alloc | Kind::Free => "GMEM",
        }
    }

    /// Parse [`Kind::name`].
    pub fn from_name(s: &str) -> Option<Kind> {
        [
            Kind::Kernel,
            Kind::Memcpy,
            Kind::Memset,
            Kind::Sync,
            Kind::Alloc,
            Kind::Free,
        ]
        .into_iter()
        .find(|k| k.name() == s)
    }
}

/// One GPU activity, times on CLOCK_MONOTONIC.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Activity {
    pub pid: u32,
    pub kind: Option<Kind>,
    /// Kernel name as CUPTI gives it (mangled).
    pub name: Option<String>,
    pub start_ns: u64,
    pub end_ns: u64,
    pub device: u32,
    pub context: u32,
    pub stream: u32,
    pub correlation_id: u32,
    pub bytes: u64,
    /// `H2D`, `D2H`, … for copies; `DEV`, `PIN`, … (memory kind) for memsets and allocations;
    /// `EVT`, `STRE`, `STR`, `CTX` for synchronisations; `UNK` when CUPTI does not know.
    pub subkind: Option<String>,
    pub grid: [i32; 3],
    pub block: [i32; 3],
    pub regs_per_thread: u32,
    pub static_smem: u32,
    pub dynamic_smem: u32,
    /// Theoretical occupancy of a kernel launch (`collect::gpu_activity::occupancy`), where
    /// the device is known.
    pub occupancy: Option<f64>,
    /// The thread that launched it and the API call, through the correlation id.
    pub launch_tid: Option<u32>,
    pub launch_api: Option<String>,
    pub launch_ns: Option<u64>,
    /// Path of the region the activity is attributed to: the innermost region open on the
    /// launching thread at the launch, or, when that thread had none, one open on another
    /// thread of the process then (`region_rule` says which; docs/gpu.md).
    pub region: Option<String>,
    /// Which attribution rule gave `region` ([`RegionRule`]'s names: `thread`, `process`,
    /// `process_latest`); `None` where no region was found. Absent in runs written before
    /// the column existed (read as `None`).
    pub region_rule: Option<String>,
}

impl Activity {
    pub fn dur_ns(&self) -> u64 {
        self.end_ns.saturating_sub(self.start_ns)
    }

    /// Threads per block.
    pub fn block_threads(&self) -> u64 {
        self.block.iter().map(|&x| x.max(1) as u64).product()
    }

    /// Blocks per grid.
    pub fn blocks(&self) -> u64 {
        self.grid.iter().map(|&x| x.max(1) as u64).product()
    }
}

/// One CUDA runtime or driver API call on a host thread (CLOCK_MONOTONIC).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ApiCall {
    pub pid: u32,
    pub tid: u32,
    pub correlation_id: u32,
    pub name: String,
    pub enter_ns: u64,
    pub exit_ns: u64,
    /// Region path open on the thread at the call.
    pub region: Option<String>,
}

/// How a GPU activity found its region (`gpu_activity.parquet`'s `region_rule`, run.toml's
/// `[gpu_attribution]`; docs/gpu.md, "Attribution to regions").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RegionRule {
    /// The innermost region open on the launching thread at the launch (HPCToolkit's and
    /// IPM's rule).
    Thread,
    /// The launching thread had no open region; exactly one other thread of the same process
    /// had one at the launch: its innermost (e.g. PyTorch's autograd thread launching the
    /// kernels of `loss.backward()` while the Python thread holds the NVTX range).
    Process,
    /// As `Process`, but several other threads had one: the innermost region that began last.
    ProcessLatest,
}

impl RegionRule {
    pub fn name(self) -> &'static str {
        match self {
            RegionRule::Thread => "thread",
            RegionRule::Process => "process",
            RegionRule::ProcessLatest => "process_latest",
        }
    }
}

/// API calls that block the host until GPU work finishes: synchronisations and the
/// synchronous copies (IPM's `@CUDA_HOST_IDLE` is the time spent in them; memsets are not
/// blocking that way). CUDA Runtime API §6.1 "API synchronization behavior".
pub fn is_blocking(api: &str) -> bool {
    const SYNC: &[&str] = &[
        "cudaDeviceSynchronize",
        "cudaStreamSynchronize",
        "cudaEventSynchronize",
        "cudaThreadSynchronize",
        "cuCtxSynchronize",
        "cuStreamSynchronize",
        "cuEventSynchronize",
    ];
    if SYNC.contains(&api) {
        return true;
    }
    // Version and per-thread-stream suffixes: cuMemcpyDtoH_v2, cudaMemcpy_ptds.
    let base = api.split('_').next().unwrap_or(api);
    (base.starts_with("cudaMemcpy") || base.starts_with("cuMemcpy"))
        && !base.contains("Async")
        && !base.contains("ToSymbol")
}

/// Per-kernel-name summary.
#[derive(Debug, Clone, PartialEq, Default, serde::Serialize)]
pub struct KernelSummary {
    pub name: String,
    /// `GKER:COUNT`.
    pub count: u64,
    /// `GKER`, seconds.
    pub time_s: f64,
    /// Launch means of `GKER:BLK_THR`, `GKER:BLK`, `GKER:THR_REG`, `GKER:STMEM`,
    /// `GKER:DYMEM`, `GKER:OCC_THR` (the last over launches on devices with known limits).
    pub blk_thr: f64,
    pub blk: f64,
    pub thr_reg: f64,
    pub stmem: f64,
    pub dymem: f64,
    pub occ_thr: Option<f64>,
}

/// HPCToolkit's coarse metrics over `acts` (seconds for the kernel/copy/… times, bytes for
/// the `:KIND` entries, launches for `:COUNT`).
pub fn metrics(acts: &[Activity]) -> BTreeMap<String, f64> {
    let mut m: BTreeMap<String, f64> = BTreeMap::new();
    for name in ["GPUOP", "GKER", "GMEM", "GMSET", "GXCOPY", "GSYNC"] {
        m.insert(name.into(), 0.0);
    }
    for a in acts {
        let Some(k) = a.kind else { continue };
        let s = a.dur_ns() as f64 * 1e-9;
        *m.get_mut(k.metric()).unwrap() += s;
        *m.get_mut("GPUOP").unwrap() += s;
        *m.entry("GPUOP:COUNT".into()).or_default() += 1.0;
        *m.entry(format!("{}:COUNT", k.metric())).or_default() += 1.0;
        let sub = a.subkind.clone().unwrap_or_else(|| "UNK".into());
        match k {
            Kind::Memcpy | Kind::Memset | Kind::Alloc | Kind::Free => {
                *m.entry(format!("{}:{sub}", k.metric())).or_default() += a.bytes as f64;
            }
            Kind::Sync => *m.entry(format!("GSYNC:{sub}")).or_default() += s,
            Kind::Kernel => {}
        }
    }
    m
}

/// Per-kernel summaries, longest total time first.
pub fn kernels(acts: &[Activity]) -> Vec<KernelSummary> {
    struct Acc {
        s: KernelSummary,
        occ_sum: f64,
        occ_n: u64,
    }
    let mut by: BTreeMap<&str, Acc> = BTreeMap::new();
    for a in acts.iter().filter(|a| a.kind == Some(Kind::Kernel)) {
        let name = a.name.as_deref().unwrap_or("(unnamed kernel)");
        let e = by.entry(name).or_insert_with(|| Acc {
            s: KernelSummary {
                name: name.to_string(),
                ..Default::default()
            },
            occ_sum: 0.0,
            occ_n: 0,
        });
        e.s.count += 1;
        e.s.time_s += a.dur_ns() as f64 * 1e-9;
        e.s.blk_thr += a.block_threads() as f64;
        e.s.blk += a.blocks() as f64;
        e.s.thr_reg += a.regs_per_thread as f64;
        e.s.stmem += a.static_smem as f64;
        e.s.dymem += a.dynamic_smem as f64;
        if let Some(o) = a.occupancy {
            e.occ_sum += o;
            e.occ_n += 1;
        }
    }
    let mut out: Vec<KernelSummary> = by
        .into_values()
        .map(|mut a| {
            let n = a.s.count as f64;
            a.s.blk_thr /= n;
            a.s.blk /= n;
            a.s.thr_reg /= n;
            a.s.stmem /= n;
            a.s.dymem /= n;
            a.s.occ_thr = (a.occ_n > 0).then(|| a.occ_sum / a.occ_n as f64);
            a.s
        })
        .collect();
    out.sort_by(|a, b| b.time_s.total_cmp(&a.time_s).then(a.name.cmp(&b.name)));
    out
}

/// Per region path: (`GKER` s, `GXCOPY` s, `GPUOP` s, `@CUDA_HOST_IDLE` s, kernel launches).
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize)]
pub struct RegionGpu {
    pub gker_s: f64,
    pub gxcopy_s: f64,
    pub gpuop_s: f64,
    pub host_idle_s: f64,
    pub launches: u64,
}

/// GPU time and host idle per region path (`(no region)` for work launched outside any).
pub fn per_region(acts: &[Activity], calls: &[ApiCall]) -> BTreeMap<String, RegionGpu> {
    let mut out: BTreeMap<String, RegionGpu> = BTreeMap::new();
    let key = |r: &Option<String>| r.clone().unwrap_or_else(|| "(no region)".into());
    for a in acts {
        let Some(k) = a.kind else { continue };
        let e = out.entry(key(&a.region)).or_default();
        let s = a.dur_ns() as f64 * 1e-9;
        e.gpuop_s += s;
        match k {
            Kind::Kernel => {
                e.gker_s += s;
                e.launches += 1;
            }
            Kind::Memcpy => e.gxcopy_s += s,
            _ => {}
        }
    }
    for c in host_idle_calls(calls) {
        out.entry(key(&c.region)).or_default().host_idle_s +=
            c.exit_ns.saturating_sub(c.enter_ns) as f64 * 1e-9;
    }
    out
}

/// The blocking calls whose time is host idle: a driver call made inside a runtime call on
/// the same thread (cudaMemcpy → cuMemcpyDtoH_v2) is part of the outer call's wait and is
/// not counted again.
pub fn host_idle_calls(calls: &[ApiCall]) -> Vec<&ApiCall> {
    let mut all: Vec<&ApiCall> = calls.iter().collect();
    all.sort_by_key(|c| (c.pid, c.tid, c.enter_ns, std::cmp::Reverse(c.exit_ns)));
    let mut out = Vec::new();
    // The outermost call in progress on the current thread.
    let mut outer: Option<&ApiCall> = None;
    for c in all {
        if let Some(o) = outer {
            if (o.pid, o.tid) == (c.pid, c.tid) && c.exit_ns <= o.exit_ns {
                continue;
            }
        }
        outer = Some(c);
        if is_blocking(&c.name) {
            out.push(c);
        }
    }
    out
}

/// File of the GPU activities in a run directory.
pub const ACTIVITY_FILE: &str = "gpu_activity.parquet";
/// File of the CUDA API calls in a run directory.
pub const API_FILE: &str = "gpu_api.parquet";

/// Write `gpu_activity.parquet` and `gpu_api.parquet` (times in ns since `origin_ns`, the
/// run's CLOCK_MONOTONIC start, like the timeline's `t_ns`; schema in docs/run-format.md).
///
/// # Errors
/// I/O errors with the path.
pub fn write(
    dir: &std::path::Path,
    acts: &[Activity],
    calls: &[ApiCall],
    origin_ns: u64,
) -> anyhow::Result<()> {
    use polars::prelude::{Column, DataFrame};
    let rel = |t: u64| t.saturating_sub(origin_ns);
    let n = acts.len();
    let col_u32 = |name: &str, f: &dyn Fn(&Activity) -> u32| {
        Column::new(name.into(), acts.iter().map(f).collect::<Vec<u32>>())
    };
    let col_i32 = |name: &str, f: &dyn Fn(&Activity) -> i32| {
        Column::new(name.into(), acts.iter().map(f).collect::<Vec<i32>>())
    };
    let mut df = DataFrame::new(
        n,
        vec![
            col_u32("pid", &|a| a.pid),
            Column::new(
                "kind".into(),
                acts.iter()
                    .map(|a| a.kind.map(Kind::name))
                    .collect::<Vec<Option<&str>>>(),
            ),
            Column::new(
                "name".into(),
                acts.iter().map(|a| a.name.clone()).collect::<Vec<_>>(),
            ),
            Column::new(
                "start_ns".into(),
                acts.iter().map(|a| rel(a.start_ns)).collect::<Vec<u64>>(),
            ),
            Column::new(
                "dur_ns".into(),
                acts.iter().map(|a| a.dur_ns()).collect::<Vec<u64>>(),
            ),
            col_u32("device", &|a| a.device),
            col_u32("context", &|a| a.context),
            col_u32("stream", &|a| a.stream),
            col_u32("correlation_id", &|a| a.correlation_id),
            Column::new(
                "bytes".into(),
                acts.iter().map(|a| a.bytes).collect::<Vec<u64>>(),
            ),
            Column::new(
                "subkind".into(),
                acts.iter().map(|a| a.subkind.clone()).collect::<Vec<_>>(),
            ),
            col_i32("grid_x", &|a| a.grid[0]),
            col_i32("grid_y", &|a| a.grid[1]),
            col_i32("grid_z", &|a| a.grid[2]),
            col_i32("block_x", &|a| a.block[0]),
            col_i32("block_y", &|a| a.block[1]),
            col_i32("block_z", &|a| a.block[2]),
            col_u32("regs_per_thread", &|a| a.regs_per_thread),
            col_u32("static_smem", &|a| a.static_smem),
            col_u32("dynamic_smem", &|a| a.dynamic_smem),
            Column::new(
                "occupancy".into(),
                acts.iter().map(|a| a.occupancy).collect::<Vec<_>>(),
            ),
            Column::new(
                "launch_tid".into(),
                acts.iter().map(|a| a.launch_tid).collect::<Vec<_>>(),
            ),
            Column::new(
                "launch_api".into(),
                acts.iter()
                    .map(|a| a.launch_api.clone())
                    .collect::<Vec<_>>(),
            ),
            Column::new(
                "launch_ns".into(),
                acts.iter()
                    .map(|a| a.launch_ns.map(rel))
                    .collect::<Vec<_>>(),
            ),
            Column::new(
                "region".into(),
                acts.iter().map(|a| a.region.clone()).collect::<Vec<_>>(),
            ),
            Column::new(
                "region_rule".into(),
                acts.iter()
                    .map(|a| a.region_rule.clone())
                    .collect::<Vec<_>>(),
            ),
        ],
    )?;
    crate::timeline::write_frame(&mut df, &dir.join(ACTIVITY_FILE))?;
    let mut df = DataFrame::new(
        calls.len(),
        vec![
            Column::new(
                "pid".into(),
                calls.iter().map(|c| c.pid).collect::<Vec<_>>(),
            ),
            Column::new(
                "tid".into(),
                calls.iter().map(|c| c.tid).collect::<Vec<_>>(),
            ),
            Column::new(
                "correlation_id".into(),
                calls.iter().map(|c| c.correlation_id).collect::<Vec<_>>(),
            ),
            Column::new(
                "name".into(),
                calls.iter().map(|c| c.name.clone()).collect::<Vec<_>>(),
            ),
            Column::new(
                "enter_ns".into(),
                calls.iter().map(|c| rel(c.enter_ns)).collect::<Vec<_>>(),
            ),
            Column::new(
                "dur_ns".into(),
                calls
                    .iter()
                    .map(|c| c.exit_ns.saturating_sub(c.enter_ns))
                    .collect::<Vec<_>>(),
            ),
            Column::new(
                "blocking".into(),
                calls
                    .iter()
                    .map(|c| is_blocking(&c.name))
                    .collect::<Vec<_>>(),
            ),
            Column::new(
                "region".into(),
                calls.iter().map(|c| c.region.clone()).collect::<Vec<_>>(),
            ),
        ],
    )?;
    crate::timeline::write_frame(&mut df, &dir.join(API_FILE))
}

/// Read what [`write`] wrote (times relative to the run's start); `None` when the run has
/// no GPU activity file.
///
/// # Errors
/// Unreadable or malformed files, with the path.
pub fn read(dir: &std::path::Path) -> anyhow::Result<Option<(Vec<Activity>, Vec<ApiCall>)>> {
    let path = dir.join(ACTIVITY_FILE);
    if !path.is_file() {
        return Ok(None);
    }
    use crate::timeline::{
        column_i32, column_str, column_u32, column_u64, or_default, read_parquet,
    };
    let df = read_parquet(&path)?;
    let u32c = |n: &str| column_u32(&df, n).map(or_default);
    let i32c = |n: &str| column_i32(&df, n).map(or_default);
    let u64c = |n: &str| column_u64(&df, n);
    let strc = |n: &str| column_str(&df, n);
    let (pid, kind, name) = (u32c("pid")?, strc("kind")?, strc("name")?);
    let (start, dur, bytes) = (u64c("start_ns")?, u64c("dur_ns")?, u64c("bytes")?);
    let (device, context, stream, corr) = (
        u32c("device")?,
        u32c("context")?,
        u32c("stream")?,
        u32c("correlation_id")?,
    );
    let sub = strc("subkind")?;
    let g = [i32c("grid_x")?, i32c("grid_y")?, i32c("grid_z")?];
    let b = [i32c("block_x")?, i32c("block_y")?, i32c("block_z")?];
    let (regs, st, dy) = (
        u32c("regs_per_thread")?,
        u32c("static_smem")?,
        u32c("dynamic_smem")?,
    );
    let occ: Vec<Option<f64>> = df.column("occupancy")?.f64()?.iter().collect();
    let ltid: Vec<Option<u32>> = df.column("launch_tid")?.u32()?.iter().collect();
    let lapi = strc("launch_api")?;
    let lns = u64c("launch_ns")?;
    let region = strc("region")?;
    // Added 2026-11-26 (issue 20): older runs have no such column.
    let rule = if df.column("region_rule").is_ok() {
        strc("region_rule")?
    } else {
        vec![None; df.height()]
    };
    let acts = (0..df.height())
        .map(|i| {
            let s = start[i].unwrap_or(0);
            Activity {
                pid: pid[i],
                kind: kind[i].as_deref().and_then(Kind::from_name),
                name: name[i].clone(),
                start_ns: s,
                end_ns: s + dur[i].unwrap_or(0),
                device: device[i],
                context: context[i],
                stream: stream[i],
                correlation_id: corr[i],
                bytes: bytes[i].unwrap_or(0),
                subkind: sub[i].clone(),
                grid: [g[0][i], g[1][i], g[2][i]],
                block: [b[0][i], b[1][i], b[2][i]],
                regs_per_thread: regs[i],
                static_smem: st[i],
                dynamic_smem: dy[i],
                occupancy: occ[i],
                launch_tid: ltid[i],
                launch_api: lapi[i].clone(),
                launch_ns: lns[i],
                region: region[i].clone(),
                region_rule: rule[i].clone(),
            }
        })
        .collect();
    let mut calls = Vec::new();
    let api = dir.join(API_FILE);
    if api.is_file() {
        let df = read_parquet(&api)?;
        let u32c = |n: &str| column_u32(&df, n).map(or_default);
        let (pid, tid, corr) = (u32c("pid")?, u32c("tid")?, u32c("correlation_id")?);
        let name: Vec<Option<&str>> = df.column("name")?.str()?.iter().collect();
        let enter: Vec<Option<u64>> = df.column("enter_ns")?.u64()?.iter().collect();
        let dur: Vec<Option<u64>> = df.column("dur_ns")?.u64()?.iter().collect();
        let region: Vec<Option<&str>> = df.column("region")?.str()?.iter().collect();
        for i in 0..df.height() {
            let e = enter[i].unwrap_or(0);
            calls.push(ApiCall {
                pid: pid[i],
                tid: tid[i],
                correlation_id: corr[i],
                name: name[i].unwrap_or_default().to_string(),
                enter_ns: e,
                exit_ns: e + dur[i].unwrap_or(0),
                region: region[i].map(String::from),
            });
        }
    }
    Ok(Some((acts, calls)))
}
