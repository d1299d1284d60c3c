// SPDX-License-Identifier: Apache-2.0
// Relocatable device code across two files (-rdc=true): the kernel here
// calls a __device__ function and reads a __device__ variable defined in
// rdc_device.cu; under -cudart none the device link (nvcc -dlink) is an
// explicit step (docs/runtime-compat.md).
#include "helper_samples.cuh"

extern __device__ int d_offset;
__device__ int polynomial(int x);

__global__ void evaluate(int* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = polynomial(i) + d_offset;
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  const int n = 512;
  int* dev = nullptr;
  checkCudaErrors(cudaMalloc(&dev, n * sizeof(int)));
  const int offset = 7;
  checkCudaErrors(cudaMemcpyToSymbol(d_offset, &offset, sizeof offset));
  evaluate<<<(n + 127) / 128, 128>>>(dev, n);
  getLastCudaError("evaluate");
  int host[n];
  checkCudaErrors(cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost));
  checkCudaErrors(cudaFree(dev));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += host[i] != 3 * i * i + 2 * i + 1 + offset;
  std::printf("p(511) + offset = %d, %d wrong\n", host[n - 1], wrong);
  if (wrong != 0) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("rdc_two_files: PASS\n");
  return 0;
}
