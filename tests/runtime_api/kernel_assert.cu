// SPDX-License-Identifier: Apache-2.0
// A device-side assert that fails: the kernel stops, the next
// synchronisation reports cudaErrorAssert, the error is sticky until
// cudaDeviceReset, after which the device works again. The thread's
// last-error slot forgets it once read; the device does not.
#include <cassert>
#include <thread>

#include "helper_samples.cuh"

__global__ void check_positive(const int* p, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) assert(p[i] >= 0);
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  const int n = 64;
  int host[n];
  for (int i = 0; i < n; ++i) host[i] = i == 37 ? -1 : i;
  int* dev = nullptr;
  checkCudaErrors(cudaMalloc(&dev, sizeof host));
  checkCudaErrors(cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice));
  check_positive<<<1, n>>>(dev, n);
  std::printf("launch: %s\n", cudaGetErrorName(cudaGetLastError()));
  std::fflush(stdout);
  const cudaError_t e = cudaDeviceSynchronize();
  std::printf("synchronize: %s (%s)\n", cudaGetErrorName(e), cudaGetErrorString(e));
  void* more = nullptr;
  const cudaError_t after = cudaMalloc(&more, 16);
  std::printf("an allocation after it: %s\n", cudaGetErrorName(after));
  std::printf("last error: %s\n", cudaGetErrorName(cudaGetLastError()));
  // Reading the slot clears it, the sticky code too; the device keeps it.
  std::printf("last error read again: %s\n", cudaGetErrorName(cudaGetLastError()));
  std::printf("peek after reading: %s\n", cudaGetErrorName(cudaPeekAtLastError()));
  std::printf("an allocation after reading: %s\n", cudaGetErrorName(cudaMalloc(&more, 16)));
  std::printf("peek after that: %s\n", cudaGetErrorName(cudaPeekAtLastError()));
  std::thread([] { std::printf("a new thread's peek: %s\n", cudaGetErrorName(cudaPeekAtLastError())); }).join();
  checkCudaErrors(cudaDeviceReset());
  // On the H200 (cudart 13.0) the device stays unusable in this process after
  // a device-side assert: cudaErrorDevicesUnavailable (printed, not checked).
  const cudaError_t again = cudaMalloc(&more, 16);
  std::printf("an allocation after cudaDeviceReset: %s\n", cudaGetErrorName(again));
  if (again == cudaSuccess) checkCudaErrors(cudaFree(more));
  if (e != cudaErrorAssert) {
    std::fprintf(stderr, "WRONG RESULT: expected cudaErrorAssert\n");
    return 1;
  }
  std::printf("kernel_assert: PASS\n");
  return 0;
}
