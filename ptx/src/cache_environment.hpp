#pragma once
// What the environment says about the compile cache: DRVSHIM_CACHE_* and
// where the cache lives by default.
#include <string>

namespace drvshim::detail {

// The variable's value; empty when unset.
std::string env(const char* name);
// Set to anything but "", "0", "false" or "no".
bool env_true(const char* name);
// DRVSHIM_CACHE_DIR, else $XDG_CACHE_HOME/drvshim, else $HOME/.cache/drvshim; empty when none is set.
std::string default_directory();

}  // namespace drvshim::detail
