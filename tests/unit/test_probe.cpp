// SPDX-License-Identifier: Apache-2.0
// drvshim-probe against every fake profile: exit codes, text and JSON.
#include <sys/wait.h>

#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

#include "fixture.hpp"

namespace {

struct ProbeRun {
  int code = -1;
  std::string out;
};

ProbeRun run_probe(const std::string& env, const std::string& args, bool with_stderr = false) {
  const std::string cmd = env + " " DRVSHIM_TEST_PROBE " " + args + (with_stderr ? " 2>&1" : " 2>/dev/null");
  ProbeRun run;
  std::FILE* p = popen(cmd.c_str(), "r");
  char buf[4096];
  while (std::fgets(buf, sizeof buf, p) != nullptr) run.out += buf;
  const int status = pclose(p);
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return run;
}

std::string fake_env(const char* profile) {
  return std::string("DRVSHIM_LIBCUDA=" DRVSHIM_TEST_FAKE_PATH " DRVSHIM_FAKE_PROFILE=") + profile;
}

nlohmann::json probe_json(const char* profile, int expected_code, const std::string& extra = "") {
  const ProbeRun run = run_probe(fake_env(profile), "--json " + extra);
  EXPECT_EQ(run.code, expected_code) << profile << "\n" << run.out;
  return nlohmann::json::parse(run.out);  // throws, failing the test, when the JSON does not parse
}

TEST(Probe, DiscreteProfileReportsTheH200AndEveryCheckPasses) {
  const auto j = probe_json("discrete", 0);
  EXPECT_EQ(j["schema"], "drvshim-probe/1");
  EXPECT_EQ(j["loader"]["status"], "ok");
  EXPECT_EQ(j["loader"]["driver_version"], 13000);
  EXPECT_EQ(j["loader"]["functions_resolved"], j["loader"]["functions_total"]);
  EXPECT_EQ(j["init"]["status"], "ok");
  ASSERT_EQ(j["devices"].size(), 1u);
  const auto& d = j["devices"][0];
  EXPECT_EQ(d["name"], "NVIDIA H200");
  EXPECT_EQ(d["compute_capability"], "9.0");
  EXPECT_EQ(d["sm_count"], 132);
  EXPECT_EQ(d["host_mapping"]["host_register_supported"], 1);
  for (const char* check : {"pinned_allocation", "mapped_allocation", "host_registration",
                            "read_only_host_registration", "managed_allocation", "pool_allocation"}) {
    EXPECT_EQ(d["checks"][check]["status"], "ok") << check;
  }
  EXPECT_EQ(d["checks"]["mapped_allocation"]["pointers_identical"], true);
  EXPECT_EQ(d["checks"]["pageable_access"]["status"], "unsupported");
  EXPECT_EQ(d["primary_context"]["before"]["active"], false);
  EXPECT_EQ(d["primary_context"]["after"]["active"], false) << "the probe releases what it retained";
  EXPECT_EQ(d["verdict"],
            "zero-copy available (host and device pointers identical); host registration supported (read-only too)");
  EXPECT_TRUE(j["timeline"].contains("cuinit_ms"));
  EXPECT_TRUE(j["timeline"].contains("first_retain_ms"));
  EXPECT_FALSE(j.contains("peer_access"));
  EXPECT_EQ(j["exit_code"], 0);
}

TEST(Probe, Tx1ProfileShowsTheSeedsVerdictInTextAndJson) {
  const auto j = probe_json("tx1", 0);
  const auto& d = j["devices"][0];
  EXPECT_EQ(d["checks"]["host_registration"]["status"], "unsupported");
  EXPECT_EQ(d["checks"]["mapped_allocation"]["status"], "ok");
  EXPECT_EQ(d["checks"]["pool_allocation"]["status"], "unsupported");
  EXPECT_EQ(d["host_mapping"]["integrated"], 1);
  const std::string verdict = d["verdict"];
  EXPECT_NE(verdict.find("host registration unsupported (host_register_supported 0): use mapped pinned allocations"),
            std::string::npos)
      << verdict;
  const ProbeRun text = run_probe(fake_env("tx1"), "");
  EXPECT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("verdict: " + verdict), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("host_registration"), std::string::npos);
}

TEST(Probe, DualProfileHasAPeerMatrixAndDeviceSelection) {
  const auto j = probe_json("dual", 0);
  ASSERT_EQ(j["devices"].size(), 2u);
  ASSERT_EQ(j["peer_access"].size(), 2u);
  EXPECT_TRUE(j["peer_access"][0][0].is_null());
  EXPECT_EQ(j["peer_access"][0][1], true);
  const auto one = probe_json("dual", 0, "--device 1");
  ASSERT_EQ(one["devices"].size(), 1u);
  EXPECT_EQ(one["devices"][0]["ordinal"], 1);
  EXPECT_EQ(run_probe(fake_env("dual"), "--device 5").code, 1);
}

TEST(Probe, NoDeviceExitsThree) {
  const auto j = probe_json("none", 3);
  EXPECT_EQ(j["init"]["status"], "failed");
  EXPECT_EQ(j["init"]["result"], "CUDA_ERROR_NO_DEVICE");
  EXPECT_EQ(j["nvrtc"]["status"].is_string(), true);
}

TEST(Probe, StubExitsTwoAndSaysWhy) {
  const auto j = probe_json("stub", 2);
  EXPECT_EQ(j["loader"]["status"], "stub");
  EXPECT_NE(j["loader"]["hint"].get<std::string>().find("stubs/libcuda.so"), std::string::npos);
}

TEST(Probe, OldDriverRunsAndListsWhatIsMissing) {
  const auto j = probe_json("old", 0);
  EXPECT_EQ(j["loader"]["driver_version"], 11080);
  bool saw_create = false;
  for (const auto& m : j["loader"]["missing"]) saw_create = saw_create || m["name"] == "cuCtxCreate";
  EXPECT_TRUE(saw_create);
  EXPECT_EQ(j["devices"][0]["name"], "NVIDIA A100-SXM4-40GB");
}

TEST(Probe, WithoutADriverItExplainsWhatItLookedForAndStillReportsNvrtc) {
  const ProbeRun run = run_probe("DRVSHIM_LIBCUDA=/nonexistent/libcuda.so.1", "--json");
  EXPECT_EQ(run.code, 2);
  const auto j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["loader"]["status"], "not_found");
  EXPECT_EQ(j["loader"]["paths_tried"][0]["path"], "/nonexistent/libcuda.so.1");
  EXPECT_TRUE(j["nvrtc"].contains("status"));
  EXPECT_FALSE(j.contains("devices"));
}

TEST(Probe, BandwidthTraceAndBadArguments) {
  char path[] = "/tmp/drvshim_probe_trace_XXXXXX";
  close(mkstemp(path));
  const auto j = probe_json("discrete", 0, std::string("--bandwidth --trace ") + path);
  ASSERT_TRUE(j.contains("bandwidth"));
  ASSERT_EQ(j["bandwidth"].size(), 7u);
  EXPECT_GT(j["bandwidth"][0]["gb_per_s"].get<double>(), 0.0);
  EXPECT_EQ(j["bandwidth"][6]["direction"], "kernel reads mapped");
  EXPECT_TRUE(j["bandwidth"][6].contains("gb_per_s")) << j["bandwidth"][6].dump();
  std::FILE* f = std::fopen(path, "r");
  ASSERT_NE(f, nullptr);
  char line[1024];
  ASSERT_NE(std::fgets(line, sizeof line, f), nullptr);
  std::fclose(f);
  std::remove(path);
  EXPECT_EQ(std::string(line).rfind("{\"seq\":", 0), 0u);
  EXPECT_EQ(run_probe(fake_env("discrete"), "--no-such-flag").code, 1);
  EXPECT_EQ(run_probe(fake_env("discrete"), "--help").code, 0);
}

// ---- what the probe once did wrong, each checked against its old behaviour -------------------

TEST(Probe, PathsThatAreNotUtf8GiveValidJsonWithTheBytesSpelledOut) {
  // Before: nlohmann's dump threw on the invalid UTF-8 and the probe aborted (exit 134).
  const std::string env = "DRVSHIM_LIBCUDA=\"$(printf '/tmp/drvshim-\\377\\376/libcuda.so.1')\"";
  const ProbeRun run = run_probe(env, "--json");
  ASSERT_EQ(run.code, 2) << run.out;
  const auto j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["loader"]["status"], "not_found");
  EXPECT_EQ(j["loader"]["paths_tried"][0]["path"], "/tmp/drvshim-\\xff\\xfe/libcuda.so.1");
  EXPECT_EQ(run_probe(env, "").code, 2) << "the text form prints the bytes as they are";
  // The four characters \xff in a path are not the byte 0xff: the backslash is doubled.
  const ProbeRun text = run_probe("DRVSHIM_LIBCUDA='/tmp/drvshim-\\xff/libcuda.so.1'", "--json");
  ASSERT_EQ(text.code, 2) << text.out;
  EXPECT_EQ(nlohmann::json::parse(text.out)["loader"]["paths_tried"][0]["path"], "/tmp/drvshim-\\\\xff/libcuda.so.1");
}

TEST(Probe, ALibraryThatIsNotADriverIsNoDriverNotAnOldOne) {
  // Before: reported as a driver too old (exit 1), with "update the NVIDIA driver".
  const ProbeRun run = run_probe("DRVSHIM_LIBCUDA=libm.so.6", "--json");
  ASSERT_EQ(run.code, 2) << run.out;
  const auto j = nlohmann::json::parse(run.out);
  EXPECT_EQ(j["loader"]["status"], "not_found") << run.out;
  EXPECT_NE(run.out.find("it is not a CUDA driver"), std::string::npos) << run.out;
  EXPECT_EQ(run.out.find("update the NVIDIA driver"), std::string::npos) << run.out;
}

TEST(Probe, AFailingDeviceStepKeepsTheDeviceAndSaysWhichStep) {
  // Before: the whole device list was abandoned for an undocumented top-level "error" string.
  const ProbeRun run = run_probe(fake_env("dual") + " DRVSHIM_FAKE_FAIL=cuDeviceGetPCIBusId:2:999", "--json");
  EXPECT_EQ(run.code, 1);
  const auto j = nlohmann::json::parse(run.out);
  EXPECT_FALSE(j.contains("error")) << "the failure belongs to device 1, not to the probe";
  ASSERT_EQ(j["devices"].size(), 2u);
  EXPECT_FALSE(j["devices"][0].contains("error"));
  EXPECT_TRUE(j["devices"][0].contains("verdict"));
  const auto& d = j["devices"][1];
  EXPECT_EQ(d["ordinal"], 1);
  EXPECT_EQ(d["name"], "NVIDIA H200") << "what was read before the failure is kept";
  EXPECT_EQ(d["error"]["step"], "identity");
  EXPECT_EQ(d["error"]["api"], "cuDeviceGetPCIBusId");
  EXPECT_EQ(d["error"]["result"], "CUDA_ERROR_UNKNOWN");
  EXPECT_EQ(d["error"]["result_code"], 999);
  EXPECT_EQ(j["p2p"]["links"].size(), 2u) << "the sections after the failing device still run";
  EXPECT_EQ(j["exit_code"], 1);
  // Another step, another name; the text form says it too.
  const ProbeRun retain = run_probe(fake_env("discrete") + " DRVSHIM_FAKE_FAIL=cuDevicePrimaryCtxRetain:1:2", "--json");
  EXPECT_EQ(nlohmann::json::parse(retain.out)["devices"][0]["error"]["step"], "retain primary context");
  const ProbeRun text = run_probe(fake_env("dual") + " DRVSHIM_FAKE_FAIL=cuDeviceGetPCIBusId:2:999", "");
  EXPECT_EQ(text.code, 1);
  EXPECT_NE(text.out.find("failed at step \"identity\": cuDeviceGetPCIBusId failed"), std::string::npos) << text.out;
}

TEST(Probe, BandwidthOnTwoDevicesKeepsEveryDevicesRowsWithItsOrdinal) {
  // Before: the top-level "bandwidth" held the last device's rows only, without an ordinal.
  const auto j = probe_json("dual", 0, "--bandwidth --p2p-size 1");
  ASSERT_EQ(j["bandwidth"].size(), 14u) << j["bandwidth"].dump();
  for (std::size_t i = 0; i < 14; ++i) {
    EXPECT_EQ(j["bandwidth"][i]["device"], i < 7 ? 0 : 1) << i;
    EXPECT_TRUE(j["bandwidth"][i].contains("gb_per_s")) << j["bandwidth"][i].dump();
  }
  EXPECT_EQ(j["bandwidth"][13]["direction"], "kernel reads mapped");
  for (std::size_t d = 0; d < 2; ++d) {
    ASSERT_EQ(j["devices"][d]["bandwidth"].size(), 7u);
    EXPECT_EQ(j["devices"][d]["bandwidth"][0]["device"], d);
  }
}

// One-way access (1 -> 0 refused, 0 -> 1 allowed): the direction that works
// is measured, the refused one and the two-way measurement are reported as
// skipped, and nothing is an error.
TEST(Probe, OneWayPeerAccessIsMeasuredWhereItWorks) {
  const auto j = probe_json("oneway", 0, "--bandwidth --p2p-size 1");
  EXPECT_EQ(j["peer_access"][0][1], true);
  EXPECT_EQ(j["peer_access"][1][0], false);
  const auto& b = j["p2p"]["bandwidth"];
  EXPECT_TRUE(b["errors"].empty()) << b["errors"].dump();
  EXPECT_GT(b["unidirectional_gb_per_s"][0][1].get<double>(), 0.0);
  EXPECT_GT(b["latency_us"][0][1].get<double>(), 0.0);
  EXPECT_TRUE(b["unidirectional_gb_per_s"][1][0].is_null());
  EXPECT_TRUE(b["bidirectional_gb_per_s"][0][1].is_null());
  ASSERT_EQ(b["skipped"].size(), 2u) << b["skipped"].dump();
  EXPECT_NE(b["skipped"].dump().find("bidirectional"), std::string::npos) << b["skipped"].dump();
}

TEST(Probe, TwoDevicesHaveALinkSectionAndP2PMatrices) {
  const auto j = probe_json("dual", 0, "--bandwidth --p2p-size 1");
  ASSERT_EQ(j["p2p"]["links"].size(), 2u);
  const auto& l = j["p2p"]["links"][0];
  EXPECT_EQ(l["from"], 0);
  EXPECT_EQ(l["to"], 1);
  EXPECT_EQ(l["access"], true);
  EXPECT_EQ(l["access_supported"], 1);
  EXPECT_EQ(l["native_atomic_supported"], 1);
  EXPECT_EQ(l["cuda_array_access_supported"], 1);
  EXPECT_EQ(l["performance_rank"], 0);
  const auto& b = j["p2p"]["bandwidth"];
  EXPECT_EQ(b["bytes"], 1 << 20);
  EXPECT_EQ(b["copies"], 16);
  EXPECT_EQ(b["latched"], true);
  for (const char* m : {"unidirectional_gb_per_s", "bidirectional_gb_per_s", "latency_us"}) {
    ASSERT_EQ(b[m].size(), 2u) << m;
    EXPECT_TRUE(b[m][0][0].is_null()) << m;
    EXPECT_TRUE(b[m][1][1].is_null()) << m;
    EXPECT_GT(b[m][0][1].get<double>(), 0.0) << m;
    EXPECT_GT(b[m][1][0].get<double>(), 0.0) << m;
  }
  EXPECT_TRUE(b["skipped"].empty());
  EXPECT_TRUE(b["errors"].empty()) << b["errors"].dump();
  const ProbeRun text = run_probe(fake_env("dual"), "--bandwidth --p2p-size 1");
  EXPECT_EQ(text.code, 0);
  EXPECT_NE(text.out.find("P2P bandwidth, copy engine: 1 MiB x 16 copies, median of 3"), std::string::npos) << text.out;
  EXPECT_NE(text.out.find("latency (us per 4-byte copy)"), std::string::npos);
  EXPECT_NE(text.out.find("  [1]  D2H"), std::string::npos) << "host rows carry the device";
}

TEST(Probe, ALinkWithoutPeerToPeerIsShownAndNotMeasured) {
  const auto j = probe_json("trio", 0, "--bandwidth --p2p-size 1");
  ASSERT_EQ(j["p2p"]["links"].size(), 6u);
  for (const auto& l : j["p2p"]["links"]) {
    const bool expected = l["from"] != 2 && l["to"] != 2;
    EXPECT_EQ(l["access"], expected) << l.dump();
    EXPECT_EQ(l["access_supported"], expected ? 1 : 0) << l.dump();
  }
  EXPECT_EQ(j["peer_access"][0][2], false);
  EXPECT_EQ(j["peer_access"][2][0], false);
  EXPECT_EQ(j["peer_access"][0][1], true);
  const auto& b = j["p2p"]["bandwidth"];
  EXPECT_EQ(b["skipped"].size(), 4u);
  EXPECT_TRUE(b["unidirectional_gb_per_s"][0][2].is_null());
  EXPECT_TRUE(b["unidirectional_gb_per_s"][2][1].is_null());
  EXPECT_GT(b["unidirectional_gb_per_s"][1][0].get<double>(), 0.0);
  // --device limits the links to the pairs that involve it.
  const auto one = probe_json("trio", 0, "--device 2");
  EXPECT_EQ(one["devices"].size(), 1u);
  EXPECT_EQ(one["p2p"]["links"].size(), 4u);
}

TEST(Probe, BadDeviceArgumentsSayWhatIsAcceptedAndJsonStaysJson) {
  // Before: "--device: Value -1 not in range 0.000000 to 1.797e308" and, with --json, no JSON at all.
  const ProbeRun negative = run_probe(fake_env("dual"), "--device -1", true);
  EXPECT_EQ(negative.code, 1);
  EXPECT_NE(negative.out.find("--device -1: not a device ordinal; give 0 for the first device"), std::string::npos)
      << negative.out;
  EXPECT_EQ(negative.out.find("1.797e308"), std::string::npos) << negative.out;
  for (const char* args : {"--json --device -1", "--json --device abc", "--json --no-such-flag"}) {
    const ProbeRun run = run_probe(fake_env("dual"), args);
    EXPECT_EQ(run.code, 1) << args;
    const auto j = nlohmann::json::parse(run.out);
    EXPECT_EQ(j["schema"], "drvshim-probe/1") << args;
    EXPECT_EQ(j["error"]["step"], "arguments") << args;
    EXPECT_EQ(j["exit_code"], 1) << args;
  }
  const auto j = probe_json("dual", 1, "--device 5");
  EXPECT_EQ(j["error"]["step"], "arguments");
  EXPECT_EQ(j["error"]["detail"], "--device 5: the driver reports 2 device(s), ordinals 0 to 1");
  EXPECT_EQ(j["loader"]["status"], "ok") << "what was learnt before the bad ordinal is still reported";
  EXPECT_FALSE(j.contains("devices"));
}

}  // namespace

TEST(Probe, AFailedBandwidthRunIsTheDevicesErrorAndTheArrayStaysAnArray) {
  // Before: "bandwidth" became the failure object, with exit code 0 and nothing in the text.
  const std::string env = fake_env("discrete") + " DRVSHIM_FAKE_FAIL=cuMemAlloc:2:2";
  const ProbeRun run = run_probe(env, "--json --bandwidth");
  EXPECT_EQ(run.code, 1) << run.out;
  const auto j = nlohmann::json::parse(run.out);
  ASSERT_EQ(j["devices"].size(), 1u);
  const auto& d = j["devices"][0];
  ASSERT_TRUE(d["bandwidth"].is_array()) << d.dump();
  EXPECT_TRUE(d["bandwidth"].empty());
  ASSERT_TRUE(d.contains("error")) << d.dump();
  EXPECT_EQ(d["error"]["step"], "bandwidth");
  EXPECT_EQ(d["error"]["result"], "CUDA_ERROR_OUT_OF_MEMORY") << d.dump();
  const ProbeRun text = run_probe(env, "--bandwidth");
  EXPECT_EQ(text.code, 1);
  EXPECT_NE(text.out.find("failed at step \"bandwidth\""), std::string::npos) << text.out;
}

TEST(Probe, AReportThatCannotBeWrittenIsAFailure) {
  // Before: with standard output closed the report went into the trace file (which took
  // descriptor 1); on /dev/full the probe exited 0.
  char path[] = "/tmp/drvshim_probe_closed_XXXXXX";
  close(mkstemp(path));
  // Standard error to the pipe first, then standard output closed ('#' ends the command before
  // run_probe's own redirection of standard error).
  const ProbeRun closed = run_probe(fake_env("discrete"), std::string("--json --trace ") + path + " 2>&1 >&- #");
  EXPECT_EQ(closed.code, 1);
  EXPECT_NE(closed.out.find("standard output is closed"), std::string::npos) << closed.out;
  std::FILE* f = std::fopen(path, "r");
  ASSERT_NE(f, nullptr);
  char first[64] = {};
  const bool any = std::fgets(first, sizeof first, f) != nullptr;
  std::fclose(f);
  std::remove(path);
  EXPECT_TRUE(!any || std::string(first).rfind("{\"seq\":", 0) == 0) << first;
  const ProbeRun full = run_probe(fake_env("discrete"), "--json 2>&1 >/dev/full #");
  EXPECT_EQ(full.code, 1);
  EXPECT_NE(full.out.find("writing the report to standard output failed"), std::string::npos) << full.out;
}

TEST(Probe, EdgeCasesOfInitDeviceAndAClosedPipe) {
  // A cuInit failure other than "no device": exit 1 with the error object naming the step.
  const ProbeRun init = run_probe(fake_env("discrete") + " DRVSHIM_FAKE_FAIL=cuInit:1:999", "--json");
  EXPECT_EQ(init.code, 1) << init.out;
  const auto j = nlohmann::json::parse(init.out);
  ASSERT_TRUE(j.contains("error")) << j.dump();
  EXPECT_EQ(j["error"]["step"], "cuInit");
  // An empty --device is refused, not taken for every device.
  const ProbeRun empty = run_probe(fake_env("dual"), "--json --device ''");
  EXPECT_EQ(empty.code, 1) << empty.out;
  EXPECT_NE(empty.out.find("not a device ordinal"), std::string::npos) << empty.out;
  // A reader that is gone before the report is written (`| true`; `| head -1` when the report
  // outgrows the pipe): no SIGPIPE death (exit 141), no complaint.
  const std::string cmd =
      "bash -c '" + fake_env("discrete") + " " DRVSHIM_TEST_PROBE " --bandwidth | true; echo status=${PIPESTATUS[0]}'";
  std::FILE* p = popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  char buf[256] = {};
  std::string out;
  while (std::fgets(buf, sizeof buf, p) != nullptr) out += buf;
  pclose(p);
  EXPECT_NE(out.find("status=0"), std::string::npos) << out;
}
