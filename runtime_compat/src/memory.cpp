// SPDX-License-Identifier: Apache-2.0
// Memory management: device, pinned, registered, managed, pitched and
// stream-ordered allocations; copies and memsets (1D and 2D, synchronous and
// on streams, legacy and per-thread default stream); pointer attributes;
// managed-memory hints.
#include <cstring>

#include "runtime.hpp"

using namespace drvshim;
using namespace drvshim::rt::impl;

namespace {

DeviceSpan<std::byte> device_span(const ContextRef& ctx, const void* p, std::size_t bytes) {
  return DeviceSpan<std::byte>(ctx, reinterpret_cast<std::uintptr_t>(p), bytes, 0);
}

bool device_side(const Driver& drv, const void* p) {
  const auto k = inspect_pointer(drv, p).kind;
  return k == MemoryKind::device || k == MemoryKind::managed;
}

// cudaMemcpyDefault decided by where each pointer lives (unified addressing).
cudaMemcpyKind resolve(const Driver& drv, void* dst, const void* src, cudaMemcpyKind kind) {
  // "Host to host" with device memory on either side is copied by the driver,
  // as cudart's cuMemcpy does (the CPU cannot reach device memory).
  if (kind != cudaMemcpyDefault && kind != cudaMemcpyHostToHost) return kind;
  const bool d = device_side(drv, dst), s = device_side(drv, src);
  return d ? (s ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice)
           : (s ? cudaMemcpyDeviceToHost : cudaMemcpyHostToHost);
}

bool valid_kind(cudaMemcpyKind kind) { return static_cast<int>(kind) >= 0 && static_cast<int>(kind) <= 4; }

cudaError_t bad_kind(const char* api, cudaMemcpyKind kind) {
  return fail(cudaErrorInvalidMemcpyDirection,
              fmt::format("{}: kind {} is not a cudaMemcpyKind (0-4)", api, static_cast<int>(kind)));
}

// A host-to-host copy ordered on a stream: run by the driver's host-function
// thread once the stream's earlier work is done.
void host_copy_on(const StreamRef& s, void* dst, const void* src, std::size_t bytes) {
  s.launch_host_func([dst, src, bytes] { std::memmove(dst, src, bytes); });
}

// One copy, as cudaMemcpy / cudaMemcpyAsync and their per-thread-stream forms do it.
// `stream` empty: synchronous on the legacy default stream (cuMemcpy*).
cudaError_t do_copy(const char* api, void* dst, const void* src, std::size_t bytes, cudaMemcpyKind kind,
                    std::optional<cudaStream_t> stream, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (!valid_kind(kind)) return bad_kind(api, kind);
  // cudart's order: the direction, nothing to copy, the sticky error, the pointers.
  if (bytes != 0) {
    if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
  }
  if ((dst == nullptr || src == nullptr) && bytes != 0) return null_argument(api, "dst or src");
  return guarded(api, [&] {
    const ContextRef ctx = context(api);
    // Synchronous copies in per-thread-default-stream programs go on that stream.
    const bool on_stream = stream.has_value() || zero == DefaultStream::per_thread;
    const StreamRef s = on_stream ? stream_of(stream.value_or(nullptr), zero, api) : StreamRef::legacy_default(ctx);
    if (bytes == 0) return cudaSuccess;
    kind = resolve(driver(api), dst, src, kind);
    const std::span<const std::byte> hsrc(static_cast<const std::byte*>(src), bytes);
    const std::span<std::byte> hdst(static_cast<std::byte*>(dst), bytes);
    const auto ddst = device_span(ctx, dst, bytes);
    const DeviceSpan<const std::byte> dsrc(device_span(ctx, src, bytes));
    if (on_stream) {
      switch (kind) {
        case cudaMemcpyHostToDevice: copy_async(s, ddst, hsrc); break;
        case cudaMemcpyDeviceToHost: copy_async(s, hdst, dsrc); break;
        case cudaMemcpyDeviceToDevice: copy_async(s, ddst, dsrc); break;
        default: host_copy_on(s, dst, src, bytes); break;
      }
      if (!stream.has_value()) s.synchronize();  // the synchronous form on the per-thread stream
    } else {
      switch (kind) {
        case cudaMemcpyHostToDevice: drvshim::copy(ddst, hsrc); break;
        case cudaMemcpyDeviceToHost: drvshim::copy(hdst, dsrc); break;
        case cudaMemcpyDeviceToDevice: drvshim::copy(ddst, dsrc); break;
        default:
          // Ordered after the device's work, like cudart's cuMemcpy.
          s.synchronize();
          std::memmove(dst, src, bytes);
          break;
      }
    }
    return cudaSuccess;
  });
}

cudaError_t do_memset(const char* api, void* ptr, int value, std::size_t bytes, std::optional<cudaStream_t> stream,
                      DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  // The sticky error before the pointer.
  if (bytes != 0) {
    if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
  }
  if (ptr == nullptr && bytes != 0) return null_argument(api, "devPtr");
  return guarded(api, [&] {
    const ContextRef ctx = context(api);
    if (bytes == 0) return cudaSuccess;
    const auto span = device_span(ctx, ptr, bytes);
    if (stream.has_value() || zero == DefaultStream::per_thread) {
      const StreamRef s = stream_of(stream.value_or(nullptr), zero, api);
      fill_async(s, span, static_cast<std::byte>(value));
      if (!stream.has_value()) s.synchronize();
    } else {
      fill(span, static_cast<std::byte>(value));
    }
    return cudaSuccess;
  });
}

cudaError_t do_copy_2d(const char* api, void* dst, std::size_t dpitch, const void* src, std::size_t spitch,
                       std::size_t width, std::size_t height, cudaMemcpyKind kind, std::optional<cudaStream_t> stream,
                       DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (!valid_kind(kind)) return bad_kind(api, kind);
  if ((width > dpitch || width > spitch) && height > 0) {
    // cudart 13.0: one row is cudaErrorInvalidValue (H200, pitched_2d.cu, 2026-12-01), several rows
    // cudaErrorInvalidPitchValue (H100, tests/runtime_api/conformance, 2026-12-07).
    return fail(height > 1 ? cudaErrorInvalidPitchValue : cudaErrorInvalidValue,
                fmt::format("{}: width {} exceeds the pitch (dst {}, src {})", api, width, dpitch, spitch));
  }
  if (width != 0 && height != 0) {
    if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
  }
  if ((dst == nullptr || src == nullptr) && width != 0 && height != 0) return null_argument(api, "dst or src");
  return guarded(api, [&] {
    const ContextRef ctx = context(api);
    Copy2D c;
    c.src = src;
    c.src_pitch = spitch;
    c.dst = dst;
    c.dst_pitch = dpitch;
    c.width_bytes = width;
    c.height = height;
    const auto side = [](bool device) { return device ? MemorySide::device : MemorySide::host; };
    switch (kind) {
      case cudaMemcpyHostToHost: c.src_side = c.dst_side = MemorySide::host; break;
      case cudaMemcpyHostToDevice: c.src_side = side(false), c.dst_side = side(true); break;
      case cudaMemcpyDeviceToHost: c.src_side = side(true), c.dst_side = side(false); break;
      case cudaMemcpyDeviceToDevice: c.src_side = c.dst_side = MemorySide::device; break;
      default: c.src_side = c.dst_side = MemorySide::unified; break;
    }
    if (stream.has_value() || zero == DefaultStream::per_thread) {
      const StreamRef s = stream_of(stream.value_or(nullptr), zero, api);
      drvshim::copy_2d(ctx, c, &s);
      if (!stream.has_value()) s.synchronize();
    } else {
      drvshim::copy_2d(ctx, c);
    }
    return cudaSuccess;
  });
}

cudaError_t do_memset_2d(const char* api, void* ptr, std::size_t pitch, int value, std::size_t width,
                         std::size_t height, std::optional<cudaStream_t> stream, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (width != 0 && height != 0) {
    if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
  }
  if (width > pitch) {
    return fail(cudaErrorInvalidValue, fmt::format("{}: width {} exceeds the pitch {}", api, width, pitch));
  }
  if (ptr == nullptr && width != 0 && height != 0) return null_argument(api, "devPtr");
  return guarded(api, [&] {
    const ContextRef ctx = context(api);
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    if (stream.has_value() || zero == DefaultStream::per_thread) {
      const StreamRef s = stream_of(stream.value_or(nullptr), zero, api);
      fill_2d(ctx, address, pitch, static_cast<std::uint8_t>(value), width, height, &s);
      if (!stream.has_value()) s.synchronize();
    } else {
      fill_2d(ctx, address, pitch, static_cast<std::uint8_t>(value), width, height);
    }
    return cudaSuccess;
  });
}

std::size_t allocation_size(const DeviceAllocation& a) { return a.bytes; }

template <class Owner>
void record_device(void** out, const ContextRef& ctx, std::uintptr_t address, std::size_t bytes, Owner&& owner) {
  if (foreign(ctx)) {
    (void)owner.detach();  // the program's context: the program's memory (runtime.hpp)
  } else {
    registries().device_memory.add(address, std::make_shared<DeviceAllocation>(DeviceAllocation{
                                                ctx.device().ordinal(), bytes, std::forward<Owner>(owner)}));
  }
  *out = reinterpret_cast<void*>(address);
}

}  // namespace

// ---- device memory ----------------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  if (const cudaError_t failed = initialise("cudaMalloc")) return failed;
  if (ptr == nullptr) return null_argument("cudaMalloc", "devPtr");
  if (const cudaError_t e = enter("cudaMalloc", Prologue::context); e != cudaSuccess) return e;
  *ptr = nullptr;
  return guarded("cudaMalloc", [&] {
    const ContextRef ctx = context("cudaMalloc");
    if (bytes == 0) return cudaSuccess;  // as cudart: success, and a null pointer
    auto buffer = DeviceBuffer::allocate(ctx, bytes);
    const DevicePtr address = buffer.address();
    record_device(ptr, ctx, address, bytes, std::move(buffer));
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaMallocPitch(void** ptr, size_t* pitch, size_t width, size_t height) {
  if (const cudaError_t failed = initialise("cudaMallocPitch")) return failed;
  if (ptr == nullptr || pitch == nullptr) return null_argument("cudaMallocPitch", "devPtr or pitch");
  if (const cudaError_t e = enter("cudaMallocPitch", Prologue::context); e != cudaSuccess) return e;
  *pitch = 0;  // as cudart, also when the call then fails
  *ptr = nullptr;
  return guarded("cudaMallocPitch", [&] {
    const ContextRef ctx = context("cudaMallocPitch");
    if (width == 0 || height == 0) {
      *pitch = 0;
      return cudaSuccess;
    }
    auto a = allocate_pitched(ctx, width, height, 4);
    const DevicePtr address = a.buffer.address();
    *pitch = a.pitch;
    record_device(ptr, ctx, address, a.pitch * height, std::move(a.buffer));
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaMallocManaged(void** ptr, size_t bytes, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaMallocManaged")) return failed;
  if (ptr == nullptr) return null_argument("cudaMallocManaged", "devPtr");
  if (const cudaError_t e = enter("cudaMallocManaged", Prologue::context); e != cudaSuccess) return e;
  *ptr = nullptr;                      // as cudart, also when the call fails
  if (bytes == 0) return cudaSuccess;  // as cudart 13.0: success and a null pointer
  if (flags != cudaMemAttachGlobal && flags != cudaMemAttachHost) {
    return fail(
        cudaErrorInvalidValue,
        fmt::format("cudaMallocManaged: flags 0x{:x}: cudaMemAttachGlobal (1) or cudaMemAttachHost (2)", flags));
  }
  return guarded("cudaMallocManaged", [&] {
    const ContextRef ctx = context("cudaMallocManaged");
    auto buffer = ManagedBuffer::allocate(ctx, bytes, static_cast<MemoryAttach>(flags));
    const DevicePtr address = buffer.address();
    record_device(ptr, ctx, address, bytes, std::move(buffer));
    return cudaSuccess;
  });
}

namespace {

cudaError_t malloc_async(const char* api, void** ptr, std::size_t bytes, cudaStream_t stream, DefaultStream zero) {
  if (ptr == nullptr) return null_argument(api, "devPtr");
  *ptr = nullptr;
  // The stream's context does the work: cudart makes no context current for it.
  if (const cudaError_t e = enter(api, Prologue::device_sticky); e != cudaSuccess) return e;
  return guarded(api, [&] {
    const StreamRef s = stream_of(stream, zero, api);
    if (bytes == 0) return cudaSuccess;
    auto buffer = AsyncDeviceBuffer::allocate(s, bytes);
    if (s.native() > 0x1 && capture_status(s) != CaptureStatus::none) {
      // Captured: a node of the graph, whose memory exists only while the
      // graph runs (and the graph frees it or the program does, in or after
      // the graph). The runtime keeps no record that could free it later.
      *ptr = reinterpret_cast<void*>(buffer.detach());
      return cudaSuccess;
    }
    const DevicePtr address = buffer.address();
    record_device(ptr, s.context(), address, bytes, std::move(buffer));
    return cudaSuccess;
  });
}

// The context an allocation belongs to.
ContextRef allocation_context(const DeviceAllocation& a) {
  return std::visit(
      [](const auto& owner) -> ContextRef {
        if constexpr (std::is_same_v<std::decay_t<decltype(owner)>, AsyncDeviceBuffer>) {
          return owner.stream().context();
        } else {
          return owner.context();
        }
      },
      a.owner);
}

// Frees by address while the removed record still owns the memory: when the
// driver refuses (during a capture, say), the memory is still allocated, so
// the record goes back and a later free can succeed; on success the owner
// gives the memory up, which is freed.
template <class Free>
void free_keeping_record_on_failure(std::uintptr_t address, const std::shared_ptr<DeviceAllocation>& a, Free&& free) {
  try {
    free();
  } catch (...) {
    registries().device_memory.add(address, a);
    throw;
  }
  std::visit([](auto& owner) { (void)owner.detach(); }, a->owner);
}

cudaError_t free_async(const char* api, void* ptr, cudaStream_t stream, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::device_sticky); e != cudaSuccess) return e;
  return guarded(api, [&] {
    // The stream first: stream 0 makes the thread's context current, also to free nothing.
    const StreamRef s = stream_of(stream, zero, api);
    if (ptr == nullptr) return cudaSuccess;
    if (auto found = registries().device_memory.find(reinterpret_cast<std::uintptr_t>(ptr));
        found && std::holds_alternative<ManagedBuffer>(found->owner)) {
      // The driver's answer, as cudart passes it on; the memory stays allocated.
      return fail(
          cudaErrorNotSupported,
          fmt::format("{}: {} is managed memory, which is not freed stream-ordered (cudaFree frees it)", api, ptr));
    }
    auto a = registries().device_memory.remove(reinterpret_cast<std::uintptr_t>(ptr));
    if (!a) {
      // Not the runtime's (cuMemAllocAsync, another library): the driver frees it or says why not.
      free_device_memory(s, reinterpret_cast<std::uintptr_t>(ptr));
      return cudaSuccess;
    }
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    free_keeping_record_on_failure(address, a, [&] {
      if (std::holds_alternative<AsyncDeviceBuffer>(a->owner)) {
        free_device_memory(s, address);  // ordered on `s`
      } else {
        s.synchronize();  // other kinds are freed once the stream's work is done
        free_device_memory(allocation_context(*a), address);
      }
    });
    return cudaSuccess;
  });
}

}  // namespace

DRVSHIM_CUDART cudaError_t cudaMallocAsync(void** ptr, size_t bytes, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMallocAsync")) return failed;
  return malloc_async("cudaMallocAsync", ptr, bytes, stream, DefaultStream::legacy);
}
DRVSHIM_CUDART cudaError_t cudaMallocAsync_ptsz(void** ptr, size_t bytes, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMallocAsync_ptsz")) return failed;
  return malloc_async("cudaMallocAsync", ptr, bytes, stream, DefaultStream::per_thread);
}
DRVSHIM_CUDART cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaFreeAsync")) return failed;
  return free_async("cudaFreeAsync", ptr, stream, DefaultStream::legacy);
}
DRVSHIM_CUDART cudaError_t cudaFreeAsync_ptsz(void* ptr, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaFreeAsync_ptsz")) return failed;
  return free_async("cudaFreeAsync", ptr, stream, DefaultStream::per_thread);
}

DRVSHIM_CUDART cudaError_t cudaFree(void* ptr) {
  if (const cudaError_t failed = initialise("cudaFree")) return failed;
  if (const cudaError_t e = enter("cudaFree", Prologue::sticky); e != cudaSuccess) return e;
  // cudaFree(nullptr) frees nothing but, as under cudart 13.0 on the H200,
  // initialises the device: its primary context active and current on this
  // thread (again after a cudaDeviceReset; the classic way to set up early).
  if (ptr == nullptr) {
    return cudaSuccess;  // enter() made the context current
  }
  return guarded("cudaFree", [&] {
    auto& memory = registries().device_memory;
    const auto address = reinterpret_cast<std::uintptr_t>(ptr);
    auto a = memory.remove(address);
    if (!a) {
      const auto [base, inside] = memory.find_containing(address, allocation_size);
      if (inside) {
        return fail(cudaErrorInvalidValue,
                    fmt::format("cudaFree: {} points inside the allocation at 0x{:x}, not at its start", ptr, base));
      }
      // Memory the runtime did not allocate (cuMemAlloc, another library):
      // as cudart, the driver frees it or says why not.
      free_device_memory(context("cudaFree"), address);
      return cudaSuccess;
    }
    // After a sticky error the context is gone: the memory went with it, and
    // cudart reports the error here as at every other call.
    if (const cudaError_t sticky = sticky_error(a->device); sticky != cudaSuccess) {
      return fail(sticky, fmt::format("cudaFree: device {} has a sticky error", a->device));
    }
    free_keeping_record_on_failure(address, a, [&] {
      if (const auto* async = std::get_if<AsyncDeviceBuffer>(&a->owner)) {
        free_device_memory(async->stream(), address);  // ordered where it was allocated, as its owner frees it
      } else {
        free_device_memory(allocation_context(*a), address);
      }
    });
    return cudaSuccess;
  });
}

// ---- page-locked and registered host memory --------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaHostAlloc(void** ptr, size_t bytes, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaHostAlloc")) return failed;
  // cudart's order: the context, the sticky error (not for 0 bytes), the arguments.
  if (const cudaError_t e = enter("cudaHostAlloc", Prologue::context); e != cudaSuccess) return e;
  if (ptr != nullptr) *ptr = nullptr;  // as cudart, also when the call fails
  if (bytes != 0) {
    if (const cudaError_t e = enter("cudaHostAlloc", Prologue::sticky); e != cudaSuccess) return e;
  }
  if (ptr == nullptr) return null_argument("cudaHostAlloc", "pHost");
  if ((flags & ~0x7u) != 0) {
    return fail(cudaErrorInvalidValue, fmt::format("cudaHostAlloc: flags 0x{:x}: cudaHostAllocPortable (1), "
                                                   "cudaHostAllocMapped (2), cudaHostAllocWriteCombined (4)",
                                                   flags));
  }
  return guarded("cudaHostAlloc", [&] {
    const ContextRef ctx = context("cudaHostAlloc");
    if (bytes == 0) return cudaSuccess;  // as cudart: success, and a null pointer
    PinnedBuffer buffer = PinnedBuffer::allocate(ctx, bytes, static_cast<HostAllocFlags>(flags));
    void* data = buffer.data();
    if (foreign(ctx)) {
      (void)buffer.detach();  // the program's context: the program's memory (runtime.hpp)
    } else {
      registries().host_memory.add(
          reinterpret_cast<std::uintptr_t>(data),
          std::make_shared<HostAllocation>(HostAllocation{ctx.device().ordinal(), flags, std::move(buffer)}));
    }
    *ptr = data;
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaMallocHost(void** ptr, size_t bytes) { return cudaHostAlloc(ptr, bytes, 0); }

DRVSHIM_CUDART cudaError_t cudaFreeHost(void* ptr) {
  if (const cudaError_t failed = initialise("cudaFreeHost")) return failed;
  if (const cudaError_t e = enter("cudaFreeHost", Prologue::sticky); e != cudaSuccess) return e;
  if (ptr == nullptr) return cudaSuccess;
  return guarded("cudaFreeHost", [&] {
    auto h = registries().host_memory.remove(reinterpret_cast<std::uintptr_t>(ptr));
    if (!h) {
      // Not the runtime's (cuMemHostAlloc, another library): the driver frees it or says why not.
      free_host_memory(context("cudaFreeHost"), ptr);
      return cudaSuccess;
    }
    if (const cudaError_t sticky = sticky_error(h->device); sticky != cudaSuccess) {
      return fail(sticky, fmt::format("cudaFreeHost: device {} has a sticky error", h->device));
    }
    try {
      free_host_memory(h->owner.context(), ptr);
    } catch (...) {
      registries().host_memory.add(reinterpret_cast<std::uintptr_t>(ptr), h);  // still allocated: still the runtime's
      throw;
    }
    (void)h->owner.detach();
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaHostGetDevicePointer(void** device, void* host, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaHostGetDevicePointer")) return failed;
  if (host == nullptr) return null_argument("cudaHostGetDevicePointer", "pHost");
  if (const cudaError_t e = enter("cudaHostGetDevicePointer", Prologue::context); e != cudaSuccess) return e;
  if (device != nullptr) *device = nullptr;  // as cudart, also when the call then fails
  if (const cudaError_t e = enter("cudaHostGetDevicePointer", Prologue::sticky); e != cudaSuccess) return e;
  if (device == nullptr) return null_argument("cudaHostGetDevicePointer", "pDevice");
  if (flags != 0) return fail(cudaErrorInvalidValue, "cudaHostGetDevicePointer: flags must be 0");
  return guarded("cudaHostGetDevicePointer", [&] {
    const PointerInfo info = inspect_pointer(driver("cudaHostGetDevicePointer"), host);
    if (info.kind != MemoryKind::page_locked_host || info.device_address == 0) {
      return fail(
          cudaErrorInvalidValue,
          fmt::format("cudaHostGetDevicePointer: {} is not mapped page-locked memory ({})", host, info.to_string()));
    }
    *device = reinterpret_cast<void*>(info.device_address);
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaHostGetFlags(unsigned* flags, void* host) {
  if (const cudaError_t failed = initialise("cudaHostGetFlags")) return failed;
  if (flags == nullptr) return null_argument("cudaHostGetFlags", "pFlags");
  if (const cudaError_t e = enter("cudaHostGetFlags", Prologue::sticky); e != cudaSuccess) return e;
  if (host == nullptr) return null_argument("cudaHostGetFlags", "pHost");
  return guarded("cudaHostGetFlags", [&] {
    const auto [base, h] = registries().host_memory.find_containing(
        reinterpret_cast<std::uintptr_t>(host), [](const HostAllocation& a) { return a.owner.size(); });
    // Memory the runtime did not allocate: the driver answers for it.
    *flags = h ? host_allocation_flags(h->owner.context(), h->owner.data())
               : host_allocation_flags(context("cudaHostGetFlags"), host);
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaHostRegister(void* ptr, size_t bytes, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaHostRegister")) return failed;
  if (const cudaError_t e = enter("cudaHostRegister", Prologue::sticky); e != cudaSuccess) return e;
  if (ptr == nullptr) return null_argument("cudaHostRegister", "ptr");
  return guarded("cudaHostRegister", [&] {
    const ContextRef ctx = context("cudaHostRegister");
    auto range = RegisteredRange::register_range(ctx, ptr, bytes, static_cast<HostRegisterFlags>(flags));
    if (foreign(ctx)) {
      (void)range.detach();  // the program's context: the program's registration (runtime.hpp)
    } else {
      registries().registrations.add(
          reinterpret_cast<std::uintptr_t>(ptr),
          std::make_shared<HostRegistration>(HostRegistration{ctx.device().ordinal(), flags, std::move(range)}));
    }
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaHostUnregister(void* ptr) {
  if (const cudaError_t failed = initialise("cudaHostUnregister")) return failed;
  if (const cudaError_t e = enter("cudaHostUnregister", Prologue::sticky); e != cudaSuccess) return e;
  if (ptr == nullptr) return null_argument("cudaHostUnregister", "ptr");
  return guarded("cudaHostUnregister", [&] {
    auto r = registries().registrations.remove(reinterpret_cast<std::uintptr_t>(ptr));
    if (!r) {
      // Not registered by the runtime (cuMemHostRegister, another library):
      // the driver unregisters it or says it is not registered.
      unregister_host_memory(context("cudaHostUnregister"), ptr);
      return cudaSuccess;
    }
    r->owner.unregister();
    return cudaSuccess;
  });
}

// ---- copies and memsets ----------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t failed = initialise("cudaMemcpy")) return failed;
  return do_copy("cudaMemcpy", dst, src, bytes, kind, std::nullopt, DefaultStream::legacy);
}
DRVSHIM_CUDART cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (const cudaError_t failed = initialise("cudaMemcpy_ptds")) return failed;
  return do_copy("cudaMemcpy", dst, src, bytes, kind, std::nullopt, DefaultStream::per_thread);
}
DRVSHIM_CUDART cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                           cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemcpyAsync")) return failed;
  return do_copy("cudaMemcpyAsync", dst, src, bytes, kind, stream, DefaultStream::legacy);
}
DRVSHIM_CUDART cudaError_t cudaMemcpyAsync_ptsz(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                                                cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemcpyAsync_ptsz")) return failed;
  return do_copy("cudaMemcpyAsync", dst, src, bytes, kind, stream, DefaultStream::per_thread);
}

DRVSHIM_CUDART cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (const cudaError_t failed = initialise("cudaMemset")) return failed;
  return do_memset("cudaMemset", ptr, value, bytes, std::nullopt, DefaultStream::legacy);
}
DRVSHIM_CUDART cudaError_t cudaMemset_ptds(void* ptr, int value, size_t bytes) {
  if (const cudaError_t failed = initialise("cudaMemset_ptds")) return failed;
  return do_memset("cudaMemset", ptr, value, bytes, std::nullopt, DefaultStream::per_thread);
}
DRVSHIM_CUDART cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemsetAsync")) return failed;
  return do_memset("cudaMemsetAsync", ptr, value, bytes, stream, DefaultStream::legacy);
}
DRVSHIM_CUDART cudaError_t cudaMemsetAsync_ptsz(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemsetAsync_ptsz")) return failed;
  return do_memset("cudaMemsetAsync", ptr, value, bytes, stream, DefaultStream::per_thread);
}

DRVSHIM_CUDART cudaError_t cudaMemcpy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                        size_t height, cudaMemcpyKind kind) {
  if (const cudaError_t failed = initialise("cudaMemcpy2D")) return failed;
  return do_copy_2d("cudaMemcpy2D", dst, dpitch, src, spitch, width, height, kind, std::nullopt, DefaultStream::legacy);
}
DRVSHIM_CUDART cudaError_t cudaMemcpy2D_ptds(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                             size_t height, cudaMemcpyKind kind) {
  if (const cudaError_t failed = initialise("cudaMemcpy2D_ptds")) return failed;
  return do_copy_2d("cudaMemcpy2D", dst, dpitch, src, spitch, width, height, kind, std::nullopt,
                    DefaultStream::per_thread);
}
DRVSHIM_CUDART cudaError_t cudaMemcpy2DAsync(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
                                             size_t height, cudaMemcpyKind kind, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemcpy2DAsync")) return failed;
  return do_copy_2d("cudaMemcpy2DAsync", dst, dpitch, src, spitch, width, height, kind, stream, DefaultStream::legacy);
}
DRVSHIM_CUDART cudaError_t cudaMemcpy2DAsync_ptsz(void* dst, size_t dpitch, const void* src, size_t spitch,
                                                  size_t width, size_t height, cudaMemcpyKind kind,
                                                  cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemcpy2DAsync_ptsz")) return failed;
  return do_copy_2d("cudaMemcpy2DAsync", dst, dpitch, src, spitch, width, height, kind, stream,
                    DefaultStream::per_thread);
}

DRVSHIM_CUDART cudaError_t cudaMemset2D(void* ptr, size_t pitch, int value, size_t width, size_t height) {
  if (const cudaError_t failed = initialise("cudaMemset2D")) return failed;
  return do_memset_2d("cudaMemset2D", ptr, pitch, value, width, height, std::nullopt, DefaultStream::legacy);
}
DRVSHIM_CUDART cudaError_t cudaMemset2D_ptds(void* ptr, size_t pitch, int value, size_t width, size_t height) {
  if (const cudaError_t failed = initialise("cudaMemset2D_ptds")) return failed;
  return do_memset_2d("cudaMemset2D", ptr, pitch, value, width, height, std::nullopt, DefaultStream::per_thread);
}
DRVSHIM_CUDART cudaError_t cudaMemset2DAsync(void* ptr, size_t pitch, int value, size_t width, size_t height,
                                             cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemset2DAsync")) return failed;
  return do_memset_2d("cudaMemset2DAsync", ptr, pitch, value, width, height, stream, DefaultStream::legacy);
}
DRVSHIM_CUDART cudaError_t cudaMemset2DAsync_ptsz(void* ptr, size_t pitch, int value, size_t width, size_t height,
                                                  cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemset2DAsync_ptsz")) return failed;
  return do_memset_2d("cudaMemset2DAsync", ptr, pitch, value, width, height, stream, DefaultStream::per_thread);
}

// ---- pointer attributes and managed-memory hints ------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaPointerGetAttributes(cudaPointerAttributes* attributes, const void* ptr) {
  if (const cudaError_t failed = initialise("cudaPointerGetAttributes")) return failed;
  if (attributes == nullptr) return null_argument("cudaPointerGetAttributes", "attributes");
  // As cudart 13.0 (H100, tests/runtime_api/conformance, 2026-12-07): the
  // answer is cleared first (also when the call then fails), the addresses
  // are the driver's in the thread's current context (no device address
  // without one), and a device with a sticky error still answers.
  *attributes = cudaPointerAttributes{};
  attributes->device = -1;
  if (const cudaError_t e = enter("cudaPointerGetAttributes", Prologue::driver); e != cudaSuccess) return e;
  return guarded("cudaPointerGetAttributes", [&] {
    const Driver& drv = driver("cudaPointerGetAttributes");
    const PointerInfo info = inspect_pointer(drv, static_cast<DevicePtr>(reinterpret_cast<std::uintptr_t>(ptr)),
                                             AddressesIn::current_context);
    cudaPointerAttributes a{};
    switch (info.kind) {
      case MemoryKind::pageable_host: a.type = cudaMemoryTypeUnregistered; break;
      case MemoryKind::page_locked_host: a.type = cudaMemoryTypeHost; break;
      case MemoryKind::managed: a.type = cudaMemoryTypeManaged; break;
      default: a.type = cudaMemoryTypeDevice; break;
    }
    a.device = info.kind == MemoryKind::pageable_host ? -2 : info.device_ordinal;
    a.devicePointer = reinterpret_cast<void*>(info.device_address);
    a.hostPointer = info.host_address;
    // Memory from a pool names itself as its device pointer (where a context
    // is current), and unregistered host memory as its host pointer.
    if (a.devicePointer == nullptr && (a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged) &&
        drv.current_context() != 0) {
      a.devicePointer = const_cast<void*>(ptr);
    }
    if (a.hostPointer == nullptr && a.type == cudaMemoryTypeUnregistered) a.hostPointer = const_cast<void*>(ptr);
    *attributes = a;
    return cudaSuccess;
  });
}

namespace {

MemoryLocation location_of(cudaMemLocation l) {
  return MemoryLocation{static_cast<MemoryLocation::Type>(l.type), l.id};
}

cudaError_t prefetch(const char* api, const void* ptr, std::size_t bytes, cudaMemLocation location, unsigned flags,
                     cudaStream_t stream, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (flags != 0) return fail(cudaErrorInvalidValue, fmt::format("{}: flags must be 0", api));
  int type = 0;
  static_assert(sizeof location.type == sizeof type);
  std::memcpy(&type, &location.type, sizeof type);  // a number the enum may not name
  if (type < cudaMemLocationTypeDevice || type > cudaMemLocationTypeHostNumaCurrent) {
    // Checked before the sticky error, as cudart 13.0 does (H100, tests/runtime_api/conformance, 2026-12-07).
    return fail(cudaErrorInvalidValue, fmt::format("{}: location type {}: a device (1), the host (2), a host NUMA "
                                                   "node (3) or the nearest one (4)",
                                                   api, type));
  }
  return guarded(api, [&] {
    prefetch_async(stream_of(stream, zero, api), reinterpret_cast<std::uintptr_t>(ptr), bytes, location_of(location));
    return cudaSuccess;
  });
}

}  // namespace

DRVSHIM_CUDART cudaError_t cudaMemPrefetchAsync(const void* ptr, size_t bytes, cudaMemLocation location, unsigned flags,
                                                cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemPrefetchAsync")) return failed;
  return prefetch("cudaMemPrefetchAsync", ptr, bytes, location, flags, stream, DefaultStream::legacy);
}
DRVSHIM_CUDART cudaError_t cudaMemPrefetchAsync_ptsz(const void* ptr, size_t bytes, cudaMemLocation location,
                                                     unsigned flags, cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaMemPrefetchAsync_ptsz")) return failed;
  return prefetch("cudaMemPrefetchAsync", ptr, bytes, location, flags, stream, DefaultStream::per_thread);
}

DRVSHIM_CUDART cudaError_t cudaMemAdvise(const void* ptr, size_t bytes, cudaMemoryAdvise advice,
                                         cudaMemLocation location) {
  if (const cudaError_t failed = initialise("cudaMemAdvise")) return failed;
  if (const cudaError_t e = enter("cudaMemAdvise", Prologue::context); e != cudaSuccess) return e;
  // Checked before the sticky error, as cudart 13.0 does (H100, tests/runtime_api/conformance, 2026-12-07).
  int advice_number = 0;
  int location_type = 0;
  static_assert(sizeof advice == sizeof advice_number && sizeof location.type == sizeof location_type);
  std::memcpy(&advice_number, &advice, sizeof advice_number);  // numbers the enums may not name
  std::memcpy(&location_type, &location.type, sizeof location_type);
  if (advice_number < cudaMemAdviseSetReadMostly || advice_number > cudaMemAdviseUnsetAccessedBy) {
    return fail(cudaErrorInvalidValue, fmt::format("cudaMemAdvise: advice {}: cudaMemAdviseSetReadMostly (1) to "
                                                   "cudaMemAdviseUnsetAccessedBy (6)",
                                                   advice_number));
  }
  if (location_type < cudaMemLocationTypeDevice || location_type > cudaMemLocationTypeHostNumaCurrent) {
    return fail(cudaErrorInvalidValue, fmt::format("cudaMemAdvise: location type {}: a device (1), the host (2), a "
                                                   "host NUMA node (3) or the nearest one (4)",
                                                   location_type));
  }
  if (const cudaError_t e = enter("cudaMemAdvise", Prologue::sticky); e != cudaSuccess) return e;
  if (bytes == 0) return fail(cudaErrorInvalidValue, "cudaMemAdvise: count is 0");
  return guarded("cudaMemAdvise", [&] {
    advise(context("cudaMemAdvise"), reinterpret_cast<std::uintptr_t>(ptr), bytes, static_cast<MemoryAdvice>(advice),
           location_of(location));
    return cudaSuccess;
  });
}

// ---- channel descriptors (a plain constructor; arrays and textures are outside the subset) -------

DRVSHIM_CUDART cudaChannelFormatDesc cudaCreateChannelDesc(int x, int y, int z, int w, cudaChannelFormatKind f) {
  return cudaChannelFormatDesc{x, y, z, w, f};
}
