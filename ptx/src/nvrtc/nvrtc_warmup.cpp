// SPDX-License-Identifier: Apache-2.0
// NVRTC's warm-up as a background task (nvrtc_warmup.hpp). A task of the
// ptx layer handed to the driver layer's BackgroundInit, which knows nothing
// of NVRTC.
#include <drvshim/nvrtc_warmup.hpp>

#include <utility>

namespace drvshim {

BackgroundTask nvrtc_warmup(NvrtcLoadOptions options) {
  return BackgroundTask{"nvrtc-warmup", [options = std::move(options)] {
                          const Nvrtc nvrtc = Nvrtc::load(options);
                          CompileOptions compile;
                          // CUBIN: the first compile also sets up NVRTC's ptxas, as a program's sm_XY compile does.
                          compile.arch = nvrtc.supported_architectures().empty()
                                             ? std::string("compute_75")
                                             : "sm_" + std::to_string(nvrtc.supported_architectures().front());
                          compile.cuda_includes = false;
                          (void)nvrtc.compile("extern \"C\" __global__ void drvshim_nvrtc_warmup() {}\n",
                                              "drvshim_nvrtc_warmup.cu", compile);
                        }};
}

}  // namespace drvshim
