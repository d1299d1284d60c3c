// SPDX-License-Identifier: Apache-2.0
// A Runtime-API program: asynchronous copies on two streams, a kernel, events
// timing the copy and ordering the second stream after the first.
#include <cstdio>

#include "check.cuh"

extern "C" __global__ void scale(float* p, float f, unsigned n, unsigned repeat) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float v = p[i];
  for (unsigned r = 0; r < repeat; ++r) v = v * f;
  p[i] = v;
}

int main() {
  const unsigned n = 1u << 22;
  const size_t bytes = n * sizeof(float);
  float* host = nullptr;
  CHECK(cudaMallocHost(reinterpret_cast<void**>(&host), bytes));
  for (unsigned i = 0; i < n; ++i) host[i] = static_cast<float>(i % 50);
  float* dev = nullptr;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&dev), bytes));
  cudaStream_t copy_stream, work_stream;
  CHECK(cudaStreamCreateWithFlags(&copy_stream, cudaStreamNonBlocking));
  CHECK(cudaStreamCreate(&work_stream));
  cudaEvent_t start, copied;
  CHECK(cudaEventCreate(&start));
  CHECK(cudaEventCreate(&copied));
  CHECK(cudaEventRecord(start, copy_stream));
  CHECK(cudaMemcpyAsync(dev, host, bytes, cudaMemcpyHostToDevice, copy_stream));
  CHECK(cudaEventRecord(copied, copy_stream));
  CHECK(cudaStreamWaitEvent(work_stream, copied, 0));  // the kernel waits for the copy
  scale<<<(n + 255) / 256, 256, 0, work_stream>>>(dev, 2.0f, n, 1);
  CHECK(cudaGetLastError());
  CHECK(cudaMemcpyAsync(host, dev, bytes, cudaMemcpyDeviceToHost, work_stream));
  CHECK(cudaStreamSynchronize(work_stream));
  float ms = 0.0f;
  CHECK(cudaEventElapsedTime(&ms, start, copied));
  for (unsigned i = 0; i < n; ++i) {
    if (host[i] != 2.0f * static_cast<float>(i % 50)) {
      std::fprintf(stderr, "WRONG RESULT at %u: %f\n", i, host[i]);
      return 1;
    }
  }
  std::printf("streams: %.1f MiB copied, kernel ordered after it by an event: correct\n", bytes / 1048576.0);
  std::printf("[time] copy %.3f ms (%.1f GB/s)\n", ms, bytes / (ms * 1e6));
  CHECK(cudaEventDestroy(start));
  CHECK(cudaEventDestroy(copied));
  CHECK(cudaStreamDestroy(copy_stream));
  CHECK(cudaStreamDestroy(work_stream));
  CHECK(cudaFree(dev));
  CHECK(cudaFreeHost(host));
  return 0;
}
