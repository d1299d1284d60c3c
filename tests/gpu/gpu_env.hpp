// SPDX-License-Identifier: Apache-2.0
#pragma once
// The real driver for GPU tests, or a clear reason to skip.
#include <gtest/gtest.h>
#include <drvshim/drvshim.hpp>

#include <optional>
#include <string>

namespace drvshim_gpu {

// Loads and initialises the real driver once per process. Returns nullopt and
// sets `why` when there is none (no library, stub, no device).
inline std::optional<drvshim::Driver> real_driver(std::string& why) {
  static std::optional<drvshim::Driver> driver;
  static std::string reason;
  static bool tried = false;
  if (!tried) {
    tried = true;
    try {
      auto d = drvshim::Driver::load();
      d.init();
      if (d.device_count() == 0) {
        reason = "the driver reports no device";
      } else {
        driver = d;
      }
    } catch (const drvshim::Error& e) {
      reason = std::string("no usable CUDA driver on this machine: ") + e.what();
    }
  }
  why = reason;
  return driver;
}

// A GPU test with device 0's primary context retained; skips without a driver.
class GpuContextTest : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string why;
    auto drv = real_driver(why);
    if (!drv) GTEST_SKIP() << why;
    drv_.emplace(*drv);
    primary_.emplace(drv_->device(0).retain_primary_context());
  }
  drvshim::ContextRef ctx() const { return primary_->ref(); }
  std::optional<drvshim::Driver> drv_;
  std::optional<drvshim::PrimaryContext> primary_;
};

}  // namespace drvshim_gpu

// Skips the test (reported by ctest as skipped, never as passed) without a GPU.
#define DRVSHIM_REQUIRE_GPU(var)                           \
  std::string drvshim_why_;                                \
  auto var##_opt = drvshim_gpu::real_driver(drvshim_why_); \
  if (!var##_opt) GTEST_SKIP() << drvshim_why_;            \
  drvshim::Driver& var = *var##_opt
