// SPDX-License-Identifier: Apache-2.0
// Kernels drvshim-probe ships as PTX (compiled at build time for compute_75,
// JIT-compiled by the driver for whatever device it meets).

// Reads n float4 through p (mapped host memory in the probe), so the
// bandwidth of a kernel reading zero-copy memory can be measured. The sum is
// written so the reads cannot be optimised away.
extern "C" __global__ void read_sum(const float4* p, unsigned long long n, float* out) {
  float acc = 0.0f;
  for (unsigned long long i = blockIdx.x * static_cast<unsigned long long>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<unsigned long long>(gridDim.x) * blockDim.x) {
    const float4 v = p[i];
    acc += v.x + v.y + v.z + v.w;
  }
  if (acc == 12345.678f) *out = acc;  // practically never true: no store traffic, but the reads stay
}

// Holds its stream until *flag (mapped host memory) is non-zero, or until
// about timeout_ns have passed: a latch that lets a measurement queue all of
// its copies before the first one starts, so the host's submission rate never
// shows in the timing (the way nvbandwidth blocks its streams). One thread.
extern "C" __global__ void wait_flag(const volatile int* flag, unsigned long long timeout_ns) {
  unsigned long long start;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  unsigned long long now = start;
  while (*flag == 0 && now - start < timeout_ns) asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
}
