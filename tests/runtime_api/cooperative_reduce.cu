// SPDX-License-Identifier: Apache-2.0
// A cooperative launch (cudaLaunchCooperativeKernel) whose grid synchronises
// as a whole (cooperative_groups::this_grid().sync()): every block adds its
// part, the grid waits, then block 0 finishes the sum.
#include <cooperative_groups.h>

#include "helper_samples.cuh"

namespace cg = cooperative_groups;

__global__ void grid_sum(const int* in, int n, int* partial, int* total) {
  cg::grid_group grid = cg::this_grid();
  __shared__ int block_sum;
  if (threadIdx.x == 0) block_sum = 0;
  __syncthreads();
  int mine = 0;
  for (int i = static_cast<int>(grid.thread_rank()); i < n; i += static_cast<int>(grid.size())) mine += in[i];
  atomicAdd(&block_sum, mine);
  __syncthreads();
  if (threadIdx.x == 0) partial[blockIdx.x] = block_sum;
  grid.sync();
  if (grid.thread_rank() == 0) {
    int s = 0;
    for (unsigned b = 0; b < gridDim.x; ++b) s += partial[b];
    *total = s;
  }
}

int main(int argc, char** argv) {
  const int device = find_cuda_device(argc, argv);
  int cooperative = 0, sms = 0;
  checkCudaErrors(cudaDeviceGetAttribute(&cooperative, cudaDevAttrCooperativeLaunch, device));
  checkCudaErrors(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  if (cooperative == 0) {
    std::printf("cooperative launch not supported: skipped\n");
    return 0;
  }
  const int threads = 256;
  int per_sm = 0;
  checkCudaErrors(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, grid_sum, threads, 0));
  const int blocks = per_sm * sms;
  const int n = 1 << 20;
  int *in, *partial, *total;
  checkCudaErrors(cudaMalloc(&in, n * sizeof(int)));
  checkCudaErrors(cudaMalloc(&partial, blocks * sizeof(int)));
  checkCudaErrors(cudaMalloc(&total, sizeof(int)));
  int* host = new int[n];
  for (int i = 0; i < n; ++i) host[i] = i % 10;
  checkCudaErrors(cudaMemcpy(in, host, n * sizeof(int), cudaMemcpyHostToDevice));
  void* args[] = {&in, const_cast<int*>(&n), &partial, &total};
  checkCudaErrors(cudaLaunchCooperativeKernel(reinterpret_cast<void*>(grid_sum), blocks, threads, args, 0, nullptr));
  int sum = 0;
  checkCudaErrors(cudaMemcpy(&sum, total, sizeof sum, cudaMemcpyDeviceToHost));
  long long expect = 0;
  for (int i = 0; i < n; ++i) expect += host[i];
  std::printf("grid of %d x %d threads synchronised as a whole: sum %d (expected %lld)\n", blocks, threads, sum,
              expect);
  const cudaError_t too_large =
      cudaLaunchCooperativeKernel(reinterpret_cast<void*>(grid_sum), blocks + 1, threads, args, 0, nullptr);
  std::printf("one block more than fits: %s\n", cudaGetErrorName(too_large));
  (void)cudaGetLastError();
  delete[] host;
  checkCudaErrors(cudaFree(in));
  checkCudaErrors(cudaFree(partial));
  checkCudaErrors(cudaFree(total));
  if (sum != expect) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("cooperative_reduce: PASS\n");
  return 0;
}
