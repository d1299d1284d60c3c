// SPDX-License-Identifier: Apache-2.0
// Built for another architecture only (sm_80 SASS, no PTX): on a device that
// cannot run it, every launch reports cudaErrorNoKernelImageForDevice, as the
// Runtime does; nothing else is affected.
#include "helper_samples.cuh"

__global__ void touch(int* p) { *p = 1; }

int main(int argc, char** argv) {
  const int device = find_cuda_device(argc, argv);
  int major = 0, minor = 0;
  checkCudaErrors(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  checkCudaErrors(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, device));
  int* dev = nullptr;
  checkCudaErrors(cudaMalloc(&dev, sizeof(int)));
  for (int attempt = 0; attempt < 2; ++attempt) {
    touch<<<1, 1>>>(dev);
    const cudaError_t e = cudaGetLastError();
    std::printf("launch %d of an sm_80-only kernel on %d.%d: %s\n", attempt + 1, major, minor, cudaGetErrorName(e));
    if (major * 10 + minor != 80 && e != cudaErrorNoKernelImageForDevice) {
      std::fprintf(stderr, "WRONG RESULT\n");
      return 1;
    }
  }
  cudaFuncAttributes attr;
  const cudaError_t attributes = cudaFuncGetAttributes(&attr, touch);
  std::printf("its attributes: %s\n", cudaGetErrorName(attributes));
  (void)cudaGetLastError();
  checkCudaErrors(cudaMemset(dev, 0, sizeof(int)));  // the rest of the runtime is unaffected
  checkCudaErrors(cudaFree(dev));
  std::printf("wrong_arch: PASS\n");
  return 0;
}
