#include <drvshim/device.hpp>

#include "access.hpp"
#include "core.hpp"
#include "driver_version.hpp"

namespace drvshim::detail {

int device_driver_version(const Device& device) noexcept { return detail::Access::core(device)->version; }

}  // namespace drvshim::detail
