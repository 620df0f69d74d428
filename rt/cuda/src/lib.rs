//! `libpowerperf_rt_cuda.so`: powerperf-rt built with its `cuda` feature, as one shared
//! library that a process loads once for everything:
//!
//! * the region markers of `include/powerperf.h` (`pp_region_begin`, ...; Python:
//!   `POWERPERF_RT_LIB`),
//! * NVTX injection (`InitializeInjectionNvtx2`; `NVTX_INJECTION64_PATH`),
//! * CUDA injection with CUPTI (`InitializeInjection`; `CUDA_INJECTION64_PATH`), which
//!   writes `$POWERPERF_RUN_DIR/gpu_activity/<pid>.bin` (`powerperf_rt::cupti`).
//!
//! The exported symbols are the `#[no_mangle]` functions of `powerperf_rt` (a cdylib
//! exports those of its dependencies); `powerperf collect --gpu` points the three
//! variables at this one file so that the process has one copy of the runtime.

pub use powerperf_rt;
