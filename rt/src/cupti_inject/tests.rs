use super::*;

#[test]
fn kinds_env() {
    let (k, u) = kinds_from(None);
    assert_eq!(
        k,
        [
            kind::DEVICE,
            kind::CONCURRENT_KERNEL,
            kind::MEMCPY,
            kind::MEMCPY2,
            kind::MEMSET,
            kind::SYNCHRONIZATION,
            kind::MEMORY2
        ]
    );
    assert!(u.is_empty());
    assert_eq!(kinds_from(Some("none")), (vec![], vec![]));
    let (k, u) = kinds_from(Some("kernel_serial, memcpy,bogus"));
    assert_eq!(k, [kind::KERNEL, kind::MEMCPY, kind::MEMCPY2]);
    assert_eq!(u, ["bogus"]);
}

#[test]
fn default_api_selection() {
    for n in [
        "cudaLaunchKernel",
        "cuLaunchKernel",
        "cudaMemcpyAsync",
        "cuMemcpyHtoD_v2",
        "cudaMemset",
        "cudaDeviceSynchronize",
        "cuCtxSynchronize_v2",
        "cudaStreamSynchronize",
        "cuEventSynchronize",
        "cudaMalloc",
        "cudaFreeHost",
        "cuMemAlloc_v2",
    ] {
        assert!(default_selection(n), "{n}");
    }
    for n in [
        "cudaGetDevice",
        "cuCtxGetCurrent",
        "cudaEventRecord",
        "cudaStreamQuery",
    ] {
        assert!(!default_selection(n), "{n}");
    }
}
