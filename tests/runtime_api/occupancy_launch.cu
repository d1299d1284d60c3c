// SPDX-License-Identifier: Apache-2.0
// Launches sized by the occupancy calculator: cudaOccupancyMaxPotentialBlockSize
// (the cuda_runtime.h template, which reads attributes and the kernel's
// attributes), cudaOccupancyMaxActiveBlocksPerMultiprocessor, cudaFuncGetAttributes.
#include "helper_samples.cuh"

__global__ void saxpy(float a, const float* x, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += blockDim.x * gridDim.x) y[i] = a * x[i] + y[i];
}

int main(int argc, char** argv) {
  const int device = find_cuda_device(argc, argv);
  cudaFuncAttributes attr;
  checkCudaErrors(cudaFuncGetAttributes(&attr, saxpy));
  std::printf("saxpy: max %d threads per block, %d registers, %zu bytes of static shared memory, PTX %d, SASS %d\n",
              attr.maxThreadsPerBlock, attr.numRegs, attr.sharedSizeBytes, attr.ptxVersion, attr.binaryVersion);
  int min_grid = 0, block = 0;
  checkCudaErrors(cudaOccupancyMaxPotentialBlockSize(&min_grid, &block, saxpy, 0, 0));
  int per_sm = 0, sms = 0;
  checkCudaErrors(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, saxpy, block, 0));
  checkCudaErrors(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  std::printf("suggested block size %d, minimum grid %d, %d blocks per SM on %d SMs\n", block, min_grid, per_sm, sms);
  int flagged = 0;
  checkCudaErrors(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&flagged, saxpy, block, 0,
                                                                         cudaOccupancyDisableCachingOverride));
  std::printf("with caching override disabled: %d blocks per SM\n", flagged);
  const int n = 1 << 22;
  float *x, *y;
  checkCudaErrors(cudaMalloc(&x, n * sizeof(float)));
  checkCudaErrors(cudaMalloc(&y, n * sizeof(float)));
  checkCudaErrors(cudaMemset(x, 0, n * sizeof(float)));
  checkCudaErrors(cudaMemset(y, 0, n * sizeof(float)));
  const float two = 2.0f;
  checkCudaErrors(cudaMemcpy(x, &two, sizeof two, cudaMemcpyHostToDevice));
  saxpy<<<per_sm * sms, block>>>(3.0f, x, y, n);
  getLastCudaError("saxpy");
  float first = 0.0f, last = 1.0f;
  checkCudaErrors(cudaMemcpy(&first, y, sizeof first, cudaMemcpyDeviceToHost));
  checkCudaErrors(cudaMemcpy(&last, y + n - 1, sizeof last, cudaMemcpyDeviceToHost));
  std::printf("y[0] = %.1f, y[n-1] = %.1f\n", first, last);
  checkCudaErrors(cudaFree(x));
  checkCudaErrors(cudaFree(y));
  if (block <= 0 || min_grid <= 0 || per_sm <= 0 || first != 6.0f || last != 0.0f) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("occupancy_launch: PASS\n");
  return 0;
}
