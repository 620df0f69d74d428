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
    KernelSummary, Kind, RegionGpu, ACTIVITY_FILE, API_FILE, RECORDINGS,
};

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
        if per_block > 0 {
            blocks = blocks.min(d.smem_per_sm / per_block);
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
/// (same process) and to the region open on that thread at that moment; and each API call to
/// its region. Activities without a matching call (CUPTI records for work the driver started
/// itself, or calls not recorded) keep `region = None`.
pub fn attribute(
    acts: &mut [Activity],
    calls: &mut [ApiCall],
    intervals: &[powerperf_rt::events::Interval],
) {
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
    for a in acts.iter_mut() {
        if let Some(&i) = by_corr.get(&(a.pid, a.correlation_id)) {
            let c = &calls[i];
            a.launch_tid = Some(c.tid);
            a.launch_api = Some(c.name.clone());
            a.launch_ns = Some(c.enter_ns);
            a.region = c.region.clone();
        }
    }
}

/// Read every `RUN/gpu_activity/<pid>.bin` the CUDA injection wrote, map CUPTI time onto
/// CLOCK_MONOTONIC, attribute each activity to its launching API call and region, compute
/// theoretical occupancy from the devices' limits, and write `gpu_activity.parquet` and
/// `gpu_api.parquet` (times relative to `origin_ns`). Returns notes for run.toml; `None` when
/// no file was written.
///
/// # Errors
/// Unreadable directories; Parquet that cannot be written. A file that cannot be decoded
/// becomes a note, the others are still read.
pub fn collect_run(
    dir: &std::path::Path,
    origin_ns: u64,
    sm_clock_mhz: &dyn Fn(u32, &[(u64, u64)]) -> Option<f64>,
) -> anyhow::Result<Option<Vec<String>>> {
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
    attribute(&mut acts, &mut calls, &intervals);
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
    Ok(Some(notes))
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
        attribute(&mut acts, &mut calls, &intervals);
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
}
