// SPDX-License-Identifier: Apache-2.0
#include <drvshim/device_span.hpp>
#include <drvshim/error.hpp>

#include "log_internal.hpp"
#include "support/view_checks.hpp"

namespace drvshim {

bool view_checks_enabled() noexcept {
#ifdef DRVSHIM_CHECK_VIEWS
  return true;
#else
  return false;
#endif
}

namespace detail {

void check_view([[maybe_unused]] std::uint64_t id, [[maybe_unused]] const char* api) {
#ifdef DRVSHIM_CHECK_VIEWS
  if (!owner_alive(id)) {
    throw InvalidArgumentError(api,
                               "a device view was used after the buffer that owned it was freed (or the module "
                               "whose global it views was unloaded)",
                               "keep the DeviceBuffer (or Module) alive while its views are in use");
  }
#endif
}

void throw_subspan(std::size_t offset, std::size_t count, std::size_t size) {
  throw InvalidArgumentError(
      "DeviceSpan::subspan",
      fmt::format("elements [{}, {}+{}) are outside a view of {} elements", offset, offset, count, size));
}

}  // namespace detail

}  // namespace drvshim
