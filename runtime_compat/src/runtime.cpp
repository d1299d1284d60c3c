#include <drvshim/drvshim.hpp>
#include <drvshim/runtime_compat.hpp>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <vector>

#include "log_internal.hpp"

namespace drvshim::rt {
namespace {

// ---- errors -------------------------------------------------------------------------------------------

struct ErrorText {
  Error code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
    {Error::success, "cudaSuccess", "no error"},
    {Error::invalid_value, "cudaErrorInvalidValue", "invalid argument"},
    {Error::memory_allocation, "cudaErrorMemoryAllocation", "out of memory"},
    {Error::initialization_error, "cudaErrorInitializationError", "initialization error"},
    {Error::cudart_unloading, "cudaErrorCudartUnloading", "driver shutting down"},
    {Error::invalid_configuration, "cudaErrorInvalidConfiguration", "invalid configuration argument"},
    {Error::invalid_device_pointer, "cudaErrorInvalidDevicePointer", "invalid device pointer"},
    {Error::invalid_memcpy_direction, "cudaErrorInvalidMemcpyDirection", "invalid copy direction for memcpy"},
    {Error::stub_library, "cudaErrorStubLibrary", "CUDA driver is a stub library"},
    {Error::insufficient_driver, "cudaErrorInsufficientDriver",
     "CUDA driver version is insufficient for CUDA runtime version"},
    {Error::invalid_device_function, "cudaErrorInvalidDeviceFunction", "invalid device function"},
    {Error::no_device, "cudaErrorNoDevice", "no CUDA-capable device is detected"},
    {Error::invalid_device, "cudaErrorInvalidDevice", "invalid device ordinal"},
    {Error::invalid_kernel_image, "cudaErrorInvalidKernelImage", "device kernel image is invalid"},
    {Error::device_uninitialized, "cudaErrorDeviceUninitialized", "invalid device context"},
    {Error::no_kernel_image_for_device, "cudaErrorNoKernelImageForDevice",
     "no kernel image is available for execution on the device"},
    {Error::invalid_resource_handle, "cudaErrorInvalidResourceHandle", "invalid resource handle"},
    {Error::symbol_not_found, "cudaErrorSymbolNotFound", "named symbol not found"},
    {Error::not_ready, "cudaErrorNotReady", "device not ready"},
    {Error::illegal_address, "cudaErrorIllegalAddress", "an illegal memory access was encountered"},
    {Error::launch_out_of_resources, "cudaErrorLaunchOutOfResources", "too many resources requested for launch"},
    {Error::host_memory_already_registered, "cudaErrorHostMemoryAlreadyRegistered",
     "part or all of the requested memory range is already mapped"},
    {Error::host_memory_not_registered, "cudaErrorHostMemoryNotRegistered",
     "pointer does not correspond to a registered memory region"},
    {Error::launch_failure, "cudaErrorLaunchFailure", "unspecified launch failure"},
    {Error::not_permitted, "cudaErrorNotPermitted", "operation not permitted"},
    {Error::not_supported, "cudaErrorNotSupported", "operation not supported"},
    {Error::unknown, "cudaErrorUnknown", "unknown error"},
};

const ErrorText* find_error(Error e) noexcept {
  for (const auto& t : kErrors) {
    if (t.code == e) return &t;
  }
  return nullptr;
}

// The cudart number for a drvshim exception: driver codes that cudart shares
// keep their number; drvshim's own errors map to the code cudart gives the
// same situation.
Error map_exception(const drvshim::Error& e) noexcept {
  switch (e.kind()) {
    case ErrorKind::driver_not_found:
    case ErrorKind::driver_too_old: return Error::insufficient_driver;
    case ErrorKind::stub_library: return Error::stub_library;
    case ErrorKind::missing_step:
    case ErrorKind::used_after_fork: return Error::initialization_error;
    case ErrorKind::context_state: return Error::not_permitted;
    case ErrorKind::invalid_argument: return Error::invalid_value;
    case ErrorKind::unsupported: return Error::not_supported;
    case ErrorKind::host_callback:
    case ErrorKind::system: return Error::unknown;
    case ErrorKind::not_permitted: return Error::not_permitted;
    case ErrorKind::context_poisoned:
    case ErrorKind::cuda: break;
  }
  const auto code = static_cast<Error>(e.code());
  return find_error(code) != nullptr && code != Error::success ? code : Error::unknown;
}

thread_local Error t_last_error = Error::success;
thread_local std::string t_last_detail;
thread_local int t_device = 0;

Error fail(Error e, std::string detail) {
  t_last_error = e;
  t_last_detail = std::move(detail);
  detail::logf(log::Level::debug, "runtime_compat: {} ({})", error_name(e), t_last_detail);
  return e;
}

// ---- the runtime's state ----------------------------------------------------------------------------

struct Fatbin {
  const void* image = nullptr;
  std::size_t bytes = 0;
  std::optional<Library> library;  // loaded at a moment runtime_compat chooses
  std::map<const void*, std::string> functions;  // host stub -> device name
};

struct KernelHandle {
  Fatbin* fatbin;
  std::string name;
  std::map<std::uintptr_t, Kernel> by_context;  // the kernel bound to each context it ran in
};

struct State {
  std::recursive_mutex mutex;
  std::atomic<int> policy{-1};
  std::optional<Driver> driver;
  std::map<int, PrimaryContext> primaries;
  std::map<std::uintptr_t, std::pair<int, DeviceBuffer>> device_memory;  // address -> (device, owner)
  std::map<std::uintptr_t, std::pair<int, PinnedBuffer>> host_memory;    // data -> (device, owner)
  std::map<std::uintptr_t, std::pair<int, RegisteredRange>> registered;  // data -> (device, owner)
  std::map<std::uintptr_t, std::pair<int, Stream>> streams;              // native -> (device, owner)
  std::map<std::uintptr_t, std::pair<int, Event>> events;
  std::vector<std::unique_ptr<Fatbin>> fatbins;  // registration survives shutdown()
  std::map<const void*, std::unique_ptr<KernelHandle>> kernels;  // host stub -> handle
  bool eager_done = false;
};

State& state() {
  // Never destroyed: nvcc's generated code unregisters fatbins from atexit
  // handlers, after static destructors may have run.
  static State* s = new State;
  return *s;
}

// An implicit step: logged at info with its trigger, marked in the trace.
void implicit(const char* trigger, const std::string& step) {
  detail::logf(log::Level::info, "runtime_compat: {} -> {} (implicit)", trigger, step);
  trace::mark("rt-implicit", std::string(trigger) + " -> " + step);
}

Policy current_policy() {
  auto& s = state();
  int p = s.policy.load();
  if (p < 0) {
    const char* env = std::getenv("DRVSHIM_RT_POLICY");
    p = env != nullptr && std::strcmp(env, "eager") == 0 ? 1 : 0;
    s.policy.store(p);
  }
  return p == 1 ? Policy::eager : Policy::lazy;
}

void do_eager(const char* trigger);

const Driver& ensure_driver(const char* trigger) {
  auto& s = state();
  if (current_policy() == Policy::eager && !s.eager_done) do_eager(trigger);
  if (!s.driver) {
    implicit(trigger, "load libcuda");
    s.driver.emplace(Driver::load());
  }
  if (!s.driver->initialized()) {
    implicit(trigger, "cuInit");
    s.driver->init();
  }
  return *s.driver;
}

bool valid_device(const Driver& drv, int device) { return device >= 0 && device < drv.device_count(); }

Error bad_device(const char* api, int device) {
  return fail(Error::invalid_device,
              fmt::format("{}: device {} does not exist; pass an ordinal below cudaGetDeviceCount", api, device));
}

// The calling thread's device's primary context, retained and current (the Runtime's behaviour).
ContextRef ensure_context(const char* trigger) {
  auto& s = state();
  const Driver& drv = ensure_driver(trigger);
  const int dev = t_device;
  if (drv.device_count() == 0) throw UnsupportedError("runtime_compat", "no CUDA device", "", "");
  auto it = s.primaries.find(dev);
  if (it == s.primaries.end()) {
    implicit(trigger, fmt::format("retain the primary context of device {}", dev));
    it = s.primaries.emplace(dev, drv.device(dev).retain_primary_context()).first;
  }
  const ContextRef ctx = it->second.ref();
  if (drv.current_context() != ctx.address()) {
    implicit(trigger, fmt::format("make the primary context of device {} current on this thread", dev));
    ctx.make_current();
  }
  return ctx;
}

std::size_t fatbin_bytes(const void* image) {
  // The fatbin header: u32 magic 0xBA55ED50, u16 version, u16 header size, u64 payload size.
  const auto* p = static_cast<const unsigned char*>(image);
  std::uint32_t magic = 0;
  std::memcpy(&magic, p, 4);
  if (magic != 0xBA55ED50u) return 0;
  std::uint16_t header = 0;
  std::uint64_t payload = 0;
  std::memcpy(&header, p + 6, 2);
  std::memcpy(&payload, p + 8, 8);
  return header + static_cast<std::size_t>(payload);
}

void load_fatbin(Fatbin& f, const char* trigger) {
  if (f.library) return;
  const Driver& drv = ensure_driver(trigger);
  implicit(trigger, fmt::format("load a registered fatbin ({} bytes, {} kernels)", f.bytes, f.functions.size()));
  f.library.emplace(Library::load(drv, std::span<const std::byte>(static_cast<const std::byte*>(f.image), f.bytes)));
}

void do_eager(const char* trigger) {
  auto& s = state();
  s.eager_done = true;  // first, so the steps below do not recurse
  detail::logf(log::Level::info, "runtime_compat: eager set-up, triggered by {}", trigger);
  trace::mark("rt-eager", trigger);
  (void)ensure_context(trigger);
  for (auto& f : s.fatbins) load_fatbin(*f, trigger);
}

// Runs `body` under the runtime's lock, turning drvshim's exceptions into
// cudart codes and the per-thread last error.
template <class F>
Error guarded(const char* api, F&& body) noexcept {
  try {
    std::lock_guard<std::recursive_mutex> lock(state().mutex);
    return body();
  } catch (const drvshim::Error& e) {
    return fail(map_exception(e), std::string(api) + ": " + e.what());
  } catch (const std::bad_alloc&) {
    return fail(Error::memory_allocation, std::string(api) + ": host allocation failed");
  } catch (const std::exception& e) {
    return fail(Error::unknown, std::string(api) + ": " + e.what());
  }
}

Error null_arg(const char* api, const char* what) {
  return fail(Error::invalid_value, fmt::format("{}: {} is null", api, what));
}

DeviceSpan<std::byte> device_span(const ContextRef& ctx, const void* p, std::size_t bytes) {
  return DeviceSpan<std::byte>(ctx, reinterpret_cast<std::uintptr_t>(p), bytes, 0);
}

// The stream a cudart handle names: 0 is the legacy default stream of the current device.
StreamRef stream_of(const ContextRef& ctx, void* handle) {
  if (handle == nullptr) return StreamRef::legacy_default(ctx);
  auto& s = state();
  const auto it = s.streams.find(reinterpret_cast<std::uintptr_t>(handle));
  if (it == s.streams.end()) {
    if (handle == reinterpret_cast<void*>(0x2)) return StreamRef::per_thread_default(ctx);
    throw CudaError(ErrorDetails{"stream", 400, fmt::format("stream {}", handle), "pass a stream from cudaStreamCreate", false});
  }
  return it->second.second.ref();
}

EventRef event_of(void* handle) {
  auto& s = state();
  const auto it = s.events.find(reinterpret_cast<std::uintptr_t>(handle));
  if (it == s.events.end()) {
    throw CudaError(ErrorDetails{"event", 400, fmt::format("event {}", handle), "pass an event from cudaEventCreate", false});
  }
  return it->second.second.ref();
}

}  // namespace

const char* error_name(Error e) noexcept {
  const auto* t = find_error(e);
  return t != nullptr ? t->name : "cudaErrorUnknown";
}

const char* error_string(Error e) noexcept {
  const auto* t = find_error(e);
  return t != nullptr ? t->text : "unknown error";
}

void set_policy(Policy p) noexcept { state().policy.store(p == Policy::eager ? 1 : 0); }
Policy policy() noexcept { return current_policy(); }

Error setup() {
  return guarded("setup", [] {
    auto& s = state();
    s.eager_done = false;
    do_eager("setup");
    return Error::success;
  });
}

void shutdown() noexcept {
  auto& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  s.kernels.clear();
  for (auto& f : s.fatbins) f->library.reset();
  s.events.clear();
  s.streams.clear();
  s.registered.clear();
  s.host_memory.clear();
  s.device_memory.clear();
  s.primaries.clear();
  s.driver.reset();
  s.eager_done = false;
  s.policy.store(-1);
}

std::string last_error_detail() { return t_last_detail; }

Error cudaGetLastError() noexcept { return std::exchange(t_last_error, Error::success); }
Error cudaPeekAtLastError() noexcept { return t_last_error; }

Error unsupported(const char* function) noexcept {
  detail::logf(log::Level::error, "runtime_compat: {} is outside the supported subset (docs/runtime-compat.md)",
               function);
  return fail(Error::not_supported, std::string(function) + " is not part of libdrvshim_cudart's subset");
}

// ---- device ---------------------------------------------------------------------------------------------

Error cudaGetDeviceCount(int* count) {
  if (count == nullptr) return null_arg("cudaGetDeviceCount", "count");
  return guarded("cudaGetDeviceCount", [&] {
    *count = ensure_driver("cudaGetDeviceCount").device_count();
    return *count == 0 ? fail(Error::no_device, "cudaGetDeviceCount: no CUDA device") : Error::success;
  });
}

Error cudaSetDevice(int device) {
  return guarded("cudaSetDevice", [&] {
    if (!valid_device(ensure_driver("cudaSetDevice"), device)) return bad_device("cudaSetDevice", device);
    t_device = device;
    // Since CUDA 12 cudaSetDevice initialises the device's primary context at once.
    (void)ensure_context("cudaSetDevice");
    return Error::success;
  });
}

Error cudaGetDevice(int* device) {
  if (device == nullptr) return null_arg("cudaGetDevice", "device");
  *device = t_device;
  return Error::success;
}

Error cudaDeviceSynchronize() {
  return guarded("cudaDeviceSynchronize", [] {
    ensure_context("cudaDeviceSynchronize").synchronize();
    return Error::success;
  });
}

Error cudaDeviceReset() {
  return guarded("cudaDeviceReset", [] {
    auto& s = state();
    const int dev = t_device;
    auto erase_device = [dev](auto& map) {
      for (auto it = map.begin(); it != map.end();) it = it->second.first == dev ? map.erase(it) : std::next(it);
    };
    erase_device(s.events);
    erase_device(s.streams);
    erase_device(s.registered);
    erase_device(s.host_memory);
    erase_device(s.device_memory);
    for (auto& [stub, k] : s.kernels) k->by_context.clear();
    if (auto it = s.primaries.find(dev); it != s.primaries.end()) {
      detail::logf(log::Level::info, "runtime_compat: cudaDeviceReset releases the primary context of device {}", dev);
      trace::mark("rt-reset", fmt::format("device {}", dev));
      it->second.release();
      s.primaries.erase(it);
    }
    return Error::success;
  });
}

Error cudaGetDeviceProperties(DeviceProperties* props, int device) {
  if (props == nullptr) return null_arg("cudaGetDeviceProperties", "props");
  return guarded("cudaGetDeviceProperties", [&] {
    const Driver& drv = ensure_driver("cudaGetDeviceProperties");
    if (!valid_device(drv, device)) return bad_device("cudaGetDeviceProperties", device);
    const Device d = drv.device(device);
    const auto attr = [&](DeviceAttribute a) { return d.attribute(a).value(); };
    DeviceProperties p;
    p.name = d.name();
    p.total_global_mem = d.total_memory();
    const auto cc = d.compute_capability();
    p.major = cc.major;
    p.minor = cc.minor;
    p.multi_processor_count = attr(DeviceAttribute::multiprocessor_count);
    p.max_threads_per_block = attr(DeviceAttribute::max_threads_per_block);
    p.warp_size = attr(DeviceAttribute::warp_size);
    p.can_map_host_memory = attr(DeviceAttribute::can_map_host_memory);
    p.integrated = attr(DeviceAttribute::integrated);
    p.unified_addressing = attr(DeviceAttribute::unified_addressing);
    p.pci_bus_id = attr(DeviceAttribute::pci_bus_id);
    p.pci_device_id = attr(DeviceAttribute::pci_device_id);
    p.pci_domain_id = attr(DeviceAttribute::pci_domain_id);
    p.async_engine_count = attr(DeviceAttribute::async_engine_count);
    p.concurrent_managed_access = attr(DeviceAttribute::concurrent_managed_access);
    p.host_register_supported = attr(DeviceAttribute::host_register_supported);
    *props = std::move(p);
    return Error::success;
  });
}

Error cudaDriverGetVersion(int* version) {
  if (version == nullptr) return null_arg("cudaDriverGetVersion", "version");
  return guarded("cudaDriverGetVersion", [&] {
    auto& s = state();
    if (!s.driver) {
      implicit("cudaDriverGetVersion", "load libcuda");
      s.driver.emplace(Driver::load());
    }
    *version = s.driver->version();
    return Error::success;
  });
}

// ---- memory ----------------------------------------------------------------------------------------------

Error cudaMalloc(void** ptr, std::size_t bytes) {
  if (ptr == nullptr) return null_arg("cudaMalloc", "ptr");
  return guarded("cudaMalloc", [&] {
    auto buffer = DeviceBuffer::allocate(ensure_context("cudaMalloc"), bytes);
    const std::uintptr_t address = buffer.address();  // read before the owner moves into the map
    *ptr = reinterpret_cast<void*>(address);
    state().device_memory.emplace(address, std::make_pair(t_device, std::move(buffer)));
    return Error::success;
  });
}

Error cudaFree(void* ptr) {
  if (ptr == nullptr) return Error::success;  // as cudart
  return guarded("cudaFree", [&] {
    auto& m = state().device_memory;
    if (m.erase(reinterpret_cast<std::uintptr_t>(ptr)) == 0) {
      return fail(Error::invalid_device_pointer, fmt::format("cudaFree: {} is not from cudaMalloc", ptr));
    }
    return Error::success;
  });
}

namespace {

MemcpyKind resolve_kind(const Driver& drv, const void* dst, const void* src, MemcpyKind kind) {
  if (kind != MemcpyKind::default_) return kind;
  auto on_device = [&](const void* p) {
    const auto k = inspect_pointer(drv, p).kind;
    return k == MemoryKind::device || k == MemoryKind::managed;
  };
  const bool d = on_device(dst), s = on_device(src);
  return d ? (s ? MemcpyKind::device_to_device : MemcpyKind::host_to_device)
           : (s ? MemcpyKind::device_to_host : MemcpyKind::host_to_host);
}

Error do_memcpy(const char* api, void* dst, const void* src, std::size_t bytes, MemcpyKind kind, void* stream,
                bool async) {
  if ((dst == nullptr || src == nullptr) && bytes != 0) return null_arg(api, "dst or src");
  if (static_cast<int>(kind) < 0 || static_cast<int>(kind) > 4) {
    return fail(Error::invalid_memcpy_direction, fmt::format("{}: kind {}", api, static_cast<int>(kind)));
  }
  return guarded(api, [&] {
    const ContextRef ctx = ensure_context(api);
    kind = resolve_kind(*state().driver, dst, src, kind);
    const std::span<const std::byte> hsrc(static_cast<const std::byte*>(src), bytes);
    const std::span<std::byte> hdst(static_cast<std::byte*>(dst), bytes);
    const auto ddst = device_span(ctx, dst, bytes);
    const DeviceSpan<const std::byte> dsrc(device_span(ctx, src, bytes));
    if (async) {
      const StreamRef s = stream_of(ctx, stream);
      switch (kind) {
        case MemcpyKind::host_to_device: copy_async(s, ddst, hsrc); break;
        case MemcpyKind::device_to_host: copy_async(s, hdst, dsrc); break;
        case MemcpyKind::device_to_device: copy_async(s, ddst, dsrc); break;
        default: s.synchronize(); std::memmove(dst, src, bytes); break;
      }
    } else {
      switch (kind) {
        case MemcpyKind::host_to_device: copy(ddst, hsrc); break;
        case MemcpyKind::device_to_host: copy(hdst, dsrc); break;
        case MemcpyKind::device_to_device: copy(ddst, dsrc); break;
        default: std::memmove(dst, src, bytes); break;
      }
    }
    return Error::success;
  });
}

}  // namespace

Error cudaMemcpy(void* dst, const void* src, std::size_t bytes, MemcpyKind kind) {
  return do_memcpy("cudaMemcpy", dst, src, bytes, kind, nullptr, false);
}

Error cudaMemcpyAsync(void* dst, const void* src, std::size_t bytes, MemcpyKind kind, void* stream) {
  return do_memcpy("cudaMemcpyAsync", dst, src, bytes, kind, stream, true);
}

Error cudaMemset(void* ptr, int value, std::size_t bytes) {
  if (ptr == nullptr && bytes != 0) return null_arg("cudaMemset", "ptr");
  return guarded("cudaMemset", [&] {
    fill(device_span(ensure_context("cudaMemset"), ptr, bytes), static_cast<std::byte>(value));
    return Error::success;
  });
}

Error cudaHostAlloc(void** ptr, std::size_t bytes, unsigned flags) {
  if (ptr == nullptr) return null_arg("cudaHostAlloc", "ptr");
  if ((flags & ~0x7u) != 0) return fail(Error::invalid_value, fmt::format("cudaHostAlloc: flags 0x{:x}", flags));
  return guarded("cudaHostAlloc", [&] {
    const ContextRef ctx = ensure_context("cudaHostAlloc");
    PinnedBuffer buffer = PinnedBuffer::allocate(ctx, bytes, static_cast<HostAllocFlags>(flags));
    *ptr = buffer.data();
    const auto address = reinterpret_cast<std::uintptr_t>(buffer.data());  // before the move
    state().host_memory.emplace(address, std::make_pair(t_device, std::move(buffer)));
    return Error::success;
  });
}

Error cudaMallocHost(void** ptr, std::size_t bytes) { return cudaHostAlloc(ptr, bytes, 0); }

Error cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return Error::success;
  return guarded("cudaFreeHost", [&] {
    if (state().host_memory.erase(reinterpret_cast<std::uintptr_t>(ptr)) == 0) {
      return fail(Error::invalid_value, fmt::format("cudaFreeHost: {} is not from cudaHostAlloc", ptr));
    }
    return Error::success;
  });
}

Error cudaHostGetDevicePointer(void** device, void* host, unsigned flags) {
  if (device == nullptr || host == nullptr) return null_arg("cudaHostGetDevicePointer", "device or host");
  if (flags != 0) return fail(Error::invalid_value, "cudaHostGetDevicePointer: flags must be 0");
  return guarded("cudaHostGetDevicePointer", [&] {
    (void)ensure_context("cudaHostGetDevicePointer");
    const PointerInfo info = inspect_pointer(*state().driver, host);
    if (info.kind != MemoryKind::page_locked_host || info.device_address == 0) {
      return fail(Error::invalid_value,
                  fmt::format("cudaHostGetDevicePointer: {} is not mapped page-locked memory ({})", host, info.to_string()));
    }
    *device = reinterpret_cast<void*>(info.device_address);
    return Error::success;
  });
}

Error cudaHostRegister(void* ptr, std::size_t bytes, unsigned flags) {
  if (ptr == nullptr) return null_arg("cudaHostRegister", "ptr");
  return guarded("cudaHostRegister", [&] {
    auto range = RegisteredRange::register_range(ensure_context("cudaHostRegister"), ptr, bytes,
                                                 static_cast<HostRegisterFlags>(flags));
    state().registered.emplace(reinterpret_cast<std::uintptr_t>(ptr), std::make_pair(t_device, std::move(range)));
    return Error::success;
  });
}

Error cudaHostUnregister(void* ptr) {
  return guarded("cudaHostUnregister", [&] {
    if (state().registered.erase(reinterpret_cast<std::uintptr_t>(ptr)) == 0) {
      return fail(Error::host_memory_not_registered, fmt::format("cudaHostUnregister: {} is not registered", ptr));
    }
    return Error::success;
  });
}

// ---- streams and events ------------------------------------------------------------------------------

Error cudaStreamCreate(void** stream) { return cudaStreamCreateWithFlags(stream, 0); }

Error cudaStreamCreateWithFlags(void** stream, unsigned flags) {
  if (stream == nullptr) return null_arg("cudaStreamCreate", "stream");
  if (flags > 1) return fail(Error::invalid_value, fmt::format("cudaStreamCreateWithFlags: flags {}", flags));
  return guarded("cudaStreamCreate", [&] {
    auto s = Stream::create(ensure_context("cudaStreamCreate"), static_cast<StreamFlags>(flags));
    const std::uintptr_t native = s.ref().native();
    *stream = reinterpret_cast<void*>(native);
    state().streams.emplace(native, std::make_pair(t_device, std::move(s)));
    return Error::success;
  });
}

Error cudaStreamDestroy(void* stream) {
  return guarded("cudaStreamDestroy", [&] {
    if (state().streams.erase(reinterpret_cast<std::uintptr_t>(stream)) == 0) {
      return fail(Error::invalid_resource_handle, fmt::format("cudaStreamDestroy: unknown stream {}", stream));
    }
    return Error::success;
  });
}

Error cudaStreamSynchronize(void* stream) {
  return guarded("cudaStreamSynchronize", [&] {
    stream_of(ensure_context("cudaStreamSynchronize"), stream).synchronize();
    return Error::success;
  });
}

Error cudaStreamQuery(void* stream) {
  return guarded("cudaStreamQuery", [&] {
    return stream_of(ensure_context("cudaStreamQuery"), stream).ready() ? Error::success : Error::not_ready;
  });
}

Error cudaStreamWaitEvent(void* stream, void* event, unsigned) {
  return guarded("cudaStreamWaitEvent", [&] {
    stream_of(ensure_context("cudaStreamWaitEvent"), stream).wait(event_of(event));
    return Error::success;
  });
}

Error cudaEventCreate(void** event) { return cudaEventCreateWithFlags(event, 0); }

Error cudaEventCreateWithFlags(void** event, unsigned flags) {
  if (event == nullptr) return null_arg("cudaEventCreate", "event");
  if ((flags & ~0x3u) != 0) return fail(Error::invalid_value, fmt::format("cudaEventCreateWithFlags: flags 0x{:x}", flags));
  return guarded("cudaEventCreate", [&] {
    auto e = Event::create(ensure_context("cudaEventCreate"), static_cast<EventFlags>(flags));
    const std::uintptr_t native = e.ref().native();
    *event = reinterpret_cast<void*>(native);
    state().events.emplace(native, std::make_pair(t_device, std::move(e)));
    return Error::success;
  });
}

Error cudaEventDestroy(void* event) {
  return guarded("cudaEventDestroy", [&] {
    if (state().events.erase(reinterpret_cast<std::uintptr_t>(event)) == 0) {
      return fail(Error::invalid_resource_handle, fmt::format("cudaEventDestroy: unknown event {}", event));
    }
    return Error::success;
  });
}

Error cudaEventRecord(void* event, void* stream) {
  return guarded("cudaEventRecord", [&] {
    event_of(event).record(stream_of(ensure_context("cudaEventRecord"), stream));
    return Error::success;
  });
}

Error cudaEventSynchronize(void* event) {
  return guarded("cudaEventSynchronize", [&] {
    event_of(event).synchronize();
    return Error::success;
  });
}

Error cudaEventQuery(void* event) {
  return guarded("cudaEventQuery", [&] { return event_of(event).query() ? Error::success : Error::not_ready; });
}

Error cudaEventElapsedTime(float* ms, void* start, void* end) {
  if (ms == nullptr) return null_arg("cudaEventElapsedTime", "ms");
  return guarded("cudaEventElapsedTime", [&] {
    *ms = static_cast<float>(elapsed(event_of(start), event_of(end)).count());
    return Error::success;
  });
}

// ---- modules and launches ------------------------------------------------------------------------------

void* register_fatbin(const void* fatbin) {
  auto& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  auto f = std::make_unique<Fatbin>();
  f->image = fatbin;
  f->bytes = fatbin_bytes(fatbin);
  detail::logf(log::Level::debug, "runtime_compat: fatbin registered ({} bytes); loaded at first use", f->bytes);
  s.fatbins.push_back(std::move(f));
  return s.fatbins.back().get();
}

void unregister_fatbin(void* handle) noexcept {
  auto& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  for (auto it = s.kernels.begin(); it != s.kernels.end();) {
    it = it->second->fatbin == handle ? s.kernels.erase(it) : std::next(it);
  }
  for (auto it = s.fatbins.begin(); it != s.fatbins.end(); ++it) {
    if (it->get() != handle) continue;
    // At exit the library is not unloaded (drvshim makes no driver call then); it is dropped.
    s.fatbins.erase(it);
    return;
  }
}

void register_function(void* handle, const void* host_stub, const char* device_name) {
  auto& s = state();
  std::lock_guard<std::recursive_mutex> lock(s.mutex);
  auto* f = static_cast<Fatbin*>(handle);
  f->functions[host_stub] = device_name != nullptr ? device_name : "";
}

void register_variable(void*, const char* name) noexcept {
  detail::logf(log::Level::debug, "runtime_compat: __device__ variable {} registered; symbol copies are not supported",
               name != nullptr ? name : "(unnamed)");
}

Error get_kernel(void** kernel, const void* host_stub) {
  if (kernel == nullptr) return null_arg("__cudaGetKernel", "kernel");
  return guarded("__cudaGetKernel", [&] {
    auto& s = state();
    if (auto it = s.kernels.find(host_stub); it != s.kernels.end()) {
      *kernel = it->second.get();
      return Error::success;
    }
    for (auto& f : s.fatbins) {
      const auto fn = f->functions.find(host_stub);
      if (fn == f->functions.end()) continue;
      load_fatbin(*f, "__cudaGetKernel");
      auto handle = std::make_unique<KernelHandle>(KernelHandle{f.get(), fn->second, {}});
      *kernel = handle.get();
      s.kernels.emplace(host_stub, std::move(handle));
      return Error::success;
    }
    return fail(Error::invalid_device_function, fmt::format("__cudaGetKernel: host stub {} was never registered", host_stub));
  });
}

Error launch_kernel(void* kernel, Dim grid, Dim block, void** args, std::size_t shared_bytes, void* stream) {
  if (kernel == nullptr) return null_arg("__cudaLaunchKernel", "kernel");
  return guarded("__cudaLaunchKernel", [&] {
    auto* k = static_cast<KernelHandle*>(kernel);
    const ContextRef ctx = ensure_context("__cudaLaunchKernel");
    auto bound = k->by_context.find(ctx.address());
    if (bound == k->by_context.end()) {
      bound = k->by_context.emplace(ctx.address(), k->fatbin->library->kernel(ctx, k->name)).first;
    }
    if (shared_bytes > 0xffffffffu) return fail(Error::invalid_value, "__cudaLaunchKernel: shared memory size");
    LaunchConfig config{{grid.x, grid.y, grid.z}, {block.x, block.y, block.z}, static_cast<unsigned>(shared_bytes),
                        stream_of(ctx, stream), {}};
    launch_raw(bound->second, config, args);
    return Error::success;
  });
}

Error cudaLaunchKernel(const void* host_stub, Dim grid, Dim block, void** args, std::size_t shared_bytes, void* stream) {
  void* kernel = nullptr;
  if (const Error e = get_kernel(&kernel, host_stub); e != Error::success) return e;
  return launch_kernel(kernel, grid, block, args, shared_bytes, stream);
}

}  // namespace drvshim::rt
