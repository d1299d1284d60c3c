// SPDX-License-Identifier: Apache-2.0
// Copy/compute overlap over several streams with priorities (in the manner
// of simpleStreams / asyncAPI): the data is cut into chunks, each copied in,
// scaled and copied back on its own stream; a high-priority stream waits for
// all of them through events and checks the result on the device.
#include <vector>

#include "helper_samples.cuh"

__global__ void scale_chunk(float* p, int n, float by) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) p[i] *= by;
}

__global__ void count_wrong(const float* p, int n, float expect_factor, int* wrong) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) {
    if (p[i] != static_cast<float>(i % 100) * expect_factor) atomicAdd(wrong, 1);
  }
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  const int chunks = 8, n = 1 << 22, chunk = n / chunks;
  int least = 0, greatest = 0;
  checkCudaErrors(cudaDeviceGetStreamPriorityRange(&least, &greatest));
  std::printf("stream priorities: least %d, greatest %d\n", least, greatest);
  float* host = nullptr;
  checkCudaErrors(cudaHostAlloc(&host, n * sizeof(float), cudaHostAllocDefault));
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i % 100);
  float* dev = nullptr;
  int* wrong = nullptr;
  checkCudaErrors(cudaMalloc(&dev, n * sizeof(float)));
  checkCudaErrors(cudaMalloc(&wrong, sizeof(int)));
  checkCudaErrors(cudaMemset(wrong, 0, sizeof(int)));
  std::vector<cudaStream_t> s(chunks);
  std::vector<cudaEvent_t> e(chunks);
  for (int k = 0; k < chunks; ++k) {
    checkCudaErrors(cudaStreamCreateWithPriority(&s[k], cudaStreamNonBlocking, least));
    checkCudaErrors(cudaEventCreateWithFlags(&e[k], cudaEventDisableTiming));
  }
  cudaStream_t check_stream;
  checkCudaErrors(cudaStreamCreateWithPriority(&check_stream, cudaStreamNonBlocking, greatest));
  int priority = 0;
  checkCudaErrors(cudaStreamGetPriority(check_stream, &priority));
  std::printf("check stream priority: %d\n", priority);
  cudaEvent_t start, stop;
  checkCudaErrors(cudaEventCreate(&start));
  checkCudaErrors(cudaEventCreate(&stop));
  checkCudaErrors(cudaEventRecord(start, s[0]));
  for (int k = 0; k < chunks; ++k) {
    const int off = k * chunk;
    checkCudaErrors(cudaMemcpyAsync(dev + off, host + off, chunk * sizeof(float), cudaMemcpyHostToDevice, s[k]));
    scale_chunk<<<64, 256, 0, s[k]>>>(dev + off, chunk, 3.0f);
    checkCudaErrors(cudaMemcpyAsync(host + off, dev + off, chunk * sizeof(float), cudaMemcpyDeviceToHost, s[k]));
    checkCudaErrors(cudaEventRecord(e[k], s[k]));
    checkCudaErrors(cudaStreamWaitEvent(check_stream, e[k], 0));
  }
  count_wrong<<<64, 256, 0, check_stream>>>(dev, n, 3.0f, wrong);
  getLastCudaError("count_wrong");
  checkCudaErrors(cudaEventRecord(stop, check_stream));
  checkCudaErrors(cudaStreamSynchronize(check_stream));
  float ms = 0.0f;
  checkCudaErrors(cudaEventElapsedTime(&ms, start, stop));
  std::printf("[time] %d chunks in %.3f ms\n", chunks, ms);
  int device_wrong = -1;
  checkCudaErrors(cudaMemcpy(&device_wrong, wrong, sizeof(int), cudaMemcpyDeviceToHost));
  for (int k = 0; k < chunks; ++k) checkCudaErrors(cudaStreamSynchronize(s[k]));
  int host_wrong = 0;
  for (int i = 0; i < n; ++i) host_wrong += host[i] != static_cast<float>(i % 100) * 3.0f;
  std::printf("device check: %d wrong, host check: %d wrong\n", device_wrong, host_wrong);
  if (device_wrong != 0 || host_wrong != 0) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  for (int k = 0; k < chunks; ++k) {
    checkCudaErrors(cudaStreamDestroy(s[k]));
    checkCudaErrors(cudaEventDestroy(e[k]));
  }
  checkCudaErrors(cudaStreamDestroy(check_stream));
  checkCudaErrors(cudaEventDestroy(start));
  checkCudaErrors(cudaEventDestroy(stop));
  checkCudaErrors(cudaFree(dev));
  checkCudaErrors(cudaFree(wrong));
  checkCudaErrors(cudaFreeHost(host));
  std::printf("async_overlap: PASS\n");
  return 0;
}
