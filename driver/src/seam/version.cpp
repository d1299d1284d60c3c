// SPDX-License-Identifier: Apache-2.0
#include <drvshim/version.hpp>

namespace drvshim {

LibraryVersion library_version() noexcept {
  return LibraryVersion{DRVSHIM_VERSION_MAJOR, DRVSHIM_VERSION_MINOR, DRVSHIM_VERSION_PATCH, DRVSHIM_VERSION_STRING,
                        DRVSHIM_CUDA_HEADER_VERSION};
}

}  // namespace drvshim
