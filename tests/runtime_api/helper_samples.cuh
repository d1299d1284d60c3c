// SPDX-License-Identifier: Apache-2.0
// Helpers the Runtime-API corpus shares, in the manner of the CUDA samples'
// helper headers (written for drvshim): error checks that name the call, file
// and line and exit; the usual device selection from attributes and
// properties. Lines a program prints starting with "[time]" carry timings:
// the GPU comparison (tools/gpu/run-runtime-api.sh) ignores them.
#pragma once
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

template <class T>
void check(T result, const char* call, const char* file, int line) {
  if (result != cudaSuccess) {
    std::fprintf(stderr, "CUDA error at %s:%d code=%d(%s) \"%s\"\n", file, line, static_cast<int>(result),
                 cudaGetErrorName(result), call);
    std::exit(EXIT_FAILURE);
  }
}
#define checkCudaErrors(val) check((val), #val, __FILE__, __LINE__)

inline void last_error_check(const char* message, const char* file, int line) {
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) {
    std::fprintf(stderr, "%s(%d) : getLastCudaError() CUDA error : %s : (%d) %s.\n", file, line, message,
                 static_cast<int>(e), cudaGetErrorString(e));
    std::exit(EXIT_FAILURE);
  }
}
#define getLastCudaError(msg) last_error_check(msg, __FILE__, __LINE__)

// FP32 cores per multiprocessor, by compute capability.
inline int cores_per_sm(int major, int minor) {
  struct Entry {
    int sm;
    int cores;
  };
  static const Entry table[] = {{0x50, 128}, {0x52, 128}, {0x53, 128}, {0x60, 64},  {0x61, 128}, {0x62, 128},
                                {0x70, 64},  {0x72, 64},  {0x75, 64},  {0x80, 64},  {0x86, 128}, {0x87, 128},
                                {0x89, 128}, {0x90, 128}, {0xa0, 128}, {0xa1, 128}, {0xc0, 128}};
  const int sm = (major << 4) + minor;
  for (const auto& e : table) {
    if (e.sm == sm) return e.cores;
  }
  return 128;
}

// The device with the most single-precision throughput among those whose
// compute mode allows this process to use them.
inline int max_gflops_device() {
  int count = 0;
  checkCudaErrors(cudaGetDeviceCount(&count));
  int best = -1;
  unsigned long long best_perf = 0;
  for (int d = 0; d < count; ++d) {
    int mode = 0, major = 0, minor = 0, sms = 0, clock = 0;
    checkCudaErrors(cudaDeviceGetAttribute(&mode, cudaDevAttrComputeMode, d));
    if (mode == cudaComputeModeProhibited) continue;
    checkCudaErrors(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, d));
    checkCudaErrors(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, d));
    checkCudaErrors(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, d));
    checkCudaErrors(cudaDeviceGetAttribute(&clock, cudaDevAttrClockRate, d));
    const unsigned long long perf = static_cast<unsigned long long>(sms) * cores_per_sm(major, minor) * clock;
    if (best < 0 || perf > best_perf) {
      best = d;
      best_perf = perf;
    }
  }
  if (best < 0) {
    std::fprintf(stderr, "no CUDA device this process may use\n");
    std::exit(EXIT_FAILURE);
  }
  return best;
}

// Selects the device: "-device=N" on the command line, else the fastest one.
inline int find_cuda_device(int argc, char** argv) {
  int device = -1;
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "-device=", 8) == 0) device = std::atoi(argv[i] + 8);
  }
  if (device < 0) device = max_gflops_device();
  checkCudaErrors(cudaSetDevice(device));
  cudaDeviceProp prop;
  checkCudaErrors(cudaGetDeviceProperties(&prop, device));
  std::printf("GPU Device %d: \"%s\" with compute capability %d.%d\n\n", device, prop.name, prop.major, prop.minor);
  return device;
}
