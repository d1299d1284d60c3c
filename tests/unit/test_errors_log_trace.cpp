// SPDX-License-Identifier: Apache-2.0
// Errors, logging and the trace recorder.
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <mutex>
#include <new>
#include <stdexcept>
#include <type_traits>

#include "fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

class Errors : public FakeDriverTest {};

TEST_F(Errors, ResultTableNamesAndDescribesCodesWithoutADriver) {
  EXPECT_STREQ(result_name(0), "CUDA_SUCCESS");
  EXPECT_STREQ(result_name(34), "CUDA_ERROR_STUB_LIBRARY");
  EXPECT_STREQ(result_name(100), "CUDA_ERROR_NO_DEVICE");
  EXPECT_STREQ(result_name(700), "CUDA_ERROR_ILLEGAL_ADDRESS");
  EXPECT_STREQ(result_name(12345), "unknown CUresult");
  EXPECT_NE(std::string(result_description(100)).find("no CUDA-capable devices"), std::string::npos);
}

TEST_F(Errors, CudaErrorCarriesApiCodeNameDescriptionObjectsAndHint) {
  CudaError e(ErrorDetails{"cuMemAlloc", 2, "device 0, 1048576 bytes", "free memory first", false});
  EXPECT_EQ(e.kind(), ErrorKind::cuda);
  EXPECT_EQ(e.api(), "cuMemAlloc");
  EXPECT_EQ(e.code(), 2);
  EXPECT_STREQ(e.code_name(), "CUDA_ERROR_OUT_OF_MEMORY");
  EXPECT_EQ(std::string(e.what()), std::string("cuMemAlloc failed: CUDA_ERROR_OUT_OF_MEMORY (2): ") +
                                       result_description(2) + " [device 0, 1048576 bytes]. Hint: free memory first");
  CudaError async(ErrorDetails{"cuStreamSynchronize", 719, "stream 0x1", "", true});
  EXPECT_TRUE(async.asynchronous());
  EXPECT_EQ(std::string(async.what())
                .rfind("asynchronous error, detected at cuStreamSynchronize: CUDA_ERROR_LAUNCH_FAILED (719)", 0),
            0u)
      << async.what();
}

// Why OutOfMemoryError is not also a std::bad_alloc (docs/DESIGN.md,
// "Failure paths and error types"): with two std::exception bases, the
// handler every program has would no longer match.
struct BothRoots : std::runtime_error, std::bad_alloc {
  BothRoots() : std::runtime_error("x") {}
};
static_assert(!std::is_convertible_v<BothRoots*, std::exception*>, "std::exception would be an ambiguous base");
static_assert(std::is_base_of_v<std::exception, OutOfMemoryError> &&
              std::is_convertible_v<OutOfMemoryError*, std::exception*>);

TEST_F(Errors, OutOfMemoryAndBadInputAreCaughtAsStdExceptionWithTheirKind) {
  const auto caught = [](auto&& f) -> std::string {
    try {
      f();
    } catch (const std::exception& e) {
      return e.what();
    } catch (...) {
      return "<not caught as std::exception>";
    }
    return "";
  };
  EXPECT_NE(caught([] {
              throw OutOfMemoryError(ErrorDetails{"cuMemAlloc", 2, "device 0", "", false}, 64, 0, 0);
            }).find("CUDA_ERROR_OUT_OF_MEMORY"),
            std::string::npos);
  EXPECT_NE(caught([] { throw InvalidArgumentError("copy", "sizes differ"); }).find("sizes differ"), std::string::npos);
  EXPECT_EQ(caught([] { throw BothRoots(); }), "<not caught as std::exception>");
}

TEST_F(Errors, StatusRendersSuccessAndFailure) {
  EXPECT_EQ(Status().to_string(), "ok");
  EXPECT_TRUE(Status().ok());
  const Status failed("cuCtxDestroy", 201);
  EXPECT_FALSE(failed.ok());
  EXPECT_EQ(failed.to_string(), "cuCtxDestroy: CUDA_ERROR_INVALID_CONTEXT (201)");
}

TEST_F(Errors, CallsBeforeInitNameTheMissingStepAndNeverReachTheDriver) {
  Driver drv = load_fake();
  drvshim_fake_clear_call_log();
  auto e = expect_throw<MissingStepError>([&] { (void)drv.device_count(); });
  EXPECT_EQ(e.step(), "Driver::init()");
  EXPECT_EQ(e.code(), 0) << "never the bare CUDA_ERROR_NOT_INITIALIZED";
  EXPECT_NE(std::string(e.what()).find("Driver::device_count needs Driver::init() first"), std::string::npos)
      << e.what();
  EXPECT_TRUE(fake_calls().empty()) << "drvshim must not call the driver, nor initialise silently";
  EXPECT_FALSE(drv.initialized());
  expect_throw<MissingStepError>([&] { (void)drv.current_context(); });
  // Each names the call the user made, not one it makes inside.
  const auto device = expect_throw<MissingStepError>([&] { (void)drv.device(0); });
  EXPECT_NE(std::string(device.what()).find("Driver::device needs Driver::init() first"), std::string::npos)
      << device.what();
  const auto devices = expect_throw<MissingStepError>([&] { (void)drv.devices(); });
  EXPECT_NE(std::string(devices.what()).find("Driver::devices needs Driver::init() first"), std::string::npos)
      << devices.what();
}

TEST_F(Errors, ADriverReportingNotInitializedIsAlsoAMissingStep) {
  Driver drv = load_and_init();
  drvshim_fake_fail_call("cuDeviceGetCount", 1, CUDA_ERROR_NOT_INITIALIZED);
  auto e = expect_throw<MissingStepError>([&] { (void)drv.device_count(); });
  EXPECT_EQ(e.api(), "cuDeviceGetCount");
  EXPECT_NE(e.objects().find("CUDA_ERROR_NOT_INITIALIZED"), std::string::npos);
}

// ---- logging -------------------------------------------------------------------

TEST(LogLevels, ParseAcceptsTheDocumentedNamesOnly) {
  EXPECT_EQ(log::parse_level("off"), log::Level::off);
  EXPECT_EQ(log::parse_level("ERROR"), log::Level::error);
  EXPECT_EQ(log::parse_level(" warn "), log::Level::warn);
  EXPECT_EQ(log::parse_level("warning"), log::Level::warn);
  EXPECT_EQ(log::parse_level("Info"), log::Level::info);
  EXPECT_EQ(log::parse_level("debug"), log::Level::debug);
  EXPECT_EQ(log::parse_level("trace"), log::Level::trace);
  EXPECT_EQ(log::parse_level("verbose"), std::nullopt);
  EXPECT_EQ(log::parse_level(""), std::nullopt);
  EXPECT_EQ(log::parse_level("tracex"), std::nullopt);
  EXPECT_STREQ(log::level_name(log::Level::warn), "warn");
}

struct Captured {
  std::mutex mutex;
  std::vector<std::pair<log::Level, std::string>> lines;
  bool contains(const std::string& needle) {
    std::lock_guard<std::mutex> lock(mutex);
    for (const auto& l : lines) {
      if (l.second.find(needle) != std::string::npos) return true;
    }
    return false;
  }
};

class Logging : public FakeDriverTest {
 protected:
  void capture(Captured& c) {
    log::set_sink([&c](log::Level level, std::string_view message) {
      std::lock_guard<std::mutex> lock(c.mutex);
      c.lines.emplace_back(level, std::string(message));
    });
  }
};

TEST_F(Logging, SetLevelRoundTripsAndFiltersLines) {
  Captured c;
  capture(c);
  log::set_level(log::Level::error);
  EXPECT_EQ(log::level(), log::Level::error);
  Driver drv = load_and_init();
  EXPECT_FALSE(c.contains("driver initialised")) << "info line must be filtered at error level";
  log::set_level(log::Level::info);
  Driver drv2 = load_and_init();
  EXPECT_TRUE(c.contains("loaded "));
}

// The public way for code above libdrvshim to log beside it.
TEST_F(Logging, EnabledAndWriteFollowTheLevelAndNothingIsWrittenAtOff) {
  Captured c;
  capture(c);
  log::set_level(log::Level::warn);
  EXPECT_TRUE(log::enabled(log::Level::error));
  EXPECT_TRUE(log::enabled(log::Level::warn));
  EXPECT_FALSE(log::enabled(log::Level::info));
  EXPECT_FALSE(log::enabled(log::Level::off));
  log::write(log::Level::warn, "a warning from above");
  log::write(log::Level::info, "an info line below the level");
  log::write(log::Level::off, "a line at off");
  EXPECT_TRUE(c.contains("a warning from above"));
  EXPECT_FALSE(c.contains("an info line below the level"));
  EXPECT_FALSE(c.contains("a line at off"));
  log::set_level(log::Level::off);
  EXPECT_FALSE(log::enabled(log::Level::off));
  EXPECT_FALSE(log::enabled(log::Level::error));
  log::write(log::Level::off, "a line at off with logging off");
  log::write(log::Level::error, "an error with logging off");
  EXPECT_FALSE(c.contains("with logging off"));
  log::set_level(log::Level::warn);
}

TEST_F(Logging, TraceLevelLogsEveryDriverCallWithArgumentsResultAndDuration) {
  Captured c;
  capture(c);
  Driver drv = load_fake();
  log::set_level(log::Level::trace);
  drv.init();
  (void)drv.device(0).name();
  log::set_level(log::Level::warn);
  EXPECT_TRUE(c.contains("cuInit(0) -> CUDA_SUCCESS (0) in ")) << "cuInit line missing";
  EXPECT_TRUE(c.contains("cuDeviceGet("));
  EXPECT_TRUE(c.contains("cuDeviceGetName("));
  EXPECT_TRUE(c.contains(" us [ctx 0x0]"));
  for (const auto& [level, line] : c.lines) {
    if (line.find(" -> ") != std::string::npos) {
      EXPECT_EQ(level, log::Level::trace) << line;
    }
  }
}

TEST_F(Logging, TheEnvironmentSetsTheLevelAndBadValuesAreReported) {
  auto run = [](const char* value, std::string& out) {
    const std::string cmd = std::string("DRVSHIM_LOG='") + value + "' " DRVSHIM_TEST_EXIT_PROGRAM " log-level 2>&1";
    std::FILE* p = popen(cmd.c_str(), "r");
    char buf[512];
    out.clear();
    while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
    return pclose(p);
  };
  std::string out;
  EXPECT_EQ(run("debug", out), 0);
  EXPECT_NE(out.find("level=debug"), std::string::npos) << out;
  EXPECT_EQ(run("OFF", out), 0);
  EXPECT_NE(out.find("level=off"), std::string::npos) << out;
  EXPECT_EQ(run("loud", out), 0);
  EXPECT_NE(out.find("DRVSHIM_LOG=\"loud\" is not a level"), std::string::npos) << out;
  EXPECT_NE(out.find("level=warn"), std::string::npos) << out;
}

// ---- trace -----------------------------------------------------------------------

class Trace : public FakeDriverTest {};

std::vector<std::string> apis(const std::vector<trace::Record>& records) {
  std::vector<std::string> out;
  for (const auto& r : records) out.push_back(r.api);
  return out;
}

TEST_F(Trace, RecordsTheLoadAndInitInOrderWithThreadResultAndTiming) {
  trace::enable(true);
  Driver drv = load_and_init();
  (void)drv.device_count();
  const auto records = trace::records();
  const std::vector<std::string> expected = {"load", "cuDriverGetVersion", "resolve-table", "cuInit",
                                             "init", "cuDeviceGetCount"};
  EXPECT_EQ(apis(records), expected);
  const auto tid = static_cast<std::uint64_t>(::syscall(SYS_gettid));
  for (std::size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ(records[i].thread, tid);
    if (i > 0) {
      EXPECT_GT(records[i].seq, records[i - 1].seq);
      EXPECT_GE(records[i].timestamp_ns, records[i - 1].timestamp_ns);
    }
  }
  EXPECT_EQ(records[1].kind, trace::Kind::call);
  EXPECT_EQ(records[0].kind, trace::Kind::event);
  EXPECT_EQ(records[3].args, "0");
  EXPECT_EQ(records[3].result, 0);
  EXPECT_GE(records[3].duration_ns, 0);
  const std::string resolved =
      std::to_string(drv.functions_total()) + "/" + std::to_string(drv.functions_total()) + " resolved";
  EXPECT_NE(records[2].args.find(resolved), std::string::npos) << records[2].args;
}

TEST_F(Trace, FailedCallsKeepTheirResultAndTheCurrentContextIsRecorded) {
  Driver drv = load_and_init();
  auto primary = drv.device(0).retain_primary_context();
  trace::enable(true);
  drvshim_fake_fail_call("cuMemGetInfo", 1, CUDA_ERROR_OUT_OF_MEMORY);
  expect_throw<CudaError>([&] { (void)primary.ref().memory_info(); });
  const auto records = trace::records();
  const auto it = std::find_if(records.begin(), records.end(), [](const auto& r) { return r.api == "cuMemGetInfo"; });
  ASSERT_NE(it, records.end());
  EXPECT_EQ(it->result, 2);
  EXPECT_EQ(it->context, primary.ref().address()) << "the call ran with the primary context current";
  const std::string json = trace::to_json(*it);
  EXPECT_NE(json.find("\"result_name\":\"CUDA_ERROR_OUT_OF_MEMORY\""), std::string::npos) << json;
  EXPECT_EQ(records.back().api, "cuCtxPopCurrent") << "the stack is restored after the failure";
}

TEST_F(Trace, NothingIsRecordedWhileTracingIsOff) {
  Driver drv = load_and_init();
  trace::clear();
  (void)drv.device_count();
  EXPECT_TRUE(trace::records().empty());
  EXPECT_FALSE(trace::enabled());
}

TEST_F(Trace, JsonEscapesAndCarriesEveryField) {
  trace::Record r;
  r.seq = 7;
  r.timestamp_ns = 100;
  r.duration_ns = 5;
  r.thread = 42;
  r.kind = trace::Kind::event;
  r.api = "we\"ird";
  r.args = "line\nbreak\\";
  r.context = 0xabc;
  EXPECT_EQ(trace::to_json(r),
            "{\"seq\":7,\"ts_ns\":100,\"dur_ns\":5,\"tid\":42,\"kind\":\"event\",\"api\":\"we\\\"ird\","
            "\"args\":\"line\\nbreak\\\\\",\"result\":0,\"result_name\":\"\",\"ctx\":\"0xabc\"}");
}

TEST_F(Trace, FileReceivesJsonLinesAndBadPathsAreRefused) {
  char path[] = "/tmp/drvshim_trace_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  trace::set_file(path);
  EXPECT_TRUE(trace::enabled());
  {
    Driver drv = load_and_init();
    (void)drv.device_count();
  }
  trace::set_file("");
  EXPECT_FALSE(trace::enabled());
  std::ifstream in(path);
  std::string line;
  int lines = 0;
  bool saw_init = false;
  while (std::getline(in, line)) {
    ++lines;
    EXPECT_EQ(line.rfind("{\"seq\":", 0), 0u) << line;
    EXPECT_EQ(line.back(), '}') << line;
    if (line.find("\"api\":\"cuInit\"") != std::string::npos) saw_init = true;
  }
  EXPECT_GE(lines, 6);
  EXPECT_TRUE(saw_init);
  std::remove(path);
  auto e = expect_throw<InvalidArgumentError>([] { trace::set_file("/nonexistent-dir/trace.jsonl"); });
  EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/trace.jsonl"), std::string::npos);
}

TEST_F(Trace, TheEnvironmentTurnsTheTraceFileOn) {
  char path[] = "/tmp/drvshim_trace_env_XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  close(fd);
  const std::string cmd = std::string("DRVSHIM_TRACE_FILE=") + path + " " DRVSHIM_TEST_EXIT_PROGRAM " trace-env";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream in(path);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_NE(all.find("\"api\":\"cuInit\""), std::string::npos) << all;
  EXPECT_NE(all.find("\"api\":\"load\""), std::string::npos) << all;
  std::remove(path);
}

}  // namespace
