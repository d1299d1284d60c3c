#pragma once
// The driver version behind a Device, for the layers above the driver: the
// compile cache keys SASS the driver linked by it (ptx/src/cache/from_driver_layer.cpp).
// The driver layer implements it (driver/src/seam/driver_version.cpp), so no other
// layer reaches into DriverCore (core.hpp, private to the driver).

namespace drvshim {
class Device;
}  // namespace drvshim

namespace drvshim::detail {

// The CUDA version of the driver `device` was obtained from, as
// cuDriverGetVersion reported it when drvshim loaded it (1000*major + 10*minor;
// Driver::version() of that driver). Never throws.
int device_driver_version(const Device& device) noexcept;

}  // namespace drvshim::detail
