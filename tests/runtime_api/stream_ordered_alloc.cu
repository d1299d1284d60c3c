// SPDX-License-Identifier: Apache-2.0
// Stream-ordered allocation: cudaMallocAsync / cudaFreeAsync on streams
// (in the manner of streamOrderedAllocation), with the memory reused across
// iterations and ordered with the work that uses it.
#include "helper_samples.cuh"

__global__ void iota(int* p, int n, int base) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = base + i;
}

__global__ void sum(const int* p, int n, unsigned long long* out) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) atomicAdd(out, static_cast<unsigned long long>(p[i]));
}

int main(int argc, char** argv) {
  const int device = find_cuda_device(argc, argv);
  int pools = 0;
  checkCudaErrors(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device));
  if (!pools) {
    std::printf("stream_ordered_alloc: memory pools unsupported: skipped\n");
    return 0;
  }
  const int n = 1 << 16;
  cudaStream_t s;
  checkCudaErrors(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  unsigned long long* total = nullptr;
  checkCudaErrors(cudaMallocAsync(&total, sizeof *total, s));
  checkCudaErrors(cudaMemsetAsync(total, 0, sizeof *total, s));
  for (int round = 0; round < 10; ++round) {
    int* tmp = nullptr;
    checkCudaErrors(cudaMallocAsync(&tmp, n * sizeof(int), s));
    iota<<<(n + 255) / 256, 256, 0, s>>>(tmp, n, round);
    sum<<<(n + 255) / 256, 256, 0, s>>>(tmp, n, total);
    checkCudaErrors(cudaFreeAsync(tmp, s));
  }
  unsigned long long host = 0;
  checkCudaErrors(cudaMemcpyAsync(&host, total, sizeof host, cudaMemcpyDeviceToHost, s));
  checkCudaErrors(cudaFreeAsync(total, s));
  checkCudaErrors(cudaStreamSynchronize(s));
  unsigned long long expect = 0;
  for (int round = 0; round < 10; ++round) expect += 1ull * n * round + 1ull * n * (n - 1) / 2;
  std::printf("ten rounds of allocate / fill / sum / free: %llu (expected %llu)\n", host, expect);
  size_t free_bytes = 0, total_bytes = 0;
  checkCudaErrors(cudaMemGetInfo(&free_bytes, &total_bytes));
  std::printf("device memory: %s\n", free_bytes <= total_bytes ? "free <= total" : "inconsistent");
  checkCudaErrors(cudaStreamDestroy(s));
  if (host != expect) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("stream_ordered_alloc: PASS\n");
  return 0;
}
