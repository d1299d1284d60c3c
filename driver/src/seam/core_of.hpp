// SPDX-License-Identifier: Apache-2.0
#pragma once
// The driver state behind an object: the one way library code reaches the
// DriverCore of a context.
#include <drvshim/context.hpp>

#include "seam/access.hpp"
#include "seam/core.hpp"

namespace drvshim::detail {

inline const DriverCore& core_of(const ContextRef& ctx) noexcept { return *detail::Access::core(ctx.device()); }

}  // namespace drvshim::detail
