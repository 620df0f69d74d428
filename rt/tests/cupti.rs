//! The GPU activity reader (`powerperf_rt::cupti`) on a file recorded on an H100
//! (`tests/fixtures/cupti/`), and, where an NVIDIA GPU and nvcc are present, the CUDA
//! injection end to end.
#![cfg(feature = "cuda")]

mod common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use powerperf_rt::cupti::{self, Activity, ActivityKind, ApiCall, CuptiFile};

fn fixture_path() -> PathBuf {
    rt_dir().join("tests/fixtures/cupti/fixture.bin")
}

/// The default recording: runtime API calls, the driver calls inside them not recorded.
fn fixture() -> CuptiFile {
    cupti::read_file(&fixture_path()).unwrap()
}

/// The same program recorded by an earlier build that also recorded the driver calls made
/// inside runtime calls (as `POWERPERF_CUPTI_API=all` still does).
fn fixture_nested() -> CuptiFile {
    cupti::read_file(&rt_dir().join("tests/fixtures/cupti/fixture_nested_driver.bin")).unwrap()
}

fn of(f: &CuptiFile, k: ActivityKind) -> Vec<&Activity> {
    f.activities.iter().filter(|a| a.kind == k).collect()
}

const MIB16: u64 = 16 << 20;

#[test]
fn fixture_header_devices_and_clocks() {
    let f = fixture();
    assert!(!f.truncated);
    assert_eq!(f.dropped_records, 0);
    assert_eq!(f.api_records_lost, 0);
    assert!(f.notes.is_empty(), "{:?}", f.notes);
    assert_eq!(f.cupti_version, 130001);
    assert_eq!(f.cuda_driver_version, 13000);
    assert_eq!(f.bindings_cuda_version, 13040);
    assert!(f.pid > 0);
    assert_eq!(f.devices.len(), 1);
    let d = &f.devices[0];
    assert_eq!(d.name, "NVIDIA H100 80GB HBM3");
    assert_eq!((d.id, d.cc_major, d.cc_minor, d.sm_count), (0, 9, 0, 132));
    assert_eq!(
        (d.warp_size, d.max_warps_per_sm, d.max_threads_per_sm),
        (32, 64, 2048)
    );
    assert_eq!((d.max_threads_per_block, d.max_blocks_per_sm), (1024, 32));
    assert_eq!((d.regs_per_sm, d.max_regs_per_block), (65536, 65536));
    assert_eq!((d.smem_per_sm, d.smem_per_block), (233472, 49152));
    assert_eq!(d.l2_cache_bytes, 50 << 20);
    assert!(d.global_memory_bytes > 79 << 30);
    // Three pairs (init, one buffer, exit); their offsets agree to a few ns (no drift in
    // under a second), so the fit reproduces each pair.
    assert_eq!(f.clock_pairs.len(), 3);
    for &(c, m) in &f.clock_pairs {
        assert!(f.to_monotonic(c).abs_diff(m) < 100, "{c} {m}");
    }
    assert!(f
        .clock_pairs
        .windows(2)
        .all(|w| w[0].0 < w[1].0 && w[0].1 < w[1].1));
}

#[test]
fn fixture_kernels_copies_memsets_syncs_allocations() {
    let f = fixture();
    let k = of(&f, ActivityKind::Kernel);
    assert_eq!(k.len(), 6);
    let names: HashMap<&str, usize> = k.iter().fold(HashMap::new(), |mut m, a| {
        *m.entry(a.name.as_deref().unwrap()).or_default() += 1;
        m
    });
    assert_eq!(
        names,
        HashMap::from([("_Z5scalePffi", 3), ("_Z4axpyPfPKffi", 3)])
    );
    for a in &k {
        assert_eq!((a.grid, a.block), ([16384, 1, 1], [256, 1, 1]));
        assert!(a.end > a.start && a.end - a.start < 1_000_000, "{a:?}");
        assert!(a.regs_per_thread > 0 && a.regs_per_thread < 64);
        assert_eq!((a.static_smem, a.dynamic_smem), (0, 0));
    }
    // scale on one stream, axpy on the other.
    let stream = |n: &str| -> Vec<u32> {
        let mut s: Vec<u32> = k
            .iter()
            .filter(|a| a.name.as_deref() == Some(n))
            .map(|a| a.stream)
            .collect();
        s.dedup();
        s
    };
    let (s0, s1) = (stream("_Z5scalePffi"), stream("_Z4axpyPfPKffi"));
    assert_eq!((s0.len(), s1.len()), (1, 1));
    assert_ne!(s0, s1);

    let c = of(&f, ActivityKind::Memcpy);
    let mut copies: Vec<(&str, &str, &str, u64)> = c
        .iter()
        .map(|a| {
            (
                a.copy_kind.unwrap(),
                a.src_kind.unwrap(),
                a.dst_kind.unwrap(),
                a.bytes,
            )
        })
        .collect();
    copies.sort();
    assert_eq!(
        copies,
        [
            ("D2H", "device", "pageable", 4096),
            ("D2H", "device", "pinned", MIB16),
            ("H2D", "pinned", "device", MIB16),
            ("H2D", "pinned", "device", MIB16),
            ("H2D", "pinned", "device", MIB16),
        ]
    );
    // 16 MiB over PCIe/NVLink-C2C: tens to hundreds of microseconds.
    for a in c.iter().filter(|a| a.bytes == MIB16) {
        assert!((50_000..5_000_000).contains(&(a.end - a.start)), "{a:?}");
    }
    let m = of(&f, ActivityKind::Memset);
    assert_eq!(m.len(), 1);
    assert_eq!((m[0].bytes, m[0].memory_kind), (MIB16, Some("device")));

    let mut syncs: Vec<&str> = of(&f, ActivityKind::Sync)
        .iter()
        .map(|a| a.sync_kind.unwrap())
        .collect();
    syncs.sort();
    assert_eq!(
        syncs,
        [
            "ContextSynchronize",
            "EventSynchronize",
            "StreamSynchronize"
        ]
    );

    for kind in [ActivityKind::Alloc, ActivityKind::Free] {
        let mut v: Vec<(&str, u64)> = of(&f, kind)
            .iter()
            .map(|a| (a.memory_kind.unwrap(), a.bytes))
            .collect();
        v.sort();
        assert_eq!(
            v,
            [
                ("device", 1 << 20),
                ("device", MIB16),
                ("device", MIB16),
                ("device", MIB16),
                ("pinned", MIB16)
            ],
            "{kind:?}"
        );
        assert!(of(&f, kind)
            .iter()
            .all(|a| a.start == a.end && a.address != 0));
    }
    // Every allocation is freed at the same address.
    let mut a: Vec<u64> = of(&f, ActivityKind::Alloc)
        .iter()
        .map(|a| a.address)
        .collect();
    let mut r: Vec<u64> = of(&f, ActivityKind::Free)
        .iter()
        .map(|a| a.address)
        .collect();
    a.sort();
    r.sort();
    assert_eq!(a, r);
}

/// The runtime call with this correlation id.
fn runtime_call(f: &CuptiFile, corr: u32) -> &ApiCall {
    let v: Vec<&ApiCall> = f
        .api_calls
        .iter()
        .filter(|c| c.correlation_id == corr && c.domain == "runtime")
        .collect();
    assert_eq!(v.len(), 1, "correlation {corr}: {v:?}");
    v[0]
}

#[test]
fn fixture_api_calls_correlate_with_activities() {
    let f = fixture();
    assert_eq!(f.api_calls.len(), 25);
    assert!(f.api_calls.iter().all(|c| c.domain == "runtime"));
    let count = |n: &str| f.api_calls.iter().filter(|c| c.name == n).count();
    assert_eq!(count("cudaLaunchKernel"), 6);
    assert_eq!(count("cudaMemcpy"), 4);
    assert_eq!(count("cudaMemcpyAsync"), 1);
    assert_eq!(count("cudaMemset"), 1);
    assert_eq!(count("cudaDeviceSynchronize"), 1);
    assert_eq!(count("cudaStreamSynchronize"), 1);
    assert_eq!(count("cudaEventSynchronize"), 1);
    assert_eq!(count("cudaMalloc"), 4);
    assert_eq!(count("cudaFree"), 4);
    assert_eq!(count("cudaHostAlloc"), 1);
    assert_eq!(count("cudaFreeHost"), 1);
    let tids: Vec<u32> = f.api_calls.iter().map(|c| c.tid).collect();
    assert!(tids.iter().all(|&t| t == tids[0] && t > 0), "one thread");
    for c in &f.api_calls {
        assert!(c.exit_ns >= c.enter_ns, "{c:?}");
        assert_eq!(c.kernel.is_some(), c.name.contains("Launch"), "{c:?}");
    }
    // Calls of one thread follow each other.
    assert!(f
        .api_calls
        .windows(2)
        .all(|w| w[0].exit_ns <= w[1].enter_ns));
    check_activities_against_calls(&f);
}

#[test]
fn fixture_with_nested_driver_calls() {
    let f = fixture_nested();
    assert!(!f.truncated);
    assert_eq!(f.api_calls.len(), 50);
    let count = |d: &str, n: &str| {
        f.api_calls
            .iter()
            .filter(|c| c.domain == d && c.name == n)
            .count()
    };
    assert_eq!(count("runtime", "cudaLaunchKernel"), 6);
    assert_eq!(count("driver", "cuLaunchKernel"), 6);
    assert_eq!(count("runtime", "cudaMemcpy"), 4);
    assert_eq!(count("driver", "cuMemcpyHtoD_v2"), 2);
    assert_eq!(count("driver", "cuMemcpyDtoH_v2"), 2);
    assert_eq!(count("driver", "cuCtxSynchronize_v2"), 1);
    // Each driver call shares the correlation id of the runtime call that made it and
    // nests inside it; launches carry the kernel name in both.
    for d in f.api_calls.iter().filter(|c| c.domain == "driver") {
        let r = runtime_call(&f, d.correlation_id);
        assert!(
            r.enter_ns <= d.enter_ns && d.exit_ns <= r.exit_ns,
            "{r:?} {d:?}"
        );
        assert_eq!(r.kernel, d.kernel);
    }
    check_activities_against_calls(&f);
    // Same program, same activities.
    let g = fixture();
    let shape = |f: &CuptiFile| -> Vec<(ActivityKind, Option<String>, u64)> {
        f.activities
            .iter()
            .map(|a| (a.kind, a.name.clone(), a.bytes))
            .collect()
    };
    assert_eq!(shape(&f), shape(&g));
}

/// Activities -> the runtime call that launched them, through the correlation id; the
/// mapped GPU times fall where the calls say they must.
fn check_activities_against_calls(f: &CuptiFile) {
    let tol = 5_000; // ns: the clock pairs' half widths are well under this
    for a in &f.activities {
        if matches!(a.kind, ActivityKind::Alloc | ActivityKind::Free) {
            continue;
        }
        let c = runtime_call(f, a.correlation_id);
        let (start, end) = (f.to_monotonic(a.start), f.to_monotonic(a.end));
        match a.kind {
            ActivityKind::Kernel => {
                assert_eq!(c.name, "cudaLaunchKernel");
                assert_eq!(c.kernel, a.name, "symbol of the launch = kernel name");
                // A kernel starts after its launch was called.
                assert!(start + tol >= c.enter_ns, "{a:?} {c:?}");
            }
            ActivityKind::Memcpy => {
                assert!(c.name.starts_with("cudaMemcpy"), "{c:?}");
                assert!(start + tol >= c.enter_ns);
                if c.name == "cudaMemcpy" {
                    // A synchronous copy returns after the copy ends.
                    assert!(end <= c.exit_ns + tol, "{a:?} {c:?}");
                }
            }
            ActivityKind::Memset => assert_eq!(c.name, "cudaMemset"),
            ActivityKind::Sync => {
                let want = match a.sync_kind.unwrap() {
                    "StreamSynchronize" => "cudaStreamSynchronize",
                    "EventSynchronize" => "cudaEventSynchronize",
                    _ => "cudaDeviceSynchronize",
                };
                assert_eq!(c.name, want);
                // The wait lies inside the blocking call.
                assert!(
                    start + tol >= c.enter_ns && end <= c.exit_ns + tol,
                    "{a:?} {c:?}"
                );
            }
            _ => unreachable!(),
        }
    }
    // Program order survives the clock mapping: the kernels (two streams, no overlap of
    // a launch with the previous kernel's start) start in the order they were launched.
    let mut k: Vec<&Activity> = of(f, ActivityKind::Kernel);
    k.sort_by_key(|a| a.correlation_id);
    let starts: Vec<u64> = k.iter().map(|a| f.to_monotonic(a.start)).collect();
    let first_launch = f
        .api_calls
        .iter()
        .filter(|c| c.name == "cudaLaunchKernel")
        .map(|c| c.enter_ns)
        .min()
        .unwrap();
    assert!(starts.windows(2).all(|w| w[0] < w[1]), "{starts:?}");
    assert!(starts[0] >= first_launch);
}

#[test]
fn truncated_file_decodes_its_prefix() {
    let bytes = std::fs::read(fixture_path()).unwrap();
    let full = cupti::decode(&bytes).unwrap();
    // Cut inside the trailer, in the middle, and right after the header frame.
    for cut in [bytes.len() - 5, bytes.len() / 2, 8 + 8 + 24 + 3] {
        let f = cupti::decode(&bytes[..cut]).unwrap();
        assert!(f.truncated, "cut at {cut}");
        assert_eq!(f.pid, full.pid);
        assert!(f.activities.len() <= full.activities.len());
        assert_eq!(
            f.activities[..],
            full.activities[..f.activities.len()],
            "a prefix"
        );
    }
    // Whole frames, but no trailer (a process killed between two writes).
    let mut pos = 8;
    let mut last = 8;
    while pos < bytes.len() {
        last = pos;
        let len = u32::from_ne_bytes(bytes[pos + 4..pos + 8].try_into().unwrap()) as usize;
        pos += 8 + len;
    }
    let f = cupti::decode(&bytes[..last]).unwrap();
    assert!(f.truncated);
    assert_eq!(f.activities, full.activities);
    // Not a file of ours / no header.
    assert!(cupti::decode(b"PPCUPTI\0").is_err());
    assert!(cupti::decode(b"# powerperf-rt region events v1").is_err());
}

#[test]
fn unknown_record_version_is_a_clear_error() {
    let bytes = std::fs::read(fixture_path()).unwrap();
    // Grow the first kernel record by 40 bytes, as a later CUPTI's next version might (216
    // is CUpti_ActivityKernel10; 224, 232 and 248 are versions 11 to 13).
    let mut out = bytes[..8].to_vec();
    let mut pos = 8;
    let mut done = false;
    while pos < bytes.len() {
        let tag = u32::from_ne_bytes(bytes[pos..pos + 4].try_into().unwrap());
        let len = u32::from_ne_bytes(bytes[pos + 4..pos + 8].try_into().unwrap()) as usize;
        let mut p = bytes[pos + 8..pos + 8 + len].to_vec();
        if !done && tag == 3 && u32::from_ne_bytes(p[..4].try_into().unwrap()) == 10 {
            p.extend_from_slice(&[0; 40]);
            done = true;
        }
        out.extend_from_slice(&tag.to_ne_bytes());
        out.extend_from_slice(&(p.len() as u32).to_ne_bytes());
        out.extend_from_slice(&p);
        pos += 8 + len;
    }
    assert!(done);
    let e = cupti::decode(&out).unwrap_err().to_string();
    assert!(e.contains("CONCURRENT_KERNEL"), "{e}");
    assert!(e.contains("256 bytes") && e.contains("130001"), "{e}");
    assert!(e.contains("CUpti_ActivityKernel10 = 216 B"), "{e}");
}

/// Whether this machine has an NVIDIA GPU and nvcc; prints `skipped: ...` when not.
fn have_gpu(test: &str) -> bool {
    let gpu = std::fs::read_dir("/proc/driver/nvidia/gpus")
        .map(|d| d.count() > 0)
        .unwrap_or(false);
    if !gpu {
        eprintln!("skipped: {test}: no NVIDIA GPU");
        return false;
    }
    have("nvcc", test)
}

/// Build the test program and run it with the injection (`libpowerperf_rt.so` of this
/// test build has the `cuda` feature, hence `InitializeInjection`).
fn run_fixture(dir: &Path, args: &[&str], env: &[(&str, &str)]) -> CuptiFile {
    let exe = dir.join("cupti_fixture");
    if !exe.exists() {
        run_ok(
            Command::new("nvcc")
                .args(["-O2", "-o"])
                .arg(&exe)
                .arg(rt_dir().join("examples/cuda/cupti_fixture.cu")),
        );
    }
    let run = dir.join(format!("run-{}", args.join("-")));
    let mut c = Command::new(&exe);
    c.args(args).env("POWERPERF_RUN_DIR", &run).env(
        "CUDA_INJECTION64_PATH",
        lib_dir().join("libpowerperf_rt.so"),
    );
    for (k, v) in env {
        c.env(k, v);
    }
    run_ok(&mut c);
    let files: Vec<PathBuf> = std::fs::read_dir(run.join("gpu_activity"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    cupti::read_file(&files[0]).unwrap()
}

#[test]
fn gpu_injection_end_to_end() {
    if !have_gpu("gpu_injection_end_to_end") {
        return;
    }
    let dir = temp_dir("cupti-gpu");
    let f = run_fixture(&dir, &[], &[]);
    assert!(!f.truncated && f.dropped_records == 0, "{:?}", f.notes);
    assert_eq!(of(&f, ActivityKind::Kernel).len(), 6);
    assert_eq!(of(&f, ActivityKind::Memcpy).len(), 5);
    assert!(!f.devices.is_empty());
    let m = run_fixture(&dir, &["many", "2000"], &[]);
    assert_eq!(of(&m, ActivityKind::Kernel).len(), 2100);
    assert_eq!(
        m.api_calls
            .iter()
            .filter(|c| c.name == "cudaLaunchKernel")
            .count(),
        2100
    );
    // Activities only.
    let n = run_fixture(&dir, &["many", "100"], &[("POWERPERF_CUPTI_API", "none")]);
    assert!(n.api_calls.is_empty());
    assert_eq!(of(&n, ActivityKind::Kernel).len(), 200);
}

/// `fixture_pcsamp.bin`: `scripts/gpu/stall_kernels.cu` (scale 0.05, one repetition) recorded
/// with PC sampling on an H100 (README in the fixture directory).
fn fixture_pcsamp() -> CuptiFile {
    cupti::read_file(&rt_dir().join("tests/fixtures/cupti/fixture_pcsamp.bin")).unwrap()
}

/// Samples per CUPTI stall reason (prefix stripped) of functions whose name contains `f`.
fn stalls_of(file: &CuptiFile, f: &str) -> HashMap<String, u64> {
    let mut m = HashMap::new();
    for s in file.pc_samples.iter().filter(|s| s.function.contains(f)) {
        if s.stall_reason.ends_with("_not_issued") {
            continue;
        }
        let r = s
            .stall_reason
            .trim_start_matches("smsp__pcsamp_warps_issue_stalled_")
            .to_string();
        *m.entry(r).or_default() += s.samples;
    }
    m
}

#[test]
fn fixture_pc_sampling() {
    let f = fixture_pcsamp();
    assert!(!f.truncated);
    assert_eq!(f.pc_configs.len(), 1);
    let c = &f.pc_configs[0];
    assert_eq!(c.mode, "continuous");
    assert_eq!(c.period_cycles, 4096, "POWERPERF_CUPTI_PC_PERIOD=12");
    assert!(c.stall_reasons.len() >= 20, "{:?}", c.stall_reasons);
    assert!(c
        .stall_reasons
        .iter()
        .any(|(_, n)| n == "smsp__pcsamp_warps_issue_stalled_long_scoreboard"));
    let sum: u64 = f.pc_samples.iter().map(|s| s.samples).sum();
    // A latency sample is counted under `X` and `X_not_issued` (the latter a subset): the
    // base reasons alone sum to at most CUPTI's total (samples of the last batch after the
    // total was taken aside), all names together to more.
    let base: u64 = f
        .pc_samples
        .iter()
        .filter(|s| !s.stall_reason.ends_with("_not_issued"))
        .map(|s| s.samples)
        .sum();
    assert!(
        base > 0 && base <= c.total_samples,
        "{base} of {}",
        c.total_samples
    );
    assert!(sum > c.total_samples);
    let at = |r: &str| -> u64 {
        f.pc_samples
            .iter()
            .filter(|s| s.function.contains("chase") && s.stall_reason == r)
            .map(|s| s.samples)
            .sum()
    };
    let (all, lat) = (
        at("smsp__pcsamp_warps_issue_stalled_long_scoreboard"),
        at("smsp__pcsamp_warps_issue_stalled_long_scoreboard_not_issued"),
    );
    assert!(lat <= all && lat > all / 2, "{lat} of {all}");
    // The three kernels and their known dominant stall.
    let dominant = |name: &str| -> String {
        let m = stalls_of(&f, name);
        assert!(!m.is_empty(), "no samples in {name}");
        m.into_iter()
            .filter(|(r, _)| r != "selected")
            .max_by_key(|(_, n)| *n)
            .unwrap()
            .0
    };
    assert_eq!(dominant("chase"), "long_scoreboard");
    assert_eq!(dominant("barrier"), "barrier");
    assert_eq!(dominant("fma_chain"), "wait");
    // Built with -lineinfo: the dependent load is line 25 of stall_kernels.cu.
    let load = f
        .pc_samples
        .iter()
        .filter(|s| s.function.contains("chase"))
        .max_by_key(|s| s.samples)
        .unwrap();
    assert_eq!(load.line, Some(25));
    assert!(load.file.as_deref().unwrap().ends_with("stall_kernels.cu"));
    assert!(f
        .cubins
        .iter()
        .any(|(_, size, path)| *size > 0 && path.is_some()));
    // The kernels are also in the activity records, under the same (mangled) names.
    for s in &f.pc_samples {
        assert!(
            f.activities
                .iter()
                .any(|a| a.name.as_deref() == Some(s.function.as_str())),
            "{}",
            s.function
        );
    }
}
