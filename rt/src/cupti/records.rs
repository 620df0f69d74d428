//! The raw CUPTI activity records the injection copies out of CUPTI's buffers: the kinds
//! recorded, the field offsets of every struct version (from `cudarc::cupti::sys`), and the
//! decoding of one record into an [`Activity`] (see the parent module on struct versions).

use super::{
    bad, i32_at, u16_at, u32_at, u64_at, Activity, ActivityKind, DeviceProps, Pending,
    BINDINGS_CUDA_VERSION, DOMAIN_DRIVER, DOMAIN_RUNTIME,
};
use cudarc::cupti::sys;
use std::io;
use std::mem::{offset_of, size_of};

/// CUPTI activity kinds this crate records (`CUpti_ActivityKind`).
pub(crate) mod kind {
    use cudarc::cupti::sys::CUpti_ActivityKind as K;
    pub const MEMCPY: u32 = K::CUPTI_ACTIVITY_KIND_MEMCPY as u32;
    pub const MEMSET: u32 = K::CUPTI_ACTIVITY_KIND_MEMSET as u32;
    pub const KERNEL: u32 = K::CUPTI_ACTIVITY_KIND_KERNEL as u32;
    pub const DEVICE: u32 = K::CUPTI_ACTIVITY_KIND_DEVICE as u32;
    pub const CONCURRENT_KERNEL: u32 = K::CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL as u32;
    pub const MEMCPY2: u32 = K::CUPTI_ACTIVITY_KIND_MEMCPY2 as u32;
    pub const SYNCHRONIZATION: u32 = K::CUPTI_ACTIVITY_KIND_SYNCHRONIZATION as u32;
    pub const MEMORY2: u32 = K::CUPTI_ACTIVITY_KIND_MEMORY2 as u32;
    pub const DRIVER: u32 = K::CUPTI_ACTIVITY_KIND_DRIVER as u32;
    pub const RUNTIME: u32 = K::CUPTI_ACTIVITY_KIND_RUNTIME as u32;
}

/// Name of a `CUpti_ActivityKind` value, for messages.
pub fn activity_kind_name(k: u32) -> &'static str {
    match k {
        kind::MEMCPY => "MEMCPY",
        kind::MEMSET => "MEMSET",
        kind::KERNEL => "KERNEL",
        kind::DEVICE => "DEVICE",
        kind::CONCURRENT_KERNEL => "CONCURRENT_KERNEL",
        kind::MEMCPY2 => "MEMCPY2",
        kind::SYNCHRONIZATION => "SYNCHRONIZATION",
        kind::MEMORY2 => "MEMORY2",
        kind::DRIVER => "DRIVER",
        kind::RUNTIME => "RUNTIME",
        _ => "other",
    }
}

/// Record layouts: the struct versions (name, size in bytes) CUPTI may emit for a kind,
/// and the fields read, at offsets shared by all those versions.
pub(crate) mod layout {
    use super::*;

    /// (struct name, size) of each known version of a kind's record.
    pub type Versions = &'static [(&'static str, usize)];

    macro_rules! versions {
        ($($t:ident),* $(,)?) => {
            &[$((stringify!($t), size_of::<sys::$t>())),*]
        };
    }

    pub const KERNEL: Versions = versions!(
        CUpti_ActivityKernel9,
        CUpti_ActivityKernel10,
        CUpti_ActivityKernel11,
        CUpti_ActivityKernel12,
        CUpti_ActivityKernel13,
    );
    pub const MEMCPY: Versions = versions!(
        CUpti_ActivityMemcpy5,
        CUpti_ActivityMemcpy6,
        CUpti_ActivityMemcpy7
    );
    pub const MEMCPY2: Versions = versions!(CUpti_ActivityMemcpyPtoP4);
    pub const MEMSET: Versions = versions!(CUpti_ActivityMemset4, CUpti_ActivityMemset5);
    pub const MEMORY2: Versions = versions!(CUpti_ActivityMemory3, CUpti_ActivityMemory4);
    pub const DEVICE: Versions = versions!(CUpti_ActivityDevice5, CUpti_ActivityDevice6);
    pub const SYNC: Versions = versions!(
        CUpti_ActivitySynchronization,
        CUpti_ActivitySynchronization2
    );
    /// Runtime and driver API calls (`CUPTI_ACTIVITY_KIND_RUNTIME` / `_DRIVER`).
    pub const API: Versions = versions!(CUpti_ActivityAPI);

    /// The versions of a kind, `None` for kinds this crate does not record.
    pub fn versions(k: u32) -> Option<Versions> {
        Some(match k {
            kind::KERNEL | kind::CONCURRENT_KERNEL => KERNEL,
            kind::MEMCPY => MEMCPY,
            kind::MEMCPY2 => MEMCPY2,
            kind::MEMSET => MEMSET,
            kind::MEMORY2 => MEMORY2,
            kind::DEVICE => DEVICE,
            kind::SYNCHRONIZATION => SYNC,
            kind::RUNTIME | kind::DRIVER => API,
            _ => return None,
        })
    }

    /// Pointer fields of a record of kind `k` and `size` bytes: (offset, is a string).
    /// `None`: unknown kind or size.
    pub fn pointers(k: u32, size: usize) -> Option<&'static [(usize, bool)]> {
        let v = versions(k)?;
        let i = v.iter().position(|&(_, s)| s == size)?;
        Some(match k {
            kind::KERNEL | kind::CONCURRENT_KERNEL => &[
                (offset_of!(sys::CUpti_ActivityKernel9, name), true),
                (offset_of!(sys::CUpti_ActivityKernel9, reserved0), false),
                (
                    offset_of!(sys::CUpti_ActivityKernel9, pAccessPolicyWindow),
                    false,
                ),
            ],
            kind::MEMCPY => &[(offset_of!(sys::CUpti_ActivityMemcpy5, reserved0), false)],
            kind::MEMCPY2 => &[(offset_of!(sys::CUpti_ActivityMemcpyPtoP4, reserved0), false)],
            kind::MEMSET => &[(offset_of!(sys::CUpti_ActivityMemset4, reserved0), false)],
            kind::MEMORY2 if i == 0 => &[(offset_of!(sys::CUpti_ActivityMemory3, name), true)],
            kind::MEMORY2 => &[
                (offset_of!(sys::CUpti_ActivityMemory4, name), true),
                (offset_of!(sys::CUpti_ActivityMemory4, source), true),
            ],
            kind::DEVICE => &[(offset_of!(sys::CUpti_ActivityDevice5, name), true)],
            _ => &[],
        })
    }

    /// `CUpti_ActivityAPI` (runtime and driver API call records).
    pub mod api {
        use super::*;
        type S = sys::CUpti_ActivityAPI;
        pub const CBID: usize = offset_of!(S, cbid);
        pub const START: usize = offset_of!(S, start);
        pub const END: usize = offset_of!(S, end);
        pub const THREAD: usize = offset_of!(S, threadId);
        pub const CORRELATION: usize = offset_of!(S, correlationId);
    }

    pub mod kernel {
        use super::*;
        type S = sys::CUpti_ActivityKernel9;
        pub const REGS: usize = offset_of!(S, registersPerThread);
        pub const START: usize = offset_of!(S, start);
        pub const END: usize = offset_of!(S, end);
        pub const DEVICE: usize = offset_of!(S, deviceId);
        pub const CONTEXT: usize = offset_of!(S, contextId);
        pub const STREAM: usize = offset_of!(S, streamId);
        pub const GRID: usize = offset_of!(S, gridX);
        pub const BLOCK: usize = offset_of!(S, blockX);
        pub const STATIC_SMEM: usize = offset_of!(S, staticSharedMemory);
        pub const DYNAMIC_SMEM: usize = offset_of!(S, dynamicSharedMemory);
        pub const CORRELATION: usize = offset_of!(S, correlationId);
        pub const NAME: usize = offset_of!(S, name);
    }
    pub mod memcpy {
        use super::*;
        type S = sys::CUpti_ActivityMemcpy5;
        pub const COPY_KIND: usize = offset_of!(S, copyKind);
        pub const SRC_KIND: usize = offset_of!(S, srcKind);
        pub const DST_KIND: usize = offset_of!(S, dstKind);
        pub const BYTES: usize = offset_of!(S, bytes);
        pub const START: usize = offset_of!(S, start);
        pub const END: usize = offset_of!(S, end);
        pub const DEVICE: usize = offset_of!(S, deviceId);
        pub const CONTEXT: usize = offset_of!(S, contextId);
        pub const STREAM: usize = offset_of!(S, streamId);
        pub const CORRELATION: usize = offset_of!(S, correlationId);
        pub const RUNTIME_CORRELATION: usize = offset_of!(S, runtimeCorrelationId);
    }
    pub mod p2p {
        use super::*;
        type S = sys::CUpti_ActivityMemcpyPtoP4;
        pub const COPY_KIND: usize = offset_of!(S, copyKind);
        pub const SRC_KIND: usize = offset_of!(S, srcKind);
        pub const DST_KIND: usize = offset_of!(S, dstKind);
        pub const BYTES: usize = offset_of!(S, bytes);
        pub const START: usize = offset_of!(S, start);
        pub const END: usize = offset_of!(S, end);
        pub const DEVICE: usize = offset_of!(S, deviceId);
        pub const CONTEXT: usize = offset_of!(S, contextId);
        pub const STREAM: usize = offset_of!(S, streamId);
        pub const CORRELATION: usize = offset_of!(S, correlationId);
    }
    pub mod memset {
        use super::*;
        type S = sys::CUpti_ActivityMemset4;
        pub const BYTES: usize = offset_of!(S, bytes);
        pub const START: usize = offset_of!(S, start);
        pub const END: usize = offset_of!(S, end);
        pub const DEVICE: usize = offset_of!(S, deviceId);
        pub const CONTEXT: usize = offset_of!(S, contextId);
        pub const STREAM: usize = offset_of!(S, streamId);
        pub const CORRELATION: usize = offset_of!(S, correlationId);
        pub const MEMORY_KIND: usize = offset_of!(S, memoryKind);
    }
    pub mod memory {
        use super::*;
        type S = sys::CUpti_ActivityMemory3;
        pub const OP: usize = offset_of!(S, memoryOperationType);
        pub const MEMORY_KIND: usize = offset_of!(S, memoryKind);
        pub const CORRELATION: usize = offset_of!(S, correlationId);
        pub const ADDRESS: usize = offset_of!(S, address);
        pub const BYTES: usize = offset_of!(S, bytes);
        pub const TIMESTAMP: usize = offset_of!(S, timestamp);
        pub const DEVICE: usize = offset_of!(S, deviceId);
        pub const CONTEXT: usize = offset_of!(S, contextId);
        pub const STREAM: usize = offset_of!(S, streamId);
        pub const NAME: usize = offset_of!(S, name);
    }
    pub mod sync {
        use super::*;
        type S = sys::CUpti_ActivitySynchronization;
        pub const TYPE: usize = offset_of!(S, type_);
        pub const START: usize = offset_of!(S, start);
        pub const END: usize = offset_of!(S, end);
        pub const CORRELATION: usize = offset_of!(S, correlationId);
        pub const CONTEXT: usize = offset_of!(S, contextId);
        pub const STREAM: usize = offset_of!(S, streamId);
    }
    pub mod device {
        use super::*;
        type S = sys::CUpti_ActivityDevice5;
        pub const GLOBAL_MEMORY_SIZE: usize = offset_of!(S, globalMemorySize);
        pub const L2: usize = offset_of!(S, l2CacheSize);
        pub const THREADS_PER_WARP: usize = offset_of!(S, numThreadsPerWarp);
        pub const CORE_CLOCK: usize = offset_of!(S, coreClockRate);
        pub const SMS: usize = offset_of!(S, numMultiprocessors);
        pub const MAX_WARPS_PER_SM: usize = offset_of!(S, maxWarpsPerMultiprocessor);
        pub const MAX_BLOCKS_PER_SM: usize = offset_of!(S, maxBlocksPerMultiprocessor);
        pub const SMEM_PER_SM: usize = offset_of!(S, maxSharedMemoryPerMultiprocessor);
        pub const REGS_PER_SM: usize = offset_of!(S, maxRegistersPerMultiprocessor);
        pub const REGS_PER_BLOCK: usize = offset_of!(S, maxRegistersPerBlock);
        pub const SMEM_PER_BLOCK: usize = offset_of!(S, maxSharedMemoryPerBlock);
        pub const THREADS_PER_BLOCK: usize = offset_of!(S, maxThreadsPerBlock);
        pub const CC_MAJOR: usize = offset_of!(S, computeCapabilityMajor);
        pub const CC_MINOR: usize = offset_of!(S, computeCapabilityMinor);
        pub const ID: usize = offset_of!(S, id);
        pub const NAME: usize = offset_of!(S, name);
    }
}

fn copy_kind_name(v: u8) -> &'static str {
    match v {
        1 => "H2D",
        2 => "D2H",
        3 => "H2A",
        4 => "A2H",
        5 => "A2A",
        6 => "A2D",
        7 => "D2A",
        8 => "D2D",
        9 => "H2H",
        10 => "P2P",
        _ => "unknown",
    }
}

fn memory_kind_name(v: u32) -> &'static str {
    match v {
        1 => "pageable",
        2 => "pinned",
        3 => "device",
        4 => "array",
        5 => "managed",
        6 => "device_static",
        7 => "managed_static",
        _ => "unknown",
    }
}

fn sync_kind_name(v: u32) -> &'static str {
    match v {
        1 => "EventSynchronize",
        2 => "StreamWaitEvent",
        3 => "StreamSynchronize",
        4 => "ContextSynchronize",
        _ => "unknown",
    }
}

/// One `CUpti_ActivityAPI` record, times in CUPTI ns.
pub(super) struct ApiActivity {
    pub(super) domain: u32,
    pub(super) cbid: u32,
    pub(super) start: u64,
    pub(super) end: u64,
    pub(super) tid: u32,
    pub(super) correlation_id: u32,
}

pub(super) fn decode_api_activity(p: &[u8], cupti_version: u32) -> io::Result<ApiActivity> {
    let k = u32_at(p, 0);
    if !layout::API.iter().any(|&(_, s)| s == p.len()) {
        return Err(bad(format!(
            "activity record of CUPTI kind {} ({k}) of {} bytes from CUPTI API version \
             {cupti_version}: not the CUpti_ActivityAPI of {} bytes this reader knows; the \
             bindings are those of CUDA {BINDINGS_CUDA_VERSION}: update cudarc",
            activity_kind_name(k),
            p.len(),
            layout::API[0].1
        )));
    }
    use layout::api as o;
    Ok(ApiActivity {
        domain: if k == kind::DRIVER {
            DOMAIN_DRIVER
        } else {
            DOMAIN_RUNTIME
        },
        cbid: u32_at(p, o::CBID),
        start: u64_at(p, o::START),
        end: u64_at(p, o::END),
        tid: u32_at(p, o::THREAD),
        correlation_id: u32_at(p, o::CORRELATION),
    })
}

pub(super) fn decode_activity(
    p: &[u8],
    cupti_version: u32,
    out: &mut Vec<Pending>,
    devices: &mut Vec<(DeviceProps, u64)>,
) -> io::Result<()> {
    let k = u32_at(p, 0);
    let Some(versions) = layout::versions(k) else {
        return Err(bad(format!(
            "activity record of CUPTI kind {k} ({}, {} bytes): not a kind this reader decodes",
            activity_kind_name(k),
            p.len()
        )));
    };
    let Some(version) = versions.iter().position(|&(_, s)| s == p.len()) else {
        let known: Vec<String> = versions
            .iter()
            .map(|(n, s)| format!("{n} = {s} B"))
            .collect();
        return Err(bad(format!(
            "activity record of CUPTI kind {} ({k}) of {} bytes from CUPTI API version \
             {cupti_version}: not a record version this reader knows ({}); the bindings \
             are those of CUDA {BINDINGS_CUDA_VERSION}: update cudarc",
            activity_kind_name(k),
            p.len(),
            known.join(", ")
        )));
    };
    let blank = Activity {
        kind: ActivityKind::Kernel,
        start: 0,
        end: 0,
        device: 0,
        context: 0,
        stream: 0,
        correlation_id: 0,
        runtime_correlation_id: 0,
        name: None,
        bytes: 0,
        copy_kind: None,
        src_kind: None,
        dst_kind: None,
        memory_kind: None,
        address: 0,
        grid: [0; 3],
        block: [0; 3],
        regs_per_thread: 0,
        static_smem: 0,
        dynamic_smem: 0,
        sync_kind: None,
    };
    let (a, name_id) = match k {
        kind::KERNEL | kind::CONCURRENT_KERNEL => {
            use layout::kernel as o;
            let a = Activity {
                kind: ActivityKind::Kernel,
                start: u64_at(p, o::START),
                end: u64_at(p, o::END),
                device: u32_at(p, o::DEVICE),
                context: u32_at(p, o::CONTEXT),
                stream: u32_at(p, o::STREAM),
                correlation_id: u32_at(p, o::CORRELATION),
                grid: [0, 1, 2].map(|i| i32_at(p, o::GRID + 4 * i)),
                block: [0, 1, 2].map(|i| i32_at(p, o::BLOCK + 4 * i)),
                regs_per_thread: u32::from(u16_at(p, o::REGS)),
                static_smem: u32_at(p, o::STATIC_SMEM),
                dynamic_smem: u32_at(p, o::DYNAMIC_SMEM),
                ..blank
            };
            (a, u64_at(p, o::NAME))
        }
        kind::MEMCPY => {
            use layout::memcpy as o;
            let a = Activity {
                kind: ActivityKind::Memcpy,
                start: u64_at(p, o::START),
                end: u64_at(p, o::END),
                device: u32_at(p, o::DEVICE),
                context: u32_at(p, o::CONTEXT),
                stream: u32_at(p, o::STREAM),
                correlation_id: u32_at(p, o::CORRELATION),
                runtime_correlation_id: u32_at(p, o::RUNTIME_CORRELATION),
                bytes: u64_at(p, o::BYTES),
                copy_kind: Some(copy_kind_name(p[o::COPY_KIND])),
                src_kind: Some(memory_kind_name(u32::from(p[o::SRC_KIND]))),
                dst_kind: Some(memory_kind_name(u32::from(p[o::DST_KIND]))),
                ..blank
            };
            (a, 0)
        }
        kind::MEMCPY2 => {
            use layout::p2p as o;
            let a = Activity {
                kind: ActivityKind::Memcpy,
                start: u64_at(p, o::START),
                end: u64_at(p, o::END),
                device: u32_at(p, o::DEVICE),
                context: u32_at(p, o::CONTEXT),
                stream: u32_at(p, o::STREAM),
                correlation_id: u32_at(p, o::CORRELATION),
                bytes: u64_at(p, o::BYTES),
                copy_kind: Some(copy_kind_name(p[o::COPY_KIND])),
                src_kind: Some(memory_kind_name(u32::from(p[o::SRC_KIND]))),
                dst_kind: Some(memory_kind_name(u32::from(p[o::DST_KIND]))),
                ..blank
            };
            (a, 0)
        }
        kind::MEMSET => {
            use layout::memset as o;
            let a = Activity {
                kind: ActivityKind::Memset,
                start: u64_at(p, o::START),
                end: u64_at(p, o::END),
                device: u32_at(p, o::DEVICE),
                context: u32_at(p, o::CONTEXT),
                stream: u32_at(p, o::STREAM),
                correlation_id: u32_at(p, o::CORRELATION),
                bytes: u64_at(p, o::BYTES),
                memory_kind: Some(memory_kind_name(u32::from(u16_at(p, o::MEMORY_KIND)))),
                ..blank
            };
            (a, 0)
        }
        kind::MEMORY2 => {
            use layout::memory as o;
            let t = u64_at(p, o::TIMESTAMP);
            let kind = match u32_at(p, o::OP) {
                1 => ActivityKind::Alloc,
                2 => ActivityKind::Free,
                _ => return Ok(()), // CUPTI_ACTIVITY_MEMORY_OPERATION_TYPE_INVALID
            };
            let a = Activity {
                kind,
                start: t,
                end: t,
                device: u32_at(p, o::DEVICE),
                context: u32_at(p, o::CONTEXT),
                stream: u32_at(p, o::STREAM),
                correlation_id: u32_at(p, o::CORRELATION),
                bytes: u64_at(p, o::BYTES),
                address: u64_at(p, o::ADDRESS),
                memory_kind: Some(memory_kind_name(u32_at(p, o::MEMORY_KIND))),
                ..blank
            };
            (a, u64_at(p, o::NAME))
        }
        kind::SYNCHRONIZATION => {
            use layout::sync as o;
            let a = Activity {
                kind: ActivityKind::Sync,
                start: u64_at(p, o::START),
                end: u64_at(p, o::END),
                context: u32_at(p, o::CONTEXT),
                stream: u32_at(p, o::STREAM),
                correlation_id: u32_at(p, o::CORRELATION),
                sync_kind: Some(sync_kind_name(u32_at(p, o::TYPE))),
                ..blank
            };
            (a, 0)
        }
        kind::DEVICE => {
            use layout::device as o;
            let warp = u32_at(p, o::THREADS_PER_WARP);
            let warps = u32_at(p, o::MAX_WARPS_PER_SM);
            let d = DeviceProps {
                id: u32_at(p, o::ID),
                name: String::new(),
                cc_major: u32_at(p, o::CC_MAJOR),
                cc_minor: u32_at(p, o::CC_MINOR),
                sm_count: u32_at(p, o::SMS),
                max_threads_per_block: u32_at(p, o::THREADS_PER_BLOCK),
                // Saturating: the file is input (an overflow panic in debug builds).
                max_threads_per_sm: warps.saturating_mul(warp),
                max_blocks_per_sm: u32_at(p, o::MAX_BLOCKS_PER_SM),
                max_warps_per_sm: warps,
                regs_per_sm: u32_at(p, o::REGS_PER_SM),
                max_regs_per_block: u32_at(p, o::REGS_PER_BLOCK),
                smem_per_sm: u64::from(u32_at(p, o::SMEM_PER_SM)),
                smem_per_block: u64::from(u32_at(p, o::SMEM_PER_BLOCK)),
                warp_size: warp,
                global_memory_bytes: u64_at(p, o::GLOBAL_MEMORY_SIZE),
                l2_cache_bytes: u32_at(p, o::L2),
                core_clock_khz: u32_at(p, o::CORE_CLOCK),
            };
            let _ = version;
            devices.push((d, u64_at(p, o::NAME)));
            return Ok(());
        }
        _ => unreachable!("layout::versions knows only the kinds above"),
    };
    let _ = version;
    out.push(Pending { a, name_id });
    Ok(())
}
