// SPDX-License-Identifier: Apache-2.0
// drvshim-trace when a traced image ends other than by exit(): exec, _exit, a
// fatal signal, a fork worker's _exit; and what must never happen to the
// program or the trace on the way (its own files written into, a signal
// handler calling the driver, a full disk, polls in summary mode).
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>
#include <drvshim_trace/api_info.hpp>
#include <drvshim_trace/model.hpp>
#include <drvshim_trace/records_io.hpp>

#include "traced_run.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

using namespace drvshim::trace_analysis;
using drvshim::recorder::Kind;
using drvshim::recorder::Record;
namespace fs = std::filesystem;

namespace endings_tests {
namespace {

using TracedRun = trace_tests::TraceRun;
using trace_tests::slurp;
using trace_tests::trace;

const std::string kScenarios = DRVSHIM_TEST_SCENARIOS;

std::vector<std::string> calls_of(const TracedRun& run, std::uint32_t pid) {
  std::vector<std::string> out;
  for (const auto& r : run.records) {
    if (r.kind == Kind::call && r.pid == pid && r.lib == "trace_scenarios") out.push_back(symbol_of(r));
  }
  return out;
}

const Record* find(const TracedRun& run, Kind kind, const std::string& api, std::uint32_t pid = 0) {
  for (const auto& r : run.records) {
    if (r.kind == kind && r.api == api && (pid == 0 || r.pid == pid)) return &r;
  }
  return nullptr;
}

std::uint32_t root_pid(const TracedRun& run) {
  const Record* p = find(run, Kind::process, "process");
  return p != nullptr ? p->pid : 0;
}

const std::vector<std::string> kFive = {"cuInit", "cuDriverGetVersion", "cuDriverGetVersion", "cuDriverGetVersion",
                                        "cuDeviceGet"};

std::vector<std::string> first_n(std::vector<std::string> v, std::size_t n) {
  if (v.size() > n) v.resize(n);
  return v;
}

TEST(TracerEndings, RecordsBeforeAnExecAreWrittenAndEachImageIsItsOwnProcess) {
  const TracedRun run = trace({}, {kScenarios, "end", "exec"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(run.bad_lines, 0u);
  const std::uint32_t pid = root_pid(run);
  ASSERT_NE(pid, 0u) << run.err;
  const auto calls = calls_of(run, pid);
  // The first image's five calls, then the second image's (basic) calls.
  ASSERT_GE(calls.size(), 5u + 8u);
  EXPECT_EQ(first_n(calls, 5), kFive);
  const Record* exec = find(run, Kind::process, "exec", pid);
  ASSERT_NE(exec, nullptr);
  EXPECT_NE(exec->args.find("traced=1"), std::string::npos) << exec->args;
  ASSERT_EQ(run.analysis.processes.size(), 2u) << run.report;
  EXPECT_EQ(run.analysis.processes[0].pid, pid);
  EXPECT_EQ(run.analysis.processes[1].pid, pid);
  EXPECT_EQ(run.analysis.processes[0].image, 0);
  EXPECT_EQ(run.analysis.processes[1].image, 1);
  EXPECT_TRUE(run.analysis.diagnostics.empty()) << run.report;
}

TEST(TracerEndings, AnExecIntoACleanedEnvironmentIsRecordedAsLeavingTheTrace) {
  const TracedRun run = trace({}, {kScenarios, "end", "exec-clean"});
  const std::uint32_t pid = root_pid(run);
  ASSERT_NE(pid, 0u) << run.err;
  EXPECT_EQ(first_n(calls_of(run, pid), 5), kFive);
  const Record* exec = find(run, Kind::process, "exec", pid);
  ASSERT_NE(exec, nullptr) << run.report;
  EXPECT_NE(exec->args.find("traced=0"), std::string::npos) << exec->args;
  EXPECT_NE(exec->args.find("DRVSHIM_TRACE_OUT"), std::string::npos) << exec->args;
  EXPECT_NE(run.report.find("outside tracing"), std::string::npos) << run.report;
}

TEST(TracerEndings, AFailedExecIsRecordedAndTheImageGoesOn) {
  const TracedRun run = trace({}, {kScenarios, "end", "exec-missing"});
  ASSERT_EQ(run.code, 0) << run.err;
  const std::uint32_t pid = root_pid(run);
  ASSERT_NE(find(run, Kind::process, "exec", pid), nullptr);
  const Record* failed = find(run, Kind::process, "exec-failed", pid);
  ASSERT_NE(failed, nullptr);
  EXPECT_NE(failed->args.find("errno=2"), std::string::npos) << failed->args;
  EXPECT_EQ(run.analysis.processes.size(), 1u) << run.report;
  EXPECT_EQ(calls_of(run, pid).size(), 5u + 8u);
}

TEST(TracerEndings, RecordsBeforeUnderscoreExitAreWritten) {
  const TracedRun run = trace({}, {kScenarios, "end", "_exit"});
  EXPECT_EQ(run.code, 3) << run.err;
  const std::uint32_t pid = root_pid(run);
  EXPECT_EQ(calls_of(run, pid), kFive);
  const Record* end = find(run, Kind::process, "trace-end", pid);
  ASSERT_NE(end, nullptr);
  EXPECT_NE(end->args.find("reason=_exit"), std::string::npos) << end->args;
}

TEST(TracerEndings, RecordsBeforeAFatalSignalAreWrittenAndTheSignalStillEndsTheProgram) {
  const std::vector<std::pair<std::string, int>> endings = {{"SIGSEGV", SIGSEGV}, {"SIGABRT", SIGABRT},
                                                            {"SIGTERM", SIGTERM}, {"SIGBUS", SIGBUS},
                                                            {"SIGFPE", SIGFPE},   {"SIGILL", SIGILL}};
  for (const auto& [name, sig] : endings) {
    SCOPED_TRACE(name);
    const TracedRun run = trace({}, {kScenarios, "end", name});
    EXPECT_EQ(run.code, 128 + sig) << run.err;
    EXPECT_EQ(run.bad_lines, 0u);
    const std::uint32_t pid = root_pid(run);
    EXPECT_EQ(calls_of(run, pid), kFive);
    const Record* end = find(run, Kind::process, "trace-end", pid);
    ASSERT_NE(end, nullptr);
    EXPECT_NE(end->args.find("reason=signal " + std::to_string(sig) + " (" + name + ")"), std::string::npos)
        << end->args;
  }
}

TEST(TracerEndings, ACrashHoldingMallocsLockInAThreadWithoutRecordsStillEndsTheProgram) {
  const TracedRun run = trace({}, {kScenarios, "end", "heap-crash"});
  EXPECT_EQ(run.code, 128 + SIGABRT) << run.err;  // 137 would be the test's timeout: a hang
  const std::uint32_t pid = root_pid(run);
  EXPECT_EQ(calls_of(run, pid), kFive);
  const Record* end = find(run, Kind::process, "trace-end", pid);
  ASSERT_NE(end, nullptr);
  EXPECT_NE(end->args.find("reason=signal 6 (SIGABRT)"), std::string::npos) << end->args;
}

TEST(TracerEndings, AnExecWithTheInterposersDirectorySpelledDifferentlyIsStillTraced) {
  const TracedRun run = trace({"--no-audit"}, {kScenarios, "end", "exec-slash"});
  ASSERT_EQ(run.code, 0) << run.err;
  const Record* exec = find(run, Kind::process, "exec", root_pid(run));
  ASSERT_NE(exec, nullptr);
  EXPECT_NE(exec->args.find("traced=1"), std::string::npos) << exec->args;
  ASSERT_EQ(run.analysis.processes.size(), 2u) << run.report;
}

TEST(TracerEndings, AForkWorkerOfAParentThatNeverInitialisedKeepsItsRecords) {
  const TracedRun run = trace({}, {kScenarios, "fork-worker"});
  ASSERT_EQ(run.code, 0) << run.err;
  const Record* fork = find(run, Kind::process, "fork");
  ASSERT_NE(fork, nullptr) << "the worker's fork record";
  EXPECT_EQ(calls_of(run, fork->pid), kFive);
  const Record* end = find(run, Kind::process, "trace-end", fork->pid);
  ASSERT_NE(end, nullptr);
  EXPECT_NE(end->args.find("reason=_exit"), std::string::npos);
}

TEST(TracerEndings, TheTraceNeverLandsInAFileTheProgramOpenedOnItsDescriptor) {
  const fs::path own = fs::path(DRVSHIM_TEST_WORK_DIR) / "endings" / ("own-" + std::to_string(::getpid()) + ".txt");
  fs::create_directories(own.parent_path());
  const TracedRun run = trace({}, {kScenarios, "close-fds", own.string()});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(slurp(own.string()), "the program's own line\n");
  const auto calls = calls_of(run, root_pid(run));
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "cuDriverGetVersion"), 400);
}

TEST(TracerEndings, ADriverCopyInAnotherLinkMapNamespaceIsItsOwnProcess) {
  const TracedRun run = trace({}, {kScenarios, "dlmopen"});
  ASSERT_EQ(run.code, 0) << run.err;
  ASSERT_EQ(run.analysis.processes.size(), 2u) << run.report;
  const ProcessInfo& main_ns = run.analysis.processes[0];
  const ProcessInfo& copy = run.analysis.processes[1];
  EXPECT_EQ(main_ns.pid, copy.pid);
  EXPECT_EQ(main_ns.ns, 0u);
  EXPECT_NE(copy.ns, 0u);
  EXPECT_EQ(copy.inits.size(), 1u) << "the copy's own cuInit";
  EXPECT_EQ(main_ns.inits.size(), 1u);
  EXPECT_NE(run.report.find("link-map namespace"), std::string::npos) << run.report;
}

TEST(TracerEndings, AThreadClosingEveryDescriptorInALoopLosesNoRecordSilently) {
  const TracedRun run = trace({}, {kScenarios, "close-range-loop"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(run.bad_lines, 0u);
  long calls = -1;
  ASSERT_EQ(std::sscanf(run.out.c_str(), "calls=%ld", &calls), 1) << run.out;
  const std::uint32_t pid = root_pid(run);
  const auto made = calls_of(run, pid);
  const long recorded = std::count(made.begin(), made.end(), "cuDriverGetVersion");
  long dropped = 0;
  for (const auto& r : run.records) {
    if (r.kind == Kind::event && r.api == "records-dropped" && r.pid == pid) {
      dropped += std::atol(r.args.c_str() + r.args.find("count=") + 6);
    }
  }
  EXPECT_GT(recorded, 0) << "the trace went on";
  // Records of a batch the closer got in the way of are said, not lost silently (a batch may
  // also hold other records, so at least as many as the calls are accounted for).
  EXPECT_GE(recorded + dropped, calls) << "recorded " << recorded << ", dropped " << dropped;
  EXPECT_NE(find(run, Kind::process, "trace-end", pid), nullptr) << "the trace ended normally";
}

TEST(TracerEndings, ASignalHandlerCallingTheDriverLosesNoRecordSilently) {
  const TracedRun run = trace({}, {kScenarios, "signal-reentry"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(run.bad_lines, 0u);
  long main_calls = -1, handler_calls = -1;
  ASSERT_EQ(std::sscanf(run.out.c_str(), "main=%ld handler=%ld", &main_calls, &handler_calls), 2) << run.out;
  const std::uint32_t pid = root_pid(run);
  const auto calls = calls_of(run, pid);
  const auto recorded = std::count(calls.begin(), calls.end(), "cuCoredumpGetAttribute") +
                        std::count(calls.begin(), calls.end(), "cuCoredumpGetAttributeGlobal");
  long dropped = 0;
  for (const auto& r : run.records) {
    if (r.kind == Kind::event && r.api == "records-dropped" && r.pid == pid) {
      dropped += std::atol(r.args.c_str() + r.args.find("count=") + 6);
    }
  }
  EXPECT_EQ(recorded + dropped, main_calls + handler_calls) << "recorded " << recorded << ", dropped " << dropped;
  EXPECT_GT(handler_calls, 0);
  // The fake does not model either: each call is a failed call (CUDA_ERROR_NOT_SUPPORTED).
  for (const auto& r : run.records) {
    if (r.kind == Kind::call && r.api.rfind("cuCoredumpGetAttribute", 0) == 0) {
      EXPECT_EQ(r.result, 801);
    }
  }
}

TEST(TracerEndings, AFullDiskEndsTheTraceOnAWholeRecordAndSaysWhy) {
  const TracedRun run = trace({}, {kScenarios, "disk-full", "65536"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(run.bad_lines, 0u) << "no torn line";
  const Record* truncated = find(run, Kind::event, "trace-truncated");
  ASSERT_NE(truncated, nullptr);
  EXPECT_NE(truncated->args.find("File too large"), std::string::npos) << truncated->args;
  EXPECT_NE(truncated->args.find("record(s)"), std::string::npos) << truncated->args;
}

TEST(TracerEndings, SummaryModeCountsNotReadyPollsInsteadOfRecordingEach) {
  const TracedRun run = trace({"--mode", "summary"}, {kScenarios, "poll"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.out.find("polls=1000"), std::string::npos) << run.out;
  std::uint64_t counted = 0;
  std::size_t one_by_one = 0;
  for (const auto& r : run.records) {
    if (r.api != "cuStreamQuery") continue;
    if (r.kind == Kind::counts) counted += r.count;
    if (r.kind == Kind::call) ++one_by_one;
  }
  EXPECT_EQ(one_by_one, 0u);
  EXPECT_EQ(counted, 1001u);
  EXPECT_TRUE(run.analysis.processes.at(0).errors.empty());
}

}  // namespace
}  // namespace endings_tests
