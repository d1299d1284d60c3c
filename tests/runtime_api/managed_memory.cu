// SPDX-License-Identifier: Apache-2.0
// Unified memory from cudaMallocManaged: initialised on the host, processed
// by a kernel, read on the host; with advice, prefetching and a stream
// attachment.
#include "helper_samples.cuh"

__global__ void square(int* p, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] = p[i] * p[i];
}

int main(int argc, char** argv) {
  const int device = find_cuda_device(argc, argv);
  int managed = 0, concurrent = 0;
  checkCudaErrors(cudaDeviceGetAttribute(&managed, cudaDevAttrManagedMemory, device));
  checkCudaErrors(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device));
  std::printf("managed memory: %d, concurrent managed access: %d\n", managed, concurrent);
  const int n = 1 << 20;
  int* data = nullptr;
  checkCudaErrors(cudaMallocManaged(&data, n * sizeof(int)));
  for (int i = 0; i < n; ++i) data[i] = i % 1000;
  cudaMemLocation on_device{cudaMemLocationTypeDevice, device};
  cudaMemLocation on_host{cudaMemLocationTypeHost, 0};
  if (concurrent != 0) {
    checkCudaErrors(cudaMemAdvise(data, n * sizeof(int), cudaMemAdviseSetPreferredLocation, on_device));
    checkCudaErrors(cudaMemPrefetchAsync(data, n * sizeof(int), on_device, 0, nullptr));
  }
  square<<<(n + 255) / 256, 256>>>(data, n);
  getLastCudaError("square");
  if (concurrent != 0) checkCudaErrors(cudaMemPrefetchAsync(data, n * sizeof(int), on_host, 0, nullptr));
  checkCudaErrors(cudaDeviceSynchronize());
  long long wrong = 0;
  for (int i = 0; i < n; ++i) wrong += data[i] != (i % 1000) * (i % 1000);
  std::printf("squared %d elements, %lld wrong\n", n, wrong);
  // A stream-attached allocation: visible to one stream, then to the host after it.
  int* own = nullptr;
  cudaStream_t s;
  checkCudaErrors(cudaStreamCreate(&s));
  checkCudaErrors(cudaMallocManaged(&own, 256 * sizeof(int), cudaMemAttachHost));
  for (int i = 0; i < 256; ++i) own[i] = 3;
  checkCudaErrors(cudaStreamAttachMemAsync(s, own, 0, cudaMemAttachSingle));
  square<<<1, 256, 0, s>>>(own, 256);
  checkCudaErrors(cudaStreamAttachMemAsync(s, own, 0, cudaMemAttachHost));
  checkCudaErrors(cudaStreamSynchronize(s));
  std::printf("stream-attached result: %d\n", own[255]);
  checkCudaErrors(cudaStreamDestroy(s));
  checkCudaErrors(cudaFree(own));
  checkCudaErrors(cudaFree(data));
  if (wrong != 0) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("managed_memory: PASS\n");
  return 0;
}
