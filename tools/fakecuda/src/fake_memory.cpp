// SPDX-License-Identifier: Apache-2.0
// Memory: allocations of every kind (device, managed, stream-ordered, pinned,
// module globals), host registrations, the kinds' lookups, free memory, and
// pointer attributes. Copies and memsets are in fake_copies.cpp.
#include <cstdlib>

#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

const std::pair<const uintptr_t, Registration>* find_registration(const Engine& e, uintptr_t p, size_t n) {
  auto it = e.registered.upper_bound(p);
  if (it == e.registered.begin()) return nullptr;
  --it;
  if (p >= it->first && p - it->first <= it->second.size && n <= it->second.size - (p - it->first)) return &*it;
  return nullptr;
}

}  // namespace

// The allocation containing [p, p+n), if any.
const std::pair<const uintptr_t, Alloc>* find_alloc(const Engine& e, uintptr_t p, size_t n) {
  auto it = e.allocs.upper_bound(p);
  if (it == e.allocs.begin()) return nullptr;
  --it;
  if (p >= it->first && p - it->first <= it->second.size && n <= it->second.size - (p - it->first)) return &*it;
  return nullptr;
}

// Whether the device can address [p, p+n): device-side allocations, mapped
// pinned memory, registered ranges (this fake always has unified addressing).
bool device_accessible(const Engine& e, uintptr_t p, size_t n) {
  if (const auto* a = find_alloc(e, p, n)) {
    return a->second.kind != AllocKind::pinned || (a->second.flags & CU_MEMHOSTALLOC_DEVICEMAP) != 0 ||
           attr(e, a->second.ctx->device, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) != 0;
  }
  return find_registration(e, p, n) != nullptr;
}

CUresult new_alloc(Engine& e, FakeCtx* ctx, size_t size, AllocKind kind, unsigned flags, uintptr_t* out) {
  const size_t device = static_cast<size_t>(ctx->device);
  if (kind != AllocKind::pinned) {
    const size_t total = e.devices[device].total_mem;
    if (size > total - total / 64 - e.device_used[device]) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* p = std::malloc(size);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  if (kind != AllocKind::pinned) e.device_used[device] += size;
  e.allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{size, kind, ctx, flags};
  *out = reinterpret_cast<uintptr_t>(p);
  return CUDA_SUCCESS;
}

// Whether [p, p+n) is page-locked host memory (pinned or registered).
bool page_locked(const Engine& e, uintptr_t p, size_t n) {
  if (const auto* a = find_alloc(e, p, n)) return a->second.kind == AllocKind::pinned;
  return find_registration(e, p, n) != nullptr;
}

namespace {

CUresult free_alloc(Engine& e, std::unique_lock<std::mutex>& lock, uintptr_t p, bool pinned, const char* api) {
  // Freeing waits for queued work (as the driver's free synchronises), so
  // none of it touches freed memory.
  drain_everything(e, lock);
  auto it = e.allocs.find(p);
  if (it == e.allocs.end() || (it->second.kind == AllocKind::pinned) != pinned ||
      it->second.kind == AllocKind::module_global) {
    misuse(e, std::string(api) + " of a pointer that is not a live allocation of that kind");
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!pinned) e.device_used[static_cast<size_t>(it->second.ctx->device)] -= it->second.size;
  if (pinned) {
    std::free(reinterpret_cast<void*>(it->first));
  } else {
    constexpr size_t kQuarantine = size_t{256} << 20;
    e.quarantine.emplace_back(it->first, it->second.size);
    e.quarantined += it->second.size;
    while (e.quarantined > kQuarantine && e.quarantine.size() > 1) {
      std::free(reinterpret_cast<void*>(e.quarantine.front().first));
      e.quarantined -= e.quarantine.front().second;
      e.quarantine.pop_front();
    }
  }
  e.allocs.erase(it);
  return CUDA_SUCCESS;
}

CUresult fake_cuMemAlloc(CUdeviceptr* dptr, size_t size) {
  FAKE_ENTER("cuMemAlloc");
  if (const CUresult r = capture_permits_unsafe_call(e); r != CUDA_SUCCESS) return r;
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  uintptr_t p = 0;
  if (const CUresult r = new_alloc(e, ctx, size, AllocKind::device, 0, &p); r != CUDA_SUCCESS) return r;
  *dptr = p;
  return CUDA_SUCCESS;
}

CUresult fake_cuMemFree(CUdeviceptr p) {
  FAKE_ENTER("cuMemFree");
  if (p == 0) return CUDA_SUCCESS;
  if (const CUresult r = capture_permits_unsafe_call(e); r != CUDA_SUCCESS) return r;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  return free_alloc(e, lock, static_cast<uintptr_t>(p), false, "cuMemFree");
}

CUresult fake_cuMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  FAKE_ENTER("cuMemGetInfo");
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  const size_t total = e.devices[static_cast<size_t>(ctx->device)].total_mem;
  *total_bytes = total;
  *free_bytes = total - (total / 64);  // the driver's own reservation
  return CUDA_SUCCESS;
}

CUresult fake_cuMemHostAlloc(void** pp, size_t size, unsigned flags) {
  FAKE_ENTER("cuMemHostAlloc");
  if (const CUresult r = capture_permits_unsafe_call(e); r != CUDA_SUCCESS) return r;
  if (pp == nullptr || size == 0 || (flags & ~0x7u) != 0) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  if ((flags & CU_MEMHOSTALLOC_DEVICEMAP) != 0 && attr(e, ctx->device, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY) == 0) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  uintptr_t p = 0;
  if (const CUresult r = new_alloc(e, ctx, size, AllocKind::pinned, flags, &p); r != CUDA_SUCCESS) return r;
  *pp = reinterpret_cast<void*>(p);
  return CUDA_SUCCESS;
}

CUresult fake_cuMemFreeHost(void* p) {
  FAKE_ENTER("cuMemFreeHost");
  if (const CUresult r = capture_permits_unsafe_call(e); r != CUDA_SUCCESS) return r;
  return free_alloc(e, lock, reinterpret_cast<uintptr_t>(p), true, "cuMemFreeHost");
}

CUresult fake_cuMemHostGetDevicePointer(CUdeviceptr* pd, void* p, unsigned flags) {
  FAKE_ENTER("cuMemHostGetDevicePointer");
  if (pd == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  const auto h = reinterpret_cast<uintptr_t>(p);
  const auto* a = find_alloc(e, h, 1);
  const bool mapped_pinned = a != nullptr && a->second.kind == AllocKind::pinned && device_accessible(e, h, 1);
  if (!mapped_pinned && find_registration(e, h, 1) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pd = h;  // unified addressing: the device sees the host address
  return CUDA_SUCCESS;
}

CUresult fake_cuMemHostRegister(void* p, size_t size, unsigned flags) {
  FAKE_ENTER("cuMemHostRegister");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  // The seed's failure: devices without host-register support refuse here.
  if (attr(e, ctx->device, CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED) == 0) return CUDA_ERROR_NOT_SUPPORTED;
  if (p == nullptr || size == 0 || (flags & ~0xFu) != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0 &&
      attr(e, ctx->device, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED) == 0) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const auto h = reinterpret_cast<uintptr_t>(p);
  // Any overlap with a registration or a pinned allocation is refused, as the driver does.
  for (const auto& [base, reg] : e.registered) {
    if (h < base + reg.size && base < h + size) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  // Memory from cuMemHostAlloc is refused with INVALID_VALUE (seen on the H200,
  // driver 580.159.04; docs/contract-cases.md), not ALREADY_REGISTERED.
  for (const auto& [base, a] : e.allocs) {
    if (a.kind == AllocKind::pinned && h < base + a.size && base < h + size) return CUDA_ERROR_INVALID_VALUE;
  }
  e.registered[h] = Registration{size, flags, ctx};
  return CUDA_SUCCESS;
}

CUresult fake_cuMemHostUnregister(void* p) {
  FAKE_ENTER("cuMemHostUnregister");
  auto it = e.registered.find(reinterpret_cast<uintptr_t>(p));
  if (it == e.registered.end()) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  e.registered.erase(it);
  return CUDA_SUCCESS;
}

CUresult fake_cuMemAllocManaged(CUdeviceptr* dptr, size_t size, unsigned flags) {
  FAKE_ENTER("cuMemAllocManaged");
  if (dptr == nullptr || size == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  if (attr(e, ctx->device, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY) == 0) return CUDA_ERROR_NOT_SUPPORTED;
  uintptr_t p = 0;
  if (const CUresult r = new_alloc(e, ctx, size, AllocKind::managed, flags, &p); r != CUDA_SUCCESS) return r;
  *dptr = p;
  return CUDA_SUCCESS;
}

CUresult fake_cuMemAllocAsync(CUdeviceptr* dptr, size_t size, CUstream s) {
  FAKE_ENTER("cuMemAllocAsync");
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  // The driver records allocation nodes, which the fake does not model:
  // allocating now would leave the graph writing freed memory at each launch.
  if (FakeStream* st = queue_of(e, s, ctx); st != nullptr && st->capture != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (attr(e, ctx->device, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) == 0) return CUDA_ERROR_NOT_SUPPORTED;
  uintptr_t p = 0;
  if (const CUresult r = new_alloc(e, ctx, size, AllocKind::async_pool, 0, &p); r != CUDA_SUCCESS) return r;
  *dptr = p;
  return CUDA_SUCCESS;
}

CUresult fake_cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  FAKE_ENTER("cuMemFreeAsync");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  if (FakeStream* st = queue_of(e, s, ctx); st != nullptr && st->capture != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  return free_alloc(e, lock, static_cast<uintptr_t>(p), false, "cuMemFreeAsync");
}

template <class T>
void put(void* dst, T v) {
  if (dst != nullptr) std::memcpy(dst, &v, sizeof v);
}

CUresult fake_cuPointerGetAttributes(unsigned n, CUpointer_attribute* attrs, void** data, CUdeviceptr ptr) {
  FAKE_ENTER("cuPointerGetAttributes");
  if (attrs == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto p = static_cast<uintptr_t>(ptr);
  const auto* a = find_alloc(e, p, 1);
  const auto* reg = a == nullptr ? find_registration(e, p, 1) : nullptr;
  for (unsigned i = 0; i < n; ++i) {
    void* d = data[i];
    const bool known = a != nullptr || reg != nullptr;
    FakeCtx* ctx = a != nullptr ? a->second.ctx : (reg != nullptr ? reg->second.ctx : nullptr);
    const uintptr_t base = a != nullptr ? a->first : (reg != nullptr ? reg->first : 0);
    const size_t size = a != nullptr ? a->second.size : (reg != nullptr ? reg->second.size : 0);
    const bool host_side = reg != nullptr || (a != nullptr && a->second.kind == AllocKind::pinned);
    switch (attrs[i]) {
      case CU_POINTER_ATTRIBUTE_CONTEXT: put(d, as_cu(ctx)); break;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        put(d, static_cast<unsigned>(!known ? 0 : host_side ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE));
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: {
        // As the driver: the address "in the current context", so 0 without one.
        FakeCtx* cur = nullptr;
        put(d, static_cast<CUdeviceptr>(known && current(e, &cur) == CUDA_SUCCESS ? p : 0));
        break;
      }
      case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        put(d, (known && (host_side || a->second.kind == AllocKind::managed)) ? reinterpret_cast<void*>(p) : nullptr);
        break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED: put(d, a != nullptr && a->second.kind == AllocKind::managed); break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: put(d, ctx != nullptr ? ctx->device : -2); break;
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: put(d, static_cast<CUdeviceptr>(base)); break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE: put(d, size); break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}

}  // namespace

std::vector<ProcEntry> memory_procs() {
  return {
      {"cuMemGetInfo", 3020, erase_fn(&fake_cuMemGetInfo)},
      {"cuMemAlloc", 3020, erase_fn(&fake_cuMemAlloc)},
      {"cuMemFree", 3020, erase_fn(&fake_cuMemFree)},
      {"cuMemHostAlloc", 2020, erase_fn(&fake_cuMemHostAlloc)},
      {"cuMemFreeHost", 2000, erase_fn(&fake_cuMemFreeHost)},
      {"cuMemHostGetDevicePointer", 3020, erase_fn(&fake_cuMemHostGetDevicePointer)},
      {"cuMemHostRegister", 6050, erase_fn(&fake_cuMemHostRegister)},
      {"cuMemHostUnregister", 4000, erase_fn(&fake_cuMemHostUnregister)},
      {"cuMemAllocManaged", 6000, erase_fn(&fake_cuMemAllocManaged)},
      {"cuMemAllocAsync", 11020, erase_fn(&fake_cuMemAllocAsync)},
      {"cuMemFreeAsync", 11020, erase_fn(&fake_cuMemFreeAsync)},
      {"cuPointerGetAttributes", 7000, erase_fn(&fake_cuPointerGetAttributes)},
  };
}

}  // namespace drvshim::fake
