// SPDX-License-Identifier: Apache-2.0
#pragma once
// Logging inside drvshim. Only log.cpp includes spdlog; the rest formats with
// fmt behind a level check, so nothing is formatted for a disabled level.
#include <drvshim/log.hpp>

#include <fmt/format.h>

#include <string_view>

namespace drvshim::detail {

// Whether the level is trace, so every driver call is logged (the seam's slow path).
bool log_traces_calls() noexcept;

template <class... A>
void logf(log::Level level, fmt::format_string<A...> format, A&&... args) noexcept {
  if (!log::enabled(level)) return;
  try {
    log::write(level, fmt::format(format, std::forward<A>(args)...));
  } catch (...) {
    // Logging must never turn into a failure of the operation being logged.
  }
}

}  // namespace drvshim::detail
