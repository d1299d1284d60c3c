// SPDX-License-Identifier: Apache-2.0
// Events of every kind (default, blocking sync, timing disabled) recorded on
// streams, queried until done, waited for; asynchronous memsets.
#include "helper_samples.cuh"

__global__ void spin_add(int* p, int n, int rounds) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  int v = p[i];
  for (int r = 0; r < rounds; ++r) v = (v * 3 + 1) % 1000003;
  p[i] = v;
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  const int n = 1 << 20;
  int* dev = nullptr;
  checkCudaErrors(cudaMalloc(&dev, n * sizeof(int)));
  cudaStream_t s;
  checkCudaErrors(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  cudaEvent_t timed, blocking, light;
  checkCudaErrors(cudaEventCreate(&timed));
  checkCudaErrors(cudaEventCreateWithFlags(&blocking, cudaEventBlockingSync));
  checkCudaErrors(cudaEventCreateWithFlags(&light, cudaEventDisableTiming));
  checkCudaErrors(cudaEventRecord(timed, s));
  checkCudaErrors(cudaMemsetAsync(dev, 0, n * sizeof(int), s));
  spin_add<<<(n + 255) / 256, 256, 0, s>>>(dev, n, 200);
  checkCudaErrors(cudaEventRecord(light, s));
  checkCudaErrors(cudaEventRecord(blocking, s));
  int polls = 0;
  cudaError_t q;
  while ((q = cudaEventQuery(light)) == cudaErrorNotReady) ++polls;
  checkCudaErrors(q);
  std::printf("light event completed (polled %s)\n", polls > 0 ? "at least once" : "zero times");
  checkCudaErrors(cudaEventSynchronize(blocking));
  float ms = 0.0f;
  checkCudaErrors(cudaEventElapsedTime(&ms, timed, blocking));
  std::printf("[time] memset and kernel: %.3f ms\n", ms);
  checkCudaErrors(cudaStreamQuery(s));
  int first = -1;
  checkCudaErrors(cudaMemcpy(&first, dev, sizeof first, cudaMemcpyDeviceToHost));
  int expect = 0;
  for (int r = 0; r < 200; ++r) expect = (expect * 3 + 1) % 1000003;
  std::printf("first element %d (expected %d)\n", first, expect);
  checkCudaErrors(cudaMemsetAsync(dev, 0xff, sizeof(int), nullptr));
  checkCudaErrors(cudaStreamSynchronize(nullptr));
  checkCudaErrors(cudaMemcpy(&first, dev, sizeof first, cudaMemcpyDeviceToHost));
  std::printf("after a memset of 0xff: %d\n", first);
  for (cudaEvent_t e : {timed, blocking, light}) checkCudaErrors(cudaEventDestroy(e));
  checkCudaErrors(cudaStreamDestroy(s));
  checkCudaErrors(cudaFree(dev));
  if (first != -1) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("events_and_memset: PASS\n");
  return 0;
}
