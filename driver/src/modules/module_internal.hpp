// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the module files share (module_image.cpp, kernel.cpp, module.cpp,
// library.cpp, launch.cpp): the states behind Module, Library and Kernel, and
// the image helpers.
#include <cuda.h>

#include <drvshim/module.hpp>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "modules/jit_capture.hpp"
#include "seam/core.hpp"
#include "support/view_checks.hpp"

namespace drvshim::detail {

inline CUfunction fn(const Kernel& k) noexcept { return reinterpret_cast<CUfunction>(k.native()); }
inline CUmodule mod(std::uintptr_t h) noexcept { return reinterpret_cast<CUmodule>(h); }

// The loaded module, shared by its Module owner and its Kernels: the last of
// them unloads it.
struct ModuleState {
  ContextRef context;
  std::uintptr_t handle = 0;
  ModuleFormat format = ModuleFormat::ptx;
  JitLog log;
  std::uint64_t globals_id = new_owner_id();  // views of its globals (debug check)

  ModuleState(ContextRef ctx, std::uintptr_t h, ModuleFormat f, JitLog l)
      : context(std::move(ctx)), handle(h), format(f), log(std::move(l)) {}
  ModuleState(const ModuleState&) = delete;
  ModuleState& operator=(const ModuleState&) = delete;
  ~ModuleState() { (void)unload(); }

  Status unload() noexcept;  // module.cpp
};

// The loaded library, shared by its Library owner and its Kernels.
struct LibraryState {
  std::shared_ptr<const DriverCore> core;
  std::uintptr_t handle = 0;
  ModuleFormat format = ModuleFormat::ptx;
  JitLog log;
  // Under lazy loading the driver JIT-compiles when a kernel is first bound to
  // a context, long after cuLibraryLoadData returned: the option values it was
  // given stay valid (and readable) for the library's life.
  std::unique_ptr<JitCapture> jit;
  // PTX images are kept, so a lazy JIT failure that left no log can be
  // compiled again through the linker to get one.
  std::string ptx;

  LibraryState() = default;
  LibraryState(const LibraryState&) = delete;
  LibraryState& operator=(const LibraryState&) = delete;
  ~LibraryState() { (void)unload(); }

  Status unload() noexcept;  // library.cpp
};

struct KernelState {
  std::uintptr_t function = 0;
  std::string name;
  std::optional<std::vector<ParamInfo>> params;  // read once, at lookup
  std::string unchecked_reason;                  // why params is unknown
  bool no_parameter_zero = false;                // unknown because parameter 0 is invalid: none, or not known
  std::atomic<bool> unchecked_said{false};       // the first unchecked launch was logged
  int max_threads = 0;                           // read once, at lookup
  std::shared_ptr<const void> code;              // the ModuleState or LibraryState: kept loaded
};

// cuFuncGetAttribute of `k`, with its context current; `what` names the attribute in errors.
int function_attribute(const Kernel& k, CUfunction_attribute attribute, const char* what);

// The format of `image`, or InvalidArgumentError from `api` describing it as `what`.
ModuleFormat detect_format(std::span<const std::byte> image, const char* api, const std::string& what);

// make_kernel (declared in kernel.hpp, a friend of Kernel; kernel.cpp) reads
// the block limit and the parameter layout once, and keeps `code` (the
// module or library) loaded.

// The image as the driver wants it: PTX must be a C string.
const void* image_data(std::span<const std::byte> image, ModuleFormat format, std::string& ptx_copy);

// A failed module or library load, with the JIT's error log.
[[noreturn]] void raise_load(const DriverCore& core, int r, const char* api, ModuleFormat format, std::size_t bytes,
                             const std::string& where, const std::string& error_log);

// The whole file at `path`, checked to be a module image. The errors name the path and keep the errno.
std::vector<char> read_module_file(const char* api, const std::string& path);

// One run of the driver's linker over PTX (context current): the result, the
// call that failed and the JIT's logs. Destroys the link state on every path.
struct LinkRun {
  CUresult result = CUDA_SUCCESS;
  const char* failed = "";
  LinkedImage image;
};
LinkRun run_linker(const DriverCore& core, std::span<const std::byte> ptx, const std::string& name,
                   const std::string& objects);

}  // namespace drvshim::detail
