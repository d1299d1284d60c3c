// SPDX-License-Identifier: Apache-2.0
// Built with --default-stream per-thread: each host thread's stream 0 is its
// own default stream (the _ptsz/_ptds entry points), so threads do not
// serialise on the legacy stream; cudaStreamPerThread names it explicitly.
#include <thread>
#include <vector>

#include "helper_samples.cuh"

__global__ void set_value(int* p, int n, int v) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = v;
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  const int threads = 4, n = 1 << 18;
  std::vector<int> ok(threads, 0);
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      int* dev = nullptr;
      std::vector<int> host(n);
      checkCudaErrors(cudaMalloc(&dev, n * sizeof(int)));
      set_value<<<(n + 255) / 256, 256>>>(dev, n, t + 1);  // the thread's default stream
      checkCudaErrors(cudaMemcpyAsync(host.data(), dev, n * sizeof(int), cudaMemcpyDeviceToHost, 0));
      checkCudaErrors(cudaStreamSynchronize(0));
      checkCudaErrors(cudaMemsetAsync(dev, 0, n * sizeof(int), cudaStreamPerThread));
      checkCudaErrors(cudaStreamSynchronize(cudaStreamPerThread));
      int zero = -1;
      checkCudaErrors(cudaMemcpy(&zero, dev + n - 1, sizeof zero, cudaMemcpyDeviceToHost));
      bool good = zero == 0;
      for (int i = 0; i < n; i += 997) good = good && host[i] == t + 1;
      ok[t] = good ? 1 : 0;
      checkCudaErrors(cudaFree(dev));
    });
  }
  for (auto& th : pool) th.join();
  int good = 0;
  for (int t = 0; t < threads; ++t) good += ok[t];
  std::printf("%d of %d threads saw their own results\n", good, threads);
  if (good != threads) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("per_thread_stream: PASS\n");
  return 0;
}
