// SPDX-License-Identifier: Apache-2.0
// The driver state a Runtime-API program leaves behind at each call: after
// every step, the primary context of each device (active or not, its flags)
// and this thread's current context, read from the driver itself, the way
// examples/init_order observes drvshim. Built against the real cudart and
// against libdrvshim_cudart (lazy policy), the two transcripts must be
// identical: the same state transitions at the same calls.
//
// The observer opens the driver the program's runtime uses (DRVSHIM_LIBCUDA
// when set, as runtime_compat does, else libcuda.so.1) and never creates,
// retains or switches a context itself: cuInit, cuDevicePrimaryCtxGetState,
// cuCtxGetCurrent and cuCtxGetDevice only.
#include <cuda.h>
#include <dlfcn.h>

#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "check.cuh"

namespace {

struct Driver {
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*device_get)(CUdevice*, int) = nullptr;
  CUresult (*primary_state)(CUdevice, unsigned*, int*) = nullptr;
  CUresult (*get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_device)(CUdevice*) = nullptr;
};
Driver g_cu;
int g_devices = 0;
std::vector<CUcontext> g_seen;  // contexts in the order first seen: #1, #2, ...

using GetProcAddress = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
GetProcAddress g_get_proc = nullptr;

// Through cuGetProcAddress, as the CUDA Runtime itself finds the driver's
// entry points, each at the version whose signature is declared above (CUDA
// 13 answers "cuCtxGetDevice" at 13000 with the two-argument form).
template <class F>
bool resolve(const char* name, int version, F& fn) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult found = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  if (g_get_proc(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &found) != CUDA_SUCCESS || p == nullptr) {
    std::fprintf(stderr, "WRONG RESULT: context_state: the driver has no %s\n", name);
    return false;
  }
  fn = reinterpret_cast<F>(p);
  return true;
}

bool open_driver() {
  const char* path = std::getenv("DRVSHIM_LIBCUDA");
  void* lib = dlopen(path != nullptr && *path != '\0' ? path : "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) {
    std::fprintf(stderr, "WRONG RESULT: context_state: %s\n", dlerror());
    return false;
  }
  g_get_proc = reinterpret_cast<GetProcAddress>(dlsym(lib, "cuGetProcAddress_v2"));
  if (g_get_proc == nullptr) {
    std::fprintf(stderr, "WRONG RESULT: context_state: the driver has no cuGetProcAddress_v2\n");
    return false;
  }
  return resolve("cuInit", 2000, g_cu.init) && resolve("cuDeviceGet", 2000, g_cu.device_get) &&
         resolve("cuDevicePrimaryCtxGetState", 7000, g_cu.primary_state) &&
         resolve("cuCtxGetCurrent", 4000, g_cu.get_current) && resolve("cuCtxGetDevice", 2000, g_cu.ctx_device) &&
         g_cu.init(0) == CUDA_SUCCESS;  // cuInit makes no context: the runtimes' own calls still decide
}

int label_of(CUcontext ctx) {
  for (std::size_t i = 0; i < g_seen.size(); ++i) {
    if (g_seen[i] == ctx) return static_cast<int>(i) + 1;
  }
  g_seen.push_back(ctx);
  return static_cast<int>(g_seen.size());
}

// One line per step: the call's result, then the state it left.
void observe(const char* step, cudaError_t result) {
  std::printf("%-34s -> %-28s", step, cudaGetErrorName(result));
  for (int d = 0; d < g_devices && d < 2; ++d) {
    CUdevice dev = 0;
    unsigned flags = 0;
    int active = 0;
    if (g_cu.device_get(&dev, d) != CUDA_SUCCESS || g_cu.primary_state(dev, &flags, &active) != CUDA_SUCCESS) {
      std::printf(" | device %d: WRONG RESULT (cuDevicePrimaryCtxGetState failed)", d);
      continue;
    }
    std::printf(" | device %d: %s flags 0x%x", d, active != 0 ? "active  " : "inactive", flags);
  }
  CUcontext current = nullptr;
  if (g_cu.get_current(&current) != CUDA_SUCCESS) {
    std::printf(" | current: WRONG RESULT (cuCtxGetCurrent failed)\n");
    return;
  }
  if (current == nullptr) {
    std::printf(" | current: none\n");
    return;
  }
  CUdevice dev = -1;
  const CUresult r = g_cu.ctx_device(&dev);
  if (r == CUDA_SUCCESS) {
    std::printf(" | current: context #%d of device %d\n", label_of(current), static_cast<int>(dev));
  } else {  // a context destroyed under this thread (a reset) stays current: the driver says so
    std::printf(" | current: context #%d, cuCtxGetDevice -> error %d\n", label_of(current), static_cast<int>(r));
  }
}

}  // namespace

__global__ void touch(int* p) { p[threadIdx.x] = static_cast<int>(threadIdx.x); }

int main() {
  if (!open_driver()) return 1;
  int count = 0;
  std::printf("context_state: the driver's state after each Runtime-API call\n");
  observe("(start)", cudaSuccess);
  observe("cudaGetDeviceCount", cudaGetDeviceCount(&count));
  g_devices = count;
  observe("cudaGetDeviceCount (again)", cudaSuccess);
  int device = -1;
  observe("cudaGetDevice", cudaGetDevice(&device));
  observe("cudaSetDeviceFlags(blocking sync)", cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync));
  cudaDeviceProp prop = {};
  observe("cudaGetDeviceProperties(0)", cudaGetDeviceProperties(&prop, 0));
  observe("cudaSetDevice(0)", cudaSetDevice(0));
  int* p = nullptr;
  observe("cudaMalloc", cudaMalloc(&p, 1 << 20));
  touch<<<1, 32>>>(p);
  observe("touch<<<1, 32>>>", cudaGetLastError());
  observe("cudaDeviceSynchronize", cudaDeviceSynchronize());
  observe("cudaSetDeviceFlags(map host)", cudaSetDeviceFlags(cudaDeviceMapHost));
  observe("cudaFree(p)", cudaFree(p));
  std::thread([] {
    observe("other thread: (start)", cudaSuccess);
    observe("other thread: cudaFree(nullptr)", cudaFree(nullptr));
  }).join();
  observe("cudaDeviceReset", cudaDeviceReset());
  observe("cudaGetLastError", cudaGetLastError());
  observe("cudaFree(nullptr)", cudaFree(nullptr));
  if (count > 1) {
    observe("cudaSetDevice(1)", cudaSetDevice(1));
    observe("cudaMalloc on device 1", cudaMalloc(&p, 1 << 20));
    observe("cudaFree(p) on device 1", cudaFree(p));
    observe("cudaSetDevice(0)", cudaSetDevice(0));
  }
  observe("cudaDeviceReset", cudaDeviceReset());
  std::printf("context_state: done\n");
  return 0;
}
