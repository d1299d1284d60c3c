// SPDX-License-Identifier: Apache-2.0
#include "cache/cache_environment.hpp"

#include <drvshim/compile_cache.hpp>

#include <cstdlib>

#include "env.hpp"

namespace drvshim {
namespace detail {

std::string default_directory() {
  if (auto d = env::absolute_path("DRVSHIM_CACHE_DIR")) return *d;
  // Where the cache writes: read as DRVSHIM_CACHE_DIR is (ignored in set-uid programs).
  if (const char* x = env::value("XDG_CACHE_HOME"); x != nullptr && x[0] == '/') return std::string(x) + "/drvshim";
  if (const char* h = env::value("HOME"); h != nullptr) return std::string(h) + "/.cache/drvshim";
  return {};
}

}  // namespace detail

CacheOptions CacheOptions::from_environment() {
  CacheOptions o;
  o.directory = detail::default_directory();
  if (detail::env::flag("DRVSHIM_CACHE_DISABLE", false)) o.enabled = false;
  if (detail::env::flag("DRVSHIM_CACHE_READONLY", false)) o.read_only = true;
  if (const auto m = detail::env::bytes("DRVSHIM_CACHE_MAXSIZE")) {
    if (*m > 0) {
      o.max_bytes = *m;
    } else {
      detail::env::complain("DRVSHIM_CACHE_MAXSIZE", "0", "is not a size the cache can keep anything under");
    }
  }
  return o;
}

}  // namespace drvshim
