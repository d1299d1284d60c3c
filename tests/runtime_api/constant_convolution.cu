// SPDX-License-Identifier: Apache-2.0
// A 1D convolution whose filter lives in __constant__ memory, set with
// cudaMemcpyToSymbol and read back with cudaMemcpyFromSymbol; the symbol's
// size and address through cudaGetSymbolSize / cudaGetSymbolAddress.
#include <cmath>
#include <vector>

#include "helper_samples.cuh"

constexpr int kRadius = 4;
__constant__ float c_filter[2 * kRadius + 1];

__global__ void convolve(float* out, const float* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i >= n) return;
  float sum = 0.0f;
  for (int k = -kRadius; k <= kRadius; ++k) {
    const int j = i + k;
    if (j >= 0 && j < n) sum += in[j] * c_filter[k + kRadius];
  }
  out[i] = sum;
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  const int n = 1 << 16;
  float filter[2 * kRadius + 1];
  for (int k = 0; k <= 2 * kRadius; ++k)
    filter[k] = 1.0f / static_cast<float>(1 + (k > kRadius ? k - kRadius : kRadius - k));
  checkCudaErrors(cudaMemcpyToSymbol(c_filter, filter, sizeof filter));
  size_t size = 0;
  checkCudaErrors(cudaGetSymbolSize(&size, c_filter));
  void* address = nullptr;
  checkCudaErrors(cudaGetSymbolAddress(&address, c_filter));
  std::printf("c_filter: %zu bytes, address %s\n", size, address != nullptr ? "valid" : "null");
  float back[2 * kRadius + 1] = {};
  checkCudaErrors(cudaMemcpyFromSymbol(back, c_filter, sizeof back));
  for (int k = 0; k <= 2 * kRadius; ++k) {
    if (back[k] != filter[k]) {
      std::fprintf(stderr, "WRONG RESULT: filter tap %d reads back %f\n", k, back[k]);
      return 1;
    }
  }
  std::vector<float> in(n), out(n);
  for (int i = 0; i < n; ++i) in[i] = static_cast<float>(i % 13);
  float *din, *dout;
  checkCudaErrors(cudaMalloc(&din, n * sizeof(float)));
  checkCudaErrors(cudaMalloc(&dout, n * sizeof(float)));
  checkCudaErrors(cudaMemcpy(din, in.data(), n * sizeof(float), cudaMemcpyHostToDevice));
  convolve<<<(n + 255) / 256, 256>>>(dout, din, n);
  getLastCudaError("convolve");
  checkCudaErrors(cudaMemcpy(out.data(), dout, n * sizeof(float), cudaMemcpyDeviceToHost));
  int errors = 0;
  for (int i = 0; i < n; ++i) {
    float ref = 0.0f;
    for (int k = -kRadius; k <= kRadius; ++k) {
      if (i + k >= 0 && i + k < n) ref += in[i + k] * filter[k + kRadius];
    }
    if (std::fabs(ref - out[i]) > 1e-4f) ++errors;
  }
  // Half the filter changed in place, from the offset of its second half.
  const float ones[kRadius] = {1, 1, 1, 1};
  checkCudaErrors(cudaMemcpyToSymbolAsync(c_filter, ones, sizeof ones, (kRadius + 1) * sizeof(float),
                                          cudaMemcpyHostToDevice, nullptr));
  checkCudaErrors(cudaMemcpyFromSymbolAsync(back, c_filter, sizeof back, 0, cudaMemcpyDeviceToHost, nullptr));
  checkCudaErrors(cudaStreamSynchronize(nullptr));
  std::printf("filter after the partial update: %.3f %.3f %.3f\n", back[0], back[kRadius], back[2 * kRadius]);
  if (errors != 0) {
    std::fprintf(stderr, "WRONG RESULT: %d mismatches\n", errors);
    return 1;
  }
  checkCudaErrors(cudaFree(din));
  checkCudaErrors(cudaFree(dout));
  std::printf("constant_convolution: PASS\n");
  return 0;
}
