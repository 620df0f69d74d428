// Test program for the CUDA injection (rt/src/cupti_inject.rs); it recorded the fixture
// rt/tests/fixtures/cupti/fixture.bin.
//
//   nvcc -O2 -o cupti_fixture cupti_fixture.cu
//   POWERPERF_RUN_DIR=run CUDA_INJECTION64_PATH=/abs/libpowerperf_rt_cuda.so ./cupti_fixture
//   ./cupti_fixture many 20000 [C] # 20000 launches of a kernel of one warp that spins C
//                                  # clock cycles (default 0: empty), then one sync
//   ./cupti_fixture serial W R     # one stream: W warm-up then R measured scale+axpy pairs
//
// Default mode, on 16 MiB buffers (n = 4 Mi floats):
//   cudaMallocHost (pinned h), cudaMalloc x3 (x, y, z), 2 streams
//   H2D async pinned (x, stream 0) + H2D sync pinned (y) + H2D sync pinned (z)
//   cudaMemset(y) (sync)
//   3 x scale(x) on stream 0, 3 x axpy(z += 2 y) on stream 1
//   cudaStreamSynchronize(s0), cudaEventRecord + cudaEventSynchronize on s1,
//   cudaDeviceSynchronize
//   D2H sync pinned (x) + D2H sync pageable 4096 B (z)
//   cudaMalloc + cudaFree of 1 MiB, then every buffer freed
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define CK(call)                                                                       \
    do {                                                                               \
        cudaError_t e_ = (call);                                                       \
        if (e_ != cudaSuccess) {                                                       \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,              \
                    cudaGetErrorString(e_));                                           \
            exit(1);                                                                   \
        }                                                                              \
    } while (0)

__global__ void scale(float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= a;
}

__global__ void axpy(float *y, const float *x, float a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += a * x[i];
}

__global__ void tiny(int *p, long long cycles) {
    if (cycles > 0) {
        long long t0 = clock64();
        while (clock64() - t0 < cycles) {
        }
    }
    if (p != nullptr && threadIdx.x == 0 && blockIdx.x == 0) p[0] += 1;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

static int many(int launches, long long cycles) {
    int *d;
    CK(cudaMalloc(&d, sizeof(int)));
    CK(cudaMemset(d, 0, sizeof(int)));
    for (int i = 0; i < 100; i++) tiny<<<1, 32>>>(d, cycles);
    CK(cudaDeviceSynchronize());
    double t0 = now_s();
    for (int i = 0; i < launches; i++) tiny<<<1, 32>>>(d, cycles);
    CK(cudaDeviceSynchronize());
    double t1 = now_s();
    int h = 0;
    CK(cudaMemcpy(&h, d, sizeof(int), cudaMemcpyDeviceToHost));
    CK(cudaFree(d));
    printf("many launches=%d loop_ms=%.3f us_per_launch=%.3f count=%d\n", launches,
           (t1 - t0) * 1e3, (t1 - t0) * 1e6 / launches, h);
    return h == launches + 100 ? 0 : 1;
}

// Kernels back to back on one stream (no overlap), for comparing kernel times with ncu.
static int serial(int warm, int reps) {
    const int n = 1 << 22;
    float *x, *y;
    CK(cudaMalloc(&x, n * sizeof(float)));
    CK(cudaMalloc(&y, n * sizeof(float)));
    CK(cudaMemset(x, 0, n * sizeof(float)));
    CK(cudaMemset(y, 0, n * sizeof(float)));
    const int block = 256, grid = (n + block - 1) / block;
    for (int r = 0; r < warm + reps; r++) {
        scale<<<grid, block>>>(x, 1.0f, n);
        axpy<<<grid, block>>>(y, x, 1.0f, n);
    }
    CK(cudaDeviceSynchronize());
    CK(cudaFree(x));
    CK(cudaFree(y));
    printf("serial warm=%d reps=%d\n", warm, reps);
    return 0;
}

int main(int argc, char **argv) {
    if (argc > 2 && strcmp(argv[1], "many") == 0)
        return many(atoi(argv[2]), argc > 3 ? atoll(argv[3]) : 0);
    if (argc > 3 && strcmp(argv[1], "serial") == 0) return serial(atoi(argv[2]), atoi(argv[3]));

    const int n = 1 << 22;
    const size_t bytes = n * sizeof(float);
    float *h, *x, *y, *z;
    CK(cudaMallocHost(&h, bytes));
    for (int i = 0; i < n; i++) h[i] = 1.0f;
    CK(cudaMalloc(&x, bytes));
    CK(cudaMalloc(&y, bytes));
    CK(cudaMalloc(&z, bytes));
    cudaStream_t s[2];
    CK(cudaStreamCreateWithFlags(&s[0], cudaStreamNonBlocking));
    CK(cudaStreamCreateWithFlags(&s[1], cudaStreamNonBlocking));

    CK(cudaMemcpyAsync(x, h, bytes, cudaMemcpyHostToDevice, s[0]));
    CK(cudaMemcpy(y, h, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemcpy(z, h, bytes, cudaMemcpyHostToDevice));
    CK(cudaMemset(y, 0, bytes));

    const int block = 256, grid = (n + block - 1) / block;
    for (int r = 0; r < 3; r++) {
        scale<<<grid, block, 0, s[0]>>>(x, 2.0f, n);
        axpy<<<grid, block, 0, s[1]>>>(z, y, 2.0f, n);
    }
    CK(cudaGetLastError());
    CK(cudaStreamSynchronize(s[0]));
    cudaEvent_t ev;
    CK(cudaEventCreate(&ev));
    CK(cudaEventRecord(ev, s[1]));
    CK(cudaEventSynchronize(ev));
    CK(cudaDeviceSynchronize());

    CK(cudaMemcpy(h, x, bytes, cudaMemcpyDeviceToHost));
    float *pageable = (float *)malloc(4096);
    CK(cudaMemcpy(pageable, z, 4096, cudaMemcpyDeviceToHost));
    int ok = h[0] == 8.0f && h[n - 1] == 8.0f && pageable[0] == 1.0f;

    void *tmp;
    CK(cudaMalloc(&tmp, 1 << 20));
    CK(cudaFree(tmp));

    CK(cudaEventDestroy(ev));
    CK(cudaStreamDestroy(s[0]));
    CK(cudaStreamDestroy(s[1]));
    CK(cudaFree(x));
    CK(cudaFree(y));
    CK(cudaFree(z));
    CK(cudaFreeHost(h));
    free(pageable);
    printf("fixture %s\n", ok ? "ok" : "WRONG RESULTS");
    return ok ? 0 : 1;
}
