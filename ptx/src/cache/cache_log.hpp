// SPDX-License-Identifier: Apache-2.0
#pragma once
// The compile cache's logging, and the one other thing it needs from the
// driver layer's internals (the driver version of a device, for keys of SASS
// the driver linked). Both are reached through from_driver_layer.cpp, the only
// file of the cache that includes driver/src headers.
#include <drvshim/log.hpp>

#include <fmt/format.h>

#include <string_view>

namespace drvshim {
class Device;
}  // namespace drvshim

namespace drvshim::detail {

bool cache_log_enabled(log::Level level) noexcept;
void cache_log_write(log::Level level, std::string_view message) noexcept;
// The CUDA version of the driver `device` belongs to (cuDriverGetVersion, as loaded).
int driver_version_of(const Device& device) noexcept;

// Formats only when the level is enabled; never throws.
template <class... A>
void cache_log(log::Level level, fmt::format_string<A...> format, A&&... args) noexcept {
  if (!cache_log_enabled(level)) return;
  try {
    cache_log_write(level, fmt::format(format, std::forward<A>(args)...));
  } catch (...) {
    // Logging must never turn into a failure of the operation being logged.
  }
}

}  // namespace drvshim::detail
