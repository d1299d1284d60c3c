// SPDX-License-Identifier: Apache-2.0
// Kernels of bench_trace's launch loop (compiled to PTX at build time and
// embedded; the fake driver loads the PTX and runs neither kernel).
extern "C" __global__ void empty() {}

extern "C" __global__ void spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}
