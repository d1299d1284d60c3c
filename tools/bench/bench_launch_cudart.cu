// SPDX-License-Identifier: Apache-2.0
// Launch cost of a cudart <<<>>> launch of an empty kernel, measured the way
// bench_launch.cpp measures drvshim and the raw driver call (200 launches per
// round behind a 3 ms spinning kernel, 61 rounds, median). Built with nvcc at build time.
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <vector>

__global__ void empty() {}

__global__ void spin(unsigned long long ns) {
  unsigned long long start, now;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(start));
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(now));
  } while (now - start < ns);
}

#define CHECK(x)                                                           \
  do {                                                                     \
    cudaError_t e_ = (x);                                                  \
    if (e_ != cudaSuccess) {                                               \
      std::fprintf(stderr, "%s failed: %s\n", #x, cudaGetErrorString(e_)); \
      return 1;                                                            \
    }                                                                      \
  } while (0)

int main(int argc, char** argv) {
  cudaStream_t s;
  CHECK(cudaSetDevice(0));
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  constexpr int kPerRound = 200;
  std::vector<double> t;
  for (int round = 0; round < 71; ++round) {
    spin<<<1, 1, 0, s>>>(3000000ull);  // queue behind a busy GPU, as bench_launch does (untimed)
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kPerRound; ++i) empty<<<1, 32, 0, s>>>();
    const double us = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - t0).count();
    CHECK(cudaGetLastError());
    CHECK(cudaStreamSynchronize(s));
    if (round >= 10) t.push_back(us / kPerRound);
  }
  std::sort(t.begin(), t.end());
  std::printf("| cudart <<<>>> | %.3f us |\n", t[t.size() / 2]);
  if (argc > 1) {
    if (std::FILE* f = std::fopen(argv[1], "a")) {
      std::fprintf(f, "| cudart <<<>>> | %.3f us |\n", t[t.size() / 2]);
      std::fclose(f);
    }
  }
  return 0;
}
