// SPDX-License-Identifier: Apache-2.0
#include "env.hpp"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <mutex>

#include "log_internal.hpp"

extern char** environ;

namespace drvshim::detail::env {
namespace {

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

std::optional<std::string> raw(Name name) {
  const char* text = value(name);
  if (text == nullptr) return std::nullopt;
  return std::string(text);
}

void complain(const char* name, std::string_view value, std::string_view why) {
  const Variable* v = find(name);
  logf(log::Level::warn, "{}=\"{}\" {}; accepted: {}; using the default: {}", name, value, why,
       v != nullptr ? v->accepts : "?", v != nullptr ? v->fallback : "?");
}

bool flag(Name name, bool fallback) {
  const auto value = raw(name);
  if (!value) return fallback;
  if (const auto parsed = parse_flag(*value)) return *parsed;
  complain(name.c_str(), *value, "is not a switch");
  return fallback;
}

std::size_t choice(Name name, std::initializer_list<const char*> choices, std::size_t fallback) {
  const auto value = raw(name);
  if (!value) return fallback;
  const std::string v = lower(*value);
  std::size_t index = 0;
  for (const char* c : choices) {
    if (v == c) return index;
    ++index;
  }
  complain(name.c_str(), *value, "is not one of the choices");
  return fallback;
}

std::optional<std::uint64_t> bytes(Name name) {
  const auto value = raw(name);
  if (!value) return std::nullopt;
  if (const auto parsed = parse_bytes(*value)) return parsed;
  complain(name.c_str(), *value, "is not a byte count");
  return std::nullopt;
}

std::optional<std::string> absolute_path(Name name) {
  auto value = raw(name);
  if (!value) return std::nullopt;
  if ((*value)[0] == '/') return value;
  complain(name.c_str(), *value, "is not an absolute path");
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
