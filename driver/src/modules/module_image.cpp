// SPDX-License-Identifier: Apache-2.0
// Module images: recognising CUBIN, fatbin and PTX, reading module files, and
// the driver's linker (link_ptx).
#include <drvshim/driver.hpp>
#include <drvshim/module.hpp>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <string_view>
#include <utility>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "modules/module_internal.hpp"
#include "seam/access.hpp"
#include "seam/core_of.hpp"
#include "trace_internal.hpp"

namespace drvshim {
namespace {

using detail::core_of;

constexpr std::uint32_t kFatbinMagic = 0xBA55ED50u;

}  // namespace

namespace detail {

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

const void* image_data(std::span<const std::byte> image, ModuleFormat format, std::string& ptx_copy) {
  if (format == ModuleFormat::ptx && (image.empty() || image.back() != std::byte{0})) {
    ptx_copy.assign(reinterpret_cast<const char*>(image.data()), image.size());
    return ptx_copy.c_str();
  }
  return image.data();
}

void raise_load(const DriverCore& core, int r, const char* api, ModuleFormat format, std::size_t bytes,
                const std::string& where, const std::string& error_log) {
  raise(core, r, api,
        fmt::format("{} image of {} bytes, {}; JIT error log: {}", to_string(format), bytes, where,
                    error_log.empty() ? std::string("(empty)") : error_log),
        format == ModuleFormat::ptx ? "fix the PTX (the JIT log above names the line), or compile it for "
                                      "the device's architecture ahead of time"
                                    : "the image may target another architecture than the device's");
}

std::vector<char> read_module_file(const char* api, const std::string& path) {
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

LinkRun run_linker(const DriverCore& core, std::span<const std::byte> ptx, const std::string& name,
                   const std::string& objects) {
  std::string ptx_copy;
  const void* data = image_data(ptx, ModuleFormat::ptx, ptx_copy);
  // The linker writes its outputs (wall time, log sizes) into the option values at cuLinkComplete.
  JitCapture jit(jit_log_bytes(ptx, ModuleFormat::ptx));
  CUlinkState state = nullptr;
  DRVSHIM_TRY(core, cuLinkCreate, objects, JitCapture::kCount, jit.options, jit.values, &state);
  // The linker owns the CUBIN cuLinkComplete hands out: it is copied before cuLinkDestroy.
  struct Destroy {
    const DriverCore& core;
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

}  // namespace detail

const char* to_string(ModuleFormat format) noexcept {
  switch (format) {
    case ModuleFormat::cubin: return "cubin";
    case ModuleFormat::ptx: return "ptx";
    case ModuleFormat::fatbin: return "fatbin";
  }
  return "unknown";
}

ModuleFormat detect_module_format(std::span<const std::byte> image) {
  return detail::detect_format(image, "detect_module_format", fmt::format("the {}-byte image", image.size()));
}

std::string module_loading_mode(const Driver& driver) {
  const auto& core = *detail::Access::core(driver);
  core.require_init("module_loading_mode");
  if (!core.has(detail::Api::k_cuModuleGetLoadingMode)) return "unknown";
  CUmoduleLoadingMode mode{};
  DRVSHIM_TRY(core, cuModuleGetLoadingMode, std::string(), &mode);
  return mode == CU_MODULE_LAZY_LOADING ? "lazy" : "eager";
}

LinkedImage link_ptx(const ContextRef& context, std::span<const std::byte> ptx, const std::string& name) {
  if (ptx.empty() || detect_module_format(ptx) != ModuleFormat::ptx) {
    throw InvalidArgumentError("link_ptx", fmt::format("\"{}\" is not PTX text", name),
                               "pass the PTX NVRTC produced for a compute_XY target");
  }
  const auto& core = core_of(context);
  detail::ContextScope scope(core, context.address(), "link_ptx");
  detail::LinkRun run =
      detail::run_linker(core, ptx, name, fmt::format("linking \"{}\" on device {}", name, context.device().ordinal()));
  if (run.result != CUDA_SUCCESS) {
    detail::raise_load(core, static_cast<int>(run.result), run.failed, ModuleFormat::ptx, ptx.size(),
                       fmt::format("\"{}\" for device {}", name, context.device().ordinal()), run.image.log.error);
  }
  trace::mark("link-ptx", fmt::format("\"{}\": {} bytes of PTX -> {} bytes of SASS, JIT {:.3f} ms", name, ptx.size(),
                                      run.image.cubin.size(), static_cast<double>(run.image.log.wall_ms)));
  return std::move(run.image);
}

}  // namespace drvshim
