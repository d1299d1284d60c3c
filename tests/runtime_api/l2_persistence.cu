// SPDX-License-Identifier: Apache-2.0
// L2 persistence: a persisting-lines carve-out (cudaDeviceSetLimit), an
// access policy window on a stream (cudaStreamSetAttribute), a kernel under
// it, the window read back, the persisting lines reset.
#include <algorithm>

#include "helper_samples.cuh"

__global__ void touch_window(int* p, int n, int rounds) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    for (int r = 0; r < rounds; ++r) p[i] += 1;
  }
}

int main(int argc, char** argv) {
  const int device = find_cuda_device(argc, argv);
  int max_persisting = 0, max_window = 0;
  checkCudaErrors(cudaDeviceGetAttribute(&max_persisting, cudaDevAttrMaxPersistingL2CacheSize, device));
  checkCudaErrors(cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, device));
  std::printf("persisting L2 up to %d bytes, windows up to %d bytes\n", max_persisting, max_window);
  if (max_persisting == 0) {
    std::printf("l2_persistence: unsupported: skipped\n");
    return 0;
  }
  const size_t carve_out = std::min<size_t>(max_persisting, 4u << 20);
  checkCudaErrors(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, carve_out));
  size_t limit = 0;
  checkCudaErrors(cudaDeviceGetLimit(&limit, cudaLimitPersistingL2CacheSize));
  std::printf("persisting carve-out asked %zu, got %zu\n", carve_out, limit);
  const int n = 1 << 20;
  int* data = nullptr;
  checkCudaErrors(cudaMalloc(&data, n * sizeof(int)));
  checkCudaErrors(cudaMemset(data, 0, n * sizeof(int)));
  cudaStream_t s;
  checkCudaErrors(cudaStreamCreate(&s));
  cudaStreamAttrValue window = {};
  window.accessPolicyWindow.base_ptr = data;
  window.accessPolicyWindow.num_bytes = std::min<size_t>(n * sizeof(int), static_cast<size_t>(max_window));
  window.accessPolicyWindow.hitRatio = 0.5f;
  window.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
  window.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
  checkCudaErrors(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &window));
  touch_window<<<(n + 255) / 256, 256, 0, s>>>(data, n, 5);
  getLastCudaError("touch_window");
  cudaStreamAttrValue back = {};
  checkCudaErrors(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &back));
  std::printf("window read back: %zu bytes, hit ratio %.2f, hit property %d\n", back.accessPolicyWindow.num_bytes,
              back.accessPolicyWindow.hitRatio, static_cast<int>(back.accessPolicyWindow.hitProp));
  checkCudaErrors(cudaStreamSynchronize(s));
  window.accessPolicyWindow.num_bytes = 0;  // the window off again
  checkCudaErrors(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &window));
  checkCudaErrors(cudaCtxResetPersistingL2Cache());
  int last = 0;
  checkCudaErrors(cudaMemcpy(&last, data + n - 1, sizeof last, cudaMemcpyDeviceToHost));
  std::printf("last element: %d\n", last);
  checkCudaErrors(cudaStreamDestroy(s));
  checkCudaErrors(cudaFree(data));
  if (last != 5) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("l2_persistence: PASS\n");
  return 0;
}
