// SPDX-License-Identifier: Apache-2.0
#include <cstdio>

__device__ float scale(float v);

extern "C" __global__ void scale_all(float* p, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = scale(p[i]);
}

int main() {
  const unsigned n = 64;
  float host[n];
  for (unsigned i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  float* dev = nullptr;
  if (cudaMalloc(&dev, sizeof host) != cudaSuccess) return 1;
  cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice);
  scale_all<<<1, n>>>(dev, n);
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    std::printf("failed: %s\n", cudaGetErrorName(e));
    return 1;
  }
  cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost);
  cudaFree(dev);
  std::printf("cudart consumer: launched, %s\n", cudaGetErrorName(cudaGetLastError()));
  return 0;
}
