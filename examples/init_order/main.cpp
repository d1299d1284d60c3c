// init_order: the steps the CUDA Runtime hides, one explicit call each, with
// the primary context's state printed after every step and the driver-call
// timeline from drvshim's trace at the end.
//
//   ./init_order            (the real driver; DRVSHIM_LIBCUDA may point at another)
#include <drvshim/drvshim.hpp>

#include <cstdio>

namespace {

void show_state(const char* step, const drvshim::Driver& drv) {
  if (!drv.initialized() || drv.device_count() == 0) {
    std::printf("%-32s driver %s\n", step, drv.initialized() ? "initialised, no device" : "not initialised");
    return;
  }
  const auto state = drv.device(0).primary_context_state();
  std::printf("%-32s primary context of device 0: %-8s flags %-20s current context: %s\n", step,
              state.active ? "active" : "inactive", drvshim::to_string(state.flags).c_str(),
              drv.current_context() == 0 ? "none" : "set");
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
  } catch (const drvshim::Error& e) {
    std::fprintf(stderr, "init_order: %s\n", e.what());
    return 1;
  }
  std::printf("\nDriver-call timeline (drvshim trace):\n%s",
              drvshim::trace::format_timeline(drvshim::trace::records()).c_str());
  return 0;
}
