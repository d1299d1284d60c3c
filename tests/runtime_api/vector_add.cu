// SPDX-License-Identifier: Apache-2.0
// A Runtime-API program (built with nvcc -cudart none, linked with
// libdrvshim_cudart.so): vector addition with device memory and cudaMemcpy.
#include <cstdio>
#include <vector>

#include "check.cuh"

extern "C" __global__ void vadd(const float* a, const float* b, float* c, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int main() {
  int count = 0;
  CHECK(cudaGetDeviceCount(&count));
  CHECK(cudaSetDevice(0));
  cudaDeviceProp prop;
  CHECK(cudaGetDeviceProperties(&prop, 0));
  std::printf("%d device(s); device 0: %s, compute capability %d.%d\n", count, prop.name, prop.major, prop.minor);
  const unsigned n = 1u << 20;
  std::vector<float> a(n), b(n), c(n);
  for (unsigned i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 1000);
    b[i] = 0.25f * static_cast<float>(i % 8);
  }
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  CHECK(cudaMalloc(&da, n * sizeof(float)));
  CHECK(cudaMalloc(&db, n * sizeof(float)));
  CHECK(cudaMalloc(&dc, n * sizeof(float)));
  CHECK(cudaMemcpy(da, a.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemcpy(db, b.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  CHECK(cudaMemset(dc, 0, n * sizeof(float)));
  vadd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  CHECK(cudaGetLastError());
  CHECK(cudaDeviceSynchronize());
  CHECK(cudaMemcpy(c.data(), dc, n * sizeof(float), cudaMemcpyDeviceToHost));
  for (unsigned i = 0; i < n; ++i) {
    if (c[i] != a[i] + b[i]) {
      std::fprintf(stderr, "WRONG RESULT at %u: %f\n", i, c[i]);
      return 1;
    }
  }
  CHECK(cudaFree(da));
  CHECK(cudaFree(db));
  CHECK(cudaFree(dc));
  CHECK(cudaDeviceReset());
  std::printf("vector_add: %u elements correct\n", n);
  return 0;
}
