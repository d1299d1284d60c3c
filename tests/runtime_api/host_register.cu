// SPDX-License-Identifier: Apache-2.0
// Existing host memory page-locked with cudaHostRegister and used by a
// kernel through its device pointer; pointer attributes and allocation
// flags of every kind of memory.
#include <vector>

#include "helper_samples.cuh"

__global__ void negate(int* p, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = -p[i];
}

const char* type_name(cudaMemoryType t) {
  switch (t) {
    case cudaMemoryTypeUnregistered: return "unregistered";
    case cudaMemoryTypeHost: return "host";
    case cudaMemoryTypeDevice: return "device";
    case cudaMemoryTypeManaged: return "managed";
  }
  return "?";
}

int main(int argc, char** argv) {
  const int device = find_cuda_device(argc, argv);
  int supported = 0;
  checkCudaErrors(cudaDeviceGetAttribute(&supported, cudaDevAttrHostRegisterSupported, device));
  if (!supported) {
    std::printf("host_register: host registration unsupported: skipped\n");
    return 0;
  }
  const int n = 1 << 16;
  std::vector<int> data(n);
  for (int i = 0; i < n; ++i) data[i] = i;
  checkCudaErrors(cudaHostRegister(data.data(), n * sizeof(int), cudaHostRegisterMapped));
  int* dev = nullptr;
  checkCudaErrors(cudaHostGetDevicePointer(reinterpret_cast<void**>(&dev), data.data(), 0));
  negate<<<(n + 255) / 256, 256>>>(dev, n);
  getLastCudaError("negate");
  checkCudaErrors(cudaDeviceSynchronize());
  std::printf("registered memory after the kernel: data[%d] = %d\n", n - 1, data[n - 1]);
  cudaPointerAttributes a;
  checkCudaErrors(cudaPointerGetAttributes(&a, data.data()));
  std::printf("registered: %s\n", type_name(a.type));
  void* pinned = nullptr;
  checkCudaErrors(cudaHostAlloc(&pinned, 4096, cudaHostAllocMapped | cudaHostAllocPortable));
  unsigned flags = 0;
  checkCudaErrors(cudaHostGetFlags(&flags, pinned));
  std::printf("cudaHostAlloc(mapped | portable) flags include mapped: %s, portable: %s\n",
              (flags & cudaHostAllocMapped) ? "yes" : "no", (flags & cudaHostAllocPortable) ? "yes" : "no");
  checkCudaErrors(cudaPointerGetAttributes(&a, pinned));
  std::printf("pinned: %s\n", type_name(a.type));
  void* device_memory = nullptr;
  checkCudaErrors(cudaMalloc(&device_memory, 64));
  checkCudaErrors(cudaPointerGetAttributes(&a, device_memory));
  std::printf("device: %s on device %d\n", type_name(a.type), a.device);
  void* managed = nullptr;
  checkCudaErrors(cudaMallocManaged(&managed, 64));
  checkCudaErrors(cudaPointerGetAttributes(&a, managed));
  std::printf("managed: %s\n", type_name(a.type));
  int local = 0;
  checkCudaErrors(cudaPointerGetAttributes(&a, &local));
  std::printf("stack variable: %s\n", type_name(a.type));
  checkCudaErrors(cudaHostUnregister(data.data()));
  const cudaError_t twice = cudaHostUnregister(data.data());
  std::printf("unregistering twice: %s\n", cudaGetErrorName(twice));
  (void)cudaGetLastError();
  checkCudaErrors(cudaFreeHost(pinned));
  checkCudaErrors(cudaFree(device_memory));
  checkCudaErrors(cudaFree(managed));
  if (data[n - 1] != -(n - 1)) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("host_register: PASS\n");
  return 0;
}
