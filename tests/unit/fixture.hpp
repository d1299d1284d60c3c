// SPDX-License-Identifier: Apache-2.0
#pragma once
// The fixture every fake-driver test uses: selects a profile, and after the
// test checks the invariants that must hold after any sequence of drvshim
// calls: the thread's context stack is as it was, nothing leaked, no misuse
// of driver handles, every primary-context retain of drvshim released.
#include <gtest/gtest.h>
#include <drvshim/drvshim.hpp>

#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <cuda.h>

#include <drvshim/fakecuda.h>

namespace drvshim_test {

inline drvshim::Driver load_fake() {
  drvshim::LoadOptions options;
  options.path = DRVSHIM_TEST_FAKE_PATH;
  return drvshim::Driver::load(options);
}

inline drvshim::Driver load_and_init() {
  auto drv = load_fake();
  drv.init();
  return drv;
}

// The toolkit's real NVRTC (no GPU needed); its absence fails the test with the paths tried.
inline drvshim::Nvrtc load_nvrtc() {
  try {
    return drvshim::Nvrtc::load();
  } catch (const drvshim::NvrtcNotFoundError& e) {
    throw std::runtime_error(std::string("the CUDA toolkit's NVRTC is required for these tests: ") + e.what());
  }
}

// The fake's call log since the last clear, as base names.
inline std::vector<std::string> fake_calls() {
  std::vector<std::string> out;
  for (size_t i = 0; i < drvshim_fake_call_log_size(); ++i) out.emplace_back(drvshim_fake_call_log_entry(i));
  return out;
}

// Runs `f`, returning the drvshim error it throws (or fails the test).
template <class E = drvshim::Error, class F>
E expect_throw(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e;
  } catch (const std::exception& other) {
    ADD_FAILURE() << "threw a different exception: " << other.what();
    throw;
  }
  ADD_FAILURE() << "did not throw";
  throw std::runtime_error("expected an exception");
}

class FakeDriverTest : public ::testing::Test {
 protected:
  virtual const char* profile() const { return "discrete"; }

  void SetUp() override {
    ASSERT_EQ(drvshim_fake_set_profile(profile()), 0);
    drvshim::trace::enable(false);
    drvshim::trace::clear();
    drvshim::log::set_sink({});
    drvshim::log::set_level(drvshim::log::Level::warn);
    stack_depth_ = drvshim_fake_ctx_stack_depth();
    stack_top_ = drvshim_fake_ctx_stack_top();
  }

  void TearDown() override {
    drvshim::log::set_sink({});
    drvshim::trace::enable(false);
    EXPECT_EQ(drvshim_fake_ctx_stack_depth(), stack_depth_) << "a drvshim call changed the context stack";
    EXPECT_EQ(drvshim_fake_ctx_stack_top(), stack_top_) << "a drvshim call changed the current context";
    EXPECT_EQ(drvshim_fake_misuse_count(), 0u) << drvshim_fake_last_misuse();
    EXPECT_EQ(drvshim_fake_live_contexts(), 0) << "a non-primary context leaked";
    EXPECT_EQ(drvshim_fake_live_device_allocations(), 0) << "device memory leaked";
    EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 0) << "pinned host memory leaked";
    EXPECT_EQ(drvshim_fake_live_registrations(), 0) << "a host registration leaked";
    EXPECT_EQ(drvshim_fake_live_streams(), 0) << "a stream leaked";
    EXPECT_EQ(drvshim_fake_live_events(), 0) << "an event leaked";
    EXPECT_EQ(drvshim_fake_live_graphs(), 0) << "a graph or executable graph leaked";
    EXPECT_EQ(drvshim_fake_live_modules(), 0) << "a module leaked";
    // Every device of the profile (the count ends where the fake answers -1).
    for (int d = 0; d < kMaxDevices; ++d) {
      const int refs = drvshim_fake_primary_refcount(d);
      if (refs < 0) break;
      EXPECT_EQ(refs, external_retains_[d]) << "primary context of device " << d << " not released";
    }
  }

  // Records a retain made "by another component" so TearDown expects it.
  void activate_externally(int device, unsigned flags) {
    drvshim_fake_activate_primary_externally(device, flags);
    ++external_retains_[device];
  }
  // A retain the driver kept because a release failed on purpose.
  void note_leftover_retain(int device) { ++external_retains_[device]; }

 private:
  int stack_depth_ = 0;
  void* stack_top_ = nullptr;
  static constexpr int kMaxDevices = 8;
  int external_retains_[kMaxDevices] = {};
};

// A fake-driver test with the driver initialised and device 0's primary
// context retained for the test's duration.
class PrimaryContextTest : public FakeDriverTest {
 protected:
  void SetUp() override {
    FakeDriverTest::SetUp();
    drv_.emplace(load_and_init());
    primary_.emplace(drv_->device(0).retain_primary_context());
  }
  void TearDown() override {
    primary_.reset();
    drv_.reset();
    FakeDriverTest::TearDown();
  }
  drvshim::ContextRef ctx() const { return primary_->ref(); }
  std::optional<drvshim::Driver> drv_;
  std::optional<drvshim::PrimaryContext> primary_;
};

}  // namespace drvshim_test
