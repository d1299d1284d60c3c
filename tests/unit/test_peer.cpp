// SPDX-License-Identifier: Apache-2.0
// Several GPUs against the fake's dual (and trio) profile: the link's
// attributes as tri-states, peer access as an owned step (shared, adopted,
// refused, failing), peer copies and unified-address copies between two
// devices, events and stream waits across devices, and several threads each
// on another device.
#include <drvshim/drvshim.hpp>

#include <atomic>
#include <chrono>
#include <cstring>
#include <future>
#include <span>
#include <thread>
#include <vector>

#include "fixture.hpp"
#include "peer_contract_cases.hpp"
#include "raw_driver.hpp"
#include "support/test_hooks.hpp"
#include "two_devices.hpp"
#include "vadd_ptx.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

std::size_t count_calls(const std::vector<std::string>& calls, const std::string& api) {
  return static_cast<std::size_t>(std::count(calls.begin(), calls.end(), api));
}

// ---- the link ------------------------------------------------------------------------------------

TEST_F(TwoDevices, TheLinkIsReadAsTriStates) {
  const PeerLink link = peer_link(drv_->device(0), drv_->device(1));
  EXPECT_EQ(link.from, 0);
  EXPECT_EQ(link.to, 1);
  EXPECT_TRUE(link.can_access);
  EXPECT_EQ(link.access_supported, AttributeValue::of(1));
  EXPECT_EQ(link.native_atomic_supported, AttributeValue::of(1));
  EXPECT_EQ(link.cuda_array_access_supported, AttributeValue::of(1));
  EXPECT_EQ(link.only_partial_native_atomic_supported, AttributeValue::of(0));
  EXPECT_EQ(link.performance_rank, AttributeValue::of(0));
  EXPECT_EQ(
      link.to_string(),
      "device 0 -> 1: peer access yes, performance rank 0, native atomics 1, partial native atomics 0, CUDA array "
      "access 1");

  drvshim_fake_set_p2p_attribute(1, 0, CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK, 3);
  drvshim_fake_set_p2p_attribute_error(1, 0, CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED, CUDA_ERROR_NOT_SUPPORTED);
  drvshim_fake_set_p2p_attribute_error(1, 0, CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED,
                                       CUDA_ERROR_INVALID_VALUE);
  const PeerLink back = peer_link(drv_->device(1), drv_->device(0));
  EXPECT_EQ(back.performance_rank, AttributeValue::of(3)) << "the direction matters: 1 -> 0 is read, not 0 -> 1";
  EXPECT_EQ(back.native_atomic_supported, AttributeValue::unsupported());
  EXPECT_EQ(back.cuda_array_access_supported, AttributeValue::unknown());
  EXPECT_EQ(peer_attribute(drv_->device(0), drv_->device(1), PeerAttribute::performance_rank), AttributeValue::of(0));

  drvshim_fake_set_p2p_attribute_error(0, 1, CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED, CUDA_ERROR_INVALID_DEVICE);
  auto e = expect_throw<CudaError>(
      [&] { (void)peer_attribute(drv_->device(0), drv_->device(1), PeerAttribute::access_supported); });
  EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_DEVICE);
  EXPECT_EQ(e.objects(), "link from device 0 to device 1, attribute access_supported (2)");
  EXPECT_STREQ(peer_attribute_name(PeerAttribute::only_partial_native_atomic_supported),
               "only_partial_native_atomic_supported");
}

TEST_F(TwoDevices, ALinkOfADeviceWithItselfIsRefusedBeforeTheDriver) {
  drvshim_fake_clear_call_log();
  auto e = expect_throw<InvalidArgumentError>(
      [&] { (void)peer_attribute(drv_->device(1), drv_->device(1), PeerAttribute::access_supported); });
  EXPECT_NE(std::string(e.what()).find("device 1 and itself"), std::string::npos) << e.what();
  EXPECT_EQ(drvshim_fake_call_count("cuDeviceGetP2PAttribute"), 0u);
}

TEST(PeerTrio, TheMatrixFollowsTheProfileInBothDirections) {
  ASSERT_EQ(drvshim_fake_set_profile("trio"), 0);
  {
    auto drv = load_and_init();
    ASSERT_EQ(drv.device_count(), 3);
    for (int a = 0; a < 3; ++a) {
      for (int b = 0; b < 3; ++b) {
        if (a == b) continue;
        const bool expected = a != 2 && b != 2;
        const PeerLink link = peer_link(drv.device(a), drv.device(b));
        EXPECT_EQ(link.can_access, expected) << a << " -> " << b;
        EXPECT_EQ(link.access_supported, AttributeValue::of(expected ? 1 : 0)) << a << " -> " << b;
        EXPECT_EQ(link.native_atomic_supported, AttributeValue::of(expected ? 1 : 0)) << a << " -> " << b;
      }
    }
  }
  EXPECT_EQ(drvshim_fake_misuse_count(), 0u);
  ASSERT_EQ(drvshim_fake_set_profile("discrete"), 0);
}

// ---- peer access -----------------------------------------------------------------------------------

TEST_F(TwoDevices, EnablingIsOneWayOwnedAndRestoresTheContextStack) {
  drvshim_fake_clear_call_log();
  {
    PeerAccess access = PeerAccess::enable(c0(), c1());
    EXPECT_TRUE(access);
    EXPECT_FALSE(access.adopted());
    EXPECT_FALSE(access.shared());
    EXPECT_EQ(access.from().address(), c0().address());
    EXPECT_EQ(access.to().address(), c1().address());
    EXPECT_EQ(drvshim_fake_peer_access_enabled(native(c0()), native(c1())), 1);
    EXPECT_EQ(drvshim_fake_peer_access_enabled(native(c1()), native(c0())), 0) << "access is one-way";
    const auto calls = fake_calls();
    // from made current for the call (the driver enables access of the *current* context), then restored.
    const std::vector<std::string> expected = {"cuDeviceCanAccessPeer", "cuCtxGetCurrent", "cuCtxPushCurrent",
                                               "cuCtxEnablePeerAccess", "cuCtxPopCurrent"};
    EXPECT_EQ(calls, expected);
  }
  EXPECT_EQ(drvshim_fake_peer_access_enabled(native(c0()), native(c1())), 0) << "the owner disabled it";
  EXPECT_EQ(drvshim_fake_call_count("cuCtxDisablePeerAccess"), 1u);
}

TEST_F(TwoDevices, OwnersOfOneDirectionShareItAndTheLastOneDisablesIt) {
  trace::enable(true);
  std::optional<PeerAccess> first(PeerAccess::enable(c0(), c1()));
  PeerAccess second = PeerAccess::enable(c0(), c1());
  EXPECT_TRUE(second.shared());
  EXPECT_FALSE(second.adopted()) << "drvshim's own second owner is not another component's access";
  PeerAccess reverse = PeerAccess::enable(c1(), c0());
  EXPECT_FALSE(reverse.shared()) << "the other direction is another enablement";
  first.reset();
  EXPECT_EQ(drvshim_fake_peer_access_enabled(native(c0()), native(c1())), 1) << "still held by the second owner";
  EXPECT_EQ(drvshim_fake_call_count("cuCtxDisablePeerAccess"), 0u);
  second.disable();
  EXPECT_FALSE(second);
  EXPECT_EQ(drvshim_fake_peer_access_enabled(native(c0()), native(c1())), 0);
  EXPECT_EQ(drvshim_fake_call_count("cuCtxDisablePeerAccess"), 1u);
  second.disable();  // empty: nothing happens
  EXPECT_EQ(drvshim_fake_call_count("cuCtxDisablePeerAccess"), 1u);
  // A moved-from owner is empty; the moved-to one disables once.
  PeerAccess moved = std::move(reverse);
  EXPECT_FALSE(reverse);                   // NOLINT(bugprone-use-after-move): checking the documented state
  moved = PeerAccess::enable(c0(), c1());  // the old access (1 -> 0) is disabled by the assignment
  EXPECT_EQ(drvshim_fake_peer_access_enabled(native(c1()), native(c0())), 0);
  EXPECT_EQ(drvshim_fake_peer_access_enabled(native(c0()), native(c1())), 1);
  moved.disable();
  std::vector<std::string> marks;
  for (const auto& r : trace::records()) {
    if (r.kind == trace::Kind::event && r.api.find("peer-access") != std::string::npos) marks.push_back(r.api);
  }
  // first (0 -> 1), reverse (1 -> 0), second's disable, the new 0 -> 1 enabled before the assignment
  // disables the old 1 -> 0, then its own disable.
  const std::vector<std::string> expected = {"enable-peer-access", "enable-peer-access",  "disable-peer-access",
                                             "enable-peer-access", "disable-peer-access", "disable-peer-access"};
  EXPECT_EQ(marks, expected);
}

TEST_F(TwoDevices, AccessEnabledByAnotherComponentIsAdoptedAndNeverDisabled) {
  ASSERT_EQ(drvshim_fake_enable_peer_access_externally(native(c0()), native(c1())), CUDA_SUCCESS);
  trace::enable(true);
  std::vector<std::string> lines;
  log::set_level(log::Level::info);
  log::set_sink([&](log::Level, std::string_view line) { lines.emplace_back(line); });
  {
    PeerAccess access = PeerAccess::enable(c0(), c1());
    EXPECT_TRUE(access.adopted());
    EXPECT_FALSE(access.shared());
  }
  log::set_sink({});
  EXPECT_EQ(drvshim_fake_peer_access_enabled(native(c0()), native(c1())), 1) << "another component's access stays";
  EXPECT_EQ(drvshim_fake_call_count("cuCtxDisablePeerAccess"), 0u);
  bool marked = false;
  for (const auto& r : trace::records()) marked = marked || r.api == "adopt-peer-access";
  EXPECT_TRUE(marked);
  bool logged = false;
  for (const auto& l : lines) logged = logged || l.find("already enabled by another component") != std::string::npos;
  EXPECT_TRUE(logged);
  ASSERT_EQ(drvshim_fake_disable_peer_access_externally(native(c0()), native(c1())), CUDA_SUCCESS);
}

TEST_F(TwoDevices, AnOwnerWhoseAccessAnotherComponentEndedNeverEndsALaterOne) {
  std::optional<PeerAccess> old(PeerAccess::enable(c0(), c1()));
  // Another component disables it behind drvshim's back; drvshim then enables it afresh.
  ASSERT_EQ(drvshim_fake_disable_peer_access_externally(native(c0()), native(c1())), CUDA_SUCCESS);
  PeerAccess fresh = PeerAccess::enable(c0(), c1());
  EXPECT_FALSE(fresh.shared()) << "the driver enabled it again: a new enablement";
  old.reset();
  EXPECT_EQ(drvshim_fake_peer_access_enabled(native(c0()), native(c1())), 1)
      << "the stale owner must not disable the fresh enablement";
  EXPECT_EQ(drvshim_fake_call_count("cuCtxDisablePeerAccess"), 0u);
  fresh.disable();
  EXPECT_EQ(drvshim_fake_peer_access_enabled(native(c0()), native(c1())), 0);
}

// abandon(): no driver call, the share leaves the books. With a second owner
// left, that owner still disables; the last abandoned, the next enable is a
// fresh enablement. An owner of a context that ended (the peer's primary
// context released to the end and activated again) is abandoned without
// naming the dead context to the driver (the fixture counts misuse).
TEST_F(TwoDevices, AnAbandonedOwnerCallsNoDriverAndLeavesTheBooks) {
  std::optional<PeerAccess> first(PeerAccess::enable(c0(), c1()));
  PeerAccess second = PeerAccess::enable(c0(), c1());
  first->abandon();
  EXPECT_FALSE(*first);
  first.reset();
  EXPECT_EQ(drvshim_fake_call_count("cuCtxDisablePeerAccess"), 0u);
  second.disable();
  EXPECT_EQ(drvshim_fake_call_count("cuCtxDisablePeerAccess"), 1u) << "the remaining owner was the last";
  EXPECT_EQ(drvshim_fake_peer_access_enabled(native(c0()), native(c1())), 0);

  {
    // Both contexts live: the access stays enabled, but off drvshim's books,
    // so the next enable finds it enabled and adopts it (shared only if the
    // abandoned share were still counted).
    PeerAccess kept = PeerAccess::enable(c0(), c1());
    kept.abandon();
    EXPECT_EQ(drvshim_fake_peer_access_enabled(native(c0()), native(c1())), 1);
    PeerAccess again = PeerAccess::enable(c0(), c1());
    EXPECT_TRUE(again.adopted());
    EXPECT_FALSE(again.shared());
  }
  ASSERT_EQ(drvshim_fake_disable_peer_access_externally(native(c0()), native(c1())), CUDA_SUCCESS);
  PeerAccess lone = PeerAccess::enable(c0(), c1());
  p1_.reset();  // device 1's context ends, and the access with it
  ASSERT_EQ(drvshim_fake_peer_access_count(), 0);
  lone.abandon();
  lone.abandon();  // empty: nothing happens
  EXPECT_EQ(drvshim_fake_call_count("cuCtxDisablePeerAccess"), 1u);
  p1_.emplace(drv_->device(1).retain_primary_context());
  PeerAccess fresh = PeerAccess::enable(c0(), c1());
  EXPECT_FALSE(fresh.shared()) << "the abandoned share is off the books";
  EXPECT_FALSE(fresh.adopted());
  fresh.disable();
  EXPECT_EQ(drvshim_fake_peer_access_count(), 0);
}

TEST_F(TwoDevices, MistakesAreRefusedBeforeTheDriver) {
  drvshim_fake_clear_call_log();
  auto self = expect_throw<InvalidArgumentError>([&] { (void)PeerAccess::enable(c0(), c0()); });
  EXPECT_NE(std::string(self.what()).find("to itself"), std::string::npos) << self.what();
  Context other = drv_->device(0).create_context();
  drvshim_fake_clear_call_log();
  auto same = expect_throw<InvalidArgumentError>([&] { (void)PeerAccess::enable(c0(), other.ref()); });
  EXPECT_NE(std::string(same.what()).find("both contexts are on device 0"), std::string::npos) << same.what();
  EXPECT_NE(same.hint().find("copy_peer"), std::string::npos);
  auto other_driver = load_and_init();
  auto foreign = other_driver.device(1).retain_primary_context();
  auto mixed = expect_throw<InvalidArgumentError>([&] { (void)PeerAccess::enable(c0(), foreign.ref()); });
  EXPECT_NE(std::string(mixed.what()).find("different Driver objects"), std::string::npos) << mixed.what();
  EXPECT_EQ(drvshim_fake_call_count("cuCtxEnablePeerAccess"), 0u);
}

TEST_F(TwoDevices, ALinkWithoutPeerToPeerIsRefusedWithTheWayOut) {
  drvshim_fake_set_peer_supported(0, 1, 0);
  drvshim_fake_clear_call_log();
  auto e = expect_throw<UnsupportedError>([&] { (void)PeerAccess::enable(c0(), c1()); });
  EXPECT_NE(std::string(e.what()).find("device 0 cannot access the memory of device 1 directly"), std::string::npos)
      << e.what();
  EXPECT_NE(e.objects().find("cuDeviceCanAccessPeer(0, 1) is 0 (link attribute access_supported 0)"), std::string::npos)
      << e.objects();
  EXPECT_NE(e.hint().find("copies between them still work"), std::string::npos) << e.hint();
  EXPECT_EQ(drvshim_fake_call_count("cuCtxEnablePeerAccess"), 0u);
  // The other direction is its own link.
  PeerAccess back = PeerAccess::enable(c1(), c0());
  EXPECT_TRUE(back);
}

TEST_F(TwoDevices, DriverFailuresThrowAndLeaveNothingBehind) {
  drvshim_fake_fail_call("cuCtxEnablePeerAccess", 1, CUDA_ERROR_TOO_MANY_PEERS);
  auto e = expect_throw<CudaError>([&] { (void)PeerAccess::enable(c0(), c1()); });
  EXPECT_EQ(e.code(), CUDA_ERROR_TOO_MANY_PEERS);
  EXPECT_NE(e.hint().find("exhausted"), std::string::npos) << e.hint();
  EXPECT_NE(e.objects().find("from primary context"), std::string::npos) << e.objects();
  EXPECT_EQ(drvshim_fake_peer_access_count(), 0);
  // The enable after a failure is a fresh one (no owner was recorded).
  PeerAccess a = PeerAccess::enable(c0(), c1());
  EXPECT_FALSE(a.shared());
  // A failing disable: the throwing form reports it, the owner is empty either way.
  drvshim_fake_fail_call("cuCtxDisablePeerAccess", 1, CUDA_ERROR_INVALID_CONTEXT);
  auto d = expect_throw<CudaError>([&] { a.disable(); });
  EXPECT_EQ(d.code(), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_FALSE(a);
  ASSERT_EQ(drvshim_fake_disable_peer_access_externally(native(c0()), native(c1())), CUDA_SUCCESS);
  // The no-throw twin returns the status; a failing context push is reported as such.
  PeerAccess b = PeerAccess::enable(c0(), c1());
  // Twice: ContextScope tries a failed context switch once more.
  drvshim_fake_fail_call("cuCtxGetCurrent", 1, CUDA_ERROR_UNKNOWN);
  drvshim_fake_fail_call("cuCtxGetCurrent", 1, CUDA_ERROR_UNKNOWN);
  const Status s = b.disable(std::nothrow);
  EXPECT_FALSE(s.ok());
  EXPECT_EQ(s.code(), CUDA_ERROR_UNKNOWN);
  ASSERT_EQ(drvshim_fake_disable_peer_access_externally(native(c0()), native(c1())), CUDA_SUCCESS);
}

TEST_F(TwoDevices, APoisonedContextFailsFastAndItsAccessIsLeftAlone) {
  auto access = PeerAccess::enable(c0(), c1());
  {
    auto s = Stream::create(c1());
    drvshim_fake_stream_fail(native(s.ref()), CUDA_ERROR_ILLEGAL_ADDRESS);
    expect_throw<CudaError>([&] { s.ref().synchronize(); });
    drvshim_fake_clear_call_log();
    expect_throw<ContextPoisonedError>([&] { (void)PeerAccess::enable(c0(), c1()); });
    expect_throw<ContextPoisonedError>([&] { (void)PeerAccess::enable(c1(), c0()); });
    EXPECT_EQ(access.disable(std::nothrow).code(), 0);
    EXPECT_TRUE(fake_calls().empty()) << "no driver call involving the broken context";
  }
  p0_.reset();
  p1_.reset();
  drv_.reset();
  drvshim_fake_reset();  // the process would recreate the broken context; the fake starts over
}

// A kernel on device 1 reading device 0's memory: with peer access it runs;
// without, the device faults (an illegal address, device 1's context
// poisoned), as on a GPU, so a program that forgets to enable access fails
// on the fake too.
TEST_F(TwoDevices, AKernelReachesAnotherDevicesMemoryOnlyWithPeerAccess) {
  const auto ptx = std::as_bytes(std::span<const char>(kVaddPtx, std::strlen(kVaddPtx)));
  constexpr unsigned n = 64;
  {
    auto a = DeviceBuffer::allocate(c0(), n * 4);
    auto b = DeviceBuffer::allocate(c0(), n * 4);
    auto c = DeviceBuffer::allocate(c1(), n * 4);
    std::vector<float> ones(n, 1.0f);
    copy(a.as<float>(), std::span<const float>(ones));
    copy(b.as<float>(), std::span<const float>(ones));
    auto m = Module::load(c1(), ptx);
    auto s = Stream::create(c1());
    const LaunchConfig cfg{{1}, {n}, 0, s.ref(), {}};
    {
      auto access = PeerAccess::enable(c1(), c0());
      launch(m.kernel("vadd"), cfg, a.address(), b.address(), c.address(), n);
      s.ref().synchronize();
    }
    std::vector<float> out(n, 0.0f);
    copy(std::span<float>(out), DeviceSpan<const float>(c.as<float>()));
    EXPECT_EQ(out[0], 2.0f) << "with peer access the kernel ran";
    launch(m.kernel("vadd"), cfg, a.address(), b.address(), c.address(), n);  // access ended
    const auto e = expect_throw<CudaError>([&] { s.ref().synchronize(); });
    EXPECT_EQ(e.code(), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT_EQ(c1().sticky_error(), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT_EQ(c0().sticky_error(), 0) << "the memory's device did nothing wrong";
  }  // device 1's objects are left to the driver (its context is broken)
  p0_.reset();
  p1_.reset();
  drv_.reset();
  drvshim_fake_reset();  // the process would recreate the broken context; the fake starts over
}

// A copy between two contexts that first sees one's fault charges it to
// that one, and asks the other without waiting for its queued work (which
// may wait for the caller): the healthy context stays usable, nothing hangs.
TEST_F(TwoDevices, ACopyChargesAFaultToTheFaultedContextWithoutWaitingForTheOther) {
  {
    auto a = DeviceBuffer::allocate(c0(), 256);
    auto b = DeviceBuffer::allocate(c1(), 256);
    auto s0 = Stream::create(c0());
    auto s1 = Stream::create(c1());
    drvshim_fake_stream_fail(native(s0.ref()), CUDA_ERROR_ILLEGAL_ADDRESS);
    // Another library sees the fault first: drvshim does not know of it.
    static const auto sync = raw<CUresult (*)(CUstream)>("cuStreamSynchronize");
    ASSERT_EQ(sync(reinterpret_cast<CUstream>(s0.ref().native())), CUDA_ERROR_ILLEGAL_ADDRESS);
    drvshim_fake_stream_hold(native(s1.ref()), 1);  // device 1's work waits for the caller
    auto copied = std::async(std::launch::async, [&] {
      try {
        copy_peer_async(s1.ref(), b.as<std::byte>(), DeviceSpan<const std::byte>(a.as<std::byte>()));
        return 0;
      } catch (const CudaError& e) {
        return e.code();
      }
    });
    const bool returned = copied.wait_for(std::chrono::seconds(20)) == std::future_status::ready;
    drvshim_fake_stream_hold(native(s1.ref()), 0);
    ASSERT_TRUE(returned) << "the copy waited for the healthy context's queued work";
    EXPECT_EQ(copied.get(), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT_EQ(c0().sticky_error(), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT_EQ(c1().sticky_error(), 0) << "device 1 did nothing wrong";
    s1.ref().synchronize();
  }
  p0_.reset();
  p1_.reset();
  drv_.reset();
  drvshim_fake_reset();  // the process would recreate the broken context; the fake starts over
}

TEST_F(TwoDevices, ConcurrentOwnersOfOneDirectionNeverMistakeEachOtherForAnotherComponent) {
  constexpr int kThreads = 8;
  constexpr int kRounds = 200;
  std::atomic<int> adopted{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kRounds; ++i) {
        PeerAccess a = PeerAccess::enable(c0(), c1());
        if (a.adopted()) ++adopted;
        if (drvshim_fake_peer_access_enabled(native(c0()), native(c1())) != 1) ++adopted;
      }
      EXPECT_EQ(drvshim_fake_ctx_stack_depth(), 0);
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(adopted.load(), 0) << "an owner saw drvshim's own access as another component's, or it vanished under it";
  EXPECT_EQ(drvshim_fake_peer_access_count(), 0);
  EXPECT_EQ(drvshim_fake_call_count("cuCtxEnablePeerAccess"), static_cast<unsigned long long>(kThreads * kRounds))
      << "every enable asked the driver once";
}

// Forces the interleaving the stress test above can only hope for: the first
// enable stops right after the driver's answer, before it records its owner,
// while a second thread enables the same direction. Before the registry's lock
// was held across the driver call, the second thread got "already enabled",
// found no owner yet and took drvshim's own access for another component's.
std::atomic<int> g_answers{0};
bool hold_first_answer(drvshim::detail::test_hooks::Point point) {
  if (point != drvshim::detail::test_hooks::Point::peer_access_answered) return true;
  if (g_answers.fetch_add(1) == 0) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
    while (g_answers.load() < 2 && std::chrono::steady_clock::now() < until) std::this_thread::yield();
  }
  return true;
}

TEST_F(TwoDevices, ASecondEnableDuringTheFirstsBookkeepingSharesItsAccess) {
  g_answers = 0;
  drvshim::detail::test_hooks::set(&hold_first_answer);
  std::optional<PeerAccess> first, second;
  std::thread a([&] { first.emplace(PeerAccess::enable(c0(), c1())); });
  while (g_answers.load() == 0) std::this_thread::yield();  // the first has its answer
  std::thread b([&] { second.emplace(PeerAccess::enable(c0(), c1())); });
  a.join();
  b.join();
  drvshim::detail::test_hooks::set(nullptr);
  ASSERT_TRUE(first && second);
  EXPECT_FALSE(first->adopted());
  EXPECT_FALSE(second->adopted()) << "drvshim's own access taken for another component's";
  EXPECT_NE(first->shared(), second->shared()) << "one enablement, two owners";
  first.reset();
  EXPECT_EQ(drvshim_fake_peer_access_enabled(native(c0()), native(c1())), 1) << "the other owner still holds it";
  second.reset();
  EXPECT_EQ(drvshim_fake_peer_access_enabled(native(c0()), native(c1())), 0);
}

// ---- copies between two devices ---------------------------------------------------------------------

std::vector<std::uint32_t> iota_values(std::size_t n, std::uint32_t first) {
  std::vector<std::uint32_t> v(n);
  for (std::size_t i = 0; i < n; ++i) v[i] = first + static_cast<std::uint32_t>(i);
  return v;
}

TEST_F(TwoDevices, PeerCopiesMoveDataBothWaysWithBothContextsNamed) {
  constexpr std::size_t n = 4096;
  auto a = DeviceBuffer::allocate(c0(), n * 4);
  auto b = DeviceBuffer::allocate(c1(), n * 4);
  const auto values = iota_values(n, 7);
  copy(a.as<std::uint32_t>(), std::span<const std::uint32_t>(values));
  drvshim_fake_clear_call_log();
  copy_peer(b.as<std::uint32_t>(), a.as<std::uint32_t>());
  EXPECT_EQ(count_calls(fake_calls(), "cuMemcpyPeer"), 1u);
  std::vector<std::uint32_t> back(n);
  copy(std::span<std::uint32_t>(back), DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>()));
  EXPECT_EQ(back, values);
  // And back, into the second half, on a stream of the destination.
  auto s1 = Stream::create(c1());
  auto s0 = Stream::create(c0());
  fill(b.as<std::uint32_t>(), 9u);
  copy_peer_async(s0.ref(), a.as<std::uint32_t>().subspan(n / 2, n / 2), b.as<std::uint32_t>().subspan(0, n / 2));
  s0.ref().synchronize();
  copy(std::span<std::uint32_t>(back), DeviceSpan<const std::uint32_t>(a.as<std::uint32_t>()));
  for (std::size_t i = 0; i < n; ++i) ASSERT_EQ(back[i], i < n / 2 ? values[i] : 9u) << i;
  copy_peer_async(s1.ref(), b.as<std::uint32_t>(), a.as<std::uint32_t>());
  s1.ref().synchronize();
  EXPECT_EQ(drvshim_fake_call_count("cuMemcpyPeerAsync"), 2u);
}

TEST_F(TwoDevices, PeerCopiesCheckWhatTheOtherCopiesCheck) {
  auto a = DeviceBuffer::allocate(c0(), 1024);
  auto b = DeviceBuffer::allocate(c1(), 512);
  drvshim_fake_clear_call_log();
  auto longer = expect_throw<InvalidArgumentError>([&] { copy_peer(b.as<std::uint8_t>(), a.as<std::uint8_t>()); });
  EXPECT_NE(std::string(longer.what()).find("copying 1024 bytes into a destination of 512 bytes"), std::string::npos)
      << longer.what();
  {
    // A stream of a third context: the driver queues the copy there.
    Context third = drv_->device(0).create_context();
    auto s = Stream::create(third.ref());
    fill(a.as<std::uint8_t>(), std::uint8_t{7});
    drvshim_fake_clear_call_log();
    copy_peer_async(s.ref(), b.as<std::uint8_t>(), a.as<std::uint8_t>().subspan(0, 512));
    s.ref().synchronize();
    EXPECT_EQ(drvshim_fake_call_count("cuMemcpyPeerAsync"), 1u);
    std::vector<std::uint8_t> back(512);
    copy(std::span<std::uint8_t>(back), DeviceSpan<const std::uint8_t>(b.as<std::uint8_t>()));
    EXPECT_EQ(back, std::vector<std::uint8_t>(512, 7));
  }
  const auto async_copies = drvshim_fake_call_count("cuMemcpyPeerAsync");
  copy_peer(b.as<std::uint8_t>().subspan(0, 0), a.as<std::uint8_t>().subspan(0, 0));  // nothing to copy
  EXPECT_EQ(drvshim_fake_call_count("cuMemcpyPeer"), 0u);
  EXPECT_EQ(drvshim_fake_call_count("cuMemcpyPeerAsync"), async_copies);
  // A failure names both sides.
  drvshim_fake_fail_call("cuMemcpyPeer", 1, CUDA_ERROR_INVALID_VALUE);
  auto e = expect_throw<CudaError>([&] { copy_peer(b.as<std::uint8_t>(), a.as<std::uint8_t>().subspan(0, 512)); });
  EXPECT_NE(e.objects().find("512 bytes from 0x"), std::string::npos) << e.objects();
  EXPECT_NE(e.objects().find("on device 0 to 0x"), std::string::npos) << e.objects();
  EXPECT_NE(e.objects().find("on device 1"), std::string::npos) << e.objects();
}

TEST_F(TwoDevices, UnifiedAddressCopiesBetweenDevicesNeedUnifiedAddressing) {
  constexpr std::size_t n = 1024;
  auto a = DeviceBuffer::allocate(c0(), n * 4);
  auto b = DeviceBuffer::allocate(c1(), n * 4);
  const auto values = iota_values(n, 100);
  copy(a.as<std::uint32_t>(), std::span<const std::uint32_t>(values));
  copy(b.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(a.as<std::uint32_t>()));
  std::vector<std::uint32_t> back(n);
  copy(std::span<std::uint32_t>(back), DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>()));
  EXPECT_EQ(back, values);
  auto s0 = Stream::create(c0());
  fill(b.as<std::uint32_t>(), 5u);
  copy_async(s0.ref(), a.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>()));
  s0.ref().synchronize();
  copy(std::span<std::uint32_t>(back), DeviceSpan<const std::uint32_t>(a.as<std::uint32_t>()));
  EXPECT_EQ(back, std::vector<std::uint32_t>(n, 5u));

  // Without unified addressing an address of one device means nothing to the other.
  drvshim_fake_set_attribute(1, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 0);
  drvshim_fake_clear_call_log();
  auto e = expect_throw<InvalidArgumentError>(
      [&] { copy(b.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(a.as<std::uint32_t>())); });
  EXPECT_NE(std::string(e.what()).find("device 1 has no unified addressing (unified_addressing 0)"), std::string::npos)
      << e.what();
  EXPECT_NE(e.hint().find("copy_peer"), std::string::npos);
  EXPECT_EQ(count_calls(fake_calls(), "cuMemcpyDtoD"), 0u);
  // The stream may be a third context's.
  drvshim_fake_set_attribute(1, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1);
  Context third = drv_->device(1).create_context();
  auto s = Stream::create(third.ref());
  fill(b.as<std::uint32_t>(), 0u);
  copy_async(s.ref(), b.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(a.as<std::uint32_t>()));
  s.ref().synchronize();
  EXPECT_EQ(count_calls(fake_calls(), "cuMemcpyDtoDAsync"), 1u);
  std::vector<std::uint32_t> copied(n);
  copy(std::span<std::uint32_t>(copied), DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>()));
  EXPECT_EQ(copied, std::vector<std::uint32_t>(n, 5u)) << "a's contents (5 since the copy above)";
}

TEST_F(TwoDevices, AStreamOnOneDeviceWaitsForAnEventRecordedOnTheOther) {
  constexpr std::size_t n = 256;
  auto a = DeviceBuffer::allocate(c0(), n * 4);
  auto b = DeviceBuffer::allocate(c1(), n * 4);
  fill(a.as<std::uint32_t>(), 1u);
  fill(b.as<std::uint32_t>(), 0u);
  auto s0 = Stream::create(c0());
  auto s1 = Stream::create(c1());
  auto done_on_0 = Event::create(c0(), EventFlags::disable_timing);
  drvshim_fake_stream_hold(native(s0.ref()), 1);
  fill_async(s0.ref(), a.as<std::uint32_t>(), 42u);  // "slow" work on device 0
  done_on_0.ref().record(s0.ref());
  s1.ref().wait(done_on_0.ref());  // device 1's stream waits for device 0's event
  copy_peer_async(s1.ref(), b.as<std::uint32_t>(), a.as<std::uint32_t>());
  EXPECT_FALSE(s1.ref().ready()) << "device 1's copy waits for device 0's work";
  drvshim_fake_stream_hold(native(s0.ref()), 0);
  s1.ref().synchronize();
  std::vector<std::uint32_t> back(n);
  copy(std::span<std::uint32_t>(back), DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>()));
  EXPECT_EQ(back, std::vector<std::uint32_t>(n, 42u)) << "the copy ran after the fill it waited for";
}

// cuda.h: event and stream must be of the same context; drvshim refuses
// before the driver (which would answer CUDA_ERROR_INVALID_HANDLE).
TEST_F(TwoDevices, AnEventIsRecordedOnlyOnAStreamOfItsOwnContext) {
  auto s1 = Stream::create(c1());
  auto ev0 = Event::create(c0());
  drvshim_fake_clear_call_log();
  auto e = expect_throw<InvalidArgumentError>([&] { ev0.ref().record(s1.ref()); });
  EXPECT_EQ(drvshim_fake_call_count("cuEventRecord"), 0u);
}

// ---- every driver call of a two-device scenario, failed once ---------------------------------------

TEST_F(TwoDevices, EveryCallOfATwoDeviceScenarioFailsCleanly) {
  const Device d0 = drv_->device(0);
  const Device d1 = drv_->device(1);
  std::size_t body_calls = 0;  // the scenario's calls before its objects are destroyed
  auto scenario = [&] {
    auto a = DeviceBuffer::allocate(c0(), 4096);
    auto b = DeviceBuffer::allocate(c1(), 4096);
    auto s0 = Stream::create(c0());
    auto s1 = Stream::create(c1());
    const PeerLink link = peer_link(d0, d1);
    PeerAccess there = PeerAccess::enable(c0(), c1());
    PeerAccess back = PeerAccess::enable(c1(), c0());
    copy_peer(b.as<std::uint32_t>(), a.as<std::uint32_t>());
    copy_peer_async(s1.ref(), b.as<std::uint32_t>(), a.as<std::uint32_t>());
    copy(b.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(a.as<std::uint32_t>()));
    copy_async(s0.ref(), a.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(b.as<std::uint32_t>()));
    auto e = Event::create(c0(), EventFlags::disable_timing);
    e.ref().record(s0.ref());
    s1.ref().wait(e.ref());
    s0.ref().synchronize();
    s1.ref().synchronize();
    (void)link;
    body_calls = drvshim_fake_call_log_size();
  };
  drvshim_fake_clear_call_log();
  scenario();
  const auto calls = fake_calls();
  ASSERT_GT(calls.size(), 40u);
  // Every call of the scenario's body is failed once. The destructors' calls after it are left
  // alone: a failed free, destroy or disable leaks by design (the no-throw twins log it), and a
  // failed pop cannot restore the stack; so is a pop inside the body.
  const std::size_t body = body_calls;
  ASSERT_GT(body, 40u);
  ASSERT_LT(body, calls.size());
  int injected = 0;
  for (std::size_t k = 1; k <= body; ++k) {
    // Context switches are tried once more (ContextScope): one failure is no
    // failure; the fault-injection sweep counts them as recoveries.
    if (calls[k - 1] == "cuCtxPopCurrent" || calls[k - 1] == "cuCtxGetCurrent" || calls[k - 1] == "cuCtxPushCurrent")
      continue;
    ++injected;
    drvshim_fake_fail_call("*", static_cast<int>(k), CUDA_ERROR_UNKNOWN);
    try {
      scenario();
      ADD_FAILURE() << "call " << k << " (" << calls[k - 1] << ") failed and the scenario went on";
    } catch (const Error& e) {
      if (e.code() != CUDA_ERROR_UNKNOWN) ADD_FAILURE() << "call " << k << ": " << e.what();
    } catch (const std::exception& e) {
      ADD_FAILURE() << "call " << k << " (" << calls[k - 1] << "): not a drvshim error: " << e.what();
    }
    EXPECT_EQ(drvshim_fake_ctx_stack_depth(), 0) << "call " << k << " (" << calls[k - 1] << ")";
    EXPECT_EQ(drvshim_fake_peer_access_count(), 0) << "call " << k << " (" << calls[k - 1] << ") left access on";
    EXPECT_EQ(drvshim_fake_live_device_allocations(), 0) << "call " << k << " (" << calls[k - 1] << ")";
    EXPECT_EQ(drvshim_fake_live_streams(), 0) << "call " << k << " (" << calls[k - 1] << ")";
    EXPECT_EQ(drvshim_fake_live_events(), 0) << "call " << k << " (" << calls[k - 1] << ")";
  }
  EXPECT_GT(injected, 25);  // the calls other than context switches
  scenario();               // and it still works
}

// ---- several threads, each on another device --------------------------------------------------------

TEST_F(TwoDevices, ThreadsEachOnAnotherDeviceKeepTheirStacksAndTheirData) {
  constexpr int kRounds = 50;
  constexpr std::size_t n = 1024;
  auto work = [&](const ContextRef& mine, const ContextRef& other, std::uint32_t seed) {
    for (int r = 0; r < kRounds; ++r) {
      auto local = DeviceBuffer::allocate(mine, n * 4);
      auto remote = DeviceBuffer::allocate(other, n * 4);
      auto s = Stream::create(mine);
      const auto values = iota_values(n, seed + static_cast<std::uint32_t>(r));
      copy_async(s.ref(), local.as<std::uint32_t>(), std::span<const std::uint32_t>(values));
      copy_peer_async(s.ref(), remote.as<std::uint32_t>(), local.as<std::uint32_t>());
      std::vector<std::uint32_t> back(n);
      s.ref().synchronize();
      copy(std::span<std::uint32_t>(back), DeviceSpan<const std::uint32_t>(remote.as<std::uint32_t>()));
      if (back != values) ADD_FAILURE() << "round " << r << " of seed " << seed << ": wrong data";
      if (drvshim_fake_ctx_stack_depth() != 0) ADD_FAILURE() << "a call left a context current on this thread";
    }
  };
  std::thread t0([&] { work(c0(), c1(), 1000); });
  std::thread t1([&] { work(c1(), c0(), 2000000); });
  t0.join();
  t1.join();
}

// ---- the contract cases (the same table runs on the two-GPU machine) ----------------------------------

class PeerContract : public FakeDriverTest {
 protected:
  const char* profile() const override { return "dual"; }
};

TEST_F(PeerContract, FakeAgreesWithTheDocumentedDriverBehaviour) {
  {
    auto drv = load_and_init();
    const auto results = run_peer_contract_cases(drv);
    EXPECT_GE(results.size(), 25u);
    for (const auto& c : results) EXPECT_EQ(c.observed, c.expected) << c.name;
  }
  EXPECT_EQ(drvshim_fake_peer_access_count(), 0) << "every case leaves the devices as it found them";
}

}  // namespace
