// SPDX-License-Identifier: Apache-2.0
// A program outside drvshim's build, as a user would write it: it links
// libdrvshim, loads the driver named by DRVSHIM_LIBCUDA (the fake, in CI) and
// exits 0 when everything it needs works.
#include <drvshim/drvshim.hpp>

#include <cstdio>

int main() {
  const auto v = drvshim::library_version();
  if (v.major != DRVSHIM_VERSION_MAJOR || v.minor != DRVSHIM_VERSION_MINOR) {
    std::fprintf(stderr, "header version %s does not match library version %s\n", DRVSHIM_VERSION_STRING, v.string);
    return 1;
  }
  try {
    auto drv = drvshim::Driver::load();
    drv.init();
    auto primary = drv.device(0).retain_primary_context();
    std::printf("consumer: drvshim %s (CUDA %d headers), driver %d, %d device(s), %s\n", v.string,
                v.cuda_header_version, drv.version(), drv.device_count(), drv.device(0).name().c_str());
  } catch (const drvshim::Error& e) {
    std::fprintf(stderr, "consumer: %s\n", e.what());
    return 2;
  }
  return 0;
}
