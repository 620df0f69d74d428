//! CUPTI PC sampling in the CUDA injection (`POWERPERF_CUPTI_PC_SAMPLING=1`), with the PC
//! Sampling API of `cupti_pcsampling.h` (CUPTI docs, section "CUPTI PC Sampling API"; the
//! flow of NVIDIA's sample `pc_sampling_continuous`):
//!
//! * on `CUPTI_CBID_RESOURCE_CONTEXT_CREATED`: `cuptiPCSamplingEnable`, the context's stall
//!   reasons (`cuptiPCSamplingGetNumStallReasons`, `cuptiPCSamplingGetStallReasons`: names
//!   such as `smsp__pcsamp_warps_issue_stalled_long_scoreboard`), then
//!   `cuptiPCSamplingSetConfigurationAttribute`: all stall reasons, the collection mode
//!   ([`ENV_PC_MODE`]: continuous, the default, or kernel-serialised), the sampling period
//!   exponent ([`ENV_PC_PERIOD`], 2^N SM cycles; CUPTI's default otherwise) and a data buffer
//!   of [`PC_BUFFER_PCS`] PCs; the period in effect is read back
//!   (`cuptiPCSamplingGetConfigurationAttribute`) and written as a `PC_CONFIG` frame, the
//!   stall reasons as `PC_STALL_REASON` frames.
//! * data (`cuptiPCSamplingGetData` until CUPTI has no more PCs) is taken at the exit of
//!   every recorded synchronisation call, after each launch in kernel-serialised mode (CUPTI
//!   docs 2.8.4), on module load and context destruction, and at process exit, where
//!   `cuptiPCSamplingDisable` flushes the rest into the configured buffer; each batch is one
//!   `PC_SAMPLES` frame (per PC: cubin CRC, PC offset, function, correlation id, samples per
//!   stall reason), with the batch's total and dropped sample counts.
//! * on `CUPTI_CBID_RESOURCE_MODULE_LOADED`: the module's cubin (`CUpti_ModuleResourceData`)
//!   is saved as `RUN/cubins/<crc>.cubin` (`cuptiGetCubinCrc`; a `CUBIN` frame), and at exit
//!   every sampled PC of a saved cubin is mapped to its source line with
//!   `cuptiGetSassToSourceCorrelation` (`PC_LINE` frames; only cubins built with `-lineinfo`
//!   or `-G` have lines).
//!
//! Limits (CUPTI docs 2.8.7): one context per GPU is sampled at a time; a second context on
//! the same GPU is not sampled (`NOTE`). CUPTI allocates the function names of the PC records
//! and this module keeps them (one string per PC per batch; a few MB in long runs).

use std::collections::{HashMap, HashSet};
use std::ffi::{c_char, c_void, CStr, CString};
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};

use cudarc::cupti::sys;

use super::library::sym;
use super::output::{lock, push_frame, Inj};
use super::CUPTI_SUCCESS;
use crate::cupti::tag;

/// Environment variable: `1` turns PC sampling on (set by `powerperf collect --pc-sampling gpu`).
pub const ENV_PC_SAMPLING: &str = "POWERPERF_CUPTI_PC_SAMPLING";
/// Environment variable: the sampling period exponent N (5..=31): one sample per SM every
/// 2^N cycles (CUPTI docs 2.8.1). Unset: CUPTI's default, which depends on the SM count.
pub const ENV_PC_PERIOD: &str = "POWERPERF_CUPTI_PC_PERIOD";
/// Environment variable: `continuous` (default: kernels run concurrently, PCs carry no
/// correlation id) or `serialized` (CUPTI serialises kernels; each PC record carries the
/// correlation id of its launch).
pub const ENV_PC_MODE: &str = "POWERPERF_CUPTI_PC_MODE";
/// PCs in the data buffer handed to CUPTI per context (each with room for every stall reason).
pub const PC_BUFFER_PCS: usize = 10_000;

/// `CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS` / `..._KERNEL_SERIALIZED`.
pub const MODE_CONTINUOUS: u32 = 1;
pub const MODE_SERIALIZED: u32 = 2;

/// `CUcontext` (`cudarc::driver::sys::CUcontext`, the type CUPTI's structs hold).
pub(super) type CuCtx = cudarc::driver::sys::CUcontext;

type PcFn<P> = unsafe extern "C" fn(*mut P) -> u32;

/// PC sampling functions of `cupti_pcsampling.h` (CUPTI 11.3+), loaded from the same library.
pub(super) struct PcFns {
    enable: PcFn<sys::CUpti_PCSamplingEnableParams>,
    disable: PcFn<sys::CUpti_PCSamplingDisableParams>,
    num_stall_reasons: PcFn<sys::CUpti_PCSamplingGetNumStallReasonsParams>,
    stall_reasons: PcFn<sys::CUpti_PCSamplingGetStallReasonsParams>,
    set_config: PcFn<sys::CUpti_PCSamplingConfigurationInfoParams>,
    get_config: PcFn<sys::CUpti_PCSamplingConfigurationInfoParams>,
    get_data: PcFn<sys::CUpti_PCSamplingGetDataParams>,
    cubin_crc: PcFn<sys::CUpti_GetCubinCrcParams>,
    sass_to_source: PcFn<sys::CUpti_GetSassToSourceCorrelationParams>,
    context_id: unsafe extern "C" fn(CuCtx, *mut u32) -> u32,
    device_id: unsafe extern "C" fn(CuCtx, *mut u32) -> u32,
}

impl PcFns {
    /// # Safety
    /// `lib` is a CUPTI handle from dlopen.
    pub(super) unsafe fn bind(lib: *mut c_void) -> Result<PcFns, String> {
        // SAFETY: each type is the header's prototype.
        unsafe {
            Ok(PcFns {
                enable: sym(lib, "cuptiPCSamplingEnable")?,
                disable: sym(lib, "cuptiPCSamplingDisable")?,
                num_stall_reasons: sym(lib, "cuptiPCSamplingGetNumStallReasons")?,
                stall_reasons: sym(lib, "cuptiPCSamplingGetStallReasons")?,
                set_config: sym(lib, "cuptiPCSamplingSetConfigurationAttribute")?,
                get_config: sym(lib, "cuptiPCSamplingGetConfigurationAttribute")?,
                get_data: sym(lib, "cuptiPCSamplingGetData")?,
                cubin_crc: sym(lib, "cuptiGetCubinCrc")?,
                sass_to_source: sym(lib, "cuptiGetSassToSourceCorrelation")?,
                context_id: sym(lib, "cuptiGetContextId")?,
                device_id: sym(lib, "cuptiGetDeviceId")?,
            })
        }
    }
}

/// One sampled context: the data buffer CUPTI writes into (its address must not change:
/// boxed, arrays never resized).
struct PcCtx {
    ctx: CuCtx,
    context_id: u32,
    device_id: u32,
    data: Box<sys::CUpti_PCSamplingData>,
    _pcs: Vec<sys::CUpti_PCSamplingPCData>,
    _stalls: Vec<Vec<sys::CUpti_PCSamplingStallReason>>,
    enabled: bool,
}

// SAFETY: the raw pointers are CUPTI handles and buffers owned by this struct; every access
// goes through the `Pcs::contexts` mutex.
unsafe impl Send for PcCtx {}

/// (cubin CRC, PC offset, function name) of a sampled PC.
type SampledPc = (u64, u64, Box<[u8]>);

/// A saved cubin: its file (absolute path).
struct Cubin {
    path: PathBuf,
}

pub(super) struct Pcs {
    mode: u32,
    period: Option<u32>,
    run_dir: PathBuf,
    contexts: Mutex<Vec<PcCtx>>,
    cubins: Mutex<HashMap<u64, Cubin>>,
    /// Sampled (crc, pc offset, function name): mapped to lines at exit.
    pcs: Mutex<HashSet<SampledPc>>,
    /// Devices already sampled in another context.
    devices: Mutex<Vec<u32>>,
}

static PCS: OnceLock<Pcs> = OnceLock::new();

/// Whether PC sampling is on (set up by [`setup`]).
pub(super) fn on() -> bool {
    PCS.get().is_some()
}

/// Whether PC sampling data must be taken after each launch (kernel-serialised mode).
pub(super) fn serialized() -> bool {
    PCS.get().is_some_and(|p| p.mode == MODE_SERIALIZED)
}

/// Read the environment; `Ok(false)` when PC sampling is off.
pub(super) fn setup(inj: &Inj, run_dir: &Path) -> Result<bool, String> {
    if std::env::var(ENV_PC_SAMPLING).ok().as_deref() != Some("1") {
        return Ok(false);
    }
    if inj.cupti.pc.is_none() {
        return Err(
            "this libcupti has no PC Sampling API (cupti_pcsampling.h, CUPTI 11.3+)".into(),
        );
    }
    let mode = match std::env::var(ENV_PC_MODE).as_deref() {
        Ok("serialized") | Ok("kernel_serialized") => MODE_SERIALIZED,
        Ok("") | Ok("continuous") | Err(_) => MODE_CONTINUOUS,
        Ok(other) => {
            inj.note(&format!(
                "{ENV_PC_MODE}={other}: unknown (continuous|serialized); continuous used"
            ));
            MODE_CONTINUOUS
        }
    };
    let period = match std::env::var(ENV_PC_PERIOD) {
        Ok(v) if !v.is_empty() => match v.parse::<u32>() {
            Ok(n) if (5..=31).contains(&n) => Some(n),
            _ => {
                inj.note(&format!(
                    "{ENV_PC_PERIOD}={v}: not an exponent in 5..=31; CUPTI's default used"
                ));
                None
            }
        },
        _ => None,
    };
    let _ = PCS.set(Pcs {
        mode,
        period,
        run_dir: run_dir.to_path_buf(),
        contexts: Mutex::new(Vec::new()),
        cubins: Mutex::new(HashMap::new()),
        pcs: Mutex::new(HashSet::new()),
        devices: Mutex::new(Vec::new()),
    });
    Ok(true)
}

fn pc(inj: &Inj) -> &PcFns {
    inj.cupti.pc.as_ref().expect("checked in setup")
}

/// `CUpti_PCSamplingConfigurationInfo` of one attribute (zeroed data, then `fill`).
fn attr(
    t: sys::CUpti_PCSamplingConfigurationAttributeType,
    fill: impl FnOnce(&mut sys::CUpti_PCSamplingConfigurationInfo),
) -> sys::CUpti_PCSamplingConfigurationInfo {
    // SAFETY: a plain C struct of integers, pointers and a union: all-zero is valid.
    let mut a: sys::CUpti_PCSamplingConfigurationInfo = unsafe { std::mem::zeroed() };
    a.attributeType = t;
    fill(&mut a);
    a
}

/// `CONTEXT_CREATED`: enable and configure PC sampling on `ctx`.
pub(super) fn context_created(inj: &Inj, ctx: CuCtx) {
    let Some(p) = PCS.get() else { return };
    let Some((context_id, device_id)) = claim_device(inj, p, ctx) else {
        return;
    };
    let f = pc(inj);
    let c = &inj.cupti;
    let mut en = sys::CUpti_PCSamplingEnableParams {
        size: std::mem::size_of::<sys::CUpti_PCSamplingEnableParams>(),
        pPriv: std::ptr::null_mut(),
        ctx,
    };
    // SAFETY: a valid params struct.
    let r = unsafe { (f.enable)(&mut en) };
    if r != CUPTI_SUCCESS {
        inj.note(&format!(
            "cuptiPCSamplingEnable (device {device_id}): {}; no PC samples \
             (PC sampling needs compute capability 7.0+ and no other profiler in the process)",
            c.error(r)
        ));
        return;
    }
    let Some((names, mut index)) = stall_reasons(inj, ctx) else {
        return;
    };
    let n = index.len();
    let (stalls, pcs, mut data) = sample_buffers(n);
    if !configure(inj, p, ctx, &mut index, &mut data) {
        return;
    }
    let (period_exp, scratch, hw) = config_in_effect(inj, p, ctx);
    let mut frames = Vec::new();
    let cfg: Vec<u8> = [context_id, device_id, p.mode, period_exp]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .chain(scratch.to_ne_bytes())
        .chain(hw.to_ne_bytes())
        .collect();
    push_frame(&mut frames, tag::PC_CONFIG, &[&cfg]);
    for (i, nm) in names.iter().enumerate() {
        // SAFETY: CUPTI wrote NUL-terminated names into the 128-byte buffers.
        let s = unsafe { CStr::from_ptr(nm.as_ptr()) }.to_bytes();
        push_frame(
            &mut frames,
            tag::PC_STALL_REASON,
            &[&context_id.to_ne_bytes(), &index[i].to_ne_bytes(), s],
        );
    }
    inj.write(&frames);
    lock(&p.contexts).push(PcCtx {
        ctx,
        context_id,
        device_id,
        data,
        _pcs: pcs,
        _stalls: stalls,
        enabled: true,
    });
}

/// The (context id, device id) of `ctx`, its device now taken; `None` (with a note) if
/// another context samples that device already.
fn claim_device(inj: &Inj, p: &Pcs, ctx: CuCtx) -> Option<(u32, u32)> {
    let f = pc(inj);
    let (mut context_id, mut device_id) = (0u32, 0u32);
    // SAFETY: `ctx` is the context CUPTI passed; out-parameters are writable.
    unsafe {
        (f.context_id)(ctx, &mut context_id);
        (f.device_id)(ctx, &mut device_id);
    }
    let mut d = lock(&p.devices);
    if d.contains(&device_id) {
        inj.note(&format!(
            "PC sampling: context {context_id} on device {device_id} is not sampled \
             (CUPTI samples one context per GPU at a time)"
        ));
        return None;
    }
    d.push(device_id);
    Some((context_id, device_id))
}

/// The stall reasons of `ctx`: their names (NUL-terminated, 128 bytes each) and CUPTI's
/// index of each; `None` (with a note) if CUPTI gives none.
fn stall_reasons(inj: &Inj, ctx: CuCtx) -> Option<(Vec<Vec<c_char>>, Vec<u32>)> {
    let f = pc(inj);
    let c = &inj.cupti;
    let mut n: usize = 0;
    let mut np = sys::CUpti_PCSamplingGetNumStallReasonsParams {
        size: std::mem::size_of::<sys::CUpti_PCSamplingGetNumStallReasonsParams>(),
        pPriv: std::ptr::null_mut(),
        ctx,
        numStallReasons: &mut n,
    };
    // SAFETY: valid params; `n` writable.
    let r = unsafe { (f.num_stall_reasons)(&mut np) };
    if r != CUPTI_SUCCESS || n == 0 {
        inj.note(&format!(
            "cuptiPCSamplingGetNumStallReasons: {}; no PC samples",
            c.error(r)
        ));
        return None;
    }
    let mut names: Vec<Vec<c_char>> = (0..n)
        .map(|_| vec![0 as c_char; sys::CUPTI_STALL_REASON_STRING_SIZE as usize])
        .collect();
    let mut name_ptrs: Vec<*mut c_char> = names.iter_mut().map(|v| v.as_mut_ptr()).collect();
    let mut index = vec![0u32; n];
    let mut sp = sys::CUpti_PCSamplingGetStallReasonsParams {
        size: std::mem::size_of::<sys::CUpti_PCSamplingGetStallReasonsParams>(),
        pPriv: std::ptr::null_mut(),
        ctx,
        numStallReasons: n,
        stallReasonIndex: index.as_mut_ptr(),
        stallReasons: name_ptrs.as_mut_ptr(),
    };
    // SAFETY: arrays of n entries, each name 128 bytes (CUPTI_STALL_REASON_STRING_SIZE).
    let r = unsafe { (f.stall_reasons)(&mut sp) };
    if r != CUPTI_SUCCESS {
        inj.note(&format!(
            "cuptiPCSamplingGetStallReasons: {}; no PC samples",
            c.error(r)
        ));
        return None;
    }
    Some((names, index))
}

/// The data buffer CUPTI writes samples into: `PC_BUFFER_PCS` records, each with room for
/// all `n` stall reasons.
fn sample_buffers(
    n: usize,
) -> (
    Vec<Vec<sys::CUpti_PCSamplingStallReason>>,
    Vec<sys::CUpti_PCSamplingPCData>,
    Box<sys::CUpti_PCSamplingData>,
) {
    let mut stalls: Vec<Vec<sys::CUpti_PCSamplingStallReason>> = (0..PC_BUFFER_PCS)
        .map(|_| {
            vec![
                sys::CUpti_PCSamplingStallReason {
                    pcSamplingStallReasonIndex: 0,
                    samples: 0,
                };
                n
            ]
        })
        .collect();
    let mut pcs: Vec<sys::CUpti_PCSamplingPCData> = stalls
        .iter_mut()
        .map(|s| {
            // SAFETY: plain C struct; all-zero is valid.
            let mut d: sys::CUpti_PCSamplingPCData = unsafe { std::mem::zeroed() };
            d.size = std::mem::size_of::<sys::CUpti_PCSamplingPCData>();
            d.stallReason = s.as_mut_ptr();
            d
        })
        .collect();
    // SAFETY: plain C struct; all-zero is valid.
    let mut data: Box<sys::CUpti_PCSamplingData> = Box::new(unsafe { std::mem::zeroed() });
    data.size = std::mem::size_of::<sys::CUpti_PCSamplingData>();
    data.collectNumPcs = PC_BUFFER_PCS;
    data.pPcData = pcs.as_mut_ptr();
    (stalls, pcs, data)
}

/// Configure sampling on `ctx`: stall reasons (`index`), collection mode, the data buffer
/// `data` and the period if one was asked for. `false` (with a note) if CUPTI refuses.
fn configure(
    inj: &Inj,
    p: &Pcs,
    ctx: CuCtx,
    index: &mut [u32],
    data: &mut sys::CUpti_PCSamplingData,
) -> bool {
    let f = pc(inj);
    let c = &inj.cupti;
    let n = index.len();
    use sys::CUpti_PCSamplingConfigurationAttributeType as T;
    let mut attrs = vec![
        attr(
            T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_STALL_REASON,
            |a| {
                a.attributeData.stallReasonData.stallReasonCount = n;
                a.attributeData.stallReasonData.pStallReasonIndex = index.as_mut_ptr();
            },
        ),
        attr(
            T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_COLLECTION_MODE,
            |a| {
                a.attributeData.collectionModeData.collectionMode = if p.mode == MODE_SERIALIZED {
                    sys::CUpti_PCSamplingCollectionMode::CUPTI_PC_SAMPLING_COLLECTION_MODE_KERNEL_SERIALIZED
                } else {
                    sys::CUpti_PCSamplingCollectionMode::CUPTI_PC_SAMPLING_COLLECTION_MODE_CONTINUOUS
                };
            },
        ),
        attr(
            T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_DATA_BUFFER,
            |a| {
                a.attributeData.samplingDataBufferData.samplingDataBuffer =
                    data as *mut sys::CUpti_PCSamplingData as *mut c_void;
            },
        ),
    ];
    if let Some(period) = p.period {
        attrs.push(attr(
            T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD,
            |a| a.attributeData.samplingPeriodData.samplingPeriod = period,
        ));
    }
    let mut cp = sys::CUpti_PCSamplingConfigurationInfoParams {
        size: std::mem::size_of::<sys::CUpti_PCSamplingConfigurationInfoParams>(),
        pPriv: std::ptr::null_mut(),
        ctx,
        numAttributes: attrs.len(),
        pPCSamplingConfigurationInfo: attrs.as_mut_ptr(),
    };
    // SAFETY: valid params; every pointer lives as long as the context's record (`data`,
    // `pcs`, `stalls` move into PcCtx without reallocating; `index` is read during the call).
    let r = unsafe { (f.set_config)(&mut cp) };
    if r != CUPTI_SUCCESS {
        let bad: Vec<String> = attrs
            .iter()
            .filter(|a| a.attributeStatus as u32 != CUPTI_SUCCESS)
            .map(|a| format!("attribute {}", a.attributeType as u32))
            .collect();
        inj.note(&format!(
            "cuptiPCSamplingSetConfigurationAttribute: {} ({}); no PC samples",
            c.error(r),
            bad.join(", ")
        ));
        return false;
    }
    true
}

/// The sampling period (exponent), scratch and hardware buffer sizes in effect on `ctx`
/// (with a note, the period asked for and zeros if CUPTI does not say).
fn config_in_effect(inj: &Inj, p: &Pcs, ctx: CuCtx) -> (u32, u64, u64) {
    let f = pc(inj);
    let c = &inj.cupti;
    use sys::CUpti_PCSamplingConfigurationAttributeType as T;
    // The period and buffer sizes in effect.
    let mut back = vec![
        attr(
            T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SAMPLING_PERIOD,
            |_| {},
        ),
        attr(
            T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_SCRATCH_BUFFER_SIZE,
            |_| {},
        ),
        attr(
            T::CUPTI_PC_SAMPLING_CONFIGURATION_ATTR_TYPE_HARDWARE_BUFFER_SIZE,
            |_| {},
        ),
    ];
    let mut gp = sys::CUpti_PCSamplingConfigurationInfoParams {
        size: std::mem::size_of::<sys::CUpti_PCSamplingConfigurationInfoParams>(),
        pPriv: std::ptr::null_mut(),
        ctx,
        numAttributes: back.len(),
        pPCSamplingConfigurationInfo: back.as_mut_ptr(),
    };
    // SAFETY: valid params.
    let r = unsafe { (f.get_config)(&mut gp) };
    if r == CUPTI_SUCCESS {
        // SAFETY: CUPTI filled the union member of each attribute type asked for.
        unsafe {
            (
                back[0].attributeData.samplingPeriodData.samplingPeriod,
                back[1]
                    .attributeData
                    .scratchBufferSizeData
                    .scratchBufferSize as u64,
                back[2]
                    .attributeData
                    .hardwareBufferSizeData
                    .hardwareBufferSize as u64,
            )
        }
    } else {
        inj.note(&format!(
            "cuptiPCSamplingGetConfigurationAttribute: {}; sampling period unknown",
            c.error(r)
        ));
        (p.period.unwrap_or(0), 0, 0)
    }
}

/// Turn the records in `c.data` (`totalNumPcs` of them) into a `PC_SAMPLES` frame (with the
/// `STRING` frames of new function names first) and reset the count.
fn take_batch(inj: &Inj, p: &Pcs, c: &mut PcCtx, out: &mut Vec<u8>) {
    let d = &mut *c.data;
    let n = d.totalNumPcs.min(d.collectNumPcs);
    let (total, dropped, non_user, full) = (
        d.totalSamples,
        d.droppedSamples,
        d.nonUsrKernelsTotalSamples,
        u32::from(d.hardwareBufferFull),
    );
    if n == 0 && total == 0 && dropped == 0 {
        return;
    }
    let mut names = Vec::new();
    let mut body = Vec::new();
    {
        let mut keys = lock(&p.pcs);
        for i in 0..n {
            // SAFETY: CUPTI filled the first totalNumPcs records of our array.
            let r = unsafe { &*d.pPcData.add(i) };
            let fname: &[u8] = if r.functionName.is_null() {
                b""
            } else {
                // SAFETY: NUL-terminated name CUPTI allocated.
                unsafe { CStr::from_ptr(r.functionName) }.to_bytes()
            };
            let fid = inj.intern(fname, &mut names);
            let (crc, pco, corr) = (r.cubinCrc, r.pcOffset, r.correlationId);
            keys.insert((crc, pco, fname.into()));
            let k = r.stallReasonCount;
            body.extend_from_slice(&crc.to_ne_bytes());
            body.extend_from_slice(&pco.to_ne_bytes());
            body.extend_from_slice(&fid.to_ne_bytes());
            body.extend_from_slice(&corr.to_ne_bytes());
            body.extend_from_slice(&(k as u32).to_ne_bytes());
            for j in 0..k {
                // SAFETY: stallReasonCount entries of the array we gave.
                let s = unsafe { &*r.stallReason.add(j) };
                body.extend_from_slice(&s.pcSamplingStallReasonIndex.to_ne_bytes());
                body.extend_from_slice(&s.samples.to_ne_bytes());
            }
        }
    }
    let head: Vec<u8> = [c.context_id, c.device_id]
        .iter()
        .flat_map(|v| v.to_ne_bytes())
        .chain(total.to_ne_bytes())
        .chain(dropped.to_ne_bytes())
        .chain(non_user.to_ne_bytes())
        .chain(full.to_ne_bytes())
        .chain((n as u32).to_ne_bytes())
        .collect();
    out.extend_from_slice(&names);
    push_frame(out, tag::PC_SAMPLES, &[&head, &body]);
    d.totalNumPcs = 0;
    d.totalSamples = 0;
    d.droppedSamples = 0;
    d.nonUsrKernelsTotalSamples = 0;
    d.hardwareBufferFull = 0;
}

/// Take everything CUPTI holds for one context: what it already put into the buffer, then
/// `cuptiPCSamplingGetData` until no PC remains.
fn drain_ctx(inj: &Inj, p: &Pcs, c: &mut PcCtx, out: &mut Vec<u8>) {
    if !c.enabled {
        return;
    }
    take_batch(inj, p, c, out);
    for _ in 0..10_000 {
        let mut gp = sys::CUpti_PCSamplingGetDataParams {
            size: std::mem::size_of::<sys::CUpti_PCSamplingGetDataParams>(),
            pPriv: std::ptr::null_mut(),
            ctx: c.ctx,
            pcSamplingData: (&mut *c.data) as *mut sys::CUpti_PCSamplingData as *mut c_void,
        };
        // SAFETY: valid params; the buffer is the one configured for this context.
        let r = unsafe { (pc(inj).get_data)(&mut gp) };
        let full = c.data.hardwareBufferFull != 0;
        take_batch(inj, p, c, out);
        if r != CUPTI_SUCCESS {
            let mut b = Vec::new();
            let msg = format!(
                "cuptiPCSamplingGetData (device {}): {}{}",
                c.device_id,
                inj.cupti.error(r),
                if full {
                    "; the hardware buffer was full: samples were lost (use a longer period, \
                     POWERPERF_CUPTI_PC_PERIOD)"
                } else {
                    ""
                }
            );
            eprintln!("powerperf-rt: CUPTI: {msg}");
            push_frame(&mut b, tag::NOTE, &[msg.as_bytes()]);
            out.extend_from_slice(&b);
            break;
        }
        if c.data.remainingNumPcs == 0 {
            break;
        }
    }
}

/// Take the PC samples of the context `ctx` (any context when null): synchronisation exits,
/// launches in serialised mode, module loads.
pub(super) fn drain(inj: &Inj, ctx: CuCtx) {
    let Some(p) = PCS.get() else { return };
    let mut out = Vec::new();
    {
        let mut cs = lock(&p.contexts);
        for c in cs.iter_mut() {
            if ctx.is_null() || c.ctx == ctx {
                drain_ctx(inj, p, c, &mut out);
            }
        }
    }
    inj.write(&out);
}

/// `CONTEXT_DESTROY_STARTING` and exit: drain, disable (CUPTI flushes the rest into the
/// buffer), take that too.
pub(super) fn finish_ctx(inj: &Inj, ctx: CuCtx) {
    let Some(p) = PCS.get() else { return };
    let mut out = Vec::new();
    {
        let mut cs = lock(&p.contexts);
        for c in cs.iter_mut() {
            if !(ctx.is_null() || c.ctx == ctx) || !c.enabled {
                continue;
            }
            drain_ctx(inj, p, c, &mut out);
            let mut dp = sys::CUpti_PCSamplingDisableParams {
                size: std::mem::size_of::<sys::CUpti_PCSamplingDisableParams>(),
                pPriv: std::ptr::null_mut(),
                ctx: c.ctx,
            };
            // SAFETY: valid params.
            let r = unsafe { (pc(inj).disable)(&mut dp) };
            if r != CUPTI_SUCCESS {
                let msg = format!("cuptiPCSamplingDisable: {}", inj.cupti.error(r));
                push_frame(&mut out, tag::NOTE, &[msg.as_bytes()]);
            }
            take_batch(inj, p, c, &mut out);
            c.enabled = false;
        }
    }
    inj.write(&out);
}

/// `MODULE_LOADED`: save the cubin as `RUN/cubins/<crc>.cubin` (once per CRC), then take the
/// context's samples (CUPTI docs 2.8.4: flush after a module load).
pub(super) fn module_loaded(inj: &Inj, ctx: CuCtx, module: *const c_void) {
    let Some(p) = PCS.get() else { return };
    if !module.is_null() {
        // SAFETY: for MODULE_LOADED the resource descriptor is a CUpti_ModuleResourceData.
        let m = unsafe { &*(module as *const sys::CUpti_ModuleResourceData) };
        if !m.pCubin.is_null() && m.cubinSize > 0 {
            let mut cp = sys::CUpti_GetCubinCrcParams {
                size: std::mem::size_of::<sys::CUpti_GetCubinCrcParams>(),
                cubinSize: m.cubinSize,
                cubin: m.pCubin as *const c_void,
                cubinCrc: 0,
            };
            // SAFETY: valid params; the cubin is valid during the callback.
            let r = unsafe { (pc(inj).cubin_crc)(&mut cp) };
            if r == CUPTI_SUCCESS {
                let crc = cp.cubinCrc;
                let known = lock(&p.cubins).contains_key(&crc);
                if !known {
                    let dir = p.run_dir.join("cubins");
                    let path = dir.join(format!("{crc:016x}.cubin"));
                    // SAFETY: cubinSize bytes at pCubin, valid during the callback.
                    let bytes =
                        unsafe { std::slice::from_raw_parts(m.pCubin as *const u8, m.cubinSize) };
                    let saved = std::fs::create_dir_all(&dir)
                        .and_then(|_| std::fs::write(&path, bytes))
                        .is_ok();
                    let rel = format!("cubins/{crc:016x}.cubin");
                    let mut fr = Vec::new();
                    push_frame(
                        &mut fr,
                        tag::CUBIN,
                        &[
                            &crc.to_ne_bytes(),
                            &(m.cubinSize as u64).to_ne_bytes(),
                            &m.moduleId.to_ne_bytes(),
                            &u32::from(saved).to_ne_bytes(),
                            rel.as_bytes(),
                        ],
                    );
                    inj.write(&fr);
                    if saved {
                        lock(&p.cubins).insert(crc, Cubin { path });
                    }
                }
            }
        }
    }
    drain(inj, ctx);
}

/// Exit: finish every context, then map every sampled PC of a saved cubin to its source
/// line (`PC_LINE` frames).
pub(super) fn finish(inj: &Inj) {
    let Some(p) = PCS.get() else { return };
    finish_ctx(inj, std::ptr::null_mut());
    let keys: Vec<SampledPc> = lock(&p.pcs).drain().collect();
    let cubins = lock(&p.cubins);
    let mut loaded: HashMap<u64, Option<Vec<u8>>> = HashMap::new();
    let mut out = Vec::new();
    let mut missing = 0usize;
    for (crc, pco, fname) in keys {
        let bin = loaded
            .entry(crc)
            .or_insert_with(|| cubins.get(&crc).and_then(|c| std::fs::read(&c.path).ok()));
        let Some(bin) = bin.as_ref() else {
            missing += 1;
            continue;
        };
        let Ok(cname) = CString::new(fname.to_vec()) else {
            continue;
        };
        let mut sp = sys::CUpti_GetSassToSourceCorrelationParams {
            size: std::mem::size_of::<sys::CUpti_GetSassToSourceCorrelationParams>(),
            cubin: bin.as_ptr() as *const c_void,
            functionName: cname.as_ptr(),
            cubinSize: bin.len(),
            lineNumber: 0,
            pcOffset: pco,
            fileName: std::ptr::null_mut(),
            dirName: std::ptr::null_mut(),
        };
        // SAFETY: valid params; CUPTI allocates fileName/dirName (freed below).
        let r = unsafe { (pc(inj).sass_to_source)(&mut sp) };
        let take = |s: *mut c_char| -> Vec<u8> {
            if s.is_null() {
                return Vec::new();
            }
            // SAFETY: NUL-terminated string CUPTI malloc'ed; freed once here.
            let v = unsafe { CStr::from_ptr(s) }.to_bytes().to_vec();
            // SAFETY: `s` is the same non-null CUPTI malloc'ed string, read above and freed
            // once, here.
            unsafe { libc::free(s as *mut c_void) };
            v
        };
        let (file, dir) = (take(sp.fileName), take(sp.dirName));
        if r != CUPTI_SUCCESS || sp.lineNumber == 0 || file.is_empty() {
            continue; // no line information (cubin built without -lineinfo)
        }
        let mut path = dir;
        if !path.is_empty() && !file.starts_with(b"/") {
            if path.last() != Some(&b'/') {
                path.push(b'/');
            }
            path.extend_from_slice(&file);
        } else {
            path = file;
        }
        let fid = inj.intern(&fname, &mut out);
        let pid = inj.intern(&path, &mut out);
        push_frame(
            &mut out,
            tag::PC_LINE,
            &[
                &crc.to_ne_bytes(),
                &pco.to_ne_bytes(),
                &fid.to_ne_bytes(),
                &sp.lineNumber.to_ne_bytes(),
                &pid.to_ne_bytes(),
            ],
        );
    }
    drop(cubins);
    if missing > 0 {
        let msg = format!(
            "PC sampling: {missing} sampled PCs are in cubins that were not saved (no \
             MODULE_LOADED callback for them): no source lines"
        );
        push_frame(&mut out, tag::NOTE, &[msg.as_bytes()]);
    }
    inj.write(&out);
}
