// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file module.hpp
/// Modules and kernels: load compiled GPU code (CUBIN, PTX, fatbin) with the
/// JIT's logs captured, find kernels by name (a missing one lists what the
/// module has), read their attributes and parameter layout, and launch them:
/// a typed launch that checks the arguments against the kernel's real
/// parameter layout before the driver sees them, and a raw launch.
///
/// This header holds Module and includes the rest of the concept: module_image.hpp,
/// kernel.hpp, launch.hpp, library.hpp and link.hpp.
#include <drvshim/context.hpp>
#include <drvshim/device_span.hpp>
#include <drvshim/export.hpp>
#include <drvshim/kernel.hpp>
#include <drvshim/launch.hpp>
#include <drvshim/library.hpp>
#include <drvshim/link.hpp>
#include <drvshim/module_image.hpp>
#include <drvshim/owning_handle.hpp>
#include <drvshim/stream.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

namespace drvshim {

class Driver;

namespace detail {
struct ModuleState;
struct Access;  // the library's own door to private members (internal, not part of the API)

/// Module's ownership traits (owning_handle.hpp). The state is shared with the
/// module's Kernels: the last of them unloads it.
struct ModuleTraits {
  struct value_type {
    ContextRef context;
    std::shared_ptr<ModuleState> state;
  };
  static bool held(const value_type& v) noexcept { return v.state != nullptr; }
  static void clear(value_type& v) noexcept { v.state.reset(); }
  [[nodiscard]] static Status release(value_type& v) noexcept;
  static void release_or_throw(value_type& v);
};

}  // namespace detail

/// cuModuleGetLoadingMode: "lazy" or "eager" (CUDA_MODULE_LOADING); "unknown"
/// when the driver predates the query.
DRVSHIM_API std::string module_loading_mode(const class Driver& driver);

/// A loaded module (move-only owner). The driver's module is unloaded
/// (cuModuleUnload) when the owner is unloaded or destroyed and no Kernel of
/// it is left, else when the last of its Kernels is destroyed.
class DRVSHIM_API Module {
 public:
  /// cuModuleLoadDataEx with JIT options capturing the info and error logs and
  /// the wall time. A failed load throws CudaError whose message carries the
  /// JIT error log. PTX is checked to be NUL-terminated text.
  [[nodiscard]] static Module load(const ContextRef& context, std::span<const std::byte> image);
  /// Reads `path` and loads it. Throws SystemError (with the errno) naming the
  /// path when it cannot be opened or read (a directory: EISDIR), and
  /// InvalidArgumentError naming it when its content is not a module image.
  [[nodiscard]] static Module load_file(const ContextRef& context, const std::string& path);

  Module(Module&&) noexcept;
  Module& operator=(Module&&) noexcept;
  Module(const Module&) = delete;
  Module& operator=(const Module&) = delete;
  ~Module();

  explicit operator bool() const noexcept;
  ModuleFormat format() const noexcept;
  const JitLog& jit_log() const noexcept;
  /// The kernels the module has (cuModuleEnumerateFunctions, CUDA 12.4+); empty when unknown.
  std::vector<std::string> kernel_names() const;
  /// cuModuleGetFunction. A missing name throws InvalidArgumentError listing
  /// the module's kernels where the driver can enumerate them.
  Kernel kernel(const std::string& name) const;
  /// cuModuleGetGlobal as a typed device view (its size must be a multiple of
  /// sizeof(T)). The view does not keep the module loaded (debug builds refuse
  /// it after the unload, like a view of a freed buffer).
  template <class T>
  DeviceSpan<T> global(const std::string& name) const {
    const auto [address, bytes] = global_bytes(name);
    if (bytes % sizeof(T) != 0) throw_global_size(name, bytes, sizeof(T));
    return DeviceSpan<T>(handle_.get().context, address, bytes / sizeof(T), globals_owner_id());
  }
  /// Lets go of the module; the owner becomes empty. cuModuleUnload runs now
  /// when no Kernel of the module is left (a failure throws CudaError), else
  /// when the last one is destroyed (a failure then is logged).
  void unload();
  [[nodiscard]] Status unload(std::nothrow_t) noexcept;

 private:
  Module(ContextRef context, std::shared_ptr<detail::ModuleState> state) noexcept;
  std::pair<DevicePtr, std::size_t> global_bytes(const std::string& name) const;
  std::uint64_t globals_owner_id() const noexcept;
  [[noreturn]] static void throw_global_size(const std::string& name, std::size_t bytes, std::size_t element);
  detail::OwningHandle<detail::ModuleTraits> handle_;
};

}  // namespace drvshim
