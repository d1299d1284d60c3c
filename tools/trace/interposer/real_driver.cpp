// SPDX-License-Identifier: Apache-2.0
// The real driver: found as the loader would find it (or named by
// DRVSHIM_TRACE_REAL_LIBCUDA, which drvshim-trace sets), never the
// interposer itself. Each entry point is resolved by its exported name, or,
// for a driver that exports few names (drvshim's fake), through the real
// cuGetProcAddress_v2 with the (base, version, flags) that names the variant.
#include <dlfcn.h>
#include <stdlib.h>

#include <fmt/format.h>

#include <string>

#include "driver_search.hpp"
#include "env.hpp"
#include "interposer.hpp"

namespace drvshim::trace_interposer {

void* g_real[kFnCount] = {};
void* g_lookup[kFnCount] = {};

namespace {
std::string own_path() {
  Dl_info info{};
  if (::dladdr(reinterpret_cast<void*>(&load_real_driver), &info) == 0 || info.dli_fname == nullptr) return {};
  return info.dli_fname;
}
}  // namespace

std::string load_real_driver(std::string& path_out) {
  const std::string self = trace_tool::real_path(own_path());
  const char* named = drvshim::detail::env::value("DRVSHIM_TRACE_REAL_LIBCUDA");
  std::vector<trace_tool::DriverCandidate> candidates;
  if (named != nullptr && *named != '\0') {
    if (!self.empty() && trace_tool::real_path(named) == self) {
      return fmt::format("DRVSHIM_TRACE_REAL_LIBCUDA=\"{}\" is the interposer itself; name the real libcuda.so.1",
                         named);
    }
    candidates.push_back({named, "DRVSHIM_TRACE_REAL_LIBCUDA"});
  } else {
    const char* llp = drvshim::detail::env::value("LD_LIBRARY_PATH");
    candidates = trace_tool::driver_candidates("", llp != nullptr ? llp : "", {}, self);
  }
  std::string tried;
  void* handle = nullptr;
  for (const auto& c : candidates) {
    handle = ::dlopen(c.path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (handle != nullptr) {
      path_out = c.path;
      break;
    }
    const char* err = ::dlerror();
    tried += fmt::format("\n  {} ({}): {}", c.path, c.source, err != nullptr ? err : "?");
  }
  if (handle == nullptr) {
    return candidates.empty() ? std::string("no libcuda.so.1 found besides the interposer")
                              : "cannot load the real driver; tried:" + tried;
  }
  using Gpa = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
  const auto gpa = reinterpret_cast<Gpa>(::dlsym(handle, "cuGetProcAddress_v2"));
  for (std::size_t i = 0; i < kFnCount; ++i) {
    void* exported = ::dlsym(handle, kFns[i].symbol);
    // What cuGetProcAddress hands out for this variant may be another address than the
    // export (drvshim's fake: an internal function); both must lead to this wrapper.
    void* looked_up = nullptr;
    if (gpa != nullptr && kFns[i].version != 0) {
      CUdriverProcAddressQueryResult status{};
      if (gpa(kFns[i].base, &looked_up, kFns[i].version, static_cast<cuuint64_t>(kFns[i].flags), &status) !=
          CUDA_SUCCESS) {
        looked_up = nullptr;
      }
    }
    g_real[i] = exported != nullptr ? exported : looked_up;
    g_lookup[i] = looked_up;
  }
  (void)::dlerror();
  build_pointer_map();
  return {};
}

}  // namespace drvshim::trace_interposer
