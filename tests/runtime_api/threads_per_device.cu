// SPDX-License-Identifier: Apache-2.0
// One host thread per device, each selecting its device with cudaSetDevice
// and working independently (streams, copies, kernels, synchronisation); with
// one device, two threads share it.
#include <thread>
#include <vector>

#include "helper_samples.cuh"

__global__ void fill_pattern(int* p, int n, int seed) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = seed * 1000 + i % 1000;
}

int work(int device, int seed, int* wrong) {
  checkCudaErrors(cudaSetDevice(device));
  int current = -1;
  checkCudaErrors(cudaGetDevice(&current));
  if (current != device) return 1;
  const int n = 1 << 20;
  int* dev = nullptr;
  std::vector<int> host(n);
  cudaStream_t s;
  checkCudaErrors(cudaStreamCreate(&s));
  checkCudaErrors(cudaMalloc(&dev, n * sizeof(int)));
  for (int round = 0; round < 20; ++round) {
    fill_pattern<<<(n + 255) / 256, 256, 0, s>>>(dev, n, seed + round);
    checkCudaErrors(cudaMemcpyAsync(host.data(), dev, n * sizeof(int), cudaMemcpyDeviceToHost, s));
    checkCudaErrors(cudaStreamSynchronize(s));
    for (int i = 0; i < n; i += 4099) *wrong += host[i] != (seed + round) * 1000 + i % 1000;
  }
  checkCudaErrors(cudaFree(dev));
  checkCudaErrors(cudaStreamDestroy(s));
  return 0;
}

int main() {
  int count = 0;
  checkCudaErrors(cudaGetDeviceCount(&count));
  const int threads = count > 1 ? count : 2;
  std::vector<std::thread> pool;
  std::vector<int> wrong(threads, 0), rc(threads, 0);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] { rc[t] = work(t % count, t + 1, &wrong[t]); });
  }
  for (auto& th : pool) th.join();
  int total = 0;
  for (int t = 0; t < threads; ++t) {
    std::printf("thread %d on device %d: %s\n", t, t % count, rc[t] == 0 && wrong[t] == 0 ? "correct" : "WRONG RESULT");
    total += wrong[t] + rc[t];
  }
  if (total != 0) return 1;
  std::printf("threads_per_device: PASS\n");
  return 0;
}
