// SPDX-License-Identifier: Apache-2.0
// Kernels for the GPU tests, built with nvcc at build time into PTX, CUBIN and
// fatbin (extern "C": unmangled names).
extern "C" __global__ void vadd(const float* a, const float* b, float* c, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) c[i] = a[i] + b[i];
}

extern "C" __global__ void empty() {}

// Spins for about `ns` nanoseconds, then writes `value` to *out.
extern "C" __global__ void spin_then_write(unsigned long long ns, unsigned* out, unsigned value) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  unsigned long long now = start;
  while (now - start < ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  *out = value;
}

// Stores through a pointer that is not mapped: CUDA_ERROR_ILLEGAL_ADDRESS.
extern "C" __global__ void illegal_store(unsigned* nowhere) { *nowhere = 1u; }

__device__ unsigned counter;

extern "C" __global__ void bump_counter() { atomicAdd(&counter, 1u); }

// Spins for about `ns` nanoseconds, then sets out[0..n) to `value` (grid-stride):
// slow work whose result a copy ordered after it must see.
extern "C" __global__ void spin_then_fill(unsigned long long ns, unsigned* out, unsigned long long n, unsigned value) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  unsigned long long now = start;
  while (now - start < ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  for (unsigned long long i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = value;
}
