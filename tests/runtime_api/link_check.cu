// SPDX-License-Identifier: Apache-2.0
// Every registration and launch path nvcc emits, in one translation unit,
// for the link check (built at -O0, -O2, -G, -rdc=true with a device link,
// and with -D__NV_LEGACY_LAUNCH): templates, __device__, __constant__ and
// __managed__ variables, device printf, launches with and without arguments.
// It also runs (on the fake, with the CPU kernels of fake_kernels.cpp).
#include "helper_samples.cuh"

__device__ int d_hits;
__constant__ float c_scale[2];
__managed__ int m_total = 5;

template <class T>
__global__ void scale_add(T* out, const T* in, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i] * static_cast<T>(c_scale[0]) + static_cast<T>(m_total);
  if (i == 0) atomicAdd(&d_hits, 1);
}

__global__ void hello() {
  if (threadIdx.x == 0 && blockIdx.x == 0) printf("hello from the device\n");
}

int main() {
  const int n = 256;
  float *in = nullptr, *out = nullptr;
  checkCudaErrors(cudaMalloc(&in, n * sizeof(float)));
  checkCudaErrors(cudaMalloc(&out, n * sizeof(float)));
  float host[n];
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i);
  checkCudaErrors(cudaMemcpy(in, host, sizeof host, cudaMemcpyHostToDevice));
  const float scale[2] = {2.0f, 0.0f};
  checkCudaErrors(cudaMemcpyToSymbol(c_scale, scale, sizeof scale));
  const int zero = 0;
  checkCudaErrors(cudaMemcpyToSymbol(d_hits, &zero, sizeof zero));
  m_total = 3;  // the host writes the managed variable before the launch
  scale_add<float><<<(n + 127) / 128, 128>>>(out, in, n);
  getLastCudaError("scale_add");
  hello<<<1, 32>>>();
  getLastCudaError("hello");
  checkCudaErrors(cudaDeviceSynchronize());
  checkCudaErrors(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost));
  int hits = 0;
  checkCudaErrors(cudaMemcpyFromSymbol(&hits, d_hits, sizeof hits));
  for (int i = 0; i < n; ++i) {
    if (host[i] != 2.0f * static_cast<float>(i) + 3.0f) {
      std::fprintf(stderr, "WRONG RESULT at %d: %f\n", i, host[i]);
      return 1;
    }
  }
  std::printf("link_check: %d elements correct, %d kernel hit, managed total %d\n", n, hits, m_total);
  checkCudaErrors(cudaFree(in));
  checkCudaErrors(cudaFree(out));
  return 0;
}
