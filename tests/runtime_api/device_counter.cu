// SPDX-License-Identifier: Apache-2.0
// A __device__ counter every thread increments atomically, read with
// cudaMemcpyFromSymbol, cleared through its address (cudaGetSymbolAddress +
// cudaMemset), and a __device__ array written by one kernel, read by another.
#include "helper_samples.cuh"

__device__ unsigned int d_count;
__device__ int d_table[64];

__global__ void count_threads() { atomicAdd(&d_count, 1u); }

__global__ void fill_table(int base) {
  if (threadIdx.x < 64) d_table[threadIdx.x] = base + static_cast<int>(threadIdx.x);
}

__global__ void sum_table(int* out) {
  if (threadIdx.x == 0) {
    int s = 0;
    for (int i = 0; i < 64; ++i) s += d_table[i];
    *out = s;
  }
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  const unsigned zero = 0;
  checkCudaErrors(cudaMemcpyToSymbol(d_count, &zero, sizeof zero));
  count_threads<<<40, 128>>>();
  getLastCudaError("count_threads");
  unsigned count = 0;
  checkCudaErrors(cudaMemcpyFromSymbol(&count, d_count, sizeof count));
  std::printf("threads counted: %u (expected %u)\n", count, 40u * 128u);
  void* address = nullptr;
  checkCudaErrors(cudaGetSymbolAddress(&address, d_count));
  checkCudaErrors(cudaMemset(address, 0, sizeof(unsigned)));
  checkCudaErrors(cudaMemcpyFromSymbol(&count, d_count, sizeof count));
  std::printf("after clearing through its address: %u\n", count);
  fill_table<<<1, 64>>>(100);
  int* sum = nullptr;
  checkCudaErrors(cudaMalloc(&sum, sizeof(int)));
  sum_table<<<1, 32>>>(sum);
  getLastCudaError("sum_table");
  int host_sum = 0;
  checkCudaErrors(cudaMemcpy(&host_sum, sum, sizeof(int), cudaMemcpyDeviceToHost));
  int table[64];
  checkCudaErrors(cudaMemcpyFromSymbol(table, d_table, sizeof table));
  std::printf("table sum on the device: %d, table[63] = %d\n", host_sum, table[63]);
  checkCudaErrors(cudaFree(sum));
  if (host_sum != 64 * 100 + 2016 || table[63] != 163) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("device_counter: PASS\n");
  return 0;
}
