// SPDX-License-Identifier: Apache-2.0
// The Runtime-API side of bench_startup (tools/bench/bench_startup.cpp): a
// program that spends T ms of its own work, then runs its first kernel and
// prints when the result was back. Built twice by nvcc: with the static
// cudart (the CUDA Runtime's lazy initialisation) and with -cudart none
// against libdrvshim_cudart (runtime_compat, DRVSHIM_RT_POLICY=lazy|eager|background).
// Its kernel is also bench_startup's fatbin (nvcc -fatbin of this file).
//   bench_startup_cudart T_MS DEVICES busy|sleep
// prints: result_ns=<steady clock> launch_ns=<first kernel's share> main_ns=<main entered>
#include <cuda_runtime.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

#include "startup_work.hpp"

// The fake driver runs a CPU version of `scale` by this name (tools/fakecuda).
extern "C" __global__ void scale(float* p, float f, unsigned n, unsigned repeat) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    for (unsigned r = 0; r < repeat; ++r) p[i] *= f;
  }
}

namespace {

using bench_startup::now_ns;
using bench_startup::work;

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "bench_startup_cuda: %s failed: %s\n", what, cudaGetErrorString(e));
  return false;
}

}  // namespace

int main(int argc, char** argv) {
  const long long main_ns = now_ns();
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s T_MS DEVICES busy|sleep\n", argv[0]);
    return 2;
  }
  const long long t_ms = std::atoll(argv[1]);
  const int devices = std::atoi(argv[2]);
  work(t_ms, std::strcmp(argv[3], "sleep") != 0);
  constexpr unsigned n = 1024;
  std::vector<float> host(n, 1.0f);
  std::vector<float*> buffers(static_cast<size_t>(devices), nullptr);
  const long long launch_start = now_ns();
  for (int d = 0; d < devices; ++d) {
    if (!ok(cudaSetDevice(d), "cudaSetDevice") || !ok(cudaMalloc(&buffers[d], n * sizeof(float)), "cudaMalloc") ||
        !ok(cudaMemcpy(buffers[d], host.data(), n * sizeof(float), cudaMemcpyHostToDevice), "cudaMemcpy")) {
      return 1;
    }
    scale<<<(n + 255) / 256, 256>>>(buffers[d], 2.0f, n, 1);
    if (!ok(cudaGetLastError(), "launch")) return 1;
  }
  for (int d = 0; d < devices; ++d) {
    std::vector<float> back(n, 0.0f);
    if (!ok(cudaSetDevice(d), "cudaSetDevice") ||
        !ok(cudaMemcpy(back.data(), buffers[d], n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy")) {
      return 1;
    }
    for (unsigned i = 0; i < n; ++i) {
      if (back[i] != 2.0f) {
        std::fprintf(stderr, "WRONG RESULT on device %d at %u: %f\n", d, i, static_cast<double>(back[i]));
        return 1;
      }
    }
  }
  const long long result_ns = now_ns();
  std::printf("result_ns=%lld launch_ns=%lld main_ns=%lld\n", result_ns, result_ns - launch_start, main_ns);
  std::fflush(stdout);
  return 0;
}
