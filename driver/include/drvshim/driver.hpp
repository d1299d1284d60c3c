// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file driver.hpp
/// The loaded CUDA driver: the one seam through which drvshim calls libcuda.
///
/// Loading and initialising are two explicit steps:
///
///     auto drv = drvshim::Driver::load();   // dlopen libcuda.so.1, cuDriverGetVersion, resolve the table
///     drv.init();                           // cuInit(0), exactly once however many threads ask
///     int n = drv.device_count();
///
/// Nothing is done implicitly: a call that needs init() before it happened
/// throws MissingStepError naming the step.
#include <drvshim/export.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace drvshim {

namespace detail {
struct DriverCore;
struct Access;  // the library's own door to private members (internal, not part of the API)
}  // namespace detail

class Device;

/// Where to load the driver from.
struct LoadOptions {
  /// An explicit path (or soname) to dlopen. Empty: the environment variable
  /// DRVSHIM_LIBCUDA when set (and use_environment), else "libcuda.so.1".
  /// Plain "libcuda.so" is the toolkit's link stub and is never tried by default.
  std::string path{};
  /// Whether DRVSHIM_LIBCUDA may override the default.
  bool use_environment = true;
};

/// A driver function the loaded library does not provide.
struct MissingFunction {
  std::string name;       ///< base name, as passed to cuGetProcAddress ("cuCtxCreate")
  int version = 0;        ///< the ABI version drvshim asked for (the PFN typedef's, e.g. 12050)
  bool required = false;  ///< required functions make load() fail; optional ones make a feature "unsupported"
  std::string reason;     ///< "symbol not found", "needs driver >= 12.5 (this is 11.8)", ...
};

/// The loaded driver library: its handle, its function table and its version.
///
/// A Driver is a shared handle: copies refer to the same loaded library, which
/// stays loaded while any copy or any object created from it (Device,
/// PrimaryContext, ...) lives. Thread-safe.
/// Whether the driver has a function by a name, at a version (CUdriverProcAddressQueryResult).
enum class EntryPointStatus : int {
  found = 0,
  not_found = 1,               ///< no function of that name
  version_not_sufficient = 2,  ///< the function exists, but not at the version asked for
};
DRVSHIM_API const char* to_string(EntryPointStatus status) noexcept;

/// What Driver::entry_point found: the function, or null and why not.
struct EntryPoint {
  void* function = nullptr;
  EntryPointStatus status = EntryPointStatus::not_found;
};

class DRVSHIM_API Driver {
 public:
  /// Loads the driver library with dlopen(RTLD_NOW|RTLD_LOCAL), reads
  /// cuDriverGetVersion (before any cuInit), and resolves every function of
  /// drvshim's table through cuGetProcAddress_v2 (or cuGetProcAddress on an
  /// 11.x driver) at the ABI version of the typedef drvshim calls through.
  /// Throws DriverNotFoundError (every path tried, with dlerror's text),
  /// StubLibraryError (the toolkit's stub was loaded), DriverTooOldError (no
  /// cuGetProcAddress, or a required function missing).
  static Driver load(const LoadOptions& options = {});

  /// The path or soname given to dlopen.
  const std::string& requested_path() const noexcept;
  /// The file actually loaded (symbolic links resolved), as the dynamic linker reports it.
  const std::string& loaded_path() const noexcept;
  /// The driver's CUDA version, 1000*major + 10*minor (13000 for CUDA 13.0).
  int version() const noexcept;
  /// The CUDA version of the cuda.h drvshim's table was written against.
  static int header_version() noexcept;
  /// Which resolver was used: "cuGetProcAddress_v2" or "cuGetProcAddress".
  const std::string& resolver() const noexcept;

  /// How many functions drvshim's table lists, and how many resolved.
  std::size_t functions_total() const noexcept;
  std::size_t functions_resolved() const noexcept;
  /// The functions not resolved (all optional, or load() would have thrown).
  const std::vector<MissingFunction>& missing_functions() const noexcept;
  /// Whether the table entry with this base name resolved (false for names not in the table).
  bool has_function(std::string_view base_name) const noexcept;

  /// Initialises the driver: cuInit(0). Safe to call from many threads at
  /// once; exactly one cuInit reaches the driver, later calls return at once.
  /// Throws CudaError with the cuInit result (CUDA_ERROR_NO_DEVICE when there
  /// is no device), StubLibraryError, UsedAfterForkError; a failed init may be retried.
  void init();
  /// Whether init() has succeeded.
  bool initialized() const noexcept;
  /// The time the successful cuInit took, in nanoseconds (0 before init()).
  std::int64_t init_duration_ns() const noexcept;

  /// cuDeviceGetCount. Throws MissingStepError before init().
  int device_count() const;
  /// The device with this ordinal (cuDeviceGet). Throws MissingStepError
  /// before init(), InvalidArgumentError for an ordinal out of range.
  Device device(int ordinal) const;
  /// All devices, in ordinal order.
  std::vector<Device> devices() const;

  /// The driver's own function `name` (a base name such as "cuMemAlloc") at
  /// the ABI of CUDA version `cuda_version` (1000*major + 10*minor), for
  /// programs that call the driver directly: cuGetProcAddress with `flags`
  /// 0 (default), 1 (the legacy default stream's variant) or 2 (the
  /// per-thread default stream's). The call bypasses drvshim: nothing it does
  /// is traced or checked. A name the driver does not know is no error: the
  /// status says why the function is null. Throws InvalidArgumentError for
  /// an empty name or other flags, CudaError as the driver answers
  /// (CUDA_ERROR_INVALID_VALUE for a version newer than the driver's).
  EntryPoint entry_point(std::string_view name, int cuda_version, std::uint64_t flags = 0) const;

  /// The calling thread's current context (cuCtxGetCurrent), as an opaque
  /// address; 0 when none. Throws MissingStepError before init().
  std::uintptr_t current_context() const;

 private:
  friend struct detail::Access;
  explicit Driver(std::shared_ptr<detail::DriverCore> core) noexcept;
  std::shared_ptr<detail::DriverCore> core_;
};

}  // namespace drvshim
