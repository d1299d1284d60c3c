#include "cache_environment.hpp"

#include <drvshim/compile_cache.hpp>

#include <cstdlib>

#include "cache_log.hpp"

namespace drvshim {
namespace detail {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

bool env_true(const char* name) {
  const std::string v = env(name);
  return !v.empty() && v != "0" && v != "false" && v != "no";
}

std::string default_directory() {
  if (std::string d = env("DRVSHIM_CACHE_DIR"); !d.empty()) return d;
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty() && x[0] == '/') return x + "/drvshim";
  if (std::string h = env("HOME"); !h.empty()) return h + "/.cache/drvshim";
  return {};
}

}  // namespace detail

CacheOptions CacheOptions::from_environment() {
  CacheOptions o;
  o.directory = detail::default_directory();
  if (detail::env_true("DRVSHIM_CACHE_DISABLE")) o.enabled = false;
  if (detail::env_true("DRVSHIM_CACHE_READONLY")) o.read_only = true;
  if (const std::string m = detail::env("DRVSHIM_CACHE_MAXSIZE"); !m.empty()) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(m.c_str(), &end, 10);
    if (end != nullptr && *end == '\0' && v > 0) o.max_bytes = v;
    else detail::cache_log(log::Level::warn, "DRVSHIM_CACHE_MAXSIZE=\"{}\" is not a byte count; keeping {}", m, o.max_bytes);
  }
  return o;
}

}  // namespace drvshim
