// SPDX-License-Identifier: Apache-2.0
// The environment reader's table: complete, documented, equal to README.md's
// table, and the reads it replaced behaving as documented.
#include <gtest/gtest.h>

#include <array>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>
#include <string>

#include "env.hpp"

namespace env = drvshim::detail::env;

namespace {

const char* group_title(env::Group g) {
  switch (g) {
    case env::Group::library: return "libdrvshim";
    case env::Group::runtime: return "libdrvshim_cudart (runtime_compat)";
    case env::Group::trace: return "drvshim-trace (set by the tool for the program it traces)";
    case env::Group::fake: return "the fake driver (libdrvshim_fakecuda.so)";
    case env::Group::scripts: return "the build and GPU scripts (tools/)";
    case env::Group::system: return "other programs' variables drvshim reads";
  }
  return "?";
}

// README.md's table, as the table says it should be.
std::string expected_readme_table() {
  std::ostringstream out;
  bool first = true;
  for (env::Group g : {env::Group::library, env::Group::runtime, env::Group::trace, env::Group::fake,
                       env::Group::scripts, env::Group::system}) {
    if (!first) out << "\n";
    first = false;
    out << "**" << group_title(g) << "**\n\n| variable | accepts | default | effect |\n|---|---|---|---|\n";
    for (const auto& v : env::variables()) {
      if (v.group != g) continue;
      out << "| `" << v.name << "`" << (v.secure ? " (secure)" : "") << " | " << v.accepts << " | " << v.fallback
          << " | " << v.effect << " |\n";
    }
  }
  return out.str();
}

constexpr const char* kBegin = "<!-- BEGIN environment table";
constexpr const char* kEnd = "<!-- END environment table -->";

// Runs `command` through the shell; its output (stdout and stderr) and exit status.
std::pair<std::string, int> run(const std::string& command) {
  std::string out;
  FILE* p = ::popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return {"popen failed", -1};
  std::array<char, 4096> buf{};
  while (std::fgets(buf.data(), static_cast<int>(buf.size()), p) != nullptr) out += buf.data();
  return {out, ::pclose(p)};
}

std::string self_exe() {
  std::array<char, 4096> buf{};
  const auto n = ::readlink("/proc/self/exe", buf.data(), buf.size() - 1);
  return n > 0 ? std::string(buf.data(), static_cast<std::size_t>(n)) : std::string();
}

}  // namespace

TEST(EnvTable, EveryVariableIsListedOnceWithWhatItAcceptsAndDoes) {
  std::set<std::string> names;
  for (const auto& v : env::variables()) {
    EXPECT_TRUE(names.insert(v.name).second) << v.name << " is listed twice";
    EXPECT_STRNE(v.accepts, "") << v.name;
    EXPECT_STRNE(v.fallback, "") << v.name;
    EXPECT_STRNE(v.effect, "") << v.name;
    EXPECT_EQ(std::string(v.effect).find('|'), std::string::npos) << v.name << ": '|' would break the table";
    EXPECT_EQ(env::find(v.name), &v);
  }
  // The variables the components read (a sample from each) are there.
  for (const char* name : {"DRVSHIM_LIBCUDA", "DRVSHIM_CACHE_DIR", "DRVSHIM_RT_TRACE", "DRVSHIM_TRACE_OUT",
                           "DRVSHIM_FAKE_PROFILE", "NVRTC_APPEND_FLAGS"}) {
    EXPECT_NE(env::find(name), nullptr) << name;
  }
}

TEST(EnvTable, ReadmeTableIsTheReadersTable) {
  std::ifstream in(DRVSHIM_TEST_SOURCE_DIR "/README.md");
  ASSERT_TRUE(in) << "README.md not found under " DRVSHIM_TEST_SOURCE_DIR;
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string readme = ss.str();
  const auto begin = readme.find(kBegin);
  ASSERT_NE(begin, std::string::npos) << "README.md has no \"" << kBegin << "\" marker";
  const auto body = readme.find('\n', begin) + 1;
  const auto end = readme.find(kEnd, body);
  ASSERT_NE(end, std::string::npos) << "README.md has no \"" << kEnd << "\" marker";
  const std::string expected = expected_readme_table();
  EXPECT_EQ(readme.substr(body, end - body), expected)
      << "README.md's environment table differs from common/env_table.hpp; put this between the markers:\n"
      << expected;
}

// A name is checked when the code that reads it compiles (env::Name is
// consteval); the ctest env_name_check shows that a name outside the table
// does not compile.
static_assert(env::index_of("DRVSHIM_LOG") != env::kNotInTheTable);
static_assert(env::index_of("DRVSHIM_NOT_A_VARIABLE") == env::kNotInTheTable);
static_assert(env::Name("DRVSHIM_CACHE_DIR").variable().secure);

TEST(EnvTable, SwitchValuesAreParsedWithoutAllocationAndBadOnesReported) {
  ::setenv("DRVSHIM_TRACE_CHILDREN", "OFF", 1);
  EXPECT_FALSE(env::switch_value("DRVSHIM_TRACE_CHILDREN", true));
  ::setenv("DRVSHIM_TRACE_CHILDREN", "Yes", 1);
  EXPECT_TRUE(env::switch_value("DRVSHIM_TRACE_CHILDREN", false));
  ::unsetenv("DRVSHIM_TRACE_CHILDREN");
  EXPECT_TRUE(env::switch_value("DRVSHIM_TRACE_CHILDREN", true));
  ::setenv("DRVSHIM_TRACE_CHILDREN", "sometimes", 1);
  testing::internal::CaptureStderr();
  EXPECT_TRUE(env::switch_value("DRVSHIM_TRACE_CHILDREN", true));
  const std::string err = testing::internal::GetCapturedStderr();
  ::unsetenv("DRVSHIM_TRACE_CHILDREN");
  EXPECT_NE(err.find("DRVSHIM_TRACE_CHILDREN=\"sometimes\" is not a switch; accepted: 1/true/yes/on"),
            std::string::npos)
      << err;
}

TEST(EnvTable, ValueIsNullWhenUnsetOrEmpty) {
  ::unsetenv("DRVSHIM_SYNC_EACH_OP");
  EXPECT_EQ(env::value("DRVSHIM_SYNC_EACH_OP"), nullptr);
  ::setenv("DRVSHIM_SYNC_EACH_OP", "", 1);
  EXPECT_EQ(env::value("DRVSHIM_SYNC_EACH_OP"), nullptr);
  ::setenv("DRVSHIM_SYNC_EACH_OP", "0", 1);
  EXPECT_STREQ(env::value("DRVSHIM_SYNC_EACH_OP"), "0");
  ::unsetenv("DRVSHIM_SYNC_EACH_OP");
}

// libdrvshim_cudart (linked into this program) reads DRVSHIM_RT_TRACE as it
// loads: a switch like every other, so "off" is off, and a value that is not a
// switch is reported rather than taken as "on".
TEST(EnvTable, RuntimeTraceIsASwitch) {
  const std::string exe = self_exe();
  ASSERT_FALSE(exe.empty());
  const std::string quiet = " --gtest_filter=EnvTable.EveryVariableIsListedOnceWithWhatItAcceptsAndDoes";
  const char* timeline = "driver-call timeline";
  for (const char* off : {"off", "0", "false", "No"}) {
    const auto [out, status] = run(std::string("DRVSHIM_RT_TRACE=") + off + " '" + exe + "'" + quiet);
    EXPECT_EQ(status, 0) << off << ":\n" << out;
    EXPECT_EQ(out.find(timeline), std::string::npos) << "DRVSHIM_RT_TRACE=" << off << " turned tracing on:\n" << out;
  }
  for (const char* on : {"1", "on", "TRUE"}) {
    const auto [out, status] = run(std::string("DRVSHIM_RT_TRACE=") + on + " '" + exe + "'" + quiet);
    EXPECT_EQ(status, 0) << on << ":\n" << out;
    EXPECT_NE(out.find(timeline), std::string::npos) << "DRVSHIM_RT_TRACE=" << on << " did not trace:\n" << out;
  }
  const auto [out, status] = run("DRVSHIM_RT_TRACE=sometimes '" + exe + "'" + quiet);
  EXPECT_EQ(status, 0) << out;
  EXPECT_EQ(out.find(timeline), std::string::npos) << out;
  EXPECT_NE(out.find("DRVSHIM_RT_TRACE=\"sometimes\" is not a switch"), std::string::npos) << out;
}

#ifdef DRVSHIM_TEST_PROBE
// A misspelt profile would otherwise test another machine than the one asked for.
TEST(EnvTable, AnUnknownFakeProfileStopsTheProgramNamingTheProfiles) {
  const auto [out, status] = run(std::string("DRVSHIM_LIBCUDA='") + DRVSHIM_TEST_FAKE_PATH +
                                 "' DRVSHIM_FAKE_PROFILE=duel '" + DRVSHIM_TEST_PROBE + "'");
  EXPECT_NE(status, 0) << out;
  EXPECT_NE(out.find("DRVSHIM_FAKE_PROFILE=\"duel\" is not a profile; accepted: discrete, tx1, dual, oneway, trio"),
            std::string::npos)
      << out;
}

TEST(EnvTable, AComputeCapabilityTheFakeCannotReadStopsTheProgram) {
  for (const char* bad : {"9.0", "abc", "0", "5"}) {
    const auto [out, status] = run(std::string("DRVSHIM_LIBCUDA='") + DRVSHIM_TEST_FAKE_PATH +
                                   "' DRVSHIM_FAKE_CC=" + bad + " '" + DRVSHIM_TEST_PROBE + "'");
    EXPECT_NE(status, 0) << bad << ":\n" << out;
    EXPECT_NE(out.find(std::string("DRVSHIM_FAKE_CC=\"") + bad + "\" is not accepted"), std::string::npos) << out;
  }
  const auto [out, status] = run(std::string("DRVSHIM_LIBCUDA='") + DRVSHIM_TEST_FAKE_PATH + "' DRVSHIM_FAKE_CC=101 '" +
                                 DRVSHIM_TEST_PROBE + "'");
  EXPECT_EQ(status, 0) << out;
  EXPECT_NE(out.find("10.1"), std::string::npos) << out;
}
#endif
