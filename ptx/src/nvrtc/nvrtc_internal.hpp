// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the compile cache shares with the NVRTC loader without loading NVRTC:
// where the library is, the toolkit include directory beside it, the rule
// that picks a target, and the flags a compile passes.
#include <drvshim/nvrtc.hpp>

#include <string>
#include <vector>

namespace drvshim::detail {

// The candidates Nvrtc::load tries, in order.
std::vector<std::string> nvrtc_candidates(const NvrtcLoadOptions& options);
// The directories dlopen searches, in its order, for a bare library name that
// libdrvshim asks for: the RPATHs of libdrvshim and of the programs that loaded
// it, LD_LIBRARY_PATH, libdrvshim's RUNPATH (glibc's own list, from dlinfo),
// then the toolkit's and the system's library directories standing in for
// ld.so.cache. Each ends in '/'.
std::vector<std::string> library_search_dirs();
// The file dlopen would most likely map for those candidates, found without
// loading it (the library already loaded, else a path with a slash, else the
// first of library_search_dirs() that has it): the path as found (links not
// resolved), or empty when it cannot be told without dlopen.
std::string locate_nvrtc(const NvrtcLoadOptions& options);
// DRVSHIM_CUDA_INCLUDE (when `use_environment`), else the include directory beside NVRTC, resolved.
std::string find_cuda_include(const std::string& nvrtc_path, bool use_environment = true);
// "sm_XY" when `archs` has the device's XY, else "compute_<highest below>"; empty when none.
std::string choose_target(const std::vector<int>& archs, int cc);
std::vector<std::string> effective_options(const CompileOptions& options, const std::string& cuda_include);

}  // namespace drvshim::detail
