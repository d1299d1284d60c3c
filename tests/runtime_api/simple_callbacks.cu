// SPDX-License-Identifier: Apache-2.0
// Several streams, each running a kernel then calling back into the host
// (cudaStreamAddCallback and cudaLaunchHostFunc), with events ordering a
// final stream after all of them.
#include <mutex>
#include <vector>

#include "helper_samples.cuh"

__global__ void increment(int* data, int n, int by) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] += by;
}

struct Work {
  int id = 0;
  int* host = nullptr;
  int n = 0;
  bool checked = false;
};
std::mutex g_mutex;
int g_done = 0;

void CUDART_CB finished(cudaStream_t, cudaError_t status, void* data) {
  auto* w = static_cast<Work*>(data);
  bool ok = status == cudaSuccess;
  for (int i = 0; i < w->n; ++i) ok = ok && w->host[i] == i + w->id + 1;
  w->checked = ok;
}

void CUDART_CB count_done(void*) {
  std::lock_guard<std::mutex> lock(g_mutex);
  ++g_done;
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  const int streams = 4, n = 1 << 16;
  std::vector<cudaStream_t> s(streams);
  std::vector<cudaEvent_t> done(streams);
  std::vector<Work> work(streams);
  std::vector<int*> dev(streams);
  for (int k = 0; k < streams; ++k) {
    checkCudaErrors(cudaStreamCreate(&s[k]));
    checkCudaErrors(cudaEventCreateWithFlags(&done[k], cudaEventDisableTiming));
    checkCudaErrors(cudaMallocHost(&work[k].host, n * sizeof(int)));
    checkCudaErrors(cudaMalloc(&dev[k], n * sizeof(int)));
    work[k].id = k;
    work[k].n = n;
    for (int i = 0; i < n; ++i) work[k].host[i] = i;
  }
  for (int k = 0; k < streams; ++k) {
    checkCudaErrors(cudaMemcpyAsync(dev[k], work[k].host, n * sizeof(int), cudaMemcpyHostToDevice, s[k]));
    increment<<<(n + 255) / 256, 256, 0, s[k]>>>(dev[k], n, k + 1);
    getLastCudaError("increment");
    checkCudaErrors(cudaMemcpyAsync(work[k].host, dev[k], n * sizeof(int), cudaMemcpyDeviceToHost, s[k]));
    checkCudaErrors(cudaStreamAddCallback(s[k], finished, &work[k], 0));
    checkCudaErrors(cudaLaunchHostFunc(s[k], count_done, nullptr));
    checkCudaErrors(cudaEventRecord(done[k], s[k]));
  }
  cudaStream_t last;
  checkCudaErrors(cudaStreamCreateWithFlags(&last, cudaStreamNonBlocking));
  for (int k = 0; k < streams; ++k) checkCudaErrors(cudaStreamWaitEvent(last, done[k], 0));
  checkCudaErrors(cudaStreamSynchronize(last));
  for (int k = 0; k < streams; ++k) {
    checkCudaErrors(cudaStreamSynchronize(s[k]));
    std::printf("stream %d: callback saw %s\n", k, work[k].checked ? "correct data" : "WRONG RESULT");
    if (!work[k].checked) return 1;
  }
  std::printf("host functions run: %d of %d\n", g_done, streams);
  for (int k = 0; k < streams; ++k) {
    checkCudaErrors(cudaStreamDestroy(s[k]));
    checkCudaErrors(cudaEventDestroy(done[k]));
    checkCudaErrors(cudaFreeHost(work[k].host));
    checkCudaErrors(cudaFree(dev[k]));
  }
  checkCudaErrors(cudaStreamDestroy(last));
  std::printf("simple_callbacks: PASS\n");
  return 0;
}
