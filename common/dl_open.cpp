// SPDX-License-Identifier: Apache-2.0
#include "dl_open.hpp"

#include <climits>
#include <cstdlib>

#include <dlfcn.h>
#include <link.h>

namespace drvshim::detail {

OpenedLibrary dlopen_first(const std::vector<std::string>& candidates, std::vector<std::string>& errors) {
  for (const auto& path : candidates) {
    dlerror();
    if (void* h = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL)) return OpenedLibrary{h, path};
    const char* e = dlerror();
    errors.emplace_back(e != nullptr ? e : "unknown dlopen error");
  }
  return {};
}

std::string loaded_file(void* handle, const std::string& fallback) {
  link_map* map = nullptr;
  if (dlinfo(handle, RTLD_DI_LINKMAP, &map) == 0 && map != nullptr && map->l_name != nullptr && *map->l_name != '\0') {
    char resolved[PATH_MAX];
    return realpath(map->l_name, resolved) != nullptr ? std::string(resolved) : std::string(map->l_name);
  }
  return fallback;
}

}  // namespace drvshim::detail
