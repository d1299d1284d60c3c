// SPDX-License-Identifier: Apache-2.0
// Tiled matrix multiplication with shared memory (in the manner of the
// matrixMul sample): C = A * B for A (hA x wA) and B (wA x wB), timed with events.
#include <cmath>
#include <vector>

#include "helper_samples.cuh"

template <int BLOCK>
__global__ void matrix_mul(float* c, const float* a, const float* b, int wa, int wb) {
  __shared__ float as[BLOCK][BLOCK];
  __shared__ float bs[BLOCK][BLOCK];
  const int bx = blockIdx.x, by = blockIdx.y, tx = threadIdx.x, ty = threadIdx.y;
  float sum = 0.0f;
  for (int k0 = 0; k0 < wa; k0 += BLOCK) {
    as[ty][tx] = a[(by * BLOCK + ty) * wa + k0 + tx];
    bs[ty][tx] = b[(k0 + ty) * wb + bx * BLOCK + tx];
    __syncthreads();
#pragma unroll
    for (int k = 0; k < BLOCK; ++k) sum += as[ty][k] * bs[k][tx];
    __syncthreads();
  }
  c[(by * BLOCK + ty) * wb + bx * BLOCK + tx] = sum;
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  constexpr int block = 32;
  const int ha = 320, wa = 320, wb = 640;
  std::vector<float> a(ha * wa), b(wa * wb), c(ha * wb);
  for (int i = 0; i < ha * wa; ++i) a[i] = static_cast<float>(i % 7) * 0.5f;
  for (int i = 0; i < wa * wb; ++i) b[i] = static_cast<float>(i % 5) * 0.25f;
  float *da, *db, *dc;
  checkCudaErrors(cudaMalloc(&da, a.size() * sizeof(float)));
  checkCudaErrors(cudaMalloc(&db, b.size() * sizeof(float)));
  checkCudaErrors(cudaMalloc(&dc, c.size() * sizeof(float)));
  checkCudaErrors(cudaMemcpy(da, a.data(), a.size() * sizeof(float), cudaMemcpyHostToDevice));
  checkCudaErrors(cudaMemcpy(db, b.data(), b.size() * sizeof(float), cudaMemcpyHostToDevice));
  cudaEvent_t start, stop;
  checkCudaErrors(cudaEventCreate(&start));
  checkCudaErrors(cudaEventCreate(&stop));
  const dim3 threads(block, block), grid(wb / block, ha / block);
  std::printf("Computing result using CUDA kernel: A(%d x %d) * B(%d x %d)\n", ha, wa, wa, wb);
  checkCudaErrors(cudaEventRecord(start, nullptr));
  const int iterations = 10;
  for (int i = 0; i < iterations; ++i) matrix_mul<block><<<grid, threads>>>(dc, da, db, wa, wb);
  getLastCudaError("matrix_mul");
  checkCudaErrors(cudaEventRecord(stop, nullptr));
  checkCudaErrors(cudaEventSynchronize(stop));
  float ms = 0.0f;
  checkCudaErrors(cudaEventElapsedTime(&ms, start, stop));
  std::printf("[time] %.3f ms per multiplication\n", ms / iterations);
  checkCudaErrors(cudaMemcpy(c.data(), dc, c.size() * sizeof(float), cudaMemcpyDeviceToHost));
  int errors = 0;
  for (int r = 0; r < ha; r += 37) {
    for (int col = 0; col < wb; col += 41) {
      double ref = 0;
      for (int k = 0; k < wa; ++k) ref += static_cast<double>(a[r * wa + k]) * b[k * wb + col];
      if (std::fabs(ref - c[r * wb + col]) > 1e-3 * std::fabs(ref) + 1e-3) ++errors;
    }
  }
  if (errors != 0) {
    std::fprintf(stderr, "WRONG RESULT: %d mismatches\n", errors);
    return 1;
  }
  std::printf("Checking computed result for correctness: Result = PASS\n");
  checkCudaErrors(cudaEventDestroy(start));
  checkCudaErrors(cudaEventDestroy(stop));
  checkCudaErrors(cudaFree(da));
  checkCudaErrors(cudaFree(db));
  checkCudaErrors(cudaFree(dc));
  return 0;
}
