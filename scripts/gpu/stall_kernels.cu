// Kernels with a known dominant warp stall, for checking GPU PC sampling
// (`powerperf collect --pc-sampling gpu`, docs/gpu.md). Build with line information:
//   nvcc -O2 -lineinfo -arch=sm_90 -o stall_kernels scripts/gpu/stall_kernels.cu
//   ./stall_kernels [reps] [scale]
// chase:     a dependent chain of global loads through a random cycle in 256 MiB
//            (each load waits for the previous one: long_scoreboard -> GINST:STL_GMEM)
// barrier:   one warp of each 1024-thread block works, 31 wait at __syncthreads()
//            (barrier -> GINST:STL_SYNC)
// fma_chain: one warp per SM sub-partition runs a dependent FMA chain
//            (wait / short dependencies -> GINST:STL_IDEP)
// Prints, per kernel, the GPU time of its launches (cudaEvent) and the whole loop's wall
// time, so runs with and without PC sampling can be compared (dilation).
#include <cstdio>
#include <cstdlib>
#include <chrono>
#include <vector>
#include <cuda_runtime.h>

#define CK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { \
  fprintf(stderr, "%s:%d %s\n", __FILE__, __LINE__, cudaGetErrorString(e)); exit(1); } } while (0)

__global__ void chase(const unsigned *next, unsigned n, unsigned steps, unsigned *out) {
  unsigned i = (unsigned)(((unsigned long long)(blockIdx.x * blockDim.x + threadIdx.x) * 977u) % n);
  for (unsigned s = 0; s < steps; ++s) {
    i = next[i];                       // dependent global load
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = i;
}

__global__ void barrier(float *out, unsigned iters, unsigned work) {
  __shared__ float acc[1024];
  float x = threadIdx.x;
  for (unsigned it = 0; it < iters; ++it) {
    if (threadIdx.x < 32) {            // one warp works ...
      for (unsigned k = 0; k < work; ++k) x = x * 0.999f + 1.0f;
    }
    acc[threadIdx.x] = x;
    __syncthreads();                   // ... the other 31 wait here
    x += acc[(threadIdx.x + 1) & 1023] * 1e-6f;
    __syncthreads();
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = x;
}

__global__ void fma_chain(float *out, unsigned iters) {
  float a = threadIdx.x * 1e-3f, b = 1.0001f, c = 1e-4f;
  for (unsigned it = 0; it < iters; ++it) {
    a = fmaf(a, b, c);                 // each FMA waits for the previous one
    a = fmaf(a, b, c);
    a = fmaf(a, b, c);
    a = fmaf(a, b, c);
  }
  out[blockIdx.x * blockDim.x + threadIdx.x] = a;
}

int main(int argc, char **argv) {
  int reps = argc > 1 ? atoi(argv[1]) : 3;
  double scale = argc > 2 ? atof(argv[2]) : 1.0;
  int dev = 0, sms = 0;
  CK(cudaGetDevice(&dev));
  CK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  const size_t n = 64u << 20;          // 64 Mi entries = 256 MiB
  std::vector<unsigned> h(n);
  for (size_t i = 0; i < n; ++i) h[i] = (unsigned)i;
  srand(42);                           // Sattolo: one random cycle through all entries
  for (size_t i = n - 1; i > 0; --i) {
    size_t j = ((size_t)rand() * RAND_MAX + rand()) % i;
    unsigned t = h[i]; h[i] = h[j]; h[j] = t;
  }
  unsigned *next, *uo; float *fo;
  CK(cudaMalloc(&next, n * sizeof(unsigned)));
  CK(cudaMalloc(&uo, (size_t)sms * 4 * 1024 * sizeof(unsigned)));
  CK(cudaMalloc(&fo, (size_t)sms * 4 * 1024 * sizeof(float)));
  CK(cudaMemcpy(next, h.data(), n * sizeof(unsigned), cudaMemcpyHostToDevice));
  cudaEvent_t e0, e1;
  CK(cudaEventCreate(&e0)); CK(cudaEventCreate(&e1));
  const unsigned chase_steps = (unsigned)(20000 * scale);
  const unsigned bar_iters = (unsigned)(4000 * scale);
  const unsigned fma_iters = (unsigned)(2000000 * scale);
  float ms[3] = {0, 0, 0};
  auto t0 = std::chrono::steady_clock::now();
  for (int r = 0; r < reps; ++r) {
    float t;
    CK(cudaEventRecord(e0));
    chase<<<sms * 4, 256>>>(next, (unsigned)n, chase_steps, uo);
    CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&t, e0, e1)); ms[0] += t;
    CK(cudaEventRecord(e0));
    barrier<<<sms * 2, 1024>>>(fo, bar_iters, 200);
    CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&t, e0, e1)); ms[1] += t;
    CK(cudaEventRecord(e0));
    fma_chain<<<sms * 4, 32>>>(fo, fma_iters);
    CK(cudaEventRecord(e1)); CK(cudaEventSynchronize(e1));
    CK(cudaEventElapsedTime(&t, e0, e1)); ms[2] += t;
    if (getenv("STALL_KERNELS_VERBOSE")) printf("rep %d chase_ms=%.3f\n", r, ms[0]);
  }
  CK(cudaDeviceSynchronize());
  double wall = std::chrono::duration<double, std::milli>(
      std::chrono::steady_clock::now() - t0).count();
  printf("sms=%d reps=%d chase_ms=%.3f barrier_ms=%.3f fma_chain_ms=%.3f loop_ms=%.3f\n",
         sms, reps, ms[0], ms[1], ms[2], wall);
  CK(cudaFree(next)); CK(cudaFree(uo)); CK(cudaFree(fo));
  return 0;
}
