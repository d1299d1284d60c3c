// SPDX-License-Identifier: Apache-2.0
// Registration and launch as nvcc 13 emits them: the 15 __cuda* entry points
// of libcudart.so.13, as nvcc 13.0 calls them.
//
// Registration (before main) only records: a fatbin's image, its kernels by
// host stub, its variables by host shadow. A fatbin is loaded
// context-independently (cuLibraryLoadData) at the first use that needs it,
// under the lazy policy; a kernel is bound to each context it runs in.
#include "registration.hpp"

#include <algorithm>

#include <fatbinary_section.h>

#include <cstring>
#include <set>

namespace drvshim::rt::impl {

struct Fatbin {
  const void* image = nullptr;
  std::size_t bytes = 0;
  std::mutex mutex;                  // guards `library` (loaded once, under it) and `managed`
  std::shared_ptr<Library> library;  // empty until loaded
  std::vector<Variable*> managed;    // __managed__ variables, made valid by __cudaInitModule
  std::atomic<bool> registered{true};
};

namespace {

// A kernel bound to one context of one reset generation.
struct Binding {
  std::uintptr_t context = 0;
  std::uint64_t generation = 0;
  Kernel kernel;
};

// What the runtime keeps per kernel handle, beside the handle nvcc holds.
struct KernelState {
  std::mutex mutex;
  std::vector<Binding> bindings;
  std::map<FunctionAttribute, int> attributes;  // cudaFuncSetAttribute, for every context
  std::optional<CachePreference> cache;         // cudaFuncSetCacheConfig
};

// Lock order: the registrations' lock first; a fatbin's lock and a kernel
// state's lock are never held together.
struct Registrations {
  std::mutex mutex;                                                      // guards everything below
  std::vector<std::unique_ptr<Fatbin>> fatbins;                          // never freed: handles outlive them
  std::map<const void*, KernelHandle*> by_stub;                          // host stub -> its current handle
  std::map<const KernelHandle*, std::unique_ptr<KernelHandle>> handles;  // every handle ever made
  std::map<const KernelHandle*, std::unique_ptr<KernelState>> states;
  std::map<const void*, std::unique_ptr<Variable>> variables;  // host shadow -> variable
  // A __managed__ variable's symbol in host code is its managed address
  // (`&var`), known once __cudaInitModule filled it in.
  std::map<const void*, const Variable*> managed_addresses;
  std::vector<std::unique_ptr<Variable>> retired_variables;
};

Registrations& registrations() noexcept {
  static auto* r = new Registrations;  // never destroyed: atexit handlers unregister after static destructors
  return *r;
}

KernelState& state_of(const KernelHandle& k) {
  auto& r = registrations();
  std::lock_guard<std::mutex> lock(r.mutex);
  return *r.states.at(&k);
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

std::size_t kernel_count(const Fatbin& f) {
  auto& r = registrations();
  std::lock_guard<std::mutex> lock(r.mutex);
  std::size_t n = 0;
  for (const auto& [stub, k] : r.by_stub) n += k->fatbin == &f ? 1 : 0;
  return n;
}

// The fatbin's library, loaded at the first call that needs it. A failed load
// is not remembered: the next use tries again and reports its own cause.
std::shared_ptr<Library> library_of(Fatbin& f, const char* trigger) {
  {
    std::lock_guard<std::mutex> lock(f.mutex);
    if (f.library) return f.library;
  }
  const Driver& drv = driver(trigger);
  // Counted before taking the fatbin's lock: the registrations' lock comes first.
  const std::size_t kernels = kernel_count(f);
  std::lock_guard<std::mutex> lock(f.mutex);
  if (f.library) return f.library;
  if (f.bytes == 0) {
    throw CudaError(ErrorDetails{
        "cuLibraryLoadData", cudaErrorInvalidKernelImage, "a registered image without the fatbin magic", {}, false});
  }
  implicit(trigger, fmt::format("load a registered fatbin ({} bytes, {} kernels)", f.bytes, kernels));
  f.library = std::make_shared<Library>(
      Library::load(drv, std::span<const std::byte>(static_cast<const std::byte*>(f.image), f.bytes)));
  return f.library;
}

}  // namespace

KernelHandle* kernel_for(const void* func) noexcept {
  if (func == nullptr) return nullptr;
  auto& r = registrations();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (const auto it = r.by_stub.find(func); it != r.by_stub.end()) return it->second;
  // A cudaKernel_t from cudaGetKernel / __cudaGetKernel.
  if (const auto it = r.handles.find(static_cast<const KernelHandle*>(func)); it != r.handles.end()) {
    return it->second.get();
  }
  return nullptr;
}

Kernel bound_kernel(KernelHandle& k, const ContextRef& ctx, int device, const char* trigger) {
  // A context the program made is told apart from a later one at its address
  // by its unique id; the runtime's primary contexts by their generation.
  std::optional<std::uint64_t> id;
  if (foreign(ctx)) id = context_id(ctx);
  const std::uint64_t gen = !foreign(ctx) ? generation(device) : id ? (*id | (std::uint64_t{1} << 63)) : 0;
  // Without an id a program's context cannot be told from a later one at its
  // address (drivers before 12.0): its kernels are looked up at every use.
  const bool keep = !foreign(ctx) || id.has_value();
  KernelState& s = state_of(k);
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    for (const auto& b : s.bindings) {
      if (keep && b.context == ctx.address() && b.generation == gen) return b.kernel;
    }
  }
  if (!k.fatbin->registered.load()) {
    throw InvalidArgumentError(trigger, fmt::format("kernel {} belongs to a fatbin that was unregistered", k.name));
  }
  const auto library = library_of(*k.fatbin, trigger);
  Kernel kernel = library->kernel(ctx, k.name);
  std::map<FunctionAttribute, int> attributes;
  std::optional<CachePreference> cache;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    attributes = s.attributes;
    cache = s.cache;
  }
  for (const auto& [attribute, value] : attributes) kernel.set_attribute(attribute, value);
  if (cache) kernel.set_cache_preference(*cache);
  std::lock_guard<std::mutex> lock(s.mutex);
  // Bindings of older generations are dead contexts: drop them.
  std::erase_if(s.bindings, [&](const Binding& b) { return b.generation != gen && b.context == ctx.address(); });
  if (keep) s.bindings.push_back(Binding{ctx.address(), gen, kernel});
  return kernel;
}

void set_kernel_attribute(KernelHandle& k, const ContextRef& ctx, int device, FunctionAttribute attribute, int value,
                          const char* trigger) {
  Kernel kernel = bound_kernel(k, ctx, device, trigger);
  kernel.set_attribute(attribute, value);  // validated here, in the calling thread's context
  // Only bindings in live primary contexts: a program's context may be gone
  // (and its address another's), and a reset primary context's generation
  // is no device's any more. A later binding applies the saved attributes.
  std::vector<std::uint64_t> live;
  for (int d = 0, n = device_count(trigger); d < n; ++d) live.push_back(generation(d));
  KernelState& s = state_of(k);
  std::vector<Kernel> others;
  {
    std::lock_guard<std::mutex> lock(s.mutex);
    s.attributes[attribute] = value;
    for (const auto& b : s.bindings) {
      if (b.context != ctx.address() && std::find(live.begin(), live.end(), b.generation) != live.end()) {
        others.push_back(b.kernel);
      }
    }
  }
  for (const auto& other : others) {
    try {
      other.set_attribute(attribute, value);
    } catch (const drvshim::Error& e) {
      // A context whose device refuses the value reports it at its next launch.
      logf(log::Level::warn, "runtime_compat: {}: {}", trigger, e.what());
    }
  }
}

void set_kernel_cache_preference(KernelHandle& k, const ContextRef& ctx, int device, CachePreference preference,
                                 const char* trigger) {
  Kernel kernel = bound_kernel(k, ctx, device, trigger);
  kernel.set_cache_preference(preference);
  KernelState& s = state_of(k);
  std::lock_guard<std::mutex> lock(s.mutex);
  s.cache = preference;
}

const Variable* variable_for(const void* symbol) noexcept {
  auto& r = registrations();
  std::lock_guard<std::mutex> lock(r.mutex);
  if (const auto it = r.variables.find(symbol); it != r.variables.end()) return it->second.get();
  const auto it = r.managed_addresses.find(symbol);
  return it != r.managed_addresses.end() ? it->second : nullptr;
}

std::pair<DevicePtr, std::size_t> variable_address(const Variable& v, const ContextRef& ctx, const char* trigger) {
  const auto library = library_of(*v.fatbin, trigger);
  if (v.managed != nullptr) {
    const auto m = library->managed(ctx, v.name);
    return {m.address, m.bytes};
  }
  const auto span = library->global<std::byte>(ctx, v.name);
  return {span.address(), span.size()};
}

void load_all_fatbins(const char* trigger) noexcept {
  std::vector<Fatbin*> all;
  {
    auto& r = registrations();
    std::lock_guard<std::mutex> lock(r.mutex);
    for (const auto& f : r.fatbins) {
      if (f->registered.load()) all.push_back(f.get());
    }
  }
  for (Fatbin* f : all) {
    try {
      (void)library_of(*f, trigger);
    } catch (const std::exception& e) {
      // Not this call's failure: the launch that needs the fatbin reports it.
      logf(log::Level::warn, "runtime_compat: {}: a registered fatbin ({} bytes) could not be loaded: {}", trigger,
           f->bytes, e.what());
    }
  }
}

void unload_fatbins() noexcept {
  auto& r = registrations();
  std::vector<std::shared_ptr<Library>> libraries;
  std::lock_guard<std::mutex> lock(r.mutex);
  for (auto& [k, s] : r.states) {
    std::lock_guard<std::mutex> state_lock(s->mutex);
    s->bindings.clear();
  }
  for (auto& f : r.fatbins) {
    std::lock_guard<std::mutex> fatbin_lock(f->mutex);
    libraries.push_back(std::move(f->library));
    f->library.reset();
  }
  // The libraries unload as `libraries` goes out of scope (after the locks: unloading calls the driver).
}

}  // namespace drvshim::rt::impl

using namespace drvshim;
using namespace drvshim::rt::impl;

// ---- registration --------------------------------------------------------------------------------

DRVSHIM_CUDART void** __cudaRegisterFatBinary(void* fat_cubin) {
  // __fatBinC_Wrapper_t: version 1 (one translation unit), or version 2 (the
  // device-linked image of -rdc programs; its prelinked list is not needed).
  const auto* wrapper = static_cast<const __fatBinC_Wrapper_t*>(fat_cubin);
  auto f = std::make_unique<Fatbin>();
  f->image = wrapper->data;
  f->bytes = fatbin_bytes(wrapper->data);
  if (wrapper->magic != FATBINC_MAGIC || f->bytes == 0) {
    logf(log::Level::error,
         "runtime_compat: __cudaRegisterFatBinary: not a fatbin wrapper (magic 0x{:x}); its kernels "
         "cannot run",
         static_cast<unsigned>(wrapper->magic));
  }
  logf(log::Level::debug, "runtime_compat: fatbin registered ({} bytes, wrapper version {}); loaded at first use",
       f->bytes, wrapper->version);
  auto& r = registrations();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.fatbins.push_back(std::move(f));
  return reinterpret_cast<void**>(r.fatbins.back().get());
}

DRVSHIM_CUDART void __cudaRegisterFatBinaryEnd(void**) {}

DRVSHIM_CUDART void __cudaUnregisterFatBinary(void** handle) {
  auto* f = reinterpret_cast<Fatbin*>(handle);
  auto& r = registrations();
  std::shared_ptr<Library> library;
  {
    std::lock_guard<std::mutex> lock(r.mutex);
    f->registered.store(false);
    for (auto it = r.by_stub.begin(); it != r.by_stub.end();) {
      it = it->second->fatbin == f ? r.by_stub.erase(it) : std::next(it);
    }
    std::erase_if(r.managed_addresses, [f](const auto& entry) { return entry.second->fatbin == f; });
    for (auto it = r.variables.begin(); it != r.variables.end();) {
      if (it->second->fatbin == f) {
        r.retired_variables.push_back(std::move(it->second));
        it = r.variables.erase(it);
      } else {
        ++it;
      }
    }
    std::lock_guard<std::mutex> fatbin_lock(f->mutex);
    library = std::move(f->library);
  }
  // At exit drvshim makes no driver call: the library is dropped, not unloaded.
}

DRVSHIM_CUDART void __cudaRegisterFunction(void** handle, const char* host_fun, char*, const char* device_name, int,
                                           uint3*, uint3*, dim3*, dim3*, int*) {
  auto* f = reinterpret_cast<Fatbin*>(handle);
  auto& r = registrations();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto k = std::make_unique<KernelHandle>(KernelHandle{f, device_name != nullptr ? device_name : "", host_fun});
  KernelHandle* raw = k.get();
  r.states.emplace(raw, std::make_unique<KernelState>());
  r.handles.emplace(raw, std::move(k));
  r.by_stub[host_fun] = raw;
}

DRVSHIM_CUDART void __cudaRegisterVar(void** handle, char* host_var, char*, const char* device_name, int, size_t size,
                                      int constant, int) {
  auto& r = registrations();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.variables[host_var] = std::make_unique<Variable>(Variable{
      reinterpret_cast<Fatbin*>(handle), device_name != nullptr ? device_name : "", size, constant != 0, nullptr});
}

DRVSHIM_CUDART void __cudaRegisterManagedVar(void** handle, void** host_var_ptr_address, char*, const char* device_name,
                                             int, size_t size, int constant, int) {
  auto* f = reinterpret_cast<Fatbin*>(handle);
  auto& r = registrations();
  std::lock_guard<std::mutex> lock(r.mutex);
  auto v = std::make_unique<Variable>(
      Variable{f, device_name != nullptr ? device_name : "", size, constant != 0, host_var_ptr_address});
  {
    std::lock_guard<std::mutex> fatbin_lock(f->mutex);
    f->managed.push_back(v.get());
  }
  r.variables[host_var_ptr_address] = std::move(v);
}

DRVSHIM_CUDART void __cudaRegisterHostVar(void** handle, const char* device_name, char* host_var, size_t size) {
  // A host variable device code refers to (flang's CUDA Fortran): recorded as
  // a symbol, so cudaMemcpyToSymbol and cudaGetSymbolAddress find it.
  auto& r = registrations();
  std::lock_guard<std::mutex> lock(r.mutex);
  r.variables[host_var] = std::make_unique<Variable>(
      Variable{reinterpret_cast<Fatbin*>(handle), device_name != nullptr ? device_name : "", size, false, nullptr});
}

// Unified function-pointer tables (not emitted by nvcc for C++): accepted and logged.
DRVSHIM_CUDART void __cudaRegisterUnifiedTable(void** handle, void*, void*, void*, void*) {
  logf(log::Level::warn,
       "runtime_compat: __cudaRegisterUnifiedTable for fatbin {} ignored: unified function pointers "
       "are not supported",
       static_cast<void*>(handle));
}

// As libcudart 13's: no entry points are handed out this way.
DRVSHIM_CUDART void* __cudaGetProcAddress() { return nullptr; }

// Makes every __managed__ variable of the fatbin valid on the host: nvcc's
// code calls this before the first host access to one (__nv_init_managed_rt)
// and dereferences *host_var_ptr_address afterwards. Returns 1 once they are.
DRVSHIM_CUDART char __cudaInitModule(void** handle) {
  auto* f = reinterpret_cast<Fatbin*>(handle);
  const cudaError_t e = guarded("__cudaInitModule", [&] {
    const ContextRef ctx = context("__cudaInitModule");
    const auto library = library_of(*f, "__cudaInitModule");
    std::vector<Variable*> managed;
    {
      std::lock_guard<std::mutex> lock(f->mutex);
      managed = f->managed;
    }
    for (Variable* v : managed) {
      const auto m = library->managed(ctx, v->name);
      *v->managed = reinterpret_cast<void*>(m.address);
      auto& r = registrations();
      std::lock_guard<std::mutex> lock(r.mutex);
      r.managed_addresses[*v->managed] = v;
    }
    return cudaSuccess;
  });
  return e == cudaSuccess ? 1 : 0;
}

// ---- launch ----------------------------------------------------------------------------------------

namespace {

// <<<grid, block, shared, stream>>> pushes a configuration the launch stub pops.
struct CallConfiguration {
  dim3 grid, block;
  size_t shared;
  cudaStream_t stream;
};
thread_local std::vector<CallConfiguration> t_configurations;

}  // namespace

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

// The handle only: nothing is loaded here (nvcc's stub calls this once and
// keeps the answer in a static), so a failure to load is reported by the launch.
DRVSHIM_CUDART cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* host_stub) {
  if (kernel == nullptr) return null_argument("__cudaGetKernel", "kernel");
  if (const cudaError_t failed = initialise("__cudaGetKernel")) {
    // cudart hands back the stub itself then (the launch that follows answers the same error).
    *kernel = reinterpret_cast<cudaKernel_t>(const_cast<void*>(host_stub));
    return failed;
  }
  KernelHandle* k = kernel_for(host_stub);
  if (k == nullptr) {
    return fail(cudaErrorInvalidDeviceFunction,
                fmt::format("__cudaGetKernel: host stub {} was never registered", host_stub));
  }
  *kernel = reinterpret_cast<cudaKernel_t>(k);
  return cudaSuccess;
}

DRVSHIM_CUDART cudaError_t cudaGetKernel(cudaKernel_t* kernel, const void* entry) {
  if (const cudaError_t failed = initialise("cudaGetKernel")) return failed;
  if (kernel == nullptr) return null_argument("cudaGetKernel", "kernelPtr");
  if (kernel_for(entry) == nullptr) {
    return fail(cudaErrorInvalidDeviceFunction,
                fmt::format("cudaGetKernel: {} is not a registered kernel's host stub", entry));
  }
  // After the arguments, cudart asks the driver (inside a host function: refused).
  if (const cudaError_t e = enter("cudaGetKernel", Prologue::driver); e != cudaSuccess) return e;
  return __cudaGetKernel(kernel, entry);
}
