// SPDX-License-Identifier: Apache-2.0
// Device-side printf: the output reaches the host at the synchronisation,
// in the order the device wrote it; the FIFO size is a limit.
#include "helper_samples.cuh"

__global__ void greet(int round) {
  // One thread writes every line, so their order is the program's.
  if (threadIdx.x == 0 && blockIdx.x == 0) {
    for (int line = 0; line < 3; ++line) printf("round %d, line %d: %s\n", round, line, "hello from the device");
  }
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  size_t fifo = 0;
  checkCudaErrors(cudaDeviceSetLimit(cudaLimitPrintfFifoSize, 4 << 20));
  checkCudaErrors(cudaDeviceGetLimit(&fifo, cudaLimitPrintfFifoSize));
  std::printf("printf FIFO: %zu bytes\n", fifo);
  std::fflush(stdout);
  for (int round = 0; round < 2; ++round) {
    greet<<<2, 64>>>(round);
    getLastCudaError("greet");
    checkCudaErrors(cudaDeviceSynchronize());
    std::fflush(stdout);
  }
  std::printf("kernel_printf: PASS\n");
  return 0;
}
