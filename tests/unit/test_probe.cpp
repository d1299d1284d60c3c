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

ProbeRun run_probe(const std::string& env, const std::string& args) {
  const std::string cmd = env + " " DRVSHIM_TEST_PROBE " " + args + " 2>/dev/null";
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
            std::string::npos) << verdict;
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

}  // namespace
