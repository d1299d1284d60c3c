// SPDX-License-Identifier: Apache-2.0
// Modules: loading one into a context (cuModuleLoadDataEx), its kernels and globals.
#include <drvshim/module.hpp>

#include <utility>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "modules/module_internal.hpp"
#include "seam/core_of.hpp"
#include "trace_internal.hpp"

namespace drvshim {
namespace {

using detail::core_of;
using detail::mod;

}  // namespace

namespace detail {

Status ModuleState::unload() noexcept {
  if (handle == 0) return {};
  const auto h = std::exchange(handle, 0);
  retire_owner_id(globals_id);
  const auto& core = core_of(context);
  if (!core.cleanup_allowed_in(context.address())) return {};
  try {
    ContextScope scope(core, context.address(), "Module::unload");
    const CUresult r = DRVSHIM_CU(core, cuModuleUnload, mod(h));
    core.note_result(r);
    if (r != CUDA_SUCCESS) {
      logf(log::Level::warn, "cuModuleUnload(0x{:x}) failed with {} ({})", h, result_name(static_cast<int>(r)),
           static_cast<int>(r));
    }
    return Status("cuModuleUnload", static_cast<int>(r));
  } catch (const Error& e) {
    logf(log::Level::warn, "module 0x{:x} not unloaded: {}", h, e.what());
    return Status("cuCtxPushCurrent", e.code() != 0 ? e.code() : CUDA_ERROR_UNKNOWN);
  } catch (...) {
    return Status("cuModuleUnload", CUDA_ERROR_UNKNOWN);
  }
}

}  // namespace detail

// ---- Module ------------------------------------------------------------------------------------

Module::Module(ContextRef context, std::shared_ptr<detail::ModuleState> state) noexcept
    : handle_({std::move(context), std::move(state)}) {}

Module Module::load(const ContextRef& context, std::span<const std::byte> image) {
  const ModuleFormat format = detect_module_format(image);
  std::string ptx_copy;
  const void* data = detail::image_data(image, format, ptx_copy);
  const auto& core = core_of(context);
  detail::ContextScope scope(core, context.address(), "Module::load");
  detail::JitCapture jit(detail::jit_log_bytes(image, format));
  CUmodule module = nullptr;
  const CUresult r =
      DRVSHIM_CU(core, cuModuleLoadDataEx, &module, data, detail::JitCapture::kCount, jit.options, jit.values);
  JitLog log = jit.take();
  if (r != CUDA_SUCCESS) {
    detail::raise_load(core, static_cast<int>(r), "cuModuleLoadDataEx", format, image.size(),
                       fmt::format("device {}", context.device().ordinal()), log.error);
  }
  const float wall = log.wall_ms;
  auto state =
      std::make_shared<detail::ModuleState>(context, reinterpret_cast<std::uintptr_t>(module), format, std::move(log));
  trace::mark("load-module", fmt::format("{} image, {} bytes, JIT {:.3f} ms, module 0x{:x}", to_string(format),
                                         image.size(), static_cast<double>(wall), state->handle));
  return Module(context, std::move(state));
}

Module Module::load_file(const ContextRef& context, const std::string& path) {
  const std::vector<char> bytes = detail::read_module_file("Module::load_file", path);
  return load(context, std::as_bytes(std::span<const char>(bytes)));
}

// ---- Module (owner) ------------------------------------------------------------------------------

Module::Module(Module&&) noexcept = default;
Module& Module::operator=(Module&&) noexcept = default;
Module::~Module() = default;

Module::operator bool() const noexcept { return handle_.held(); }

ModuleFormat Module::format() const noexcept { return handle_.get().state->format; }
const JitLog& Module::jit_log() const noexcept { return handle_.get().state->log; }
std::uint64_t Module::globals_owner_id() const noexcept {
  const auto& state = handle_.get().state;
  return state ? state->globals_id : 0;
}

std::vector<std::string> Module::kernel_names() const {
  const auto& [context, state] = handle_.get();
  if (!state) throw InvalidArgumentError("Module::kernel_names", "this Module is empty (moved from or unloaded)");
  const auto& core = core_of(context);
  std::vector<std::string> names;
  if (!core.has(detail::Api::k_cuModuleGetFunctionCount) || !core.has(detail::Api::k_cuModuleEnumerateFunctions) ||
      !core.has(detail::Api::k_cuFuncGetName)) {
    return names;
  }
  detail::ContextScope scope(core, context.address(), "Module::kernel_names");
  unsigned count = 0;
  DRVSHIM_TRY(core, cuModuleGetFunctionCount, std::string("module"), &count, mod(state->handle));
  std::vector<CUfunction> functions(count);
  if (count != 0) {
    DRVSHIM_TRY(core, cuModuleEnumerateFunctions, std::string("module"), functions.data(), count, mod(state->handle));
  }
  for (CUfunction f : functions) {
    const char* name = nullptr;
    DRVSHIM_TRY(core, cuFuncGetName, std::string("module function"), &name, f);
    if (name != nullptr) names.emplace_back(name);
  }
  return names;
}

Kernel Module::kernel(const std::string& name) const {
  const auto& [context, state] = handle_.get();
  if (!state) throw InvalidArgumentError("Module::kernel", "this Module is empty (moved from or unloaded)");
  const auto& core = core_of(context);
  CUfunction f = nullptr;
  {
    detail::ContextScope scope(core, context.address(), "Module::kernel");
    const CUresult r = DRVSHIM_CU(core, cuModuleGetFunction, &f, mod(state->handle), name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) {
      const auto names = kernel_names();
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      throw InvalidArgumentError(
          "cuModuleGetFunction", fmt::format("the module has no kernel named \"{}\"", name),
          names.empty()
              ? "the driver cannot list the module's kernels; check the name (C++ kernels have mangled "
                "names unless declared extern \"C\")"
              : fmt::format("its kernels are: {} (C++ kernels have mangled names unless declared extern \"C\")", list));
    }
    if (r != CUDA_SUCCESS)
      detail::raise(core, static_cast<int>(r), "cuModuleGetFunction", fmt::format("kernel \"{}\"", name));
  }
  return detail::make_kernel(context, reinterpret_cast<std::uintptr_t>(f), name, state);
}

std::pair<DevicePtr, std::size_t> Module::global_bytes(const std::string& name) const {
  const auto& [context, state] = handle_.get();
  if (!state) throw InvalidArgumentError("Module::global", "this Module is empty (moved from or unloaded)");
  const auto& core = core_of(context);
  detail::ContextScope scope(core, context.address(), "Module::global");
  CUdeviceptr address = 0;
  std::size_t bytes = 0;
  DRVSHIM_TRY(core, cuModuleGetGlobal, fmt::format("global \"{}\"", name), &address, &bytes, mod(state->handle),
              name.c_str());
  return {address, bytes};
}

void Module::throw_global_size(const std::string& name, std::size_t bytes, std::size_t element) {
  throw InvalidArgumentError(
      "Module::global",
      fmt::format("global \"{}\" has {} bytes, not a multiple of the element size {}", name, bytes, element));
}

void Module::unload() { handle_.release(); }

Status Module::unload(std::nothrow_t) noexcept { return handle_.release(std::nothrow); }

namespace detail {

void ModuleTraits::release_or_throw(value_type& v) {
  const Status s = release(v);
  if (!s.ok()) raise(core_of(v.context), s.code(), s.api(), "module");
}

Status ModuleTraits::release(value_type& v) noexcept {
  const auto state = std::move(v.state);
  if (state.use_count() > 1) {
    logf(log::Level::debug, "module 0x{:x} stays loaded until the last of its {} Kernel(s) is destroyed", state->handle,
         state.use_count() - 1);
    return {};
  }
  return state->unload();
}

}  // namespace detail

}  // namespace drvshim
