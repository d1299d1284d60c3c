// SPDX-License-Identifier: Apache-2.0
// Enumerates the devices and prints what programs commonly read about them:
// properties, attributes, versions, limits (in the manner of deviceQuery).
#include "helper_samples.cuh"

int main() {
  int count = 0;
  checkCudaErrors(cudaGetDeviceCount(&count));
  int driver = 0, runtime = 0;
  checkCudaErrors(cudaDriverGetVersion(&driver));
  checkCudaErrors(cudaRuntimeGetVersion(&runtime));
  std::printf("Detected %d CUDA capable device(s)\n", count);
  std::printf("CUDA driver version %d.%d, runtime version %d.%d\n", driver / 1000, (driver % 100) / 10, runtime / 1000,
              (runtime % 100) / 10);
  for (int d = 0; d < count; ++d) {
    checkCudaErrors(cudaSetDevice(d));
    cudaDeviceProp p;
    checkCudaErrors(cudaGetDeviceProperties(&p, d));
    std::printf("\nDevice %d: \"%s\"\n", d, p.name);
    std::printf("  Compute capability:                      %d.%d\n", p.major, p.minor);
    std::printf("  Global memory:                           %zu MiB\n", p.totalGlobalMem >> 20);
    std::printf("  Multiprocessors:                         %d (%d cores/MP)\n", p.multiProcessorCount,
                cores_per_sm(p.major, p.minor));
    std::printf("  L2 cache:                                %d bytes (persisting max %d)\n", p.l2CacheSize,
                p.persistingL2CacheMaxSize);
    std::printf("  Memory bus width:                        %d bits\n", p.memoryBusWidth);
    std::printf("  Constant memory:                         %zu bytes\n", p.totalConstMem);
    std::printf("  Shared memory per block:                 %zu bytes (opt-in %zu)\n", p.sharedMemPerBlock,
                p.sharedMemPerBlockOptin);
    std::printf("  Shared memory per multiprocessor:        %zu bytes\n", p.sharedMemPerMultiprocessor);
    std::printf("  Registers per block:                     %d\n", p.regsPerBlock);
    std::printf("  Warp size:                               %d\n", p.warpSize);
    std::printf("  Max threads per multiprocessor:          %d\n", p.maxThreadsPerMultiProcessor);
    std::printf("  Max threads per block:                   %d\n", p.maxThreadsPerBlock);
    std::printf("  Max block dimensions:                    (%d, %d, %d)\n", p.maxThreadsDim[0], p.maxThreadsDim[1],
                p.maxThreadsDim[2]);
    std::printf("  Max grid dimensions:                     (%d, %d, %d)\n", p.maxGridSize[0], p.maxGridSize[1],
                p.maxGridSize[2]);
    std::printf("  Max blocks per multiprocessor:           %d\n", p.maxBlocksPerMultiProcessor);
    std::printf("  Max memory pitch:                        %zu bytes\n", p.memPitch);
    std::printf("  Texture alignment:                       %zu bytes\n", p.textureAlignment);
    std::printf("  Concurrent copy engines:                 %d\n", p.asyncEngineCount);
    std::printf("  Concurrent kernels:                      %s\n", p.concurrentKernels ? "yes" : "no");
    std::printf("  Integrated:                              %s\n", p.integrated ? "yes" : "no");
    std::printf("  Maps host memory:                        %s\n", p.canMapHostMemory ? "yes" : "no");
    std::printf("  Unified addressing:                      %s\n", p.unifiedAddressing ? "yes" : "no");
    std::printf("  Managed memory:                          %s (concurrent access %s)\n",
                p.managedMemory ? "yes" : "no", p.concurrentManagedAccess ? "yes" : "no");
    std::printf("  Cooperative launch:                      %s\n", p.cooperativeLaunch ? "yes" : "no");
    std::printf("  Cluster launch:                          %s\n", p.clusterLaunch ? "yes" : "no");
    std::printf("  Memory pools:                            %s\n", p.memoryPoolsSupported ? "yes" : "no");
    std::printf("  Host memory registration:                %s (read-only %s)\n",
                p.hostRegisterSupported ? "yes" : "no", p.hostRegisterReadOnlySupported ? "yes" : "no");
    std::printf("  ECC:                                     %s\n", p.ECCEnabled ? "on" : "off");
    std::printf("  PCI domain/bus/device:                   %d / %d / %d\n", p.pciDomainID, p.pciBusID, p.pciDeviceID);
    int mode = 0, clock = 0, memclock = 0, priorities = 0;
    checkCudaErrors(cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, d));
    checkCudaErrors(cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, d));
    checkCudaErrors(cudaDeviceGetAttribute(&memclock, cudaDevAttrMemoryClockRate, d));
    checkCudaErrors(cudaDeviceGetAttribute(&priorities, cudaDevAttrStreamPrioritiesSupported, d));
    std::printf("  Compute mode:                            %d\n", mode);
    std::printf("  GPU clock / memory clock:                %d / %d kHz\n", clock, memclock);
    std::printf("  Stream priorities:                       %s\n", priorities ? "yes" : "no");
    char bus[32];
    checkCudaErrors(cudaDeviceGetPCIBusId(bus, sizeof bus, d));
    std::printf("  PCI bus id:                              %s\n", bus);
    size_t stack = 0, fifo = 0, heap = 0;
    checkCudaErrors(cudaDeviceGetLimit(&stack, cudaLimitStackSize));
    checkCudaErrors(cudaDeviceGetLimit(&fifo, cudaLimitPrintfFifoSize));
    checkCudaErrors(cudaDeviceGetLimit(&heap, cudaLimitMallocHeapSize));
    std::printf("  Limits: stack %zu, printf FIFO %zu, malloc heap %zu bytes\n", stack, fifo, heap);
    std::printf("  UUID starts with:                        %02x%02x%02x%02x\n",
                static_cast<unsigned char>(p.uuid.bytes[0]), static_cast<unsigned char>(p.uuid.bytes[1]),
                static_cast<unsigned char>(p.uuid.bytes[2]), static_cast<unsigned char>(p.uuid.bytes[3]));
  }
  std::printf("\nResult = PASS\n");
  return 0;
}
