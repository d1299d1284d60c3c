#include <drvshim/driver.hpp>
#include <drvshim/module.hpp>

#include <cstring>
#include <fstream>
#include <iterator>
#include <mutex>
#include <utility>

#include "context_scope.hpp"
#include "core.hpp"
#include "log_internal.hpp"
#include "trace_internal.hpp"

namespace drvshim {
namespace detail {

struct ModuleState {
  std::uintptr_t handle = 0;
  ModuleFormat format = ModuleFormat::ptx;
  JitLog log;
};

struct KernelState {
  std::uintptr_t function = 0;
  std::string name;
  std::optional<std::vector<ParamInfo>> params;  // read once, at lookup
  int max_threads = 0;                           // read once, at lookup
};

}  // namespace detail

namespace {

const detail::DriverCore& core_of(const ContextRef& ctx) noexcept { return *ctx.device().core(); }
CUfunction fn(const Kernel& k) noexcept { return reinterpret_cast<CUfunction>(k.native()); }
CUmodule mod(std::uintptr_t h) noexcept { return reinterpret_cast<CUmodule>(h); }

constexpr std::uint32_t kFatbinMagic = 0xBA55ED50u;

int function_attribute(const Kernel& k, CUfunction_attribute attribute, const char* what) {
  const auto& core = core_of(k.context());
  detail::ContextScope scope(core, k.context().address(), "Kernel attribute");
  int value = 0;
  DRVSHIM_TRY(core, cuFuncGetAttribute, fmt::format("kernel {}, attribute {}", k.name(), what), &value, attribute, fn(k));
  return value;
}

}  // namespace

const char* to_string(ModuleFormat format) noexcept {
  switch (format) {
    case ModuleFormat::cubin: return "cubin";
    case ModuleFormat::ptx: return "ptx";
    case ModuleFormat::fatbin: return "fatbin";
  }
  return "unknown";
}

ModuleFormat detect_module_format(std::span<const std::byte> image) {
  if (image.size() >= 4) {
    const auto* b = reinterpret_cast<const unsigned char*>(image.data());
    if (b[0] == 0x7f && b[1] == 'E' && b[2] == 'L' && b[3] == 'F') return ModuleFormat::cubin;
    std::uint32_t magic = 0;
    std::memcpy(&magic, b, 4);
    if (magic == kFatbinMagic) return ModuleFormat::fatbin;
    const std::string_view text(reinterpret_cast<const char*>(b), std::min<std::size_t>(image.size(), 4096));
    if (text.find(".version") != std::string_view::npos || text.find(".target") != std::string_view::npos ||
        text.find(".entry") != std::string_view::npos) {
      return ModuleFormat::ptx;
    }
  }
  throw InvalidArgumentError("detect_module_format",
                             fmt::format("the {}-byte image is neither a CUBIN (ELF), a fatbin nor PTX text", image.size()),
                             "load what nvcc -cubin, -fatbin or -ptx (or NVRTC) produced");
}

std::string module_loading_mode(const Driver& driver) {
  const auto& core = *driver.core();
  core.require_init("module_loading_mode");
  if (!core.has(detail::Api::k_cuModuleGetLoadingMode)) return "unknown";
  CUmoduleLoadingMode mode{};
  DRVSHIM_TRY(core, cuModuleGetLoadingMode, std::string(), &mode);
  return mode == CU_MODULE_LAZY_LOADING ? "lazy" : "eager";
}

// ---- Kernel ------------------------------------------------------------------------------------

const std::string& Kernel::name() const noexcept { return state_->name; }
std::uintptr_t Kernel::native() const noexcept { return state_->function; }
int Kernel::registers() const { return function_attribute(*this, CU_FUNC_ATTRIBUTE_NUM_REGS, "registers"); }
int Kernel::static_shared_bytes() const {
  return function_attribute(*this, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "static shared bytes");
}
int Kernel::max_threads_per_block() const { return state_->max_threads; }
int Kernel::local_bytes() const { return function_attribute(*this, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "local bytes"); }
const std::optional<std::vector<ParamInfo>>& Kernel::params() const { return state_->params; }

int Kernel::max_active_blocks_per_sm(unsigned block_threads, std::size_t dynamic_shared_bytes) const {
  const auto& core = core_of(context_);
  detail::ContextScope scope(core, context_.address(), "Kernel::max_active_blocks_per_sm");
  int blocks = 0;
  DRVSHIM_TRY(core, cuOccupancyMaxActiveBlocksPerMultiprocessor,
              fmt::format("kernel {}, {} threads, {} dynamic shared bytes", name(), block_threads, dynamic_shared_bytes),
              &blocks, fn(*this), static_cast<int>(block_threads), dynamic_shared_bytes);
  return blocks;
}

// ---- Module ------------------------------------------------------------------------------------

Module::Module(ContextRef context, std::shared_ptr<detail::ModuleState> state) noexcept
    : context_(std::move(context)), state_(std::move(state)) {}

namespace {

// The JIT options every load passes: info and error logs, wall time, verbose.
struct JitCapture {
  static constexpr std::size_t kLogBytes = 16384;
  std::string info = std::string(kLogBytes, '\0');
  std::string error = std::string(kLogBytes, '\0');
  float wall = 0.0f;
  CUjit_option options[6] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_ERROR_LOG_BUFFER,
                             CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME, CU_JIT_LOG_VERBOSE};
  void* values[6] = {info.data(),
                     reinterpret_cast<void*>(static_cast<std::uintptr_t>(kLogBytes)),
                     error.data(),
                     reinterpret_cast<void*>(static_cast<std::uintptr_t>(kLogBytes)),
                     &wall,
                     reinterpret_cast<void*>(std::uintptr_t{1})};
  JitLog take() {
    info.resize(std::strlen(info.c_str()));
    error.resize(std::strlen(error.c_str()));
    return JitLog{std::move(info), std::move(error), wall};
  }
};

// The image as the driver wants it: PTX must be a C string.
const void* image_data(std::span<const std::byte> image, ModuleFormat format, std::string& ptx_copy) {
  if (format == ModuleFormat::ptx && (image.empty() || image.back() != std::byte{0})) {
    ptx_copy.assign(reinterpret_cast<const char*>(image.data()), image.size());
    return ptx_copy.c_str();
  }
  return image.data();
}

[[noreturn]] void raise_load(const detail::DriverCore& core, int r, const char* api, ModuleFormat format,
                             std::size_t bytes, const std::string& where, const std::string& error_log) {
  detail::raise(core, r, api,
                fmt::format("{} image of {} bytes, {}; JIT error log: {}", to_string(format), bytes, where,
                            error_log.empty() ? std::string("(empty)") : error_log),
                format == ModuleFormat::ptx ? "fix the PTX (the JIT log above names the line), or compile it for "
                                              "the device's architecture ahead of time"
                                            : "the image may target another architecture than the device's");
}

std::vector<char> read_file(const char* api, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw InvalidArgumentError(api, fmt::format("cannot read \"{}\"", path),
                               "check the path; modules are CUBIN, fatbin or PTX files");
  }
  return std::vector<char>((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

}  // namespace

// A Kernel for function `f` of `context`: reads the block limit and the parameter layout once.
Kernel make_kernel(const ContextRef& context, CUfunction f, const std::string& name);

Module Module::load(const ContextRef& context, std::span<const std::byte> image) {
  const ModuleFormat format = detect_module_format(image);
  std::string ptx_copy;
  const void* data = image_data(image, format, ptx_copy);
  const auto& core = core_of(context);
  detail::ContextScope scope(core, context.address(), "Module::load");
  JitCapture jit;
  CUmodule module = nullptr;
  const CUresult r = DRVSHIM_CU(core, cuModuleLoadDataEx, &module, data, 6u, jit.options, jit.values);
  JitLog log = jit.take();
  if (r != CUDA_SUCCESS) {
    raise_load(core, static_cast<int>(r), "cuModuleLoadDataEx", format, image.size(),
               fmt::format("device {}", context.device().ordinal()), log.error);
  }
  const float wall = log.wall_ms;
  auto state = std::make_shared<detail::ModuleState>();
  state->handle = reinterpret_cast<std::uintptr_t>(module);
  state->format = format;
  state->log = std::move(log);
  trace::mark("load-module", fmt::format("{} image, {} bytes, JIT {:.3f} ms, module 0x{:x}", to_string(format),
                                         image.size(), static_cast<double>(wall), state->handle));
  return Module(context, std::move(state));
}

Module Module::load_file(const ContextRef& context, const std::string& path) {
  const std::vector<char> bytes = read_file("Module::load_file", path);
  return load(context, std::as_bytes(std::span<const char>(bytes)));
}

LinkedImage link_ptx(const ContextRef& context, std::span<const std::byte> ptx, const std::string& name) {
  if (ptx.empty() || detect_module_format(ptx) != ModuleFormat::ptx) {
    throw InvalidArgumentError("link_ptx", fmt::format("\"{}\" is not PTX text", name),
                               "pass the PTX NVRTC produced for a compute_XY target");
  }
  std::string ptx_copy;
  const void* data = image_data(ptx, ModuleFormat::ptx, ptx_copy);
  const auto& core = core_of(context);
  detail::ContextScope scope(core, context.address(), "link_ptx");
  JitCapture jit;
  CUlinkState state = nullptr;
  DRVSHIM_TRY(core, cuLinkCreate, fmt::format("linking \"{}\" on device {}", name, context.device().ordinal()), 6u,
              jit.options, jit.values, &state);
  // The linker owns the CUBIN cuLinkComplete hands out: it is copied before cuLinkDestroy.
  struct Destroy {
    const detail::DriverCore& core;
    CUlinkState state;
    ~Destroy() {
      if (core.cleanup_allowed()) (void)DRVSHIM_CU(core, cuLinkDestroy, state);
    }
  } destroy{core, state};
  CUresult r = DRVSHIM_CU(core, cuLinkAddData, state, CU_JIT_INPUT_PTX, const_cast<void*>(data),
                          ptx_copy.empty() ? ptx.size() : ptx_copy.size() + 1, name.c_str(), 0u, nullptr, nullptr);
  const char* failed = "cuLinkAddData";
  void* cubin = nullptr;
  std::size_t size = 0;
  if (r == CUDA_SUCCESS) {
    failed = "cuLinkComplete";
    r = DRVSHIM_CU(core, cuLinkComplete, state, &cubin, &size);
  }
  LinkedImage out;
  out.log = jit.take();
  if (r != CUDA_SUCCESS) {
    raise_load(core, static_cast<int>(r), failed, ModuleFormat::ptx, ptx.size(),
               fmt::format("\"{}\" for device {}", name, context.device().ordinal()), out.log.error);
  }
  const auto* bytes = static_cast<const std::byte*>(cubin);
  out.cubin.assign(bytes, bytes + size);
  trace::mark("link-ptx", fmt::format("\"{}\": {} bytes of PTX -> {} bytes of SASS, JIT {:.3f} ms", name, ptx.size(),
                                      size, static_cast<double>(out.log.wall_ms)));
  return out;
}

// ---- Library ----------------------------------------------------------------------------------------

Library::Library(std::shared_ptr<detail::DriverCore> core, std::uintptr_t handle, ModuleFormat format, JitLog log) noexcept
    : core_(std::move(core)), handle_(handle), format_(format), log_(std::move(log)) {}

Library Library::load(const Driver& driver, std::span<const std::byte> image) {
  const auto& core = *driver.core();
  core.require_init("Library::load");
  core.require_function(detail::Api::k_cuLibraryLoadData, "Library::load");
  const ModuleFormat format = detect_module_format(image);
  std::string ptx_copy;
  const void* data = image_data(image, format, ptx_copy);
  JitCapture jit;
  CUlibrary library = nullptr;
  const CUresult r =
      DRVSHIM_CU(core, cuLibraryLoadData, &library, data, jit.options, jit.values, 6u, nullptr, nullptr, 0u);
  JitLog log = jit.take();
  if (r != CUDA_SUCCESS) {
    raise_load(core, static_cast<int>(r), "cuLibraryLoadData", format, image.size(), "context-independent", log.error);
  }
  trace::mark("load-library", fmt::format("{} image, {} bytes, library 0x{:x}", to_string(format), image.size(),
                                          reinterpret_cast<std::uintptr_t>(library)));
  return Library(driver.core(), reinterpret_cast<std::uintptr_t>(library), format, std::move(log));
}

Library Library::load_file(const Driver& driver, const std::string& path) {
  const std::vector<char> bytes = read_file("Library::load_file", path);
  return load(driver, std::as_bytes(std::span<const char>(bytes)));
}

Library::Library(Library&& o) noexcept
    : core_(o.core_), handle_(std::exchange(o.handle_, 0)), format_(o.format_), log_(std::move(o.log_)) {}

Library& Library::operator=(Library&& o) noexcept {
  if (this != &o) {
    (void)unload(std::nothrow);
    core_ = o.core_;
    handle_ = std::exchange(o.handle_, 0);
    format_ = o.format_;
    log_ = std::move(o.log_);
  }
  return *this;
}

Library::~Library() { (void)unload(std::nothrow); }

Kernel Library::kernel(const ContextRef& context, const std::string& name) const {
  if (handle_ == 0) throw InvalidArgumentError("Library::kernel", "this Library is empty (moved from or unloaded)");
  const auto& core = core_of(context);
  CUfunction f = nullptr;
  {
    detail::ContextScope scope(core, context.address(), "Library::kernel");
    CUkernel k = nullptr;
    const CUresult r = DRVSHIM_CU(core, cuLibraryGetKernel, &k, reinterpret_cast<CUlibrary>(handle_), name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) {
      throw InvalidArgumentError("cuLibraryGetKernel", fmt::format("the library has no kernel named \"{}\"", name),
                                 "C++ kernels have mangled names unless declared extern \"C\"");
    }
    if (r != CUDA_SUCCESS) detail::raise(core, static_cast<int>(r), "cuLibraryGetKernel", fmt::format("kernel \"{}\"", name));
    DRVSHIM_TRY(core, cuKernelGetFunction, fmt::format("kernel \"{}\" in context 0x{:x}", name, context.address()), &f, k);
  }
  return make_kernel(context, f, name);
}

void Library::unload() {
  const Status s = unload(std::nothrow);
  if (!s.ok()) detail::raise(*core_, s.code(), s.api(), "library");
}

Status Library::unload(std::nothrow_t) noexcept {
  if (handle_ == 0) return {};
  const auto handle = std::exchange(handle_, 0);
  if (!core_->cleanup_allowed()) return {};
  const CUresult r = DRVSHIM_CU(*core_, cuLibraryUnload, reinterpret_cast<CUlibrary>(handle));
  core_->note_result(r);
  return Status("cuLibraryUnload", static_cast<int>(r));
}

Module::Module(Module&& o) noexcept : context_(o.context_), state_(std::move(o.state_)) {}

Module& Module::operator=(Module&& o) noexcept {
  if (this != &o) {
    (void)unload(std::nothrow);
    context_ = o.context_;
    state_ = std::move(o.state_);
  }
  return *this;
}

Module::~Module() { (void)unload(std::nothrow); }

Module::operator bool() const noexcept { return state_ != nullptr; }
ModuleFormat Module::format() const noexcept { return state_->format; }
const JitLog& Module::jit_log() const noexcept { return state_->log; }

std::vector<std::string> Module::kernel_names() const {
  const auto& core = core_of(context_);
  std::vector<std::string> names;
  if (!core.has(detail::Api::k_cuModuleGetFunctionCount) || !core.has(detail::Api::k_cuModuleEnumerateFunctions) ||
      !core.has(detail::Api::k_cuFuncGetName)) {
    return names;
  }
  detail::ContextScope scope(core, context_.address(), "Module::kernel_names");
  unsigned count = 0;
  DRVSHIM_TRY(core, cuModuleGetFunctionCount, std::string("module"), &count, mod(state_->handle));
  std::vector<CUfunction> functions(count);
  if (count != 0) {
    DRVSHIM_TRY(core, cuModuleEnumerateFunctions, std::string("module"), functions.data(), count, mod(state_->handle));
  }
  for (CUfunction f : functions) {
    const char* name = nullptr;
    DRVSHIM_TRY(core, cuFuncGetName, std::string("module function"), &name, f);
    if (name != nullptr) names.emplace_back(name);
  }
  return names;
}

Kernel Module::kernel(const std::string& name) const {
  if (!state_) throw InvalidArgumentError("Module::kernel", "this Module is empty (moved from or unloaded)");
  const auto& core = core_of(context_);
  CUfunction f = nullptr;
  {
    detail::ContextScope scope(core, context_.address(), "Module::kernel");
    const CUresult r = DRVSHIM_CU(core, cuModuleGetFunction, &f, mod(state_->handle), name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) {
      const auto names = kernel_names();
      std::string list;
      for (const auto& n : names) list += (list.empty() ? "" : ", ") + n;
      throw InvalidArgumentError(
          "cuModuleGetFunction", fmt::format("the module has no kernel named \"{}\"", name),
          names.empty() ? "the driver cannot list the module's kernels; check the name (C++ kernels have mangled "
                          "names unless declared extern \"C\")"
                        : fmt::format("its kernels are: {} (C++ kernels have mangled names unless declared extern \"C\")", list));
    }
    if (r != CUDA_SUCCESS) detail::raise(core, static_cast<int>(r), "cuModuleGetFunction", fmt::format("kernel \"{}\"", name));
  }
  return make_kernel(context_, f, name);
}

Kernel make_kernel(const ContextRef& context, CUfunction f, const std::string& name) {
  const auto& core = core_of(context);
  auto state = std::make_shared<detail::KernelState>();
  state->function = reinterpret_cast<std::uintptr_t>(f);
  state->name = name;
  Kernel k(context, state);
  state->max_threads = function_attribute(k, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max threads per block");
  if (core.has(detail::Api::k_cuFuncGetParamInfo)) {
    detail::ContextScope scope(core, context.address(), "kernel parameter layout");
    std::vector<ParamInfo> params;
    for (std::size_t i = 0;; ++i) {
      ParamInfo p;
      const CUresult r = DRVSHIM_CU(core, cuFuncGetParamInfo, f, i, &p.offset, &p.size);
      if (r == CUDA_ERROR_INVALID_VALUE) break;  // past the last parameter
      if (r != CUDA_SUCCESS) {
        detail::raise(core, static_cast<int>(r), "cuFuncGetParamInfo", fmt::format("kernel {}, parameter {}", name, i));
      }
      params.push_back(p);
    }
    state->params = std::move(params);
  }
  return k;
}

std::pair<DevicePtr, std::size_t> Module::global_bytes(const std::string& name) const {
  const auto& core = core_of(context_);
  detail::ContextScope scope(core, context_.address(), "Module::global");
  CUdeviceptr address = 0;
  std::size_t bytes = 0;
  DRVSHIM_TRY(core, cuModuleGetGlobal, fmt::format("global \"{}\"", name), &address, &bytes, mod(state_->handle),
              name.c_str());
  return {address, bytes};
}

void Module::throw_global_size(const std::string& name, std::size_t bytes, std::size_t element) {
  throw InvalidArgumentError("Module::global",
                             fmt::format("global \"{}\" has {} bytes, not a multiple of the element size {}", name,
                                         bytes, element));
}

void Module::unload() {
  const Status s = unload(std::nothrow);
  if (!s.ok()) detail::raise(core_of(context_), s.code(), s.api(), "module");
}

Status Module::unload(std::nothrow_t) noexcept {
  if (!state_) return {};
  const auto handle = state_->handle;
  state_.reset();
  const auto& core = core_of(context_);
  if (!core.cleanup_allowed_in(context_.address())) return {};
  try {
    detail::ContextScope scope(core, context_.address(), "Module::unload");
    const CUresult r = DRVSHIM_CU(core, cuModuleUnload, mod(handle));
    core.note_result(r);
    return Status("cuModuleUnload", static_cast<int>(r));
  } catch (const Error& e) {
    return Status("cuCtxPushCurrent", e.code() != 0 ? e.code() : CUDA_ERROR_UNKNOWN);
  }
}

// ---- launch ------------------------------------------------------------------------------------------

namespace detail {

void check_launch_args(const Kernel& kernel, std::span<const std::size_t> sizes) {
  const auto& params = kernel.params();
  if (!params) return;  // layout unknown to this driver: nothing to check against
  if (params->size() != sizes.size()) {
    throw InvalidArgumentError("launch", fmt::format("kernel {} takes {} argument(s), {} given", kernel.name(),
                                                     params->size(), sizes.size()));
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if ((*params)[i].size != sizes[i]) {
      throw InvalidArgumentError("launch",
                                 fmt::format("kernel {}: argument {} has {} bytes, the kernel expects {} bytes",
                                             kernel.name(), i, sizes[i], (*params)[i].size),
                                 "pass the type the kernel declares (device buffers as their DevicePtr address)");
    }
  }
}

}  // namespace detail

void launch_raw(const Kernel& kernel, const LaunchConfig& config, void** args) {
  const auto threads = config.block.count();
  if (threads == 0 || config.grid.count() == 0) {
    throw InvalidArgumentError("launch", fmt::format("kernel {}: empty grid or block", kernel.name()));
  }
  if (threads > static_cast<std::uint64_t>(kernel.max_threads_per_block())) {
    throw InvalidArgumentError("launch",
                               fmt::format("kernel {}: a block of {} threads ({}x{}x{}) exceeds the kernel's limit of {}",
                                           kernel.name(), threads, config.block.x, config.block.y, config.block.z,
                                           kernel.max_threads_per_block()),
                               "use smaller blocks (the limit depends on the kernel's register use)");
  }
  const ContextRef& ctx = kernel.context();
  const auto& core = core_of(ctx);
  if (config.stream && config.stream->context().address() != ctx.address()) [[unlikely]] {
    // A kernel belongs to its module's context (one device); the driver would
    // answer only CUDA_ERROR_INVALID_HANDLE.
    throw InvalidArgumentError(
        "launch",
        fmt::format("kernel {} belongs to context 0x{:x} on device {}; {} belongs to context 0x{:x} on device {}",
                    kernel.name(), ctx.address(), ctx.device().ordinal(), config.stream->name(),
                    config.stream->context().address(), config.stream->context().device().ordinal()),
        "launch on a stream of the kernel's context: load the module in each device's context (or take the kernel "
        "for that context from a Library: Library::kernel(context, name))");
  }
  // No StreamRef copy on the hot path: the handle is all the launch needs.
  const auto cu_stream = config.stream ? reinterpret_cast<CUstream>(config.stream->native()) : CU_STREAM_LEGACY;
  detail::ContextScope scope(core, ctx.address(), "launch");
  const auto objects = [&] {
    return fmt::format("kernel {}, grid {}x{}x{}, block {}x{}x{}, {} shared bytes, {}", kernel.name(), config.grid.x,
                       config.grid.y, config.grid.z, config.block.x, config.block.y, config.block.z,
                       config.shared_bytes,
                       config.stream ? config.stream->name() : StreamRef::legacy_default(ctx).name());
  };
  if (config.cluster) {
    core.require_function(detail::Api::k_cuLaunchKernelEx, "launch with cluster dimensions");
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = config.cluster->x;
    attr.value.clusterDim.y = config.cluster->y;
    attr.value.clusterDim.z = config.cluster->z;
    CUlaunchConfig lc{};
    lc.gridDimX = config.grid.x;
    lc.gridDimY = config.grid.y;
    lc.gridDimZ = config.grid.z;
    lc.blockDimX = config.block.x;
    lc.blockDimY = config.block.y;
    lc.blockDimZ = config.block.z;
    lc.sharedMemBytes = config.shared_bytes;
    lc.hStream = cu_stream;
    lc.attrs = &attr;
    lc.numAttrs = 1;
    DRVSHIM_TRY(core, cuLaunchKernelEx, objects(), &lc, fn(kernel), args, nullptr);
  } else {
    DRVSHIM_TRY(core, cuLaunchKernel, objects(), fn(kernel), config.grid.x, config.grid.y, config.grid.z,
                config.block.x, config.block.y, config.block.z, config.shared_bytes, cu_stream, args, nullptr);
  }
  detail::after_submit(core, cu_stream, "launch", objects);
}

}  // namespace drvshim
