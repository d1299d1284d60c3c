// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the environment says about the compile cache: DRVSHIM_CACHE_* (read
// through the one environment reader, common/env.hpp) and where the cache
// lives by default.
#include <string>

namespace drvshim::detail {

// DRVSHIM_CACHE_DIR (absolute; a relative one is reported and ignored), else
// $XDG_CACHE_HOME/drvshim, else $HOME/.cache/drvshim; empty when none is set.
std::string default_directory();

}  // namespace drvshim::detail
