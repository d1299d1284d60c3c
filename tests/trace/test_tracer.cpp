// SPDX-License-Identifier: Apache-2.0
// drvshim-trace end to end against the fake driver: the programs reach the
// driver in every way that runs without a GPU (drvshim's examples, a program
// linked with -lcuda, entry points through cuGetProcAddress, runtime_compat's
// programs, fork, spawn, dlopen by path); the tests assert on the recorded
// calls, the analysis, the report and the Chrome trace.
#include <gtest/gtest.h>
#include <unistd.h>
#include <drvshim_trace/api_info.hpp>
#include <drvshim_trace/model.hpp>
#include <drvshim_trace/records_io.hpp>
#include <nlohmann/json.hpp>

#include "traced_run.hpp"

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>

using namespace drvshim::trace_analysis;
using drvshim::recorder::Kind;
using drvshim::recorder::Record;
namespace fs = std::filesystem;

namespace {

using trace_tests::slurp;
using trace_tests::trace;
using trace_tests::TraceRun;

std::vector<std::string> calls_from(const TraceRun& run, const std::string& lib, std::uint32_t pid = 0) {
  std::vector<std::string> out;
  for (const auto& r : run.analysis.records) {
    if (r.kind == Kind::call && r.lib == lib && (pid == 0 || r.pid == pid)) out.push_back(symbol_of(r));
  }
  return out;
}

bool has_diagnostic(const TraceRun& run, const std::string& id) {
  return std::any_of(run.analysis.diagnostics.begin(), run.analysis.diagnostics.end(),
                     [&](const Diagnostic& d) { return d.id == id; });
}

std::string diagnostics_of(const TraceRun& run) {
  std::string out;
  for (const auto& d : run.analysis.diagnostics) out += d.id + ": " + d.title + "\n";
  return out;
}

const std::string kScenarios = DRVSHIM_TEST_SCENARIOS;

// ---- programs reaching the driver each way ---------------------------------------------

TEST(Tracer, ALcudaProgramsCallsInOrderAttributedToIt) {
  const TraceRun run = trace({}, {kScenarios, "basic"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(run.bad_lines, 0u);
  const std::vector<std::string> expected = {
      "cuInit",        "cuDeviceGet",  "cuDevicePrimaryCtxRetain", "cuCtxSetCurrent",
      "cuMemAlloc_v2", "cuMemFree_v2", "cuCtxSetCurrent",          "cuDevicePrimaryCtxRelease_v2"};
  EXPECT_EQ(calls_from(run, "trace_scenarios"), expected);
  ASSERT_EQ(run.analysis.processes.size(), 1u);
  const ProcessInfo& p = run.analysis.processes[0];
  EXPECT_NE(p.exe.find("trace_scenarios"), std::string::npos);
  EXPECT_EQ(p.driver, DRVSHIM_TEST_FAKE_PATH);
  ASSERT_GE(p.first_init, 0);
  EXPECT_EQ(run.analysis.records[static_cast<std::size_t>(p.first_init)].tid, p.pid) << "main thread";
  ASSERT_EQ(p.context_order.size(), 1u);
  EXPECT_TRUE(p.contexts.at(p.context_order[0]).primary);
  EXPECT_GE(p.contexts.at(p.context_order[0]).ended_ns, 0);
  EXPECT_TRUE(p.live.empty());
  EXPECT_TRUE(p.errors.empty());
  EXPECT_TRUE(run.analysis.diagnostics.empty()) << diagnostics_of(run);
  // Every record carries the pid; the current context after the call is recorded.
  for (const auto& r : run.records) EXPECT_EQ(r.pid, p.pid);
  for (const auto& r : run.records) {
    if (r.kind == Kind::call && symbol_of(r) == "cuMemAlloc_v2") {
      EXPECT_EQ(r.ctx, p.context_order[0]);
    }
  }
  EXPECT_NE(run.report.find("driver initialised by tid " + std::to_string(p.pid) + " (trace_scenarios)"),
            std::string::npos)
      << run.report;
  EXPECT_NE(run.report.find("never released (0)"), std::string::npos) << run.report;
  EXPECT_NE(run.report.find("Diagnostics (0)"), std::string::npos) << run.report;
}

TEST(Tracer, WhatAProgramNeverReleasesIsListed) {
  const TraceRun run = trace({}, {kScenarios, "leak"});
  ASSERT_EQ(run.code, 0) << run.err;
  const ProcessInfo& p = run.analysis.processes.at(0);
  ASSERT_EQ(p.live.size(), 1u);
  EXPECT_EQ(p.live[0].kind, "device memory");
  EXPECT_EQ(p.live[0].bytes, 1u << 20);
  EXPECT_EQ(p.contexts.at(p.context_order[0]).ended_ns, -1) << "the primary context was never released";
  EXPECT_NE(run.report.find("never released (2)"), std::string::npos) << run.report;
  EXPECT_NE(run.report.find("device memory 0x"), std::string::npos) << run.report;
  EXPECT_NE(run.report.find("(1048576 bytes)"), std::string::npos) << run.report;
}

TEST(Tracer, LookupsHandBackTheInterposersWrapperOfExactlyTheVariantReturned) {
  const TraceRun run = trace({}, {kScenarios, "proc-address"});
  ASSERT_EQ(run.code, 0) << run.err << run.out;
  // Calls through the looked-up pointers are traced under their exact names.
  const auto calls = calls_from(run, "trace_scenarios");
  for (const char* sym :
       {"cuMemAlloc_v2", "cuMemFree_v2", "cuDevicePrimaryCtxRelease_v2", "cuDevicePrimaryCtxRetain"}) {
    EXPECT_NE(std::find(calls.begin(), calls.end(), sym), calls.end()) << sym;
  }
  // The lookups themselves, the empty-symbol probe and the legacy 4-argument form included.
  bool probe = false, legacy = false, unknown = false;
  for (const auto& r : run.records) {
    if (r.kind != Kind::call || r.lib != "trace_scenarios") continue;
    if (r.symbol == "cuGetProcAddress_v2" && r.args.rfind("\"\", ", 0) == 0) probe = true;
    if (r.symbol == "cuGetProcAddress" && r.args.rfind("\"cuMemAlloc\", ", 0) == 0) legacy = true;
    if (r.symbol == "cuGetProcAddress_v2" && r.args.find("\"cuNoSuchFunction\", ->null") != std::string::npos) {
      unknown = true;
    }
  }
  EXPECT_TRUE(probe);
  EXPECT_TRUE(legacy);
  EXPECT_TRUE(unknown);
  EXPECT_EQ(run.analysis.processes.at(0).untraced, 0u);
}

TEST(Tracer, ALookupAnsweredWithAPerVersionShimIsMappedByNameAndVersion) {
  const TraceRun run = trace({}, {kScenarios, "proc-shim"}, "DRVSHIM_FAKE_PROC_SHIMS=1");
  ASSERT_EQ(run.code, 0) << run.err;
  const auto calls = calls_from(run, "trace_scenarios");
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "cuDeviceGetCount"), 1) << "the call through it is traced";
  const auto& p = run.analysis.processes.at(0);
  EXPECT_EQ(p.untraced, 0u);
  EXPECT_TRUE(std::any_of(run.records.begin(), run.records.end(), [](const Record& r) {
    return r.api == "entry-point-by-name" && r.args.rfind("cuDeviceGetCount@12000 flags 0", 0) == 0;
  }));
}

TEST(Tracer, AStaticCudartProgramsLookupsAllGoThroughTheInterposerBeforeCuInit) {
  // The fake has no export tables, so the Runtime gives up after initialising; the
  // loading part is the Runtime's own and is what this shows.
  const TraceRun run = trace({}, {DRVSHIM_TEST_CUDART_STATIC});
  EXPECT_NE(run.code, 0);
  EXPECT_NE(run.err.find("cudaGetDeviceCount(&devices) failed"), std::string::npos) << run.err;
  const auto calls = calls_from(run, "cudart_static");
  const auto init = std::find(calls.begin(), calls.end(), "cuInit");
  ASSERT_NE(init, calls.end());
  const auto lookups = std::count(calls.begin(), init, "cuGetProcAddress_v2");
  EXPECT_GT(lookups, 300) << "the Runtime resolves its whole table before cuInit";
  bool probe = false;
  for (const auto& r : run.records) {
    if (r.kind == Kind::call && r.symbol == "cuGetProcAddress_v2" && r.args.rfind("\"\", ", 0) == 0) probe = true;
  }
  EXPECT_TRUE(probe) << "the Runtime's empty-symbol probe";
  EXPECT_EQ(run.analysis.processes.at(0).untraced, 0u);
  EXPECT_EQ(run.analysis.processes.at(0).context_order.size(), 0u);
}

TEST(Tracer, DrvshimsOwnExampleIsTracedThroughTheInterposer) {
#ifdef DRVSHIM_TEST_EXAMPLE_INIT_ORDER
  const TraceRun run = trace({}, {DRVSHIM_TEST_EXAMPLE_INIT_ORDER});
  ASSERT_EQ(run.code, 0) << run.err;
  const auto calls = calls_from(run, "libdrvshim.so.0");
  ASSERT_GE(calls.size(), 5u);
  // drvshim loads the driver, resolves its table through cuGetProcAddress, then initialises.
  EXPECT_EQ(calls[0], "cuDriverGetVersion");
  EXPECT_EQ(calls[1], "cuGetProcAddress_v2");
  const auto init = std::find(calls.begin(), calls.end(), "cuInit");
  const auto retain = std::find(calls.begin(), calls.end(), "cuDevicePrimaryCtxRetain");
  const auto release = std::find(calls.begin(), calls.end(), "cuDevicePrimaryCtxRelease_v2");
  ASSERT_NE(init, calls.end());
  ASSERT_NE(retain, calls.end());
  ASSERT_NE(release, calls.end());
  EXPECT_LT(init, retain);
  EXPECT_LT(retain, release);
  EXPECT_TRUE(std::all_of(calls.begin(), init, [](const std::string& s) { return s != "cuDevicePrimaryCtxRetain"; }));
  EXPECT_TRUE(run.analysis.diagnostics.empty()) << diagnostics_of(run);
  EXPECT_NE(run.out.find("7. release"), std::string::npos) << "the example's own output is untouched";
#else
  GTEST_SKIP() << "examples not built";
#endif
}

TEST(Tracer, DrvshimsSeedExamplesRunUnchangedUnderTheTracer) {
#if defined(DRVSHIM_TEST_EXAMPLE_ZERO_COPY_VADD) && defined(DRVSHIM_TEST_EXAMPLE_PINNED_STREAM_COPY) && \
    defined(DRVSHIM_TEST_EXAMPLE_NVRTC_KERNEL)
  const std::string env = std::string("DRVSHIM_FAKE_CC=101 DRVSHIM_CACHE_DIR=") + DRVSHIM_TEST_WORK_DIR + "/cache";
  for (const std::vector<std::string>& cmd :
       {std::vector<std::string>{DRVSHIM_TEST_EXAMPLE_ZERO_COPY_VADD, "16"},
        std::vector<std::string>{DRVSHIM_TEST_EXAMPLE_PINNED_STREAM_COPY, "4", "2"},
        std::vector<std::string>{DRVSHIM_TEST_EXAMPLE_NVRTC_KERNEL}}) {
    const TraceRun run = trace({"--mode", "summary"}, cmd, env);
    EXPECT_EQ(run.code, 0) << cmd[0] << "\n" << run.err;
    ASSERT_FALSE(run.analysis.processes.empty()) << cmd[0];
    const ProcessInfo& p = run.analysis.processes[0];
    EXPECT_GE(p.first_init, 0) << cmd[0];
    for (const auto h : p.context_order) EXPECT_GE(p.contexts.at(h).ended_ns, 0) << cmd[0] << " left a context";
    EXPECT_TRUE(p.live.empty()) << cmd[0] << ": " << p.live.size() << " object(s) never released";
    EXPECT_TRUE(run.analysis.diagnostics.empty()) << cmd[0] << "\n" << diagnostics_of(run);
  }
#else
  GTEST_SKIP() << "examples not built";
#endif
}

TEST(Tracer, RuntimeApiProgramsOnLibdrvshimCudartShowTheImplicitSteps) {
#ifdef DRVSHIM_TEST_RUNTIME_API_DIR
  const TraceRun run = trace({}, {std::string(DRVSHIM_TEST_RUNTIME_API_DIR) + "/vector_add"});
  ASSERT_EQ(run.code, 0) << run.err;
  const auto calls = calls_from(run, "libdrvshim.so.0");
  const auto init = std::find(calls.begin(), calls.end(), "cuInit");
  const auto retain = std::find(calls.begin(), calls.end(), "cuDevicePrimaryCtxRetain");
  const auto alloc = std::find(calls.begin(), calls.end(), "cuMemAlloc_v2");
  const auto launch = std::find(calls.begin(), calls.end(), "cuLaunchKernel");
  ASSERT_NE(init, calls.end());
  ASSERT_NE(retain, calls.end());
  ASSERT_NE(alloc, calls.end());
  ASSERT_NE(launch, calls.end());
  EXPECT_LT(init, retain);
  EXPECT_LT(retain, alloc) << "the Runtime's first allocation activates the primary context first";
  const ProcessInfo& p = run.analysis.processes.at(0);
  ASSERT_EQ(p.context_order.size(), 1u);
  EXPECT_TRUE(p.contexts.at(p.context_order[0]).primary);
#else
  GTEST_SKIP() << "runtime_compat's programs not built";
#endif
}

// ---- diagnostics, each shown on the fake -----------------------------------------------

struct DiagnosticCase {
  const char* mode;
  const char* id;
  const char* title_part;
  const char* env;
};

class TracerDiagnostic : public ::testing::TestWithParam<DiagnosticCase> {};

TEST_P(TracerDiagnostic, IsReportedWithExplanationAndFix) {
  const auto& c = GetParam();
  const TraceRun run = trace({}, {kScenarios, c.mode}, c.env);
  ASSERT_EQ(run.code, 0) << run.err;
  ASSERT_TRUE(has_diagnostic(run, c.id)) << diagnostics_of(run) << run.report;
  const auto it = std::find_if(run.analysis.diagnostics.begin(), run.analysis.diagnostics.end(),
                               [&](const Diagnostic& d) { return d.id == c.id; });
  EXPECT_NE(it->title.find(c.title_part), std::string::npos) << it->title;
  const std::string heading = std::string("[") + c.id + "]";
  const auto at = run.report.find(heading);
  ASSERT_NE(at, std::string::npos) << run.report;
  EXPECT_NE(run.report.find("why: ", at), std::string::npos);
  EXPECT_NE(run.report.find("fix: ", at), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(
    All, TracerDiagnostic,
    ::testing::Values(
        DiagnosticCase{"init-race", "init-race", "cuInit ran concurrently on tid", "DRVSHIM_FAKE_INIT_DELAY_MS=200"},
        DiagnosticCase{"no-context", "no-current-context", "cuMemAlloc_v2 called by tid", ""},
        DiagnosticCase{"flags-after", "primary-flags-after-activation", "primary-context flags to 0x4 after", ""},
        DiagnosticCase{"beside-primary", "context-beside-primary", "created context 0x", ""},
        DiagnosticCase{"unbalanced", "unbalanced-context-stack", "libtrace_helper.so left 1 context(s) pushed", ""},
        DiagnosticCase{"fork", "fork-after-init", "after it initialised CUDA) called cuDeviceGetCount", ""},
        DiagnosticCase{"reset-while-used", "primary-released-while-used",
                       "(libtrace_helper.so) reset device 0's primary context while 1 retain(s)", ""},
        DiagnosticCase{"ignored-error", "ignored-error", "cuStreamSynchronize on 0x", ""}),
    [](const auto& param_info) {
      std::string name = param_info.param.id;
      std::replace(name.begin(), name.end(), '-', '_');
      return name;
    });

TEST(Tracer, AFailedCallsOutValuesAreRecordedAsUnknown) {
  // A failed call writes nothing through its out pointers: what is there is the program's
  // own initial value, and showing it would make a failed allocation look like one that
  // handed out an address.
  const TraceRun run = trace({}, {kScenarios, "no-context"});
  ASSERT_EQ(run.code, 0) << run.err;
  std::vector<Record> allocs;
  for (const auto& r : run.records) {
    if (r.kind == Kind::call && symbol_of(r) == "cuMemAlloc_v2") allocs.push_back(r);
  }
  ASSERT_EQ(allocs.size(), 1u);
  EXPECT_EQ(allocs[0].result, 201);  // CUDA_ERROR_INVALID_CONTEXT
  EXPECT_EQ(allocs[0].args, "->?, 64");
}

TEST(Tracer, ACleanProgramGetsNoDiagnostic) {
  const TraceRun run = trace({}, {kScenarios, "proc-address"});
  EXPECT_TRUE(run.analysis.diagnostics.empty()) << diagnostics_of(run);
}

// ---- processes -------------------------------------------------------------------------

TEST(Tracer, AForkedChildIsTracedUnderItsOwnPid) {
  const TraceRun run = trace({}, {kScenarios, "fork"});
  ASSERT_EQ(run.code, 0) << run.err;
  ASSERT_EQ(run.analysis.processes.size(), 2u);
  const ProcessInfo* child = nullptr;
  for (const auto& p : run.analysis.processes) {
    if (p.forked) child = &p;
  }
  ASSERT_NE(child, nullptr);
  EXPECT_TRUE(child->parent_initialized);
  EXPECT_EQ(child->ppid, run.analysis.root_pid);
  const auto child_calls = calls_from(run, "trace_scenarios", child->pid);
  EXPECT_EQ(child_calls, std::vector<std::string>{"cuDeviceGetCount"});
  // Fresh numbering in the child.
  std::uint64_t first_seq = 0;
  for (const auto& r : run.records) {
    if (r.pid == child->pid && (first_seq == 0 || r.seq < first_seq)) first_seq = r.seq;
  }
  EXPECT_EQ(first_seq, 1u);
}

TEST(Tracer, TheForkRecordSaysWhetherTheParentHadInitialisedCuda) {
  // Only the child of a parent that had initialised CUDA is told its driver calls cannot
  // work; a fork worker of a parent that never did may use CUDA and must not be warned.
  auto fork_args = [](const TraceRun& run) {
    for (const auto& r : run.records) {
      if (r.kind == Kind::process && r.api == "fork") return r.args;
    }
    return std::string();
  };
  const TraceRun initialised = trace({}, {kScenarios, "fork"});
  ASSERT_EQ(initialised.code, 0) << initialised.err;
  const std::string after_init = fork_args(initialised);
  const std::string said_after = "parent=" + std::to_string(initialised.analysis.root_pid) + "; parent_initialized=1;";
  EXPECT_EQ(after_init.rfind(said_after, 0), 0u) << after_init;
  EXPECT_TRUE(has_diagnostic(initialised, "fork-after-init")) << diagnostics_of(initialised);
  const TraceRun uninitialised = trace({}, {kScenarios, "fork-worker"});
  ASSERT_EQ(uninitialised.code, 0) << uninitialised.err;
  const std::string before_init = fork_args(uninitialised);
  const std::string said_before =
      "parent=" + std::to_string(uninitialised.analysis.root_pid) + "; parent_initialized=0;";
  EXPECT_EQ(before_init.rfind(said_before, 0), 0u) << before_init;
  EXPECT_FALSE(has_diagnostic(uninitialised, "fork-after-init")) << diagnostics_of(uninitialised);
}

TEST(Tracer, ChildProcessesAreTracedUnlessAskedNotTo) {
  const TraceRun both = trace({}, {kScenarios, "spawn"});
  ASSERT_EQ(both.code, 0) << both.err;
  ASSERT_EQ(both.analysis.processes.size(), 2u);
  for (const auto& p : both.analysis.processes) {
    EXPECT_GE(p.first_init, 0) << "pid " << p.pid;
    EXPECT_EQ(calls_from(both, "trace_scenarios", p.pid).size(), 8u) << "pid " << p.pid;
  }
  const TraceRun root_only = trace({"--no-children"}, {kScenarios, "spawn"});
  ASSERT_EQ(root_only.code, 0) << root_only.err;
  EXPECT_EQ(root_only.analysis.processes.size(), 1u);
}

TEST(Tracer, ADriverOpenedByAbsolutePathIsRedirectedToTheInterposer) {
  const TraceRun run = trace({}, {kScenarios, "absolute-path"});
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.out.find("redirected=1"), std::string::npos) << run.out;
  const auto& p = run.analysis.processes.at(0);
  ASSERT_FALSE(p.notices.empty());
  const Record& notice = run.analysis.records[p.notices[0]];
  EXPECT_EQ(notice.api, "libcuda-redirected");
  EXPECT_NE(notice.args.find("/libcuda.so.1\", which would bypass drvshim-trace"), std::string::npos) << notice.args;
  EXPECT_EQ(calls_from(run, "trace_scenarios"), std::vector<std::string>{"cuInit"});
  // Without the audit module the program gets the real driver, untraced.
  const TraceRun plain = trace({"--no-audit"}, {kScenarios, "absolute-path"});
  EXPECT_NE(plain.out.find("redirected=0"), std::string::npos) << plain.out;
}

TEST(Tracer, ASecondDriverLoadedBesideTheInterposerIsReported) {
  // A copy of the driver under another path, opened with the audit module off: its calls
  // bypass the trace, and a notice at exit names it.
  const TraceRun run = trace({"--no-audit"}, {kScenarios, "copied-driver"});
  ASSERT_EQ(run.code, 0) << run.err;
  const auto& p = run.analysis.processes.at(0);
  const bool reported = std::any_of(p.notices.begin(), p.notices.end(), [&](std::size_t k) {
    return run.analysis.records[k].api == "libcuda-bypass" &&
           run.analysis.records[k].args.find("/libcuda.so.1): calls through it were not traced") != std::string::npos;
  });
  EXPECT_TRUE(reported) << run.report;
}

TEST(Tracer, TheRealDriverNamedLibcudaIsNotReportedAsASecondDriver) {
  // On a machine the real driver is a libcuda.so.1 too. A program that loads the driver with
  // dlopen (the CUDA Runtime, drvshim) gets the interposer's constructor late, and its exit
  // handlers then ran before the interposer's destructor: the real driver's path was read from
  // a destroyed string, and the driver itself named as a bypass in every H200 trace of lab/gpu-runs/2026-12-01-run25.
  const fs::path dir = fs::path(DRVSHIM_TEST_WORK_DIR) / "runs" / ("named-" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const fs::path driver = dir / "libcuda.so.1";
  fs::remove(driver);
  fs::create_symlink(DRVSHIM_TEST_FAKE_PATH, driver);
  // Linked with -lcuda (loaded at start), and the static Runtime (dlopen).
  for (const std::vector<std::string>& command :
       {std::vector<std::string>{kScenarios, "basic"}, std::vector<std::string>{DRVSHIM_TEST_CUDART_STATIC}}) {
    const std::string& program = command.front();
    const TraceRun run = trace({}, command, "", driver.string());
    ASSERT_FALSE(run.analysis.processes.empty()) << run.err;
    const auto& p = run.analysis.processes.at(0);
    EXPECT_EQ(p.driver, driver.string());
    for (const std::size_t k : p.notices) {
      EXPECT_NE(run.analysis.records[k].api, "libcuda-bypass") << program << "\n" << run.analysis.records[k].args;
    }
  }
}

TEST(Tracer, CallsThroughUntracedEntryPointsAreCountedAlsoWhenTheProgramEndsWithUnderscoreExit) {
  const TraceRun run = trace({}, {kScenarios, "untraced", "_exit"}, "", DRVSHIM_TEST_GL_DRIVER);
  ASSERT_EQ(run.code, 0) << run.err;
  std::vector<std::string> called;
  bool summary = false;
  for (const auto& r : run.records) {
    if (r.api == "untraced-entry-point-called") called.push_back(r.args);
    summary = summary || r.api == "untraced-summary";
  }
  ASSERT_EQ(called.size(), 1u);
  EXPECT_EQ(called[0].rfind("cuGLInit@2000 flags 0: 4 call(s)", 0), 0u) << called[0];
  EXPECT_TRUE(summary);
}

TEST(Tracer, EntryPointsTheDriverResolvesButDoesNotExportAreFoldedIntoOneLineUnlessCalled) {
  // As on the H200 under PyTorch: the driver resolves cuGL*/cuEGL*/cuVDPAU* that it does not
  // export, and every library looking them up used to add a timeline line each.
  const TraceRun run = trace({}, {kScenarios, "untraced"}, "", DRVSHIM_TEST_GL_DRIVER);
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_NE(run.out.find("gl_init_calls=4"), std::string::npos) << run.out;
  // The trace: one record per entry point (not per lookup), and the calls counted at exit.
  std::vector<std::string> listed;
  std::vector<std::string> called;
  for (const auto& r : run.records) {
    if (r.api == "untraced-entry-point") listed.push_back(r.args.substr(0, r.args.find(" -> ")));
    if (r.api == "untraced-entry-point-called") called.push_back(r.args);
  }
  EXPECT_EQ(listed, (std::vector<std::string>{"cuGLInit@2000 flags 0", "cuGLGetDevices@4010 flags 0",
                                              "cuVDPAUGetDevice@3010 flags 0", "cuGLMapBufferObject@7000 flags 2"}));
  ASSERT_EQ(called.size(), 1u);
  EXPECT_EQ(called[0].rfind("cuGLInit@2000 flags 0: 4 call(s)", 0), 0u) << called[0];
  // The analysis: four entries, five lookups; the three never called share one timeline line.
  const auto& p = run.analysis.processes.at(0);
  EXPECT_EQ(p.untraced, 5u);
  ASSERT_EQ(p.untraced_entries.size(), 4u);
  EXPECT_EQ(p.untraced_entries[0].calls, 4u);
  std::size_t folded = 0, distinct = 0;
  for (const auto& e : p.timeline) {
    if (e.text.find("3 entry point(s) the driver resolves but does not export: cuGLGetDevices, cuVDPAUGetDevice, "
                    "cuGLMapBufferObject; calls through them are not traced") != std::string::npos) {
      ++folded;
    }
    if (e.text.find("cuGLInit@2000 flags 0: the driver resolves it but does not export it; called 4 time(s)") !=
        std::string::npos) {
      ++distinct;
    }
  }
  EXPECT_EQ(folded, 1u) << run.report;
  EXPECT_EQ(distinct, 1u) << run.report;
  const auto lines_with = [&](const std::string& what) {
    std::size_t n = 0;
    for (std::size_t at = run.report.find(what); at != std::string::npos; at = run.report.find(what, at + 1)) ++n;
    return n;
  };
  EXPECT_EQ(lines_with("untraced-entry-point"), 0u) << run.report;
  // The summary keeps the whole list.
  EXPECT_NE(run.report.find("untraced entry points (4; 5 lookup(s))"), std::string::npos) << run.report;
  EXPECT_NE(run.report.find("    cuGLInit@2000 flags 0: called 4 time(s)\n"), std::string::npos) << run.report;
  EXPECT_NE(run.report.find("    cuGLMapBufferObject@7000 flags 2\n"), std::string::npos) << run.report;
}

// ---- modes and outputs --------------------------------------------------------------------

TEST(Tracer, SummaryModeRecordsStateChangesAndCountsTheRest) {
  const TraceRun run = trace({"--mode", "summary"}, {kScenarios, "basic"});
  ASSERT_EQ(run.code, 0) << run.err;
  const auto calls = calls_from(run, "trace_scenarios");
  const std::vector<std::string> expected = {
      "cuInit",          "cuDevicePrimaryCtxRetain",    "cuCtxSetCurrent", "cuMemAlloc_v2", "cuMemFree_v2",
      "cuCtxSetCurrent", "cuDevicePrimaryCtxRelease_v2"};
  EXPECT_EQ(calls, expected) << "cuDeviceGet is only counted";
  const auto& p = run.analysis.processes.at(0);
  EXPECT_EQ(p.folded.at(p.pid).at("cuDeviceGet").calls, 1u);
  EXPECT_TRUE(std::any_of(run.records.begin(), run.records.end(),
                          [](const Record& r) { return r.kind == Kind::counts && r.api == "cuDeviceGet"; }));
}

TEST(Tracer, SummaryModeCountsEveryThreadsCallsAndTheirTimeInNanoseconds) {
  const TraceRun run = trace({"--mode", "summary"}, {kScenarios, "counted"});
  ASSERT_EQ(run.code, 0) << run.err;
  const auto& p = run.analysis.processes.at(0);
  // Four workers that ended before the process, and the main thread.
  std::vector<std::uint64_t> per_thread;
  for (const auto& [tid, apis] : p.folded) {
    const auto it = apis.find("cuDeviceGet");
    if (it != apis.end()) per_thread.push_back(it->second.calls);
  }
  std::sort(per_thread.begin(), per_thread.end());
  EXPECT_EQ(per_thread, (std::vector<std::uint64_t>{500, 1000, 1000, 1000, 1000})) << run.report;
  // Each worker's failed call is recorded one by one, with its arguments, inside the process's time.
  std::size_t failed = 0;
  for (const auto& r : run.analysis.records) {
    if (r.kind != Kind::call || r.api != "cuDeviceGet") continue;
    ++failed;
    EXPECT_EQ(r.result, 101) << r.args;  // CUDA_ERROR_INVALID_DEVICE
    EXPECT_NE(r.args.find("99"), std::string::npos) << r.args;
    EXPECT_GE(r.dur_ns, 0);
    EXPECT_GE(r.ts_ns, p.start_ns);
  }
  EXPECT_EQ(failed, 4u);
  // The host function slept 50 ms inside cuLaunchHostFunc: the folded time is in ns, not in ticks.
  const auto main_it = p.folded.find(p.pid);
  ASSERT_NE(main_it, p.folded.end());
  const Folded& host = main_it->second.at("cuLaunchHostFunc");
  EXPECT_EQ(host.calls, 1u);
  EXPECT_GE(host.total_ns, 50'000'000);
  EXPECT_LT(host.total_ns, 90'000'000);
}

TEST(Tracer, TheBenchmarksSwitchChangesTheModeOfATracedProcess) {
  const TraceRun run = trace({"--mode", "full"}, {kScenarios, "set-mode"});
  ASSERT_EQ(run.code, 0) << run.err;
  // Previous modes: full, summary, full; 7 is refused (-1); then off -> full.
  EXPECT_NE(run.out.find("set_mode: 2 1 2 -1 0"), std::string::npos) << run.out;
  const auto calls = calls_from(run, "trace_scenarios");
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "cuDeviceGet"), 1) << "one call in full mode";
  std::uint64_t counted = 0;
  for (const auto& r : run.records) {
    if (r.kind == Kind::counts && r.api == "cuDeviceGet") counted += r.count;
  }
  EXPECT_EQ(counted, 3u) << "three in summary mode, none while off";
}

TEST(Tracer, TheChromeTraceParsesWithATrackPerThread) {
  const TraceRun run = trace({}, {kScenarios, "no-context"});
  ASSERT_TRUE(run.chrome.is_object()) << "the Chrome trace does not parse";
  ASSERT_TRUE(run.chrome.contains("traceEvents"));
  std::set<std::uint64_t> named, sliced;
  int context_instants = 0;
  for (const auto& e : run.chrome["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") named.insert(e["tid"].get<std::uint64_t>());
    if (e["ph"] == "X") sliced.insert(e["tid"].get<std::uint64_t>());
    if (e["ph"] == "i" && e["cat"] == "context") ++context_instants;
    if (e.contains("ts")) {
      EXPECT_TRUE(e["ts"].is_number()) << e.dump();
    }
  }
  EXPECT_EQ(sliced.size(), 2u) << "main thread and worker";
  for (const auto tid : sliced) EXPECT_EQ(named.count(tid), 1u) << "tid " << tid << " has no named track";
  EXPECT_GE(context_instants, 1);
}

TEST(Tracer, CuptiThatCannotWorkWithTheFakeDegradesToAnEvent) {
  const TraceRun run = trace({"--cupti"}, {kScenarios, "basic"});
  ASSERT_EQ(run.code, 0) << run.err;
  bool unavailable = false;
  for (const auto& r : run.records) unavailable |= r.api == "cupti-unavailable";
  EXPECT_TRUE(unavailable) << run.report;
  EXPECT_EQ(calls_from(run, "trace_scenarios").size(), 8u) << "tracing goes on";
}

TEST(Tracer, BadCommandLinesAreExplained) {
  TraceRun r = trace({}, {"/nonexistent/program"});
  EXPECT_EQ(r.code, 127);
  EXPECT_NE(r.err.find("cannot run \"/nonexistent/program\": No such file or directory"), std::string::npos) << r.err;
  const std::string cmd = std::string(DRVSHIM_TEST_TRACER) + " --libcuda /nonexistent/libcuda.so.1 -- true 2>&1";
  std::FILE* f = ::popen(cmd.c_str(), "r");
  char buf[512] = {};
  const std::size_t n = std::fread(buf, 1, sizeof buf - 1, f);
  const int status = ::pclose(f);
  EXPECT_EQ(WEXITSTATUS(status), 127);
  EXPECT_NE(std::string(buf, n).find("the driver \"/nonexistent/libcuda.so.1\" does not exist"), std::string::npos)
      << std::string(buf, n);
  EXPECT_EQ(WEXITSTATUS(std::system(DRVSHIM_TEST_TRACER " >/dev/null 2>&1")), 2) << "no program";
}

TEST(Tracer, TheProgramsExitCodeIsTheTracersExitCode) {
  const TraceRun run = trace({}, {kScenarios, "no-such-mode"});
  EXPECT_EQ(run.code, 2);
  EXPECT_NE(run.err.find("scenario: unknown mode"), std::string::npos);
}

}  // namespace
