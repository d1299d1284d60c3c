#include <dlfcn.h>
#include <link.h>
#include <nvrtc.h>

#include <drvshim/nvrtc.hpp>
#include <fmt/format.h>

#include <climits>
#include <cstdlib>
#include <cstring>

#include "nvrtc_functions.hpp"

namespace drvshim {
namespace detail {

struct NvrtcCore {
  void* handle = nullptr;
  void* builtins = nullptr;
  std::string requested_path;
  std::string loaded_path;
  std::string builtins_path;
  int major = 0;
  int minor = 0;
  std::vector<int> archs;
#define DRVSHIM_X(name, need) decltype(&::name) name = nullptr;
  DRVSHIM_NVRTC_FUNCTIONS(DRVSHIM_X)
#undef DRVSHIM_X
  // NVRTC is never unloaded: compiled programs and its own threads may still use it.
};

namespace {

std::string path_of(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && *map->l_name != '\0') {
    char resolved[PATH_MAX];
    return realpath(map->l_name, resolved) != nullptr ? std::string(resolved) : std::string(map->l_name);
  }
  return fallback;
}

void* open_first(const std::vector<std::string>& candidates, std::string& opened, std::vector<std::string>& errors) {
  for (const auto& path : candidates) {
    dlerror();
    if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) {
      opened = path;
      return h;
    }
    const char* e = dlerror();
    errors.emplace_back(e != nullptr ? e : "unknown dlopen error");
  }
  return nullptr;
}

}  // namespace
}  // namespace detail

NvrtcNotFoundError::NvrtcNotFoundError(const std::string& what, std::vector<std::string> paths_tried,
                                       std::vector<std::string> dl_errors)
    : Error(ErrorKind::driver_not_found,
            fmt::format("{} could not be loaded; tried: {}", what, [&] {
              std::string out;
              for (std::size_t i = 0; i < paths_tried.size(); ++i) {
                out += fmt::format("{}\"{}\" ({})", i == 0 ? "" : "; ", paths_tried[i],
                                   i < dl_errors.size() ? dl_errors[i] : "");
              }
              return out;
            }()),
            ErrorDetails{"Nvrtc::load", 0, {},
                         "install the CUDA toolkit's NVRTC (the cuda-nvrtc package) or set "
                         "DRVSHIM_LIBNVRTC=/path/to/libnvrtc.so.<major>",
                         false}),
      paths_(std::move(paths_tried)),
      dl_errors_(std::move(dl_errors)) {}

Nvrtc::Nvrtc(std::shared_ptr<detail::NvrtcCore> core) noexcept : core_(std::move(core)) {}

Nvrtc Nvrtc::load(const NvrtcLoadOptions& options) {
  constexpr int kMajor = DRVSHIM_CUDA_HEADER_MAJOR;
  std::vector<std::string> candidates;
  if (!options.path.empty()) {
    candidates.push_back(options.path);
  } else if (const char* env = options.use_environment ? std::getenv("DRVSHIM_LIBNVRTC") : nullptr;
             env != nullptr && *env != '\0') {
    candidates.emplace_back(env);
  } else {
    candidates = {fmt::format("libnvrtc.so.{}", kMajor), fmt::format("/usr/local/cuda/lib64/libnvrtc.so.{}", kMajor)};
  }
  auto core = std::make_shared<detail::NvrtcCore>();
  std::vector<std::string> errors;
  core->handle = detail::open_first(candidates, core->requested_path, errors);
  if (core->handle == nullptr) throw NvrtcNotFoundError("NVRTC", candidates, errors);
  core->loaded_path = detail::path_of(core->handle, core->requested_path);

  std::vector<std::string> missing;
#define DRVSHIM_X(name, need)                                                     \
  {                                                                               \
    void* p = dlsym(core->handle, #name);                                         \
    std::memcpy(&core->name, &p, sizeof(p));                                      \
    if (p == nullptr && std::string_view(#need) == "Required") missing.push_back(#name); \
  }
  DRVSHIM_NVRTC_FUNCTIONS(DRVSHIM_X)
#undef DRVSHIM_X
  if (!missing.empty()) {
    throw NvrtcNotFoundError(fmt::format("NVRTC ({} lacks {})", core->loaded_path, missing.front()),
                             {core->loaded_path}, {"required function missing"});
  }
  if (core->nvrtcVersion(&core->major, &core->minor) != NVRTC_SUCCESS) {
    throw NvrtcNotFoundError("NVRTC (nvrtcVersion failed)", {core->loaded_path}, {"nvrtcVersion failed"});
  }
  int count = 0;
  if (core->nvrtcGetNumSupportedArchs != nullptr && core->nvrtcGetSupportedArchs != nullptr &&
      core->nvrtcGetNumSupportedArchs(&count) == NVRTC_SUCCESS && count > 0) {
    core->archs.resize(static_cast<std::size_t>(count));
    if (core->nvrtcGetSupportedArchs(core->archs.data()) != NVRTC_SUCCESS) core->archs.clear();
  }
  // NVRTC loads its builtins library itself at the first compile; a missing
  // one is reported now, with the paths tried, instead of as a compile failure.
  const std::string dir = core->loaded_path.substr(0, core->loaded_path.rfind('/') + 1);
  const std::string builtins = fmt::format("libnvrtc-builtins.so.{}.{}", core->major, core->minor);
  std::vector<std::string> builtin_candidates = {builtins, dir + builtins};
  std::vector<std::string> builtin_errors;
  std::string opened;
  core->builtins = detail::open_first(builtin_candidates, opened, builtin_errors);
  if (core->builtins == nullptr) throw NvrtcNotFoundError("NVRTC's builtins library", builtin_candidates, builtin_errors);
  core->builtins_path = detail::path_of(core->builtins, opened);
  return Nvrtc(std::move(core));
}

const std::string& Nvrtc::requested_path() const noexcept { return core_->requested_path; }
const std::string& Nvrtc::loaded_path() const noexcept { return core_->loaded_path; }
const std::string& Nvrtc::builtins_path() const noexcept { return core_->builtins_path; }
int Nvrtc::version_major() const noexcept { return core_->major; }
int Nvrtc::version_minor() const noexcept { return core_->minor; }
const std::vector<int>& Nvrtc::supported_architectures() const noexcept { return core_->archs; }

}  // namespace drvshim
