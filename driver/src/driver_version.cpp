#include <drvshim/device.hpp>

#include "core.hpp"
#include "driver_version.hpp"

namespace drvshim::detail {

int device_driver_version(const Device& device) noexcept { return device.core()->version; }

}  // namespace drvshim::detail
