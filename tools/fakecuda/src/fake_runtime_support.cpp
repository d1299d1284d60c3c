// SPDX-License-Identifier: Apache-2.0
// The fake driver functions behind runtime_compat's wider surface: settable
// kernel attributes, occupancy, library globals and managed variables,
// context limits, stream attributes, pitched and 2D memory, managed-memory
// hints, the profiler. (Cooperative launches are in fake_launch.cpp, peer
// access and peer copies in fake_peer.cpp.)
#include <algorithm>
#include <cstring>

#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

// Settable function attributes and their bounds on the current device.
CUresult check_function_attribute(const Engine& e, int device, CUfunction_attribute a, int value) {
  switch (a) {
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES:
      return value >= 0 && value <= attr(e, device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)
                 ? CUDA_SUCCESS
                 : CUDA_ERROR_INVALID_VALUE;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT:
      return value >= -1 && value <= 100 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT:
    case CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH:
      return value >= 0 && value <= 16 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    case CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED:
    case CU_FUNC_ATTRIBUTE_CLUSTER_SCHEDULING_POLICY_PREFERENCE:
      return value == 0 || value == 1 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
    default: return CUDA_ERROR_INVALID_VALUE;  // read-only
  }
}

CUresult fake_cuFuncSetAttribute(CUfunction hf, CUfunction_attribute a, int value) {
  FAKE_ENTER("cuFuncSetAttribute");
  FakeFunction* f = live_function(e, hf);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  if (const CUresult r = check_function_attribute(e, ctx->device, a, value); r != CUDA_SUCCESS) return r;
  f->attributes[a] = value;
  return CUDA_SUCCESS;
}

CUresult fake_cuKernelSetAttribute(CUfunction_attribute a, int value, CUkernel k, CUdevice dev) {
  FAKE_ENTER("cuKernelSetAttribute");
  FakeFunction* f = live_function(e, reinterpret_cast<CUfunction>(k));
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  if (const CUresult r = check_function_attribute(e, dev, a, value); r != CUDA_SUCCESS) return r;
  f->attributes[a] = value;  // the fake binds one function per kernel: every device shares it
  return CUDA_SUCCESS;
}

CUresult fake_cuFuncSetCacheConfig(CUfunction hf, CUfunc_cache config) {
  FAKE_ENTER("cuFuncSetCacheConfig");
  if (live_function(e, hf) == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  return static_cast<int>(config) >= 0 && static_cast<int>(config) <= 3 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* blocks, CUfunction hf, int block_size,
                                                                   size_t shared, unsigned flags) {
  FAKE_ENTER("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags");
  const FakeFunction* f = live_function(e, hf);
  if (f == nullptr || blocks == nullptr || block_size <= 0 || flags > 1) return CUDA_ERROR_INVALID_VALUE;
  *blocks = resident_blocks_per_sm(e, function_device(e, hf), f, static_cast<unsigned>(block_size), shared);
  return CUDA_SUCCESS;
}

// The dynamic shared memory each of `blocks` blocks may use on one SM: none
// when that many blocks of the size cannot be resident at all.
CUresult fake_cuOccupancyAvailableDynamicSMemPerBlock(size_t* bytes, CUfunction hf, int blocks, int block_size) {
  FAKE_ENTER("cuOccupancyAvailableDynamicSMemPerBlock");
  const FakeFunction* f = live_function(e, hf);
  if (f == nullptr || bytes == nullptr || blocks <= 0 || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  const int device = function_device(e, hf);
  *bytes = 0;
  if (blocks > resident_blocks_per_sm(e, device, f, static_cast<unsigned>(block_size), 0)) return CUDA_SUCCESS;
  const auto per_sm = static_cast<size_t>(attr(e, device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  const auto reserve = static_cast<size_t>(attr(e, device, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK));
  const size_t share = per_sm / static_cast<size_t>(blocks);
  const auto optin = static_cast<size_t>(attr(e, device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN));
  *bytes = share > reserve ? std::min(share - reserve, optin > 0 ? optin : share - reserve) : 0;
  return CUDA_SUCCESS;
}

// cudaOccupancyMaxPotentialBlockSize's loop in cuda_runtime.h: the limit
// capped by the device's and the kernel's, tried first itself and then in
// warp steps down; the first size with the most resident threads wins. The
// size-to-shared-memory callback runs without the engine lock (it may call
// the driver).
CUresult fake_cuOccupancyMaxPotentialBlockSize(int* min_grid, int* block, CUfunction hf,
                                               CUoccupancyB2DSize shared_of_size, size_t shared, int limit) {
  FAKE_ENTER("cuOccupancyMaxPotentialBlockSize");
  FakeFunction* f = live_function(e, hf);
  if (f == nullptr || min_grid == nullptr || block == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const int device = function_device(e, hf);
  const int device_limit = attr(e, device, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
  const int warp = std::max(1, attr(e, device, CU_DEVICE_ATTRIBUTE_WARP_SIZE));
  const int occupancy_limit = attr(e, device, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
  int function_limit = 1024;
  if (auto it = f->attributes.find(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK); it != f->attributes.end()) {
    function_limit = it->second;
  }
  if (limit <= 0) limit = device_limit;
  limit = std::min({limit, device_limit, function_limit});
  int best_size = 0;
  int best_blocks = 0;
  for (int aligned = (limit + warp - 1) / warp * warp; aligned > 0; aligned -= warp) {
    const int size = std::min(aligned, limit);
    size_t bytes = shared;
    if (shared_of_size != nullptr) {
      lock.unlock();
      bytes = shared_of_size(size);
      lock.lock();
      f = live_function(e, hf);
      if (f == nullptr) return CUDA_ERROR_INVALID_VALUE;  // unloaded by the callback
    }
    const int resident = resident_blocks_per_sm(e, device, f, static_cast<unsigned>(size), bytes);
    if (resident * size > best_blocks * best_size) {
      best_size = size;
      best_blocks = resident;
    }
    if (best_blocks * best_size == occupancy_limit) break;
  }
  *block = best_size;
  *min_grid = best_blocks * attr(e, device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
  return CUDA_SUCCESS;
}

// How many clusters of the config's size can be resident at once: the
// device's resident blocks divided into whole clusters. A cluster above the
// portable 8 blocks needs the kernel's opt-in (16 at most); a config without
// a cluster size is refused, as the driver refuses one for a kernel with no
// size of its own. (The real answer also depends on how SMs group into GPCs;
// the fake's device has no GPCs.)
CUresult fake_cuOccupancyMaxActiveClusters(int* clusters, CUfunction hf, const CUlaunchConfig* c) {
  FAKE_ENTER("cuOccupancyMaxActiveClusters");
  FakeFunction* f = live_function(e, hf);
  if (f == nullptr || clusters == nullptr || c == nullptr || (c->numAttrs != 0 && c->attrs == nullptr)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  unsigned size = 0;
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    if (c->attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
    const auto& d = c->attrs[i].value.clusterDim;
    size = d.x * d.y * d.z;
  }
  if (size == 0) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  const auto it = f->attributes.find(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED);
  const bool opted_in = it != f->attributes.end() && it->second == 1;
  if (size > (opted_in ? 16u : 8u)) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  const std::uint64_t threads = std::uint64_t{c->blockDimX} * c->blockDimY * c->blockDimZ;
  if (threads == 0 || threads > 1024) return CUDA_ERROR_INVALID_VALUE;
  const int device = function_device(e, hf);
  const int per_sm = resident_blocks_per_sm(e, device, f, static_cast<unsigned>(threads), c->sharedMemBytes);
  *clusters = per_sm * attr(e, device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT) / static_cast<int>(size);
  return CUDA_SUCCESS;
}

}  // namespace

int resident_blocks_per_sm(const Engine& e, int device, const FakeFunction* f, unsigned block_threads,
                           size_t shared_bytes) {
  int function_limit = 1024;
  int dynamic_limit = 49152;  // without the kernel's opt-in
  if (f != nullptr) {
    if (auto it = f->attributes.find(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK); it != f->attributes.end()) {
      function_limit = it->second;
    }
    if (auto it = f->attributes.find(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES); it != f->attributes.end()) {
      dynamic_limit = it->second;
    }
  }
  const auto block_limit =
      static_cast<unsigned>(std::min(function_limit, attr(e, device, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK)));
  if (block_threads == 0 || block_threads > block_limit) return 0;
  if (f != nullptr && shared_bytes > static_cast<size_t>(dynamic_limit)) return 0;
  const auto per_sm = static_cast<size_t>(attr(e, device, CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR));
  // What the driver keeps of each block's shared memory for itself (1 KiB from sm_80 on).
  const auto reserve = static_cast<size_t>(attr(e, device, CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK));
  if (shared_bytes > per_sm || shared_bytes + reserve > per_sm) return 0;
  const int max_blocks = attr(e, device, CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
  const auto by_blocks = static_cast<size_t>(max_blocks > 0 ? max_blocks : 32);
  // Threads are placed in whole warps.
  const auto warp = static_cast<unsigned>(std::max(1, attr(e, device, CU_DEVICE_ATTRIBUTE_WARP_SIZE)));
  const unsigned warps_per_sm =
      static_cast<unsigned>(attr(e, device, CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR)) / warp;
  const size_t by_threads = warps_per_sm / ((block_threads + warp - 1) / warp);
  const size_t by_shared = shared_bytes + reserve == 0 ? by_blocks : per_sm / (shared_bytes + reserve);
  return static_cast<int>(std::min({by_blocks, by_threads, by_shared}));
}

int function_device(Engine& e, CUfunction f) {
  const FakeFunction* fn = live_function(e, f);
  if (fn != nullptr && fn->module != nullptr && fn->module->ctx != nullptr) return fn->module->ctx->device;
  FakeCtx* ctx = nullptr;
  return current(e, &ctx) == CUDA_SUCCESS && ctx != nullptr ? ctx->device : 0;
}

namespace {

// ---- libraries: globals and managed variables ----------------------------------------------------

FakeModule* live_library(Engine& e, CUlibrary l) {
  auto* p = reinterpret_cast<FakeModule*>(l);
  return e.libraries.count(p) != 0 ? p : nullptr;
}

CUresult library_global(Engine& e, CUdeviceptr* dptr, size_t* bytes, CUlibrary hl, const char* name) {
  FakeModule* l = live_library(e, hl);
  if (l == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (name == nullptr || (dptr == nullptr && bytes == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  auto it = l->globals.find(name);
  if (it == l->globals.end()) return CUDA_ERROR_NOT_FOUND;
  if (dptr != nullptr) *dptr = it->second.first;
  if (bytes != nullptr) *bytes = it->second.second;
  return CUDA_SUCCESS;
}

CUresult fake_cuLibraryGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUlibrary hl, const char* name) {
  FAKE_ENTER("cuLibraryGetGlobal");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;  // the global of the current context
  FakeModule* l = live_library(e, hl);
  if (l != nullptr && !library_runs_on(e, *l, ctx->device)) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  return library_global(e, dptr, bytes, hl, name);
}

CUresult fake_cuLibraryGetManaged(CUdeviceptr* dptr, size_t* bytes, CUlibrary hl, const char* name) {
  FAKE_ENTER("cuLibraryGetManaged");
  return library_global(e, dptr, bytes, hl, name);
}

CUresult fake_cuLibraryGetModule(CUmodule* pm, CUlibrary hl) {
  FAKE_ENTER("cuLibraryGetModule");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  FakeModule* l = live_library(e, hl);
  if (l == nullptr || pm == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!library_runs_on(e, *l, ctx->device)) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  *pm = reinterpret_cast<CUmodule>(l);
  return CUDA_SUCCESS;
}

// ---- contexts: limits, L2 persistence, profiler ----------------------------------------------------

size_t default_limit(int limit) {
  switch (limit) {
    case CU_LIMIT_STACK_SIZE: return 1024;
    case CU_LIMIT_PRINTF_FIFO_SIZE: return 1048576;
    case CU_LIMIT_MALLOC_HEAP_SIZE: return 8388608;
    case CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH: return 2;
    case CU_LIMIT_DEV_RUNTIME_PENDING_LAUNCH_COUNT: return 2048;
    case CU_LIMIT_MAX_L2_FETCH_GRANULARITY: return 128;
    default: return 0;
  }
}

// As the H100 (driver 580.159.04) answers: a number that names no limit is
// CUDA_ERROR_INVALID_VALUE; the device runtime's synchronisation depth is
// CUDA_ERROR_UNSUPPORTED_LIMIT from compute capability 9.0 (no device-side
// synchronisation there).
CUresult check_limit(Engine& e, const FakeCtx& ctx, int limit) {
  if (limit < 0 || limit > CU_LIMIT_PERSISTING_L2_CACHE_SIZE) return CUDA_ERROR_INVALID_VALUE;
  if (limit == CU_LIMIT_DEV_RUNTIME_SYNC_DEPTH && e.devices[static_cast<size_t>(ctx.device)].cc_major >= 9) {
    return CUDA_ERROR_UNSUPPORTED_LIMIT;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxSetLimit(CUlimit limit, size_t value) {
  FAKE_ENTER("cuCtxSetLimit");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  if (const CUresult r = check_limit(e, *ctx, limit); r != CUDA_SUCCESS) return r;
  if (limit == CU_LIMIT_MAX_L2_FETCH_GRANULARITY && value > 128) return CUDA_ERROR_INVALID_VALUE;
  // The H100 refuses a stack of 2^60 bytes a thread (580.159.04).
  if (limit == CU_LIMIT_STACK_SIZE && value > (size_t{1} << 32)) return CUDA_ERROR_INVALID_VALUE;
  if (limit == CU_LIMIT_PERSISTING_L2_CACHE_SIZE) {
    value =
        std::min<size_t>(value, static_cast<size_t>(attr(e, ctx->device, CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE)) * 3 / 4);
  }
  ctx->limits[limit] = value;
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxGetLimit(size_t* value, CUlimit limit) {
  FAKE_ENTER("cuCtxGetLimit");
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  if (const CUresult r = check_limit(e, *ctx, limit); r != CUDA_SUCCESS) return r;
  auto it = ctx->limits.find(limit);
  *value = it != ctx->limits.end() ? it->second : default_limit(limit);
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxResetPersistingL2Cache() {
  FAKE_ENTER("cuCtxResetPersistingL2Cache");
  FakeCtx* ctx = nullptr;
  return current(e, &ctx);
}

CUresult fake_cuProfilerStart() {
  FAKE_ENTER("cuProfilerStart");
  FakeCtx* ctx = nullptr;
  return current(e, &ctx);
}

CUresult fake_cuProfilerStop() {
  FAKE_ENTER("cuProfilerStop");
  FakeCtx* ctx = nullptr;
  return current(e, &ctx);
}

// ---- streams: attributes, attaching managed memory ----------------------------------------------

CUresult fake_cuStreamSetAttribute(CUstream s, CUstreamAttrID id, const CUstreamAttrValue* value) {
  FAKE_ENTER("cuStreamSetAttribute");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (id != CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW && id != CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY &&
      id != CU_LAUNCH_ATTRIBUTE_PRIORITY && id != CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN_MAP &&
      id != CU_LAUNCH_ATTRIBUTE_MEM_SYNC_DOMAIN) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (id == CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW &&
      (value->accessPolicyWindow.hitRatio < 0.0f || value->accessPolicyWindow.hitRatio > 1.0f)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  FakeStream* st = user_stream(e, s);
  if (st != nullptr && id == CU_LAUNCH_ATTRIBUTE_PRIORITY) st->priority = std::clamp(value->priority, -5, 0);
  (st != nullptr ? st->attrs : ctx->default_stream_attrs)[id] = *value;
  return CUDA_SUCCESS;
}

CUresult fake_cuStreamGetAttribute(CUstream s, CUstreamAttrID id, CUstreamAttrValue* value) {
  FAKE_ENTER("cuStreamGetAttribute");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeStream* st = user_stream(e, s);
  std::memset(value, 0, sizeof *value);
  const auto& attrs = st != nullptr ? st->attrs : ctx->default_stream_attrs;
  if (auto it = attrs.find(id); it != attrs.end()) {
    *value = it->second;
  } else if (id == CU_LAUNCH_ATTRIBUTE_PRIORITY) {
    value->priority = st != nullptr ? st->priority : 0;
  } else if (id == CU_LAUNCH_ATTRIBUTE_SYNCHRONIZATION_POLICY) {
    value->syncPolicy = CU_SYNC_POLICY_AUTO;
  }
  return CUDA_SUCCESS;
}

const std::pair<const uintptr_t, Alloc>* managed_range(const Engine& e, CUdeviceptr p, size_t n) {
  const auto* a = find_alloc(e, static_cast<uintptr_t>(p), n);
  return a != nullptr && (a->second.kind == AllocKind::managed || a->second.kind == AllocKind::module_global) ? a
                                                                                                              : nullptr;
}

CUresult fake_cuStreamAttachMemAsync(CUstream s, CUdeviceptr p, size_t length, unsigned flags) {
  FAKE_ENTER("cuStreamAttachMemAsync");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  if (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST && flags != CU_MEM_ATTACH_SINGLE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  return managed_range(e, p, length == 0 ? 1 : length) != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

// ---- memory: pitched and 2D, managed-memory hints -------------------------------------------------

CUresult fake_cuMemAllocPitch(CUdeviceptr* dptr, size_t* pitch, size_t width, size_t height, unsigned element) {
  FAKE_ENTER("cuMemAllocPitch");
  if (dptr == nullptr || pitch == nullptr || width == 0 || height == 0) return CUDA_ERROR_INVALID_VALUE;
  if (element != 4 && element != 8 && element != 16) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  const size_t p = (width + 511) / 512 * 512;  // the texture pitch alignment of the H200
  uintptr_t out = 0;
  if (const CUresult r = new_alloc(e, ctx, p * height, AllocKind::device, 0, &out); r != CUDA_SUCCESS) return r;
  *dptr = out;
  *pitch = p;
  return CUDA_SUCCESS;
}

// One side of a 2D copy: its base address and whether it must be device-accessible.
CUresult copy_side(const Engine& e, CUmemorytype type, const void* host, CUdeviceptr device, size_t x, size_t y,
                   size_t pitch, size_t width, size_t height, uintptr_t* base) {
  uintptr_t p = 0;
  switch (type) {
    case CU_MEMORYTYPE_HOST: p = reinterpret_cast<uintptr_t>(host); break;
    case CU_MEMORYTYPE_DEVICE:
    case CU_MEMORYTYPE_UNIFIED: p = static_cast<uintptr_t>(device); break;
    default: return CUDA_ERROR_INVALID_VALUE;  // arrays are not modelled
  }
  if (p == 0 || width > pitch) return CUDA_ERROR_INVALID_VALUE;
  p += y * pitch + x;
  if (type == CU_MEMORYTYPE_DEVICE && height > 0 && !device_accessible(e, p, (height - 1) * pitch + width)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *base = p;
  return CUDA_SUCCESS;
}

CUresult fake_copy_2d(Engine& e, const CUDA_MEMCPY2D* c) {
  if (c == nullptr) return CUDA_ERROR_INVALID_VALUE;
  uintptr_t src = 0, dst = 0;
  if (const CUresult r = copy_side(e, c->srcMemoryType, c->srcHost, c->srcDevice, c->srcXInBytes, c->srcY, c->srcPitch,
                                   c->WidthInBytes, c->Height, &src);
      r != CUDA_SUCCESS) {
    return r;
  }
  if (const CUresult r = copy_side(e, c->dstMemoryType, c->dstHost, c->dstDevice, c->dstXInBytes, c->dstY, c->dstPitch,
                                   c->WidthInBytes, c->Height, &dst);
      r != CUDA_SUCCESS) {
    return r;
  }
  for (size_t row = 0; row < c->Height; ++row) {
    std::memmove(reinterpret_cast<void*>(dst + row * c->dstPitch),
                 reinterpret_cast<const void*>(src + row * c->srcPitch), c->WidthInBytes);
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuMemcpy2D(const CUDA_MEMCPY2D* c) {
  FAKE_ENTER("cuMemcpy2D");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  return fake_copy_2d(e, c);
}

CUresult fake_cuMemcpy2DAsync(const CUDA_MEMCPY2D* c, CUstream s) {
  FAKE_ENTER("cuMemcpy2DAsync");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  return fake_copy_2d(e, c);
}

CUresult fake_memset_2d(Engine& e, CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height) {
  const auto p = static_cast<uintptr_t>(dst);
  if (width > pitch || (height > 0 && !device_accessible(e, p, (height - 1) * pitch + width))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  for (size_t row = 0; row < height; ++row) std::memset(reinterpret_cast<void*>(p + row * pitch), value, width);
  return CUDA_SUCCESS;
}

CUresult fake_cuMemsetD2D8(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height) {
  FAKE_ENTER("cuMemsetD2D8");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  return fake_memset_2d(e, dst, pitch, value, width, height);
}

CUresult fake_cuMemsetD2D8Async(CUdeviceptr dst, size_t pitch, unsigned char value, size_t width, size_t height,
                                CUstream s) {
  FAKE_ENTER("cuMemsetD2D8Async");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  return fake_memset_2d(e, dst, pitch, value, width, height);
}

CUresult check_location(const Engine& e, CUmemLocation location) {
  if (location.type == CU_MEM_LOCATION_TYPE_HOST || location.type == CU_MEM_LOCATION_TYPE_HOST_NUMA_CURRENT) {
    return CUDA_SUCCESS;
  }
  if (location.type == CU_MEM_LOCATION_TYPE_DEVICE) {
    return valid_device(e, location.id) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
  }
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuMemAdvise(CUdeviceptr p, size_t count, CUmem_advise advice, CUmemLocation location) {
  FAKE_ENTER("cuMemAdvise");
  if (advice < CU_MEM_ADVISE_SET_READ_MOSTLY || advice > CU_MEM_ADVISE_UNSET_ACCESSED_BY)
    return CUDA_ERROR_INVALID_VALUE;
  if (managed_range(e, p, count) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (advice == CU_MEM_ADVISE_SET_READ_MOSTLY || advice == CU_MEM_ADVISE_UNSET_READ_MOSTLY) return CUDA_SUCCESS;
  return check_location(e, location);
}

CUresult fake_cuMemPrefetchAsync(CUdeviceptr p, size_t count, CUmemLocation location, unsigned flags, CUstream s) {
  FAKE_ENTER("cuMemPrefetchAsync");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  if (flags != 0 || managed_range(e, p, count) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return check_location(e, location);
}

CUresult fake_cuMemHostGetFlags(unsigned* flags, void* p) {
  FAKE_ENTER("cuMemHostGetFlags");
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  const auto* a = find_alloc(e, reinterpret_cast<uintptr_t>(p), 1);
  if (a == nullptr || a->second.kind != AllocKind::pinned) return CUDA_ERROR_INVALID_VALUE;
  *flags = a->second.flags;
  return CUDA_SUCCESS;
}

}  // namespace

std::vector<ProcEntry> runtime_support_procs() {
  return {
      {"cuFuncSetAttribute", 9000, erase_fn(&fake_cuFuncSetAttribute)},
      {"cuKernelSetAttribute", 12000, erase_fn(&fake_cuKernelSetAttribute)},
      {"cuFuncSetCacheConfig", 3000, erase_fn(&fake_cuFuncSetCacheConfig)},
      {"cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags", 7000,
       erase_fn(&fake_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags)},
      {"cuOccupancyMaxPotentialBlockSize", 6050, erase_fn(&fake_cuOccupancyMaxPotentialBlockSize)},
      {"cuOccupancyMaxActiveClusters", 11070, erase_fn(&fake_cuOccupancyMaxActiveClusters)},
      {"cuOccupancyAvailableDynamicSMemPerBlock", 10020, erase_fn(&fake_cuOccupancyAvailableDynamicSMemPerBlock)},
      {"cuLibraryGetGlobal", 12000, erase_fn(&fake_cuLibraryGetGlobal)},
      {"cuLibraryGetManaged", 12000, erase_fn(&fake_cuLibraryGetManaged)},
      {"cuLibraryGetModule", 12000, erase_fn(&fake_cuLibraryGetModule)},
      {"cuCtxSetLimit", 3010, erase_fn(&fake_cuCtxSetLimit)},
      {"cuCtxGetLimit", 3010, erase_fn(&fake_cuCtxGetLimit)},
      {"cuCtxResetPersistingL2Cache", 11000, erase_fn(&fake_cuCtxResetPersistingL2Cache)},
      {"cuProfilerStart", 4000, erase_fn(&fake_cuProfilerStart)},
      {"cuProfilerStop", 4000, erase_fn(&fake_cuProfilerStop)},
      {"cuStreamSetAttribute", 11000, erase_fn(&fake_cuStreamSetAttribute)},
      {"cuStreamGetAttribute", 11000, erase_fn(&fake_cuStreamGetAttribute)},
      {"cuStreamAttachMemAsync", 6000, erase_fn(&fake_cuStreamAttachMemAsync)},
      {"cuMemAllocPitch", 3020, erase_fn(&fake_cuMemAllocPitch)},
      {"cuMemcpy2D", 3020, erase_fn(&fake_cuMemcpy2D)},
      {"cuMemcpy2DAsync", 3020, erase_fn(&fake_cuMemcpy2DAsync)},
      {"cuMemsetD2D8", 3020, erase_fn(&fake_cuMemsetD2D8)},
      {"cuMemsetD2D8Async", 3020, erase_fn(&fake_cuMemsetD2D8Async)},
      {"cuMemAdvise", 12020, erase_fn(&fake_cuMemAdvise)},
      {"cuMemPrefetchAsync", 12020, erase_fn(&fake_cuMemPrefetchAsync)},
      {"cuMemHostGetFlags", 2030, erase_fn(&fake_cuMemHostGetFlags)},
  };
}

}  // namespace drvshim::fake
