#include "env.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>

#include "log_internal.hpp"

extern char** environ;

namespace drvshim::detail::env {
namespace {

const Variable* find(std::string_view name) noexcept {
  for (const auto& v : variables()) {
    if (name == v.name) return &v;
  }
  return nullptr;
}

std::size_t edit_distance(std::string_view a, std::string_view b) {
  std::vector<std::size_t> row(b.size() + 1);
  for (std::size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (std::size_t i = 1; i <= a.size(); ++i) {
    std::size_t diagonal = row[0];
    row[0] = i;
    for (std::size_t j = 1; j <= b.size(); ++j) {
      const std::size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = up;
    }
  }
  return row[b.size()];
}

}  // namespace

const std::vector<Variable>& variables() noexcept {
  static const std::vector<Variable> table = {
      {"DRVSHIM_LIBCUDA", "a path to the driver library", "libcuda.so.1 as the loader finds it", true},
      {"DRVSHIM_LIBNVRTC", "a path to the NVRTC library", "libnvrtc.so.<major> as the loader finds it", true},
      {"DRVSHIM_CUDA_INCLUDE", "the toolkit's include directory", "found next to NVRTC, else /usr/local/cuda/include",
       true},
      {"DRVSHIM_LOG", "off, error, warn, info, debug, trace", "warn", false},
      {"DRVSHIM_TRACE", "1/true/yes/on or 0/false/no/off", "off", false},
      {"DRVSHIM_TRACE_FILE", "a path to append the trace to", "no trace file", true},
      {"DRVSHIM_SYNC_EACH_OP", "1/true/yes/on or 0/false/no/off", "off", false},
      {"DRVSHIM_CACHE_DIR", "an absolute path", "$XDG_CACHE_HOME/drvshim, else ~/.cache/drvshim", true},
      {"DRVSHIM_CACHE_DISABLE", "1/true/yes/on or 0/false/no/off", "off (the cache is used)", false},
      {"DRVSHIM_CACHE_READONLY", "1/true/yes/on or 0/false/no/off", "off", false},
      {"DRVSHIM_CACHE_MAXSIZE", "a byte count such as 1073741824, 512M or 2G", "1 GiB", false},
      {"DRVSHIM_STAGING_STORES", "auto, stream, demote, plain", "auto", false},
      {"DRVSHIM_RT_POLICY", "lazy, eager, background", "lazy", false},
      {"DRVSHIM_RT_TRACE", "1/true/yes/on or 0/false/no/off", "off", false},
      {"DRVSHIM_TRACE_MAX_BYTES", "a byte count such as 1G or 512M; 0 for no cap", "1 GiB", false},
      // Set by drvshim-trace for the interposer and the programs it traces (tools/trace).
      {"DRVSHIM_TRACE_OUT", "set by drvshim-trace", "-", true},
      {"DRVSHIM_TRACE_MODE", "set by drvshim-trace", "-", false},
      {"DRVSHIM_TRACE_CHILDREN", "set by drvshim-trace", "-", false},
      {"DRVSHIM_TRACE_CUPTI", "set by drvshim-trace", "-", false},
      {"DRVSHIM_TRACE_CUPTI_LIB", "set by drvshim-trace", "-", true},
      {"DRVSHIM_TRACE_EPOCH_NS", "set by drvshim-trace", "-", false},
      {"DRVSHIM_TRACE_INTERPOSER", "set by drvshim-trace", "-", true},
      {"DRVSHIM_TRACE_REAL_LIBCUDA", "set by drvshim-trace", "-", true},
      {"DRVSHIM_TRACE_ROOT_PID", "set by drvshim-trace", "-", false},
      // The fake driver's own (tests/fake), listed so they are not reported as unknown.
      {"DRVSHIM_FAKE_PROFILE", "discrete, tx1, dual, trio, none, stub, old", "discrete", false},
      {"DRVSHIM_FAKE_FAIL", "api:nth:code[,api:nth:code...]", "no injected failure", false},
      {"DRVSHIM_FAKE_CC", "a compute capability such as 90 or 101", "the profile's", false},
      {"DRVSHIM_FAKE_FAIL", "api:nth:code[,...]", "none", false},
      {"DRVSHIM_FAKE_INIT_DELAY_MS", "milliseconds", "0", false},
      {"DRVSHIM_FAKE_PROC_SHIMS", "1", "off", false},
      {"DRVSHIM_FAKE_REPORT", "a path", "none", false},
  };
  return table;
}

std::optional<std::string> raw(std::string_view name) {
  const Variable* v = find(name);
  const std::string key(name);
  const char* value = v != nullptr && v->secure ? ::secure_getenv(key.c_str()) : std::getenv(key.c_str());
  if (value == nullptr || *value == '\0') return std::nullopt;
  return std::string(value);
}

void complain(const char* name, std::string_view value, std::string_view why) {
  const Variable* v = find(name);
  logf(log::Level::warn, "{}=\"{}\" {}; accepted: {}; using the default: {}", name, value, why,
       v != nullptr ? v->accepts : "?", v != nullptr ? v->fallback : "?");
}

bool flag(const char* name, bool fallback) {
  const auto value = raw(name);
  if (!value) return fallback;
  if (const auto parsed = parse_flag(*value)) return *parsed;
  complain(name, *value, "is not a switch");
  return fallback;
}

std::size_t choice(const char* name, std::initializer_list<const char*> choices, std::size_t fallback) {
  const auto value = raw(name);
  if (!value) return fallback;
  const std::string v = lower(*value);
  std::size_t index = 0;
  for (const char* c : choices) {
    if (v == c) return index;
    ++index;
  }
  complain(name, *value, "is not one of the choices");
  return fallback;
}

std::optional<std::uint64_t> bytes(const char* name) {
  const auto value = raw(name);
  if (!value) return std::nullopt;
  if (const auto parsed = parse_bytes(*value)) return parsed;
  complain(name, *value, "is not a byte count");
  return std::nullopt;
}

std::optional<std::string> absolute_path(const char* name) {
  auto value = raw(name);
  if (!value) return std::nullopt;
  if ((*value)[0] == '/') return value;
  complain(name, *value, "is not an absolute path");
  return std::nullopt;
}

void warn_about_unknown_once() noexcept {
  static std::once_flag once;
  std::call_once(once, [] {
    try {
      for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
        const std::string_view entry(*e);
        if (entry.rfind("DRVSHIM_", 0) != 0) continue;
        const std::string_view name = entry.substr(0, entry.find('='));
        if (find(name) != nullptr) continue;
        const Variable* closest = nullptr;
        std::size_t best = SIZE_MAX;
        for (const auto& v : variables()) {
          const std::size_t d = edit_distance(name, v.name);
          if (d < best) {
            best = d;
            closest = &v;
          }
        }
        if (closest != nullptr && best <= 3) {
          logf(log::Level::warn, "{} is not a drvshim variable and is ignored; did you mean {}?", name, closest->name);
        } else {
          logf(log::Level::warn, "{} is not a drvshim variable and is ignored (README.md lists them)", name);
        }
      }
    } catch (...) {
      // Out of memory while warning: the warning is lost, nothing else.
    }
  });
}

}  // namespace drvshim::detail::env
