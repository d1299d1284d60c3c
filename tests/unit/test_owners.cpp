// SPDX-License-Identifier: Apache-2.0
// Owners: the one ownership mechanism (OwningHandle), and what every owner
// and view promises alike: as<T>() checks the size and carries the owner's id,
// views compare equal when they name the same thing, internals stay private.
#include <drvshim/compile_cache.hpp>
#include <drvshim/owning_handle.hpp>

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <functional>
#include <new>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

// ---- OwningHandle on its own ------------------------------------------------------------------

struct Ledger {
  std::vector<std::string> calls;
  int fail_next = 0;  // the next release answers this code
};

struct ToyTraits {
  struct value_type {
    Ledger* ledger;
    int handle;
    int tag;  // kept by a moved-from owner, as a context is
  };
  static bool held(const value_type& v) noexcept { return v.handle != 0; }
  static void clear(value_type& v) noexcept { v.handle = 0; }
  static Status release(value_type& v) noexcept {
    const int h = std::exchange(v.handle, 0);
    v.ledger->calls.push_back("release " + std::to_string(h));
    return Status("toyRelease", std::exchange(v.ledger->fail_next, 0));
  }
  static void release_or_throw(value_type& v) {
    const Status s = release(v);
    if (!s.ok()) throw InvalidArgumentError("toy", s.to_string());
  }
};
using Toy = detail::OwningHandle<ToyTraits>;

static_assert(!std::is_copy_constructible_v<Toy> && !std::is_copy_assignable_v<Toy>);
static_assert(std::is_nothrow_move_constructible_v<Toy> && std::is_nothrow_move_assignable_v<Toy>);

TEST(OwningHandle, ReleasesOnceWhateverIsMovedWhere) {
  Ledger ledger;
  {
    Toy a({&ledger, 1, 7});
    Toy b(std::move(a));
    EXPECT_FALSE(a.held());
    EXPECT_EQ(a.get().tag, 7) << "a moved-from owner keeps what clear() leaves";
    EXPECT_TRUE(b.held());
    Toy c({&ledger, 2, 0});
    c = std::move(b);  // c's own handle goes first
    EXPECT_EQ(ledger.calls, std::vector<std::string>{"release 2"});
    auto& self = c;
    c = std::move(self);
    EXPECT_TRUE(c.held()) << "self-move keeps the handle";
    EXPECT_TRUE(c.release(std::nothrow).ok());
    EXPECT_TRUE(c.release(std::nothrow).ok()) << "releasing an empty owner is a no-op";
    c.release();
  }
  EXPECT_EQ(ledger.calls, (std::vector<std::string>{"release 2", "release 1"}));
}

TEST(OwningHandle, TheTwinsReportFailureTheirOwnWayAndLeaveTheOwnerEmpty) {
  Ledger ledger;
  Toy a({&ledger, 1, 0});
  ledger.fail_next = 201;
  const Status s = a.release(std::nothrow);
  EXPECT_EQ(s.code(), 201);
  EXPECT_STREQ(s.api(), "toyRelease");
  EXPECT_FALSE(a.held());
  Toy b({&ledger, 2, 0});
  ledger.fail_next = 1;
  EXPECT_THROW(b.release(), InvalidArgumentError);
  EXPECT_FALSE(b.held());
  ledger.fail_next = 1;
  {
    Toy c({&ledger, 3, 0});  // the destructor uses the no-throw twin: a failure does not escape
  }
  EXPECT_EQ(ledger.calls, (std::vector<std::string>{"release 1", "release 2", "release 3"}));
}

// ---- the owners ----------------------------------------------------------------------------------

class Owners : public PrimaryContextTest {};

// Calls to `api` in the fake's log since it was last cleared.
long calls_to(const std::string& api) {
  const auto calls = fake_calls();
  return std::count(calls.begin(), calls.end(), api);
}

// What DeviceBuffer::as always did, every owner now does: 16 bytes are no
// whole number of 3-byte elements.
TEST_F(Owners, EveryOwnerRefusesAViewOfASizeThatIsNotAMultipleOfTheElement) {
  auto device = DeviceBuffer::allocate(ctx(), 16);
  auto managed = ManagedBuffer::allocate(ctx(), 16);
  auto stream = Stream::create(ctx());
  auto pooled = AsyncDeviceBuffer::allocate(stream.ref(), 16);
  auto pinned = PinnedBuffer::allocate(ctx(), 16);
  using Odd = std::array<char, 3>;
  drvshim_fake_clear_call_log();
  const std::string expected = "16 bytes is not a multiple of the element size 3";
  for (const auto& [api, call] : std::vector<std::pair<std::string, std::function<void()>>>{
           {"DeviceBuffer::as", [&] { (void)device.as<Odd>(); }},
           {"ManagedBuffer::as", [&] { (void)managed.as<Odd>(); }},
           {"AsyncDeviceBuffer::as", [&] { (void)pooled.as<Odd>(); }},
           {"PinnedBuffer::as", [&] { (void)pinned.as<Odd>(); }},
       }) {
    const auto e = expect_throw<InvalidArgumentError>(call);
    EXPECT_EQ(e.api(), api);
    EXPECT_NE(std::string(e.what()).find(expected), std::string::npos) << e.what();
  }
  EXPECT_EQ(managed.as<std::uint32_t>().size(), 4u);
  EXPECT_EQ(pooled.as<std::uint16_t>().size(), 8u);
  EXPECT_TRUE(fake_calls().empty()) << "no driver call for a refused view";
  pooled.free();
  stream.ref().synchronize();
}

TEST_F(Owners, EveryOwnerRefusesAViewWhenEmpty) {
  auto managed = ManagedBuffer::allocate(ctx(), 16);
  auto stream = Stream::create(ctx());
  auto pooled = AsyncDeviceBuffer::allocate(stream.ref(), 16);
  auto managed2 = std::move(managed);
  auto pooled2 = std::move(pooled);
  const auto e1 = expect_throw<InvalidArgumentError>([&] { (void)managed.as<std::uint8_t>(); });
  EXPECT_NE(std::string(e1.what()).find("this ManagedBuffer is empty (moved from or freed)"), std::string::npos)
      << e1.what();
  const auto e2 = expect_throw<InvalidArgumentError>([&] { (void)pooled.as<std::uint8_t>(); });
  EXPECT_NE(std::string(e2.what()).find("this AsyncDeviceBuffer is empty (moved from or freed)"), std::string::npos)
      << e2.what();
  pooled2.free();
  stream.ref().synchronize();
}

TEST_F(Owners, ViewsCarryTheirOwnersIdOnEveryOwner) {
  auto device = DeviceBuffer::allocate(ctx(), 16);
  auto managed = ManagedBuffer::allocate(ctx(), 16);
  auto stream = Stream::create(ctx());
  auto pooled = AsyncDeviceBuffer::allocate(stream.ref(), 16);
  EXPECT_NE(device.as<std::uint8_t>().owner_id(), 0u);
  EXPECT_NE(managed.as<std::uint8_t>().owner_id(), 0u) << "a managed view must be checkable against its owner";
  EXPECT_NE(pooled.as<std::uint8_t>().owner_id(), 0u) << "a stream-ordered view must be checkable against its owner";
  EXPECT_NE(managed.as<std::uint8_t>().owner_id(), device.as<std::uint8_t>().owner_id());
  EXPECT_NE(pooled.as<std::uint8_t>().owner_id(), managed.as<std::uint8_t>().owner_id());
  pooled.free();
  stream.ref().synchronize();
}

TEST_F(Owners, ViewsOfFreedManagedAndStreamOrderedMemoryAreCaughtInDebugBuilds) {
  if (!view_checks_enabled()) GTEST_SKIP() << "this libdrvshim build does not check views (not a Debug build)";
  auto managed = ManagedBuffer::allocate(ctx(), 64);
  auto stream = Stream::create(ctx());
  auto pooled = AsyncDeviceBuffer::allocate(stream.ref(), 64);
  const auto managed_view = managed.as<std::uint8_t>();
  const auto pooled_view = pooled.as<std::uint8_t>();
  managed.free();
  pooled.free();
  stream.ref().synchronize();
  std::vector<std::uint8_t> host(64);
  drvshim_fake_clear_call_log();
  expect_throw<InvalidArgumentError>(
      [&] { copy(std::span<std::uint8_t>(host), DeviceSpan<const std::uint8_t>(managed_view)); });
  expect_throw<InvalidArgumentError>(
      [&] { copy(std::span<std::uint8_t>(host), DeviceSpan<const std::uint8_t>(pooled_view)); });
  EXPECT_TRUE(fake_calls().empty()) << "refused before the driver";
}

// Moving an owner hands the resource over: one release, by the last owner,
// and a move assignment releases the target's own resource first.
TEST_F(Owners, MovesReleaseEachResourceOnceInOrder) {
  auto a = DeviceBuffer::allocate(ctx(), 64);
  auto b = DeviceBuffer::allocate(ctx(), 128);
  const auto a_address = a.address();
  drvshim_fake_clear_call_log();
  b = std::move(a);
  EXPECT_EQ(calls_to("cuMemFree"), 1) << "b's own 128 bytes, freed by the move assignment";
  EXPECT_EQ(drvshim_fake_live_device_allocations(), 1);
  EXPECT_FALSE(a);
  EXPECT_EQ(a.context(), ctx()) << "a moved-from owner keeps its context";
  EXPECT_EQ(b.address(), a_address);
  EXPECT_EQ(b.size(), 64u);
  EXPECT_TRUE(a.free(std::nothrow).ok());
  a.free();
  EXPECT_EQ(calls_to("cuMemFree"), 1) << "an empty owner calls nothing";
}

// ---- views compare equal when they name the same thing --------------------------------------------

TEST_F(Owners, ViewsCompareEqualWhenTheyNameTheSameThing) {
  auto other = drv_->device(0).create_context();
  EXPECT_EQ(ctx(), primary_->ref());
  EXPECT_NE(ctx(), other.ref());
  EXPECT_EQ(ctx().device(), drv_->device(0));

  auto s1 = Stream::create(ctx());
  auto s2 = Stream::create(ctx());
  EXPECT_EQ(s1.ref(), s1.ref());
  EXPECT_NE(s1.ref(), s2.ref());
  EXPECT_EQ(StreamRef::legacy_default(ctx()), StreamRef::legacy_default(ctx()));
  EXPECT_NE(StreamRef::legacy_default(ctx()), StreamRef::per_thread_default(ctx()));
  EXPECT_NE(StreamRef::legacy_default(ctx()), StreamRef::legacy_default(other.ref()));

  auto e1 = Event::create(ctx());
  auto e2 = Event::create(ctx());
  EXPECT_EQ(e1.ref(), e1.ref());
  EXPECT_NE(e1.ref(), e2.ref());

  auto buf = DeviceBuffer::allocate(ctx(), 64);
  EXPECT_EQ(buf.as<std::uint32_t>(), buf.as<std::uint32_t>());
  EXPECT_NE(buf.as<std::uint32_t>(), buf.as<std::uint32_t>().subspan(1, 3));
  EXPECT_EQ(buf.as<std::uint32_t>().subspan(1, 3), buf.as<std::uint32_t>().subspan(1, 3));
}

constexpr const char* kPtx = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry twice(
    .param .u64 twice_param_0
)
{
    ret;
}
)";

std::span<const std::byte> ptx_bytes() { return std::as_bytes(std::span<const char>(kPtx, std::strlen(kPtx))); }

// A Kernel is equal to itself and its copies; two lookups are two kernels.
// Moving a Module or Library keeps the code loaded once, unloaded once.
TEST_F(Owners, KernelsCompareByLookupAndCodeOwnersMoveLikeTheRest) {
  auto module = Module::load(ctx(), ptx_bytes());
  const Kernel k = module.kernel("twice");
  const Kernel copy_of_k = k;
  EXPECT_EQ(k, copy_of_k);
  EXPECT_NE(k, module.kernel("twice"));
  auto moved = std::move(module);
  EXPECT_FALSE(module);
  EXPECT_TRUE(moved);
  EXPECT_TRUE(module.unload(std::nothrow).ok()) << "an empty Module unloads nothing";
  auto library = Library::load(*drv_, ptx_bytes());
  auto library2 = std::move(library);
  EXPECT_FALSE(library);
  EXPECT_TRUE(library2);
  drvshim_fake_clear_call_log();
  library2.unload();
  moved.unload();
  EXPECT_EQ(calls_to("cuLibraryUnload"), 1);
  EXPECT_EQ(calls_to("cuModuleUnload"), 0) << "its Kernels keep the module loaded";
}

// ---- the public surface -------------------------------------------------------------------------------

// DeviceSpan<T> converts to DeviceSpan<const T> and not back; DeviceSpan<const T>
// declares no conversion to itself (nvcc warned #554 about one in every user's build).
static_assert(std::is_convertible_v<DeviceSpan<int>, DeviceSpan<const int>>);
static_assert(!std::is_convertible_v<DeviceSpan<const int>, DeviceSpan<int>>);
static_assert(std::is_copy_constructible_v<DeviceSpan<const int>>);

// The constructors that take raw handles are no longer public: views and
// owners come from their factories.
static_assert(!std::is_constructible_v<ContextRef, Device, std::uintptr_t, bool>);
static_assert(!std::is_constructible_v<StreamRef, ContextRef, std::uintptr_t, std::uint64_t>);
static_assert(!std::is_constructible_v<StreamRef, ContextRef, std::uintptr_t>);
static_assert(!std::is_constructible_v<PrimaryContext, Device, std::uintptr_t, bool>);
static_assert(!std::is_constructible_v<Context, Device, std::uintptr_t>);
static_assert(!std::is_constructible_v<PeerAccess, ContextRef, ContextRef, bool, bool, std::uint64_t>);
static_assert(!std::is_constructible_v<Device, std::shared_ptr<detail::DriverCore>, int, int>);

}  // namespace

namespace {

// A freed or moved-from MappedBuffer no longer reports the device address of
// memory that is gone (adversarial review, 2026-12-01: it kept the old one).
TEST_F(Owners, AFreedOrMovedFromMappedBufferHasNoDeviceAddress) {
  auto mapped = MappedBuffer::allocate(ctx(), 256);
  ASSERT_NE(mapped.device_address(), DevicePtr{0});
  MappedBuffer moved = std::move(mapped);
  EXPECT_EQ(mapped.device_address(), DevicePtr{0});  // NOLINT(bugprone-use-after-move): the moved-from state
  EXPECT_FALSE(mapped.pointers_identical());         // NOLINT(bugprone-use-after-move)
  ASSERT_NE(moved.device_address(), DevicePtr{0});
  moved.free();
  EXPECT_EQ(moved.device_address(), DevicePtr{0});
}

// A free the driver refuses leaves the buffer empty (its memory's state is
// the pool's now), so the destructor does not free it a second time; a free
// refused before the driver was called keeps it (adversarial review,
// 2026-12-01: a failed cuMemFreeAsync left it held).
TEST_F(Owners, AnAsyncDeviceBufferIsEmptyAfterAFailedFreeAndHeldAfterARefusedOne) {
  auto stream = Stream::create(ctx());
  auto pooled = AsyncDeviceBuffer::allocate(stream.ref(), 64);
  {
    auto other = Stream::create(ctx());
    const StreamRef dead = other.ref();
    other.destroy();
    if (view_checks_enabled()) {
      (void)expect_throw<InvalidArgumentError>([&] { pooled.free(dead); });
      EXPECT_TRUE(pooled) << "a refused free keeps the buffer";
    }
  }
  drvshim_fake_clear_call_log();
  drvshim_fake_fail_call("cuMemFreeAsync", 1, CUDA_ERROR_INVALID_VALUE);
  const auto e = expect_throw<CudaError>([&] { pooled.free(); });
  EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_VALUE);
  EXPECT_FALSE(pooled) << "not held after the driver's failure";
  EXPECT_EQ(pooled.address(), DevicePtr{0});
  pooled.free();  // nothing held: a no-op
  EXPECT_EQ(drvshim_fake_call_count("cuMemFreeAsync"), 1u) << "freed once, never again";
  stream.ref().synchronize();
}

}  // namespace

// ---- calls as users write them ------------------------------------------------------------------

// What a copy accepts is decided at compile time: these say which calls compile.
template <class D, class S>
concept Copyable = requires(D&& d, S&& s) {
  copy(std::forward<D>(d), std::forward<S>(s));
};
static_assert(Copyable<DeviceSpan<float>, std::span<float>>, "a mutable host span as the source");
static_assert(Copyable<DeviceSpan<float>, std::span<const float>>);
static_assert(Copyable<DeviceSpan<float>, std::vector<float>&>, "a container as the source");
static_assert(Copyable<DeviceSpan<float>, const std::vector<float>&>);
static_assert(Copyable<DeviceSpan<float>, std::array<float, 4>&>);
static_assert(Copyable<std::span<float>, DeviceSpan<float>>, "a mutable device span as the source");
static_assert(Copyable<std::span<float>, DeviceSpan<const float>>);
static_assert(Copyable<std::vector<float>&, DeviceSpan<float>>, "a container as the destination");
static_assert(Copyable<DeviceSpan<float>, DeviceSpan<float>>);
static_assert(!Copyable<DeviceSpan<const float>, std::span<const float>>, "never into a view of const elements");
static_assert(!Copyable<std::span<const float>, DeviceSpan<float>>);
static_assert(!Copyable<const std::vector<float>&, DeviceSpan<float>>);
static_assert(!Copyable<DeviceSpan<float>, std::span<const double>>, "the element types must agree");
static_assert(!Copyable<std::vector<int>&, DeviceSpan<float>>);
// No copy into a temporary container (the result would be lost), and no
// queued copy from one (gone before the stream reads it); spans and lvalues are fine.
template <class D, class S>
concept CopyableAsync = requires(const StreamRef& s, D&& d, S&& src) {
  copy_async(s, std::forward<D>(d), std::forward<S>(src));
};
static_assert(!Copyable<std::vector<float>, DeviceSpan<float>>, "a temporary vector as the destination");
static_assert(!CopyableAsync<std::vector<float>, DeviceSpan<float>>);
static_assert(!CopyableAsync<DeviceSpan<float>, std::vector<float>>, "a temporary vector as a queued source");
static_assert(CopyableAsync<DeviceSpan<float>, std::vector<float>&>);
static_assert(CopyableAsync<DeviceSpan<float>, std::span<float>>, "a span is no owner: fine as a temporary");
static_assert(CopyableAsync<std::span<float>, DeviceSpan<float>>);
static_assert(Copyable<DeviceSpan<float>, std::vector<float>>, "a synchronous copy reads a temporary at once");
// Owners stand for their views, but a temporary owner does not: its view would outlive it.
template <class Owner>
concept GivesView = requires(Owner&& o) {
  std::forward<Owner>(o).ref();
};
static_assert(!GivesView<Stream> && !GivesView<Event>);
static_assert(!GivesView<PrimaryContext> && !GivesView<Context>);
static_assert(GivesView<Stream&> && GivesView<const Event&>, "an lvalue owner gives its view");
static_assert(std::is_convertible_v<const Stream&, StreamRef> && !std::is_convertible_v<Stream, StreamRef>);
static_assert(std::is_convertible_v<const Event&, EventRef> && !std::is_convertible_v<Event, EventRef>);
static_assert(std::is_convertible_v<const PrimaryContext&, ContextRef> &&
              !std::is_convertible_v<PrimaryContext, ContextRef>);
static_assert(std::is_convertible_v<const Context&, ContextRef> && !std::is_convertible_v<Context, ContextRef>);

// The first program of a user, without .ref(), as<const T>() or explicit
// spans: every copy direction from spans of either constness and containers,
// fills with a plain literal, owners used where views are, timed with events.
TEST_F(Owners, CopiesDeduceFromWhatUsersHoldAndOwnersStandForTheirViews) {
  const PrimaryContext& primary = *primary_;
  auto dbuf = DeviceBuffer::allocate(primary, 64 * sizeof(float));
  auto other = DeviceBuffer::allocate(primary, 64 * sizeof(float));
  auto pinned = PinnedBuffer::allocate(primary, 64 * sizeof(float));
  Stream stream = Stream::create(primary);
  Event start = Event::create(primary);
  Event end = Event::create(primary);
  std::vector<float> v(64);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i);

  copy(dbuf.as<float>(), v);                    // a vector
  copy(other.as<float>(), dbuf.as<float>());    // device to device, mutable source
  copy(pinned.as<float>(), other.as<float>());  // into pinned memory, mutable device source
  EXPECT_TRUE(std::equal(v.begin(), v.end(), pinned.as<float>().begin()));
  fill(dbuf.as<std::uint32_t>(), 0);  // an int literal for uint32_t elements
  start.record(stream);
  copy_async(stream, dbuf.as<float>(), pinned.as<float>());  // mutable pinned source on the owner
  end.record(stream);
  stream.synchronize();
  EXPECT_TRUE(stream.ready());
  EXPECT_GE(elapsed(start, end).count(), 0.0);
  std::array<float, 64> back{};
  copy(back, dbuf.as<float>());  // a std::array destination
  EXPECT_TRUE(std::equal(v.begin(), v.end(), back.begin()));
  std::vector<float> async_back(64, -1.0f);
  copy_async(stream, async_back, dbuf.as<float>());
  stream.wait(end);
  stream.synchronize();
  EXPECT_EQ(async_back, v);
  EXPECT_EQ(stream.context().address(), primary.ref().address());
  EXPECT_EQ(StreamRef(stream), stream.ref());
  EXPECT_EQ(EventRef(end), end.ref());
  // An emptied owner answers as ref() does.
  stream.destroy();
  expect_throw<InvalidArgumentError>([&] { stream.synchronize(); });
  end.destroy();
  expect_throw<InvalidArgumentError>([&] { (void)end.query(); });
}

// The option structs users fill with designated initialisers stop early
// without -Wmissing-field-initializers (this file builds with -Wextra -Werror):
// every member has a default.
TEST(Options, DesignatedInitialisersMayStopEarly) {
  const LaunchConfig launch_config{.grid = {256}};
  const KernelSource source{.source = "__global__ void k() {}"};
  const CompileOptions options{.arch = "sm_90"};
  const Header header{.name = "a.h"};
  const LoadOptions load{.path = "libcuda.so.1"};
  const BackgroundInitOptions background{.primary_contexts = {0}};
  const BackgroundTask task{.name = "warm-up"};
  const BackgroundModule module{.name = "kernels"};
  const BackgroundLibrary library{.name = "kernels"};
  EXPECT_EQ(launch_config.block.count(), 1u);
  EXPECT_FALSE(launch_config.stream.has_value());
  EXPECT_EQ(source.name, "program.cu");
  EXPECT_TRUE(options.cuda_includes);
  EXPECT_TRUE(header.source.empty());
  EXPECT_TRUE(load.use_environment);
  EXPECT_TRUE(background.tasks.empty());
  EXPECT_FALSE(static_cast<bool>(task.run));
  EXPECT_EQ(module.device, 0);
  EXPECT_TRUE(library.image.empty());
}

// A grid from an element count, as users compute it, without narrowing.
TEST_F(Owners, ALaunchCoveringACountRoundsUpAndRefusesWhatTheDriverCannotLaunch) {
  const std::size_t n = 1000;
  const LaunchConfig config = LaunchConfig::covering(n, 256);
  EXPECT_EQ(config.grid.x, 4u);
  EXPECT_EQ(config.grid.count(), 4u);
  EXPECT_EQ(config.block.x, 256u);
  EXPECT_EQ(config.block.count(), 256u);
  EXPECT_FALSE(config.stream.has_value());
  EXPECT_EQ(LaunchConfig::covering(1024, 256).grid.x, 4u);
  EXPECT_EQ(LaunchConfig::covering(1, 1024).grid.x, 1u);
  const Stream stream = Stream::create(ctx());
  EXPECT_EQ(LaunchConfig::covering(n, 128, stream).stream, stream.ref());
  const auto too_many =
      expect_throw<InvalidArgumentError>([] { (void)LaunchConfig::covering(std::size_t{1} << 40, 256); });
  EXPECT_NE(std::string(too_many.what()).find("need 4294967296 blocks, more than the 2147483647"), std::string::npos)
      << too_many.what();
  expect_throw<InvalidArgumentError>([] { (void)LaunchConfig::covering(~std::size_t{0}, 1); });
  EXPECT_NE(std::string(expect_throw<InvalidArgumentError>([] { (void)LaunchConfig::covering(0, 256); }).hint())
                .find("skip the launch"),
            std::string::npos);
  expect_throw<InvalidArgumentError>([] { (void)LaunchConfig::covering(n, 0); });
}

// Owners as either side of a copy: untyped memory viewed with the other side's element type.
static_assert(Copyable<const DeviceBuffer&, std::vector<float>&>, "a container into a device owner");
static_assert(Copyable<std::vector<float>&, const DeviceBuffer&>, "a device owner into a container");
static_assert(Copyable<DeviceSpan<float>, const ManagedBuffer&> &&
              Copyable<const AsyncDeviceBuffer&, DeviceSpan<float>>);
static_assert(Copyable<DeviceSpan<float>, const PinnedBuffer&> &&
              Copyable<const PinnedBuffer&, DeviceSpan<const float>>);
static_assert(!Copyable<const DeviceBuffer&, const DeviceBuffer&>, "between two owners the element type is unknown");
static_assert(!Copyable<const std::vector<float>&, const DeviceBuffer&>, "never into a container of const elements");
template <class S>
concept QueuedFromTemporary = requires(const StreamRef& s, const DeviceBuffer& d) {
  copy_async(s, d, S{});
};
static_assert(!QueuedFromTemporary<std::vector<float>>, "a queued copy from a temporary container into an owner");
// A temporary owner frees its memory at the end of the call's expression: a
// copy into it is lost, and a queued copy would touch freed memory.
static_assert(!Copyable<DeviceBuffer, std::vector<float>&> && !Copyable<PinnedBuffer, DeviceSpan<float>>);
template <class D, class S>
concept Queueable = requires(const StreamRef& s, D&& d, S&& src) {
  copy_async(s, std::forward<D>(d), std::forward<S>(src));
};
static_assert(Queueable<const DeviceBuffer&, std::vector<float>&> &&
              Queueable<std::vector<float>&, const DeviceBuffer&>);
static_assert(!Queueable<DeviceBuffer, std::vector<float>&> && !Queueable<std::vector<float>&, AsyncDeviceBuffer>);
static_assert(!Queueable<PinnedBuffer, DeviceSpan<float>> && !Queueable<DeviceSpan<float>, ManagedBuffer>);

TEST_F(Owners, OwnersAreCopiedAsTheOtherSidesElementType) {
  const PrimaryContext& primary = *primary_;
  auto dbuf = DeviceBuffer::allocate(primary, 16 * sizeof(float));
  auto other = DeviceBuffer::allocate(primary, 16 * sizeof(float));
  auto pinned = PinnedBuffer::allocate(primary, 16 * sizeof(float));
  Stream stream = Stream::create(primary);
  std::vector<float> v(16);
  for (std::size_t i = 0; i < v.size(); ++i) v[i] = static_cast<float>(i) + 0.5f;
  copy(dbuf, v);                    // container -> owner
  copy(other.as<float>(), dbuf);    // owner -> device span
  copy(pinned, other.as<float>());  // device span -> pinned owner
  EXPECT_TRUE(std::equal(v.begin(), v.end(), pinned.as<float>().begin()));
  std::vector<float> back(16, -1.0f);
  copy(back, other);  // owner -> container
  EXPECT_EQ(back, v);
  std::vector<float> queued(16, -1.0f);
  copy_async(stream, dbuf, std::span<const float>(v).first(8));
  copy_async(stream, other, dbuf.as<float>());
  copy_async(stream, dbuf.as<float>(), pinned);
  copy_async(stream, queued, other);
  stream.synchronize();
  EXPECT_EQ(queued, v);
  // The owner's size must hold whole elements of the other side: as<T>()'s check, before the driver.
  auto odd = DeviceBuffer::allocate(primary, 6);
  const std::vector<float> two(2, 1.0f);
  EXPECT_NE(std::string(expect_throw<InvalidArgumentError>([&] { copy(odd, two); }).what()).find("6"),
            std::string::npos);
}
