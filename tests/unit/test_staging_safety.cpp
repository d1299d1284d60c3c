// SPDX-License-Identifier: Apache-2.0
// Memory safety and correct data in the pinned pool and the staging engine:
// blocks handed out are as big as they say under every interleaving of the
// thread cache; the pool's last handle never frees what a parking thread
// still touches; a failing stream-ordered copy never lets a block be reused
// while the device may use it, nor writes after it returned; synchronous
// staged copies are ordered after the legacy default stream; a helper thread
// that cannot start is an error, not std::terminate; the crew never uses more
// threads than the CPUs the process may use.
#include <drvshim/staging.hpp>

#include <linux/membarrier.h>
#include <sched.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <dirent.h>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>

#include "fixture.hpp"
#include "staging/cpu_budget.hpp"
#include "staging_test_support.hpp"
#include "stream_order_cases.hpp"
#include "support/test_hooks.hpp"

using namespace drvshim;
using namespace drvshim_test;
namespace hooks = drvshim::detail::test_hooks;

namespace {

bool membarrier_available() {
  const long cmds = syscall(SYS_membarrier, MEMBARRIER_CMD_QUERY, 0, 0);
  return cmds > 0 && (cmds & MEMBARRIER_CMD_PRIVATE_EXPEDITED) != 0;
}

std::vector<std::uint8_t> pattern(std::size_t bytes, unsigned seed) {
  std::vector<std::uint8_t> v(bytes);
  for (std::size_t i = 0; i < bytes; ++i) v[i] = test_byte(i, seed);
  return v;
}

int thread_count_of_process() {
  int n = 0;
  if (DIR* d = opendir("/proc/self/task")) {
    while (dirent* e = readdir(d)) n += e->d_name[0] != '.' ? 1 : 0;
    closedir(d);
  }
  return n;
}

// A test hook's shared state: which thread it acts on, and a handshake.
struct HookStage {
  std::mutex m;
  std::condition_variable cv;
  std::thread::id target;
  int step = 0;
  bool armed = false;
  bool timed_out = false;
  void advance_to(int s) {
    std::lock_guard<std::mutex> lock(m);
    step = s;
    cv.notify_all();
  }
  // Waits for `s` at most `limit`; false when it did not come.
  bool wait_for(int s, std::chrono::milliseconds limit) {
    std::unique_lock<std::mutex> lock(m);
    return cv.wait_for(lock, limit, [&] { return step >= s; });
  }
};
HookStage g_stage;

class StagingSafety : public PrimaryContextTest {
 protected:
  void TearDown() override {
    hooks::set(nullptr);
    PrimaryContextTest::TearDown();
  }
  static StagingOptions small() { return small_staging(3); }
  static DeviceSpan<std::byte> bytes_of(const DeviceBuffer& b) { return b.as<std::byte>(); }
  static void* native(const StreamRef& s) { return reinterpret_cast<void*>(s.native()); }
  // The allocation a block really lives in, as the driver reports it.
  void expect_backed_by_its_capacity(const PinnedBlock& b) {
    const PointerInfo info = inspect_pointer(*drv_, b.data());
    EXPECT_EQ(info.range_start, reinterpret_cast<DevicePtr>(b.data()));
    EXPECT_EQ(info.range_size, b.capacity())
        << "a block labelled " << b.capacity() << " bytes lives in an allocation of " << info.range_size;
  }
};

// ---- the pool's thread cache ---------------------------------------------------------------------

// The interleaving that handed out a smaller block than asked: a thread
// looks at another thread's parked block (right size class), and before it
// takes it, the owner takes that block back and parks one of another class.
TEST_F(StagingSafety, AParkedBlockRelabelledByItsOwnerIsNeverHandedOutAsTheOldSize) {
  if (!membarrier_available()) GTEST_SKIP() << "the pool's thread cache needs membarrier(2)";
  PinnedPool pool(ctx());
  std::mutex owner_m;
  std::condition_variable owner_cv;
  int owner_step = 0;  // 1: parked A (128 KiB), holding B (64 KiB); 2: told to swap; 3: swapped
  std::byte* parked_a = nullptr;
  std::thread owner([&] {
    pool.acquire(128 << 10).release();  // this thread gets a slot
    auto a = pool.acquire(128 << 10);
    auto b = pool.acquire(64 << 10);
    parked_a = a.data();
    a.release();  // parked: 128 KiB
    {
      std::unique_lock<std::mutex> lock(owner_m);
      owner_step = 1;
      owner_cv.notify_all();
      owner_cv.wait(lock, [&] { return owner_step == 2; });
    }
    auto again = pool.acquire(128 << 10);  // takes A back from its own slot, without the lock
    EXPECT_EQ(again.data(), parked_a);
    b.release();  // parks B (64 KiB) in the same slot
    {
      std::lock_guard<std::mutex> lock(owner_m);
      owner_step = 3;
      owner_cv.notify_all();
    }
  });
  {
    std::unique_lock<std::mutex> lock(owner_m);
    owner_cv.wait(lock, [&] { return owner_step == 1; });
  }
  static std::atomic<bool> fired{false};
  static std::function<void()> swap_now;
  fired = false;
  swap_now = [&] {
    std::unique_lock<std::mutex> lock(owner_m);
    owner_step = 2;
    owner_cv.notify_all();
    owner_cv.wait(lock, [&] { return owner_step == 3; });
  };
  g_stage.target = std::this_thread::get_id();
  hooks::set([](hooks::Point p) {
    if (p == hooks::Point::pool_unpark && std::this_thread::get_id() == g_stage.target && !fired.exchange(true))
      swap_now();
    return true;
  });
  // No free 128 KiB block: the acquire looks at the owner's slot, labelled 128 KiB.
  auto got = pool.acquire(128 << 10);
  hooks::set(nullptr);
  owner.join();
  EXPECT_TRUE(fired.load()) << "the interleaving was forced";
  EXPECT_EQ(got.capacity(), 128u << 10);
  expect_backed_by_its_capacity(got);
  std::memset(got.data(), 0x5a, got.capacity());  // the whole capacity is writable
  got.release();
  // B went to the 64 KiB list, where a 64 KiB acquire finds it.
  const auto s = pool.stats();
  EXPECT_EQ(s.blocks_in_use, 0u);
  auto small_one = pool.acquire(64 << 10);
  expect_backed_by_its_capacity(small_one);
}

// The same defect, found the way it was found: threads acquiring blocks of
// three sizes while another trims and reads statistics; every block handed
// out is checked against the driver's view of its allocation and written in full.
TEST_F(StagingSafety, EveryBlockIsAsBigAsItsCapacityUnderConcurrentTrim) {
  PinnedPool pool(ctx());
  std::atomic<bool> stop{false};
  std::atomic<unsigned> wrong{0};
  std::thread trimmer([&] {
    while (!stop.load()) {
      (void)pool.trim(0);
      (void)pool.stats();
    }
  });
  const std::size_t sizes[] = {64 << 10, 128 << 10, 256 << 10};
  std::vector<std::thread> users;
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(800);
  for (unsigned t = 0; t < 4; ++t) {
    users.emplace_back([&, t] {
      std::mt19937 rng(t);
      while (std::chrono::steady_clock::now() < until) {
        auto b = pool.acquire(sizes[rng() % 3]);
        const PointerInfo info = inspect_pointer(*drv_, b.data());
        if (info.range_size != b.capacity() || info.range_start != reinterpret_cast<DevicePtr>(b.data())) ++wrong;
        std::memset(b.data(), static_cast<int>(t), b.capacity());
        if (rng() % 4 == 0) {
          auto c = pool.acquire(sizes[rng() % 3]);
          std::memset(c.data(), static_cast<int>(t), c.capacity());
        }
      }
    });
  }
  for (auto& u : users) u.join();
  stop = true;
  trimmer.join();
  EXPECT_EQ(wrong.load(), 0u) << "blocks handed out with a capacity their allocation does not have";
  EXPECT_EQ(pool.stats().blocks_in_use, 0u);
}

// The pool's last handle going while a thread is in the middle of parking a
// block: the handle waits for the parking to finish, so the pool is never
// freed under the parking thread (which, before, read the pool's `closing`
// flag from freed memory).
TEST_F(StagingSafety, ThePoolsLastHandleWaitsForAThreadThatIsParking) {
  if (!membarrier_available()) GTEST_SKIP() << "the pool's thread cache needs membarrier(2)";
  std::optional<PinnedPool> pool(std::in_place, ctx());
  static std::atomic<bool> dropped{false};
  static std::atomic<bool> dropped_while_parking{false};
  dropped = false;
  dropped_while_parking = false;
  g_stage.step = 0;
  std::thread user([&] {
    pool->acquire(64 << 10).release();  // this thread gets a slot
    auto b = pool->acquire(64 << 10);
    g_stage.target = std::this_thread::get_id();
    hooks::set([](hooks::Point p) {
      if (p != hooks::Point::pool_park || std::this_thread::get_id() != g_stage.target) return true;
      g_stage.advance_to(1);  // inside the parking window
      // Give the last handle every chance to free the pool now.
      for (int i = 0; i < 30 && !dropped.load(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
      dropped_while_parking = dropped.load();
      return true;
    });
    b.release();
  });
  ASSERT_TRUE(g_stage.wait_for(1, std::chrono::seconds(10)));
  pool.reset();  // the last handle
  dropped = true;
  user.join();
  hooks::set(nullptr);
  EXPECT_FALSE(dropped_while_parking.load()) << "the pool was dropped while a thread was still parking in it";
  EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 0);
}

// ---- failing stream-ordered copies -----------------------------------------------------------------

// Every driver call of a stream-ordered copy, failed in turn, on a held
// stream (the device has not run any of the copy's work when the call
// fails): one error naming the call; on return no staging block is in use
// (the call waited for the DMAs it queued); nothing writes into the
// destination after the call returned; the engine works afterwards.
TEST_F(StagingSafety, EveryStepOfAStreamOrderedCopyFailsCleanly) {
  const std::size_t n = (5 << 20) + 11;
  const auto src = pattern(n, 5);
  for (const bool to_device : {true, false}) {
    auto stream = Stream::create(ctx());
    auto dev = DeviceBuffer::allocate(ctx(), n);
    std::vector<std::uint8_t> back(n);
    auto run_copy = [&](const StagingEngine& engine) {
      if (to_device) {
        engine.copy_to_device_async(bytes_of(dev), std::as_bytes(std::span(src)), stream.ref());
      } else {
        engine.copy_to_host_async(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)),
                                  stream.ref());
      }
    };
    std::vector<std::pair<std::string, int>> steps;
    {
      PinnedPool pool(ctx());
      StagingEngine engine(pool, small());
      engine.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)));
      drvshim_fake_clear_call_log();
      run_copy(engine);
      stream.ref().synchronize();
      std::map<std::string, int> seen;
      for (const auto& api : fake_calls()) {
        const int nth = ++seen[api];
        if (api == "cuEventQuery" && nth > 1) continue;
        const bool per_dma = api == "cuMemcpyHtoDAsync" || api == "cuMemcpyDtoHAsync" || api == "cuEventRecord" ||
                             api == "cuLaunchHostFunc";
        if (per_dma && static_cast<std::size_t>(nth) > (n + small().chunk_bytes - 1) / small().chunk_bytes) continue;
        // cuEventDestroy: the event a copy larger than the ring waits on is
        // destroyed when the call ends; a destruction's failure is logged, not thrown.
        if (api == "cuCtxGetCurrent" || api == "cuCtxPushCurrent" || api == "cuCtxPopCurrent" ||
            api == "cuStreamSynchronize" || api == "cuEventDestroy") {
          continue;
        }
        steps.emplace_back(api, nth);
      }
    }
    std::set<std::string> apis;
    for (const auto& [api, nth] : steps) apis.insert(api);
    for (const char* expected : to_device ? std::vector<const char*>{"cuMemcpyHtoDAsync", "cuEventRecord"}
                                          : std::vector<const char*>{"cuMemcpyDtoHAsync", "cuLaunchHostFunc"}) {
      EXPECT_TRUE(apis.count(expected)) << expected << " is one of the steps";
    }
    for (const auto& [api, nth] : steps) {
      SCOPED_TRACE(api + " #" + std::to_string(nth) + (to_device ? " H2D" : " D2H"));
      PinnedPool pool(ctx());
      StagingEngine engine(pool, small());
      engine.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)));
      std::fill(back.begin(), back.end(), 0);
      // The device "runs" the stream's work 30 ms from now (a copy to the
      // device bigger than its ring waits for that).
      drvshim_fake_stream_hold(native(stream.ref()), 1);
      std::thread device([h = native(stream.ref())] {
        std::this_thread::sleep_for(std::chrono::milliseconds(30));
        drvshim_fake_stream_hold(h, 0);
      });
      drvshim_fake_fail_call(api.c_str(), nth, 1 /* CUDA_ERROR_INVALID_VALUE */);
      int errors = 0;
      try {
        run_copy(engine);
      } catch (const Error& e) {
        ++errors;
        EXPECT_NE(std::string(e.what()).find(api), std::string::npos) << e.what();
      }
      drvshim_fake_clear_injections();
      EXPECT_EQ(errors, 1);
      EXPECT_EQ(pool.stats().blocks_in_use, 0u) << "a staging block still in use after the failed call returned";
      // Nothing may write into the destination from now on.
      std::fill(back.begin(), back.end(), 0xcd);
      device.join();
      stream.ref().synchronize();
      if (!to_device) {
        EXPECT_EQ(std::count(back.begin(), back.end(), 0xcd), static_cast<std::ptrdiff_t>(n))
            << "the failed call's host functions wrote into the destination after it returned";
      }
      EXPECT_EQ(pool.stats().blocks_in_use, 0u);
      // A block back in the pool is not written by the device any more.
      auto reused = pool.acquire(small().chunk_bytes);
      std::memset(reused.data(), 0x77, reused.size());
      stream.ref().synchronize();
      EXPECT_EQ(std::count(reused.data(), reused.data() + reused.size(), std::byte{0x77}),
                static_cast<std::ptrdiff_t>(reused.size()));
      reused.release();
      // The engine works again.
      run_copy(engine);
      stream.ref().synchronize();
      if (!to_device) {
        EXPECT_EQ(back, src);
      }
    }
  }
}

// The block of a chunk whose DMA is queued but whose host function could not
// be: before, it went back to the pool at once, and the next acquirer's data
// was overwritten by the DMA when the stream ran.
TEST_F(StagingSafety, ABlockWhoseDmaIsQueuedIsNotReusedBeforeTheStreamPassesIt) {
  const std::size_t n = (3 << 20) + 1;
  const auto src = pattern(n, 8);
  auto dev = DeviceBuffer::allocate(ctx(), n);
  copy(bytes_of(dev), std::as_bytes(std::span(src)));
  auto stream = Stream::create(ctx());
  PinnedPool pool(ctx());
  StagingEngine engine(pool, small());
  std::vector<std::uint8_t> back(n);
  // The device has not run the stream's work yet when the call fails.
  drvshim_fake_stream_hold(native(stream.ref()), 1);
  drvshim_fake_fail_call("cuLaunchHostFunc", 2, 1);
  expect_throw<CudaError>([&] {
    engine.copy_to_host_async(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)),
                              stream.ref());
  });
  auto next = pool.acquire(1 << 20);
  std::memset(next.data(), 0x11, next.size());
  drvshim_fake_stream_hold(native(stream.ref()), 0);
  stream.ref().synchronize();
  EXPECT_EQ(std::count(next.data(), next.data() + next.size(), std::byte{0x11}),
            static_cast<std::ptrdiff_t>(next.size()))
      << "a queued DMA wrote into a block handed out again";
}

// A device busy with other work runs a DMA later than it was queued, so a
// ring block may be refilled only once the DMA that reads it has landed: with
// the engine's stream held while the copy starts (its DMAs queue but do not
// run), copies several times the ring's size, both ways, must bring every
// byte once the stream runs.
TEST_F(StagingSafety, CopiesLargerThanTheRingStayExactWhenDmasRunLate) {
  const std::size_t n = (13 << 20) + 7;  // more than four times the ring of three 1 MiB blocks
  const auto src = pattern(n, 21);
  auto dev = DeviceBuffer::allocate(ctx(), n);
  PinnedPool pool(ctx());
  drvshim_fake_hold_new_streams(1);
  StagingEngine engine(pool, small());  // its stream: held
  drvshim_fake_hold_new_streams(0);
  const auto late = [](const std::function<void()>& copy_now) {
    std::thread device_busy([] {
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      drvshim_fake_release_streams();
    });
    copy_now();
    device_busy.join();
  };
  late([&] { engine.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src))); });
  std::vector<std::uint8_t> direct(n);
  copy(std::as_writable_bytes(std::span(direct)), DeviceSpan<const std::byte>(bytes_of(dev)));
  EXPECT_TRUE(direct == src) << "the device received other bytes than the source's";
  std::vector<std::uint8_t> back(n);
  drvshim_fake_hold_new_streams(1);
  StagingEngine other(pool, small());
  drvshim_fake_hold_new_streams(0);
  late(
      [&] { other.copy_to_host(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev))); });
  EXPECT_TRUE(back == src) << "the host received other bytes than the device's";
  EXPECT_EQ(engine.stats().staged_copies + other.stats().staged_copies, 2u);
}

// A synchronous copy that fails midway still waits for the DMAs it queued
// before its blocks go back: the device would otherwise write into blocks
// the pool has handed out again. The engine's stream is held, so the DMAs
// queued before the failure have not run when it comes.
TEST_F(StagingSafety, ACopyThatFailsMidwayWaitsForItsQueuedDmasBeforeGivingBlocksBack) {
  const std::size_t n = 6 << 20;
  const auto src = pattern(n, 22);
  auto dev = DeviceBuffer::allocate(ctx(), n);
  copy(bytes_of(dev), std::as_bytes(std::span(src)));
  PinnedPool pool(ctx());
  drvshim_fake_hold_new_streams(1);
  StagingEngine engine(pool, small());
  drvshim_fake_hold_new_streams(0);
  std::vector<std::uint8_t> back(n);
  drvshim_fake_fail_call("cuMemcpyDtoHAsync", 3, CUDA_ERROR_UNKNOWN);
  expect_throw<CudaError>([&] {
    engine.copy_to_host(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)));
  });
  std::vector<PinnedBlock> again;
  for (int i = 0; i < 3; ++i) {
    again.push_back(pool.acquire(1 << 20));
    std::memset(again.back().data(), 0x11, again.back().size());
  }
  drvshim_fake_release_streams();  // whatever is still queued runs now
  ctx().synchronize();
  for (const auto& b : again) {
    EXPECT_EQ(std::count(b.data(), b.data() + b.size(), std::byte{0x11}), static_cast<std::ptrdiff_t>(b.size()))
        << "a DMA of the failed copy wrote into a block handed out again";
  }
}

// ---- ordering after the legacy default stream -------------------------------------------------------

// The fake's "slow work": the legacy stream is held with a fill queued on it,
// and released by a timer; a copy that does not wait for it reads zeros.
TEST_F(StagingSafety, SynchronousCopiesAreOrderedAfterTheLegacyStream) {
  const auto legacy_ctx = reinterpret_cast<void*>(ctx().address());
  BusyLegacyStream busy = [&](DeviceSpan<std::uint32_t> buffer, std::uint32_t value) -> std::function<void()> {
    drvshim_fake_legacy_stream_hold(legacy_ctx, 1);
    fill_async(StreamRef::legacy_default(ctx()), buffer, value);
    auto timer = std::make_shared<std::thread>([legacy_ctx] {
      std::this_thread::sleep_for(std::chrono::milliseconds(30));
      drvshim_fake_legacy_stream_hold(legacy_ctx, 0);
    });
    return [timer] { timer->join(); };
  };
  for (const auto& c : run_stream_order_cases(ctx(), (4u << 20) / 4, busy)) {
    EXPECT_EQ(c.observed, c.expected) << c.name;
  }
}

// ---- helper threads and the CPU budget ------------------------------------------------------------

TEST_F(StagingSafety, AHelperThreadThatCannotStartIsAnErrorAndLeavesNothingRunning) {
  const unsigned cpus = drvshim::detail::usable_cpus();
  if (cpus < 2) GTEST_SKIP() << "one CPU: the engine starts no helper thread";
  PinnedPool pool(ctx());
  const int before = thread_count_of_process();
  static std::atomic<unsigned> starts{0};
  static unsigned helpers = 0;
  starts = 0;
  helpers = std::min(8u, cpus) - 1;
  // The last helper's start fails (the ones before it are running by then).
  hooks::set([](hooks::Point p) { return p != hooks::Point::thread_start || ++starts < helpers; });
  StagingOptions o = small();
  o.threads = helpers + 1;
  const auto e = expect_throw<SystemError>([&] { StagingEngine engine(pool, o); });
  hooks::set(nullptr);
  EXPECT_EQ(e.kind(), ErrorKind::system);
  EXPECT_NE(std::string(e.what()).find("helper thread"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("StagingEngine"), std::string::npos) << e.what();
  EXPECT_EQ(thread_count_of_process(), before) << "the helpers started before the failure are stopped";
  // A later engine works.
  StagingEngine engine(pool, small());
  const auto src = pattern(2 << 20, 1);
  auto dev = DeviceBuffer::allocate(ctx(), src.size());
  engine.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)));
}

TEST(CpuBudget, QuotasAreReadFromCgroupFiles) {
  using drvshim::detail::parse_cfs_quota;
  using drvshim::detail::parse_cpu_max;
  EXPECT_EQ(parse_cpu_max("200000 100000\n"), 2.0);
  EXPECT_EQ(parse_cpu_max("50000 100000"), 0.5);
  EXPECT_FALSE(parse_cpu_max("max 100000\n").has_value());
  EXPECT_FALSE(parse_cpu_max("").has_value());
  EXPECT_FALSE(parse_cpu_max("garbage").has_value());
  EXPECT_FALSE(parse_cpu_max("-5 100000").has_value());
  EXPECT_EQ(parse_cfs_quota("150000\n", "100000\n"), 1.5);
  EXPECT_FALSE(parse_cfs_quota("-1\n", "100000\n").has_value());
  EXPECT_FALSE(parse_cfs_quota("", "").has_value());
  EXPECT_EQ(drvshim::detail::cgroup_v2_path("12:cpu:/x\n0::/system.slice/a.service\n"), "/system.slice/a.service");
  EXPECT_EQ(drvshim::detail::cgroup_v2_path("0::/\n"), "/");
  EXPECT_EQ(drvshim::detail::cgroup_v2_path("4:cpu,cpuacct:/docker/1\n"), "");
}

// Restricts the calling thread to the first `n` CPUs it may use; restores on destruction.
class AffinityScope {
 public:
  explicit AffinityScope(int n) {
    sched_getaffinity(0, sizeof saved_, &saved_);
    cpu_set_t set;
    CPU_ZERO(&set);
    int taken = 0;
    for (std::size_t cpu = 0; cpu < CPU_SETSIZE && taken < n; ++cpu) {
      if (CPU_ISSET(cpu, &saved_)) {
        CPU_SET(cpu, &set);
        ++taken;
      }
    }
    ok_ = taken == n && sched_setaffinity(0, sizeof set, &set) == 0;
  }
  ~AffinityScope() { sched_setaffinity(0, sizeof saved_, &saved_); }
  bool ok() const { return ok_; }

 private:
  cpu_set_t saved_;
  bool ok_ = false;
};

TEST_F(StagingSafety, TheCrewNeverOutnumbersTheCpusTheProcessMayUse) {
  PinnedPool pool(ctx());
  const auto src = pattern((8 << 20) + 3, 2);
  auto dev = DeviceBuffer::allocate(ctx(), src.size());
  std::vector<std::uint8_t> back(src.size());
  {
    AffinityScope one(1);
    ASSERT_TRUE(one.ok());
    EXPECT_EQ(drvshim::detail::usable_cpus(), 1u);
    StagingOptions o = small();
    o.threads = 8;  // asked for more than the budget
    StagingEngine engine(pool, o);
    EXPECT_EQ(engine.options().threads, 1u) << "never more threads than CPUs";
    const int threads_before = thread_count_of_process();
    engine.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)));
    engine.copy_to_host(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)));
    EXPECT_EQ(back, src);
    EXPECT_EQ(engine.stats().staged_copies, 0u) << "one CPU cannot beat the driver's own path: it is taken";
    EXPECT_EQ(engine.stats().direct_copies, 2u);
    EXPECT_EQ(thread_count_of_process(), threads_before) << "no helper threads";
    StagingEngine automatic(pool, StagingOptions{});
    EXPECT_EQ(automatic.options().threads, 1u);
  }
  if (drvshim::detail::usable_cpus() >= 2) {
    AffinityScope two(2);
    ASSERT_TRUE(two.ok());
    StagingOptions o = small();
    o.threads = 0;
    StagingEngine engine(pool, o);
    EXPECT_LE(engine.options().threads, 2u);
    o.threads = 2;
    StagingEngine two_threads(pool, o);
    EXPECT_EQ(two_threads.options().threads, 2u);
    std::fill(back.begin(), back.end(), 0);
    two_threads.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)));
    two_threads.copy_to_host(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)));
    EXPECT_EQ(back, src);
    EXPECT_EQ(two_threads.stats().staged_copies, 2u) << "two threads asked for: staged both ways";
    StagingEngine automatic(pool, StagingOptions{});  // two CPUs, automatic: two threads
    ASSERT_EQ(automatic.options().threads, 2u);
    automatic.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)));
    automatic.copy_to_host(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)));
    EXPECT_EQ(back, src);
    EXPECT_EQ(automatic.stats().staged_copies, 1u) << "two CPUs, automatic: staged to the host only";
    EXPECT_EQ(automatic.stats().direct_copies, 1u) << "two threads do not beat the driver to the device";
  }
}

// The engine applies staging_choice.hpp's rule: with an automatic count of
// three threads (4 CPUs), copies to the device below 4 MiB go to the driver;
// with four (5 CPUs) they are staged; copies to the host are staged either way.
// The CPU count is forced through a test hook (this machine may have fewer).
TEST_F(StagingSafety, SmallCopiesToTheDeviceGoDirectWithThreeAutomaticThreads) {
  struct ForcedCpus {
    explicit ForcedCpus(unsigned n) { drvshim::detail::test_hooks::g_usable_cpus.store(n); }
    ~ForcedCpus() { drvshim::detail::test_hooks::g_usable_cpus.store(0); }
  };
  PinnedPool pool(ctx());
  const auto src = pattern(std::size_t{8} << 20, 5);
  auto dev = DeviceBuffer::allocate(ctx(), src.size());
  const auto small = std::as_bytes(std::span(src)).first(std::size_t{2} << 20);
  const auto whole = std::as_bytes(std::span(src));
  std::vector<std::uint8_t> back(src.size());
  {
    const ForcedCpus four(4);
    StagingEngine engine(pool, StagingOptions{});
    ASSERT_EQ(engine.options().threads, 3u);
    engine.copy_to_device(bytes_of(dev).subspan(0, small.size()), small);
    EXPECT_EQ(engine.stats().direct_copies, 1u) << "2 MiB to the device with three threads: the driver's path";
    EXPECT_EQ(engine.stats().staged_copies, 0u);
    engine.copy_to_device(bytes_of(dev), whole);
    EXPECT_EQ(engine.stats().staged_copies, 1u) << "8 MiB to the device: staged";
    engine.copy_to_host(std::as_writable_bytes(std::span(back)).first(small.size()),
                        DeviceSpan<const std::byte>(bytes_of(dev).subspan(0, small.size())));
    EXPECT_EQ(engine.stats().staged_copies, 2u) << "2 MiB to the host: staged";
    engine.copy_to_host(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)));
    EXPECT_EQ(back, src);
  }
  {
    const ForcedCpus five(5);
    StagingEngine engine(pool, StagingOptions{});
    ASSERT_EQ(engine.options().threads, 4u);
    engine.copy_to_device(bytes_of(dev).subspan(0, small.size()), small);
    EXPECT_EQ(engine.stats().staged_copies, 1u) << "2 MiB to the device with four threads: staged";
    EXPECT_EQ(engine.stats().direct_copies, 0u);
  }
}

// Many threads on one engine while each copy's helpers share the CPUs: every
// byte arrives (the TSan lane runs this for races between conductor and crew).
TEST_F(StagingSafety, CopiesFromManyThreadsOnOneEngineStayCorrect) {
  PinnedPool pool(ctx());
  StagingOptions o = small();
  o.threads = 2;
  o.spin = std::chrono::microseconds(200);
  StagingEngine engine(pool, o);
  std::vector<std::thread> threads;
  std::atomic<int> good{0};
  for (unsigned t = 0; t < 6; ++t) {
    threads.emplace_back([&, t] {
      const std::size_t n = (2 << 20) + t * 8191;
      const auto src = pattern(n, t + 40);
      std::vector<std::uint8_t> back(n);
      auto dev = DeviceBuffer::allocate(ctx(), n);
      auto stream = Stream::create(ctx());
      for (int round = 0; round < 4; ++round) {
        if (round % 2 == 0) {
          engine.copy_to_device(bytes_of(dev), std::as_bytes(std::span(src)));
          engine.copy_to_host(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)));
        } else {
          engine.copy_to_device_async(bytes_of(dev), std::as_bytes(std::span(src)), stream.ref());
          engine.copy_to_host_async(std::as_writable_bytes(std::span(back)), DeviceSpan<const std::byte>(bytes_of(dev)),
                                    stream.ref());
          stream.ref().synchronize();
        }
        if (back == src) ++good;
        std::fill(back.begin(), back.end(), 0);
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(good.load(), 24);
  EXPECT_EQ(pool.stats().blocks_in_use, 0u);
}

}  // namespace
