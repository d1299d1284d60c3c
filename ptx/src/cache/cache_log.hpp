// SPDX-License-Identifier: Apache-2.0
#pragma once
// The compile cache's logging: the library's logger through its public
// interface (drvshim/log.hpp), formatting only when the level is enabled.
#include <drvshim/log.hpp>

#include <fmt/format.h>

namespace drvshim::detail {

// Formats only when the level is enabled; never throws.
template <class... A>
void cache_log(log::Level level, fmt::format_string<A...> format, A&&... args) noexcept {
  if (!log::enabled(level)) return;
  try {
    log::write(level, fmt::format(format, std::forward<A>(args)...));
  } catch (...) {
    // Logging must never turn into a failure of the operation being logged.
  }
}

}  // namespace drvshim::detail
