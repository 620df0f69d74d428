//! Return codes of the C ABI (negative errno values; see `include/powerperf.h`).

/// Success.
pub const PP_OK: i32 = 0;
/// End of a region that is not open on the calling thread (`-ENOENT`). The end is recorded.
pub const PP_ENOTOPEN: i32 = -libc::ENOENT;
/// End of a region that is open but not the innermost one (`-EILSEQ`). The end is
/// recorded; regions opened inside it are abandoned (no interval is reported for them).
pub const PP_ENEST: i32 = -libc::EILSEQ;
/// NULL name or a handle that `pp_region_handle` did not return (`-EINVAL`).
pub const PP_EINVAL: i32 = -libc::EINVAL;
/// The region name table is full (`-ENOSPC`; 2^32 - 2 names).
pub const PP_ENOSPC: i32 = -libc::ENOSPC;
