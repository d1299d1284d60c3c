// SPDX-License-Identifier: Apache-2.0
#include "driver_search.hpp"

#include <climits>
#include <cstdlib>

namespace drvshim::trace_tool {

std::string real_path(const std::string& path) {
  char buf[PATH_MAX];
  return ::realpath(path.c_str(), buf) != nullptr ? std::string(buf) : std::string();
}

std::vector<DriverCandidate> driver_candidates(const std::string& explicit_path, const std::string& ld_library_path,
                                               const std::vector<std::string>& cache, const std::string& exclude) {
  std::vector<DriverCandidate> out;
  const std::string excluded = exclude.empty() ? std::string() : real_path(exclude);
  auto add = [&](const std::string& path, const char* source) {
    const std::string rp = real_path(path);
    if (rp.empty() || (!excluded.empty() && rp == excluded)) return;
    for (const auto& c : out) {
      if (real_path(c.path) == rp) return;
    }
    out.push_back({path, source});
  };
  if (!explicit_path.empty()) add(explicit_path, "DRVSHIM_LIBCUDA");
  std::size_t start = 0;
  while (start <= ld_library_path.size()) {
    const std::size_t end = ld_library_path.find(':', start);
    const std::string dir = ld_library_path.substr(start, end == std::string::npos ? std::string::npos : end - start);
    if (!dir.empty()) add(dir + "/libcuda.so.1", "LD_LIBRARY_PATH");
    if (end == std::string::npos) break;
    start = end + 1;
  }
  for (const auto& p : cache) add(p, "ld.so.cache");
  for (const char* dir : {"/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64", "/lib",
                          "/usr/lib", "/usr/local/nvidia/lib64", "/usr/lib/wsl/lib"}) {
    add(std::string(dir) + "/libcuda.so.1", "default directory");
  }
  return out;
}

}  // namespace drvshim::trace_tool
