// SPDX-License-Identifier: Apache-2.0
// Pitched 2D memory: cudaMallocPitch, cudaMemcpy2D both ways (and
// asynchronously), cudaMemset2D, a kernel walking rows by the pitch.
#include <vector>

#include "helper_samples.cuh"

__global__ void add_row_index(float* base, size_t pitch, int width, int height) {
  const int x = blockIdx.x * blockDim.x + threadIdx.x;
  const int y = blockIdx.y;
  if (x < width && y < height) {
    float* row = reinterpret_cast<float*>(reinterpret_cast<char*>(base) + y * pitch);
    row[x] += static_cast<float>(y);
  }
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  const int width = 300, height = 40;
  float* dev = nullptr;
  size_t pitch = 0;
  checkCudaErrors(cudaMallocPitch(&dev, &pitch, width * sizeof(float), height));
  std::printf("%d x %d floats: pitch %zu bytes (rows of %zu bytes)\n", width, height, pitch, width * sizeof(float));
  checkCudaErrors(cudaMemset2D(dev, pitch, 0, width * sizeof(float), height));
  std::vector<float> host(width * height);
  for (int i = 0; i < width * height; ++i) host[i] = static_cast<float>(i % width);
  checkCudaErrors(cudaMemcpy2D(dev, pitch, host.data(), width * sizeof(float), width * sizeof(float), height,
                               cudaMemcpyHostToDevice));
  add_row_index<<<dim3((width + 127) / 128, height), 128>>>(dev, pitch, width, height);
  getLastCudaError("add_row_index");
  std::vector<float> back(width * height, -1.0f);
  cudaStream_t s;
  checkCudaErrors(cudaStreamCreate(&s));
  checkCudaErrors(cudaMemcpy2DAsync(back.data(), width * sizeof(float), dev, pitch, width * sizeof(float), height,
                                    cudaMemcpyDeviceToHost, s));
  checkCudaErrors(cudaStreamSynchronize(s));
  int wrong = 0;
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) wrong += back[y * width + x] != static_cast<float>(x + y);
  }
  // A column strip of the matrix, copied device to device into a narrower pitched buffer.
  float* strip = nullptr;
  size_t strip_pitch = 0;
  checkCudaErrors(cudaMallocPitch(&strip, &strip_pitch, 16 * sizeof(float), height));
  checkCudaErrors(
      cudaMemcpy2D(strip, strip_pitch, dev + 100, pitch, 16 * sizeof(float), height, cudaMemcpyDeviceToDevice));
  float corner = 0.0f;
  checkCudaErrors(cudaMemcpy2D(&corner, sizeof(float), reinterpret_cast<char*>(strip) + (height - 1) * strip_pitch,
                               strip_pitch, sizeof(float), 1, cudaMemcpyDeviceToHost));
  std::printf("strip corner: %.1f, %d wrong\n", corner, wrong);
  const cudaError_t bad = cudaMemcpy2D(host.data(), 4, dev, pitch, 8, 1, cudaMemcpyDeviceToHost);
  std::printf("a width beyond the pitch: %s\n", cudaGetErrorName(bad));
  (void)cudaGetLastError();
  checkCudaErrors(cudaStreamDestroy(s));
  checkCudaErrors(cudaFree(strip));
  checkCudaErrors(cudaFree(dev));
  if (wrong != 0 || corner != 100.0f + (height - 1)) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("pitched_2d: PASS\n");
  return 0;
}
