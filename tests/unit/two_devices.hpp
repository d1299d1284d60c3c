// SPDX-License-Identifier: Apache-2.0
#pragma once
// The fixture of the several-GPU tests: the fake's dual profile, the driver
// initialised and both devices' primary contexts retained for the test; after
// it, no peer access may be left enabled (on top of the usual invariants).
#include <drvshim/drvshim.hpp>

#include <optional>

#include "fixture.hpp"

namespace drvshim_test {

inline void* native(const drvshim::ContextRef& c) { return reinterpret_cast<void*>(c.address()); }
inline void* native(const drvshim::StreamRef& s) { return reinterpret_cast<void*>(s.native()); }

// Two devices, each primary context retained for the test.
class TwoDevices : public FakeDriverTest {
 protected:
  const char* profile() const override { return "dual"; }
  void SetUp() override {
    FakeDriverTest::SetUp();
    drv_.emplace(load_and_init());
    p0_.emplace(drv_->device(0).retain_primary_context());
    p1_.emplace(drv_->device(1).retain_primary_context());
  }
  void TearDown() override {
    EXPECT_EQ(drvshim_fake_peer_access_count(), 0) << "peer access left enabled";
    p0_.reset();
    p1_.reset();
    drv_.reset();
    FakeDriverTest::TearDown();
  }
  drvshim::ContextRef c0() const { return p0_->ref(); }
  drvshim::ContextRef c1() const { return p1_->ref(); }
  std::optional<drvshim::Driver> drv_;
  std::optional<drvshim::PrimaryContext> p0_;
  std::optional<drvshim::PrimaryContext> p1_;
};

}  // namespace drvshim_test
