// SPDX-License-Identifier: Apache-2.0
// Streams and events: creation with flags and priorities, synchronisation
// and queries, callbacks and host functions, attributes, attaching managed
// memory, event recording and timing; every call that takes a stream in its
// legacy and per-thread-default-stream (_ptsz) form.
#include <algorithm>
#include <cstddef>
#include <cstring>

#include "runtime.hpp"

using namespace drvshim;
using namespace drvshim::rt::impl;

namespace {

constexpr DefaultStream kLegacy = DefaultStream::legacy;
constexpr DefaultStream kPerThread = DefaultStream::per_thread;

// The event a cudart handle names: one of the runtime's, or (cudaEvent_t is
// CUevent) one made with cuEventCreate or by another library, which the
// driver checks. Null is cudaErrorInvalidResourceHandle, as under cudart.
EventRef event_of(const char* api, cudaEvent_t event) {
  if (event == nullptr) {
    throw CudaError(ErrorDetails{api, cudaErrorInvalidResourceHandle, "event 0 (null)",
                                 "pass an event from cudaEventCreate or cuEventCreate", false});
  }
  if (auto e = registries().events.find(reinterpret_cast<std::uintptr_t>(event))) return e->owner.ref();
  // The thread's context, or its device's primary context without making it
  // current: cudart's event queries make no context current.
  const ContextRef ctx = driver(api).current_context() != 0 ? context(api) : primary(current_device(), api);
  return EventRef::wrap(ctx, reinterpret_cast<std::uintptr_t>(event));
}

// The bytes of the value union an attribute's field occupies: cudart writes
// those and leaves the rest of the caller's union as it was.
std::size_t stream_attribute_size(cudaStreamAttrID id) {
  switch (static_cast<int>(id)) {
    // The fields, not the structure's trailing padding (which cudart leaves too).
    case cudaLaunchAttributeAccessPolicyWindow:
      return offsetof(cudaAccessPolicyWindow, missProp) + sizeof(cudaAccessProperty);
    case cudaLaunchAttributeSynchronizationPolicy: return sizeof(cudaSynchronizationPolicy);
    case cudaLaunchAttributePriority: return sizeof(int);
    case cudaLaunchAttributeMemSyncDomainMap: return sizeof(cudaLaunchMemSyncDomainMap);
    case cudaLaunchAttributeMemSyncDomain: return sizeof(cudaLaunchMemSyncDomain);
    default: return sizeof(cudaStreamAttrValue);
  }
}

// The attributes cudart 13.0 accepts on a stream; it refuses the others with
// cudaErrorInvalidValue before making a context current (H100,
// tests/runtime_api/conformance, 2026-12-07).
bool stream_attribute(cudaStreamAttrID id) {
  int n = 0;
  static_assert(sizeof id == sizeof n);
  std::memcpy(&n, &id, sizeof n);  // a number the enum may not name
  switch (n) {
    case cudaLaunchAttributeAccessPolicyWindow:
    case cudaLaunchAttributeSynchronizationPolicy:
    case cudaLaunchAttributePriority:
    case cudaLaunchAttributeMemSyncDomainMap:
    case cudaLaunchAttributeMemSyncDomain: return true;
    default: return false;
  }
}

cudaError_t create_stream(const char* api, cudaStream_t* stream, unsigned flags, int priority) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (stream == nullptr) return null_argument(api, "pStream");
  if (flags > cudaStreamNonBlocking) {
    return fail(cudaErrorInvalidValue, fmt::format("{}: flags 0x{:x}: cudaStreamDefault (0) or "
                                                   "cudaStreamNonBlocking (1)",
                                                   api, flags));
  }
  return guarded(api, [&] {
    const ContextRef ctx = context(api);
    // As cudart: a priority outside the device's range is clamped into it.
    const StreamPriorityRange range = stream_priority_range(ctx);
    priority = std::clamp(priority, range.greatest, range.least);
    auto s = Stream::create(ctx, static_cast<StreamFlags>(flags), priority);
    const std::uintptr_t native = s.ref().native();
    if (foreign(ctx)) {
      (void)s.detach();  // the program's context: the program's stream (runtime.hpp)
    } else {
      registries().streams.add(
          native, std::make_shared<StreamEntry>(StreamEntry{ctx.device().ordinal(), flags, priority, std::move(s)}));
    }
    *stream = reinterpret_cast<cudaStream_t>(native);
    return cudaSuccess;
  });
}

cudaError_t synchronize(const char* api, cudaStream_t stream, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  return guarded(api, [&] {
    stream_of(stream, zero, api).synchronize();  // blocks with no runtime lock held
    return cudaSuccess;
  });
}

cudaError_t query(const char* api, cudaStream_t stream, DefaultStream zero) {
  if (const cudaError_t failed = initialise(api)) return failed;
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  return guarded(api, [&] { return stream_of(stream, zero, api).ready() ? cudaSuccess : cudaErrorNotReady; });
}

cudaError_t wait_event(const char* api, cudaStream_t stream, cudaEvent_t event, unsigned flags, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
  if (flags > cudaEventWaitExternal) return fail(cudaErrorInvalidValue, fmt::format("{}: flags 0x{:x}", api, flags));
  if (flags == cudaEventWaitExternal) {
    // A wait node for graphs: outside stream capture (which runtime_compat
    // does not do) cudart 13.0 answers cudaErrorIllegalState (H100,
    // tests/runtime_api/conformance, 2026-12-07).
    return fail(cudaErrorIllegalState,
                fmt::format("{}: cudaEventWaitExternal is for streams being captured into a graph", api));
  }
  return guarded(api, [&] {
    const EventRef e = event_of(api, event);
    stream_of(stream, zero, api).wait(e);
    return cudaSuccess;
  });
}

cudaError_t add_callback(const char* api, cudaStream_t stream, cudaStreamCallback_t callback, void* user_data,
                         unsigned flags, DefaultStream zero) {
  if (callback == nullptr) return null_argument(api, "callback");
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (flags != 0) return fail(cudaErrorInvalidValue, fmt::format("{}: flags must be 0", api));
  return guarded(api, [&] {
    const StreamRef s = stream_of(stream, zero, api);
    // A stream callback runs exactly once, so a capture cannot record it (a
    // host function can: cudaLaunchHostFunc).
    if (driver(api).has_function("cuStreamIsCapturing") && capture_status(s) != CaptureStatus::none) {
      return fail(cudaErrorStreamCaptureUnsupported,
                  fmt::format("{}: {} is capturing, and a stream callback runs exactly once; use cudaLaunchHostFunc, "
                              "which a capture records",
                              api, s.name()));
    }
    // Runs on the driver's thread once the stream's earlier work is done,
    // with the handle the program passed and the stream's status.
    s.launch_host_func([callback, stream, user_data] { callback(stream, cudaSuccess, user_data); });
    return cudaSuccess;
  });
}

cudaError_t host_func(const char* api, cudaStream_t stream, cudaHostFn_t fn, void* user_data, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (fn == nullptr) return null_argument(api, "fn");
  return guarded(api, [&] {
    stream_of(stream, zero, api).launch_host_func([fn, user_data] { fn(user_data); });
    return cudaSuccess;
  });
}

cudaError_t get_flags(const char* api, cudaStream_t stream, unsigned* flags, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (flags == nullptr) return null_argument(api, "flags");
  if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
  return guarded(api, [&] {
    const StreamRef s = stream_of(stream, zero, api);
    const auto entry = registries().streams.find(s.native());
    // The default streams are blocking; a stream the runtime did not create, the driver knows.
    *flags = entry ? entry->flags : s.native() <= 0x2 ? 0u : static_cast<unsigned>(s.flags());
    return cudaSuccess;
  });
}

cudaError_t get_priority(const char* api, cudaStream_t stream, int* priority, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (priority == nullptr) return null_argument(api, "priority");
  if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
  return guarded(api, [&] {
    const StreamRef s = stream_of(stream, zero, api);
    const auto entry = registries().streams.find(s.native());
    *priority = entry ? entry->priority : s.native() <= 0x2 ? 0 : s.priority();
    return cudaSuccess;
  });
}

cudaError_t get_device(const char* api, cudaStream_t stream, int* device, DefaultStream zero) {
  // A stream the runtime created: its device is known without asking the
  // driver (cudart does not either: it answers inside a host function too),
  // its sticky error before the output pointer.
  if (auto entry = registries().streams.find(reinterpret_cast<std::uintptr_t>(stream))) {
    if (const cudaError_t sticky = sticky_error(entry->device); sticky != cudaSuccess) {
      return fail(sticky, fmt::format("{}: device {} has a sticky error", api, entry->device));
    }
    if (device == nullptr) return null_argument(api, "device");
    *device = entry->device;
    return cudaSuccess;
  }
  if (const cudaError_t e = enter(api, Prologue::device_sticky); e != cudaSuccess) return e;
  if (device == nullptr) return null_argument(api, "device");
  return guarded(api, [&] {
    *device = stream_of(stream, zero, api).context().device().ordinal();
    return cudaSuccess;
  });
}

cudaError_t get_id(const char* api, cudaStream_t stream, unsigned long long* id, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  if (id == nullptr) return null_argument(api, "streamId");
  return guarded(api, [&] {
    *id = stream_of(stream, zero, api).id();
    return cudaSuccess;
  });
}

cudaError_t set_attribute(const char* api, cudaStream_t stream, cudaStreamAttrID id, const cudaStreamAttrValue* value,
                          DefaultStream zero) {
  if (value == nullptr) return null_argument(api, "value");
  if (!stream_attribute(id)) {
    return fail(cudaErrorInvalidValue, fmt::format("{}: attribute {} is not a stream attribute (accepted: "
                                                   "cudaLaunchAttributeAccessPolicyWindow, "
                                                   "cudaLaunchAttributeSynchronizationPolicy, "
                                                   "cudaLaunchAttributePriority, cudaLaunchAttributeMemSyncDomainMap, "
                                                   "cudaLaunchAttributeMemSyncDomain)",
                                                   api, static_cast<int>(id)));
  }
  if (const cudaError_t e = enter(api, Prologue::context); e != cudaSuccess) return e;
  return guarded(api, [&] {
    static_assert(sizeof(cudaStreamAttrValue) == sizeof(StreamAttributeValue));
    StreamAttributeValue v;
    std::memcpy(v.bytes, value, sizeof v.bytes);
    stream_of(stream, zero, api).set_attribute(static_cast<StreamAttribute>(id), v);
    return cudaSuccess;
  });
}

cudaError_t get_attribute(const char* api, cudaStream_t stream, cudaStreamAttrID id, cudaStreamAttrValue* value,
                          DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
  if (value == nullptr) return null_argument(api, "value_out");
  if (!stream_attribute(id)) {
    return fail(cudaErrorInvalidValue,
                fmt::format("{}: attribute {} is not a stream attribute", api, static_cast<int>(id)));
  }
  return guarded(api, [&] {
    const StreamAttributeValue v = stream_of(stream, zero, api).attribute(static_cast<StreamAttribute>(id));
    std::memcpy(value, v.bytes, std::min(sizeof v.bytes, stream_attribute_size(id)));
    return cudaSuccess;
  });
}

cudaError_t attach(const char* api, cudaStream_t stream, void* ptr, std::size_t length, unsigned flags,
                   DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
  // cudart 13.0 refuses attaching to "the" stream 0 alone (cudaStreamLegacy
  // and the per-thread stream are accepted: H100, tests/runtime_api/conformance, 2026-12-07).
  if (stream == nullptr && zero == DefaultStream::legacy && flags == cudaMemAttachSingle) {
    return fail(cudaErrorInvalidValue, fmt::format("{}: cudaMemAttachSingle needs a stream, not 0", api));
  }
  return guarded(api, [&] {
    stream_of(stream, zero, api)
        .attach_memory(reinterpret_cast<std::uintptr_t>(ptr), length, static_cast<MemoryAttach>(flags));
    return cudaSuccess;
  });
}

cudaError_t record(const char* api, cudaEvent_t event, cudaStream_t stream, unsigned flags, DefaultStream zero) {
  if (const cudaError_t e = enter(api, Prologue::sticky); e != cudaSuccess) return e;
  if (flags & ~static_cast<unsigned>(cudaEventRecordExternal)) {
    return fail(cudaErrorInvalidValue, fmt::format("{}: flags 0x{:x}: cudaEventRecordDefault (0) or "
                                                   "cudaEventRecordExternal (1)",
                                                   api, flags));
  }
  if (flags != cudaEventRecordDefault) {
    return not_supported(api, "cudaEventRecordExternal (events recorded for graphs) is not supported");
  }
  return guarded(api, [&] {
    const EventRef e = event_of(api, event);
    const StreamRef s = stream_of(stream, zero, api);
    if (s.context().address() != e.context().address() && registries().events.find(e.native())) {
      // The driver's answer to an event and a stream of different contexts, as cudart passes it on.
      return fail(cudaErrorInvalidResourceHandle,
                  fmt::format("{}: {} and {} belong to different contexts", api, e.name(), s.name()));
    }
    e.record(s);
    return cudaSuccess;
  });
}

}  // namespace

// ---- streams ----------------------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaStreamCreate(cudaStream_t* stream) {
  if (const cudaError_t failed = initialise("cudaStreamCreate")) return failed;
  return create_stream("cudaStreamCreate", stream, cudaStreamDefault, 0);
}
DRVSHIM_CUDART cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaStreamCreateWithFlags")) return failed;
  return create_stream("cudaStreamCreateWithFlags", stream, flags, 0);
}
DRVSHIM_CUDART cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned flags, int priority) {
  if (const cudaError_t failed = initialise("cudaStreamCreateWithPriority")) return failed;
  return create_stream("cudaStreamCreateWithPriority", stream, flags, priority);
}

DRVSHIM_CUDART cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (const cudaError_t failed = initialise("cudaStreamDestroy")) return failed;
  // cudart's order: its prologue, stream 0 (not a stream to destroy), the sticky error.
  if (const cudaError_t e = enter("cudaStreamDestroy", Prologue::context); e != cudaSuccess) return e;
  if (stream == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaStreamDestroy: stream 0 is not destroyed");
  if (const cudaError_t e = enter("cudaStreamDestroy", Prologue::sticky); e != cudaSuccess) return e;
  return guarded("cudaStreamDestroy", [&] {
    const auto handle = reinterpret_cast<std::uintptr_t>(stream);
    auto s = registries().streams.remove(handle);
    if (!s) {
      if (handle <= 0x2) {
        return fail(cudaErrorInvalidResourceHandle,
                    fmt::format("cudaStreamDestroy: {} is a default stream, which cannot be destroyed",
                                static_cast<void*>(stream)));
      }
      // A stream the runtime did not create (cuStreamCreate): destroyed as cudart does, by the driver.
      (void)context("cudaStreamDestroy");
      Stream::adopt(context_of_stream(driver("cudaStreamDestroy"), handle), handle).destroy();
      return cudaSuccess;
    }
    if (const cudaError_t sticky = sticky_error(s->device); sticky != cudaSuccess) {
      return fail(sticky, fmt::format("cudaStreamDestroy: device {} has a sticky error", s->device));
    }
    s->owner.destroy();  // does not wait for the stream's work, as cudart
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaStreamSynchronize(cudaStream_t s) {
  if (const cudaError_t failed = initialise("cudaStreamSynchronize")) return failed;
  return synchronize("cudaStreamSynchronize", s, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t s) {
  if (const cudaError_t failed = initialise("cudaStreamSynchronize_ptsz")) return failed;
  return synchronize("cudaStreamSynchronize", s, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaStreamQuery(cudaStream_t s) { return query("cudaStreamQuery", s, kLegacy); }
DRVSHIM_CUDART cudaError_t cudaStreamQuery_ptsz(cudaStream_t s) { return query("cudaStreamQuery", s, kPerThread); }
DRVSHIM_CUDART cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaStreamWaitEvent")) return failed;
  return wait_event("cudaStreamWaitEvent", s, e, flags, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t s, cudaEvent_t e, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaStreamWaitEvent_ptsz")) return failed;
  return wait_event("cudaStreamWaitEvent", s, e, flags, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaStreamAddCallback(cudaStream_t s, cudaStreamCallback_t cb, void* data, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaStreamAddCallback")) return failed;
  return add_callback("cudaStreamAddCallback", s, cb, data, flags, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaStreamAddCallback_ptsz(cudaStream_t s, cudaStreamCallback_t cb, void* data,
                                                      unsigned flags) {
  if (const cudaError_t failed = initialise("cudaStreamAddCallback_ptsz")) return failed;
  return add_callback("cudaStreamAddCallback", s, cb, data, flags, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaLaunchHostFunc(cudaStream_t s, cudaHostFn_t fn, void* data) {
  if (const cudaError_t failed = initialise("cudaLaunchHostFunc")) return failed;
  return host_func("cudaLaunchHostFunc", s, fn, data, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t s, cudaHostFn_t fn, void* data) {
  if (const cudaError_t failed = initialise("cudaLaunchHostFunc_ptsz")) return failed;
  return host_func("cudaLaunchHostFunc", s, fn, data, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaStreamGetFlags(cudaStream_t s, unsigned* flags) {
  if (const cudaError_t failed = initialise("cudaStreamGetFlags")) return failed;
  return get_flags("cudaStreamGetFlags", s, flags, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaStreamGetFlags_ptsz(cudaStream_t s, unsigned* flags) {
  if (const cudaError_t failed = initialise("cudaStreamGetFlags_ptsz")) return failed;
  return get_flags("cudaStreamGetFlags", s, flags, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaStreamGetPriority(cudaStream_t s, int* priority) {
  if (const cudaError_t failed = initialise("cudaStreamGetPriority")) return failed;
  return get_priority("cudaStreamGetPriority", s, priority, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaStreamGetPriority_ptsz(cudaStream_t s, int* priority) {
  if (const cudaError_t failed = initialise("cudaStreamGetPriority_ptsz")) return failed;
  return get_priority("cudaStreamGetPriority", s, priority, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaStreamGetDevice(cudaStream_t s, int* device) {
  if (const cudaError_t failed = initialise("cudaStreamGetDevice")) return failed;
  return get_device("cudaStreamGetDevice", s, device, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaStreamGetDevice_ptsz(cudaStream_t s, int* device) {
  if (const cudaError_t failed = initialise("cudaStreamGetDevice_ptsz")) return failed;
  return get_device("cudaStreamGetDevice", s, device, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaStreamGetId(cudaStream_t s, unsigned long long* id) {
  if (const cudaError_t failed = initialise("cudaStreamGetId")) return failed;
  return get_id("cudaStreamGetId", s, id, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaStreamGetId_ptsz(cudaStream_t s, unsigned long long* id) {
  if (const cudaError_t failed = initialise("cudaStreamGetId_ptsz")) return failed;
  return get_id("cudaStreamGetId", s, id, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaStreamSetAttribute(cudaStream_t s, cudaStreamAttrID id, const cudaStreamAttrValue* v) {
  if (const cudaError_t failed = initialise("cudaStreamSetAttribute")) return failed;
  return set_attribute("cudaStreamSetAttribute", s, id, v, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaStreamSetAttribute_ptsz(cudaStream_t s, cudaStreamAttrID id,
                                                       const cudaStreamAttrValue* v) {
  if (const cudaError_t failed = initialise("cudaStreamSetAttribute_ptsz")) return failed;
  return set_attribute("cudaStreamSetAttribute", s, id, v, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaStreamGetAttribute(cudaStream_t s, cudaStreamAttrID id, cudaStreamAttrValue* v) {
  if (const cudaError_t failed = initialise("cudaStreamGetAttribute")) return failed;
  return get_attribute("cudaStreamGetAttribute", s, id, v, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaStreamGetAttribute_ptsz(cudaStream_t s, cudaStreamAttrID id, cudaStreamAttrValue* v) {
  if (const cudaError_t failed = initialise("cudaStreamGetAttribute_ptsz")) return failed;
  return get_attribute("cudaStreamGetAttribute", s, id, v, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaStreamAttachMemAsync(cudaStream_t s, void* ptr, size_t length, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaStreamAttachMemAsync")) return failed;
  return attach("cudaStreamAttachMemAsync", s, ptr, length, flags, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaStreamAttachMemAsync_ptsz(cudaStream_t s, void* ptr, size_t length, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaStreamAttachMemAsync_ptsz")) return failed;
  return attach("cudaStreamAttachMemAsync", s, ptr, length, flags, kPerThread);
}

// ---- events -------------------------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaEventCreateWithFlags")) return failed;
  if (const cudaError_t e = enter("cudaEventCreateWithFlags", Prologue::context); e != cudaSuccess) return e;
  constexpr unsigned kAll = cudaEventBlockingSync | cudaEventDisableTiming | cudaEventInterprocess;
  if ((flags & ~kAll) != 0) {
    return fail(cudaErrorInvalidValue,
                fmt::format("cudaEventCreateWithFlags: flags 0x{:x}: cudaEventBlockingSync (1), cudaEventDisableTiming "
                            "(2), cudaEventInterprocess (4, with cudaEventDisableTiming)",
                            flags));
  }
  // cudart's order: unknown flags, the sticky error, the combination of flags, the output pointer.
  if (const cudaError_t e = enter("cudaEventCreateWithFlags", Prologue::sticky); e != cudaSuccess) return e;
  if ((flags & cudaEventInterprocess) != 0 && (flags & cudaEventDisableTiming) == 0) {
    return fail(
        cudaErrorInvalidValue,
        fmt::format("cudaEventCreateWithFlags: flags 0x{:x}: cudaEventInterprocess needs cudaEventDisableTiming",
                    flags));
  }
  if (event == nullptr) return null_argument("cudaEventCreateWithFlags", "event");
  return guarded("cudaEventCreate", [&] {
    const ContextRef ctx = context("cudaEventCreate");
    auto e = Event::create(ctx, static_cast<EventFlags>(flags));
    const std::uintptr_t native = e.ref().native();
    if (foreign(ctx)) {
      (void)e.detach();  // the program's context: the program's event (runtime.hpp)
    } else {
      registries().events.add(native,
                              std::make_shared<EventEntry>(EventEntry{ctx.device().ordinal(), flags, std::move(e)}));
    }
    *event = reinterpret_cast<cudaEvent_t>(native);
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, 0); }

DRVSHIM_CUDART cudaError_t cudaEventDestroy(cudaEvent_t event) {
  if (const cudaError_t failed = initialise("cudaEventDestroy")) return failed;
  // cudart's order: its prologue, a null event, the sticky error.
  if (const cudaError_t e = enter("cudaEventDestroy", Prologue::context); e != cudaSuccess) return e;
  if (event == nullptr) return fail(cudaErrorInvalidResourceHandle, "cudaEventDestroy: event 0 (null)");
  if (const cudaError_t e = enter("cudaEventDestroy", Prologue::sticky); e != cudaSuccess) return e;
  return guarded("cudaEventDestroy", [&] {
    auto e = registries().events.remove(reinterpret_cast<std::uintptr_t>(event));
    if (!e) {
      // An event the runtime did not create (cuEventCreate): destroyed by the driver, as under cudart.
      Event::adopt(context("cudaEventDestroy"), reinterpret_cast<std::uintptr_t>(event)).destroy();
      return cudaSuccess;
    }
    if (const cudaError_t sticky = sticky_error(e->device); sticky != cudaSuccess) {
      return fail(sticky, fmt::format("cudaEventDestroy: device {} has a sticky error", e->device));
    }
    e->owner.destroy();
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s) {
  if (const cudaError_t failed = initialise("cudaEventRecord")) return failed;
  return record("cudaEventRecord", e, s, 0, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaEventRecord_ptsz(cudaEvent_t e, cudaStream_t s) {
  if (const cudaError_t failed = initialise("cudaEventRecord_ptsz")) return failed;
  return record("cudaEventRecord", e, s, 0, kPerThread);
}
DRVSHIM_CUDART cudaError_t cudaEventRecordWithFlags(cudaEvent_t e, cudaStream_t s, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaEventRecordWithFlags")) return failed;
  return record("cudaEventRecordWithFlags", e, s, flags, kLegacy);
}
DRVSHIM_CUDART cudaError_t cudaEventRecordWithFlags_ptsz(cudaEvent_t e, cudaStream_t s, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaEventRecordWithFlags_ptsz")) return failed;
  return record("cudaEventRecordWithFlags", e, s, flags, kPerThread);
}

DRVSHIM_CUDART cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  if (const cudaError_t failed = initialise("cudaEventSynchronize")) return failed;
  return guarded("cudaEventSynchronize", [&] {
    event_of("cudaEventSynchronize", event).synchronize();  // blocks with no runtime lock held
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaEventQuery(cudaEvent_t event) {
  if (const cudaError_t failed = initialise("cudaEventQuery")) return failed;
  return guarded("cudaEventQuery",
                 [&] { return event_of("cudaEventQuery", event).query() ? cudaSuccess : cudaErrorNotReady; });
}

DRVSHIM_CUDART cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (const cudaError_t failed = initialise("cudaEventElapsedTime")) return failed;
  if (ms == nullptr) return null_argument("cudaEventElapsedTime", "ms");
  // cudart's order: the output, a null start event, the sticky error, the rest.
  if (start == nullptr) {
    return fail(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime: start is event 0 (null)");
  }
  if (const cudaError_t e = enter("cudaEventElapsedTime", Prologue::device_sticky); e != cudaSuccess) return e;
  return guarded("cudaEventElapsedTime", [&] {
    const EventRef a = event_of("cudaEventElapsedTime", start);
    const EventRef b = event_of("cudaEventElapsedTime", end);
    // cudart answers an event without timing, or never recorded, with an invalid handle.
    for (const EventRef& r : {a, b}) {
      if (has(r.flags(), EventFlags::disable_timing) || !r.recorded()) {
        return fail(cudaErrorInvalidResourceHandle,
                    fmt::format("cudaEventElapsedTime: {} {}", r.name(),
                                !r.recorded() ? "was never recorded" : "was created with cudaEventDisableTiming"));
      }
    }
    if (a.context().address() != b.context().address()) {
      // The driver's CUDA_ERROR_INVALID_HANDLE, as cudart passes it on.
      return fail(cudaErrorInvalidResourceHandle,
                  fmt::format("cudaEventElapsedTime: {} belongs to context 0x{:x} (device {}), {} to context 0x{:x} "
                              "(device {}): the two events must be of the same device (context)",
                              a.name(), a.context().address(), a.context().device().ordinal(), b.name(),
                              b.context().address(), b.context().device().ordinal()));
    }
    *ms = static_cast<float>(elapsed(a, b).count());
    return cudaSuccess;
  });
}
