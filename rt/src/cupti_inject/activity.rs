//! Activity API buffers: CUPTI asks for them ([`buffer_requested`]) and hands them back
//! full ([`buffer_completed`]); each completed buffer's records are written as they are,
//! their name pointers replaced by string ids.

use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::Ordering;

use super::output::{clock_frame, lock, push_frame, Inj, INJ};
use super::{ACTIVITY_BUFFER_BYTES, CUPTI_SUCCESS};
use crate::cupti::{self as fmt, kind, layout, tag};

/// CUPTI asks for an activity buffer.
pub(super) unsafe extern "C" fn buffer_requested(
    buf: *mut *mut u8,
    size: *mut usize,
    max: *mut usize,
) {
    let mut p: *mut c_void = std::ptr::null_mut();
    // SAFETY: `p` is writable; 8-byte alignment as CUPTI requires (ACTIVITY_RECORD_ALIGNMENT).
    let ok = unsafe { libc::posix_memalign(&mut p, 8, ACTIVITY_BUFFER_BYTES) } == 0;
    // SAFETY: CUPTI passes writable out-parameters.
    unsafe {
        *buf = if ok {
            p as *mut u8
        } else {
            std::ptr::null_mut()
        };
        *size = if ok { ACTIVITY_BUFFER_BYTES } else { 0 };
        *max = 0;
    }
}

/// CUPTI returns a buffer holding `valid` bytes of records.
pub(super) unsafe extern "C" fn buffer_completed(
    ctx: *mut c_void,
    stream: u32,
    buf: *mut u8,
    _size: usize,
    valid: usize,
) {
    let _ = std::panic::catch_unwind(|| {
        if let Some(inj) = INJ.get() {
            // SAFETY: CUPTI hands back a buffer from `buffer_requested` with `valid` bytes.
            unsafe { completed(inj, ctx, stream, buf, valid) };
        }
    });
    // SAFETY: allocated by posix_memalign in `buffer_requested` (or NULL).
    unsafe { libc::free(buf as *mut c_void) };
}

/// # Safety
/// `buf` holds `valid` bytes of CUPTI activity records.
unsafe fn completed(inj: &Inj, ctx: *mut c_void, stream: u32, buf: *mut u8, valid: usize) {
    if buf.is_null() {
        return;
    }
    // Record boundaries: CUPTI packs records back to back; each one's size is the distance
    // to the next (the last one ends at `valid`).
    let mut starts: Vec<usize> = Vec::new();
    let mut rec: *mut u8 = std::ptr::null_mut();
    // SAFETY: CUPTI walks its own buffer; `rec` is the previous record or NULL.
    while unsafe { (inj.cupti.activity_get_next_record)(buf, valid, &mut rec) } == CUPTI_SUCCESS {
        starts.push(rec as usize - buf as usize);
    }
    let mut frames: Vec<u8> = Vec::with_capacity(valid + starts.len() * 8 + 4096);
    let mut names: Vec<u8> = Vec::new();
    for (i, &s) in starts.iter().enumerate() {
        let e = starts.get(i + 1).copied().unwrap_or(valid);
        if e <= s || e > valid {
            continue;
        }
        // SAFETY: s..e lies inside the valid part of the buffer.
        let r = unsafe { std::slice::from_raw_parts_mut(buf.add(s), e - s) };
        if r.len() < 8 {
            continue;
        }
        let k = fmt::u32_at(r, 0);
        match layout::pointers(k, r.len()) {
            Some(ptrs) => {
                for &(off, is_name) in ptrs {
                    let p = fmt::u64_at(r, off) as usize;
                    let id = if is_name && p != 0 {
                        // SAFETY: CUPTI's name strings live at least as long as the buffer.
                        let c = unsafe { CStr::from_ptr(p as *const c_char) }.to_bytes();
                        u64::from(inj.intern(c, &mut names))
                    } else {
                        0
                    };
                    r[off..off + 8].copy_from_slice(&id.to_ne_bytes());
                }
            }
            None => {
                let mut u = lock(&inj.unknown_layouts);
                if !u.contains(&(k, r.len())) {
                    u.push((k, r.len()));
                    drop(u);
                    inj.note(&format!(
                        "activity kind {} ({k}) record of {} bytes is not a layout the bindings \
                         know; written as is, the reader will refuse it",
                        fmt::activity_kind_name(k),
                        r.len()
                    ));
                }
            }
        }
        if k == kind::DEVICE {
            inj.device_seen.store(true, Ordering::Relaxed);
        }
        push_frame(&mut frames, tag::ACTIVITY, &[r]);
    }
    inj.activities
        .fetch_add(starts.len() as u64, Ordering::Relaxed);
    let mut dropped = 0usize;
    // SAFETY: `dropped` is writable; ctx/stream are those CUPTI passed.
    if unsafe { (inj.cupti.activity_get_num_dropped_records)(ctx, stream, &mut dropped) }
        == CUPTI_SUCCESS
        && dropped > 0
    {
        inj.dropped.fetch_add(dropped as u64, Ordering::Relaxed);
        let ctx_id = 0u32;
        push_frame(
            &mut frames,
            tag::DROPPED,
            &[
                &ctx_id.to_ne_bytes(),
                &stream.to_ne_bytes(),
                &(dropped as u64).to_ne_bytes(),
            ],
        );
    }
    if let Some(c) = inj.cupti.clock_pair() {
        clock_frame(&mut frames, c);
    }
    names.extend_from_slice(&frames);
    inj.write(&names);
}
