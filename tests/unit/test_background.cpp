// SPDX-License-Identifier: Apache-2.0
// Background initialisation (drvshim::BackgroundInit) against the
// fake: the steps and what they make, callers waiting for a step in progress
// (the wait logged and traced), failures injected into cuInit and the retain
// surfacing at the handle and at the first call that needs the step,
// destruction while cuInit still runs, many threads waiting at once, the
// NVRTC warm-up task, exit with a live handle. runtime_compat's background
// policy: test_runtime_compat_background.cpp.
#include <dirent.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <drvshim/nvrtc_warmup.hpp>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <future>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "background_test_support.hpp"
#include "rt_fixture.hpp"

extern char** environ;

using namespace drvshim;
using namespace drvshim_test;
using namespace background_test;

namespace {

constexpr const char* kModulePtx = R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry scale(
    .param .u64 scale_param_0,
    .param .f32 scale_param_1,
    .param .u32 scale_param_2,
    .param .u32 scale_param_3
)
{
    ret;
}
)";

std::vector<std::byte> image_of(const char* text) {
  std::vector<std::byte> out;
  for (const char* p = text; *p != '\0'; ++p) out.push_back(static_cast<std::byte>(*p));
  out.push_back(std::byte{0});
  return out;
}

// The threads of this process, by id. The first thread a process creates
// under TSan also starts TSan's own background thread, for good: one thread
// started and joined first keeps that one out of a before/after comparison.
std::set<std::string> thread_ids() {
  static const bool settled = [] {
    std::thread([] {}).join();
    return true;
  }();
  (void)settled;
  std::set<std::string> ids;
  if (DIR* d = opendir("/proc/self/task")) {
    while (const dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') ids.insert(e->d_name);
    }
    closedir(d);
  }
  return ids;
}

// The threads alive now that were not in `before`. Compared by id, not by
// count: a thread an earlier test let go may still be exiting when `before`
// is taken, and its exit must not hide (or be taken for) a thread this test
// leaves behind. pthread_join returns when the kernel clears the thread's id,
// a moment before the task leaves /proc: a new thread is given 100 ms to go
// (far less than the 300 ms cuInit takes here, so a helper left detached
// while cuInit sleeps is still seen).
std::vector<std::string> threads_started_since(const std::set<std::string>& before) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  for (;;) {
    std::vector<std::string> out;
    for (const auto& id : thread_ids()) {
      if (before.count(id) == 0) out.push_back(id);
    }
    if (out.empty() || std::chrono::steady_clock::now() > deadline) return out;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

const InitStepReport step_named(const BackgroundInit& bg, std::string_view name) {
  const std::size_t i = bg.find(name);
  EXPECT_LT(i, bg.step_count()) << "no step " << name;
  return bg.step(i);
}

// Polls the no-throw query until step `name` runs (the fake's slow cuInit, a blocked task).
void until_running(const BackgroundInit& bg, std::string_view name) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (bg.step(bg.find(name)).state == InitStepState::pending && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  ASSERT_EQ(bg.step(bg.find(name)).state, InitStepState::running) << name;
}

// The "background-wait" events of calls named `caller`.
std::vector<trace::Record> waits_of(const std::string& caller) {
  std::vector<trace::Record> out;
  for (const auto& r : events("background-wait")) {
    if (r.args.rfind(caller + " waited ", 0) == 0) out.push_back(r);
  }
  return out;
}

BackgroundInitOptions fake_options() {
  BackgroundInitOptions o;
  o.load.path = DRVSHIM_TEST_FAKE_PATH;
  return o;
}

using Background = FakeDriverTest;

TEST_F(Background, RunsItsStepsInOrderAndHandsOutWhatTheyMade) {
  drvshim_fake_clear_call_log();
  trace::enable(true);
  auto o = fake_options();
  o.primary_contexts = {0};
  o.libraries.push_back({"lib", {}, image_of(kModulePtx)});
  o.modules.push_back({"mod", 0, {}, image_of(kModulePtx)});
  bool task_ran = false;
  o.tasks.push_back({"mark", [&] { task_ran = true; }});
  {
    auto bg = BackgroundInit::start(std::move(o));
    bg.wait();
    EXPECT_TRUE(bg.finished());
    EXPECT_EQ(bg.error(), nullptr);
    ASSERT_EQ(bg.step_count(), 6u);
    const char* names[] = {"load", "init", "primary-context 0", "library lib", "module mod", "task mark"};
    const InitStepKind kinds[] = {InitStepKind::load,    InitStepKind::init,   InitStepKind::primary_context,
                                  InitStepKind::library, InitStepKind::module, InitStepKind::task};
    for (std::size_t i = 0; i < 6; ++i) {
      const auto r = bg.step(i);
      EXPECT_EQ(r.name, names[i]);
      EXPECT_EQ(r.kind, kinds[i]);
      EXPECT_EQ(r.state, InitStepState::done) << r.name << ": " << r.error;
      EXPECT_EQ(r.code, 0);
      EXPECT_TRUE(r.error.empty());
    }
    EXPECT_EQ(bg.step(2).device, 0);
    EXPECT_EQ(bg.step(4).device, 0);
    EXPECT_EQ(bg.step(3).device, -1);
    EXPECT_TRUE(task_ran);

    const Driver drv = bg.driver();
    EXPECT_TRUE(drv.initialized());
    EXPECT_EQ(drvshim_fake_primary_refcount(0), 1) << "the handle holds one retain";
    EXPECT_NE(bg.primary_context(0).address(), 0u);
    EXPECT_TRUE(bg.primary_context(0).is_primary());
    EXPECT_EQ(bg.module("mod").kernel("scale").params()->size(), 4u);
    EXPECT_EQ(bg.library("lib").kernel(bg.primary_context(0), "scale").params()->size(), 4u);
    EXPECT_EQ(drvshim_fake_live_modules(), 2);
    // The driver calls of the steps, in order, on the helper thread.
    std::vector<std::string> order;
    for (const auto& c : fake_calls()) {
      if (c == "cuInit" || c == "cuDevicePrimaryCtxRetain" || c == "cuLibraryLoadData" || c == "cuModuleLoadDataEx") {
        if (order.empty() || order.back() != c) order.push_back(c);
      }
    }
    EXPECT_EQ(order, (std::vector<std::string>{"cuInit", "cuDevicePrimaryCtxRetain", "cuLibraryLoadData",
                                               "cuModuleLoadDataEx"}));
  }
  EXPECT_EQ(drvshim_fake_primary_refcount(0), 0) << "the handle released its retain";
  EXPECT_EQ(drvshim_fake_live_modules(), 0) << "and unloaded its module and library";
  const auto steps = events("background-step");
  ASSERT_EQ(steps.size(), 6u);
  EXPECT_EQ(steps[1].args.rfind("init: done in ", 0), 0u) << steps[1].args;
  EXPECT_EQ(events("background-start").size(), 1u);
  EXPECT_TRUE(waits_of("Driver::device_count").empty()) << "nothing the driver's own calls needed was still running";
}

// A call that needs a step in progress waits for it, and says so in the log and the trace.
TEST_F(Background, ACallThatNeedsInitWaitsForTheBackgroundCuInitAndTheTraceShowsTheWait) {
  const ScopedEnv slow("DRVSHIM_FAKE_INIT_DELAY_MS", "300");
  trace::enable(true);
  std::vector<std::string> logs;
  log::set_level(log::Level::info);
  log::set_sink([&](log::Level, std::string_view m) { logs.emplace_back(m); });
  auto bg = BackgroundInit::start(fake_options());
  const Driver drv = bg.driver();  // the load is quick; cuInit sleeps 300 ms on the helper thread
  EXPECT_EQ(drv.device_count(), 1) << "waited for the background cuInit instead of MissingStepError";
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 1u) << "one cuInit: the waiting call did not make its own";
  bg.wait();
  log::set_sink({});
  const auto waits = waits_of("Driver::device_count");
  ASSERT_EQ(waits.size(), 1u);
  EXPECT_NE(waits[0].args.find(" for init (done)"), std::string::npos) << waits[0].args;
  // The wait spans the end of the helper thread's cuInit.
  const auto records = trace::records();
  const auto init =
      std::find_if(records.begin(), records.end(), [](const trace::Record& r) { return r.api == "cuInit"; });
  ASSERT_NE(init, records.end());
  EXPECT_NE(init->thread, waits[0].thread) << "cuInit ran on the helper thread";
  EXPECT_LT(waits[0].timestamp_ns, init->timestamp_ns + init->duration_ns);
  EXPECT_GE(waits[0].timestamp_ns + waits[0].duration_ns, init->timestamp_ns + init->duration_ns);
  EXPECT_GT(step_named(bg, "init").waited.count(), 0);
  EXPECT_NE(std::find_if(logs.begin(), logs.end(),
                         [](const std::string& m) {
                           return m.rfind("Driver::device_count waits for the background step init (", 0) == 0;
                         }),
            logs.end());
}

TEST_F(Background, ManyThreadsWaitingForTheSameStepsGetOneCuInitAndOneActivation) {
  const ScopedEnv slow("DRVSHIM_FAKE_INIT_DELAY_MS", "300");
  trace::enable(true);
  auto o = fake_options();
  o.primary_contexts = {0};
  auto bg = BackgroundInit::start(std::move(o));
  Driver drv = bg.driver();
  constexpr int kThreads = 8;
  std::vector<std::optional<PrimaryContext>> own(kThreads / 2);
  std::vector<std::uintptr_t> seen(kThreads, 0);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      if (t % 2 == 0) {
        // Waits for init (device), then for the background retain, then retains again.
        own[static_cast<std::size_t>(t / 2)].emplace(drv.device(0).retain_primary_context());
        seen[static_cast<std::size_t>(t)] = own[static_cast<std::size_t>(t / 2)]->ref().address();
      } else {
        seen[static_cast<std::size_t>(t)] = bg.primary_context(0).address();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (int t = 0; t < kThreads; ++t) EXPECT_EQ(seen[static_cast<std::size_t>(t)], seen[0]) << "thread " << t;
  EXPECT_NE(seen[0], 0u);
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 1u);
  EXPECT_EQ(drvshim_fake_primary_refcount(0), 1 + kThreads / 2);
  EXPECT_EQ(drv.device(0).primary_context_ledger().retains, 1u + kThreads / 2);
  for (auto& p : own) {
    EXPECT_FALSE(p->adopted()) << "drvshim's own background activation is not another component's";
  }
  EXPECT_EQ(events("activate-primary-context").size(), 1u) << "one activation, by the background step";
  EXPECT_EQ(events("adopt-primary-context").size(), 0u);
  const auto waits = events("background-wait");
  EXPECT_GE(waits.size(), 1u);
  for (const auto& w : waits) {
    const bool known = w.args.rfind("Driver::device waited ", 0) == 0 ||
                       w.args.rfind("Device::retain_primary_context waited ", 0) == 0 ||
                       w.args.rfind("BackgroundInit::primary_context waited ", 0) == 0 ||
                       w.args.rfind("BackgroundInit::driver waited ", 0) == 0;
    EXPECT_TRUE(known) << w.args;
  }
  own.clear();
}

// Regression guard for the injection's timing: set before start, so the helper thread meets it.
TEST_F(Background, ACuInitFailureSurfacesAtTheHandleAndAtEveryCallThatNeedsInitUntilInitIsRedone) {
  drvshim_fake_fail_call("cuInit", 1, CUDA_ERROR_OPERATING_SYSTEM);
  auto o = fake_options();
  o.primary_contexts = {0};
  o.modules.push_back({"mod", 0, {}, image_of(kModulePtx)});
  bool task_ran = false;
  o.tasks.push_back({"independent", [&] { task_ran = true; }});
  auto bg = BackgroundInit::start(std::move(o));
  Driver drv = bg.driver();
  for (int i = 0; i < 2; ++i) {
    const auto e = expect_throw<CudaError>([&] { (void)drv.device_count(); });
    EXPECT_EQ(e.code(), CUDA_ERROR_OPERATING_SYSTEM) << "the original driver error, call " << i;
    EXPECT_EQ(e.api(), "cuInit");
  }
  EXPECT_TRUE(bg.wait_for(std::chrono::seconds(10)));
  EXPECT_EQ(expect_throw<CudaError>([&] { bg.wait(); }).code(), CUDA_ERROR_OPERATING_SYSTEM);
  EXPECT_EQ(expect_throw<CudaError>([&] { (void)bg.primary_context(0); }).code(), CUDA_ERROR_OPERATING_SYSTEM)
      << "a step skipped because init failed carries init's error";
  EXPECT_EQ(expect_throw<CudaError>([&] { (void)bg.module("mod"); }).code(), CUDA_ERROR_OPERATING_SYSTEM);
  const auto init = step_named(bg, "init");
  EXPECT_EQ(init.state, InitStepState::failed);
  EXPECT_EQ(init.code, CUDA_ERROR_OPERATING_SYSTEM);
  EXPECT_NE(init.error.find("CUDA_ERROR_OPERATING_SYSTEM"), std::string_view::npos) << init.error;
  EXPECT_EQ(step_named(bg, "primary-context 0").state, InitStepState::skipped);
  EXPECT_EQ(step_named(bg, "primary-context 0").code, CUDA_ERROR_OPERATING_SYSTEM);
  EXPECT_EQ(step_named(bg, "primary-context 0").error, "init did not succeed");
  EXPECT_EQ(step_named(bg, "task independent").state, InitStepState::done) << "a task depends on no driver step";
  EXPECT_TRUE(task_ran);
  EXPECT_EQ(drvshim_fake_call_count("cuDevicePrimaryCtxRetain"), 0u);
  EXPECT_NE(bg.error(), nullptr);
  // The error was reported: Driver::init() is now the program's retry.
  drv.init();
  EXPECT_EQ(drv.device_count(), 1);
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 2u);
}

TEST_F(Background, DriverInitAfterABackgroundFailureThrowsTheOriginalErrorOnceThenRetries) {
  drvshim_fake_fail_call("cuInit", 1, CUDA_ERROR_NO_DEVICE);
  auto bg = BackgroundInit::start(fake_options());
  Driver drv = bg.driver();
  const auto e = expect_throw<CudaError>([&] { drv.init(); });
  EXPECT_EQ(e.code(), CUDA_ERROR_NO_DEVICE);
  EXPECT_EQ(e.api(), "cuInit");
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 1u)
      << "the first init() reported the background's failure, no second cuInit";
  drv.init();
  EXPECT_TRUE(drv.initialized());
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 2u);
}

TEST_F(Background, ARetainFailureSurfacesAtTheHandleAndOnceAtTheFirstRetainOfThatDevice) {
  drvshim_fake_fail_call("cuDevicePrimaryCtxRetain", 1, CUDA_ERROR_OUT_OF_MEMORY);
  auto o = fake_options();
  o.primary_contexts = {0};
  o.modules.push_back({"mod", 0, {}, image_of(kModulePtx)});
  auto bg = BackgroundInit::start(std::move(o));
  Driver drv = bg.driver();
  const Device dev = drv.device(0);
  const auto e = expect_throw<CudaError>([&] { (void)dev.retain_primary_context(); });
  EXPECT_EQ(e.code(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(e.api(), "cuDevicePrimaryCtxRetain");
  EXPECT_EQ(drvshim_fake_call_count("cuDevicePrimaryCtxRetain"), 1u) << "the background's retain only";
  {
    PrimaryContext own = dev.retain_primary_context();  // the program's retry
    EXPECT_TRUE(own);
    EXPECT_EQ(drvshim_fake_primary_refcount(0), 1);
  }
  for (int i = 0; i < 2; ++i) {
    EXPECT_EQ(expect_throw<CudaError>([&] { (void)bg.primary_context(0); }).code(), CUDA_ERROR_OUT_OF_MEMORY);
  }
  EXPECT_EQ(expect_throw<CudaError>([&] { (void)bg.module("mod"); }).code(), CUDA_ERROR_OUT_OF_MEMORY);
  EXPECT_EQ(step_named(bg, "module mod").state, InitStepState::skipped);
  EXPECT_EQ(step_named(bg, "init").state, InitStepState::done);
}

TEST_F(Background, ALoadFailureIsTheLoadersErrorAndEveryDriverStepIsSkipped) {
  BackgroundInitOptions o;
  o.load.path = "/nonexistent/libcuda.so.1";
  o.primary_contexts = {0};
  auto bg = BackgroundInit::start(std::move(o));
  const auto e = expect_throw<DriverNotFoundError>([&] { (void)bg.driver(); });
  EXPECT_EQ(e.paths_tried(), std::vector<std::string>{"/nonexistent/libcuda.so.1"});
  EXPECT_THROW(bg.wait(), DriverNotFoundError);
  EXPECT_THROW((void)bg.primary_context(0), DriverNotFoundError);
  EXPECT_EQ(step_named(bg, "init").state, InitStepState::skipped);
  EXPECT_EQ(step_named(bg, "init").error, "load did not succeed");
}

// Destruction while the helper thread is inside cuInit: the destructor waits
// for cuInit, skips the rest, joins the thread, and leaks nothing.
TEST_F(Background, DestroyingTheDriverAndTheHandleWhileCuInitRunsIsSafe) {
  const ScopedEnv slow("DRVSHIM_FAKE_INIT_DELAY_MS", "300");
  trace::enable(true);
  const auto threads_before = thread_ids();
  auto o = fake_options();
  o.primary_contexts = {0};
  o.modules.push_back({"mod", 0, {}, image_of(kModulePtx)});
  {
    auto bg = BackgroundInit::start(std::move(o));
    { const Driver drv = bg.driver(); }  // a copy of the Driver, gone at once
    until_running(bg, "init");
    EXPECT_FALSE(bg.finished());
  }  // the handle, while cuInit sleeps
  EXPECT_TRUE(threads_started_since(threads_before).empty()) << "the helper thread was joined";
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 1u);
  EXPECT_EQ(drvshim_fake_call_count("cuDevicePrimaryCtxRetain"), 0u) << "the steps after cuInit were skipped";
  const auto destroyed = events("background-destroy");
  ASSERT_EQ(destroyed.size(), 1u);
  EXPECT_EQ(destroyed[0].args.rfind("destroyed while init ran: waited ", 0), 0u) << destroyed[0].args;
  EXPECT_NE(destroyed[0].args.find("; 2 later step(s) skipped"), std::string::npos) << destroyed[0].args;
}

TEST_F(Background, TheDriverOutlivesTheHandleDestroyedDuringCuInit) {
  const ScopedEnv slow("DRVSHIM_FAKE_INIT_DELAY_MS", "300");
  std::optional<Driver> drv;
  {
    auto bg = BackgroundInit::start(fake_options());
    drv.emplace(bg.driver());
    until_running(bg, "init");
  }
  EXPECT_TRUE(drv->initialized()) << "the step in progress finished before the handle went";
  EXPECT_EQ(drv->device_count(), 1);
  PrimaryContext p = drv->device(0).retain_primary_context();
  EXPECT_FALSE(p.adopted());
}

TEST_F(Background, DestroyingTheHandleWaitsForARunningTaskAndSkipsTheRest) {
  std::promise<void> entered;
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::atomic<bool> first_done{false};
  std::atomic<bool> second_ran{false};
  auto o = fake_options();
  o.tasks.push_back({"first", [&] {
                       entered.set_value();
                       released.wait();
                       first_done = true;
                     }});
  o.tasks.push_back({"second", [&] { second_ran = true; }});
  auto bg = std::make_unique<BackgroundInit>(BackgroundInit::start(std::move(o)));
  entered.get_future().wait();
  std::thread releaser([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    release.set_value();
  });
  bg.reset();
  EXPECT_TRUE(first_done) << "the destructor returned only after the running task";
  EXPECT_FALSE(second_ran);
  releaser.join();
}

TEST_F(Background, TakingAPrimaryContextMovesTheHandlesRetain) {
  auto o = fake_options();
  o.primary_contexts = {0};
  auto bg = BackgroundInit::start(std::move(o));
  PrimaryContext p = bg.take_primary_context(0);
  EXPECT_TRUE(p);
  EXPECT_EQ(drvshim_fake_primary_refcount(0), 1);
  EXPECT_THROW((void)bg.primary_context(0), InvalidArgumentError);
  EXPECT_THROW((void)bg.take_primary_context(0), InvalidArgumentError);
  p.release();
  EXPECT_EQ(drvshim_fake_primary_refcount(0), 0);
}

TEST_F(Background, OptionsThatCannotWorkAreRefusedBeforeAnyThreadStarts) {
  const auto threads_before = thread_ids();
  auto module_elsewhere = fake_options();
  module_elsewhere.primary_contexts = {0};
  module_elsewhere.modules.push_back({"mod", 1, {}, image_of(kModulePtx)});
  const auto e = expect_throw<InvalidArgumentError>([&] { (void)BackgroundInit::start(std::move(module_elsewhere)); });
  EXPECT_NE(
      std::string(e.what()).find("module \"mod\" is for device 1, whose primary context is not in primary_contexts"),
      std::string::npos)
      << e.what();
  auto twice = fake_options();
  twice.tasks.push_back({"t", [] {}});
  twice.tasks.push_back({"t", [] {}});
  EXPECT_NE(
      std::string(expect_throw<InvalidArgumentError>([&] { (void)BackgroundInit::start(std::move(twice)); }).what())
          .find("two tasks are named \"t\""),
      std::string::npos);
  auto empty = fake_options();
  empty.libraries.push_back({"lib", {}, {}});
  EXPECT_THROW((void)BackgroundInit::start(std::move(empty)), InvalidArgumentError);
  auto repeated = fake_options();
  repeated.primary_contexts = {0, 0};
  EXPECT_THROW((void)BackgroundInit::start(std::move(repeated)), InvalidArgumentError);
  EXPECT_TRUE(threads_started_since(threads_before).empty()) << "no thread was started";
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 0u);
}

TEST_F(Background, UnknownNamesAndAMovedFromHandleAreClearErrors) {
  auto bg = BackgroundInit::start(fake_options());
  const auto unknown = expect_throw<InvalidArgumentError>([&] { bg.wait("nit"); });
  EXPECT_NE(std::string(unknown.what()).find("there is no step named \"nit\""), std::string::npos);
  EXPECT_NE(std::string(unknown.what()).find("the steps are: load, init"), std::string::npos) << unknown.what();
  EXPECT_THROW((void)bg.module("none"), InvalidArgumentError);
  EXPECT_THROW((void)bg.primary_context(0), InvalidArgumentError) << "device 0 was not asked for";
  BackgroundInit moved = std::move(bg);
  EXPECT_THROW((void)bg.driver(), InvalidArgumentError);  // NOLINT(bugprone-use-after-move): the point
  EXPECT_EQ(bg.step_count(), 0u);
  EXPECT_TRUE(bg.finished());
  moved.wait();
  EXPECT_NE(moved.summary().find("init "), std::string::npos);
}

TEST_F(Background, TheNvrtcWarmUpIsATaskTheProgramCanWaitFor) {
  auto o = fake_options();
  o.tasks.push_back(nvrtc_warmup());
  NvrtcLoadOptions missing;
  missing.path = "/nonexistent/libnvrtc.so.13";
  auto broken = nvrtc_warmup(missing);
  broken.name = "broken-nvrtc";
  o.tasks.push_back(std::move(broken));
  auto bg = BackgroundInit::start(std::move(o));
  bg.wait("task nvrtc-warmup");
  EXPECT_EQ(step_named(bg, "task nvrtc-warmup").state, InitStepState::done);
  EXPECT_THROW(bg.wait("task broken-nvrtc"), NvrtcNotFoundError);
  EXPECT_EQ(step_named(bg, "init").state, InitStepState::done) << "a task's failure is its own";
}

// In a forked child the helper thread does not exist: waiting for it would never end.
TEST_F(Background, AForkedChildGetsUsedAfterForkInsteadOfWaitingForAThreadThatIsNotThere) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto o = fake_options();
  o.tasks.push_back({"block", [released] { released.wait(); }});
  auto bg = BackgroundInit::start(std::move(o));
  until_running(bg, "task block");
  const pid_t pid = fork();
  if (pid == 0) {
    alarm(5);  // a wait that never ends fails the test instead of hanging it
    int code = 1;
    try {
      bg.wait("task block");
    } catch (const UsedAfterForkError&) {
      code = 0;
    } catch (...) {
      code = 2;
    }
    _exit(code);
  }
  ASSERT_GT(pid, 0);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  release.set_value();
  bg.wait();
}

// A process that exits while a step runs: the exit waits for the step, and
// nothing crashes. Runs itself as a child (BGINIT_EXIT_CHILD=1).
TEST_F(Background, ExitingWhileAStepRunsWaitsForTheStep) {
  if (std::getenv("BGINIT_EXIT_CHILD") != nullptr) {
    auto o = fake_options();
    o.primary_contexts = {0};
    o.tasks.push_back({"slow", [] {
                         std::this_thread::sleep_for(std::chrono::milliseconds(200));
                         std::printf("slow task finished\n");
                         std::fflush(stdout);
                       }});
    auto* bg = new BackgroundInit(BackgroundInit::start(std::move(o)));  // never destroyed, as runtime_compat's
    until_running(*bg, "task slow");  // init done (the exit handler is in place), the last step runs
    std::exit(0);
  }
  const std::string out = ::testing::TempDir() + "bginit_exit_child.txt";
  const std::string filter = "--gtest_filter=Background.ExitingWhileAStepRunsWaitsForTheStep";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e != nullptr; ++e) env_strings.emplace_back(*e);
  env_strings.emplace_back("BGINIT_EXIT_CHILD=1");
  std::vector<char*> envp;
  for (auto& s : env_strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::string self = "/proc/self/exe";
  std::vector<char*> argv{self.data(), const_cast<char*>(filter.c_str()), nullptr};
  pid_t pid = 0;
  ASSERT_EQ(posix_spawn(&pid, "/proc/self/exe", &actions, nullptr, argv.data(), envp.data()), 0);
  posix_spawn_file_actions_destroy(&actions);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  std::ifstream in(out);
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status << "\n" << text;
  EXPECT_NE(text.find("slow task finished"), std::string::npos) << "exit waited for the running step:\n" << text;
}

}  // namespace
