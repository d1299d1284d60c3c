#include <drvshim/device.hpp>

#include "seam/access.hpp"
#include "seam/core.hpp"
#include "driver_version.hpp"

namespace drvshim::detail {

int device_driver_version(const Device& device) noexcept { return detail::Access::core(device)->version; }

}  // namespace drvshim::detail
