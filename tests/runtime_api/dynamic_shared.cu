// SPDX-License-Identifier: Apache-2.0
// More than 48 KiB of dynamic shared memory: refused until the kernel opts in
// with cudaFuncSetAttribute(cudaFuncAttributeMaxDynamicSharedMemorySize).
#include "helper_samples.cuh"

__global__ void reverse_block(int* data, int n) {
  extern __shared__ int tile[];
  for (int i = threadIdx.x; i < n; i += blockDim.x) tile[i] = data[i];
  __syncthreads();
  for (int i = threadIdx.x; i < n; i += blockDim.x) data[i] = tile[n - 1 - i];
}

int main(int argc, char** argv) {
  const int device = find_cuda_device(argc, argv);
  int optin = 0;
  checkCudaErrors(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  const int n = 24 * 1024;  // 96 KiB of ints
  const size_t bytes = n * sizeof(int);
  std::printf("opt-in limit %d bytes; this kernel wants %zu\n", optin, bytes);
  if (static_cast<size_t>(optin) < bytes) {
    std::printf("dynamic_shared: the device cannot give that much: skipped\n");
    return 0;
  }
  int* host = new int[n];
  for (int i = 0; i < n; ++i) host[i] = i;
  int* dev = nullptr;
  checkCudaErrors(cudaMalloc(&dev, bytes));
  checkCudaErrors(cudaMemcpy(dev, host, bytes, cudaMemcpyHostToDevice));
  reverse_block<<<1, 256, bytes>>>(dev, n);
  std::printf("without the opt-in: %s\n", cudaGetErrorName(cudaGetLastError()));
  cudaFuncAttributes attr;
  checkCudaErrors(cudaFuncGetAttributes(&attr, reverse_block));
  std::printf("max dynamic shared before: %d\n", attr.maxDynamicSharedSizeBytes);
  checkCudaErrors(
      cudaFuncSetAttribute(reverse_block, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)));
  checkCudaErrors(cudaFuncGetAttributes(&attr, reverse_block));
  std::printf("max dynamic shared after: %d\n", attr.maxDynamicSharedSizeBytes);
  reverse_block<<<1, 256, bytes>>>(dev, n);
  getLastCudaError("reverse_block");
  checkCudaErrors(cudaMemcpy(host, dev, bytes, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += host[i] != n - 1 - i;
  std::printf("reversed through %zu bytes of shared memory: %d wrong\n", bytes, wrong);
  delete[] host;
  checkCudaErrors(cudaFree(dev));
  if (wrong != 0) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("dynamic_shared: PASS\n");
  return 0;
}
