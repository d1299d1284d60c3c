// SPDX-License-Identifier: Apache-2.0
// drvshim-trace's analysis on hand-made record streams: no driver, no
// process, no clock. Each diagnostic is shown firing on its pattern and not
// firing on the nearest harmless one.
#include <gtest/gtest.h>
#include <drvshim_recorder/json_line.hpp>
#include <drvshim_trace/api_info.hpp>
#include <drvshim_trace/chrome_trace.hpp>
#include <drvshim_trace/diagnostics.hpp>
#include <drvshim_trace/model.hpp>
#include <drvshim_trace/records_io.hpp>
#include <drvshim_trace/report.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <set>
#include <sstream>

using namespace drvshim::trace_analysis;
using drvshim::recorder::Kind;
using drvshim::recorder::Record;

std::string fmt_handle(const std::string& prefix, std::uintptr_t h);

namespace {

constexpr std::uint32_t kPid = 100;
constexpr std::uint64_t kMain = 100;
constexpr std::uint64_t kWorker = 101;

// A stream built call by call; times advance 1 µs per record unless given.
class Stream {
 public:
  Stream& call(std::uint64_t tid, const std::string& sym, const std::string& args, int result = 0,
               const std::string& lib = "app", std::uintptr_t ctx = 0, std::int64_t dur = 500) {
    Record r;
    r.pid = pid_;
    r.tid = tid;
    r.ts_ns = now_;
    r.dur_ns = dur;
    r.kind = Kind::call;
    r.symbol = sym;
    const ApiInfo* info = api_info(sym);
    r.api = info != nullptr ? std::string(info->base) : sym;
    r.args = args;
    r.result = result;
    r.ctx = ctx;
    r.lib = lib;
    r.seq = ++seq_;
    records_.push_back(r);
    now_ += 1000;
    return *this;
  }
  Stream& event(Kind kind, const std::string& api, const std::string& args, std::uint64_t tid = kMain) {
    Record r;
    r.pid = pid_;
    r.tid = tid;
    r.ts_ns = now_;
    r.kind = kind;
    r.api = api;
    r.args = args;
    r.seq = ++seq_;
    records_.push_back(r);
    now_ += 1000;
    return *this;
  }
  Stream& at(std::int64_t ns) {
    now_ = ns;
    return *this;
  }
  Stream& pid(std::uint32_t p) {
    pid_ = p;
    return *this;
  }
  std::vector<Record> records() const { return records_; }

 private:
  std::vector<Record> records_;
  std::int64_t now_ = 1000;
  std::uint64_t seq_ = 0;
  std::uint32_t pid_ = kPid;
};

// The primary context of device 0 retained and made current by the main thread.
Stream& start(Stream& s, std::uintptr_t ctx = 0xc0, std::string lib = "app") {
  s.call(kMain, "cuInit", "0x0", 0, lib)
      .call(kMain, "cuDevicePrimaryCtxRetain", fmt_handle("->", ctx) + ", 0", 0, lib)
      .call(kMain, "cuCtxSetCurrent", fmt_handle("", ctx), 0, lib, ctx);
  return s;
}

std::vector<std::string> ids(const Analysis& a) {
  std::vector<std::string> out;
  for (const auto& d : a.diagnostics) out.push_back(d.id);
  return out;
}

bool has(const Analysis& a, const std::string& id) {
  const auto v = ids(a);
  return std::find(v.begin(), v.end(), id) != v.end();
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace

std::string fmt_handle(const std::string& prefix, std::uintptr_t h) {
  std::ostringstream o;
  o << prefix << "0x" << std::hex << h;
  return o.str();
}

TEST(TraceArgs, RenderedArgumentsSplitIntoValues) {
  const auto v = split_args("\"a, b\\\"c\", ->0x10, ->?, null, {...}, 42");
  ASSERT_EQ(v.size(), 6u);
  EXPECT_EQ(v[0].text, "\"a, b\\\"c\"");
  EXPECT_TRUE(v[1].out);
  EXPECT_EQ(v[1].text, "0x10");
  EXPECT_FALSE(v[2].known);
  EXPECT_EQ(v[3].text, "null");
  EXPECT_FALSE(v[4].known);
  EXPECT_EQ(v[5].text, "42");
  EXPECT_TRUE(split_args("").empty());
}

TEST(TraceArgs, ParametersAreFoundByNameForTheExactVariant) {
  Record r;
  r.api = "cuCtxCreate";
  r.symbol = "cuCtxCreate_v4";
  r.args = "->0x55, null, 0x4, 1";
  EXPECT_EQ(arg(r, "pctx")->text, "0x55");
  EXPECT_EQ(arg(r, "flags")->text, "0x4");
  EXPECT_EQ(arg(r, "dev")->text, "1");
  r.symbol = "cuCtxCreate_v2";  // (pctx, flags, dev)
  r.args = "->0x55, 0x4, 1";
  EXPECT_EQ(arg(r, "dev")->text, "1");
  // The in-process trace records base names: the current variant describes them.
  Record base;
  base.api = "cuMemAlloc";
  base.args = "0x7ffd, 64";
  EXPECT_EQ(api_info(base)->symbol, "cuMemAlloc_v2");
  EXPECT_EQ(arg(base, "bytesize")->text, "64");
  EXPECT_FALSE(arg(base, "nosuch").has_value());
}

TEST(TraceRecordsIo, LinesThatAreNotRecordsAreCountedNotFatal) {
  std::istringstream in(
      "{\"seq\":1,\"ts_ns\":5,\"dur_ns\":2,\"tid\":7,\"pid\":3,\"kind\":\"call\",\"api\":\"cuInit\",\"args\":\"0x0\","
      "\"result\":0,\"result_name\":\"CUDA_SUCCESS\",\"ctx\":\"0x0\",\"sym\":\"cuInit\",\"lib\":\"app\"}\n"
      "{\"seq\":2,\"ts_ns\":9,\"tid\":7,\"kind\":\"cal\n"
      "\n"
      "{\"seq\":3,\"ts_ns\":9,\"dur_ns\":0,\"tid\":7,\"kind\":\"bogus\",\"api\":\"x\"}\n");
  const auto parsed = parse_jsonl(in);
  ASSERT_EQ(parsed.records.size(), 1u);
  EXPECT_EQ(parsed.records[0].pid, 3u);
  EXPECT_EQ(parsed.records[0].lib, "app");
  EXPECT_EQ(parsed.bad_lines, 2u);
  EXPECT_EQ(parsed.first_error.rfind("line 2: ", 0), 0u) << parsed.first_error;
}

TEST(TraceRecordsIo, WhatTheRecorderWritesParsesBack) {
  Record r;
  r.seq = 4;
  r.ts_ns = 10;
  r.dur_ns = 3;
  r.pid = 9;
  r.tid = 11;
  r.kind = Kind::call;
  r.api = "cuMemAlloc";
  r.symbol = "cuMemAlloc_v2";
  r.args = "->0x7f00, 64";
  r.result = 2;
  r.ctx = 0xabc;
  r.lib = "lib\xff.so";  // not UTF-8: escaped, still a valid line
  r.rt = 77;
  Record back;
  std::string why;
  ASSERT_TRUE(parse_line(drvshim::recorder::to_json(r), back, why)) << why;
  EXPECT_EQ(back.symbol, r.symbol);
  EXPECT_EQ(back.args, r.args);
  EXPECT_EQ(back.result, 2);
  EXPECT_EQ(back.ctx, 0xabcu);
  EXPECT_EQ(back.rt, 77u);
  EXPECT_EQ(back.pid, 9u);
}

TEST(TraceRecordsIo, TheRecordsOfExecDroppedRecordsAndTheTraceEndParse) {
  std::istringstream in(
      "{\"seq\":1,\"ts_ns\":5,\"dur_ns\":0,\"tid\":7,\"pid\":3,\"kind\":\"event\",\"api\":\"records-dropped\","
      "\"args\":\"count=4; reason=writer-behind\"}\n"
      "{\"seq\":2,\"ts_ns\":6,\"dur_ns\":0,\"tid\":7,\"pid\":3,\"kind\":\"process\",\"api\":\"exec\","
      "\"args\":\"path=/bin/x; traced=1\"}\n"
      "{\"seq\":3,\"ts_ns\":7,\"dur_ns\":0,\"tid\":7,\"pid\":3,\"kind\":\"process\",\"api\":\"exec-failed\","
      "\"args\":\"errno=2 (No such file or directory)\"}\n"
      "{\"seq\":4,\"ts_ns\":8,\"dur_ns\":0,\"tid\":7,\"pid\":3,\"kind\":\"process\",\"api\":\"trace-end\","
      "\"args\":\"reason=exit\"}\n");
  const auto parsed = parse_jsonl(in);
  EXPECT_EQ(parsed.bad_lines, 0u) << parsed.first_error;
  ASSERT_EQ(parsed.records.size(), 4u);
  EXPECT_EQ(parsed.records[0].kind, Kind::event);
  EXPECT_EQ(parsed.records[3].kind, Kind::process);
  const auto a = analyse(parsed.records);
  ASSERT_EQ(a.processes.size(), 1u) << "the exec failed";
  EXPECT_EQ(a.processes[0].dropped, 4u);
  EXPECT_EQ(a.processes[0].ended, "exit");
  EXPECT_EQ(a.processes[0].exec_path, "");
}

TEST(TraceModel, PrimaryContextLifeAndTheThreadsCurrentContext) {
  Stream s;
  start(s);
  s.call(kMain, "cuMemAlloc_v2", "->0x7f00, 1024", 0, "app", 0xc0)
      .call(kMain, "cuMemFree_v2", "0x7f00", 0, "app", 0xc0)
      .call(kMain, "cuCtxSetCurrent", "null", 0, "app", 0)
      .call(kMain, "cuDevicePrimaryCtxRelease_v2", "0");
  const auto a = analyse(s.records());
  ASSERT_EQ(a.processes.size(), 1u);
  const auto& p = a.processes[0];
  EXPECT_EQ(p.first_init, 0);
  ASSERT_EQ(p.context_order.size(), 1u);
  const auto& c = p.contexts.at(0xc0);
  EXPECT_TRUE(c.primary);
  EXPECT_EQ(c.device, 0);
  EXPECT_EQ(c.created_by, "cuDevicePrimaryCtxRetain");
  EXPECT_GE(c.ended_ns, 0);
  EXPECT_NE(c.ended_by.find("released (last retain)"), std::string::npos) << c.ended_by;
  EXPECT_FALSE(p.primaries.at(0).active);
  const auto& t = p.threads.at(kMain);
  ASSERT_EQ(t.history.size(), 2u);
  EXPECT_EQ(t.history[0].context, 0xc0u);
  EXPECT_EQ(t.history[1].context, 0u);
  EXPECT_TRUE(p.live.empty());
  EXPECT_EQ(p.released_objects, 1u);
  EXPECT_TRUE(a.diagnostics.empty()) << format_diagnostics(a);
  const std::string report = format_report(a);
  EXPECT_NE(report.find("device 0 primary 0xc0: inactive -> active, retains 0 -> 1, flags 0x0 (created)"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("first use of 0xc0 (device 0 primary) by tid 100"), std::string::npos) << report;
  EXPECT_NE(report.find("never released (0)"), std::string::npos) << report;
}

TEST(TraceModel, WhatWasNeverReleasedIsListedWithItsCreator) {
  Stream s;
  start(s);
  s.call(kMain, "cuMemAlloc_v2", "->0x7f00, 4096", 0, "app", 0xc0)
      .call(kMain, "cuModuleLoadData", "->0xm1, 0x1234", 0, "libfoo.so", 0xc0)
      .call(kMain, "cuStreamCreate", "->0x5a, 0x0", 0, "app", 0xc0)
      .call(kMain, "cuEventCreate", "->0xe1, 0x0", 0, "app", 0xc0)
      .call(kMain, "cuEventDestroy_v2", "0xe1", 0, "app", 0xc0);
  const auto a = analyse(s.records());
  const auto& p = a.processes[0];
  ASSERT_EQ(p.live.size(), 3u);
  EXPECT_EQ(p.live[0].kind, "device memory");
  EXPECT_EQ(p.live[0].bytes, 4096u);
  EXPECT_EQ(p.live[1].kind, "module");
  EXPECT_EQ(p.live[1].lib, "libfoo.so");
  EXPECT_EQ(p.live[2].kind, "stream");
  const std::string summary = format_summary(a, p);
  EXPECT_NE(summary.find("never released (4)"), std::string::npos) << summary;  // three objects and the context
  EXPECT_NE(summary.find("module 0xm1 in context 0xc0 (device 0 primary), by tid 100 (libfoo.so)"), std::string::npos)
      << summary;
}

TEST(TraceModel, UntracedEntryPointsOfAnOlderTraceMakeOneTimelineLineAndAListInTheSummary) {
  // As drvshim-trace recorded PyTorch on the H200 (2026-12-01): one event per lookup, the CUDA
  // Runtime, cuBLAS and cuBLASLt each looking up the same entry points the driver resolves
  // but does not export; cuInit between the first and the second round.
  const std::vector<std::string> keys = {"cuGLCtxCreate@3020 flags 0", "cuGLMapBufferObject@7000 flags 2",
                                         "cuEGLStreamConsumerConnect@7000 flags 0", "cuVDPAUGetDevice@3010 flags 0"};
  Stream s;
  for (int round = 0; round < 3; ++round) {
    for (const auto& k : keys) {
      s.event(Kind::event, "untraced-entry-point",
              k + " -> 0x7f4655b585e0 is no export of the real driver: calls through it are not traced");
    }
    if (round == 0) start(s);
  }
  s.event(Kind::event, "untraced-summary", "12 entry point(s) handed out untraced");
  const auto a = analyse(s.records());
  const auto& p = a.processes.at(0);
  EXPECT_EQ(p.untraced, 12u);
  ASSERT_EQ(p.untraced_entries.size(), 4u);
  for (const auto& e : p.untraced_entries) EXPECT_EQ(e.lookups, 3u) << e.key;
  const std::string timeline = format_timeline(a, p, 100);
  EXPECT_EQ(timeline.find("untraced-entry-point"), std::string::npos) << timeline;
  EXPECT_EQ(timeline.find("untraced-summary"), std::string::npos) << timeline;
  const std::string line =
      "[untraced] 4 entry point(s) the driver resolves but does not export: cuGLCtxCreate, "
      "cuGLMapBufferObject, cuEGLStreamConsumerConnect, cuVDPAUGetDevice; calls through them are "
      "not traced\n";
  const auto at = timeline.find(line);
  ASSERT_NE(at, std::string::npos) << timeline;
  EXPECT_EQ(timeline.find(line, at + 1), std::string::npos) << "once per process\n" << timeline;
  EXPECT_LT(at, timeline.find("cuInit")) << "where the first was resolved\n" << timeline;
  const std::string summary = format_summary(a, p);
  EXPECT_NE(summary.find("untraced entry points (4; 12 lookup(s))"), std::string::npos) << summary;
  for (const auto& k : keys) EXPECT_NE(summary.find("    " + k + " (3 lookups)\n"), std::string::npos) << summary;
}

TEST(TraceModel, AnUntracedEntryPointThatWasCalledKeepsItsOwnLine) {
  Stream s;
  s.event(Kind::event, "untraced-entry-point", "cuGLInit@2000 flags 0 -> 0x10 is no export of the real driver")
      .event(Kind::event, "untraced-entry-point", "cuGLGetDevices@4010 flags 0 -> 0x20 is no export of the real driver")
      .event(Kind::event, "untraced-entry-point", "cuGLCtxCreate@3020 flags 0 -> 0x30 is no export of the real driver")
      .event(Kind::event, "untraced-entry-point-called", "cuGLInit@2000 flags 0: 7 call(s) through the pointer")
      // A forked child calling a pointer its parent looked up: no lookup in its own records.
      .pid(kPid + 1)
      .event(Kind::event, "untraced-entry-point-called", "cuGLGetDevices@4010 flags 0: 2 call(s) through the pointer");
  const auto a = analyse(s.records());
  ASSERT_EQ(a.processes.size(), 2u);
  const std::string timeline = format_timeline(a, a.processes[0], 100);
  EXPECT_NE(timeline.find("[untraced] 2 entry point(s) the driver resolves but does not export: cuGLGetDevices, "
                          "cuGLCtxCreate; calls through them are not traced"),
            std::string::npos)
      << timeline;
  EXPECT_NE(timeline.find("[untraced] cuGLInit@2000 flags 0: the driver resolves it but does not export it; called 7 "
                          "time(s) through the pointer handed out, calls not traced"),
            std::string::npos)
      << timeline;
  const std::string child = format_timeline(a, a.processes[1], 100);
  EXPECT_NE(child.find("[untraced] cuGLGetDevices@4010 flags 0: the driver resolves it but does not export it; called "
                       "2 time(s)"),
            std::string::npos)
      << child;
  EXPECT_EQ(child.find("entry point(s) the driver resolves"), std::string::npos) << child;
  EXPECT_NE(format_summary(a, a.processes[0]).find("    cuGLInit@2000 flags 0: called 7 time(s)\n"), std::string::npos);
}

TEST(TraceModel, CallsOtherThanStateChangesAreFoldedPerThreadAndApi) {
  Stream s;
  start(s);
  for (int i = 0; i < 5; ++i)
    s.call(kMain, "cuLaunchKernel", "0xf, 1, 1, 1, 1, 1, 1, 0, null, 0x1, null", 0, "app", 0xc0, 200);
  const auto a = analyse(s.records());
  const auto& f = a.processes[0].folded.at(kMain).at("cuLaunchKernel");
  EXPECT_EQ(f.calls, 4u) << "the first launch is shown as the thread's first use of the context";
  EXPECT_EQ(f.total_ns, 800);
}

TEST(TraceModel, SummaryModeCountsAddToTheFoldedCalls) {
  Stream s;
  s.call(kMain, "cuInit", "0x0");
  Record counts;
  counts.pid = kPid;
  counts.tid = kMain;
  counts.ts_ns = 99999;
  counts.kind = Kind::counts;
  counts.api = "cuDeviceGetAttribute";
  counts.symbol = "cuDeviceGetAttribute";
  counts.count = 111;
  counts.dur_ns = 5000;
  auto records = s.records();
  records.push_back(counts);
  const auto a = analyse(records);
  EXPECT_EQ(a.processes[0].folded.at(kMain).at("cuDeviceGetAttribute").calls, 111u);
}

TEST(TraceModel, TheRecordedCurrentContextCorrectsTheModel) {
  // A context made current by a call the model does not know (cuCtxFromGreenCtx, say).
  Stream s;
  s.call(kMain, "cuInit", "0x0").call(kMain, "cuCtxSynchronize", "", 0, "app", 0xd0);
  const auto a = analyse(s.records());
  EXPECT_EQ(a.processes[0].threads.at(kMain).stack, std::vector<std::uintptr_t>{0xd0});
}

TEST(TraceModel, CallsOfOtherThreadsAfterAnExecBelongToTheImageThatMadeThem) {
  // A worker thread execs while the main thread goes on calling until the kernel ends it. The
  // old image's recorder numbers its records on; the new one starts again at 1 (its thread
  // record first), and the audit module's note for it carries no number.
  Stream s;
  s.event(Kind::process, "process", "exe=/bin/a; ppid=1; driver=/lib/libcuda.so.1; mode=full; cmdline=a")
      .call(kMain, "cuInit", "0x0")
      .event(Kind::process, "exec", "path=/bin/b; traced=1", kWorker)
      .call(kMain, "cuDriverGetVersion", "->13000")
      .event(Kind::event, "libcuda-redirected", "the program asked for /x/libcuda.so.1")
      .event(Kind::thread, "thread", "b")
      .call(kMain, "cuDriverGetVersion", "->13000")
      .event(Kind::process, "process", "exe=/bin/b; ppid=1; driver=/lib/libcuda.so.1; mode=full; cmdline=b")
      .call(kMain, "cuInit", "0x0")
      .event(Kind::process, "trace-end", "reason=exit");
  auto records = s.records();
  // As the recorders numbered them: 1-4 the old image, then 0 (the note), 1 (thread), 5 (the old
  // main thread's last call), 2 and 3 the new image.
  const std::uint64_t seqs[] = {1, 2, 3, 4, 0, 1, 5, 2, 3, 4};
  for (std::size_t k = 0; k < records.size(); ++k) records[k].seq = seqs[k];
  const auto a = analyse(records);
  ASSERT_EQ(a.processes.size(), 2u);
  const ProcessInfo& first = a.processes[0];
  const ProcessInfo& second = a.processes[1];
  EXPECT_EQ(first.exe, "/bin/a");
  EXPECT_EQ(first.end_record - first.first_record, 5u) << "the main thread's two late calls";
  EXPECT_EQ(second.exe, "/bin/b");
  EXPECT_EQ(second.end_record - second.first_record, 5u) << "the note, the thread record and the new image";
  EXPECT_EQ(a.records[second.first_record].api, "libcuda-redirected");
  EXPECT_EQ(second.threads.at(kMain).name, "b");
  // The old image ended in its exec, not abruptly.
  const std::string report = format_report(a, {});
  EXPECT_EQ(report.find("ends without a final record"), std::string::npos) << report;
}

TEST(TraceModel, AnExecStartsANewImageOfTheSamePid) {
  Stream s;
  s.event(Kind::process, "process", "exe=/bin/sh; ppid=1; driver=/lib/libcuda.so.1; mode=full; cmdline=sh -c x");
  start(s);  // the first program activates device 0's primary context
  s.event(Kind::process, "exec", "path=/bin/x; traced=1")
      .event(Kind::process, "process", "exe=/bin/x; ppid=1; driver=/lib/libcuda.so.1; mode=full; cmdline=x")
      .call(kMain, "cuInit", "0x0")
      .call(kMain, "cuDevicePrimaryCtxSetFlags_v2", "0, 0x4")  // before the new program activates anything
      .call(kMain, "cuDevicePrimaryCtxRetain", "->0xc0, 0")
      .call(kMain, "cuCtxSetCurrent", "0xc0", 0, "app", 0xc0)
      .call(kWorker, "cuMemAlloc_v2", "->?, 64", 201, "libw.so")
      .event(Kind::process, "trace-end", "reason=exit");
  const auto records = s.records();
  const auto a = analyse(records);
  ASSERT_EQ(a.processes.size(), 2u);
  const ProcessInfo& first = a.processes[0];
  const ProcessInfo& second = a.processes[1];
  EXPECT_EQ(first.pid, kPid);
  EXPECT_EQ(second.pid, kPid);
  EXPECT_EQ(first.image, 0);
  EXPECT_EQ(second.image, 1);
  EXPECT_EQ(first.exe, "/bin/sh");
  EXPECT_EQ(second.exe, "/bin/x");
  EXPECT_EQ(first.exec_path, "/bin/x");
  EXPECT_EQ(second.exec_path, "");
  EXPECT_EQ(first.first_record, 0u);
  EXPECT_EQ(first.end_record, 5u);
  EXPECT_EQ(second.first_record, 5u);
  EXPECT_EQ(second.end_record, records.size());
  EXPECT_EQ(a.records[first.end_record - 1].api, "exec");
  EXPECT_TRUE(first.primaries.at(0).active);
  EXPECT_EQ(second.contexts.at(0xc0).flags, "0x4") << "the new program's primary context has its own flags";
  EXPECT_FALSE(has(a, "primary-flags-after-activation")) << format_diagnostics(a);
  ASSERT_EQ(a.diagnostics.size(), 1u) << format_diagnostics(a);
  EXPECT_EQ(a.diagnostics[0].image, 1);
  const std::string report = format_report(a);
  EXPECT_TRUE(contains(report, "[no-current-context] pid 100 (image 2): cuMemAlloc_v2 called by tid 101")) << report;
  EXPECT_TRUE(contains(report, "== pid 100: /bin/sh  [sh -c x]\n")) << report;
  EXPECT_TRUE(contains(report, "== pid 100 (image 2, exec'd by image 1): /bin/x  [x]\n")) << report;
  EXPECT_TRUE(contains(report, "Summary of pid 100 (image 2)\n")) << report;
  EXPECT_TRUE(contains(format_timeline(a, first, 100), "exec'd /bin/x: its records follow as image 2 of pid 100"));
  EXPECT_FALSE(contains(report, "ends without a final record")) << "one ends in its exec, the other in trace-end";
  EXPECT_EQ(format_timeline(a, second, 100).find("/bin/sh"), std::string::npos) << "only the second program's records";
  // One Perfetto process for the pid, named by both programs.
  const auto j = nlohmann::json::parse(chrome_trace_json(a));
  std::vector<std::string> names;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "process_name") names.push_back(e["args"]["name"]);
  }
  EXPECT_EQ(names, std::vector<std::string>{"pid 100: /bin/sh, then /bin/x"});

  // A failed exec: the program goes on.
  Stream failed;
  start(failed);
  failed.event(Kind::process, "exec", "path=/nonexistent; traced=1")
      .event(Kind::process, "exec-failed", "errno=2 (No such file or directory)")
      .call(kMain, "cuMemAlloc_v2", "->0x7f, 64", 0, "app", 0xc0)
      .event(Kind::process, "trace-end", "reason=exit");
  const auto b = analyse(failed.records());
  ASSERT_EQ(b.processes.size(), 1u);
  EXPECT_EQ(b.processes[0].exec_path, "");
  EXPECT_TRUE(b.diagnostics.empty()) << format_diagnostics(b);
  EXPECT_TRUE(contains(format_timeline(b, b.processes[0], 100),
                       "the exec failed (errno 2 (No such file or directory)): pid 100 goes on with this program"))
      << format_timeline(b, b.processes[0], 100);

  // An exec the tracer could not follow.
  Stream outside;
  start(outside);
  outside.event(Kind::process, "exec", "path=/bin/static; traced=0; why=a static executable");
  const auto c = analyse(outside.records());
  ASSERT_EQ(c.processes.size(), 1u);
  ASSERT_EQ(c.processes[0].notices.size(), 1u);
  EXPECT_EQ(c.records[c.processes[0].notices[0]].api, "exec");
  EXPECT_TRUE(contains(format_timeline(c, c.processes[0], 100),
                       "[exec] exec'd /bin/static outside tracing (a static executable)"));
  const std::string summary = format_summary(c, c.processes[0]);
  EXPECT_TRUE(contains(summary, "exec'd /bin/static outside tracing (a static executable)")) << summary;
  EXPECT_FALSE(contains(summary, "ends without a final record")) << summary;
}

TEST(TraceModel, RecordsTheRecorderCouldNotKeepAreCountedPerThread) {
  Stream s;
  start(s);
  s.event(Kind::event, "records-dropped", "count=10; reason=writer-behind", kMain)
      .event(Kind::event, "records-dropped", "count=2; reason=reentrant", kWorker)
      .event(Kind::event, "records-dropped", "count=5; reason=writer-behind", kMain)
      .event(Kind::process, "trace-end", "reason=exit");
  const auto a = analyse(s.records());
  const ProcessInfo& p = a.processes.at(0);
  EXPECT_EQ(p.dropped, 17u);
  EXPECT_EQ(p.dropped_by_thread, (std::map<std::uint64_t, std::uint64_t>{{kMain, 15}, {kWorker, 2}}));
  EXPECT_EQ(p.notices.size(), 3u);
  const std::string timeline = format_timeline(a, p, 100);
  EXPECT_TRUE(contains(timeline, "[records-dropped] 10 record(s) of tid 100 were not recorded (writer-behind)"))
      << timeline;
  const std::string summary = format_summary(a, p);
  EXPECT_TRUE(contains(summary,
                       "  17 record(s) were not recorded (reentrant 2, writer-behind 15), by thread: tid 100: 15, "
                       "tid 101: 2\n"))
      << summary;
}

TEST(TraceModel, HowATraceEndsIsReported) {
  Stream cut;
  start(cut);  // its last record starts at +0.002 ms
  const auto a = analyse(cut.records());
  EXPECT_EQ(a.processes[0].ended, "");
  EXPECT_TRUE(contains(format_report(a),
                       "the trace of pid 100 ends without a final record: it was killed or its records could not be "
                       "written; calls after +0.002 ms may be missing"))
      << format_report(a);
  Stream exited;
  start(exited);
  exited.event(Kind::process, "trace-end", "reason=exit");
  const auto b = analyse(exited.records());
  EXPECT_EQ(b.processes[0].ended, "exit");
  EXPECT_FALSE(contains(format_report(b), "ends without a final record")) << format_report(b);
  Stream crashed;
  start(crashed);
  crashed.event(Kind::process, "trace-end", "reason=signal 11 (SIGSEGV)");
  const auto c = analyse(crashed.records());
  EXPECT_EQ(c.processes[0].ended, "signal 11 (SIGSEGV)");
  const std::string report = format_report(c);
  EXPECT_TRUE(contains(report, "pid 100 died of signal 11 (SIGSEGV)")) << report;
  EXPECT_FALSE(contains(report, "ends without a final record")) << report;
  EXPECT_EQ(c.processes[0].notices.size(), 1u);
  // A trace the recorder cut short says so itself.
  Stream truncated;
  start(truncated);
  truncated.event(Kind::event, "trace-truncated", "the trace file reached its cap; 12 record(s) not written");
  const std::string cut_short = format_report(analyse(truncated.records()));
  EXPECT_TRUE(contains(cut_short, "the trace of pid 100 was cut short at +0.003 ms: the trace file reached its cap"))
      << cut_short;
  EXPECT_FALSE(contains(cut_short, "ends without a final record")) << cut_short;
}

TEST(TraceModel, AContextHandleReusedAfterItsDestructionIsANewContext) {
  Stream s;
  s.call(kMain, "cuInit", "0x0")
      .call(kMain, "cuCtxCreate_v4", "->0xd0, null, 0x0, 0", 0, "app", 0xd0)
      .call(kMain, "cuCtxDestroy_v2", "0xd0", 0, "app", 0)
      .call(kMain, "cuCtxCreate_v4", "->0xd0, null, 0x0, 1", 0, "app", 0xd0)
      .call(kMain, "cuCtxDestroy_v2", "0xd0", 0, "app", 0)
      .event(Kind::process, "trace-end", "reason=exit");
  const auto a = analyse(s.records());
  const ProcessInfo& p = a.processes.at(0);
  EXPECT_EQ(p.context_order, std::vector<std::uintptr_t>{0xd0});
  const auto all = contexts_in_creation_order(p);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0]->device, 0);
  EXPECT_EQ(all[1]->device, 1);
  EXPECT_GE(all[0]->ended_ns, 0);
  EXPECT_GE(all[1]->ended_ns, 0);
  EXPECT_LT(all[0]->ended_ns, all[1]->created_ns);
  EXPECT_TRUE(a.diagnostics.empty()) << format_diagnostics(a);
  const std::string summary = format_summary(a, p);
  EXPECT_TRUE(contains(summary, "contexts (2):")) << summary;
  EXPECT_TRUE(contains(summary, "never released (0)")) << summary;
  const auto j = nlohmann::json::parse(chrome_trace_json(a));
  std::multiset<std::string> begins, ends;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "b") begins.insert(e["id"].get<std::string>());
    if (e["ph"] == "e") ends.insert(e["id"].get<std::string>());
  }
  EXPECT_EQ(begins.size(), 2u);
  EXPECT_EQ(std::set<std::string>(begins.begin(), begins.end()).size(), 2u) << "one id per context";
  EXPECT_EQ(begins, ends);
}

// A trace with many failures, objects and diagnostics: the analysis must stay linear (n log n) in the
// number of records; the quadratic walks it replaced took many seconds for this one.
TEST(TraceModel, TheAnalysisStaysFastOnLongTraces) {
  constexpr std::uintptr_t kLive = 0x10000000;
  constexpr std::uintptr_t kNever = 0x70000000;
  constexpr int kN = 20000;
  Stream s;
  start(s);
  for (int i = 0; i < kN; ++i) {
    s.call(kMain, "cuMemAlloc_v2", fmt_handle("->", kLive + static_cast<std::uintptr_t>(i) * 0x100) + ", 256", 0, "app",
           0xc0, 100);
  }
  for (int i = 0; i < kN; ++i) {  // freed oldest first
    s.call(kMain, "cuMemFree_v2", fmt_handle("", kLive + static_cast<std::uintptr_t>(i) * 0x100), 0, "app", 0xc0, 100);
  }
  for (int i = 0; i < kN; ++i) {  // frees of pointers never allocated: each fails
    const std::string ptr = fmt_handle("", kNever + static_cast<std::uintptr_t>(i) * 0x100);
    s.call(kMain, "cuMemFree_v2", ptr, 1, "app", 0xc0, 100);
    if (i % 1000 == 0) s.call(kMain, "cuMemsetD8_v2", ptr + ", 0, 64", 0, "app", 0xc0, 100);
  }
  s.event(Kind::process, "trace-end", "reason=exit");
  const auto records = s.records();
  ASSERT_GT(records.size(), 50000u);
  const auto t0 = std::chrono::steady_clock::now();
  const auto a = analyse(records);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Generous for a loaded machine and an unoptimised or sanitised build.
  double limit = 3.0;
#if !defined(NDEBUG) || defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
  limit *= 5;
#endif
  EXPECT_LT(seconds, limit) << records.size() << " records";
  const ProcessInfo& p = a.processes.at(0);
  EXPECT_TRUE(p.live.empty());
  EXPECT_EQ(p.released_objects, static_cast<std::size_t>(kN));
  EXPECT_EQ(p.errors.size(), static_cast<std::size_t>(kN));
  ASSERT_EQ(a.diagnostics.size(), 20u) << "each use of a pointer whose free failed";
  for (const auto& d : a.diagnostics) EXPECT_EQ(d.id, "ignored-error") << d.title;
  EXPECT_TRUE(contains(a.diagnostics[0].title,
                       "cuMemFree_v2 on 0x70000000 returned CUDA_ERROR_INVALID_VALUE and "
                       "tid 100 (app) went on with cuMemsetD8_v2 on the same object"))
      << a.diagnostics[0].title;
}

// ---- diagnostics ------------------------------------------------------------------

TEST(TraceDiagnostics, EveryKindHasAnExplanationAndAFix) {
  const auto& kinds = diagnostic_kinds();
  EXPECT_EQ(kinds.size(), 8u);
  for (const auto& k : kinds) {
    EXPECT_GT(std::string(k.explanation).size(), 40u) << k.id;
    EXPECT_GT(std::string(k.fix).size(), 20u) << k.id;
  }
}

TEST(TraceDiagnostics, InitRaceNeedsOverlappingCallsOnTwoThreads) {
  Stream race;
  race.at(1000).call(kMain, "cuInit", "0x0", 0, "app", 0, 50000).at(2000).call(kWorker, "cuInit", "0x0", 0, "libb.so");
  const auto a = analyse(race.records());
  ASSERT_TRUE(has(a, "init-race")) << format_diagnostics(a);
  EXPECT_NE(a.diagnostics[0].title.find("tid 100 (app) and tid 101 (libb.so)"), std::string::npos);
  Stream apart;
  apart.at(1000).call(kMain, "cuInit", "0x0", 0, "app", 0, 500).at(9000).call(kWorker, "cuInit", "0x0");
  EXPECT_FALSE(has(analyse(apart.records()), "init-race")) << "one after the other is not a race";
}

TEST(TraceDiagnostics, AContextRequiringCallWithoutACurrentContext) {
  Stream s;
  start(s);
  s.call(kWorker, "cuMemAlloc_v2", "->?, 64", 201, "libworker.so");
  const auto a = analyse(s.records());
  ASSERT_TRUE(has(a, "no-current-context")) << format_diagnostics(a);
  EXPECT_NE(a.diagnostics[0].title.find("cuMemAlloc_v2 called by tid 101 (libworker.so) with no current context"),
            std::string::npos)
      << a.diagnostics[0].title;
  Stream fine;
  start(fine);
  fine.call(kMain, "cuMemAlloc_v2", "->0x7f, 64", 0, "app", 0xc0);
  EXPECT_FALSE(has(analyse(fine.records()), "no-current-context"));
}

TEST(TraceDiagnostics, PrimaryFlagsSetAfterActivation) {
  Stream late;
  start(late);
  late.call(kMain, "cuDevicePrimaryCtxSetFlags_v2", "0, 0x4", 0, "libtorch.so");
  const auto a = analyse(late.records());
  ASSERT_TRUE(has(a, "primary-flags-after-activation"));
  EXPECT_NE(a.diagnostics[0].title.find("set device 0's primary-context flags to 0x4 after"), std::string::npos);
  Stream early;
  early.call(kMain, "cuInit", "0x0").call(kMain, "cuDevicePrimaryCtxSetFlags_v2", "0, 0x4");
  start(early);
  const auto b = analyse(early.records());
  EXPECT_FALSE(has(b, "primary-flags-after-activation"));
  EXPECT_EQ(b.processes[0].contexts.at(0xc0).flags, "0x4") << "the context is created with the flags set before";
}

TEST(TraceDiagnostics, ANonPrimaryContextBesideAnActivePrimaryOne) {
  Stream s;
  start(s);
  s.call(kMain, "cuCtxCreate_v4", "->0xd0, null, 0x0, 0", 0, "libold.so", 0xd0);
  const auto a = analyse(s.records());
  ASSERT_TRUE(has(a, "context-beside-primary"));
  EXPECT_FALSE(a.processes[0].contexts.at(0xd0).primary);
  Stream alone;
  alone.call(kMain, "cuInit", "0x0").call(kMain, "cuCtxCreate_v4", "->0xd0, null, 0x0, 0", 0, "app", 0xd0);
  EXPECT_FALSE(has(analyse(alone.records()), "context-beside-primary"));
}

TEST(TraceDiagnostics, ALibraryLeavesTheStackUnbalanced) {
  Stream s;
  start(s);
  s.call(kMain, "cuCtxPushCurrent_v2", "0xc0", 0, "libhelper.so", 0xc0)
      .call(kMain, "cuCtxPushCurrent_v2", "0xc0", 0, "libgood.so", 0xc0)
      .call(kMain, "cuCtxPopCurrent_v2", "->0xc0", 0, "libgood.so", 0xc0);
  const auto a = analyse(s.records());
  ASSERT_TRUE(has(a, "unbalanced-context-stack")) << format_diagnostics(a);
  ASSERT_EQ(a.diagnostics.size(), 1u) << format_diagnostics(a);
  EXPECT_NE(a.diagnostics[0].title.find("libhelper.so left 1 context(s) pushed on tid 100"), std::string::npos)
      << a.diagnostics[0].title;
}

TEST(TraceDiagnostics, AStackEmptiedBySetCurrentOrByAPopInAnotherLibraryIsBalanced) {
  // cuCtxCreate pushes the new context; cuCtxSetCurrent(NULL) pops it again.
  Stream created;
  created.call(kMain, "cuInit", "0x0")
      .call(kMain, "cuCtxCreate_v4", "->0xd0, null, 0x0, 0", 0, "libold.so", 0xd0)
      .call(kMain, "cuMemAlloc_v2", "->0x7f, 64", 0, "libold.so", 0xd0)
      .call(kMain, "cuCtxSetCurrent", "null", 0, "libold.so", 0);
  const auto a = analyse(created.records());
  EXPECT_FALSE(has(a, "unbalanced-context-stack")) << format_diagnostics(a);
  EXPECT_TRUE(a.processes[0].threads.at(kMain).stack.empty());
  // cuCtxSetCurrent replaces the pushed entry: the thread's stack holds no push any more.
  Stream replaced;
  replaced.call(kMain, "cuInit", "0x0")
      .call(kMain, "cuCtxCreate_v4", "->0xd0, null, 0x0, 0", 0, "libold.so", 0xd0)
      .call(kMain, "cuCtxSetCurrent", "0xd1", 0, "app", 0xd1);
  EXPECT_FALSE(has(analyse(replaced.records()), "unbalanced-context-stack"));
  // A push/pop pair in one library whose pop is a tail call: the pop is recorded for the caller.
  Stream tail;
  start(tail);
  tail.call(kMain, "cuCtxPushCurrent_v2", "0xc0", 0, "libhelper.so", 0xc0)
      .call(kMain, "cuCtxPopCurrent_v2", "->0xc0", 0, "app", 0xc0);
  const auto b = analyse(tail.records());
  EXPECT_FALSE(has(b, "unbalanced-context-stack")) << format_diagnostics(b);
  // What is still pushed when another library calls counts, named by the last push.
  Stream left;
  left.call(kMain, "cuInit", "0x0")
      .call(kMain, "cuCtxCreate_v4", "->0xd0, null, 0x0, 0", 0, "libold.so", 0xd0)
      .call(kMain, "cuCtxPushCurrent_v2", "0xd0", 0, "libhelper.so", 0xd0)
      .call(kMain, "cuMemAlloc_v2", "->0x7f, 64", 0, "app", 0xd0);
  const auto c = analyse(left.records());
  ASSERT_EQ(c.diagnostics.size(), 1u) << format_diagnostics(c);
  EXPECT_EQ(c.diagnostics[0].id, "unbalanced-context-stack");
  EXPECT_EQ(c.diagnostics[0].title,
            "libhelper.so left 2 context(s) pushed on tid 100's stack, where app then called cuMemAlloc_v2");
  EXPECT_EQ(c.diagnostics[0].evidence, std::vector<std::size_t>{2});
}

TEST(TraceDiagnostics, AContextALibraryPushesAndKeepsForItsOwnCallsIsNoFinding) {
  // Numba activates its context with a push and keeps it for the rest of the thread's life.
  Stream kept;
  kept.call(kMain, "cuInit", "0x0", 0, "cydriver.so")
      .call(kMain, "cuDevicePrimaryCtxRetain", "->0xc0, 0", 0, "cydriver.so")
      .call(kMain, "cuCtxPushCurrent_v2", "0xc0", 0, "cydriver.so", 0xc0)
      .call(kMain, "cuMemAlloc_v2", "->0x7f, 64", 0, "cydriver.so", 0xc0);
  const auto a = analyse(kept.records());
  EXPECT_FALSE(has(a, "unbalanced-context-stack")) << format_diagnostics(a);
  // The same push followed by another library's call on that thread is one.
  Stream used;
  used.call(kMain, "cuInit", "0x0", 0, "cydriver.so")
      .call(kMain, "cuDevicePrimaryCtxRetain", "->0xc0, 0", 0, "cydriver.so")
      .call(kMain, "cuCtxPushCurrent_v2", "0xc0", 0, "cydriver.so", 0xc0)
      .call(kMain, "cuMemAlloc_v2", "->0x7f, 64", 0, "libother.so", 0xc0);
  EXPECT_TRUE(has(analyse(used.records()), "unbalanced-context-stack"));
}

TEST(TraceDiagnostics, ACallOfAnotherLibraryOnAnotherThreadLeavesAKeptPushBalanced) {
  // A thread's stack is its own: a library keeping its context pushed on the main thread is
  // not blamed for what another library does on a thread of its own.
  Stream s;
  s.call(kMain, "cuInit", "0x0", 0, "cydriver.so")
      .call(kMain, "cuDevicePrimaryCtxRetain", "->0xc0, 0", 0, "cydriver.so")
      .call(kMain, "cuCtxPushCurrent_v2", "0xc0", 0, "cydriver.so", 0xc0)
      .call(kWorker, "cuCtxSetCurrent", "0xc0", 0, "libother.so", 0xc0)
      .call(kWorker, "cuMemAlloc_v2", "->0x80, 64", 0, "libother.so", 0xc0)
      .call(kMain, "cuMemAlloc_v2", "->0x7f, 64", 0, "cydriver.so", 0xc0);
  const auto a = analyse(s.records());
  EXPECT_TRUE(a.diagnostics.empty()) << format_diagnostics(a);
  EXPECT_EQ(a.processes[0].threads.at(kMain).stack, std::vector<std::uintptr_t>{0xc0}) << "the push is still there";
}

TEST(TraceDiagnostics, AQueryOfTheCurrentContextFailingWithInvalidContextIsAProbe) {
  // The CUDA Runtime asks each new thread whether it has a current context (PyTorch, Triton).
  Stream s;
  start(s);
  s.call(kWorker, "cuCtxGetDevice", "->?", 201, "libcudart.so.13")
      .call(kWorker, "cuCtxGetApiVersion", "null, ->?", 201, "libcudart.so.13")
      .call(kWorker, "cuCtxGetFlags", "->?", 201, "libcudart.so.13")
      .call(kWorker, "cuCtxSetCurrent", "0xc0", 0, "libcudart.so.13", 0xc0)
      .call(kWorker, "cuCtxGetDevice", "->0", 0, "libcudart.so.13", 0xc0)
      .event(Kind::process, "trace-end", "reason=exit");
  const auto a = analyse(s.records());
  EXPECT_TRUE(a.diagnostics.empty()) << format_diagnostics(a);
  EXPECT_TRUE(a.processes[0].errors.empty());
  // Naming a context, the same failure says the handle is bad: an error.
  Stream bad;
  start(bad);
  bad.call(kMain, "cuCtxGetApiVersion", "0xdead, ->?", 201, "app", 0xc0);
  EXPECT_EQ(analyse(bad.records()).processes[0].errors.size(), 1u);
}

TEST(TraceDiagnostics, NotFoundFromALookupIsAnAnswer) {
  // Triton asks for one kernel name and falls back to another.
  Stream s;
  start(s);
  s.call(kMain, "cuModuleLoadData", "->0xa1, 0x1234", 0, "libtriton.so", 0xc0)
      .call(kMain, "cuModuleGetFunction", "->?, 0xa1, \"kernel_v2\"", 500, "libtriton.so", 0xc0)
      .call(kMain, "cuModuleGetFunction", "->0xf1, 0xa1, \"kernel\"", 0, "libtriton.so", 0xc0)
      .call(kMain, "cuGetProcAddress_v2", "\"cuNew\", ->?, 12000, 0x0, ->0x1", 500, "app", 0xc0);
  const auto a = analyse(s.records());
  EXPECT_FALSE(has(a, "ignored-error")) << format_diagnostics(a);
  EXPECT_TRUE(a.processes[0].errors.empty());
}

TEST(TraceDiagnostics, CudaInAForkedChildOfAnInitialisedParent) {
  Stream s;
  start(s);
  s.pid(200)
      .event(Kind::process, "fork", "parent=100; parent_initialized=1; exe=/bin/app", 200)
      .call(200, "cuDeviceGetCount", "->1", 0, "app");
  const auto a = analyse(s.records());
  ASSERT_EQ(a.processes.size(), 2u);
  ASSERT_TRUE(has(a, "fork-after-init")) << format_diagnostics(a);
  EXPECT_EQ(a.diagnostics[0].pid, 200u);
  Stream clean;
  clean.pid(200)
      .event(Kind::process, "fork", "parent=100; parent_initialized=0; exe=/bin/app", 200)
      .call(200, "cuInit", "0x0", 0, "app");
  EXPECT_FALSE(has(analyse(clean.records()), "fork-after-init")) << "a child of an uninitialised parent may use CUDA";
}

TEST(TraceDiagnostics, APrimaryContextResetOrReleasedUnderAnotherComponent) {
  Stream reset;
  start(reset, 0xc0, "libcudart.so.13");
  reset.call(kMain, "cuDevicePrimaryCtxReset_v2", "0", 0, "libplugin.so")
      .call(kMain, "cuMemAlloc_v2", "->?, 64", 201, "libcudart.so.13", 0xc0);
  const auto a = analyse(reset.records());
  ASSERT_TRUE(has(a, "primary-released-while-used")) << format_diagnostics(a);
  EXPECT_NE(a.diagnostics[0].title.find("reset device 0's primary context while 1 retain(s) of other components"),
            std::string::npos)
      << a.diagnostics[0].title;
  Stream foreign_release;
  start(foreign_release, 0xc0, "libcudart.so.13");
  foreign_release.call(kMain, "cuDevicePrimaryCtxRelease_v2", "0", 0, "libplugin.so");
  EXPECT_TRUE(has(analyse(foreign_release.records()), "primary-released-while-used"));
  Stream own;
  start(own);
  own.call(kMain, "cuCtxSetCurrent", "null").call(kMain, "cuDevicePrimaryCtxRelease_v2", "0");
  EXPECT_FALSE(has(analyse(own.records()), "primary-released-while-used")) << "releasing one's own retain is fine";
}

TEST(TraceDiagnostics, AnErrorIgnoredByTheNextCallOnTheSameObject) {
  Stream s;
  start(s);
  s.call(kMain, "cuStreamCreate", "->0x5a, 0x0", 0, "app", 0xc0)
      .call(kMain, "cuStreamSynchronize", "0x5a", 719, "app", 0xc0)
      .call(kMain, "cuMemsetD8Async", "0x7f, 0, 64, 0x5a", 0, "app", 0xc0);
  const auto a = analyse(s.records());
  ASSERT_TRUE(has(a, "ignored-error")) << format_diagnostics(a);
  EXPECT_NE(a.diagnostics[0].title.find("cuStreamSynchronize on 0x5a returned CUDA_ERROR_LAUNCH_FAILED"),
            std::string::npos)
      << a.diagnostics[0].title;
  EXPECT_EQ(a.diagnostics[0].evidence.size(), 2u) << "the failure and the call that went on";
  Stream cleaned;
  start(cleaned);
  cleaned.call(kMain, "cuStreamCreate", "->0x5a, 0x0", 0, "app", 0xc0)
      .call(kMain, "cuStreamSynchronize", "0x5a", 719, "app", 0xc0)
      .call(kMain, "cuStreamDestroy_v2", "0x5a", 0, "app", 0xc0);
  EXPECT_FALSE(has(analyse(cleaned.records()), "ignored-error")) << "destroying the object handles the error";
  Stream answer;
  start(answer);
  answer.call(kMain, "cuStreamCreate", "->0x5a, 0x0", 0, "app", 0xc0)
      .call(kMain, "cuStreamQuery", "0x5a", 600, "app", 0xc0)
      .call(kMain, "cuStreamSynchronize", "0x5a", 0, "app", 0xc0);
  EXPECT_FALSE(has(analyse(answer.records()), "ignored-error")) << "NOT_READY from a query is an answer";
}

TEST(TraceDiagnostics, FreeingMemoryAfterAFailedCallOnItHandlesTheError) {
  // Freeing the memory a call failed on is the cleanup the diagnostic asks for: reporting
  // it would flag correct error handling.
  Stream freed;
  start(freed);
  freed.call(kMain, "cuMemAlloc_v2", "->0x7f, 64", 0, "app", 0xc0)
      .call(kMain, "cuMemsetD8_v2", "0x7f, 0, 64", 700, "app", 0xc0)
      .call(kMain, "cuMemFree_v2", "0x7f", 0, "app", 0xc0);
  const auto a = analyse(freed.records());
  EXPECT_EQ(a.processes[0].errors.size(), 1u);
  EXPECT_TRUE(a.diagnostics.empty()) << format_diagnostics(a);
  // Using the memory again instead is the mistake.
  Stream used;
  start(used);
  used.call(kMain, "cuMemAlloc_v2", "->0x7f, 64", 0, "app", 0xc0)
      .call(kMain, "cuMemsetD8_v2", "0x7f, 0, 64", 700, "app", 0xc0)
      .call(kMain, "cuMemsetD8_v2", "0x7f, 1, 64", 0, "app", 0xc0);
  const auto b = analyse(used.records());
  ASSERT_EQ(b.diagnostics.size(), 1u) << format_diagnostics(b);
  EXPECT_EQ(b.diagnostics[0].title,
            "cuMemsetD8_v2 on 0x7f returned CUDA_ERROR_ILLEGAL_ADDRESS and tid 100 (app) went on with cuMemsetD8_v2 "
            "on the same object");
}

TEST(TraceDiagnostics, NotReadyFromAnEventQueryIsAnAnswer) {
  // Polling an event until it completes, then waiting for it, is how events are used: the
  // poll's NOT_READY is no failure and the wait ignores no error.
  Stream s;
  start(s);
  s.call(kMain, "cuEventCreate", "->0xe1, 0x0", 0, "app", 0xc0)
      .call(kMain, "cuEventQuery", "0xe1", 600, "app", 0xc0)
      .call(kMain, "cuEventSynchronize", "0xe1", 0, "app", 0xc0);
  const auto a = analyse(s.records());
  EXPECT_TRUE(a.processes[0].errors.empty());
  EXPECT_TRUE(a.diagnostics.empty()) << format_diagnostics(a);
}

TEST(TraceDiagnostics, RepeatsAreCountedNotListed) {
  Stream s;
  s.call(kMain, "cuInit", "0x0");
  for (int i = 0; i < 20; ++i) s.call(kWorker, "cuMemAlloc_v2", "->?, 64", 201, "libw.so");
  const auto a = analyse(s.records());
  ASSERT_EQ(a.diagnostics.size(), 1u);
  EXPECT_EQ(a.diagnostics[0].occurrences, 20u);
  EXPECT_EQ(a.diagnostics[0].evidence.size(), 8u);
  EXPECT_NE(format_diagnostics(a).find("(20 times)"), std::string::npos);
}

// ---- Chrome trace ------------------------------------------------------------------

TEST(TraceChrome, TracksPerThreadSlicesForCallsInstantsForContextChanges) {
  Stream s;
  start(s);
  s.event(Kind::thread, "thread", "main", kMain)
      .call(kWorker, "cuCtxSetCurrent", "0xc0", 0, "app", 0xc0)
      .call(kWorker, "cuMemAlloc_v2", "->0x7f, 64", 0, "app", 0xc0, 1234567);
  const auto a = analyse(s.records());
  const auto j = nlohmann::json::parse(chrome_trace_json(a));
  int threads = 0, slices = 0, context_instants = 0, spans = 0;
  bool named_main = false;
  for (const auto& e : j["traceEvents"]) {
    if (e["ph"] == "M" && e["name"] == "thread_name") {
      ++threads;
      named_main |= e["args"]["name"] == "main (tid 100)";
    }
    if (e["ph"] == "X") {
      ++slices;
      EXPECT_EQ(e["cat"], "driver");
    }
    if (e["ph"] == "i" && e["cat"] == "context") ++context_instants;
    if (e["ph"] == "b") ++spans;
  }
  EXPECT_EQ(threads, 2);
  EXPECT_TRUE(named_main);
  EXPECT_EQ(slices, 5);
  EXPECT_EQ(context_instants, 3) << "two threads got a current context, and the driver was initialised";
  EXPECT_EQ(spans, 1) << "one context lifetime";
  // Relative microseconds with three decimals: the last call started at +5.000 µs and took 1234.567 µs.
  const std::string text = chrome_trace_json(a);
  EXPECT_NE(text.find("\"ts\":5.000,\"dur\":1234.567"), std::string::npos);
}
