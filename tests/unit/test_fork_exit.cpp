// SPDX-License-Identifier: Apache-2.0
// fork() and process exit: objects from before fork are refused in the child
// without calling the driver; objects destroyed during exit make no driver call.
#include <sys/wait.h>
#include <unistd.h>

#include <fstream>
#include <map>

#include "fixture.hpp"
#include "in_child.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

class Fork : public FakeDriverTest {};

TEST_F(Fork, ObjectsFromBeforeForkAreRefusedInTheChildWithoutADriverCall) {
  Driver drv = load_and_init();
  PrimaryContext primary = drv.device(0).retain_primary_context();
  const int code = in_child([&]() -> int {
    const size_t calls_before = drvshim_fake_call_log_size();
    try {
      (void)drv.device_count();
      return 1;
    } catch (const UsedAfterForkError& e) {
      if (std::string(e.what()).find("forked child") == std::string::npos) return 2;
    }
    try {
      primary.ref().synchronize();
      return 3;
    } catch (const UsedAfterForkError&) {
    }
    try {
      drv.init();
      return 4;
    } catch (const UsedAfterForkError&) {
    }
    try {
      primary.release();  // the throwing form says why it cannot release
      return 6;
    } catch (const UsedAfterForkError&) {
    }
    if (!primary.release(std::nothrow).ok()) return 7;  // the no-throw twin skips silently
    if (drvshim_fake_call_log_size() != calls_before) return 5;
    return 0;
  });
  EXPECT_EQ(code, 0) << "1: not refused, 2: message, 3: context call, 4: init, 5: the driver was called, "
                        "6: release() did not throw, 7: release(nothrow) failed";
  EXPECT_EQ(drv.device_count(), 1) << "the parent is unaffected";
}

TEST_F(Fork, AChildThatNeverUsedCudaInitialisesNormally) {
  const int code = in_child([]() -> int {
    Driver drv = load_and_init();
    PrimaryContext p = drv.device(0).retain_primary_context();
    return drv.device_count() == 1 && p ? 0 : 1;
  });
  EXPECT_EQ(code, 0);
}

// ---- process exit -------------------------------------------------------------------

std::map<std::string, unsigned long long> read_report(const std::string& path) {
  std::map<std::string, unsigned long long> out;
  std::ifstream in(path);
  std::string key;
  unsigned long long value = 0;
  while (in >> key >> value) out[key] = value;
  return out;
}

struct ExitRun {
  int code;
  std::map<std::string, unsigned long long> report;
};

ExitRun run_exit_program(const char* mode) {
  char path[] = "/tmp/drvshim_exit_report_XXXXXX";
  const int fd = mkstemp(path);
  close(fd);
  const std::string cmd = std::string("DRVSHIM_FAKE_REPORT=") + path + " " DRVSHIM_TEST_EXIT_PROGRAM " " + mode;
  const int status = std::system(cmd.c_str());
  ExitRun run{WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status), read_report(path)};
  std::remove(path);
  return run;
}

TEST(Exit, StaticObjectsDestroyedAfterMainMakeNoDriverCallAndDoNotCrash) {
  const ExitRun run = run_exit_program("static-objects");
  EXPECT_EQ(run.code, 0);
  ASSERT_EQ(run.report.count("misuse"), 1u) << "the fake's exit report is missing";
  EXPECT_EQ(run.report.at("misuse"), 0u);
}

// The helper thread is still saying it is done when the exit handler lets
// it go and the global handle frees the state: nothing of the state may be
// touched after (the ASan lane reports a use after free otherwise).
TEST(Exit, AGlobalBackgroundInitWhoseHelperIsStillFinishingIsFreedSafely) {
  const ExitRun run = run_exit_program("static-background");
  EXPECT_EQ(run.code, 0);
  ASSERT_EQ(run.report.count("misuse"), 1u) << "the fake's exit report is missing";
  EXPECT_EQ(run.report.at("misuse"), 0u);
}

TEST(Exit, ObjectsOutlivingADeinitialisedDriverMakeNoCall) {
  const ExitRun run = run_exit_program("deinit-at-exit");
  EXPECT_EQ(run.code, 0);
  ASSERT_EQ(run.report.count("calls_while_deinitialized"), 1u);
  EXPECT_EQ(run.report.at("calls_while_deinitialized"), 0u);
}

TEST(Exit, AfterTheDriverReportsDeinitialisedFurtherCleanupIsSkipped) {
  const ExitRun run = run_exit_program("deinit-then-destroy");
  EXPECT_EQ(run.code, 0);
  ASSERT_EQ(run.report.count("calls_while_deinitialized"), 1u);
  // The first release learns CUDA_ERROR_DEINITIALIZED; the other objects skip the driver.
  EXPECT_EQ(run.report.at("calls_while_deinitialized"), 1u);
}

}  // namespace
