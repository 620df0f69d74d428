//! GPU activities recorded through CUPTI (`collect --gpu`): the records of every process
//! (`gpu_activity/<pid>.bin`, written by `libpowerperf_rt_cuda.so`, decoded by
//! `powerperf_rt::cupti`), attributed to the CPU region active when each was launched, and
//! summarised with HPCToolkit's metric names (Zhou et al., Parallel Computing 2021; HPCToolkit
//! manual ch. 8; `docs/gpu.md`):
//!
//! * seconds: `GKER` (kernels), `GMEM` (allocations and frees), `GMSET` (memsets), `GXCOPY`
//!   (explicit copies), `GSYNC` (synchronisations), `GPUOP` (their sum);
//! * bytes by kind: `GXCOPY:H2D`, `GXCOPY:D2H`, … (CUPTI_ACTIVITY_MEMCPY_KIND_*),
//!   `GMSET:DEV`, … and `GMEM:DEV`, … (CUpti_ActivityMemoryKind), each with `:COUNT`;
//!   `GSYNC:EVT`, `GSYNC:STRE`, `GSYNC:STR`, `GSYNC:CTX` (seconds) and `GSYNC:COUNT`;
//! * per kernel: `GKER:COUNT`, `GKER:BLK_THR` (threads per block), `GKER:BLK` (blocks per
//!   grid), `GKER:THR_REG` (registers per thread), `GKER:STMEM`, `GKER:DYMEM` (static and
//!   dynamic shared memory per block, bytes) and `GKER:OCC_THR` (theoretical occupancy:
//!   active threads per SM / maximum threads per SM), per-launch values averaged over launches
//!   as HPCToolkit does (summed with a launch count, divided afterwards);
//! * IPM's `@CUDA_HOST_IDLE`: the time host threads spend inside blocking CUDA calls
//!   (synchronisations and synchronous copies) waiting for the GPU, per region.

use std::collections::BTreeMap;

/// The tables' file names, row types, writer, reader and summaries: the run format's
/// ([`powerperf_format::gpu_activity`]).
pub use powerperf_format::gpu_activity::{
    host_idle_calls, is_blocking, kernels, metrics, per_region, read, write, Activity, ApiCall,
    KernelSummary, Kind, RegionGpu, RegionRule, ACTIVITY_FILE, API_FILE, RECORDINGS,
};
pub use powerperf_format::run::{GpuAttribution, RuleCounts};

/// Device limits for occupancy, from CUPTI's `CUpti_ActivityDevice` record.
#[derive(Debug, Clone, PartialEq)]
pub struct Device {
    pub id: u32,
    pub name: String,
    pub cc_major: u32,
    pub cc_minor: u32,
    pub sm_count: u32,
    pub max_threads_per_sm: u32,
    pub max_blocks_per_sm: u32,
    pub max_warps_per_sm: u32,
    pub regs_per_sm: u32,
    pub max_regs_per_block: u32,
    /// Shared memory per SM the driver can give blocks, bytes.
    pub smem_per_sm: u64,
    pub warp_size: u32,
}

/// Theoretical occupancy of a kernel launch: active threads per SM / the SM's maximum, from
/// the limits by warps, blocks, registers and shared memory (NVIDIA CUDA C++ Programming
/// Guide, "Occupancy Calculator" and `cudaOccupancyMaxActiveBlocksPerMultiprocessor`).
/// Registers are allocated per warp in units of 256; shared memory per block in units of 128
/// bytes, plus 1 KiB the driver reserves per block on compute capability 8.0 and newer. The
/// shared-memory carveout is taken at its maximum, so this is an upper bound where the program
/// chose a smaller carveout. `None` when the device limits are unknown or the block is empty.
pub fn occupancy(
    d: &Device,
    block_threads: u64,
    regs_per_thread: u32,
    smem_per_block: u64,
) -> Option<f64> {
    if block_threads == 0 || d.max_threads_per_sm == 0 || d.warp_size == 0 {
        return None;
    }
    let warp = d.warp_size as u64;
    let warps_per_block = block_threads.div_ceil(warp);
    let max_warps = if d.max_warps_per_sm > 0 {
        d.max_warps_per_sm as u64
    } else {
        d.max_threads_per_sm as u64 / warp
    };
    let mut blocks = max_warps / warps_per_block;
    if d.max_blocks_per_sm > 0 {
        blocks = blocks.min(d.max_blocks_per_sm as u64);
    }
    if regs_per_thread > 0 && d.regs_per_sm > 0 {
        let regs_per_warp = (regs_per_thread as u64 * warp).div_ceil(256) * 256;
        let warps_by_regs = d.regs_per_sm as u64 / regs_per_warp;
        blocks = blocks.min(warps_by_regs / warps_per_block);
    }
    if d.smem_per_sm > 0 {
        let reserved = if d.cc_major >= 8 { 1024 } else { 0 };
        let per_block = (smem_per_block + reserved).div_ceil(128) * 128;
        if let Some(by_smem) = d.smem_per_sm.checked_div(per_block) {
            blocks = blocks.min(by_smem);
        }
    }
    let threads = blocks * block_threads;
    Some((threads as f64 / d.max_threads_per_sm as f64).min(1.0))
}

/// Fill [`Activity::occupancy`] of every kernel launch on a device of `devices`.
pub fn fill_occupancy(acts: &mut [Activity], devices: &[Device]) {
    for a in acts.iter_mut().filter(|a| a.kind == Some(Kind::Kernel)) {
        a.occupancy = devices.iter().find(|d| d.id == a.device).and_then(|d| {
            occupancy(
                d,
                a.block_threads(),
                a.regs_per_thread,
                a.static_smem as u64 + a.dynamic_smem as u64,
            )
        });
    }
}

/// The innermost region open on `(pid, tid)` at `t_ns`, from region intervals sorted by
/// (pid, tid, start_ns, depth) as `powerperf_rt::events::analyze` returns them.
pub fn region_at(
    intervals: &[powerperf_rt::events::Interval],
    pid: u32,
    tid: u32,
    t_ns: u64,
) -> Option<String> {
    let lo = intervals.partition_point(|i| (i.pid, i.tid) < (pid, tid));
    let hi = intervals.partition_point(|i| (i.pid, i.tid) <= (pid, tid));
    intervals[lo..hi]
        .iter()
        .filter(|i| i.start_ns <= t_ns && t_ns < i.end_ns)
        .max_by_key(|i| i.depth)
        .map(|i| i.path.clone())
}

/// Attribute each activity, through its correlation id, to the API call that launched it
/// (same process) and to a region, and each API call to the region open on its thread.
///
/// The rules, tried in order (docs/gpu.md, "Attribution to regions"):
/// 1. `thread`: the innermost region open on the launching thread at the launch (the API
///    call's entry), as HPCToolkit and IPM attribute GPU work;
/// 2. `process`: the launching thread had none, and exactly one other thread of the same
///    process had a region open at that moment: its innermost region. PyTorch's autograd
///    engine launches the kernels of `loss.backward()` from its own thread while the NVTX
///    range (`torch.cuda.nvtx.range_push("backward")`) is open on the Python thread, which
///    waits for it; NVTX ranges themselves are per thread (push/pop), so this rule joins them
///    by time overlap within the process;
/// 3. `process_latest`: as 2, with several such threads: the innermost region that began
///    last (the most recently opened one in the process).
///
/// Activities without a matching call (CUPTI records for work the driver started itself,
/// or calls not recorded) keep `region = None`, as do launches while no thread of the
/// process had a region open. API calls keep rule 1 only: their host time is their thread's.
/// Returns the count per rule.
pub fn attribute(
    acts: &mut [Activity],
    calls: &mut [ApiCall],
    intervals: &[powerperf_rt::events::Interval],
) -> GpuAttribution {
    for c in calls.iter_mut() {
        c.region = region_at(intervals, c.pid, c.tid, c.enter_ns);
    }
    // A runtime call and the driver call it makes share a correlation id: keep the outer
    // (earliest) one, the call the program made.
    let mut by_corr: BTreeMap<(u32, u32), usize> = BTreeMap::new();
    for (i, c) in calls
        .iter()
        .enumerate()
        .filter(|(_, c)| c.correlation_id != 0)
    {
        by_corr
            .entry((c.pid, c.correlation_id))
            .and_modify(|j| {
                if c.enter_ns < calls[*j].enter_ns {
                    *j = i
                }
            })
            .or_insert(i);
    }
    let mut orphans = Vec::new();
    for (k, a) in acts.iter_mut().enumerate() {
        a.region = None;
        a.region_rule = None;
        if let Some(&i) = by_corr.get(&(a.pid, a.correlation_id)) {
            let c = &calls[i];
            a.launch_tid = Some(c.tid);
            a.launch_api = Some(c.name.clone());
            a.launch_ns = Some(c.enter_ns);
            a.region = c.region.clone();
            if a.region.is_some() {
                a.region_rule = Some(RegionRule::Thread.name().into());
            } else {
                orphans.push((c.pid, c.enter_ns, c.tid, k));
            }
        }
    }
    for (k, path, rule) in other_threads_regions(intervals, orphans) {
        acts[k].region = Some(path);
        acts[k].region_rule = Some(rule.name().into());
    }
    let mut out = GpuAttribution {
        rules: "thread,process,process_latest".into(),
        ..Default::default()
    };
    for a in acts.iter() {
        let add = |c: &mut RuleCounts| match a.region_rule.as_deref() {
            Some("thread") => c.thread += 1,
            Some("process") => c.process += 1,
            Some("process_latest") => c.process_latest += 1,
            _ if a.launch_tid.is_some() => c.no_region += 1,
            _ => c.no_launch += 1,
        };
        add(&mut out.activities);
        if a.kind == Some(Kind::Kernel) {
            add(&mut out.kernels);
        }
    }
    out
}

/// Rules 2 and 3 of [`attribute`] for launches `(pid, t_ns, launching tid, activity index)`
/// whose thread had no open region: one sweep per process over the region intervals' begins
/// and ends in time order, keeping the open intervals per thread (they nest per thread), so
/// the cost is O((intervals + launches) · log) plus, per launch, the number of threads with
/// an open region. Returns `(activity index, region path, rule)` for the launches that found
/// one.
fn other_threads_regions(
    intervals: &[powerperf_rt::events::Interval],
    mut launches: Vec<(u32, u64, u32, usize)>,
) -> Vec<(usize, String, RegionRule)> {
    let mut out = Vec::new();
    if launches.is_empty() || intervals.is_empty() {
        return out;
    }
    launches.sort_unstable();
    // Events per process: (time, order, interval index); at one instant ends come before
    // begins (an interval is [start, end)), and both before the launches.
    let mut events: Vec<(u32, u64, u8, usize)> = Vec::with_capacity(2 * intervals.len());
    for (i, iv) in intervals.iter().enumerate() {
        if iv.end_ns > iv.start_ns {
            events.push((iv.pid, iv.start_ns, 1, i));
            events.push((iv.pid, iv.end_ns, 0, i));
        }
    }
    events.sort_unstable();
    let mut e = 0;
    let mut open: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
    let mut pid_now = None;
    for (pid, t, tid, k) in launches {
        if pid_now != Some(pid) {
            open.clear();
            pid_now = Some(pid);
            // skip the events of earlier processes
            while e < events.len() && events[e].0 < pid {
                e += 1;
            }
        }
        while e < events.len() && events[e].0 == pid && events[e].1 <= t {
            let (_, _, kind, i) = events[e];
            let v = open.entry(intervals[i].tid).or_default();
            if kind == 1 {
                v.push(i);
            } else if let Some(p) = v.iter().position(|&j| j == i) {
                v.swap_remove(p);
            }
            e += 1;
        }
        let mut found: Vec<usize> = open
            .iter()
            .filter(|(&other, v)| other != tid && !v.is_empty())
            .filter_map(|(_, v)| v.iter().copied().max_by_key(|&j| intervals[j].depth))
            .collect();
        let rule = match found.len() {
            0 => continue,
            1 => RegionRule::Process,
            _ => RegionRule::ProcessLatest,
        };
        found.sort_by_key(|&j| (intervals[j].start_ns, intervals[j].depth));
        let j = *found.last().expect("not empty");
        out.push((k, intervals[j].path.clone(), rule));
    }
    out
}

/// The SM clock, MHz, of device `dev` over its kernels' `(start_ns, end_ns)` intervals
/// (CLOCK_MONOTONIC), from
/// the run's GPU samples; `None` where the run has none.
pub type SmClockMhz<'a> = dyn Fn(u32, &[(u64, u64)]) -> Option<f64> + 'a;

/// Read every `RUN/gpu_activity/<pid>.bin` the CUDA injection wrote, map CUPTI time onto
/// CLOCK_MONOTONIC, attribute each activity to its launching API call and region, compute
/// theoretical occupancy from the devices' limits, and write `gpu_activity.parquet` and
/// `gpu_api.parquet` (times relative to `origin_ns`). Returns notes for run.toml; `None` when
/// no file was written.
///
/// # Errors
/// Unreadable directories; Parquet that cannot be written. A file that cannot be decoded
/// becomes a note, the others are still read.
pub fn write_gpu_activity(
    dir: &std::path::Path,
    origin_ns: u64,
    sm_clock_mhz: &SmClockMhz<'_>,
) -> anyhow::Result<Option<Vec<String>>> {
    Ok(write_gpu_activity_attributed(dir, origin_ns, sm_clock_mhz)?.map(|(notes, _)| notes))
}

/// [`write_gpu_activity`], also returning the count per attribution rule (run.toml's
/// `[gpu_attribution]`).
///
/// # Errors
/// As [`write_gpu_activity`].
pub fn write_gpu_activity_attributed(
    dir: &std::path::Path,
    origin_ns: u64,
    sm_clock_mhz: &SmClockMhz<'_>,
) -> anyhow::Result<Option<(Vec<String>, GpuAttribution)>> {
    let sub = dir.join(RECORDINGS);
    let Ok(rd) = std::fs::read_dir(&sub) else {
        return Ok(None);
    };
    let mut files: Vec<std::path::PathBuf> = rd
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|x| x == "bin"))
        .collect();
    files.sort();
    if files.is_empty() {
        return Ok(None);
    }
    let mut notes = Vec::new();
    let mut acts = Vec::new();
    let mut calls = Vec::new();
    let mut devices: Vec<Device> = Vec::new();
    let mut pc_files: Vec<powerperf_rt::cupti::CuptiFile> = Vec::new();
    for f in &files {
        let cf = match powerperf_rt::cupti::read_file(f) {
            Ok(cf) => cf,
            Err(e) => {
                notes.push(format!("GPU activity file not read: {e}"));
                continue;
            }
        };
        if cf.truncated {
            notes.push(format!("{}: the process did not finish its GPU record (killed?): activities up to the cut are kept", f.display()));
        }
        if cf.dropped_records > 0 {
            notes.push(format!(
                "{}: CUPTI dropped {} activity records (buffers full): GPU totals are low",
                f.display(),
                cf.dropped_records
            ));
        }
        if cf.api_records_lost > 0 {
            notes.push(format!(
                "{}: {} CUDA API calls were not recorded",
                f.display(),
                cf.api_records_lost
            ));
        }
        notes.extend(
            cf.notes
                .iter()
                .map(|n| format!("CUDA injection (pid {}): {n}", cf.pid)),
        );
        for d in &cf.devices {
            if !devices.iter().any(|x| x.id == d.id) {
                devices.push(Device {
                    id: d.id,
                    name: d.name.clone(),
                    cc_major: d.cc_major,
                    cc_minor: d.cc_minor,
                    sm_count: d.sm_count,
                    max_threads_per_sm: d.max_threads_per_sm,
                    max_blocks_per_sm: d.max_blocks_per_sm,
                    max_warps_per_sm: d.max_warps_per_sm,
                    regs_per_sm: d.regs_per_sm,
                    max_regs_per_block: d.max_regs_per_block,
                    smem_per_sm: d.smem_per_sm,
                    warp_size: d.warp_size,
                });
            }
        }
        let short = |k: Option<&str>| -> Option<String> {
            k.map(|k| {
                match k {
                    "pageable" => "PAG",
                    "pinned" => "PIN",
                    "device" => "DEV",
                    "array" => "ARY",
                    "managed" => "MAN",
                    "device_static" => "DST",
                    "managed_static" => "MST",
                    "EventSynchronize" => "EVT",
                    "StreamWaitEvent" => "STRE",
                    "StreamSynchronize" => "STR",
                    "ContextSynchronize" => "CTX",
                    "unknown" => "UNK",
                    other => other,
                }
                .to_string()
            })
        };
        use powerperf_rt::cupti::ActivityKind as K;
        for a in &cf.activities {
            let kind = match a.kind {
                K::Kernel => Kind::Kernel,
                K::Memcpy => Kind::Memcpy,
                K::Memset => Kind::Memset,
                K::Sync => Kind::Sync,
                K::Alloc => Kind::Alloc,
                K::Free => Kind::Free,
            };
            let subkind = match kind {
                Kind::Memcpy => short(a.copy_kind),
                Kind::Sync => short(a.sync_kind),
                Kind::Memset | Kind::Alloc | Kind::Free => short(a.memory_kind),
                Kind::Kernel => None,
            };
            acts.push(Activity {
                pid: cf.pid,
                kind: Some(kind),
                name: a.name.clone(),
                start_ns: cf.to_monotonic(a.start),
                end_ns: cf.to_monotonic(a.end),
                device: a.device,
                context: a.context,
                stream: a.stream,
                correlation_id: a.correlation_id,
                bytes: a.bytes,
                subkind,
                grid: a.grid,
                block: a.block,
                regs_per_thread: a.regs_per_thread,
                static_smem: a.static_smem,
                dynamic_smem: a.dynamic_smem,
                ..Default::default()
            });
        }
        calls.extend(cf.api_calls.iter().map(|c| ApiCall {
            pid: cf.pid,
            tid: c.tid,
            correlation_id: c.correlation_id,
            name: c.name.clone(),
            enter_ns: c.enter_ns,
            exit_ns: c.exit_ns,
            region: None,
        }));
        if !cf.pc_configs.is_empty() || !cf.pc_samples.is_empty() {
            pc_files.push(cf);
        }
    }
    let intervals = powerperf_rt::events::read_dir(dir)
        .map(|e| powerperf_rt::events::intervals(&e))
        .unwrap_or_default();
    let attribution = attribute(&mut acts, &mut calls, &intervals);
    fill_occupancy(&mut acts, &devices);
    acts.sort_by_key(|a| (a.start_ns, a.device, a.stream));
    write(dir, &acts, &calls, origin_ns)?;
    if !pc_files.is_empty() {
        let region_of = |pid: u32, corr: u32| -> Option<String> {
            calls
                .iter()
                .find(|c| c.pid == pid && c.correlation_id == corr)
                .and_then(|c| c.region.clone())
        };
        // The SM clock while kernels ran (GSAMP:EXP): the measured clock over the kernels'
        // intervals on that device.
        let clock = |dev: u32| -> Option<f64> {
            let iv: Vec<(u64, u64)> = acts
                .iter()
                .filter(|a| a.kind == Some(Kind::Kernel) && a.device == dev)
                .map(|a| (a.start_ns, a.end_ns))
                .collect();
            sm_clock_mhz(dev, &iv)
        };
        let (rows, sums) = super::gpu_pcsamp::rows(&pc_files, &region_of, &clock);
        super::gpu_pcsamp::write(dir, &rows, &sums)?;
        let tot: u64 = rows
            .iter()
            .filter(|r| !super::gpu_pcsamp::is_latency(&r.stall_reason))
            .map(|r| r.samples)
            .sum();
        let drp: u64 = sums.iter().map(|s| s.dropped_samples).sum();
        let lines = rows.iter().filter(|r| r.line.is_some()).count();
        notes.push(format!(
            "GPU PC sampling (CUPTI): {tot} samples ({drp} dropped) in {} contexts, {} PC/stall rows ({lines} with a source line); {}, {}",
            sums.len(),
            rows.len(),
            super::gpu_pcsamp::SAMPLES_FILE,
            super::gpu_pcsamp::SUMMARY_FILE
        ));
        if lines == 0 && tot > 0 {
            notes.push("GPU PC samples have no source lines: build the CUDA code with -lineinfo (nvcc) for file:line".into());
        }
    }
    let kernels = acts.iter().filter(|a| a.kind == Some(Kind::Kernel)).count();
    notes.push(format!(
        "GPU activity (CUPTI) from {} process(es): {} activities ({kernels} kernels), {} CUDA API calls, {} device(s); gpu_activity.parquet, gpu_api.parquet",
        files.len(),
        acts.len(),
        calls.len(),
        devices.len()
    ));
    if !intervals.is_empty() {
        let k = &attribution.kernels;
        notes.push(format!(
            "GPU kernels by region rule (docs/gpu.md): {} on the launching thread's region, {} on another thread's region of the same process ({} of them the latest of several), {} launched outside any region, {} without a recorded launch",
            k.thread,
            k.process + k.process_latest,
            k.process_latest,
            k.no_region,
            k.no_launch
        ));
    }
    Ok(Some((notes, attribution)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// H100 SXM limits (CUDA C++ Programming Guide, table "Technical Specifications per
    /// Compute Capability", 9.0): 2048 threads, 32 blocks, 64 warps, 65536 registers and
    /// 228 KiB shared memory per SM.
    fn h100() -> Device {
        Device {
            id: 0,
            name: "NVIDIA H100".into(),
            cc_major: 9,
            cc_minor: 0,
            sm_count: 132,
            max_threads_per_sm: 2048,
            max_blocks_per_sm: 32,
            max_warps_per_sm: 64,
            regs_per_sm: 65536,
            max_regs_per_block: 65536,
            smem_per_sm: 233_472,
            warp_size: 32,
        }
    }

    #[test]
    fn occupancy_limits() {
        let d = h100();
        // 256 threads, 32 registers, no shared memory: 8 blocks by warps → 100 %.
        assert_eq!(occupancy(&d, 256, 32, 0), Some(1.0));
        // 64 registers per thread: 65536 / (64·32) = 32 warps → 4 blocks of 8 warps → 50 %.
        assert_eq!(occupancy(&d, 256, 64, 0), Some(0.5));
        // 32 threads per block: the 32-block limit gives 1024 threads → 50 %.
        assert_eq!(occupancy(&d, 32, 16, 0), Some(0.5));
        // 48 KiB shared memory (+1 KiB reserved) per block: 233472 / 50176 = 4 blocks of 256.
        assert_eq!(occupancy(&d, 256, 32, 48 * 1024), Some(0.5));
        // 255 registers → 8160 per warp, rounded to 8192: 8 warps → one 256-thread block.
        assert_eq!(occupancy(&d, 256, 255, 0), Some(0.125));
        assert_eq!(occupancy(&d, 0, 32, 0), None);
    }

    #[test]
    fn blocking_calls() {
        for b in [
            "cudaDeviceSynchronize",
            "cudaMemcpy",
            "cudaMemcpy2D",
            "cuMemcpyDtoH_v2",
            "cuStreamSynchronize",
        ] {
            assert!(is_blocking(b), "{b}");
        }
        for n in [
            "cudaMemcpyAsync",
            "cuMemcpyHtoDAsync_v2",
            "cudaLaunchKernel",
            "cudaMemset",
            "cudaMemcpyToSymbol",
        ] {
            assert!(!is_blocking(n), "{n}");
        }
    }

    fn act(kind: Kind, start: u64, end: u64, corr: u32) -> Activity {
        Activity {
            pid: 7,
            kind: Some(kind),
            start_ns: start,
            end_ns: end,
            correlation_id: corr,
            ..Default::default()
        }
    }

    #[test]
    fn metrics_kernels_attribution_and_host_idle() {
        let mut k1 = act(Kind::Kernel, 100, 1100, 1);
        k1.name = Some("axpy".into());
        k1.grid = [64, 1, 1];
        k1.block = [256, 1, 1];
        k1.regs_per_thread = 64;
        let mut k2 = k1.clone();
        k2.start_ns = 2000;
        k2.end_ns = 5000;
        k2.correlation_id = 3;
        k2.block = [128, 1, 1];
        let mut c = act(Kind::Memcpy, 1200, 1700, 2);
        c.bytes = 4096;
        c.subkind = Some("H2D".into());
        let mut s = act(Kind::Sync, 5000, 5100, 4);
        s.subkind = Some("CTX".into());
        let mut acts = vec![k1, c, k2, s];
        let m = metrics(&acts);
        let close = |a: f64, b: f64| (a - b).abs() < 1e-15;
        assert!(close(m["GKER"], 4000e-9), "{m:?}");
        assert!(close(m["GXCOPY"], 500e-9));
        assert_eq!(m["GXCOPY:H2D"], 4096.0);
        assert_eq!(m["GXCOPY:COUNT"], 1.0);
        assert!(close(m["GSYNC:CTX"], 100e-9));
        assert!(close(m["GPUOP"], 4600e-9));
        assert_eq!(m["GMEM"], 0.0);
        fill_occupancy(&mut acts, &[h100()]);
        let ks = kernels(&acts);
        assert_eq!(ks.len(), 1);
        assert_eq!(ks[0].count, 2);
        assert_eq!(ks[0].blk_thr, 192.0);
        assert_eq!(ks[0].blk, 64.0);
        assert_eq!(ks[0].thr_reg, 64.0);
        // 256 threads × 64 regs → 50 %; 128 threads × 64 regs → 8 blocks of 4 warps → 50 %.
        assert_eq!(ks[0].occ_thr, Some(0.5));
        // Regions on thread 70: outer [0, 10000), inner [1500, 2500).
        use powerperf_rt::events::Interval;
        let iv = |path: &str, depth, s, e| Interval {
            pid: 7,
            tid: 70,
            region: path.rsplit('/').next().unwrap().into(),
            path: path.into(),
            start_ns: s,
            end_ns: e,
            depth,
            closed_by_exit: false,
            counters: vec![],
        };
        let intervals = vec![iv("outer", 0, 0, 10_000), iv("outer/inner", 1, 1500, 2500)];
        let call = |corr, name: &str, t0, t1| ApiCall {
            pid: 7,
            tid: 70,
            correlation_id: corr,
            name: name.into(),
            enter_ns: t0,
            exit_ns: t1,
            region: None,
        };
        let mut calls = vec![
            call(1, "cudaLaunchKernel", 50, 60),
            call(2, "cudaMemcpy", 1150, 1750),
            call(3, "cudaLaunchKernel", 1600, 1610),
            call(4, "cudaDeviceSynchronize", 4000, 5100),
        ];
        let counts = attribute(&mut acts, &mut calls, &intervals);
        assert_eq!(counts.activities.thread, 4);
        assert_eq!(counts.kernels.thread, 2);
        assert_eq!(acts[0].region_rule.as_deref(), Some("thread"));
        assert_eq!(acts[0].region.as_deref(), Some("outer"));
        assert_eq!(acts[2].region.as_deref(), Some("outer/inner"));
        assert_eq!(acts[2].launch_api.as_deref(), Some("cudaLaunchKernel"));
        let r = per_region(&acts, &calls);
        assert!(close(r["outer/inner"].gker_s, 3000e-9));
        assert!(close(r["outer"].gker_s, 1000e-9));
        assert_eq!(r["outer"].launches, 1);
        // Host idle: the synchronous copy (600 ns) and the device synchronisation (1100 ns).
        assert!(close(r["outer"].host_idle_s, 1700e-9));
        // Round trip through the Parquet files, times relative to the origin.
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &acts, &calls, 50).unwrap();
        let (back, back_calls) = read(dir.path()).unwrap().unwrap();
        assert_eq!(back.len(), 4);
        assert_eq!(back[2].start_ns, 2000 - 50);
        assert_eq!(back[2].dur_ns(), 3000);
        assert_eq!(back[2].region.as_deref(), Some("outer/inner"));
        assert_eq!(back[2].occupancy, Some(0.5));
        assert_eq!(back[1].subkind.as_deref(), Some("H2D"));
        assert_eq!(back_calls[3].name, "cudaDeviceSynchronize");
        assert_eq!(back_calls[3].exit_ns - back_calls[3].enter_ns, 1100);
        assert_eq!(per_region(&back, &back_calls), r);
    }

    /// PyTorch's shape (issue 20): the Python thread 70 holds `epoch/backward` while the
    /// autograd thread 71, with no region of its own, launches the backward kernels; a
    /// third thread 72 opens `io` for a while. Recorded times in ns.
    #[test]
    fn kernels_of_a_thread_without_a_region_go_to_the_process_open_region() {
        use powerperf_rt::events::Interval;
        let iv = |tid, path: &str, depth, s, e| Interval {
            pid: 7,
            tid,
            region: path.rsplit('/').next().unwrap().into(),
            path: path.into(),
            start_ns: s,
            end_ns: e,
            depth,
            closed_by_exit: false,
            counters: vec![],
        };
        let mut intervals = vec![
            iv(70, "epoch", 0, 1_000, 20_000),
            iv(70, "epoch/forward", 1, 1_000, 5_000),
            iv(70, "epoch/backward", 1, 5_000, 12_000),
            iv(72, "io", 0, 9_000, 10_000),
        ];
        intervals.sort_by_key(|i| (i.pid, i.tid, i.start_ns, i.depth));
        let call = |tid, corr, t: u64| ApiCall {
            pid: 7,
            tid,
            correlation_id: corr,
            name: "cudaLaunchKernel".into(),
            enter_ns: t,
            exit_ns: t + 5,
            region: None,
        };
        let mut calls = vec![
            call(70, 1, 2_000),  // forward, on the Python thread
            call(71, 2, 6_000),  // backward kernel from the autograd thread
            call(71, 3, 9_500),  // same, while thread 72 is inside `io`: two candidates
            call(71, 4, 11_999), // last ns of backward
            call(71, 5, 12_000), // backward has ended; `epoch` is still open
            call(71, 6, 30_000), // no region open anywhere
        ];
        let mut acts: Vec<Activity> = (1..=6)
            .map(|c| act(Kind::Kernel, 100_000 + c as u64, 100_010 + c as u64, c))
            .collect();
        // a copy of another process with the same correlation id: not this process's
        let mut other = act(Kind::Memcpy, 0, 10, 2);
        other.pid = 8;
        acts.push(other);
        let counts = attribute(&mut acts, &mut calls, &intervals);
        let got: Vec<(Option<&str>, Option<&str>)> = acts
            .iter()
            .map(|a| (a.region.as_deref(), a.region_rule.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                (Some("epoch/forward"), Some("thread")),
                (Some("epoch/backward"), Some("process")),
                (Some("io"), Some("process_latest")),
                (Some("epoch/backward"), Some("process")),
                (Some("epoch"), Some("process")),
                (None, None),
                (None, None),
            ]
        );
        // API calls keep their own thread's region (host time is the thread's).
        assert_eq!(calls[1].region, None);
        let k = counts.kernels;
        assert_eq!(
            (
                k.thread,
                k.process,
                k.process_latest,
                k.no_region,
                k.no_launch
            ),
            (1, 3, 1, 1, 0)
        );
        assert_eq!(counts.activities.no_launch, 1);
        // GKER per region now includes the autograd thread's kernels.
        let r = per_region(&acts, &calls);
        assert_eq!(r["epoch/backward"].launches, 2);
        assert_eq!(r["(no region)"].launches, 1);
        // The rule survives the Parquet round trip; files without the column read as None.
        let dir = tempfile::tempdir().unwrap();
        write(dir.path(), &acts, &calls, 0).unwrap();
        let (back, _) = read(dir.path()).unwrap().unwrap();
        assert_eq!(back[1].region_rule.as_deref(), Some("process"));
        assert_eq!(back[5].region_rule, None);
    }
}
