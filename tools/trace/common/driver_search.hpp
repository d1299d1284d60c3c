// SPDX-License-Identifier: Apache-2.0
#pragma once
// Where the real libcuda.so.1 is, as the dynamic loader would find it for a
// program, leaving out drvshim-trace's own interposer.
#include <string>
#include <vector>

namespace drvshim::trace_tool {

struct DriverCandidate {
  std::string path;
  std::string source;  // "DRVSHIM_LIBCUDA", "LD_LIBRARY_PATH", "ld.so.cache", "default directory"
};

// Candidates in the loader's order: `explicit_path` (when set), the
// directories of `ld_library_path`, then `cache` (paths from `ldconfig -p`),
// then the default directories. Files that are `exclude` (compared by real
// path) or do not exist are left out.
std::vector<DriverCandidate> driver_candidates(const std::string& explicit_path, const std::string& ld_library_path,
                                               const std::vector<std::string>& cache, const std::string& exclude);

// The real path of `path` ("" when it does not exist).
std::string real_path(const std::string& path);

}  // namespace drvshim::trace_tool
