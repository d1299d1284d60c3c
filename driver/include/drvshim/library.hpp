// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file library.hpp
/// Libraries: context-independent code (cuLibraryLoadData), loaded once and
/// usable in every context.
#include <drvshim/context.hpp>
#include <drvshim/device_span.hpp>
#include <drvshim/export.hpp>
#include <drvshim/kernel.hpp>
#include <drvshim/module_image.hpp>
#include <drvshim/owning_handle.hpp>

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <utility>

namespace drvshim {

class Driver;

namespace detail {
struct LibraryState;
struct Access;  // the library's own door to private members (internal, not part of the API)

/// Library's ownership traits (owning_handle.hpp); shared with its Kernels like a Module's.
struct LibraryTraits {
  struct value_type {
    std::shared_ptr<LibraryState> state;
  };
  static bool held(const value_type& v) noexcept { return v.state != nullptr; }
  static void clear(value_type& v) noexcept { v.state.reset(); }
  [[nodiscard]] static Status release(value_type& v) noexcept;
  static void release_or_throw(value_type& v);
};
}  // namespace detail

/// Context-independent code (cuLibraryLoadData, CUDA 12.0+; move-only owner):
/// loaded once, usable in every context; a kernel is bound to a context when
/// asked for (cuLibraryGetKernel + cuKernelGetFunction). Like a Module, it
/// stays loaded while any of its Kernels exists.
class DRVSHIM_API Library {
 public:
  /// cuLibraryLoadData with the same JIT log options as Module::load. Throws
  /// DriverTooOldError where the driver lacks it, CudaError (with the JIT log) when loading fails.
  /// Under lazy loading the driver JIT-compiles later, when a kernel is first
  /// bound to a context; kernel() then reports a JIT failure with its log.
  [[nodiscard]] static Library load(const Driver& driver, std::span<const std::byte> image);
  /// Reads `path` and loads it; errors as Module::load_file.
  [[nodiscard]] static Library load_file(const Driver& driver, const std::string& path);

  Library(Library&&) noexcept;
  Library& operator=(Library&&) noexcept;
  Library(const Library&) = delete;
  Library& operator=(const Library&) = delete;
  ~Library();

  explicit operator bool() const noexcept { return handle_.held(); }
  ModuleFormat format() const noexcept;
  /// The log of the load (under lazy loading the JIT runs later: see kernel()).
  const JitLog& jit_log() const noexcept;
  /// The kernel `name` as a function of `context`, ready for launch(). A JIT
  /// failure here (lazy loading) throws CudaError carrying the JIT error log:
  /// the one the driver wrote, else the one drvshim gets by running the
  /// library's PTX through the driver's linker again.
  Kernel kernel(const ContextRef& context, const std::string& name) const;
  /// cuKernelSetAttribute: sets a kernel attribute for one device, before or
  /// after its functions are bound to contexts (see Kernel::set_attribute).
  void set_kernel_attribute(const std::string& kernel, FunctionAttribute attribute, int value,
                            const Device& device) const;
  /// cuLibraryGetGlobal: the __device__ / __constant__ variable `name` as it
  /// exists in `context` (loaded there if needed), as a typed device view.
  /// Throws InvalidArgumentError when the library has no such variable.
  template <class T>
  DeviceSpan<T> global(const ContextRef& context, const std::string& name) const {
    const auto [address, bytes] = global_bytes(context, name);
    if (bytes % sizeof(T) != 0) throw_global_size(name, bytes, sizeof(T));
    return DeviceSpan<T>(context, address, bytes / sizeof(T), 0);
  }
  /// A __managed__ variable: its address (valid on the host and on every device) and size.
  struct ManagedVariable {
    DevicePtr address = 0;
    std::size_t bytes = 0;
  };
  /// cuLibraryGetManaged, after making sure the library is loaded into
  /// `context` (cuLibraryGetModule): the driver registers a library's managed
  /// variables when it is loaded into a first context. Throws
  /// InvalidArgumentError when the library has no such variable.
  ManagedVariable managed(const ContextRef& context, const std::string& name) const;
  /// Lets go of the library; the owner becomes empty. cuLibraryUnload runs now
  /// when no Kernel of it is left, else when the last one is destroyed.
  void unload();
  [[nodiscard]] Status unload(std::nothrow_t) noexcept;

 private:
  explicit Library(std::shared_ptr<detail::LibraryState> state) noexcept;
  std::pair<DevicePtr, std::size_t> global_bytes(const ContextRef& context, const std::string& name) const;
  [[noreturn]] static void throw_global_size(const std::string& name, std::size_t bytes, std::size_t element);
  detail::OwningHandle<detail::LibraryTraits> handle_;
};

}  // namespace drvshim
