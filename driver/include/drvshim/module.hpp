#pragma once
/// @file module.hpp
/// Modules and kernels: load compiled GPU code (CUBIN, PTX, fatbin) with the
/// JIT's logs captured, find kernels by name (a missing one lists what the
/// module has), read their attributes and parameter layout, and launch them:
/// a typed launch that checks the arguments against the kernel's real
/// parameter layout before the driver sees them, and a raw launch.
#include <drvshim/context.hpp>
#include <drvshim/device_span.hpp>
#include <drvshim/export.hpp>
#include <drvshim/owning_handle.hpp>
#include <drvshim/stream.hpp>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace drvshim {

class Kernel;

namespace detail {
struct ModuleState;
struct LibraryState;
struct KernelState;
struct Access;  // the library's door to private members (driver/src/access.hpp)
// Makes the Kernel for function `f` (a CUfunction) of `context` (kernel.cpp).
Kernel make_kernel(const ContextRef& context, std::uintptr_t f, const std::string& name,
                   std::shared_ptr<const void> code);

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

/// What a module image is.
enum class ModuleFormat { cubin, ptx, fatbin };
DRVSHIM_API const char* to_string(ModuleFormat format) noexcept;

/// Recognises an image by its contents: ELF (CUBIN), the fatbin magic, or PTX
/// text. Throws InvalidArgumentError for anything else (and for an empty image).
DRVSHIM_API ModuleFormat detect_module_format(std::span<const std::byte> image);

/// The JIT's output for a module load: its info and error logs and wall time
/// (CU_JIT_WALL_TIME; 0 when nothing was JIT-compiled, e.g. a CUBIN). The log
/// buffers are sized for the image (room per kernel of PTX); a log that still
/// filled its buffer ends with a note that the rest was cut.
struct JitLog {
  std::string info;
  std::string error;
  float wall_ms = 0.0f;
};

/// SASS the driver produced from PTX (link_ptx).
struct LinkedImage {
  std::vector<std::byte> cubin;  ///< an ELF CUBIN for the context's device
  JitLog log;                    ///< the driver JIT's info log and wall time
};

/// Has the driver's JIT turn `ptx` into a CUBIN for `context`'s device
/// (cuLinkCreate, cuLinkAddData(CU_JIT_INPUT_PTX), cuLinkComplete, with the
/// context made current; cuLinkDestroy on every path), so the result can be
/// kept and loaded later without a JIT. `name` appears in diagnostics. Throws
/// InvalidArgumentError when `ptx` is not PTX text, CudaError carrying the
/// JIT's error log when the driver rejects it.
[[nodiscard]] DRVSHIM_API LinkedImage link_ptx(const ContextRef& context, std::span<const std::byte> ptx,
                                               const std::string& name);

/// cuModuleGetLoadingMode: "lazy" or "eager" (CUDA_MODULE_LOADING); "unknown"
/// when the driver predates the query.
DRVSHIM_API std::string module_loading_mode(const class Driver& driver);

/// One kernel parameter: its offset and size in the parameter buffer.
struct ParamInfo {
  std::size_t offset = 0;
  std::size_t size = 0;
};

/// Grid or block dimensions.
struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
  std::uint64_t count() const noexcept { return std::uint64_t{x} * y * z; }
};

/// How to launch: grid, block, dynamic shared memory, stream, and optionally
/// cluster dimensions (then cuLaunchKernelEx is used) and a cooperative launch
/// (cuLaunchCooperativeKernel: the whole grid must be resident at once, so
/// grid-wide synchronisation works).
struct LaunchConfig {
  Dim3 grid;
  Dim3 block;
  unsigned shared_bytes = 0;
  std::optional<StreamRef> stream;  ///< empty: the legacy default stream of the kernel's context
  std::optional<Dim3> cluster;
  bool cooperative = false;
};

/// Kernel attributes, numbered as cuda.h's CUfunction_attribute (the CUDA
/// Runtime's cudaFuncAttribute uses the same numbers for the settable ones:
/// max_dynamic_shared_size_bytes and after).
enum class FunctionAttribute : int {
  max_threads_per_block = 0,
  shared_size_bytes = 1,
  const_size_bytes = 2,
  local_size_bytes = 3,
  num_regs = 4,
  ptx_version = 5,
  binary_version = 6,
  cache_mode_ca = 7,
  max_dynamic_shared_size_bytes = 8,  ///< settable: above 48 KiB needs this opt-in
  preferred_shared_memory_carveout = 9,
  cluster_size_must_be_set = 10,
  required_cluster_width = 11,
  required_cluster_height = 12,
  required_cluster_depth = 13,
  non_portable_cluster_size_allowed = 14,  ///< settable: clusters above 8 blocks on the H200
  cluster_scheduling_policy_preference = 15,
};

/// The L1/shared-memory split a kernel prefers (CUfunc_cache).
enum class CachePreference : int { none = 0, shared = 1, l1 = 2, equal = 3 };

/// A kernel of a loaded module or library: a cheap handle that caches what it
/// read (the parameter layout and the block limit are read once per kernel).
/// It shares ownership of its code: the Module (or Library) stays loaded while
/// any Kernel of it exists, so a launch never reaches the driver with the
/// function handle of unloaded code (which a later load could reuse). Its
/// context must still outlive it.
class DRVSHIM_API Kernel {
 public:
  const std::string& name() const noexcept;
  std::uintptr_t native() const noexcept;
  const ContextRef& context() const noexcept { return context_; }

  /// cuFuncGetAttribute for the common attributes.
  int registers() const;
  int static_shared_bytes() const;
  int max_threads_per_block() const;
  int local_bytes() const;
  /// cuOccupancyMaxActiveBlocksPerMultiprocessor.
  int max_active_blocks_per_sm(unsigned block_threads, std::size_t dynamic_shared_bytes = 0) const;
  /// cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags (flags: 0 default,
  /// 1 disable the caching override). Throws DriverTooOldError without it.
  int max_active_blocks_per_sm(unsigned block_threads, std::size_t dynamic_shared_bytes, unsigned flags) const;
  /// cuOccupancyAvailableDynamicSMemPerBlock: the dynamic shared memory a block
  /// may use so that `blocks_per_sm` blocks of `block_threads` fit on one SM.
  std::size_t available_dynamic_shared_bytes(int blocks_per_sm, unsigned block_threads) const;
  /// cuFuncGetAttribute for any attribute.
  int attribute(FunctionAttribute attribute) const;
  /// cuFuncSetAttribute (CUDA 9.0+): for example max_dynamic_shared_size_bytes
  /// to launch with more than 48 KiB of dynamic shared memory, or
  /// non_portable_cluster_size_allowed for clusters above the portable size.
  /// Throws DriverTooOldError without it, CudaError (CUDA_ERROR_INVALID_VALUE)
  /// for a read-only attribute or a value the device cannot give.
  void set_attribute(FunctionAttribute attribute, int value) const;
  /// cuFuncSetCacheConfig: a preference the driver may ignore.
  void set_cache_preference(CachePreference preference) const;
  /// The parameter layout from cuFuncGetParamInfo (CUDA 12.4+), read at
  /// lookup; std::nullopt ("unknown": launches are not checked, and the debug
  /// log says why) where the driver cannot tell: an older driver, a failed
  /// query, an implausible layout, or CUDA_ERROR_INVALID_VALUE for parameter 0
  /// (the driver's answer both for a kernel without parameters and for one
  /// whose layout it does not know).
  const std::optional<std::vector<ParamInfo>>& params() const;

  /// The same kernel: the same lookup, or a copy of it.
  friend bool operator==(const Kernel&, const Kernel&) = default;

 private:
  friend struct detail::Access;
  friend Kernel detail::make_kernel(const ContextRef&, std::uintptr_t, const std::string&, std::shared_ptr<const void>);
  Kernel(ContextRef context, std::shared_ptr<detail::KernelState> state) noexcept
      : context_(std::move(context)), state_(std::move(state)) {}
  ContextRef context_;
  std::shared_ptr<detail::KernelState> state_;
};

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

/// Launches with arguments the caller packed: `args[i]` points at parameter i
/// (cuLaunchKernel; cuLaunchCooperativeKernel for a cooperative launch;
/// cuLaunchKernelEx with a cluster). Throws InvalidArgumentError before the
/// launch for an empty grid or block (naming which and the dimension) and for
/// a block over the kernel's limit.
DRVSHIM_API void launch_raw(const Kernel& kernel, const LaunchConfig& config, void** args);

namespace detail {
DRVSHIM_API void check_launch_args(const Kernel& kernel, std::span<const std::size_t> sizes);
}  // namespace detail

/// Launches with C++ arguments. Where the kernel's parameter layout is known
/// (Kernel::params()), their count and sizes are checked first: a mismatch throws
/// InvalidArgumentError naming the argument index and the expected and given
/// sizes, and the driver is not called. Pass device views as their address()
/// (a DevicePtr) or as raw pointers.
template <class... Args>
void launch(const Kernel& kernel, const LaunchConfig& config, const Args&... args) {
  static_assert((std::is_trivially_copyable_v<Args> && ...), "kernel arguments must be trivially copyable");
  const std::array<std::size_t, sizeof...(Args)> sizes{sizeof(Args)...};
  detail::check_launch_args(kernel, sizes);
  std::array<void*, sizeof...(Args) + 1> pointers{const_cast<void*>(static_cast<const void*>(&args))..., nullptr};
  launch_raw(kernel, config, pointers.data());
}

}  // namespace drvshim
