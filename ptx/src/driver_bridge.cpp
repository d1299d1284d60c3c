// Everything the compile cache takes from the driver layer's internals, in one
// place: the logger (log_internal.hpp) and a device's driver version
// (DriverCore, core.hpp). When the internal logging target and a public
// driver-version accessor exist, this file is all that changes.
#include <drvshim/device.hpp>

#include "cache_log.hpp"
#include "core.hpp"
#include "log_internal.hpp"

namespace drvshim::detail {

bool cache_log_enabled(log::Level level) noexcept { return log_enabled(level); }

void cache_log_write(log::Level level, std::string_view message) noexcept { log_write(level, message); }

int driver_version_of(const Device& device) noexcept { return device.core()->version; }

}  // namespace drvshim::detail
