// SPDX-License-Identifier: Apache-2.0
// __managed__ variables: written on the host before a kernel, updated by the
// kernel, read on the host after synchronisation, with no explicit copy.
#include "helper_samples.cuh"

__managed__ int m_factor = 3;
__managed__ float m_values[128];
__managed__ unsigned long long m_sum;

__global__ void scale_and_sum(int n) {
  const int i = threadIdx.x;
  if (i < n) {
    m_values[i] *= static_cast<float>(m_factor);
    atomicAdd(&m_sum, static_cast<unsigned long long>(m_values[i]));
  }
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  std::printf("initial factor: %d\n", m_factor);
  m_factor = 4;
  m_sum = 0;
  for (int i = 0; i < 128; ++i) m_values[i] = static_cast<float>(i);
  scale_and_sum<<<1, 128>>>(128);
  getLastCudaError("scale_and_sum");
  checkCudaErrors(cudaDeviceSynchronize());
  std::printf("values[127] = %.1f, sum = %llu\n", m_values[127], m_sum);
  if (m_sum != 4ull * 127 * 128 / 2 || m_values[127] != 508.0f) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  int factor = 0;
  checkCudaErrors(cudaMemcpyFromSymbol(&factor, m_factor, sizeof factor));
  std::printf("factor through cudaMemcpyFromSymbol: %d\n", factor);
  std::printf("managed_variables: PASS\n");
  return 0;
}
