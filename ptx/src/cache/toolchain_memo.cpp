// SPDX-License-Identifier: Apache-2.0
// NVRTC and what surrounds it, learnt without loading it: its fingerprint
// (file size and time), its builtins libraries, the toolkit include
// directory, and its architectures. The include directory and the
// architectures are kept in a toolchain memo (v1/toolchain/<hash of NVRTC's
// fingerprint and place>) so a disk hit neither loads NVRTC nor searches for
// them; the builtins are looked for in every process (where the dynamic
// linker finds them depends on the process's environment).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <climits>
#include <cstdlib>
#include <random>

#include "cache/cache_core.hpp"
#include "cache/cache_environment.hpp"
#include "cache/cache_log.hpp"
#include "env.hpp"
#include "nvrtc/nvrtc_internal.hpp"

namespace drvshim::detail {
namespace {

// A library's fingerprint: size and modification time of the file (a patch
// update changes them; a version number alone would not). Not its path or
// name: the same file reached through a link (libnvrtc.so.13 or
// libnvrtc.so.13.0.88), or a toolkit mounted elsewhere in a container, is the
// same compiler.
std::string fingerprint(const struct stat& st) { return fmt::format("{}:{}", st.st_size, mtime_ns(st)); }
std::string fingerprint(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return "missing";
  return fingerprint(st);
}

// The toolkit include directory as NVRTC::load() finds it: beside the
// library's real path (a readlink per component: done only without a memo).
std::string include_beside(const std::string& nvrtc_path, bool use_environment) {
  char resolved[PATH_MAX];
  const bool ok = ::realpath(nvrtc_path.c_str(), resolved) != nullptr;
  return find_cuda_include(ok ? std::string(resolved) : nvrtc_path, use_environment);
}

// The builtins libraries NVRTC uses (libnvrtc-builtins.so.<major>.<minor>),
// found as Nvrtc::load finds them: the bare name through the dynamic linker's
// search (LD_LIBRARY_PATH and RPATHs first), else beside libnvrtc. The minor is
// a property of libnvrtc: the toolchain memo keeps the names found, and only
// without one are the few possible minors asked for.
std::vector<std::pair<std::string, std::string>> probe_builtins(const std::string& nvrtc_path,
                                                                const std::vector<std::string>& names) {
  std::vector<std::pair<std::string, std::string>> found;
  const std::string dir = nvrtc_path.substr(0, nvrtc_path.rfind('/') + 1);
  const std::string file = nvrtc_path.substr(nvrtc_path.rfind('/') + 1);
  const auto so = file.find(".so.");
  const std::string major =
      so == std::string::npos ? std::string() : file.substr(so + 4, file.find('.', so + 4) - so - 4);
  std::vector<std::string> candidates = names;
  for (int minor = 0; candidates.empty() && !major.empty() && minor < 10; ++minor) {
    candidates.push_back(fmt::format("libnvrtc-builtins.so.{}.{}", major, minor));
  }
  if (names.empty() && major.empty()) return found;
  std::vector<std::string> dirs = library_search_dirs();
  dirs.push_back(dir);
  for (const auto& name : candidates) {
    for (const auto& d : dirs) {
      std::string builtins = d + name;
      if (::access(builtins.c_str(), F_OK) == 0) {
        std::string print = fingerprint(builtins);
        found.emplace_back(std::move(builtins), std::move(print));
        break;
      }
    }
  }
  return found;
}

// Memo fields are lines and ';' / '|' separated lists.
bool memo_safe(std::string_view text) { return text.find_first_of("\n;|") == std::string_view::npos; }

}  // namespace

const Nvrtc& CacheCore::compiler() const {
  std::lock_guard<std::mutex> lock(nvrtc_mutex);
  if (!nvrtc) {
    const auto t0 = std::chrono::steady_clock::now();
    nvrtc.emplace(Nvrtc::load(load_options));
    cache_log(log::Level::debug, "compile cache: loaded NVRTC {}.{} from {} for a miss ({:.1f} ms)",
              nvrtc->version_major(), nvrtc->version_minor(), nvrtc->loaded_path(),
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    // The keys name the NVRTC and builtins found without loading; what the dynamic linker
    // mapped may differ (an RPATH or ld.so.cache entry not foreseen). Then nothing this
    // process compiles is stored or served: entries would carry another compiler's identity.
    const std::string builtins_print = fingerprint(nvrtc->builtins_path());
    if (fingerprint(nvrtc->loaded_path()) != nvrtc_print) {
      mismatch = fmt::format("NVRTC was loaded from {}, not {} that the keys name", nvrtc->loaded_path(),
                             nvrtc_path.empty() ? std::string("(not found without loading)") : nvrtc_path);
    } else if (!nvrtc->builtins_path().empty() && std::none_of(builtins.begin(), builtins.end(), [&](const auto& b) {
                 return b.second == builtins_print;
               })) {
      mismatch =
          fmt::format("NVRTC's builtins were loaded from {}, which the keys do not name", nvrtc->builtins_path());
    }
    if (!mismatch.empty()) {
      cache_log(log::Level::warn, "compile cache: {}; compiling without the cache in this process", mismatch);
    }
    if (archs.empty()) {
      archs = nvrtc->supported_architectures();
      write_toolchain_memo();
    }
  }
  return *nvrtc;
}

const std::vector<int>& CacheCore::targets() const {
  {
    std::lock_guard<std::mutex> lock(nvrtc_mutex);
    if (!archs.empty()) return archs;
  }
  (void)compiler();
  return archs;
}

// The toolchain memo, named by NVRTC's fingerprint and place (the device and
// inode of the file and of its directory: the same whatever path reached it,
// while two toolkits whose libnvrtc have the same size and time have their own): the toolkit
// include directory, NVRTC's architectures and its builtins libraries' names,
// so that a disk hit neither loads NVRTC nor searches for them. Four lines:
// "<nvrtc fingerprint>|<place>\n<include dir>\n<arch> <arch> ...\n<name>;<name>\n".
std::optional<CacheCore::Memo> CacheCore::read_toolchain_memo() const {
  if (!disk || !toolchain) return std::nullopt;
  const std::string name = memo_name();
  // Non-blocking: a FIFO put where the memo belongs must not hang the cache's opening.
  Fd fd(::openat(toolchain.fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 16384 || st.st_uid != me() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return std::nullopt;
  }
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  if (::pread(fd.fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) return std::nullopt;
  std::vector<std::string_view> lines;
  for (std::size_t pos = 0; pos < text.size();) {
    const auto nl = text.find('\n', pos);
    if (nl == std::string::npos) return std::nullopt;
    lines.emplace_back(text.data() + pos, nl - pos);
    pos = nl + 1;
  }
  if (lines.size() != 4 || lines[0] != memo_identity()) return std::nullopt;
  Memo m;
  for (std::size_t pos = 0; pos < lines[3].size();) {
    const auto end = std::min(lines[3].find(';', pos), lines[3].size());
    const std::string_view builtins_name = lines[3].substr(pos, end - pos);
    if (builtins_name.rfind("libnvrtc-builtins.so.", 0) != 0 || builtins_name.find('/') != std::string_view::npos) {
      return std::nullopt;
    }
    m.builtins_names.emplace_back(builtins_name);
    pos = end + 1;
  }
  m.cuda_include = std::string(lines[1]);
  const std::string archs_text(lines[2]);
  const char* p = archs_text.c_str();
  while (*p != '\0') {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p || v <= 0 || v > 1000) return std::nullopt;
    m.archs.push_back(static_cast<int>(v));
    p = end;
    while (*p == ' ') ++p;
  }
  if (m.archs.empty()) return std::nullopt;
  return m;
}

void CacheCore::write_toolchain_memo() const {
  if (!disk || !toolchain || options.read_only || archs.empty()) return;
  // The include directory as found from NVRTC's place, whatever DRVSHIM_CUDA_INCLUDE says in this process.
  const std::string include = include_beside(nvrtc_path, false);
  if (nvrtc_place.empty() || !memo_safe(include)) return;
  std::string text = memo_identity() + "\n" + include + "\n";
  for (const int a : archs) text += std::to_string(a) + " ";
  text.back() = '\n';
  for (std::size_t i = 0; i < builtins.size(); ++i) {
    const std::string& path = builtins[i].first;
    const std::string name = path.substr(path.rfind('/') + 1);
    if (!memo_safe(name)) return;
    text += (i == 0 ? "" : ";") + name;
  }
  text += '\n';
  const Fd& staging = tmp_dir();
  if (!staging) return;
  std::random_device rd;
  const std::string tmp_name = fmt::format("{:08x}{:08x}.memo", rd(), rd());
  Fd fd(::openat(staging.fd, tmp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return;
  const bool ok = ::write(fd.fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  fd.reset();
  if (!ok || ::renameat(staging.fd, tmp_name.c_str(), toolchain.fd, memo_name().c_str()) != 0) {
    (void)::unlinkat(staging.fd, tmp_name.c_str(), 0);
  }
}

void CacheCore::learn_toolchain() {
  // One stat gives NVRTC's fingerprint and its place; its directory's, the rest.
  nvrtc_print = "missing";
  if (struct stat file{}; !nvrtc_path.empty() && ::stat(nvrtc_path.c_str(), &file) == 0) {
    nvrtc_print = fingerprint(file);
    const std::string parent = nvrtc_path.substr(0, std::max<std::size_t>(nvrtc_path.rfind('/'), 1));
    if (struct stat dir{}; ::stat(parent.c_str(), &dir) == 0) {
      nvrtc_place = fmt::format("{}:{} in {}:{}", file.st_dev, file.st_ino, dir.st_dev, dir.st_ino);
    }
  }
  const bool include_known = !cuda_include.empty();
  const bool env_include = env::raw("DRVSHIM_CUDA_INCLUDE").has_value();
  std::optional<Memo> memo = read_toolchain_memo();
  {
    // An NVRTC handed in loaded has its builtins loaded too: those are the ones.
    std::lock_guard<std::mutex> lock(nvrtc_mutex);
    if (nvrtc && !nvrtc->builtins_path().empty()) {
      builtins = {{nvrtc->builtins_path(), fingerprint(nvrtc->builtins_path())}};
    } else {
      builtins = probe_builtins(nvrtc_path, memo ? memo->builtins_names : std::vector<std::string>{});
    }
  }
  if (memo) {
    if (!include_known) cuda_include = env_include ? include_beside(nvrtc_path, true) : memo->cuda_include;
    if (archs.empty()) archs = memo->archs;
  } else {
    if (!include_known) cuda_include = include_beside(nvrtc_path, true);
  }
  identity = "nvrtc " + nvrtc_print;
  for (const auto& [path, print] : builtins) identity += "; builtins " + print;
  // Written once per NVRTC, by whichever process knows the targets first.
  if (!archs.empty() && (!memo || memo->archs != archs)) write_toolchain_memo();
}

}  // namespace drvshim::detail
