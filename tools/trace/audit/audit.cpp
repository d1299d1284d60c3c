// SPDX-License-Identifier: Apache-2.0
// drvshim-trace's LD_AUDIT module: a program (or a library such as a
// framework's driver loader) that opens libcuda by an absolute path, or finds
// it through a DT_RPATH before LD_LIBRARY_PATH, would bypass the interposer.
// The dynamic loader asks la_objsearch for every library it looks for; a
// request for libcuda.so* from anyone but the interposer itself is answered
// with the interposer, and a request by path is written to the trace as a
// "libcuda-redirected" event.
//
// Environment (set by drvshim-trace): DRVSHIM_TRACE_INTERPOSER (the
// interposer's path), DRVSHIM_TRACE_OUT, DRVSHIM_TRACE_EPOCH_NS,
// DRVSHIM_TRACE_CHILDREN and DRVSHIM_TRACE_ROOT_PID (with --no-children, a
// process other than the program is still redirected, as the interposer then
// forwards untraced, but nothing is written to the trace for it).
#include <link.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <drvshim_recorder/json_line.hpp>
#include <drvshim_recorder/trace_file.hpp>

#include <cstdlib>
#include <cstring>
#include <string>
#include "env.hpp"

namespace {

// Marks the interposer's cookie (la_objopen), so its own loading of the real driver is left alone.
constexpr uintptr_t kInterposerMark = 0x64727673;  // "drvs"

const char* interposer() noexcept {
  const char* p = drvshim::detail::env::value("DRVSHIM_TRACE_INTERPOSER");
  return p != nullptr && *p != '\0' ? p : nullptr;
}

bool is_libcuda(const char* name) noexcept {
  const char* base = std::strrchr(name, '/');
  base = base != nullptr ? base + 1 : name;
  return std::strncmp(base, "libcuda.so", 10) == 0;
}

// Whether this process writes to the trace: not a descendant of the program under --no-children.
bool traced_process() noexcept {
  if (drvshim::detail::env::switch_value("DRVSHIM_TRACE_CHILDREN", true)) return true;
  const char* root = drvshim::detail::env::value("DRVSHIM_TRACE_ROOT_PID");
  if (root == nullptr || *root == '\0') return true;
  char* end = nullptr;
  const unsigned long long root_pid = std::strtoull(root, &end, 10);
  return end == nullptr || *end != '\0' || root_pid == 0 || root_pid == static_cast<unsigned long long>(::getpid());
}

void note_redirect(const char* from, const char* to) noexcept {
  try {
    const char* out = drvshim::detail::env::value("DRVSHIM_TRACE_OUT");
    if (out == nullptr || *out == '\0' || !traced_process()) return;
    drvshim::recorder::TraceFile file;
    if (!file.open(out, 0).empty()) return;
    timespec ts{};
    ::clock_gettime(CLOCK_MONOTONIC, &ts);
    const long long now = static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec;
    const char* epoch = drvshim::detail::env::value("DRVSHIM_TRACE_EPOCH_NS");
    drvshim::recorder::Record r;
    r.ts_ns = now - (epoch != nullptr ? std::atoll(epoch) : 0);
    r.pid = static_cast<std::uint32_t>(::getpid());
    r.tid = static_cast<std::uint64_t>(::syscall(SYS_gettid));
    r.kind = drvshim::recorder::Kind::event;
    r.api = "libcuda-redirected";
    r.args = std::string("the program asked the loader for \"") + from +
             "\", which would bypass drvshim-trace; it was given the interposer " + to;
    std::string line = drvshim::recorder::to_json(r);
    line += '\n';
    (void)file.write_lines(line);
  } catch (...) {
  }
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) unsigned int la_version(unsigned int version) {
  return version < LAV_CURRENT ? version : LAV_CURRENT;
}

__attribute__((visibility("default"))) unsigned int la_objopen(struct link_map* map, Lmid_t, uintptr_t* cookie) {
  const char* mine = interposer();
  if (mine != nullptr && map != nullptr && map->l_name != nullptr && std::strcmp(map->l_name, mine) == 0) {
    *cookie = kInterposerMark;
  }
  return 0;  // no symbol-binding audit: nothing is slowed down after loading
}

__attribute__((visibility("default"))) char* la_objsearch(const char* name, uintptr_t* cookie, unsigned int flag) {
  if (flag != LA_SER_ORIG || name == nullptr || !is_libcuda(name)) return const_cast<char*>(name);
  const char* mine = interposer();
  if (mine == nullptr || (cookie != nullptr && *cookie == kInterposerMark) || std::strcmp(name, mine) == 0) {
    return const_cast<char*>(name);
  }
  if (std::strchr(name, '/') != nullptr) note_redirect(name, mine);
  return const_cast<char*>(mine);
}

}  // extern "C"
