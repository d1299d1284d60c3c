// SPDX-License-Identifier: Apache-2.0
// Template kernels instantiated for several types, a functor, and a
// structure passed by value: each instance is its own registered kernel
// (mangled name), launched the usual way.
#include "helper_samples.cuh"

struct Affine {
  float scale;
  float shift;
  int count;
};

template <class T>
__global__ void axpb(T* data, Affine f) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < f.count) data[i] = static_cast<T>(data[i] * static_cast<T>(f.scale) + static_cast<T>(f.shift));
}

struct Square {
  __device__ int operator()(int v) const { return v * v; }
};

template <class Op>
__global__ void apply(int* data, int n, Op op) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) data[i] = op(data[i]);
}

template <class T>
int run(const char* type, T start) {
  const int n = 1000;
  T host[n];
  for (int i = 0; i < n; ++i) host[i] = static_cast<T>(start + static_cast<T>(i % 10));
  T* dev = nullptr;
  checkCudaErrors(cudaMalloc(&dev, sizeof host));
  checkCudaErrors(cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice));
  axpb<T><<<(n + 127) / 128, 128>>>(dev, Affine{2.0f, 1.0f, n});
  getLastCudaError("axpb");
  checkCudaErrors(cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost));
  checkCudaErrors(cudaFree(dev));
  const T expect = static_cast<T>((start + static_cast<T>(9)) * static_cast<T>(2) + static_cast<T>(1));
  std::printf("axpb<%s>: last element %g\n", type, static_cast<double>(host[n - 1]));
  return host[n - 1] == expect ? 0 : 1;
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  int wrong = run<float>("float", 0.5f) + run<double>("double", 0.25) + run<int>("int", 3);
  int* dev = nullptr;
  int host[64];
  for (int i = 0; i < 64; ++i) host[i] = i;
  checkCudaErrors(cudaMalloc(&dev, sizeof host));
  checkCudaErrors(cudaMemcpy(dev, host, sizeof host, cudaMemcpyHostToDevice));
  apply<<<1, 64>>>(dev, 64, Square{});
  getLastCudaError("apply");
  checkCudaErrors(cudaMemcpy(host, dev, sizeof host, cudaMemcpyDeviceToHost));
  checkCudaErrors(cudaFree(dev));
  std::printf("apply<Square>: %d\n", host[63]);
  wrong += host[63] != 63 * 63;
  if (wrong != 0) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("template_kernels: PASS\n");
  return 0;
}
