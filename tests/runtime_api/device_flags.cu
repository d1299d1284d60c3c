// SPDX-License-Identifier: Apache-2.0
// Device selection and flags the way applications set them up: scheduling
// flags before the device is initialised, cudaChooseDevice, the PCI bus id
// round trip, cudaInitDevice, the profiler switches.
#include <cuda_profiler_api.h>

#include "helper_samples.cuh"

int main() {
  checkCudaErrors(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  unsigned flags = 0;
  checkCudaErrors(cudaGetDeviceFlags(&flags));
  std::printf("flags before initialisation: blocking sync %s\n",
              (flags & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync ? "yes" : "no");
  cudaDeviceProp want = {};
  want.major = 7;
  want.minor = 0;
  int chosen = -1;
  checkCudaErrors(cudaChooseDevice(&chosen, &want));
  std::printf("cudaChooseDevice(7.0 or better): device %d\n", chosen);
  checkCudaErrors(cudaSetDevice(chosen));
  checkCudaErrors(cudaInitDevice(chosen, 0, 0));
  checkCudaErrors(cudaGetDeviceFlags(&flags));
  std::printf("flags after initialisation: blocking sync %s\n",
              (flags & cudaDeviceScheduleMask) == cudaDeviceScheduleBlockingSync ? "yes" : "no");
  char bus[32];
  checkCudaErrors(cudaDeviceGetPCIBusId(bus, sizeof bus, chosen));
  int back = -1;
  checkCudaErrors(cudaDeviceGetByPCIBusId(&back, bus));
  std::printf("PCI bus id round trip: device %d -> device %d\n", chosen, back);
  checkCudaErrors(cudaProfilerStart());
  void* p = nullptr;
  checkCudaErrors(cudaMalloc(&p, 1 << 20));
  checkCudaErrors(cudaMemset(p, 0, 1 << 20));
  checkCudaErrors(cudaDeviceSynchronize());
  checkCudaErrors(cudaProfilerStop());
  checkCudaErrors(cudaFree(p));
  if (back != chosen) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("device_flags: PASS\n");
  return 0;
}
