// libdrvshim_cudart.so: drvshim::rt under the C names (and the cudart ABI)
// that programs built with `nvcc -cudart none` link against. The toolkit's
// cuda_runtime_api.h declares each function, so the compiler checks every
// signature here against cudart's own.
#include <cuda_runtime_api.h>
#include <drvshim/runtime_compat.hpp>
#include <drvshim/trace.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#define DRVSHIM_CUDART extern "C" __attribute__((visibility("default")))

namespace rt = drvshim::rt;

namespace {

cudaError_t c(rt::Error e) noexcept { return static_cast<cudaError_t>(static_cast<int>(e)); }
rt::Dim d(dim3 v) noexcept { return {v.x, v.y, v.z}; }

// <<<grid, block, shared, stream>>> pushes a configuration the launch stub pops.
struct CallConfiguration {
  dim3 grid, block;
  size_t shared;
  cudaStream_t stream;
};
thread_local std::vector<CallConfiguration> t_configurations;

// DRVSHIM_RT_TRACE=1: record the trace from the first call and print the
// init timeline to stderr at exit (no driver call is made then).
struct TraceAtExit {
  TraceAtExit() {
    const char* env = std::getenv("DRVSHIM_RT_TRACE");
    if (env == nullptr || *env == '\0' || std::strcmp(env, "0") == 0) return;
    drvshim::trace::enable(true);
    std::atexit([] {
      std::fprintf(stderr, "\nlibdrvshim_cudart: driver-call timeline (drvshim trace)\n%s",
                   drvshim::trace::format_timeline(drvshim::trace::records()).c_str());
    });
  }
};
const TraceAtExit g_trace_at_exit;

}  // namespace

// ---- registration and launch (nvcc's generated code) --------------------------------------------

struct FatbinWrapper {  // __fatBinC_Wrapper_t
  int magic;
  int version;
  const unsigned long long* data;
  void* filename_or_fatbins;
};

DRVSHIM_CUDART void** __cudaRegisterFatBinary(void* fat_cubin) {
  const auto* wrapper = static_cast<const FatbinWrapper*>(fat_cubin);
  return static_cast<void**>(rt::register_fatbin(wrapper->data));
}
DRVSHIM_CUDART void __cudaRegisterFatBinaryEnd(void**) {}
DRVSHIM_CUDART void __cudaUnregisterFatBinary(void** handle) { rt::unregister_fatbin(handle); }
DRVSHIM_CUDART void __cudaRegisterFunction(void** handle, const char* host_fun, char*, const char* device_name, int,
                                           uint3*, uint3*, dim3*, dim3*, int*) {
  rt::register_function(handle, host_fun, device_name);
}
DRVSHIM_CUDART void __cudaRegisterVar(void** handle, char*, char*, const char* name, int, size_t, int, int) {
  rt::register_variable(handle, name);
}

DRVSHIM_CUDART unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, struct CUstream_st* stream) {
  t_configurations.push_back({grid, block, shared, stream});
  return 0;
}
DRVSHIM_CUDART cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared, void* stream) {
  if (t_configurations.empty()) return cudaErrorMissingConfiguration;
  const CallConfiguration cfg = t_configurations.back();
  t_configurations.pop_back();
  *grid = cfg.grid;
  *block = cfg.block;
  *shared = cfg.shared;
  *static_cast<cudaStream_t*>(stream) = cfg.stream;
  return cudaSuccess;
}
DRVSHIM_CUDART cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* host_stub) {
  return c(rt::get_kernel(reinterpret_cast<void**>(kernel), host_stub));
}
DRVSHIM_CUDART cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shared,
                                              cudaStream_t stream) {
  return c(rt::launch_kernel(kernel, d(grid), d(block), args, shared, stream));
}
DRVSHIM_CUDART cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                                   size_t shared, cudaStream_t stream) {
  // Compiled for the per-thread default stream: 0 means that stream (CU_STREAM_PER_THREAD).
  cudaStream_t s = stream != nullptr ? stream : reinterpret_cast<cudaStream_t>(0x2);
  return c(rt::launch_kernel(kernel, d(grid), d(block), args, shared, s));
}
DRVSHIM_CUDART cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                                            cudaStream_t stream) {
  return c(rt::cudaLaunchKernel(func, d(grid), d(block), args, shared, stream));
}

// ---- device ------------------------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaGetDeviceCount(int* count) { return c(rt::cudaGetDeviceCount(count)); }
DRVSHIM_CUDART cudaError_t cudaSetDevice(int device) { return c(rt::cudaSetDevice(device)); }
DRVSHIM_CUDART cudaError_t cudaGetDevice(int* device) { return c(rt::cudaGetDevice(device)); }
DRVSHIM_CUDART cudaError_t cudaDeviceSynchronize() { return c(rt::cudaDeviceSynchronize()); }
DRVSHIM_CUDART cudaError_t cudaDeviceReset() { return c(rt::cudaDeviceReset()); }
DRVSHIM_CUDART cudaError_t cudaDriverGetVersion(int* version) { return c(rt::cudaDriverGetVersion(version)); }
DRVSHIM_CUDART cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return cudaErrorInvalidValue;
  *version = CUDART_VERSION;  // the toolkit headers this library was built with
  return cudaSuccess;
}
DRVSHIM_CUDART cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (prop == nullptr) return cudaErrorInvalidValue;
  rt::DeviceProperties p;
  const rt::Error e = rt::cudaGetDeviceProperties(&p, device);
  if (e != rt::Error::success) return c(e);
  std::memset(prop, 0, sizeof *prop);  // fields outside the subset read as 0
  std::snprintf(prop->name, sizeof prop->name, "%s", p.name.c_str());
  prop->totalGlobalMem = p.total_global_mem;
  prop->major = p.major;
  prop->minor = p.minor;
  prop->multiProcessorCount = p.multi_processor_count;
  prop->maxThreadsPerBlock = p.max_threads_per_block;
  prop->warpSize = p.warp_size;
  prop->canMapHostMemory = p.can_map_host_memory;
  prop->integrated = p.integrated;
  prop->unifiedAddressing = p.unified_addressing;
  prop->pciBusID = p.pci_bus_id;
  prop->pciDeviceID = p.pci_device_id;
  prop->pciDomainID = p.pci_domain_id;
  prop->asyncEngineCount = p.async_engine_count;
  prop->concurrentManagedAccess = p.concurrent_managed_access;
  prop->hostRegisterSupported = p.host_register_supported;
  return cudaSuccess;
}

// ---- memory ------------------------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaMalloc(void** ptr, size_t bytes) { return c(rt::cudaMalloc(ptr, bytes)); }
DRVSHIM_CUDART cudaError_t cudaFree(void* ptr) { return c(rt::cudaFree(ptr)); }
DRVSHIM_CUDART cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  return c(rt::cudaMemcpy(dst, src, bytes, static_cast<rt::MemcpyKind>(kind)));
}
DRVSHIM_CUDART cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                           cudaStream_t stream) {
  return c(rt::cudaMemcpyAsync(dst, src, bytes, static_cast<rt::MemcpyKind>(kind), stream));
}
DRVSHIM_CUDART cudaError_t cudaMemset(void* ptr, int value, size_t bytes) { return c(rt::cudaMemset(ptr, value, bytes)); }
DRVSHIM_CUDART cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  return c(rt::cudaHostAlloc(ptr, bytes, flags));
}
DRVSHIM_CUDART cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return c(rt::cudaMallocHost(ptr, bytes)); }
DRVSHIM_CUDART cudaError_t cudaFreeHost(void* ptr) { return c(rt::cudaFreeHost(ptr)); }
DRVSHIM_CUDART cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned flags) {
  return c(rt::cudaHostGetDevicePointer(device, host, flags));
}
DRVSHIM_CUDART cudaError_t cudaHostRegister(void* ptr, size_t bytes, unsigned flags) {
  return c(rt::cudaHostRegister(ptr, bytes, flags));
}
DRVSHIM_CUDART cudaError_t cudaHostUnregister(void* ptr) { return c(rt::cudaHostUnregister(ptr)); }

// ---- streams and events --------------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  return c(rt::cudaStreamCreate(reinterpret_cast<void**>(stream)));
}
DRVSHIM_CUDART cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  return c(rt::cudaStreamCreateWithFlags(reinterpret_cast<void**>(stream), flags));
}
DRVSHIM_CUDART cudaError_t cudaStreamDestroy(cudaStream_t stream) { return c(rt::cudaStreamDestroy(stream)); }
DRVSHIM_CUDART cudaError_t cudaStreamSynchronize(cudaStream_t stream) { return c(rt::cudaStreamSynchronize(stream)); }
DRVSHIM_CUDART cudaError_t cudaStreamQuery(cudaStream_t stream) { return c(rt::cudaStreamQuery(stream)); }
DRVSHIM_CUDART cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned flags) {
  return c(rt::cudaStreamWaitEvent(stream, event, flags));
}
DRVSHIM_CUDART cudaError_t cudaEventCreate(cudaEvent_t* event) {
  return c(rt::cudaEventCreate(reinterpret_cast<void**>(event)));
}
DRVSHIM_CUDART cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  return c(rt::cudaEventCreateWithFlags(reinterpret_cast<void**>(event), flags));
}
DRVSHIM_CUDART cudaError_t cudaEventDestroy(cudaEvent_t event) { return c(rt::cudaEventDestroy(event)); }
DRVSHIM_CUDART cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  return c(rt::cudaEventRecord(event, stream));
}
DRVSHIM_CUDART cudaError_t cudaEventSynchronize(cudaEvent_t event) { return c(rt::cudaEventSynchronize(event)); }
DRVSHIM_CUDART cudaError_t cudaEventQuery(cudaEvent_t event) { return c(rt::cudaEventQuery(event)); }
DRVSHIM_CUDART cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  return c(rt::cudaEventElapsedTime(ms, start, end));
}

// ---- errors --------------------------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaGetLastError() { return c(rt::cudaGetLastError()); }
DRVSHIM_CUDART cudaError_t cudaPeekAtLastError() { return c(rt::cudaPeekAtLastError()); }
DRVSHIM_CUDART const char* cudaGetErrorString(cudaError_t error) {
  return rt::error_string(static_cast<rt::Error>(static_cast<int>(error)));
}
DRVSHIM_CUDART const char* cudaGetErrorName(cudaError_t error) {
  return rt::error_name(static_cast<rt::Error>(static_cast<int>(error)));
}

// ---- outside the subset: a clear error naming the call, never a crash ---------------------------------------

DRVSHIM_CUDART cudaError_t cudaMallocManaged(void**, size_t, unsigned) { return c(rt::unsupported("cudaMallocManaged")); }
DRVSHIM_CUDART cudaError_t cudaMemcpyToSymbol(const void*, const void*, size_t, size_t, cudaMemcpyKind) {
  return c(rt::unsupported("cudaMemcpyToSymbol"));
}
DRVSHIM_CUDART cudaError_t cudaMemcpyFromSymbol(void*, const void*, size_t, size_t, cudaMemcpyKind) {
  return c(rt::unsupported("cudaMemcpyFromSymbol"));
}
DRVSHIM_CUDART cudaError_t cudaMallocPitch(void**, size_t*, size_t, size_t) { return c(rt::unsupported("cudaMallocPitch")); }
DRVSHIM_CUDART cudaError_t cudaMemcpy2D(void*, size_t, const void*, size_t, size_t, size_t, cudaMemcpyKind) {
  return c(rt::unsupported("cudaMemcpy2D"));
}
DRVSHIM_CUDART cudaError_t cudaFuncGetAttributes(cudaFuncAttributes*, const void*) {
  return c(rt::unsupported("cudaFuncGetAttributes"));
}
DRVSHIM_CUDART cudaError_t cudaDeviceGetAttribute(int*, cudaDeviceAttr, int) {
  return c(rt::unsupported("cudaDeviceGetAttribute"));
}
