// SPDX-License-Identifier: Apache-2.0
// A Runtime-API program: zero-copy with cudaHostAlloc(cudaHostAllocMapped)
// and cudaHostGetDevicePointer, then the same with cudaHostRegister.
#include <cstdio>
#include <vector>

#include "check.cuh"

extern "C" __global__ void vadd(const float* a, const float* b, float* c, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

int check(const float* a, const float* b, const float* c, unsigned n, const char* what) {
  for (unsigned i = 0; i < n; ++i) {
    if (c[i] != a[i] + b[i]) {
      std::fprintf(stderr, "WRONG RESULT (%s) at %u\n", what, i);
      return 1;
    }
  }
  std::printf("%s: %u elements correct\n", what, n);
  return 0;
}

int main() {
  const unsigned n = 1u << 18;
  const size_t bytes = n * sizeof(float);
  CHECK(cudaSetDevice(0));
  float *a = nullptr, *b = nullptr, *c = nullptr;
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&a), bytes, cudaHostAllocMapped));
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&b), bytes, cudaHostAllocMapped));
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&c), bytes, cudaHostAllocMapped));
  for (unsigned i = 0; i < n; ++i) {
    a[i] = static_cast<float>(i % 100);
    b[i] = 1.0f;
    c[i] = 0.0f;
  }
  float *da = nullptr, *db = nullptr, *dc = nullptr;
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&da), a, 0));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&db), b, 0));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dc), c, 0));
  vadd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  CHECK(cudaDeviceSynchronize());
  if (check(a, b, c, n, "cudaHostAllocMapped") != 0) return 1;
  CHECK(cudaFreeHost(a));
  CHECK(cudaFreeHost(b));
  CHECK(cudaFreeHost(c));

  std::vector<float> ra(n, 2.0f), rb(n, 3.0f), rc(n, 0.0f);
  for (auto* v : {&ra, &rb, &rc}) CHECK(cudaHostRegister(v->data(), bytes, cudaHostRegisterMapped));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&da), ra.data(), 0));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&db), rb.data(), 0));
  CHECK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dc), rc.data(), 0));
  vadd<<<(n + 255) / 256, 256>>>(da, db, dc, n);
  CHECK(cudaDeviceSynchronize());
  if (check(ra.data(), rb.data(), rc.data(), n, "cudaHostRegister") != 0) return 1;
  for (auto* v : {&ra, &rb, &rc}) CHECK(cudaHostUnregister(v->data()));
  return 0;
}
