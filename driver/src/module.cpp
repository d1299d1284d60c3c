#include <drvshim/driver.hpp>
#include <drvshim/module.hpp>

#include <cerrno>
#include <cstring>
#include <memory>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "context_scope.hpp"
#include "core.hpp"
#include "core_of.hpp"
#include "jit_capture.hpp"
#include "log_internal.hpp"
#include "trace_internal.hpp"
#include "view_checks.hpp"

namespace drvshim {
namespace {

using detail::core_of;
CUfunction fn(const Kernel& k) noexcept { return reinterpret_cast<CUfunction>(k.native()); }
CUmodule mod(std::uintptr_t h) noexcept { return reinterpret_cast<CUmodule>(h); }

constexpr std::uint32_t kFatbinMagic = 0xBA55ED50u;

// The most parameter bytes a kernel can take (CUDA 12.1+ on Volta and newer;
// 4 KiB before): a layout the driver reports beyond it is not believed, and
// the probe of parameters stops there whatever the driver answers.
constexpr std::size_t kMaxParamBytes = 32764;

}  // namespace

namespace detail {

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

  Status unload() noexcept {
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

  Status unload() noexcept {
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
};

struct KernelState {
  std::uintptr_t function = 0;
  std::string name;
  std::optional<std::vector<ParamInfo>> params;  // read once, at lookup
  int max_threads = 0;                           // read once, at lookup
  std::shared_ptr<const void> code;              // the ModuleState or LibraryState: kept loaded
};

}  // namespace detail

namespace {

int function_attribute(const Kernel& k, CUfunction_attribute attribute, const char* what) {
  const auto& core = core_of(k.context());
  detail::ContextScope scope(core, k.context().address(), "Kernel attribute");
  int value = 0;
  DRVSHIM_TRY(core, cuFuncGetAttribute, fmt::format("kernel {}, attribute {}", k.name(), what), &value, attribute, fn(k));
  return value;
}

// The format of `image`, or InvalidArgumentError from `api` describing it as `what`.
ModuleFormat detect_format(std::span<const std::byte> image, const char* api, const std::string& what) {
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
  throw InvalidArgumentError(api, fmt::format("{} is neither a CUBIN (ELF), a fatbin nor PTX text", what),
                             "load what nvcc -cubin, -fatbin or -ptx (or NVRTC) produced");
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
  return detect_format(image, "detect_module_format", fmt::format("the {}-byte image", image.size()));
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

int Kernel::max_active_blocks_per_sm(unsigned block_threads, std::size_t dynamic_shared_bytes, unsigned flags) const {
  const auto& core = core_of(context_);
  core.require_function(detail::Api::k_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
                        "Kernel::max_active_blocks_per_sm with flags");
  detail::ContextScope scope(core, context_.address(), "Kernel::max_active_blocks_per_sm");
  int blocks = 0;
  DRVSHIM_TRY(core, cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
              fmt::format("kernel {}, {} threads, {} dynamic shared bytes, flags {}", name(), block_threads,
                          dynamic_shared_bytes, flags),
              &blocks, fn(*this), static_cast<int>(block_threads), dynamic_shared_bytes, flags);
  return blocks;
}

std::size_t Kernel::available_dynamic_shared_bytes(int blocks_per_sm, unsigned block_threads) const {
  const auto& core = core_of(context_);
  core.require_function(detail::Api::k_cuOccupancyAvailableDynamicSMemPerBlock, "Kernel::available_dynamic_shared_bytes");
  detail::ContextScope scope(core, context_.address(), "Kernel::available_dynamic_shared_bytes");
  std::size_t bytes = 0;
  DRVSHIM_TRY(core, cuOccupancyAvailableDynamicSMemPerBlock,
              fmt::format("kernel {}, {} blocks of {} threads per SM", name(), blocks_per_sm, block_threads), &bytes,
              fn(*this), blocks_per_sm, static_cast<int>(block_threads));
  return bytes;
}

namespace {
// The public enum mirrors cuda.h.
static_assert(static_cast<int>(FunctionAttribute::max_dynamic_shared_size_bytes) ==
              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
static_assert(static_cast<int>(FunctionAttribute::non_portable_cluster_size_allowed) ==
              CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED);
static_assert(static_cast<int>(FunctionAttribute::cluster_scheduling_policy_preference) + 1 == CU_FUNC_ATTRIBUTE_MAX);
static_assert(static_cast<int>(CachePreference::equal) == CU_FUNC_CACHE_PREFER_EQUAL);
}  // namespace

int Kernel::attribute(FunctionAttribute attribute) const {
  return function_attribute(*this, static_cast<CUfunction_attribute>(attribute), "by number");
}

void Kernel::set_attribute(FunctionAttribute attribute, int value) const {
  const auto& core = core_of(context_);
  core.require_function(detail::Api::k_cuFuncSetAttribute, "Kernel::set_attribute");
  detail::ContextScope scope(core, context_.address(), "Kernel::set_attribute");
  DRVSHIM_TRY(core, cuFuncSetAttribute,
              fmt::format("kernel {}, attribute {}, value {}", name(), static_cast<int>(attribute), value), fn(*this),
              static_cast<CUfunction_attribute>(attribute), value);
}

void Kernel::set_cache_preference(CachePreference preference) const {
  const auto& core = core_of(context_);
  core.require_function(detail::Api::k_cuFuncSetCacheConfig, "Kernel::set_cache_preference");
  detail::ContextScope scope(core, context_.address(), "Kernel::set_cache_preference");
  DRVSHIM_TRY(core, cuFuncSetCacheConfig, fmt::format("kernel {}, preference {}", name(), static_cast<int>(preference)),
              fn(*this), static_cast<CUfunc_cache>(preference));
}

namespace {

// Logs why a kernel's launches go unchecked; the layout is then unknown.
std::nullopt_t unchecked(const std::string& name, const std::string& why) {
  detail::logf(log::Level::debug, "kernel {}: parameter layout unknown ({}); its launches are not checked", name, why);
  return std::nullopt;
}

// The parameter layout through cuFuncGetParamInfo, in the kernel's context
// (made current by the caller). Whatever the driver cannot tell, or tells
// implausibly, makes the layout unknown: the kernel stays usable, its launches
// unchecked. Only errors that make every call fail (sticky ones, a
// deinitialised driver) are raised.
std::optional<std::vector<ParamInfo>> read_param_layout(const detail::DriverCore& core, CUfunction f,
                                                        const std::string& name) {
  if (!core.has(detail::Api::k_cuFuncGetParamInfo)) {
    return unchecked(name, fmt::format("driver {}.{} lacks cuFuncGetParamInfo (CUDA 12.4)", core.version / 1000,
                                       (core.version % 1000) / 10));
  }
  std::vector<ParamInfo> params;
  std::size_t end = 0;
  // Every parameter takes at least a byte: no kernel has more parameters than bytes.
  for (std::size_t i = 0; i <= kMaxParamBytes; ++i) {
    ParamInfo p;
    const CUresult r = DRVSHIM_CU(core, cuFuncGetParamInfo, f, i, &p.offset, &p.size);
    if (r == CUDA_ERROR_INVALID_VALUE) {
      if (i == 0) {
        return unchecked(name,
                         "cuFuncGetParamInfo answers CUDA_ERROR_INVALID_VALUE for parameter 0: the kernel takes no "
                         "parameters, or the driver does not know its layout");
      }
      return params;  // past the last parameter
    }
    if (r != CUDA_SUCCESS) {
      if (is_sticky_error(static_cast<int>(r)) || r == CUDA_ERROR_DEINITIALIZED) {
        detail::raise(core, static_cast<int>(r), "cuFuncGetParamInfo", fmt::format("kernel {}, parameter {}", name, i));
      }
      return unchecked(name, fmt::format("cuFuncGetParamInfo failed for parameter {} with {} ({})", i,
                                         result_name(static_cast<int>(r)), static_cast<int>(r)));
    }
    if (p.size == 0 || p.offset < end || p.size > kMaxParamBytes || p.offset > kMaxParamBytes - p.size) {
      return unchecked(name, fmt::format("the driver reports parameter {} at offset {} with {} bytes, after {} bytes "
                                         "of earlier parameters, within at most {}",
                                         i, p.offset, p.size, end, kMaxParamBytes));
    }
    end = p.offset + p.size;
    params.push_back(p);
  }
  return unchecked(name, fmt::format("the driver reports more than {} parameters", kMaxParamBytes));
}

// A Kernel for function `f` of `context`: reads the block limit and the
// parameter layout once, and keeps `code` (the module or library) loaded.
Kernel make_kernel(const ContextRef& context, CUfunction f, const std::string& name, std::shared_ptr<const void> code) {
  const auto& core = core_of(context);
  auto state = std::make_shared<detail::KernelState>();
  state->function = reinterpret_cast<std::uintptr_t>(f);
  state->name = name;
  state->code = std::move(code);
  Kernel k(context, state);
  state->max_threads = function_attribute(k, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max threads per block");
  detail::ContextScope scope(core, context.address(), "kernel parameter layout");
  state->params = read_param_layout(core, f, name);
  return k;
}

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

// The whole file at `path`. The errors name the path and keep the errno.
std::vector<char> read_file(const char* api, const std::string& path) {
  const char* hint = "check the path; modules are CUBIN, fatbin or PTX files";
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw SystemError(api, fmt::format("cannot open \"{}\"", path), errno, hint);
  struct Close {
    int fd;
    ~Close() { (void)::close(fd); }
  } close_fd{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) throw SystemError(api, fmt::format("cannot inspect \"{}\"", path), errno, hint);
  if (S_ISDIR(st.st_mode)) {
    throw SystemError(api, fmt::format("\"{}\" is a directory, not a module file", path), EISDIR, hint);
  }
  std::vector<char> bytes;
  if (S_ISREG(st.st_mode) && st.st_size > 0) bytes.reserve(static_cast<std::size_t>(st.st_size));
  char chunk[65536];
  for (;;) {
    const ssize_t n = ::read(fd, chunk, sizeof chunk);
    if (n == 0) break;
    if (n < 0) {
      if (errno == EINTR) continue;
      throw SystemError(api, fmt::format("cannot read \"{}\"", path), errno, hint);
    }
    bytes.insert(bytes.end(), chunk, chunk + n);
  }
  // The content, checked here so the error names the file.
  (void)detect_format(std::as_bytes(std::span<const char>(bytes)), api,
                      fmt::format("\"{}\" ({} bytes)", path, bytes.size()));
  return bytes;
}

// One run of the driver's linker over PTX (context current): the result, the
// call that failed and the JIT's logs. Destroys the link state on every path.
struct LinkRun {
  CUresult result = CUDA_SUCCESS;
  const char* failed = "";
  LinkedImage image;
};

LinkRun run_linker(const detail::DriverCore& core, std::span<const std::byte> ptx, const std::string& name,
                   const std::string& objects) {
  std::string ptx_copy;
  const void* data = image_data(ptx, ModuleFormat::ptx, ptx_copy);
  // The linker writes its outputs (wall time, log sizes) into the option values at cuLinkComplete.
  detail::JitCapture jit(detail::jit_log_bytes(ptx, ModuleFormat::ptx));
  CUlinkState state = nullptr;
  DRVSHIM_TRY(core, cuLinkCreate, objects, detail::JitCapture::kCount, jit.options, jit.values, &state);
  // The linker owns the CUBIN cuLinkComplete hands out: it is copied before cuLinkDestroy.
  struct Destroy {
    const detail::DriverCore& core;
    CUlinkState state;
    ~Destroy() {
      if (core.cleanup_allowed()) (void)DRVSHIM_CU(core, cuLinkDestroy, state);
    }
  } destroy{core, state};
  LinkRun run;
  run.failed = "cuLinkAddData";
  run.result = DRVSHIM_CU(core, cuLinkAddData, state, CU_JIT_INPUT_PTX, const_cast<void*>(data),
                          ptx_copy.empty() ? ptx.size() : ptx_copy.size() + 1, name.c_str(), 0u, nullptr, nullptr);
  void* cubin = nullptr;
  std::size_t size = 0;
  if (run.result == CUDA_SUCCESS) {
    run.failed = "cuLinkComplete";
    run.result = DRVSHIM_CU(core, cuLinkComplete, state, &cubin, &size);
  }
  run.image.log = jit.take();
  if (run.result == CUDA_SUCCESS) {
    const auto* bytes = static_cast<const std::byte*>(cubin);
    run.image.cubin.assign(bytes, bytes + size);
  }
  return run;
}

}  // namespace

// ---- Module ------------------------------------------------------------------------------------

Module::Module(ContextRef context, std::shared_ptr<detail::ModuleState> state) noexcept
    : context_(std::move(context)), state_(std::move(state)) {}

Module Module::load(const ContextRef& context, std::span<const std::byte> image) {
  const ModuleFormat format = detect_module_format(image);
  std::string ptx_copy;
  const void* data = image_data(image, format, ptx_copy);
  const auto& core = core_of(context);
  detail::ContextScope scope(core, context.address(), "Module::load");
  detail::JitCapture jit(detail::jit_log_bytes(image, format));
  CUmodule module = nullptr;
  const CUresult r =
      DRVSHIM_CU(core, cuModuleLoadDataEx, &module, data, detail::JitCapture::kCount, jit.options, jit.values);
  JitLog log = jit.take();
  if (r != CUDA_SUCCESS) {
    raise_load(core, static_cast<int>(r), "cuModuleLoadDataEx", format, image.size(),
               fmt::format("device {}", context.device().ordinal()), log.error);
  }
  const float wall = log.wall_ms;
  auto state = std::make_shared<detail::ModuleState>(context, reinterpret_cast<std::uintptr_t>(module), format,
                                                     std::move(log));
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
  const auto& core = core_of(context);
  detail::ContextScope scope(core, context.address(), "link_ptx");
  LinkRun run = run_linker(core, ptx, name, fmt::format("linking \"{}\" on device {}", name, context.device().ordinal()));
  if (run.result != CUDA_SUCCESS) {
    raise_load(core, static_cast<int>(run.result), run.failed, ModuleFormat::ptx, ptx.size(),
               fmt::format("\"{}\" for device {}", name, context.device().ordinal()), run.image.log.error);
  }
  trace::mark("link-ptx", fmt::format("\"{}\": {} bytes of PTX -> {} bytes of SASS, JIT {:.3f} ms", name, ptx.size(),
                                      run.image.cubin.size(), static_cast<double>(run.image.log.wall_ms)));
  return std::move(run.image);
}

// ---- Library ----------------------------------------------------------------------------------------

Library::Library(std::shared_ptr<detail::LibraryState> state) noexcept : state_(std::move(state)) {}

Library Library::load(const Driver& driver, std::span<const std::byte> image) {
  const auto& core = *driver.core();
  core.require_init("Library::load");
  core.require_function(detail::Api::k_cuLibraryLoadData, "Library::load");
  const ModuleFormat format = detect_module_format(image);
  std::string ptx_copy;
  const void* data = image_data(image, format, ptx_copy);
  auto state = std::make_shared<detail::LibraryState>();
  state->core = driver.core();
  state->format = format;
  state->jit = std::make_unique<detail::JitCapture>(detail::jit_log_bytes(image, format));
  auto& jit = *state->jit;
  CUlibrary library = nullptr;
  const CUresult r = DRVSHIM_CU(core, cuLibraryLoadData, &library, data, jit.options, jit.values,
                                detail::JitCapture::kCount, nullptr, nullptr, 0u);
  state->log = jit.take();
  if (r != CUDA_SUCCESS) {
    raise_load(core, static_cast<int>(r), "cuLibraryLoadData", format, image.size(), "context-independent",
               state->log.error);
  }
  state->handle = reinterpret_cast<std::uintptr_t>(library);
  if (format == ModuleFormat::ptx) {
    state->ptx = ptx_copy.empty() ? std::string(reinterpret_cast<const char*>(image.data()), image.size())
                                  : std::move(ptx_copy);
  }
  trace::mark("load-library", fmt::format("{} image, {} bytes, library 0x{:x}", to_string(format), image.size(),
                                          state->handle));
  return Library(std::move(state));
}

Library Library::load_file(const Driver& driver, const std::string& path) {
  const std::vector<char> bytes = read_file("Library::load_file", path);
  return load(driver, std::as_bytes(std::span<const char>(bytes)));
}

Library::Library(Library&& o) noexcept : state_(std::move(o.state_)) {}

Library& Library::operator=(Library&& o) noexcept {
  if (this != &o) {
    (void)unload(std::nothrow);
    state_ = std::move(o.state_);
  }
  return *this;
}

Library::~Library() { (void)unload(std::nothrow); }

ModuleFormat Library::format() const noexcept { return state_->format; }
const JitLog& Library::jit_log() const noexcept { return state_->log; }

namespace {

bool is_jit_failure(CUresult r) noexcept {
  switch (r) {
    case CUDA_ERROR_INVALID_PTX:
    case CUDA_ERROR_UNSUPPORTED_PTX_VERSION:
    case CUDA_ERROR_JIT_COMPILER_NOT_FOUND:
    case CUDA_ERROR_JIT_COMPILATION_DISABLED:
    case CUDA_ERROR_INVALID_IMAGE:
    case CUDA_ERROR_NO_BINARY_FOR_GPU:
      return true;
    default:
      return false;
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
      const LinkRun again = run_linker(core, ptx, name, "recovering the JIT log of a library");
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
  if (!state_) throw InvalidArgumentError("Library::kernel", "this Library is empty (moved from or unloaded)");
  const auto& core = core_of(context);
  CUfunction f = nullptr;
  {
    detail::ContextScope scope(core, context.address(), "Library::kernel");
    CUkernel k = nullptr;
    CUresult r = DRVSHIM_CU(core, cuLibraryGetKernel, &k, reinterpret_cast<CUlibrary>(state_->handle), name.c_str());
    if (r == CUDA_ERROR_NOT_FOUND) {
      throw InvalidArgumentError("cuLibraryGetKernel", fmt::format("the library has no kernel named \"{}\"", name),
                                 "C++ kernels have mangled names unless declared extern \"C\"");
    }
    if (r != CUDA_SUCCESS) raise_kernel_binding(core, r, "cuLibraryGetKernel", *state_, context, name);
    r = DRVSHIM_CU(core, cuKernelGetFunction, &f, k);
    if (r != CUDA_SUCCESS) raise_kernel_binding(core, r, "cuKernelGetFunction", *state_, context, name);
  }
  return make_kernel(context, f, name, state_);
}

void Library::set_kernel_attribute(const std::string& name, FunctionAttribute attribute, int value,
                                   const Device& device) const {
  if (!state_) throw InvalidArgumentError("Library::set_kernel_attribute", "this Library is empty (moved from or unloaded)");
  state_->core->require_function(detail::Api::k_cuKernelSetAttribute, "Library::set_kernel_attribute");
  CUkernel k = nullptr;
  const CUresult r = DRVSHIM_CU(*state_->core, cuLibraryGetKernel, &k, reinterpret_cast<CUlibrary>(state_->handle), name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND) {
    throw InvalidArgumentError("cuLibraryGetKernel", fmt::format("the library has no kernel named \"{}\"", name));
  }
  if (r != CUDA_SUCCESS) detail::raise(*state_->core, static_cast<int>(r), "cuLibraryGetKernel", fmt::format("kernel \"{}\"", name));
  DRVSHIM_TRY(*state_->core, cuKernelSetAttribute,
              fmt::format("kernel \"{}\", attribute {}, value {}, device {}", name, static_cast<int>(attribute), value,
                          device.ordinal()),
              static_cast<CUfunction_attribute>(attribute), value, k, static_cast<CUdevice>(device.native()));
}

std::pair<DevicePtr, std::size_t> Library::global_bytes(const ContextRef& context, const std::string& name) const {
  if (!state_) throw InvalidArgumentError("Library::global", "this Library is empty (moved from or unloaded)");
  state_->core->require_function(detail::Api::k_cuLibraryGetGlobal, "Library::global");
  detail::ContextScope scope(*state_->core, context.address(), "Library::global");
  CUdeviceptr address = 0;
  std::size_t bytes = 0;
  const CUresult r =
      DRVSHIM_CU(*state_->core, cuLibraryGetGlobal, &address, &bytes, reinterpret_cast<CUlibrary>(state_->handle), name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND) {
    throw InvalidArgumentError("cuLibraryGetGlobal", fmt::format("the library has no variable named \"{}\"", name),
                               "C++ variables inside a namespace have mangled names");
  }
  if (r != CUDA_SUCCESS) {
    detail::raise(*state_->core, static_cast<int>(r), "cuLibraryGetGlobal",
                  fmt::format("variable \"{}\" in context 0x{:x}", name, context.address()));
  }
  return {address, bytes};
}

void Library::throw_global_size(const std::string& name, std::size_t bytes, std::size_t element) {
  throw InvalidArgumentError("Library::global",
                             fmt::format("variable \"{}\" has {} bytes, not a multiple of the element size {}", name,
                                         bytes, element));
}

Library::ManagedVariable Library::managed(const ContextRef& context, const std::string& name) const {
  if (!state_) throw InvalidArgumentError("Library::managed", "this Library is empty (moved from or unloaded)");
  state_->core->require_function(detail::Api::k_cuLibraryGetManaged, "Library::managed");
  state_->core->require_function(detail::Api::k_cuLibraryGetModule, "Library::managed");
  {
    detail::ContextScope scope(*state_->core, context.address(), "Library::managed");
    CUmodule module = nullptr;
    DRVSHIM_TRY(*state_->core, cuLibraryGetModule, fmt::format("loading the library into context 0x{:x}", context.address()),
                &module, reinterpret_cast<CUlibrary>(state_->handle));
  }
  CUdeviceptr address = 0;
  std::size_t bytes = 0;
  const CUresult r =
      DRVSHIM_CU(*state_->core, cuLibraryGetManaged, &address, &bytes, reinterpret_cast<CUlibrary>(state_->handle), name.c_str());
  if (r == CUDA_ERROR_NOT_FOUND) {
    throw InvalidArgumentError("cuLibraryGetManaged",
                               fmt::format("the library has no managed variable named \"{}\"", name));
  }
  if (r != CUDA_SUCCESS) {
    detail::raise(*state_->core, static_cast<int>(r), "cuLibraryGetManaged", fmt::format("variable \"{}\"", name));
  }
  return ManagedVariable{address, bytes};
}

void Library::unload() {
  const auto core = state_ ? state_->core : nullptr;
  const Status s = unload(std::nothrow);
  if (!s.ok()) detail::raise(*core, s.code(), s.api(), "library");
}

Status Library::unload(std::nothrow_t) noexcept {
  if (!state_) return {};
  const auto state = std::move(state_);
  if (state.use_count() > 1) {
    detail::logf(log::Level::debug, "library 0x{:x} stays loaded until the last of its {} Kernel(s) is destroyed",
                 state->handle, state.use_count() - 1);
    return {};
  }
  return state->unload();
}

// ---- Module (owner) ------------------------------------------------------------------------------

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
std::uint64_t Module::globals_owner_id() const noexcept { return state_ ? state_->globals_id : 0; }

std::vector<std::string> Module::kernel_names() const {
  if (!state_) throw InvalidArgumentError("Module::kernel_names", "this Module is empty (moved from or unloaded)");
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
  return make_kernel(context_, f, name, state_);
}

std::pair<DevicePtr, std::size_t> Module::global_bytes(const std::string& name) const {
  if (!state_) throw InvalidArgumentError("Module::global", "this Module is empty (moved from or unloaded)");
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
  const auto state = std::move(state_);
  if (state.use_count() > 1) {
    detail::logf(log::Level::debug, "module 0x{:x} stays loaded until the last of its {} Kernel(s) is destroyed",
                 state->handle, state.use_count() - 1);
    return {};
  }
  return state->unload();
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

namespace {

[[noreturn]] void throw_empty_dimension(const Kernel& kernel, const char* which, const char* axis, const Dim3& d) {
  throw InvalidArgumentError("launch",
                             fmt::format("kernel {}: the {}'s {} dimension is 0 ({} {}x{}x{})", kernel.name(), which,
                                         axis, which, d.x, d.y, d.z),
                             "every grid and block dimension must be at least 1 (Dim3's default)");
}

void check_dimensions(const Kernel& kernel, const char* which, const Dim3& d) {
  if (d.x == 0) throw_empty_dimension(kernel, which, "x", d);
  if (d.y == 0) throw_empty_dimension(kernel, which, "y", d);
  if (d.z == 0) throw_empty_dimension(kernel, which, "z", d);
}

}  // namespace

void launch_raw(const Kernel& kernel, const LaunchConfig& config, void** args) {
  const auto threads = config.block.count();
  if (threads == 0 || config.grid.count() == 0) [[unlikely]] {
    check_dimensions(kernel, "grid", config.grid);
    check_dimensions(kernel, "block", config.block);
  }
  if (threads > static_cast<std::uint64_t>(kernel.max_threads_per_block())) {
    throw InvalidArgumentError("launch",
                               fmt::format("kernel {}: a block of {} threads ({}x{}x{}) exceeds the kernel's limit of {}",
                                           kernel.name(), threads, config.block.x, config.block.y, config.block.z,
                                           kernel.max_threads_per_block()),
                               "use smaller blocks (the limit depends on the kernel's register use)");
  }
  if (config.stream) detail::check_stream_view(*config.stream, "launch");
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
    CUlaunchAttribute attrs[2]{};
    attrs[0].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attrs[0].value.clusterDim.x = config.cluster->x;
    attrs[0].value.clusterDim.y = config.cluster->y;
    attrs[0].value.clusterDim.z = config.cluster->z;
    attrs[1].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
    attrs[1].value.cooperative = 1;
    CUlaunchConfig lc{};
    lc.gridDimX = config.grid.x;
    lc.gridDimY = config.grid.y;
    lc.gridDimZ = config.grid.z;
    lc.blockDimX = config.block.x;
    lc.blockDimY = config.block.y;
    lc.blockDimZ = config.block.z;
    lc.sharedMemBytes = config.shared_bytes;
    lc.hStream = cu_stream;
    lc.attrs = attrs;
    lc.numAttrs = config.cooperative ? 2 : 1;
    DRVSHIM_TRY(core, cuLaunchKernelEx, objects(), &lc, fn(kernel), args, nullptr);
  } else if (config.cooperative) {
    core.require_function(detail::Api::k_cuLaunchCooperativeKernel, "cooperative launch");
    DRVSHIM_TRY(core, cuLaunchCooperativeKernel, objects(), fn(kernel), config.grid.x, config.grid.y, config.grid.z,
                config.block.x, config.block.y, config.block.z, config.shared_bytes, cu_stream, args);
  } else {
    DRVSHIM_TRY(core, cuLaunchKernel, objects(), fn(kernel), config.grid.x, config.grid.y, config.grid.z,
                config.block.x, config.block.y, config.block.z, config.shared_bytes, cu_stream, args, nullptr);
  }
  detail::after_submit(core, cu_stream, "launch", objects);
}

}  // namespace drvshim
