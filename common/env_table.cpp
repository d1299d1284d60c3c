// SPDX-License-Identifier: Apache-2.0
// The one function that reads the environment (the table is env_table.hpp).
// Kept free of logging and of allocation so that every component can link it:
// libdrvshim, libdrvshim_cudart, drvshim-trace's interposer, audit module and
// preload library (which run inside programs that never asked for drvshim,
// some of them between fork and exec), and the fake driver.
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include <unistd.h>

#include "env.hpp"

extern char** environ;

namespace drvshim::detail::env {

const char* value(Name name) noexcept {
  const Variable& v = name.variable();
  const char* text = v.secure ? ::secure_getenv(v.name) : std::getenv(v.name);
  return text != nullptr && *text != '\0' ? text : nullptr;
}

bool switch_value(Name name, bool fallback) noexcept {
  const char* text = value(name);
  if (text == nullptr) return fallback;
  if (const auto parsed = parse_flag(text)) return *parsed;
  char message[320];
  const int n = std::snprintf(message, sizeof(message),
                              "drvshim: %s=\"%.64s\" is not a switch; accepted: %s; using the default: %s\n",
                              name.c_str(), text, name.variable().accepts, fallback ? "on" : "off");
  if (n > 0) (void)!::write(2, message, std::min(static_cast<std::size_t>(n), sizeof(message) - 1));
  return fallback;
}

void for_each_with_prefix(std::string_view prefix, void (*visit)(std::string_view entry, void* user),
                          void* user) noexcept {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.substr(0, prefix.size()) == prefix) visit(entry, user);
  }
}

}  // namespace drvshim::detail::env
