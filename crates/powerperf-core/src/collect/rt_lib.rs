//! Where the runtime libraries handed to the command are: `libpowerperf_rt.so` (regions,
//! NVTX) and `libpowerperf_rt_cuda.so` (CUDA injection, `collect --gpu`).

use std::path::PathBuf;

/// The region library handed to programs as `POWERPERF_RT_LIB`: that variable when set,
/// else `libpowerperf_rt.so` next to the powerperf binary (docs/architecture.md, powerperf-rt).
pub fn rt_library() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("POWERPERF_RT_LIB") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    // `cargo test` runs the binary from target/<profile>/; the library sits there too,
    // and in deps/ for test builds.
    [
        dir.join("libpowerperf_rt.so"),
        dir.join("deps/libpowerperf_rt.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}

/// The CUDA injection library (`collect --gpu`): `POWERPERF_RT_CUDA_LIB` when set, else
/// `libpowerperf_rt_cuda.so` next to the powerperf binary (built by `cargo build` from
/// `rt/cuda`).
pub fn rt_cuda_library() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("POWERPERF_RT_CUDA_LIB") {
        return Some(PathBuf::from(p));
    }
    let exe = std::env::current_exe().ok()?;
    let dir = exe.parent()?;
    [
        dir.join("libpowerperf_rt_cuda.so"),
        dir.join("deps/libpowerperf_rt_cuda.so"),
        dir.join("../libpowerperf_rt_cuda.so"),
    ]
    .into_iter()
    .find(|p| p.is_file())
}
