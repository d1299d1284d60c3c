// A device-side assert that fails: the kernel stops, the next
// synchronisation reports cudaErrorAssert, the error is sticky until
// cudaDeviceReset, after which the device works again.
#include <cassert>

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
  checkCudaErrors(cudaDeviceReset());
  checkCudaErrors(cudaMalloc(&more, 16));
  checkCudaErrors(cudaFree(more));
  std::printf("after cudaDeviceReset the device works again\n");
  if (e != cudaErrorAssert) {
    std::fprintf(stderr, "WRONG RESULT: expected cudaErrorAssert\n");
    return 1;
  }
  std::printf("kernel_assert: PASS\n");
  return 0;
}
