// SPDX-License-Identifier: Apache-2.0
// A standalone program for the exit-time and environment tests (run by
// tests/unit/test_fork_exit.cpp and test_errors_log_trace.cpp).
//   log-level            prints the level DRVSHIM_LOG produced
//   trace-env            loads and initialises (DRVSHIM_TRACE_FILE is set by the caller)
//   static-objects       global drvshim owners still alive when main returns
//   deinit-at-exit       the driver is deinitialised at exit before the globals die
//   deinit-then-destroy  the driver is deinitialised while owners are destroyed in main
//   static-background    a global BackgroundInit whose helper thread is still
//                        finishing (slowed by a test hook) when main returns
#include <drvshim/drvshim.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <thread>

#include <drvshim/fakecuda.h>
#include "support/test_hooks.hpp"

namespace {

// Constructed before main (empty), destroyed after every atexit handler
// registered later, drvshim's included.
std::optional<drvshim::Driver> g_driver;
std::optional<drvshim::PrimaryContext> g_primary;
std::optional<drvshim::Context> g_context;
std::optional<drvshim::BackgroundInit> g_background;

// Holds the helper thread at its last act (saying it is done) for a while:
// the exit handler and the global's destructor run meanwhile.
bool slow_last_act(drvshim::detail::test_hooks::Point point) {
  if (point == drvshim::detail::test_hooks::Point::background_done) {
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  return true;
}

void deinitialise_driver() { drvshim_fake_set_deinitialized(1); }

drvshim::Driver load() {
  drvshim::LoadOptions options;
  const char* path = std::getenv("DRVSHIM_LIBCUDA");
  if (path == nullptr) {
    std::fprintf(stderr, "DRVSHIM_LIBCUDA must name the fake driver\n");
    std::exit(90);
  }
  options.path = path;
  auto drv = drvshim::Driver::load(options);
  drv.init();
  return drv;
}

}  // namespace

int main(int argc, char** argv) {
  const char* mode = argc > 1 ? argv[1] : "";
  if (std::strcmp(mode, "log-level") == 0) {
    std::printf("level=%s\n", drvshim::log::level_name(drvshim::log::level()));
    return 0;
  }
  if (std::strcmp(mode, "trace-env") == 0) {
    auto drv = load();
    return drv.device_count() == 1 ? 0 : 1;
  }
  if (std::strcmp(mode, "static-objects") == 0 || std::strcmp(mode, "deinit-at-exit") == 0) {
    g_driver = load();
    g_primary = g_driver->device(0).retain_primary_context();
    g_context = g_driver->device(0).create_context();
    if (std::strcmp(mode, "deinit-at-exit") == 0) std::atexit(&deinitialise_driver);
    return 0;
  }
  if (std::strcmp(mode, "static-background") == 0) {
    drvshim::detail::test_hooks::set(&slow_last_act);
    drvshim::BackgroundInitOptions options;
    const char* path = std::getenv("DRVSHIM_LIBCUDA");
    if (path == nullptr) return 90;
    options.load.path = path;
    g_background = drvshim::BackgroundInit::start(options);
    while (!g_background->finished()) std::this_thread::sleep_for(std::chrono::microseconds(100));
    return 0;
  }
  if (std::strcmp(mode, "deinit-then-destroy") == 0) {
    auto drv = load();
    auto a = drv.device(0).retain_primary_context();
    auto b = drv.device(0).create_context();
    auto c = drv.device(0).create_context();
    deinitialise_driver();
    const auto s = a.release(std::nothrow);  // learns CUDA_ERROR_DEINITIALIZED
    if (s.code() != 4) return 2;
    return 0;  // b and c are destroyed without driver calls
  }
  std::fprintf(stderr, "unknown mode \"%s\"\n", mode);
  return 91;
}
