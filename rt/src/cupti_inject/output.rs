//! The recording's output: the injection's state ([`Inj`], one per process), the frames it
//! writes to `gpu_activity/<pid>.bin` (string table, notes, API records, device properties,
//! clock pairs, trailer) and the exit handler.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, CStr};
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use super::library::{sym, Cupti};
use super::{pcsamp, CUPTI_ACTIVITY_FLAG_FLUSH_FORCED, CUPTI_SUCCESS};
use crate::cupti::{self as fmt, tag};

/// FNV-1a, for the string table and the per-thread symbol caches.
#[derive(Default)]
pub(super) struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        let mut h = if self.0 == 0 {
            0xcbf2_9ce4_8422_2325
        } else {
            self.0
        };
        for &b in bytes {
            h ^= u64::from(b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        self.0 = h;
    }
}

pub(super) type FastMap<K> = HashMap<K, u32, BuildHasherDefault<Fnv>>;

/// One thread's API records (`fmt::API_RECORD_BYTES` each), written by their owner; the
/// exit handler takes the lock too.
pub(super) struct ApiBuf {
    pub(super) bytes: Mutex<Vec<u8>>,
}

pub(super) struct Inj {
    pub(super) cupti: Cupti,
    pub(super) pid: u32,
    pub(super) path: PathBuf,
    pub(super) out: Mutex<Option<File>>,
    pub(super) strings: Mutex<FastMap<Box<[u8]>>>,
    pub(super) threads: Mutex<Vec<Arc<ApiBuf>>>,
    /// Set under `out` once the trailer is written: nothing is written after it.
    pub(super) finished: AtomicBool,
    pub(super) device_seen: AtomicBool,
    pub(super) dropped: AtomicU64,
    pub(super) activities: AtomicU64,
    pub(super) api_records: AtomicU64,
    pub(super) api_lost: AtomicU64,
    pub(super) unknown_layouts: Mutex<Vec<(u32, usize)>>,
}

pub(super) static INJ: OnceLock<Inj> = OnceLock::new();

pub(super) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn gettid() -> u32 {
    // SAFETY: gettid has no preconditions.
    unsafe { libc::syscall(libc::SYS_gettid) as u32 }
}

pub(super) fn push_frame(buf: &mut Vec<u8>, t: u32, parts: &[&[u8]]) {
    let len: usize = parts.iter().map(|p| p.len()).sum();
    buf.extend_from_slice(&t.to_ne_bytes());
    buf.extend_from_slice(&(len as u32).to_ne_bytes());
    for p in parts {
        buf.extend_from_slice(p);
    }
}

pub(super) fn clock_frame(buf: &mut Vec<u8>, c: (u64, u64, u64)) {
    push_frame(
        buf,
        tag::CLOCK,
        &[&c.0.to_ne_bytes(), &c.1.to_ne_bytes(), &c.2.to_ne_bytes()],
    );
}

impl Inj {
    /// Append `bytes` (whole frames) to the file, unless the trailer is written, the
    /// process is a forked child, or an earlier write failed.
    pub(super) fn write(&self, bytes: &[u8]) {
        if bytes.is_empty() || std::process::id() != self.pid {
            return;
        }
        let mut out = lock(&self.out);
        if self.finished.load(Ordering::Relaxed) {
            return;
        }
        if let Some(f) = out.as_mut() {
            if let Err(e) = f.write_all(bytes) {
                eprintln!(
                    "powerperf-rt: writing {} failed: {e}; later GPU activity is dropped",
                    self.path.display()
                );
                *out = None;
            }
        }
    }

    pub(super) fn note(&self, msg: &str) {
        eprintln!("powerperf-rt: CUPTI: {msg}");
        let mut b = Vec::new();
        push_frame(&mut b, tag::NOTE, &[msg.as_bytes()]);
        self.write(&b);
    }

    /// The string id of `s`; a new string's `STRING` frame goes to `frames` (the caller
    /// writes it before or with the frames that use the id).
    pub(super) fn intern(&self, s: &[u8], frames: &mut Vec<u8>) -> u32 {
        let mut t = lock(&self.strings);
        if let Some(&id) = t.get(s) {
            return id;
        }
        let id = t.len() as u32 + 1;
        t.insert(s.into(), id);
        push_frame(frames, tag::STRING, &[&id.to_ne_bytes(), s]);
        id
    }

    /// Intern a C string and write its frame now if it is new (API callback path, rare).
    pub(super) fn intern_now(&self, p: *const c_char) -> u32 {
        // SAFETY: CUPTI passes a NUL-terminated string valid during the callback.
        let s = unsafe { CStr::from_ptr(p) }.to_bytes();
        let mut frames = Vec::new();
        let id = self.intern(s, &mut frames);
        self.write(&frames);
        id
    }

    pub(super) fn write_api(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        let mut b = Vec::with_capacity(8 + bytes.len());
        push_frame(&mut b, tag::API, &[bytes]);
        self.write(&b);
        self.api_records.fetch_add(
            (bytes.len() / fmt::API_RECORD_BYTES) as u64,
            Ordering::Relaxed,
        );
    }

    /// Exit: flush CUPTI, the API buffers, device properties, last clock pair, trailer.
    pub(super) fn finish(&self) {
        if self.finished.load(Ordering::Relaxed) {
            return;
        }
        pcsamp::finish(self);
        // SAFETY: CUPTI is initialised; the completion callback runs in this thread or
        // CUPTI's and writes through `self.write`.
        let r = unsafe { (self.cupti.activity_flush_all)(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED) };
        if r != CUPTI_SUCCESS {
            self.note(&format!("cuptiActivityFlushAll: {}", self.cupti.error(r)));
        }
        let threads: Vec<Arc<ApiBuf>> = std::mem::take(&mut *lock(&self.threads));
        for t in threads {
            let mut b = lock(&t.bytes);
            self.write_api(&b);
            b.clear();
        }
        if !self.device_seen.load(Ordering::Relaxed) {
            let mut b = Vec::new();
            driver_devices(&mut b);
            self.write(&b);
        }
        let mut b = Vec::new();
        if let Some(c) = self.cupti.clock_pair() {
            clock_frame(&mut b, c);
        }
        let n = |a: &AtomicU64| a.load(Ordering::Relaxed).to_ne_bytes();
        push_frame(
            &mut b,
            tag::TRAILER,
            &[
                &n(&self.dropped),
                &n(&self.activities),
                &n(&self.api_records),
                &n(&self.api_lost),
            ],
        );
        self.write(&b);
        let _g = lock(&self.out);
        self.finished.store(true, Ordering::SeqCst);
    }
}

/// Device properties from the driver (`cuDeviceGetAttribute`), as `DEVPROPS` frames.
fn driver_devices(out: &mut Vec<u8>) {
    use cudarc::driver::sys::CUdevice_attribute_enum as A;
    let lib = {
        let c = c"libcuda.so.1";
        // SAFETY: NUL-terminated; RTLD_NOLOAD only returns the already loaded driver.
        unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_NOLOAD) }
    };
    if lib.is_null() {
        return;
    }
    type Count = unsafe extern "C" fn(*mut c_int) -> c_int;
    type Attr = unsafe extern "C" fn(*mut c_int, c_int, c_int) -> c_int;
    type Name = unsafe extern "C" fn(*mut c_char, c_int, c_int) -> c_int;
    type Mem = unsafe extern "C" fn(*mut usize, c_int) -> c_int;
    // SAFETY: prototypes of cuda.h (CUdevice is int, CUresult int, enums int).
    let fns = unsafe {
        (
            sym::<Count>(lib, "cuDeviceGetCount"),
            sym::<Attr>(lib, "cuDeviceGetAttribute"),
            sym::<Name>(lib, "cuDeviceGetName"),
            sym::<Mem>(lib, "cuDeviceTotalMem_v2"),
        )
    };
    let (Ok(count), Ok(attr), Ok(name), Ok(mem)) = fns else {
        return;
    };
    let mut n: c_int = 0;
    // SAFETY: `n` is writable.
    if unsafe { count(&mut n) } != 0 {
        return;
    }
    for dev in 0..n {
        let get = |a: A| {
            let mut v: c_int = 0;
            // SAFETY: `v` is writable; `dev` < count.
            unsafe { attr(&mut v, a as c_int, dev) };
            v.max(0) as u32
        };
        let warp = get(A::CU_DEVICE_ATTRIBUTE_WARP_SIZE);
        let vals = [
            get(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR),
            get(A::CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR),
            get(A::CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT),
            get(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK),
            get(A::CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR),
            get(A::CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR),
            get(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR),
            get(A::CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK),
            get(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR),
            get(A::CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK),
            get(A::CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE),
            warp,
            get(A::CU_DEVICE_ATTRIBUTE_CLOCK_RATE),
            0,
        ];
        let mut nm = [0 as c_char; 256];
        // SAFETY: the buffer holds 256 bytes.
        unsafe { name(nm.as_mut_ptr(), 256, dev) };
        nm[255] = 0;
        // SAFETY: NUL-terminated (last byte forced).
        let nm = unsafe { CStr::from_ptr(nm.as_ptr()) }.to_bytes().to_vec();
        let mut bytes = 0usize;
        // SAFETY: `bytes` is writable.
        unsafe { mem(&mut bytes, dev) };
        let mut p = Vec::new();
        p.extend_from_slice(&(dev as u32).to_ne_bytes());
        for v in vals {
            p.extend_from_slice(&v.to_ne_bytes());
        }
        p.extend_from_slice(&(bytes as u64).to_ne_bytes());
        p.extend_from_slice(&nm);
        push_frame(out, tag::DEVPROPS, &[&p]);
    }
}

pub(super) extern "C" fn at_exit() {
    // Never unwind into libc.
    let _ = std::panic::catch_unwind(|| {
        if let Some(inj) = INJ.get() {
            inj.finish();
        }
    });
}
