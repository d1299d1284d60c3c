#pragma once
/// @file runtime_compat.hpp
/// The CUDA Runtime API's policy, reproduced on top of drvshim and made
/// visible. Functions are named after their cudart counterparts (in
/// drvshim::rt), return cudart-numbered error codes, keep a per-thread last
/// error and a per-thread current device. Under the lazy policy (the
/// Runtime's) each implicit step — loading libcuda, cuInit, retaining a
/// primary context, making it current, loading a module — happens at the
/// first call that needs it; under the eager policy all of them happen
/// together at the first call (or at setup()). Every implicit step is logged
/// at info level naming the call that triggered it, and marked in the trace
/// ("rt-implicit").
///
/// libdrvshim_cudart.so exports this layer under the C names nvcc-built
/// programs link against (docs/runtime-compat.md).
#include <drvshim/export.hpp>

#include <cstddef>
#include <cstdint>
#include <string>

namespace drvshim::rt {

/// cudaError_t numbering (the subset runtime_compat produces).
enum class Error : int {
  success = 0,
  invalid_value = 1,
  memory_allocation = 2,
  initialization_error = 3,
  cudart_unloading = 4,
  invalid_configuration = 9,
  invalid_device_pointer = 17,
  invalid_memcpy_direction = 21,
  stub_library = 34,
  insufficient_driver = 35,
  invalid_device_function = 98,
  no_device = 100,
  invalid_device = 101,
  invalid_kernel_image = 200,
  device_uninitialized = 201,
  no_kernel_image_for_device = 209,
  invalid_resource_handle = 400,
  symbol_not_found = 500,
  not_ready = 600,
  illegal_address = 700,
  launch_out_of_resources = 701,
  host_memory_already_registered = 712,
  host_memory_not_registered = 713,
  launch_failure = 719,
  not_permitted = 800,
  not_supported = 801,
  unknown = 999,
};

/// "cudaErrorInvalidValue", ... (cudaGetErrorName).
DRVSHIM_API const char* error_name(Error e) noexcept;
/// A sentence (cudaGetErrorString).
DRVSHIM_API const char* error_string(Error e) noexcept;

/// The Runtime's lazy policy, or everything set up at once.
enum class Policy { lazy, eager };
/// Sets the policy for the calls that follow (default: DRVSHIM_RT_POLICY=eager|lazy, else lazy).
DRVSHIM_API void set_policy(Policy policy) noexcept;
DRVSHIM_API Policy policy() noexcept;
/// The eager set-up, now: load, cuInit, retain and make current the calling
/// thread's device's primary context, load the registered modules.
DRVSHIM_API Error setup();
/// Releases everything runtime_compat holds (allocations, streams, events,
/// modules, primary-context retains, the driver handle); the next call starts
/// over. Registered modules stay registered. For tests and orderly shutdown.
DRVSHIM_API void shutdown() noexcept;

/// The detail of the last error set on this thread (what drvshim threw).
DRVSHIM_API std::string last_error_detail();

/// cudaMemcpyKind.
enum class MemcpyKind : int { host_to_host = 0, host_to_device = 1, device_to_host = 2, device_to_device = 3, default_ = 4 };

/// What cudaGetDeviceProperties fills (the fields runtime_compat knows).
struct DeviceProperties {
  std::string name;
  std::size_t total_global_mem = 0;
  int major = 0, minor = 0;
  int multi_processor_count = 0;
  int max_threads_per_block = 0;
  int warp_size = 0;
  int can_map_host_memory = 0;
  int integrated = 0;
  int unified_addressing = 0;
  int pci_bus_id = 0, pci_device_id = 0, pci_domain_id = 0;
  int async_engine_count = 0;
  int concurrent_managed_access = 0;
  int host_register_supported = 0;
};

// ---- device and driver ---------------------------------------------------------------------------
DRVSHIM_API Error cudaGetDeviceCount(int* count);
DRVSHIM_API Error cudaSetDevice(int device);
DRVSHIM_API Error cudaGetDevice(int* device);
DRVSHIM_API Error cudaDeviceSynchronize();
/// Frees what runtime_compat allocated on the current device and releases its
/// primary-context retain (the context deactivates unless another component holds it).
DRVSHIM_API Error cudaDeviceReset();
DRVSHIM_API Error cudaGetDeviceProperties(DeviceProperties* props, int device);
DRVSHIM_API Error cudaDriverGetVersion(int* version);

// ---- memory -------------------------------------------------------------------------------------
DRVSHIM_API Error cudaMalloc(void** ptr, std::size_t bytes);
DRVSHIM_API Error cudaFree(void* ptr);
DRVSHIM_API Error cudaMemcpy(void* dst, const void* src, std::size_t bytes, MemcpyKind kind);
DRVSHIM_API Error cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind kind, void* stream);
DRVSHIM_API Error cudaMemset(void* ptr, int value, std::size_t bytes);
/// cudaHostAlloc flags: cudaHostAllocPortable 1, cudaHostAllocMapped 2, cudaHostAllocWriteCombined 4.
DRVSHIM_API Error cudaHostAlloc(void** ptr, std::size_t bytes, unsigned flags);
DRVSHIM_API Error cudaMallocHost(void** ptr, std::size_t bytes);
DRVSHIM_API Error cudaFreeHost(void* ptr);
DRVSHIM_API Error cudaHostGetDevicePointer(void** device, void* host, unsigned flags);
/// cudaHostRegister flags: Portable 1, Mapped 2, IoMemory 4, ReadOnly 8.
DRVSHIM_API Error cudaHostRegister(void* ptr, std::size_t bytes, unsigned flags);
DRVSHIM_API Error cudaHostUnregister(void* ptr);

// ---- streams and events (handles are the driver's, as in cudart) -------------------------------------
DRVSHIM_API Error cudaStreamCreate(void** stream);
/// flags: cudaStreamDefault 0, cudaStreamNonBlocking 1.
DRVSHIM_API Error cudaStreamCreateWithFlags(void** stream, unsigned flags);
DRVSHIM_API Error cudaStreamDestroy(void* stream);
DRVSHIM_API Error cudaStreamSynchronize(void* stream);
DRVSHIM_API Error cudaStreamQuery(void* stream);
DRVSHIM_API Error cudaStreamWaitEvent(void* stream, void* event, unsigned flags);
DRVSHIM_API Error cudaEventCreate(void** event);
/// flags: cudaEventBlockingSync 1, cudaEventDisableTiming 2.
DRVSHIM_API Error cudaEventCreateWithFlags(void** event, unsigned flags);
DRVSHIM_API Error cudaEventDestroy(void* event);
DRVSHIM_API Error cudaEventRecord(void* event, void* stream);
DRVSHIM_API Error cudaEventSynchronize(void* event);
DRVSHIM_API Error cudaEventQuery(void* event);
DRVSHIM_API Error cudaEventElapsedTime(float* ms, void* start, void* end);

// ---- errors ---------------------------------------------------------------------------------------
/// Returns and clears this thread's last error.
DRVSHIM_API Error cudaGetLastError() noexcept;
/// Returns it without clearing.
DRVSHIM_API Error cudaPeekAtLastError() noexcept;

// ---- modules and launches (what nvcc's generated code calls) ------------------------------------------
/// Registers a fatbin (nvcc's __fatBinC_Wrapper_t data). It is loaded later,
/// at a moment runtime_compat chooses and logs (the first launch of one of its
/// kernels, or the eager set-up). Returns a handle for register_function.
DRVSHIM_API void* register_fatbin(const void* fatbin);
DRVSHIM_API void unregister_fatbin(void* handle) noexcept;
/// Maps a host stub (the address nvcc uses for a __global__ function) to its device name.
DRVSHIM_API void register_function(void* handle, const void* host_stub, const char* device_name);
/// A __device__ variable nvcc registers: accepted (so registration never
/// aborts a program) and logged; symbol copies are outside the subset.
DRVSHIM_API void register_variable(void* handle, const char* name) noexcept;
/// The kernel handle for a host stub (__cudaGetKernel): loads its module if needed.
DRVSHIM_API Error get_kernel(void** kernel, const void* host_stub);
struct Dim {
  unsigned x = 1, y = 1, z = 1;
};
/// Launches a kernel handle from get_kernel (__cudaLaunchKernel) with nvcc's argument array.
DRVSHIM_API Error launch_kernel(void* kernel, Dim grid, Dim block, void** args, std::size_t shared_bytes, void* stream);
/// The legacy path: by host stub (cudaLaunchKernel).
DRVSHIM_API Error cudaLaunchKernel(const void* host_stub, Dim grid, Dim block, void** args, std::size_t shared_bytes,
                                   void* stream);
/// Records a call outside the subset: logs an error naming it and returns not_supported.
DRVSHIM_API Error unsupported(const char* function) noexcept;

}  // namespace drvshim::rt
