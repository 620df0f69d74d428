// Long kernels of fixed work, for comparing kernel times (powerperf collect --gpu against
// ncu --clock-control none) and for dilation checks of a GPU-bound program.
//
//   nvcc -O2 -arch=sm_90 -o long_kernels long_kernels.cu
//   ./long_kernels N CYCLES    # N launches each of spin_a and spin_b (spin_b spins twice as
//                              # long), 2 blocks of 256 threads per SM, one stream; prints the
//                              # loop's wall time
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define CK(call)                                                                        \
    do {                                                                                \
        cudaError_t e_ = (call);                                                        \
        if (e_ != cudaSuccess) {                                                        \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,               \
                    cudaGetErrorString(e_));                                            \
            exit(1);                                                                    \
        }                                                                               \
    } while (0)

__device__ void spin(long long cycles, int *sink) {
    long long t0 = clock64();
    int acc = 0;
    while (clock64() - t0 < cycles) acc++;
    if (acc == -1) sink[0] = acc;
}

__global__ void spin_a(long long cycles, int *sink) { spin(cycles, sink); }
__global__ void spin_b(long long cycles, int *sink) { spin(2 * cycles, sink); }

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

int main(int argc, char **argv) {
    int n = argc > 1 ? atoi(argv[1]) : 10;
    long long cycles = argc > 2 ? atoll(argv[2]) : 20000000LL;
    int dev = 0, sms = 0;
    CK(cudaGetDevice(&dev));
    CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    int *sink;
    CK(cudaMalloc(&sink, sizeof(int)));
    spin_a<<<2 * sms, 256>>>(1000, sink);
    CK(cudaDeviceSynchronize());
    double t0 = now_s();
    for (int i = 0; i < n; i++) {
        spin_a<<<2 * sms, 256>>>(cycles, sink);
        spin_b<<<2 * sms, 256>>>(cycles, sink);
    }
    CK(cudaDeviceSynchronize());
    double t1 = now_s();
    CK(cudaFree(sink));
    printf("long_kernels launches=%d cycles=%lld loop_ms=%.3f\n", 2 * n, cycles, (t1 - t0) * 1e3);
    return 0;
}
