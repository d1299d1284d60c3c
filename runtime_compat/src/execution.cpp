// SPDX-License-Identifier: Apache-2.0
// Execution control: launches (nvcc's __cudaLaunchKernel, the legacy
// cudaLaunchKernel, cooperative launches, cudaLaunchKernelExC), kernel
// attributes and cache preferences, occupancy.
#include <array>
#include <climits>
#include <cstddef>
#include <cstring>
#include <span>
#include <vector>

#include "registration.hpp"

using namespace drvshim;
using namespace drvshim::rt::impl;

namespace {

constexpr DefaultStream kLegacy = DefaultStream::legacy;
constexpr DefaultStream kPerThread = DefaultStream::per_thread;

struct LaunchRequest {
  dim3 grid, block;
  std::size_t shared = 0;
  cudaStream_t stream = nullptr;
  bool cooperative = false;
  std::optional<Dim3> cluster;
  std::span<const LaunchAttribute> attributes{};  // those without a field of their own, as given
};

// cudaLaunchAttribute numbers and lays out its attributes as the driver's
// CUlaunchAttribute (driver_types.h, cuda.h), which LaunchAttribute mirrors.
static_assert(sizeof(cudaLaunchAttribute) == sizeof(LaunchAttribute) &&
              offsetof(cudaLaunchAttribute, val) == offsetof(LaunchAttribute, value) &&
              sizeof(cudaLaunchAttributeValue) == sizeof(LaunchAttribute::value));

// As cudart 13.0: a null function is cudaErrorInvalidDeviceFunction, any
// other address that is no registered kernel cudaErrorInvalidResourceHandle
// (H100, tests/runtime_api/conformance, 2026-12-07).
cudaError_t unknown_function(const char* api, const void* func) {
  return fail(
      func == nullptr ? cudaErrorInvalidDeviceFunction : cudaErrorInvalidResourceHandle,
      fmt::format("{}: {} is not a registered kernel (a __global__ function's address, or a cudaKernel_t)", api, func));
}

// `here`: the calling thread's context, as the prologue took it.
cudaError_t launch(const char* api, KernelHandle* k, const LaunchRequest& r, void** args, DefaultStream zero,
                   const ContextRef& here) {
  return guarded(api, [&] {
    if (r.grid.x == 0 || r.grid.y == 0 || r.grid.z == 0 || r.block.x == 0 || r.block.y == 0 || r.block.z == 0) {
      // cudart 13.0 answers cudaErrorInvalidValue here (H200, tests/runtime_api/error_codes.cu, 2026-12-01).
      return fail(cudaErrorInvalidValue,
                  fmt::format("{}: kernel {}: grid {}x{}x{}, block {}x{}x{}: no dimension may be 0", api, k->name,
                              r.grid.x, r.grid.y, r.grid.z, r.block.x, r.block.y, r.block.z));
    }
    // cudart 13.0 passes the size on as the driver's 32-bit parameter: 2^60
    // bytes launch with none, successfully (H100, tests/runtime_api/conformance, 2026-12-07).
    // The kernel runs in the stream's context: bound there (loading its fatbin the first time).
    const StreamRef s = stream_of(r.stream, zero, api);
    const ContextRef& ctx = s.context();
    if (ctx.address() != here.address() && ctx.device().ordinal() != here.device().ordinal()) {
      // "A kernel launch will fail if it is issued to a stream that is not
      // associated to the current device" (CUDA Programming Guide, multi-device
      // system); the driver's invalid handle for a function of one context on
      // a stream of another is cudart's cudaErrorInvalidResourceHandle.
      return fail(cudaErrorInvalidResourceHandle,
                  fmt::format("{}: kernel {}: the stream belongs to device {} and the current device is {}: launch "
                              "on a stream of the current device (cudaSetDevice({}) first)",
                              api, k->name, ctx.device().ordinal(), here.device().ordinal(), ctx.device().ordinal()));
    }
    const Kernel kernel = bound_kernel(*k, ctx, ctx.device().ordinal(), api);
    LaunchConfig config{{r.grid.x, r.grid.y, r.grid.z},
                        {r.block.x, r.block.y, r.block.z},
                        static_cast<unsigned>(r.shared),
                        s,
                        r.cluster,
                        r.cooperative,
                        r.attributes};
    try {
      launch_raw(kernel, config, args);
    } catch (const InvalidArgumentError& e) {
      // drvshim refuses a block larger than the kernel allows before the
      // driver sees it; cudart 13.0 answers cudaErrorInvalidValue (H200, error_codes.cu).
      return fail(cudaErrorInvalidValue, std::string(api) + ": " + e.what());
    }
    return cudaSuccess;
  });
}

cudaError_t launch_by_function(const char* api, const void* func, const LaunchRequest& r, void** args,
                               DefaultStream zero) {
  // cudart's order: its prologue, a null function, the sticky error, any
  // other address that is no kernel (one prologue call on the launch path).
  if (func == nullptr) {
    if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
    return unknown_function(api, func);
  }
  std::optional<ContextRef> here;
  if (const cudaError_t e = enter(api, Prologue::sticky, here); e != cudaSuccess) return e;
  KernelHandle* k = kernel_for(func);
  if (k == nullptr) return unknown_function(api, func);
  return launch(api, k, r, args, zero, *here);
}

// A launch configuration's attributes: the cluster and cooperative ones into
// their fields, ignored ones dropped, every other as given into the slot
// `next()` hands out (the driver answers for it).
template <class Next>
void split_attributes(const cudaLaunchConfig_t& config, std::optional<Dim3>& cluster, bool& cooperative, Next&& next) {
  for (unsigned i = 0; i < config.numAttrs; ++i) {
    const cudaLaunchAttribute& a = config.attrs[i];
    // Read as a number: a program may pass one no enumerator names, and
    // loading such a value as the enum is undefined behaviour.
    int id = 0;
    static_assert(sizeof a.id == sizeof id);
    std::memcpy(&id, &a.id, sizeof id);
    switch (id) {
      case cudaLaunchAttributeCooperative: cooperative = a.val.cooperative != 0; break;
      case cudaLaunchAttributeClusterDimension:
        cluster = Dim3{a.val.clusterDim.x, a.val.clusterDim.y, a.val.clusterDim.z};
        break;
      case cudaLaunchAttributeIgnore: break;
      default: {
        LaunchAttribute& out = next();
        out.id = id;
        std::memcpy(out.value.data(), &a.val, sizeof a.val);
      }
    }
  }
}

cudaError_t launch_ex(const char* api, const cudaLaunchConfig_t* config, const void* func, void** args,
                      DefaultStream zero) {
  if (config == nullptr) return null_argument(api, "config");
  if (config->numAttrs != 0 && config->attrs == nullptr) {
    return fail(cudaErrorInvalidValue,
                fmt::format("{}: config->attrs is null with numAttrs {}", api, config->numAttrs));
  }
  LaunchRequest r{config->gridDim, config->blockDim, config->dynamicSmemBytes, config->stream, false, std::nullopt};
  // Cooperative launches and clusters have drvshim's own checks; every other
  // attribute goes to the driver as the program gave it (programmatic
  // dependent launch, priority, memory sync domains, ...), and the driver
  // answers for it: an id it does not know is cudaErrorInvalidValue, as under cudart.
  // A launch has a handful of attributes (CUB's: one): no allocation for those.
  std::array<LaunchAttribute, 8> inline_others;
  std::vector<LaunchAttribute> heap_others;
  std::size_t n = 0;
  const auto next = [&]() -> LaunchAttribute& {
    if (n < inline_others.size()) return inline_others[n++];
    if (heap_others.empty()) heap_others.assign(inline_others.begin(), inline_others.end());
    ++n;
    return heap_others.emplace_back();
  };
  split_attributes(*config, r.cluster, r.cooperative, next);
  r.attributes = heap_others.empty() ? std::span<const LaunchAttribute>(inline_others.data(), n)
                                     : std::span<const LaunchAttribute>(heap_others);
  return launch_by_function(api, func, r, args, zero);
}

// The calling thread's context and the kernel bound there: what attribute and occupancy calls need.
struct Bound {
  ContextRef ctx;
  Kernel kernel;
};
Bound bind_here(KernelHandle& k, const char* api) {
  ContextRef ctx = context(api);
  Kernel kernel = bound_kernel(k, ctx, ctx.device().ordinal(), api);
  return Bound{std::move(ctx), std::move(kernel)};
}

}  // namespace

// ---- launches --------------------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shared,
                                              cudaStream_t stream) {
  if (const cudaError_t failed = initialise("__cudaLaunchKernel")) return failed;
  std::optional<ContextRef> here;
  if (const cudaError_t e = enter("__cudaLaunchKernel", Prologue::context, here); e != cudaSuccess) return e;
  if (kernel == nullptr) return null_argument("__cudaLaunchKernel", "kernel");
  return launch("__cudaLaunchKernel", reinterpret_cast<KernelHandle*>(kernel), {grid, block, shared, stream, false, {}},
                args, kLegacy, *here);
}

// Compiled with --default-stream per-thread: stream 0 is the per-thread default stream.
DRVSHIM_CUDART cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args,
                                                   size_t shared, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("__cudaLaunchKernel_ptsz")) return failed;
  std::optional<ContextRef> here;
  if (const cudaError_t e = enter("__cudaLaunchKernel_ptsz", Prologue::context, here); e != cudaSuccess) return e;
  if (kernel == nullptr) return null_argument("__cudaLaunchKernel_ptsz", "kernel");
  return launch("__cudaLaunchKernel_ptsz", reinterpret_cast<KernelHandle*>(kernel),
                {grid, block, shared, stream, false, {}}, args, kPerThread, *here);
}

DRVSHIM_CUDART cudaError_t cudaLaunchKernel(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                                            cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaLaunchKernel")) return failed;
  return launch_by_function("cudaLaunchKernel", func, {grid, block, shared, stream, false, {}}, args, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaLaunchKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args, size_t shared,
                                                 cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaLaunchKernel_ptsz")) return failed;
  return launch_by_function("cudaLaunchKernel", func, {grid, block, shared, stream, false, {}}, args, kPerThread);
}

DRVSHIM_CUDART cudaError_t cudaLaunchCooperativeKernel(const void* func, dim3 grid, dim3 block, void** args,
                                                       size_t shared, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaLaunchCooperativeKernel")) return failed;
  return launch_by_function("cudaLaunchCooperativeKernel", func, {grid, block, shared, stream, true, {}}, args,
                            kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaLaunchCooperativeKernel_ptsz(const void* func, dim3 grid, dim3 block, void** args,
                                                            size_t shared, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaLaunchCooperativeKernel_ptsz")) return failed;
  return launch_by_function("cudaLaunchCooperativeKernel", func, {grid, block, shared, stream, true, {}}, args,
                            kPerThread);
}

DRVSHIM_CUDART cudaError_t cudaLaunchKernelExC(const cudaLaunchConfig_t* config, const void* func, void** args) {
  if (const cudaError_t failed = initialise("cudaLaunchKernelExC")) return failed;
  return launch_ex("cudaLaunchKernelExC", config, func, args, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaLaunchKernelExC_ptsz(const cudaLaunchConfig_t* config, const void* func, void** args) {
  if (const cudaError_t failed = initialise("cudaLaunchKernelExC_ptsz")) return failed;
  return launch_ex("cudaLaunchKernelExC", config, func, args, kPerThread);
}

// ---- kernel attributes ----------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* attr, const void* func) {
  if (const cudaError_t failed = initialise("cudaFuncGetAttributes")) return failed;
  if (attr == nullptr) return null_argument("cudaFuncGetAttributes", "attr");
  if (const cudaError_t e = enter("cudaFuncGetAttributes", Prologue::context); e != cudaSuccess) return e;
  KernelHandle* k = kernel_for(func);
  if (k == nullptr) return unknown_function("cudaFuncGetAttributes", func);
  if (const cudaError_t e = enter("cudaFuncGetAttributes", Prologue::sticky); e != cudaSuccess) return e;
  return guarded("cudaFuncGetAttributes", [&] {
    const Bound b = bind_here(*k, "cudaFuncGetAttributes");
    const auto get = [&](FunctionAttribute a) { return b.kernel.attribute(a); };
    cudaFuncAttributes out{};
    out.sharedSizeBytes = static_cast<size_t>(get(FunctionAttribute::shared_size_bytes));
    out.constSizeBytes = static_cast<size_t>(get(FunctionAttribute::const_size_bytes));
    out.localSizeBytes = static_cast<size_t>(get(FunctionAttribute::local_size_bytes));
    out.maxThreadsPerBlock = get(FunctionAttribute::max_threads_per_block);
    out.numRegs = get(FunctionAttribute::num_regs);
    out.ptxVersion = get(FunctionAttribute::ptx_version);
    out.binaryVersion = get(FunctionAttribute::binary_version);
    out.cacheModeCA = get(FunctionAttribute::cache_mode_ca);
    out.maxDynamicSharedSizeBytes = get(FunctionAttribute::max_dynamic_shared_size_bytes);
    out.preferredShmemCarveout = get(FunctionAttribute::preferred_shared_memory_carveout);
    out.clusterDimMustBeSet = get(FunctionAttribute::cluster_size_must_be_set);
    out.requiredClusterWidth = get(FunctionAttribute::required_cluster_width);
    out.requiredClusterHeight = get(FunctionAttribute::required_cluster_height);
    out.requiredClusterDepth = get(FunctionAttribute::required_cluster_depth);
    out.clusterSchedulingPolicyPreference = get(FunctionAttribute::cluster_scheduling_policy_preference);
    out.nonPortableClusterSizeAllowed = get(FunctionAttribute::non_portable_cluster_size_allowed);
    *attr = out;
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaFuncSetAttribute(const void* func, cudaFuncAttribute attr, int value) {
  if (const cudaError_t failed = initialise("cudaFuncSetAttribute")) return failed;
  // cudart's order: the attribute, its prologue, the function, the sticky error.
  // cudaFuncAttribute numbers the settable attributes as CUfunction_attribute does.
  int number = 0;
  static_assert(sizeof attr == sizeof number);
  std::memcpy(&number, &attr, sizeof number);  // a number the enum may not name
  if (number < static_cast<int>(cudaFuncAttributeMaxDynamicSharedMemorySize) ||
      number >= static_cast<int>(cudaFuncAttributeMax)) {
    return fail(cudaErrorInvalidValue, fmt::format("cudaFuncSetAttribute: attribute {} is not settable", number));
  }
  if (const cudaError_t e = enter("cudaFuncSetAttribute", Prologue::context); e != cudaSuccess) return e;
  KernelHandle* k = kernel_for(func);
  if (k == nullptr) return unknown_function("cudaFuncSetAttribute", func);
  if (const cudaError_t e = enter("cudaFuncSetAttribute", Prologue::sticky); e != cudaSuccess) return e;
  return guarded("cudaFuncSetAttribute", [&] {
    const ContextRef ctx = context("cudaFuncSetAttribute");
    set_kernel_attribute(*k, ctx, ctx.device().ordinal(), static_cast<FunctionAttribute>(number), value,
                         "cudaFuncSetAttribute");
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaFuncSetCacheConfig(const void* func, cudaFuncCache config) {
  if (const cudaError_t failed = initialise("cudaFuncSetCacheConfig")) return failed;
  if (const cudaError_t e = enter("cudaFuncSetCacheConfig", Prologue::context); e != cudaSuccess) return e;
  KernelHandle* k = kernel_for(func);
  if (k == nullptr) return unknown_function("cudaFuncSetCacheConfig", func);
  if (const cudaError_t e = enter("cudaFuncSetCacheConfig", Prologue::sticky); e != cudaSuccess) return e;
  if (static_cast<int>(config) < 0 || static_cast<int>(config) > 3) {
    return fail(cudaErrorInvalidValue, fmt::format("cudaFuncSetCacheConfig: {}", static_cast<int>(config)));
  }
  return guarded("cudaFuncSetCacheConfig", [&] {
    const ContextRef ctx = context("cudaFuncSetCacheConfig");
    set_kernel_cache_preference(*k, ctx, ctx.device().ordinal(), static_cast<CachePreference>(config),
                                "cudaFuncSetCacheConfig");
    return cudaSuccess;
  });
}

// Deprecated: the bank size is fixed on every supported architecture.
DRVSHIM_CUDART cudaError_t cudaFuncSetSharedMemConfig(const void* func, cudaSharedMemConfig config) {
  if (const cudaError_t failed = initialise("cudaFuncSetSharedMemConfig")) return failed;
  if (const cudaError_t e = enter("cudaFuncSetSharedMemConfig", Prologue::context); e != cudaSuccess) return e;
  if (kernel_for(func) == nullptr) return unknown_function("cudaFuncSetSharedMemConfig", func);
  if (const cudaError_t e = enter("cudaFuncSetSharedMemConfig", Prologue::sticky); e != cudaSuccess) return e;
  if (static_cast<int>(config) < 0 || static_cast<int>(config) > 2) {
    return fail(cudaErrorInvalidValue, fmt::format("cudaFuncSetSharedMemConfig: {}", static_cast<int>(config)));
  }
  return cudaSuccess;
}

DRVSHIM_CUDART cudaError_t cudaFuncGetName(const char** name, const void* func) {
  if (const cudaError_t failed = initialise("cudaFuncGetName")) return failed;
  if (name == nullptr) return null_argument("cudaFuncGetName", "name");
  KernelHandle* k = kernel_for(func);
  if (k == nullptr) return unknown_function("cudaFuncGetName", func);
  if (const cudaError_t e = enter("cudaFuncGetName", Prologue::driver); e != cudaSuccess) return e;
  *name = k->name.c_str();  // the handle lives as long as the process
  return cudaSuccess;
}

DRVSHIM_CUDART cudaError_t cudaFuncGetParamInfo(const void* func, size_t index, size_t* offset, size_t* size) {
  if (const cudaError_t failed = initialise("cudaFuncGetParamInfo")) return failed;
  if (const cudaError_t e = enter("cudaFuncGetParamInfo", Prologue::context); e != cudaSuccess) return e;
  if (func == nullptr) return unknown_function("cudaFuncGetParamInfo", func);
  // The size is optional (cudart 13.0 answers with a null paramSize), the offset is not.
  if (offset == nullptr) return null_argument("cudaFuncGetParamInfo", "paramOffset");
  if (const cudaError_t e = enter("cudaFuncGetParamInfo", Prologue::sticky); e != cudaSuccess) return e;
  KernelHandle* k = kernel_for(func);
  if (k == nullptr) return unknown_function("cudaFuncGetParamInfo", func);
  return guarded("cudaFuncGetParamInfo", [&] {
    const Bound b = bind_here(*k, "cudaFuncGetParamInfo");
    const auto& params = b.kernel.params();
    if (!params) return not_supported("cudaFuncGetParamInfo", "the driver cannot report parameter layouts");
    if (index >= params->size()) {
      return fail(cudaErrorInvalidValue, fmt::format("cudaFuncGetParamInfo: kernel {} has {} parameters, not {}",
                                                     k->name, params->size(), index + 1));
    }
    if (offset != nullptr) *offset = (*params)[index].offset;
    if (size != nullptr) *size = (*params)[index].size;
    return cudaSuccess;
  });
}

// ---- occupancy -------------------------------------------------------------------------------------

namespace {

cudaError_t occupancy(const char* api, int* blocks, const void* func, int block_size, std::size_t shared,
                      unsigned flags, bool with_flags) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (func == nullptr) return unknown_function(api, func);
  if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
  KernelHandle* k = kernel_for(func);
  if (k == nullptr) return unknown_function(api, func);
  if (blocks == nullptr) return null_argument(api, "numBlocks");
  if (block_size <= 0) return fail(cudaErrorInvalidValue, fmt::format("{}: block size {}", api, block_size));
  return guarded(api, [&] {
    const Bound b = bind_here(*k, api);
    *blocks = with_flags ? b.kernel.max_active_blocks_per_sm(static_cast<unsigned>(block_size), shared, flags)
                         : b.kernel.max_active_blocks_per_sm(static_cast<unsigned>(block_size), shared);
    return cudaSuccess;
  });
}

}  // namespace

DRVSHIM_CUDART cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, const void* func, int block_size,
                                                                         size_t shared) {
  if (const cudaError_t failed = initialise("cudaOccupancyMaxActiveBlocksPerMultiprocessor")) return failed;
  return occupancy("cudaOccupancyMaxActiveBlocksPerMultiprocessor", blocks, func, block_size, shared, 0, false);
}

DRVSHIM_CUDART cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, const void* func,
                                                                                  int block_size, size_t shared,
                                                                                  unsigned flags) {
  if (const cudaError_t failed = initialise("cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags")) return failed;
  return occupancy("cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", blocks, func, block_size, shared, flags,
                   true);
}

DRVSHIM_CUDART cudaError_t cudaOccupancyAvailableDynamicSMemPerBlock(size_t* bytes, const void* func, int blocks,
                                                                     int block_size) {
  if (const cudaError_t failed = initialise("cudaOccupancyAvailableDynamicSMemPerBlock")) return failed;
  if (const cudaError_t e = enter("cudaOccupancyAvailableDynamicSMemPerBlock", Prologue::context); e != cudaSuccess)
    return e;
  if (func == nullptr) return unknown_function("cudaOccupancyAvailableDynamicSMemPerBlock", func);
  if (const cudaError_t e = enter("cudaOccupancyAvailableDynamicSMemPerBlock", Prologue::sticky); e != cudaSuccess)
    return e;
  KernelHandle* k = kernel_for(func);
  if (k == nullptr) return unknown_function("cudaOccupancyAvailableDynamicSMemPerBlock", func);
  if (bytes == nullptr) return null_argument("cudaOccupancyAvailableDynamicSMemPerBlock", "dynamicSmemSize");
  if (blocks <= 0 || block_size <= 0) {
    return fail(cudaErrorInvalidValue,
                fmt::format("cudaOccupancyAvailableDynamicSMemPerBlock: {} blocks of {} threads", blocks, block_size));
  }
  return guarded("cudaOccupancyAvailableDynamicSMemPerBlock", [&] {
    const Bound b = bind_here(*k, "cudaOccupancyAvailableDynamicSMemPerBlock");
    *bytes = b.kernel.available_dynamic_shared_bytes(blocks, static_cast<unsigned>(block_size));
    return cudaSuccess;
  });
}

// cudaOccupancyMaxActiveClusters: the launch configuration's cluster size,
// block and shared memory, as a launch would pass them (the grid and the
// stream do not matter to the answer).
DRVSHIM_CUDART cudaError_t cudaOccupancyMaxActiveClusters(int* clusters, const void* func,
                                                          const cudaLaunchConfig_t* config) {
  constexpr const char* api = "cudaOccupancyMaxActiveClusters";
  if (const cudaError_t failed = initialise(api)) return failed;
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (func == nullptr) return unknown_function(api, func);
  if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
  KernelHandle* k = kernel_for(func);
  if (k == nullptr) return unknown_function(api, func);
  if (clusters == nullptr) return null_argument(api, "numClusters");
  if (config == nullptr) return null_argument(api, "launchConfig");
  if (config->numAttrs != 0 && config->attrs == nullptr) {
    return fail(cudaErrorInvalidValue,
                fmt::format("{}: launchConfig->attrs is null with numAttrs {}", api, config->numAttrs));
  }
  return guarded(api, [&] {
    LaunchConfig lc;
    lc.grid = Dim3{config->gridDim.x, config->gridDim.y, config->gridDim.z};
    lc.block = Dim3{config->blockDim.x, config->blockDim.y, config->blockDim.z};
    lc.shared_bytes = static_cast<unsigned>(std::min<std::size_t>(config->dynamicSmemBytes, UINT_MAX));
    std::vector<LaunchAttribute> others;
    split_attributes(*config, lc.cluster, lc.cooperative, [&]() -> LaunchAttribute& { return others.emplace_back(); });
    lc.attributes = others;
    const Bound b = bind_here(*k, api);
    *clusters = max_active_clusters(b.kernel, lc);
    return cudaSuccess;
  });
}
