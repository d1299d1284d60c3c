// SPDX-License-Identifier: Apache-2.0
// Libraries: context-independent code (cuLibraryLoadData) and its kernels,
// globals and managed variables.
#include <drvshim/driver.hpp>
#include <drvshim/module.hpp>

#include <utility>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "modules/module_internal.hpp"
#include "seam/access.hpp"
#include "seam/core_of.hpp"
#include "trace_internal.hpp"

namespace drvshim {
namespace {

using detail::core_of;

}  // namespace

namespace detail {

Status LibraryState::unload() noexcept {
  if (handle == 0) return {};
  const auto h = std::exchange(handle, 0);
  if (!core->cleanup_allowed()) return {};
  const CUresult r = DRVSHIM_CU(*core, cuLibraryUnload, reinterpret_cast<CUlibrary>(h));
  core->note_result(r);
  if (r != CUDA_SUCCESS) {
    logf(log::Level::warn, "cuLibraryUnload(0x{:x}) failed with {} ({})", h, result_name(static_cast<int>(r)),
         static_cast<int>(r));
  }
  return Status("cuLibraryUnload", static_cast<int>(r));
}

}  // namespace detail

// ---- Library ----------------------------------------------------------------------------------------

Library::Library(std::shared_ptr<detail::LibraryState> state) noexcept : handle_({std::move(state)}) {}

Library Library::load(const Driver& driver, std::span<const std::byte> image) {
  const auto& core = *detail::Access::core(driver);
  core.require_init("Library::load");
  core.require_function(detail::Api::k_cuLibraryLoadData, "Library::load");
  const ModuleFormat format = detect_module_format(image);
  std::string ptx_copy;
  const void* data = detail::image_data(image, format, ptx_copy);
  auto state = std::make_shared<detail::LibraryState>();
  state->core = detail::Access::core(driver);
  state->format = format;
  state->jit = std::make_unique<detail::JitCapture>(detail::jit_log_bytes(image, format));
  auto& jit = *state->jit;
  CUlibrary library = nullptr;
  const CUresult r = DRVSHIM_CU(core, cuLibraryLoadData, &library, data, jit.options, jit.values,
                                detail::JitCapture::kCount, nullptr, nullptr, 0u);
  state->log = jit.take();
  if (r != CUDA_SUCCESS) {
    detail::raise_load(core, static_cast<int>(r), "cuLibraryLoadData", format, image.size(), "context-independent",
                       state->log.error);
  }
  state->handle = reinterpret_cast<std::uintptr_t>(library);
  if (format == ModuleFormat::ptx) {
    state->ptx =
        ptx_copy.empty() ? std::string(reinterpret_cast<const char*>(image.data()), image.size()) : std::move(ptx_copy);
  }
  trace::mark("load-library",
              fmt::format("{} image, {} bytes, library 0x{:x}", to_string(format), image.size(), state->handle));
  return Library(std::move(state));
}

Library Library::load_file(const Driver& driver, const std::string& path) {
  const std::vector<char> bytes = detail::read_module_file("Library::load_file", path);
  return load(driver, std::as_bytes(std::span<const char>(bytes)));
}

Library::Library(Library&&) noexcept = default;
Library& Library::operator=(Library&&) noexcept = default;
Library::~Library() = default;

ModuleFormat Library::format() const noexcept { return handle_.get().state->format; }
const JitLog& Library::jit_log() const noexcept { return handle_.get().state->log; }

namespace {

bool is_jit_failure(CUresult r) noexcept {
  switch (r) {
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case CUDA_ERROR_JIT_COMPILATION_DISABLED:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU: return true;
    default: return false;
  }
}

// A failure of binding a library kernel to a context. Under lazy loading that
// is where the driver JIT-compiles the library, and its error log is not
// returned there: drvshim attaches the log the driver wrote into the buffers
// given at load, else the log of the library's PTX run through the linker
// again (context current).
[[noreturn]] void raise_kernel_binding(const detail::DriverCore& core, CUresult r, const char* api,
                                       const detail::LibraryState& lib, const ContextRef& context,
                                       const std::string& name) {
  std::string objects = fmt::format("kernel \"{}\" in context 0x{:x}", name, context.address());
  if (!is_jit_failure(r)) detail::raise(core, static_cast<int>(r), api, objects);
  std::string log = lib.jit->error_text();
  std::string source = "written by the driver's JIT";
  if (log.empty() && !lib.ptx.empty()) {
    try {
      const std::span<const std::byte> ptx(reinterpret_cast<const std::byte*>(lib.ptx.data()), lib.ptx.size());
      const detail::LinkRun again = detail::run_linker(core, ptx, name, "recovering the JIT log of a library");
      log = again.image.log.error;
      source = again.result == CUDA_SUCCESS
                   ? "none: drvshim ran the library's PTX through the linker again and it compiled there"
                   : fmt::format("from drvshim running the library's PTX through the linker again ({} failed with {})",
                                 again.failed, result_name(static_cast<int>(again.result)));
    } catch (const Error& e) {
      source = fmt::format("none: running the PTX through the linker again failed too ({})", e.what());
    }
  }
  objects += fmt::format("; the library is JIT-compiled for the context here (lazy loading); JIT error log ({}): {}",
                         source, log.empty() ? std::string("(empty)") : log);
  detail::raise(core, static_cast<int>(r), api, std::move(objects),
                lib.format == ModuleFormat::ptx
                    ? "fix the PTX (the JIT log names the line), or compile it for the device's architecture ahead of "
                      "time; CUDA_MODULE_LOADING=EAGER reports JIT errors at Library::load"
                    : "the image may target another architecture than the device's");
}

}  // namespace

Kernel Library::kernel(const ContextRef& context, const std::string& name) const {
  const auto& state = handle_.get().state;
  if (!state) throw InvalidArgumentError("Library::kernel", "this Library is empty (moved from or unloaded)");
  const auto& core = core_of(context);
  CUfunction f = nullptr;
  {
    detail::ContextScope scope(core, context.address(), "Library::kernel");
    CUkernel k = nullptr;
    CUresult r = DRVSHIM_CU(core, cuLibraryGetKernel, &k, reinterpret_cast<CUlibrary>(state->handle), name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) {
      throw InvalidArgumentError("cuLibraryGetKernel", fmt::format("the library has no kernel named \"{}\"", name),
                                 "C++ kernels have mangled names unless declared extern \"C\"");
    }
    if (r != CUDA_SUCCESS) raise_kernel_binding(core, r, "cuLibraryGetKernel", *state, context, name);
    r = DRVSHIM_CU(core, cuKernelGetFunction, &f, k);
    if (r != CUDA_SUCCESS) raise_kernel_binding(core, r, "cuKernelGetFunction", *state, context, name);
  }
  return detail::make_kernel(context, reinterpret_cast<std::uintptr_t>(f), name, state);
}

void Library::set_kernel_attribute(const std::string& name, FunctionAttribute attribute, int value,
                                   const Device& device) const {
  const auto& state = handle_.get().state;
  if (!state)
    throw InvalidArgumentError("Library::set_kernel_attribute", "this Library is empty (moved from or unloaded)");
  state->core->require_function(detail::Api::k_cuKernelSetAttribute, "Library::set_kernel_attribute");
  CUkernel k = nullptr;
  const CUresult r =
      DRVSHIM_CU(*state->core, cuLibraryGetKernel, &k, reinterpret_cast<CUlibrary>(state->handle), name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND) {
    throw InvalidArgumentError("cuLibraryGetKernel", fmt::format("the library has no kernel named \"{}\"", name));
  }
  if (r != CUDA_SUCCESS)
    detail::raise(*state->core, static_cast<int>(r), "cuLibraryGetKernel", fmt::format("kernel \"{}\"", name));
  DRVSHIM_TRY(*state->core, cuKernelSetAttribute,
              fmt::format("kernel \"{}\", attribute {}, value {}, device {}", name, static_cast<int>(attribute), value,
                          device.ordinal()),
              static_cast<CUfunction_attribute>(attribute), value, k, static_cast<CUdevice>(device.native()));
}

std::pair<DevicePtr, std::size_t> Library::global_bytes(const ContextRef& context, const std::string& name) const {
  const auto& state = handle_.get().state;
  if (!state) throw InvalidArgumentError("Library::global", "this Library is empty (moved from or unloaded)");
  state->core->require_function(detail::Api::k_cuLibraryGetGlobal, "Library::global");
  detail::ContextScope scope(*state->core, context.address(), "Library::global");
  CUdeviceptr address = 0;
  std::size_t bytes = 0;
  const CUresult r = DRVSHIM_CU(*state->core, cuLibraryGetGlobal, &address, &bytes,
                                reinterpret_cast<CUlibrary>(state->handle), name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND) {
    throw InvalidArgumentError("cuLibraryGetGlobal", fmt::format("the library has no variable named \"{}\"", name),
                               "C++ variables inside a namespace have mangled names");
  }
  if (r != CUDA_SUCCESS) {
    detail::raise(*state->core, static_cast<int>(r), "cuLibraryGetGlobal",
                  fmt::format("variable \"{}\" in context 0x{:x}", name, context.address()));
  }
  return {address, bytes};
}

void Library::throw_global_size(const std::string& name, std::size_t bytes, std::size_t element) {
  throw InvalidArgumentError(
      "Library::global",
      fmt::format("variable \"{}\" has {} bytes, not a multiple of the element size {}", name, bytes, element));
}

Library::ManagedVariable Library::managed(const ContextRef& context, const std::string& name) const {
  const auto& state = handle_.get().state;
  if (!state) throw InvalidArgumentError("Library::managed", "this Library is empty (moved from or unloaded)");
  state->core->require_function(detail::Api::k_cuLibraryGetManaged, "Library::managed");
  state->core->require_function(detail::Api::k_cuLibraryGetModule, "Library::managed");
  {
    detail::ContextScope scope(*state->core, context.address(), "Library::managed");
    CUmodule module = nullptr;
    DRVSHIM_TRY(*state->core, cuLibraryGetModule,
                fmt::format("loading the library into context 0x{:x}", context.address()), &module,
                reinterpret_cast<CUlibrary>(state->handle));
  }
  CUdeviceptr address = 0;
  std::size_t bytes = 0;
  const CUresult r = DRVSHIM_CU(*state->core, cuLibraryGetManaged, &address, &bytes,
                                reinterpret_cast<CUlibrary>(state->handle), name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND) {
    throw InvalidArgumentError("cuLibraryGetManaged",
                               fmt::format("the library has no managed variable named \"{}\"", name));
  }
  if (r != CUDA_SUCCESS) {
    detail::raise(*state->core, static_cast<int>(r), "cuLibraryGetManaged", fmt::format("variable \"{}\"", name));
  }
  return ManagedVariable{address, bytes};
}

void Library::unload() { handle_.release(); }

Status Library::unload(std::nothrow_t) noexcept { return handle_.release(std::nothrow); }

namespace detail {

void LibraryTraits::release_or_throw(value_type& v) {
  const auto core = v.state->core;
  const Status s = release(v);
  if (!s.ok()) raise(*core, s.code(), s.api(), "library");
}

Status LibraryTraits::release(value_type& v) noexcept {
  const auto state = std::move(v.state);
  if (state.use_count() > 1) {
    logf(log::Level::debug, "library 0x{:x} stays loaded until the last of its {} Kernel(s) is destroyed",
         state->handle, state.use_count() - 1);
    return {};
  }
  return state->unload();
}

}  // namespace detail

}  // namespace drvshim
