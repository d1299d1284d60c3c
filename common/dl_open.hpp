// SPDX-License-Identifier: Apache-2.0
#pragma once
// Loading a shared library from a list of candidates: the one way drvshim
// opens libcuda (driver.cpp) and libnvrtc (ptx/src/nvrtc/nvrtc.cpp).
#include <string>
#include <vector>

namespace drvshim::detail {

struct OpenedLibrary {
  void* handle = nullptr;  // null when no candidate loaded
  std::string path;        // the candidate that loaded, as given
};

// dlopen(RTLD_NOW | RTLD_LOCAL) of each candidate in turn; the first that
// loads wins. `errors` receives dlerror's text for each one that did not.
OpenedLibrary dlopen_first(const std::vector<std::string>& candidates, std::vector<std::string>& errors);

// The file `handle` was loaded from, symbolic links resolved, as the dynamic
// linker reports it; `fallback` when it cannot tell.
std::string loaded_file(void* handle, const std::string& fallback);

}  // namespace drvshim::detail
