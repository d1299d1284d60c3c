// SPDX-License-Identifier: Apache-2.0
#include <dlfcn.h>
#include <link.h>
#include <nvrtc.h>

#include <fmt/format.h>
#include <drvshim/nvrtc.hpp>

#include <unistd.h>

#include <fmt/ranges.h>
#include <drvshim/device.hpp>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <string_view>

#include "dl_open.hpp"
#include "env.hpp"
#include "nvrtc/nvrtc_functions.hpp"
#include "nvrtc/nvrtc_internal.hpp"

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
  std::string cuda_include;
#define DRVSHIM_X(name, need) decltype(&::name) name = nullptr;  // NOLINT(bugprone-macro-parentheses): a declaration
  DRVSHIM_NVRTC_FUNCTIONS(DRVSHIM_X)
#undef DRVSHIM_X
  // NVRTC is never unloaded: compiled programs and its own threads may still use it.
};

namespace {

bool has_file(const std::string& path) { return access(path.c_str(), R_OK) == 0; }

}  // namespace

// The toolkit's include directory: DRVSHIM_CUDA_INCLUDE, else relative to the
// loaded NVRTC (lib64/ or targets/<arch>/lib/ beside include/), else /usr/local/cuda/include.
std::string find_cuda_include(const std::string& nvrtc_path, bool use_environment) {
  std::vector<std::string> candidates;
  if (auto env = use_environment ? detail::env::raw("DRVSHIM_CUDA_INCLUDE") : std::nullopt)
    candidates.push_back(std::move(*env));
  const std::string dir = nvrtc_path.substr(0, nvrtc_path.rfind('/'));
  candidates.push_back(dir + "/../include");
  candidates.push_back(dir + "/../../include");
  candidates.emplace_back("/usr/local/cuda/include");
  for (const auto& c : candidates) {
    if (has_file(c + "/cuda_fp16.h")) {
      char resolved[PATH_MAX];
      return realpath(c.c_str(), resolved) != nullptr ? std::string(resolved) : c;
    }
  }
  return {};
}

std::vector<std::string> nvrtc_candidates(const NvrtcLoadOptions& options) {
  constexpr int kMajor = DRVSHIM_CUDA_HEADER_MAJOR;
  if (!options.path.empty()) return {options.path};
  if (auto env = options.use_environment ? detail::env::raw("DRVSHIM_LIBNVRTC") : std::nullopt)
    return {std::move(*env)};
  return {fmt::format("libnvrtc.so.{}", kMajor), fmt::format("/usr/local/cuda/lib64/libnvrtc.so.{}", kMajor)};
}

std::string locate_nvrtc(const NvrtcLoadOptions& options) {
  // A libnvrtc already mapped into the process is the one dlopen would hand
  // back; the loaded-object list answers that without touching the file system
  // (dlopen(RTLD_NOLOAD) reads ld.so.cache: ~0.09 ms, a third of a disk hit).
  struct Search {
    std::string found;
  } search;
  const auto candidates = nvrtc_candidates(options);
  // An explicit path names the file; only a bare soname may match what is mapped, and
  // only that soname (libnvrtc.so.13, or a file named for its full version,
  // libnvrtc.so.13.0.88): another major another library mapped is not this one.
  if (candidates.front().find('/') == std::string::npos) {
    struct Want {
      std::string soname;
      Search* search;
    } want{candidates.front(), &search};
    dl_iterate_phdr(
        [](dl_phdr_info* info, std::size_t, void* data) -> int {
          auto* w = static_cast<Want*>(data);
          const std::string_view name = info->dlpi_name != nullptr ? info->dlpi_name : "";
          const auto slash = name.rfind('/');
          const std::string_view file = name.substr(slash == std::string_view::npos ? 0 : slash + 1);
          if (file != w->soname && file.rfind(w->soname + ".", 0) != 0) return 0;
          w->search->found = std::string(name);
          return 1;
        },
        &want);
  }
  // Not resolved to a canonical path: the cache names NVRTC by file size and
  // time, and a realpath() is a readlink per path component.
  if (!search.found.empty()) return search.found;
  std::vector<std::string> search_dirs;
  for (const auto& c : candidates) {
    if (c.find('/') != std::string::npos) {
      if (has_file(c)) return c;
      continue;
    }
    if (search_dirs.empty()) search_dirs = library_search_dirs();
    for (const auto& d : search_dirs) {
      std::string path = d + c;
      if (has_file(path)) return path;
    }
  }
  return {};
}

namespace {

std::vector<std::string> search_dirs_now() {
  std::vector<std::string> first;     // RPATH, LD_LIBRARY_PATH, RUNPATH
  std::vector<std::string> defaults;  // the system's, searched after ld.so.cache
  auto add = [](std::vector<std::string>& to, std::string dir) {
    if (dir.empty()) return;
    if (dir.back() != '/') dir.push_back('/');
    if (std::find(to.begin(), to.end(), dir) == to.end()) to.push_back(std::move(dir));
  };
  // glibc's list for libdrvshim as the caller of dlopen (RPATHs of its loaders included).
  // libdrvshim's own link map (glibc's handles are link maps): no dlopen(RTLD_NOLOAD), which
  // costs a tenth of a millisecond on the way to a disk hit.
  Dl_info info{};
  link_map* self = nullptr;
  if (dladdr1(reinterpret_cast<void*>(&search_dirs_now), &info, reinterpret_cast<void**>(&self), RTLD_DL_LINKMAP) ==
      0) {
    self = nullptr;
  }
  bool listed = false;
  if (self != nullptr) {
    Dl_serinfo size{};
    if (dlinfo(self, RTLD_DI_SERINFOSIZE, &size) == 0 && size.dls_size >= sizeof(Dl_serinfo)) {
      std::vector<std::max_align_t> buffer(size.dls_size / sizeof(std::max_align_t) + 1);
      auto* list = reinterpret_cast<Dl_serinfo*>(buffer.data());
      list->dls_size = size.dls_size;
      list->dls_cnt = size.dls_cnt;
      if (dlinfo(self, RTLD_DI_SERINFO, list) == 0) {
        listed = true;
        // glibc leaves dls_flags 0 here: its own system directories are told by name.
        constexpr std::string_view kSystem[] = {
            "/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib", "/usr/lib", "/lib64", "/usr/lib64"};
        for (unsigned i = 0; i < list->dls_cnt; ++i) {
          const char* name = list->dls_serpath[i].dls_name;
          if (name == nullptr) continue;
          const bool system =
              std::find(std::begin(kSystem), std::end(kSystem), std::string_view(name)) != std::end(kSystem);
          add(system ? defaults : first, name);
        }
      }
    }
  }
  if (!listed) {
    if (const char* lp = env::value("LD_LIBRARY_PATH"); lp != nullptr) {
      const std::string all = lp;
      for (std::size_t pos = 0; pos <= all.size();) {
        const auto end = std::min(all.find(':', pos), all.size());
        add(first, all.substr(pos, end - pos));
        pos = end + 1;
      }
    }
  }
  // ld.so.cache (not read here) usually lists the toolkit's directory; then the system's.
  add(first, "/usr/local/cuda/lib64/");
  for (const char* d : {"/lib/x86_64-linux-gnu/", "/usr/lib/x86_64-linux-gnu/", "/usr/lib64/", "/usr/lib/"}) {
    add(defaults, d);
  }
  for (auto& d : defaults) add(first, std::move(d));
  return first;
}

}  // namespace

// The list is fixed for the process (LD_LIBRARY_PATH as the dynamic linker read it at start,
// the RPATHs of objects already loaded): asked for once, for NVRTC and its builtins alike.
std::vector<std::string> library_search_dirs() {
  static const std::vector<std::string> dirs = search_dirs_now();
  return dirs;
}

std::string choose_target(const std::vector<int>& archs, int want) {
  if (std::find(archs.begin(), archs.end(), want) != archs.end()) return fmt::format("sm_{}", want);
  int best = 0;
  for (const int a : archs) {
    if (a <= want && a > best) best = a;
  }
  return best == 0 ? std::string() : fmt::format("compute_{}", best);
}

std::vector<std::string> effective_options(const CompileOptions& options, const std::string& cuda_include) {
  std::vector<std::string> out = options.render();
  if (options.cuda_includes && !cuda_include.empty()) out.push_back("-I" + cuda_include);
  return out;
}

namespace {

// The source lines a log points at ("name(12): error: ..."), numbered.
std::string excerpt(const std::string& source, const std::string& name, const std::string& log) {
  std::vector<std::string> lines;
  std::size_t start = 0;
  while (start <= source.size()) {
    const auto end = source.find('\n', start);
    lines.push_back(source.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (end == std::string::npos) break;
    start = end + 1;
  }
  std::string out;
  std::vector<int> shown;
  const std::string marker = name + "(";
  for (std::size_t pos = log.find(marker); pos != std::string::npos; pos = log.find(marker, pos + 1)) {
    // This program's own lines only: "name(12)" at the start of a log line, not the end of
    // another file's name ("xname(2)", "dir/name(2)").
    if (pos != 0 && log[pos - 1] != '\n') continue;
    const char* digits = log.c_str() + pos + marker.size();
    char* after = nullptr;
    const long line = std::strtol(digits, &after, 10);
    if (after == digits || *after != ')' || line <= 0 || static_cast<std::size_t>(line) > lines.size()) continue;
    if (std::find(shown.begin(), shown.end(), line) != shown.end()) continue;
    shown.push_back(static_cast<int>(line));
    out += fmt::format("\n  {:>4} | {}", line, lines[static_cast<std::size_t>(line - 1)]);
  }
  return out;
}

// What to do about a failed compile. NVRTC_ERROR_INVALID_OPTION (5) is about
// the options, not the source: the hint names the option the log names.
std::string compile_hint(int code, const std::string& log) {
  if (code == NVRTC_ERROR_COMPILATION) return "fix the source at the lines the log names";
  if (code != NVRTC_ERROR_INVALID_OPTION) {
    return "NVRTC failed in a step around the compile, not on the source: the text above names the step";
  }
  const auto quoted = [&](const std::string& marker, const std::string& stop) -> std::string {
    const auto at = log.find(marker);
    if (at == std::string::npos) return {};
    const auto start = at + marker.size();
    const auto end = log.find_first_of(stop, start);
    return log.substr(start, end == std::string::npos ? std::string::npos : end - start);
  };
  const char* docs = "NVRTC's options are listed in its documentation under \"Supported Compile Options\"";
  if (const std::string unknown = quoted("unrecognized option ", " \n"); !unknown.empty()) {
    return fmt::format(
        "NVRTC does not know the option {}: correct or remove it (CompileOptions::extra passes options "
        "unchanged; {})",
        unknown, docs);
  }
  if (const std::string option = quoted("invalid value for ", "\n"); !option.empty()) {
    return fmt::format(
        "the value given for {} is not one NVRTC accepts (CompileOptions::arch: sm_XY or compute_XY "
        "from Nvrtc::supported_architectures(); standard: c++11 to c++20; {})",
        option, docs);
  }
  return fmt::format("NVRTC rejected an option, not the source: the log names it ({})", docs);
}

}  // namespace
}  // namespace detail

NvrtcCompileError::NvrtcCompileError(const std::string& program, const std::string& log,
                                     std::vector<std::string> options, const std::string& excerpt_text, int code)
    : Error(
          ErrorKind::cuda,
          fmt::format("NVRTC could not compile {} (nvrtcResult {}); options: {}; log:\n{}{}", program, code,
                      fmt::join(options, " "), log, excerpt_text.empty() ? std::string() : "\nsource:" + excerpt_text),
          ErrorDetails{"nvrtcCompileProgram", 0, program, detail::compile_hint(code, log), false}),
      log_(log),
      options_(std::move(options)) {}

std::vector<std::string> CompileOptions::render() const {
  std::vector<std::string> out;
  if (!arch.empty()) out.push_back("--gpu-architecture=" + arch);
  if (!standard.empty()) out.push_back("--std=" + standard);
  for (const auto& [name, value] : defines) {
    std::string option = "-D" + name;
    if (!value.empty()) option.append("=").append(value);
    out.push_back(std::move(option));
  }
  for (const auto& dir : include_paths) out.push_back("-I" + dir);
  if (fast_math) out.emplace_back("--use_fast_math");
  if (line_info) out.emplace_back("--generate-line-info");
  if (debug) out.emplace_back("--device-debug");
  if (relocatable) out.emplace_back("--relocatable-device-code=true");
  out.insert(out.end(), extra.begin(), extra.end());
  return out;
}

NvrtcNotFoundError::NvrtcNotFoundError(const std::string& what, std::vector<std::string> paths_tried,
                                       std::vector<std::string> dl_errors)
    : Error(ErrorKind::driver_not_found,
            fmt::format("{} could not be loaded; tried: {}", what,
                        [&] {
                          std::string out;
                          for (std::size_t i = 0; i < paths_tried.size(); ++i) {
                            out += fmt::format("{}\"{}\" ({})", i == 0 ? "" : "; ", paths_tried[i],
                                               i < dl_errors.size() ? dl_errors[i] : "");
                          }
                          return out;
                        }()),
            ErrorDetails{"Nvrtc::load",
                         0,
                         {},
                         "install the CUDA toolkit's NVRTC (the cuda-nvrtc package) or set "
                         "DRVSHIM_LIBNVRTC=/path/to/libnvrtc.so.<major>",
                         false}),
      paths_(std::move(paths_tried)),
      dl_errors_(std::move(dl_errors)) {}

Nvrtc::Nvrtc(std::shared_ptr<detail::NvrtcCore> core) noexcept : core_(std::move(core)) {}

Nvrtc Nvrtc::load(const NvrtcLoadOptions& options) {
  detail::env::warn_about_unknown_once();
  const std::vector<std::string> candidates = detail::nvrtc_candidates(options);
  auto core = std::make_shared<detail::NvrtcCore>();
  std::vector<std::string> errors;
  auto opened = detail::dlopen_first(candidates, errors);
  if (opened.handle == nullptr) throw NvrtcNotFoundError("NVRTC", candidates, errors);
  core->handle = opened.handle;
  core->requested_path = std::move(opened.path);
  core->loaded_path = detail::loaded_file(core->handle, core->requested_path);

  std::vector<std::string> missing;
#define DRVSHIM_X(name, need)                                                               \
  {                                                                                         \
    void* p = dlsym(core->handle, #name);                                                   \
    std::memcpy(&core->name, &p, sizeof(p));                                                \
    if (p == nullptr && std::string_view(#need) == "Required") missing.emplace_back(#name); \
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
  const auto builtins_lib = detail::dlopen_first(builtin_candidates, builtin_errors);
  if (builtins_lib.handle == nullptr) {
    throw NvrtcNotFoundError("NVRTC's builtins library", builtin_candidates, builtin_errors);
  }
  core->builtins = builtins_lib.handle;
  core->builtins_path = detail::loaded_file(core->builtins, builtins_lib.path);
  core->cuda_include = detail::find_cuda_include(core->loaded_path);
  return Nvrtc(std::move(core));
}

const std::string& Nvrtc::requested_path() const noexcept { return core_->requested_path; }
const std::string& Nvrtc::loaded_path() const noexcept { return core_->loaded_path; }
const std::string& Nvrtc::builtins_path() const noexcept { return core_->builtins_path; }
int Nvrtc::version_major() const noexcept { return core_->major; }
int Nvrtc::version_minor() const noexcept { return core_->minor; }
const std::vector<int>& Nvrtc::supported_architectures() const noexcept { return core_->archs; }
const std::string& Nvrtc::cuda_include_dir() const noexcept { return core_->cuda_include; }

std::string Nvrtc::target_for(const Device& device) const {
  const auto cc = device.compute_capability();
  const int want = cc.major * 10 + cc.minor;
  std::string target = detail::choose_target(core_->archs, want);
  if (target.empty()) {
    throw InvalidArgumentError("Nvrtc::target_for",
                               fmt::format("NVRTC {}.{} supports no architecture at or below the device's sm_{}",
                                           core_->major, core_->minor, want),
                               "use an NVRTC from an older CUDA toolkit for this device");
  }
  return target;
}

std::vector<std::string> Nvrtc::effective_options(const CompileOptions& options) const {
  return detail::effective_options(options, core_->cuda_include);
}

CompileResult Nvrtc::compile(const std::string& source, const std::string& name, const CompileOptions& options,
                             const std::vector<Header>& headers,
                             const std::vector<std::string>& name_expressions) const {
  if (options.arch.empty()) {
    throw InvalidArgumentError("Nvrtc::compile", "no target architecture",
                               "set CompileOptions::arch (\"sm_90\", \"compute_90\") or use Nvrtc::target_for(device)");
  }
  const bool cubin = options.arch.rfind("sm_", 0) == 0;
  if (cubin && (core_->nvrtcGetCUBIN == nullptr || core_->nvrtcGetCUBINSize == nullptr)) {
    throw InvalidArgumentError("Nvrtc::compile", "this NVRTC cannot emit CUBIN", "target compute_XY (PTX) instead");
  }
  CompileResult result;
  result.cubin = cubin;
  result.options = effective_options(options);
  std::vector<const char*> header_sources;
  std::vector<const char*> header_names;
  for (const auto& h : headers) {
    header_sources.push_back(h.source.c_str());
    header_names.push_back(h.name.c_str());
  }
  nvrtcProgram program = nullptr;
  nvrtcResult r = core_->nvrtcCreateProgram(&program, source.c_str(), name.c_str(), static_cast<int>(headers.size()),
                                            header_sources.data(), header_names.data());
  if (r != NVRTC_SUCCESS) {
    throw NvrtcCompileError(name, core_->nvrtcGetErrorString(r), result.options, "", static_cast<int>(r));
  }
  // The program is destroyed on every path out of here.
  struct Destroy {
    const detail::NvrtcCore* core;
    nvrtcProgram* program;
    ~Destroy() { core->nvrtcDestroyProgram(program); }
  } destroy{core_.get(), &program};
  for (const auto& expr : name_expressions) {
    r = core_->nvrtcAddNameExpression(program, expr.c_str());
    if (r != NVRTC_SUCCESS) {
      throw NvrtcCompileError(name,
                              fmt::format("nvrtcAddNameExpression(\"{}\"): {}", expr, core_->nvrtcGetErrorString(r)),
                              result.options, "", static_cast<int>(r));
    }
  }
  std::vector<const char*> argv;
  for (const auto& o : result.options) argv.push_back(o.c_str());
  const auto t0 = std::chrono::steady_clock::now();
  const nvrtcResult compiled = core_->nvrtcCompileProgram(program, static_cast<int>(argv.size()), argv.data());
  result.compile_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::size_t log_size = 0;
  if (core_->nvrtcGetProgramLogSize(program, &log_size) == NVRTC_SUCCESS && log_size > 1) {
    result.log.resize(log_size);
    if (core_->nvrtcGetProgramLog(program, result.log.data()) == NVRTC_SUCCESS) result.log.resize(log_size - 1);
  }
  if (compiled != NVRTC_SUCCESS) {
    throw NvrtcCompileError(name, result.log, result.options, detail::excerpt(source, name, result.log),
                            static_cast<int>(compiled));
  }
  std::size_t size = 0;
  r = cubin ? core_->nvrtcGetCUBINSize(program, &size) : core_->nvrtcGetPTXSize(program, &size);
  if (r == NVRTC_SUCCESS) {
    result.image.resize(size);
    r = cubin ? core_->nvrtcGetCUBIN(program, reinterpret_cast<char*>(result.image.data()))
              : core_->nvrtcGetPTX(program, reinterpret_cast<char*>(result.image.data()));
  }
  if (r != NVRTC_SUCCESS) {
    throw NvrtcCompileError(name, core_->nvrtcGetErrorString(r), result.options, "", static_cast<int>(r));
  }
  for (const auto& expr : name_expressions) {
    const char* lowered = nullptr;
    if (core_->nvrtcGetLoweredName(program, expr.c_str(), &lowered) == NVRTC_SUCCESS && lowered != nullptr) {
      result.lowered_names[expr] = lowered;
    }
  }
  return result;
}

}  // namespace drvshim
