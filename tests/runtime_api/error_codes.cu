// SPDX-License-Identifier: Apache-2.0
// The error codes programs check for, as the Runtime returns them: invalid
// arguments and configurations, names and texts, the per-thread last error,
// an allocation that cannot fit, a call outside what the device supports.
#include <thread>

#include "helper_samples.cuh"

__global__ void noop() {}

void show(const char* what, cudaError_t e) {
  std::printf("%-44s %s: %s\n", what, cudaGetErrorName(e), cudaGetErrorString(e));
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  int count = 0;
  checkCudaErrors(cudaGetDeviceCount(&count));
  show("cudaSetDevice(count)", cudaSetDevice(count));
  show("cudaGetLastError after it", cudaGetLastError());
  show("cudaGetLastError again", cudaGetLastError());
  checkCudaErrors(cudaSetDevice(0));
  noop<<<1, 2048>>>();
  show("a launch of 2048 threads per block", cudaPeekAtLastError());
  show("cudaPeekAtLastError does not clear", cudaGetLastError());
  noop<<<0, 32>>>();
  show("a launch of an empty grid", cudaGetLastError());
  void* p = nullptr;
  show("cudaMalloc of 1 PiB", cudaMalloc(&p, size_t{1} << 50));
  (void)cudaGetLastError();
  checkCudaErrors(cudaMalloc(&p, 256));
  show("cudaFree of a pointer inside an allocation", cudaFree(static_cast<char*>(p) + 16));
  checkCudaErrors(cudaFree(p));
  int host = 0;
  show("cudaMemcpy with kind 7", cudaMemcpy(&host, &host, sizeof host, static_cast<cudaMemcpyKind>(7)));
  cudaEvent_t e;
  checkCudaErrors(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  checkCudaErrors(cudaEventRecord(e, nullptr));
  checkCudaErrors(cudaEventSynchronize(e));
  float ms = 0.0f;
  show("cudaEventElapsedTime without timing", cudaEventElapsedTime(&ms, e, e));
  checkCudaErrors(cudaEventDestroy(e));
  show("cudaHostUnregister of plain memory", cudaHostUnregister(&host));
  std::thread other([] { show("another thread's last error", cudaGetLastError()); });
  other.join();
  for (int code : {0, 1, 2, 98, 209, 700, 710, 719, 801, 999, 1000}) {
    std::printf("error %4d: %s / %s\n", code, cudaGetErrorName(static_cast<cudaError_t>(code)),
                cudaGetErrorString(static_cast<cudaError_t>(code)));
  }
  (void)cudaGetLastError();
  std::printf("error_codes: PASS\n");
  return 0;
}
