// SPDX-License-Identifier: Apache-2.0
// init_order: the steps the CUDA Runtime hides, one explicit call each, with
// the primary context's state printed after every step and the driver-call
// timeline from drvshim's trace at the end. With several devices, every
// device's primary context is shown after each step, and each further device
// then goes through its own retain and release (one primary context per
// device, each created by its first retain and destroyed by its last release).
//
//   ./init_order            (the real driver; DRVSHIM_LIBCUDA may point at another)
#include <drvshim/drvshim.hpp>

#include <cstdio>
#include <string>

namespace {

// One line per device; device 0's on the step's own line.
void show_state(const char* step, const drvshim::Driver& drv) {
  if (!drv.initialized() || drv.device_count() == 0) {
    std::printf("%-32s driver %s\n", step, drv.initialized() ? "initialised, no device" : "not initialised");
    return;
  }
  for (int d = 0; d < drv.device_count(); ++d) {
    const auto state = drv.device(d).primary_context_state();
    std::printf("%-32s primary context of device %d: %-8s flags %-20s", d == 0 ? step : "", d,
                state.active ? "active" : "inactive", drvshim::to_string(state.flags).c_str());
    if (d == 0) std::printf(" current context: %s", drv.current_context() == 0 ? "none" : "set");
    std::printf("\n");
  }
}

}  // namespace

int main() {
  drvshim::trace::enable(true);
  try {
    auto drv = drvshim::Driver::load();
    std::printf("loaded %s (driver %d)\n", drv.loaded_path().c_str(), drv.version());
    show_state("1. Driver::load", drv);
    drv.init();
    show_state("2. Driver::init (cuInit)", drv);
    const auto dev = drv.device(0);
    show_state("3. Driver::device(0)", drv);
    auto primary = dev.retain_primary_context();
    show_state("4. retain_primary_context", drv);
    {
      drvshim::ScopedCurrentContext current(primary.ref());
      show_state("5. ScopedCurrentContext", drv);
    }
    show_state("6. guard left", drv);
    primary.release();
    show_state("7. release", drv);
    // Every further device: its own primary context, its own lifecycle.
    int step = 8;
    for (int d = 1; d < drv.device_count(); ++d) {
      auto other = drv.device(d).retain_primary_context();
      std::string name = std::to_string(step++) + ". retain device " + std::to_string(d);
      show_state(name.c_str(), drv);
      other.release();
      name = std::to_string(step++) + ". release device " + std::to_string(d);
      show_state(name.c_str(), drv);
    }
  } catch (const drvshim::Error& e) {
    std::fprintf(stderr, "init_order: %s\n", e.what());
    return 1;
  }
  std::printf("\nDriver-call timeline (drvshim trace):\n%s",
              drvshim::trace::format_timeline(drvshim::trace::records()).c_str());
  return 0;
}
