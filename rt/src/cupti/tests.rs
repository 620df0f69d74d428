use super::*;
use std::mem::{offset_of, size_of};

fn frame(out: &mut Vec<u8>, t: u32, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    out.extend_from_slice(&t.to_ne_bytes());
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    for p in parts {
        out.extend_from_slice(p);
    }
}

fn header(version: u32) -> Vec<u8> {
    let mut b = FILE_MAGIC.to_vec();
    let h: Vec<u8> = [version, 7, 130001, 13000, 13040, 1]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .collect();
    frame(&mut b, tag::HEADER, &[&h]);
    b
}

fn trailer(b: &mut Vec<u8>) {
    frame(b, tag::TRAILER, &[&[0u8; 32]]);
}

/// One PC record of a `PC_SAMPLES` payload.
fn pc_rec(crc: u64, pc: u64, fid: u32, corr: u32, stalls: &[(u32, u32)]) -> Vec<u8> {
    let mut r = Vec::new();
    r.extend_from_slice(&crc.to_ne_bytes());
    r.extend_from_slice(&pc.to_ne_bytes());
    r.extend_from_slice(&fid.to_ne_bytes());
    r.extend_from_slice(&corr.to_ne_bytes());
    r.extend_from_slice(&(stalls.len() as u32).to_ne_bytes());
    for (i, n) in stalls {
        r.extend_from_slice(&i.to_ne_bytes());
        r.extend_from_slice(&n.to_ne_bytes());
    }
    r
}

fn batch(ctx: u32, total: u64, dropped: u64, full: u32, recs: &[Vec<u8>]) -> Vec<u8> {
    let mut p = Vec::new();
    p.extend_from_slice(&ctx.to_ne_bytes());
    p.extend_from_slice(&0u32.to_ne_bytes());
    p.extend_from_slice(&total.to_ne_bytes());
    p.extend_from_slice(&dropped.to_ne_bytes());
    p.extend_from_slice(&0u64.to_ne_bytes());
    p.extend_from_slice(&full.to_ne_bytes());
    p.extend_from_slice(&(recs.len() as u32).to_ne_bytes());
    for r in recs {
        p.extend_from_slice(r);
    }
    p
}

/// A PC_SAMPLES frame shorter than its 40-byte batch header is an error, not a panic
/// (found by the cupti_bin fuzz target on 2026-11-26: a 37-byte frame read the record
/// count at bytes 36..40).
#[test]
fn a_pc_samples_frame_shorter_than_its_header_is_an_error() {
    for len in [36usize, 37, 39] {
        let mut b = header(2);
        frame(&mut b, tag::PC_SAMPLES, &[&vec![0u8; len]]);
        let e = decode(&b).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidData, "{len}: {e}");
    }
    // 40 bytes, no records: a valid empty batch.
    let mut b = header(2);
    frame(&mut b, tag::PC_SAMPLES, &[&[0u8; 40][..]]);
    assert!(decode(&b).is_ok());
}

/// PC sampling frames (format 2): batches summed per PC and reason, names and lines
/// resolved, totals per context.
#[test]
fn pc_sampling_frames_decode_and_sum() {
    let mut b = header(2);
    frame(
        &mut b,
        tag::STRING,
        &[&1u32.to_ne_bytes(), b"_Z5chasePKjjPj"],
    );
    frame(
        &mut b,
        tag::STRING,
        &[&2u32.to_ne_bytes(), b"/src/stall_kernels.cu"],
    );
    let cfg: Vec<u8> = [1u32, 0, 1, 10]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .chain(1_048_576u64.to_ne_bytes())
        .chain(536_870_912u64.to_ne_bytes())
        .collect();
    frame(&mut b, tag::PC_CONFIG, &[&cfg]);
    for (i, n) in [
        (3u32, "smsp__pcsamp_warps_issue_stalled_long_scoreboard"),
        (9, "smsp__pcsamp_warps_issue_stalled_selected"),
    ] {
        frame(
            &mut b,
            tag::PC_STALL_REASON,
            &[&1u32.to_ne_bytes(), &i.to_ne_bytes(), n.as_bytes()],
        );
    }
    let r1 = pc_rec(0xabc, 0x40, 1, 0, &[(3, 90), (9, 10)]);
    let r2 = pc_rec(0xabc, 0x40, 1, 0, &[(3, 5), (9, 0)]);
    let r3 = pc_rec(0xabc, 0x50, 1, 0, &[(9, 7)]);
    frame(&mut b, tag::PC_SAMPLES, &[&batch(1, 100, 2, 0, &[r1])]);
    frame(&mut b, tag::PC_SAMPLES, &[&batch(1, 12, 0, 1, &[r2, r3])]);
    let line: Vec<u8> = 0xabcu64
        .to_ne_bytes()
        .into_iter()
        .chain(0x40u64.to_ne_bytes())
        .chain(1u32.to_ne_bytes())
        .chain(27u32.to_ne_bytes())
        .chain(2u32.to_ne_bytes())
        .collect();
    frame(&mut b, tag::PC_LINE, &[&line]);
    let cubin: Vec<u8> = 0xabcu64
        .to_ne_bytes()
        .into_iter()
        .chain(4096u64.to_ne_bytes())
        .chain(1u32.to_ne_bytes())
        .chain(1u32.to_ne_bytes())
        .chain(b"cubins/0000000000000abc.cubin".iter().copied())
        .collect();
    frame(&mut b, tag::CUBIN, &[&cubin]);
    trailer(&mut b);
    let f = decode(&b).unwrap();
    assert!(!f.truncated);
    assert_eq!(f.pc_configs.len(), 1);
    let c = &f.pc_configs[0];
    assert_eq!(
        (c.mode, c.period_cycles, c.total_samples, c.dropped_samples),
        ("continuous", 1024, 112, 2)
    );
    assert_eq!(c.hardware_buffer_full, 1);
    assert_eq!(c.stall_reasons.len(), 2);
    let got: Vec<(u64, &str, u64, Option<u32>)> = f
        .pc_samples
        .iter()
        .map(|s| (s.pc_offset, s.stall_reason.as_str(), s.samples, s.line))
        .collect();
    assert_eq!(
        got,
        [
            (
                0x40,
                "smsp__pcsamp_warps_issue_stalled_long_scoreboard",
                95,
                Some(27)
            ),
            (
                0x40,
                "smsp__pcsamp_warps_issue_stalled_selected",
                10,
                Some(27)
            ),
            (0x50, "smsp__pcsamp_warps_issue_stalled_selected", 7, None),
        ]
    );
    assert_eq!(f.pc_samples[0].function, "_Z5chasePKjjPj");
    assert_eq!(
        f.pc_samples[0].file.as_deref(),
        Some("/src/stall_kernels.cu")
    );
    assert_eq!(
        f.cubins,
        [(
            0xabc,
            4096,
            Some("cubins/0000000000000abc.cubin".to_string())
        )]
    );
}

/// Format 1 files (before PC sampling) still read; a later version is refused.
#[test]
fn format_versions() {
    let mut b = header(1);
    trailer(&mut b);
    let f = decode(&b).unwrap();
    assert!(f.pc_samples.is_empty() && f.pc_configs.is_empty());
    let mut b = header(3);
    trailer(&mut b);
    let e = decode(&b).unwrap_err().to_string();
    assert!(e.contains("format version 3"), "{e}");
}

/// A PC_SAMPLES frame whose records run past its end is an error naming the frame.
#[test]
fn pc_samples_cut_short_is_an_error() {
    let mut b = header(2);
    let mut p = batch(1, 1, 0, 0, &[pc_rec(1, 2, 0, 0, &[(3, 1)])]);
    p.truncate(p.len() - 4);
    frame(&mut b, tag::PC_SAMPLES, &[&p]);
    trailer(&mut b);
    let e = decode(&b).unwrap_err().to_string();
    assert!(e.contains("PC_SAMPLES") && e.contains("cut short"), "{e}");
}

/// Every field read sits at the same offset in every record version accepted for its
/// kind (CUPTI appends fields in new versions).
#[test]
fn versions_share_the_fields_read() {
    macro_rules! same_one {
        ($base:ident, $v:ident, [$($f:ident),*]) => {$(
            assert_eq!(
                offset_of!(sys::$base, $f),
                offset_of!(sys::$v, $f),
                concat!(stringify!($v), ".", stringify!($f))
            );
        )*};
    }
    macro_rules! same {
        ($base:ident, [$($v:ident),*], $fs:tt) => {$(
            same_one!($base, $v, $fs);
        )*};
    }
    same!(
        CUpti_ActivityKernel9,
        [
            CUpti_ActivityKernel10,
            CUpti_ActivityKernel11,
            CUpti_ActivityKernel12,
            CUpti_ActivityKernel13
        ],
        [
            registersPerThread,
            start,
            end,
            deviceId,
            contextId,
            streamId,
            gridX,
            gridY,
            gridZ,
            blockX,
            blockY,
            blockZ,
            staticSharedMemory,
            dynamicSharedMemory,
            correlationId,
            name,
            reserved0,
            pAccessPolicyWindow
        ]
    );
    same!(
        CUpti_ActivityMemcpy5,
        [CUpti_ActivityMemcpy6, CUpti_ActivityMemcpy7],
        [
            copyKind,
            srcKind,
            dstKind,
            bytes,
            start,
            end,
            deviceId,
            contextId,
            streamId,
            correlationId,
            runtimeCorrelationId,
            reserved0
        ]
    );
    same!(
        CUpti_ActivityMemset4,
        [CUpti_ActivityMemset5],
        [
            bytes,
            start,
            end,
            deviceId,
            contextId,
            streamId,
            correlationId,
            memoryKind,
            reserved0
        ]
    );
    same!(
        CUpti_ActivityMemory3,
        [CUpti_ActivityMemory4],
        [
            memoryOperationType,
            memoryKind,
            correlationId,
            address,
            bytes,
            timestamp,
            deviceId,
            contextId,
            streamId,
            name
        ]
    );
    same!(
        CUpti_ActivitySynchronization,
        [CUpti_ActivitySynchronization2],
        [type_, start, end, correlationId, contextId, streamId]
    );
    same!(
        CUpti_ActivityDevice5,
        [CUpti_ActivityDevice6],
        [
            globalMemorySize,
            l2CacheSize,
            numThreadsPerWarp,
            coreClockRate,
            numMultiprocessors,
            maxWarpsPerMultiprocessor,
            maxBlocksPerMultiprocessor,
            maxSharedMemoryPerMultiprocessor,
            maxRegistersPerMultiprocessor,
            maxRegistersPerBlock,
            maxSharedMemoryPerBlock,
            maxThreadsPerBlock,
            computeCapabilityMajor,
            computeCapabilityMinor,
            id,
            name
        ]
    );
    // Sizes tell the versions of a kind apart.
    for v in [
        layout::KERNEL,
        layout::MEMCPY,
        layout::MEMSET,
        layout::MEMORY2,
        layout::DEVICE,
        layout::SYNC,
        layout::API,
    ] {
        let mut s: Vec<usize> = v.iter().map(|x| x.1).collect();
        s.dedup();
        assert_eq!(s.len(), v.len(), "{v:?}");
    }
}

/// `POWERPERF_CUPTI_API=activity`: RUNTIME and DRIVER activity records become API
/// calls named by their API_FUNC frames, on CLOCK_MONOTONIC; functions without a name
/// frame (not selected by the writer) are dropped.
#[test]
fn api_activity_records_become_api_calls() {
    fn api_rec(k: u32, cbid: u32, start: u64, end: u64, tid: u32, corr: u32) -> Vec<u8> {
        let mut r = vec![0u8; size_of::<sys::CUpti_ActivityAPI>()];
        r[0..4].copy_from_slice(&k.to_ne_bytes());
        r[layout::api::CBID..][..4].copy_from_slice(&cbid.to_ne_bytes());
        r[layout::api::START..][..8].copy_from_slice(&start.to_ne_bytes());
        r[layout::api::END..][..8].copy_from_slice(&end.to_ne_bytes());
        r[layout::api::THREAD..][..4].copy_from_slice(&tid.to_ne_bytes());
        r[layout::api::CORRELATION..][..4].copy_from_slice(&corr.to_ne_bytes());
        r
    }
    let mut b = header(2);
    let name = |d: u32, cbid: u32, n: &str| {
        let mut p = d.to_ne_bytes().to_vec();
        p.extend_from_slice(&cbid.to_ne_bytes());
        p.extend_from_slice(n.as_bytes());
        p
    };
    frame(
        &mut b,
        tag::API_FUNC,
        &[&name(DOMAIN_RUNTIME, 211, "cudaLaunchKernel_v7000")],
    );
    frame(
        &mut b,
        tag::API_FUNC,
        &[&name(DOMAIN_DRIVER, 307, "cuLaunchKernel")],
    );
    // CUPTI ns 1_000_000 is CLOCK_MONOTONIC 5_000.
    let mut c = 1_000_000u64.to_ne_bytes().to_vec();
    c.extend_from_slice(&5_000u64.to_ne_bytes());
    frame(&mut b, tag::CLOCK, &[&c]);
    let recs = [
        api_rec(kind::RUNTIME, 211, 1_000_100, 1_000_400, 42, 9),
        api_rec(kind::DRIVER, 307, 1_000_150, 1_000_350, 42, 9),
        api_rec(kind::RUNTIME, 3, 1_000_500, 1_000_510, 42, 10), // not selected
    ];
    for r in &recs {
        frame(&mut b, tag::ACTIVITY, &[r]);
    }
    trailer(&mut b);
    let f = decode(&b).unwrap();
    assert_eq!(f.api_calls.len(), 2, "{:?}", f.api_calls);
    let rt = &f.api_calls[0];
    assert_eq!(rt.name, "cudaLaunchKernel");
    assert_eq!(rt.domain, "runtime");
    assert_eq!((rt.enter_ns, rt.exit_ns), (5_100, 5_400));
    assert_eq!((rt.tid, rt.correlation_id, rt.cbid), (42, 9, 211));
    assert_eq!(rt.kernel, None);
    let drv = &f.api_calls[1];
    assert_eq!(
        (drv.name.as_str(), drv.domain),
        ("cuLaunchKernel", "driver")
    );
    assert_eq!((drv.enter_ns, drv.exit_ns), (5_150, 5_350));
    // A record of another size is refused with the sizes named.
    let mut bad = header(2);
    frame(&mut bad, tag::ACTIVITY, &[&recs[0][..recs[0].len() - 8]]);
    let e = decode(&bad).unwrap_err().to_string();
    assert!(
        e.contains("CUpti_ActivityAPI") && e.contains("RUNTIME"),
        "{e}"
    );
}

#[test]
fn runtime_version_suffix_is_dropped() {
    assert_eq!(
        api_function_name(DOMAIN_RUNTIME, "cudaLaunchKernel_v7000"),
        "cudaLaunchKernel"
    );
    assert_eq!(
        api_function_name(DOMAIN_RUNTIME, "cudaMemcpyAsync_ptsz_v7000"),
        "cudaMemcpyAsync_ptsz"
    );
    assert_eq!(
        api_function_name(DOMAIN_RUNTIME, "cudaDeviceSynchronize"),
        "cudaDeviceSynchronize"
    );
    assert_eq!(
        api_function_name(DOMAIN_DRIVER, "cuMemcpyHtoD_v2"),
        "cuMemcpyHtoD_v2"
    );
}

#[test]
fn monotonic_fit_follows_offset_and_drift() {
    let f = CuptiFile {
        // 2 ppm drift: 2 s of CUPTI time are 2 s + 4 us of CLOCK_MONOTONIC.
        clock_pairs: vec![(1_000_000_000, 5_000), (3_000_000_000, 2_000_009_000)],
        ..CuptiFile::default()
    };
    assert_eq!(f.to_monotonic(2_000_000_000), 1_000_007_000);
    assert_eq!(f.to_monotonic(3_000_000_000), 2_000_009_000);
    let one = CuptiFile {
        clock_pairs: vec![(1_000, 50)],
        ..CuptiFile::default()
    };
    assert_eq!(one.to_monotonic(2_000), 1_050);
    assert_eq!(CuptiFile::default().to_monotonic(7), 7);
}
