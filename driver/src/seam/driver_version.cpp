#include <drvshim/device.hpp>

#include "driver_version.hpp"
#include "seam/access.hpp"
#include "seam/core.hpp"

namespace drvshim::detail {

int device_driver_version(const Device& device) noexcept { return detail::Access::core(device)->version; }

}  // namespace drvshim::detail
