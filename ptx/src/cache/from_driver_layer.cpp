// Everything the compile cache takes from below its own layer besides the
// driver's public API, in one place: the logger (log_internal.hpp) and a
// device's driver version (driver_version.hpp), both from the drvshim_internal
// target (common/).
#include <drvshim/device.hpp>

#include "cache/cache_log.hpp"
#include "driver_version.hpp"
#include "log_internal.hpp"

namespace drvshim::detail {

bool cache_log_enabled(log::Level level) noexcept { return log_enabled(level); }

void cache_log_write(log::Level level, std::string_view message) noexcept { log_write(level, message); }

int driver_version_of(const Device& device) noexcept { return device_driver_version(device); }

}  // namespace drvshim::detail
