// SPDX-License-Identifier: Apache-2.0
// Primary and non-primary contexts, the scoped guard, and the context policy.
#include <algorithm>
#include <thread>

#include "contract_cases.hpp"
#include "fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

class Primary : public FakeDriverTest {};

TEST_F(Primary, StateIsReadableWithoutCreatingTheContext) {
  Driver drv = load_and_init();
  const Device dev = drv.device(0);
  const auto state = dev.primary_context_state();
  EXPECT_FALSE(state.active);
  EXPECT_EQ(state.flags, ContextFlags::sched_auto);
  EXPECT_EQ(drvshim_fake_primary_active(0), 0);
  EXPECT_EQ(drvshim_fake_call_count("cuDevicePrimaryCtxRetain"), 0u);
}

TEST_F(Primary, RetainActivatesReleaseDeactivatesAndTheLedgerCountsBoth) {
  Driver drv = load_and_init();
  const Device dev = drv.device(0);
  {
    PrimaryContext primary = dev.retain_primary_context();
    EXPECT_TRUE(primary);
    EXPECT_FALSE(primary.adopted());
    EXPECT_TRUE(dev.primary_context_state().active);
    EXPECT_EQ(drvshim_fake_primary_refcount(0), 1);
    EXPECT_EQ(dev.primary_context_ledger().retains, 1u);
    EXPECT_EQ(dev.primary_context_ledger().outstanding(), 1u);
    EXPECT_FALSE(primary.ref().is_current()) << "retaining does not make the context current";
  }
  EXPECT_FALSE(dev.primary_context_state().active);
  EXPECT_EQ(dev.primary_context_ledger().releases, 1u);
  EXPECT_EQ(dev.primary_context_ledger().outstanding(), 0u);
}

TEST_F(Primary, AnAlreadyActiveContextIsAdoptedLoggedAndMarkedInTheTrace) {
  Driver drv = load_and_init();
  activate_externally(0, 0x04);
  std::vector<std::string> lines;
  log::set_level(log::Level::info);
  log::set_sink([&](log::Level, std::string_view m) { lines.emplace_back(m); });
  trace::enable(true);
  PrimaryContext primary = drv.device(0).retain_primary_context();
  EXPECT_TRUE(primary.adopted());
  const auto records = trace::records();
  const auto adopt =
      std::find_if(records.begin(), records.end(), [](const auto& r) { return r.api == "adopt-primary-context"; });
  ASSERT_NE(adopt, records.end());
  EXPECT_NE(adopt->args.find("flags sched_blocking_sync"), std::string::npos) << adopt->args;
  EXPECT_TRUE(std::any_of(lines.begin(), lines.end(), [](const std::string& l) {
    return l.find("was already active") != std::string::npos && l.find("another component") != std::string::npos;
  }));
  EXPECT_EQ(drvshim_fake_primary_refcount(0), 2);
}

// Before: every retain of an active context said "another component activated
// it", also drvshim's own second retain.
TEST_F(Primary, DrvshimsOwnSecondRetainIsNotAnAdoption) {
  Driver drv = load_and_init();
  const Device dev = drv.device(0);
  std::vector<std::string> lines;
  log::set_level(log::Level::debug);
  log::set_sink([&](log::Level, std::string_view m) { lines.emplace_back(m); });
  trace::enable(true);
  {
    PrimaryContext first = dev.retain_primary_context();
    PrimaryContext second = dev.retain_primary_context();
    EXPECT_FALSE(first.adopted());
    EXPECT_FALSE(second.adopted()) << "drvshim's first retain activated it";
    EXPECT_EQ(second.ref().address(), first.ref().address());
  }
  const auto records = trace::records();
  EXPECT_TRUE(
      std::none_of(records.begin(), records.end(), [](const auto& r) { return r.api == "adopt-primary-context"; }));
  const auto again =
      std::find_if(records.begin(), records.end(), [](const auto& r) { return r.api == "retain-primary-context"; });
  ASSERT_NE(again, records.end());
  EXPECT_NE(again->args.find("already retained by drvshim (1 outstanding), activated by drvshim"), std::string::npos)
      << again->args;
  EXPECT_TRUE(std::none_of(lines.begin(), lines.end(),
                           [](const std::string& l) { return l.find("another component") != std::string::npos; }));
}

TEST_F(Primary, RetainsWhileHoldingAnAdoptedContextAreAdoptionsTooAndTheLedgerStartsOverWhenAllAreReleased) {
  Driver drv = load_and_init();
  const Device dev = drv.device(0);
  activate_externally(0, 0x00);
  {
    PrimaryContext first = dev.retain_primary_context();
    PrimaryContext second = dev.retain_primary_context();
    EXPECT_TRUE(first.adopted());
    EXPECT_TRUE(second.adopted()) << "the activation drvshim shares is still the other component's";
  }
  // drvshim holds none now; the other component still does: a new retain adopts again.
  PrimaryContext third = dev.retain_primary_context();
  EXPECT_TRUE(third.adopted());
}

TEST_F(Primary, FlagsAreSettableBeforeActivation) {
  Driver drv = load_and_init();
  const Device dev = drv.device(0);
  dev.set_primary_context_flags(ContextFlags::sched_blocking_sync);
  EXPECT_EQ(dev.primary_context_state().flags, ContextFlags::sched_blocking_sync);
  PrimaryContext primary = dev.retain_primary_context();
  EXPECT_EQ(primary.ref().flags(), ContextFlags::sched_blocking_sync);
}

TEST_F(Primary, FlagsAfterAnotherComponentActivatedItAreRefusedWithTheReason) {
  Driver drv = load_and_init();
  activate_externally(0, 0x00);
  const Device dev = drv.device(0);
  auto e = expect_throw<ContextStateError>([&] { dev.set_primary_context_flags(ContextFlags::sched_spin); });
  EXPECT_EQ(e.api(), "cuDevicePrimaryCtxSetFlags");
  EXPECT_NE(std::string(e.what()).find("already active with flags sched_auto"), std::string::npos) << e.what();
  EXPECT_NE(e.hint().find("CUDA Runtime"), std::string::npos) << e.hint();
  EXPECT_EQ(drvshim_fake_call_count("cuDevicePrimaryCtxSetFlags"), 0u);
  dev.set_primary_context_flags(ContextFlags::sched_auto);  // the flags it has: a no-op
  EXPECT_EQ(drvshim_fake_call_count("cuDevicePrimaryCtxSetFlags"), 0u);
}

TEST_F(Primary, OwnersAreMoveOnlyAndEmptyAfterMoveOrRelease) {
  Driver drv = load_and_init();
  PrimaryContext a = drv.device(0).retain_primary_context();
  PrimaryContext b = std::move(a);
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from objects are documented as empty
  EXPECT_TRUE(b);
  auto e = expect_throw<InvalidArgumentError>([&] { (void)a.ref(); });
  EXPECT_NE(std::string(e.what()).find("empty"), std::string::npos);
  b.release();
  EXPECT_FALSE(b);
  b.release();  // releasing an empty owner is a no-op
  EXPECT_EQ(drvshim_fake_call_count("cuDevicePrimaryCtxRelease"), 1u);
  static_assert(!std::is_copy_constructible_v<PrimaryContext>);
  static_assert(std::is_nothrow_move_constructible_v<PrimaryContext>);
}

TEST_F(Primary, AFailedReleaseThrowsAndTheNoThrowTwinReports) {
  Driver drv = load_and_init();
  PrimaryContext a = drv.device(0).retain_primary_context();
  drvshim_fake_fail_call("cuDevicePrimaryCtxRelease", 1, CUDA_ERROR_UNKNOWN);
  auto e = expect_throw<CudaError>([&] { a.release(); });
  EXPECT_EQ(e.api(), "cuDevicePrimaryCtxRelease");
  EXPECT_FALSE(a) << "the owner is empty either way";
  EXPECT_EQ(drvshim_fake_primary_refcount(0), 1) << "the driver kept the retain it refused to release";
  note_leftover_retain(0);
  PrimaryContext b = drv.device(0).retain_primary_context();
  drvshim_fake_fail_call("cuDevicePrimaryCtxRelease", 1, CUDA_ERROR_INVALID_CONTEXT);
  const Status s = b.release(std::nothrow);
  EXPECT_EQ(s.code(), 201);
  EXPECT_EQ(s.to_string(), "cuDevicePrimaryCtxRelease: CUDA_ERROR_INVALID_CONTEXT (201)");
  note_leftover_retain(0);
  EXPECT_EQ(drv.device(0).primary_context_ledger().releases, 0u) << "only successful releases are counted";
}

class NonPrimary : public FakeDriverTest {};

TEST_F(NonPrimary, CreateLeavesTheCallersStackUnchangedAndDestroyFreesIt) {
  Driver drv = load_and_init();
  Context ctx = drv.device(0).create_context(ContextFlags::sched_yield);
  EXPECT_EQ(drvshim_fake_live_contexts(), 1);
  EXPECT_EQ(drvshim_fake_ctx_stack_depth(), 0);
  EXPECT_EQ(ctx.ref().flags(), ContextFlags::sched_yield);
  EXPECT_FALSE(ctx.ref().is_primary());
  ctx.destroy();
  EXPECT_FALSE(ctx);
  EXPECT_EQ(drvshim_fake_live_contexts(), 0);
  ctx.destroy();  // no-op on an empty owner
  EXPECT_EQ(drvshim_fake_call_count("cuCtxDestroy"), 1u);
}

TEST_F(NonPrimary, CreateFailureLeavesNothingBehind) {
  Driver drv = load_and_init();
  drvshim_fake_fail_call("cuCtxCreate", 1, CUDA_ERROR_OUT_OF_MEMORY);
  auto e = expect_throw<CudaError>([&] { (void)drv.device(0).create_context(); });
  EXPECT_EQ(e.api(), "cuCtxCreate");
  EXPECT_NE(e.objects().find("device 0, flags sched_auto"), std::string::npos) << e.objects();
}

TEST_F(NonPrimary, APopFailureAfterCreateDestroysTheNewContext) {
  Driver drv = load_and_init();
  drvshim_fake_fail_call("cuCtxPopCurrent", 1, CUDA_ERROR_UNKNOWN);
  expect_throw<CudaError>([&] { (void)drv.device(0).create_context(); });
  // The context stays current when its pop failed; the owner destroyed it, which also pops it.
  EXPECT_EQ(drvshim_fake_live_contexts(), 0);
}

TEST_F(NonPrimary, TheOldDriverUsesTheLegacyCreateCall) {
  drvshim_fake_set_profile("old");
  Driver drv = load_and_init();
  ASSERT_FALSE(drv.missing_functions().empty());
  Context ctx = drv.device(0).create_context();
  EXPECT_TRUE(ctx);
}

class Policy : public FakeDriverTest {
 protected:
  const char* profile() const override { return "dual"; }
};

TEST_F(Policy, ACallOnAnotherDevicesContextPushesItAndRestoresTheCallers) {
  Driver drv = load_and_init();
  PrimaryContext p0 = drv.device(0).retain_primary_context();
  PrimaryContext p1 = drv.device(1).retain_primary_context();
  ScopedCurrentContext current(p0.ref());
  ASSERT_EQ(drv.current_context(), p0.ref().address());
  drvshim_fake_clear_call_log();
  const MemoryInfo info = p1.ref().memory_info();
  EXPECT_EQ(info.total, drv.device(1).total_memory());
  EXPECT_EQ(drv.current_context(), p0.ref().address());
  const std::vector<std::string> expected = {"cuCtxGetCurrent", "cuCtxPushCurrent", "cuMemGetInfo",   "cuCtxPopCurrent",
                                             "cuDeviceGet",     "cuDeviceTotalMem", "cuCtxGetCurrent"};
  EXPECT_EQ(fake_calls(), expected);
}

TEST_F(Policy, NoPushWhenTheContextIsAlreadyCurrent) {
  Driver drv = load_and_init();
  PrimaryContext p1 = drv.device(1).retain_primary_context();
  ScopedCurrentContext current(p1.ref());
  drvshim_fake_clear_call_log();
  p1.ref().synchronize();
  const std::vector<std::string> expected = {"cuCtxGetCurrent", "cuCtxSynchronize"};
  EXPECT_EQ(fake_calls(), expected);
}

TEST_F(Policy, FreshThreadsNeedNoSetupAndEndWithAnEmptyStack) {
  Driver drv = load_and_init();
  PrimaryContext p0 = drv.device(0).retain_primary_context();
  Context c1 = drv.device(1).create_context();
  std::string failure;
  int depth_after = -1;
  std::thread worker([&] {
    try {
      p0.ref().synchronize();
      (void)c1.ref().memory_info();
      depth_after = drvshim_fake_ctx_stack_depth();
    } catch (const std::exception& e) {
      failure = e.what();
    }
  });
  worker.join();
  EXPECT_EQ(failure, "");
  EXPECT_EQ(depth_after, 0);
}

TEST_F(Policy, TheStackIsRestoredWhenTheCallFails) {
  Driver drv = load_and_init();
  PrimaryContext p1 = drv.device(1).retain_primary_context();
  drvshim_fake_fail_call("cuCtxSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED);
  auto e = expect_throw<CudaError>([&] { p1.ref().synchronize(); });
  EXPECT_EQ(e.code(), 719);
  EXPECT_NE(e.objects().find("primary context"), std::string::npos);
  EXPECT_EQ(drvshim_fake_ctx_stack_depth(), 0);
}

TEST_F(Policy, ScopedGuardPopsOnExceptions) {
  Driver drv = load_and_init();
  PrimaryContext p0 = drv.device(0).retain_primary_context();
  try {
    ScopedCurrentContext guard(p0.ref());
    EXPECT_EQ(drvshim_fake_ctx_stack_depth(), 1);
    throw std::runtime_error("user code failed");
  } catch (const std::runtime_error&) {
  }
  EXPECT_EQ(drvshim_fake_ctx_stack_depth(), 0);
}

// ---- contract cases (the same table runs on the real driver in tests/gpu) ----------

class Contract : public FakeDriverTest {};

TEST_F(Contract, FakeAgreesWithTheDocumentedDriverBehaviour) {
  Driver drv = load_and_init();
  for (const auto& c : drvshim_test::run_contract_cases(drv)) {
    EXPECT_EQ(c.observed, c.expected) << c.name;
  }
}

}  // namespace
