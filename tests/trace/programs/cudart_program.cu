// SPDX-License-Identifier: Apache-2.0
// A small CUDA Runtime program for drvshim-trace on the GPU machine, built
// twice by nvcc: with the default static cudart and with -cudart shared. What
// the Runtime does implicitly is the point: cudaGetDeviceCount initialises the
// driver without a context; the first cudaMalloc retains the primary context;
// a kernel launch and a symbol copy load the module lazily; a second thread's
// first call makes the primary context current there without a second retain.
#include <cuda_runtime.h>

#include <cstdio>
#include <thread>

#define CHECK(x)                                                           \
  do {                                                                     \
    const cudaError_t e_ = (x);                                            \
    if (e_ != cudaSuccess) {                                               \
      std::fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(e_)); \
      return 1;                                                            \
    }                                                                      \
  } while (0)

__device__ int counter;

__global__ void scale(float* x, float f, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) x[i] *= f;
}

int main() {
  int devices = 0;
  CHECK(cudaGetDeviceCount(&devices));
  float* d = nullptr;
  CHECK(cudaMalloc(&d, 1 << 20));
  CHECK(cudaMemset(d, 0, 1 << 20));
  scale<<<1, 256>>>(d, 2.0f, 256);
  CHECK(cudaGetLastError());
  const int one = 1;
  CHECK(cudaMemcpyToSymbol(counter, &one, sizeof one));
  cudaError_t worker = cudaSuccess;
  std::thread t([&] {
    float* e = nullptr;
    worker = cudaMalloc(&e, 64);
    if (worker == cudaSuccess) worker = cudaFree(e);
  });
  t.join();
  CHECK(worker);
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaFree(d));
  std::printf("cudart program: %d device(s), ok\n", devices);
  return 0;
}
