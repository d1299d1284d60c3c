// SPDX-License-Identifier: Apache-2.0
// drvshim-trace's command line and process handling, end to end against the
// fake driver: signals sent to the tracer, a relative TMPDIR, --analyse on
// what is not a trace, output files that are symbolic links, --no-children
// with the audit module.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>
#include <drvshim_trace/records_io.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

namespace {
namespace cli_tests {

using drvshim::recorder::Kind;
using drvshim::recorder::Record;
namespace fs = std::filesystem;

const std::string kTracer = DRVSHIM_TEST_TRACER;
const std::string kScenarios = DRVSHIM_TEST_SCENARIOS;

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

// A fresh directory for one run.
fs::path fresh_dir(const std::string& name) {
  static int counter = 0;
  const fs::path dir = fs::path(DRVSHIM_TEST_WORK_DIR) / "runs" /
                       ("cli-" + std::to_string(::getpid()) + "-" + std::to_string(++counter) + "-" + name);
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

std::vector<Record> records_in(const std::string& path) {
  std::ifstream in(path);
  return drvshim::trace_analysis::parse_jsonl(in).records;
}

bool has_call(const std::vector<Record>& records, const std::string& api) {
  return std::any_of(records.begin(), records.end(),
                     [&](const Record& r) { return r.kind == Kind::call && r.api == api; });
}

std::size_t count_api(const std::vector<Record>& records, const std::string& api) {
  return static_cast<std::size_t>(
      std::count_if(records.begin(), records.end(), [&](const Record& r) { return r.api == api; }));
}

struct CliRun {
  int code = -1;
  std::string out;
  std::string err;
};

// `prefix TRACER ARGS` through the shell, stdout and stderr kept in `dir`.
CliRun run_shell(const fs::path& dir, const std::string& prefix, const std::string& args) {
  const std::string out = (dir / "out.txt").string();
  const std::string err = (dir / "err.txt").string();
  const std::string cmd = prefix + " " + kTracer + " " + args + " >" + out + " 2>" + err;
  const int status = std::system(cmd.c_str());
  CliRun run;
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = read_text(out);
  run.err = read_text(err);
  return run;
}

// `--analyse PATH`.
CliRun analyse(const fs::path& dir, const std::string& path) { return run_shell(dir, "", "--analyse " + path); }

// The parent pid and state of `pid` from /proc ('\0' when there is no such process).
char proc_state(pid_t pid, pid_t* ppid = nullptr) {
  const std::string stat = read_text("/proc/" + std::to_string(pid) + "/stat");
  const auto paren = stat.rfind(')');
  if (paren == std::string::npos || paren + 2 >= stat.size()) return '\0';
  std::istringstream rest(stat.substr(paren + 2));
  char state = '\0';
  long parent = 0;
  rest >> state >> parent;
  if (ppid != nullptr) *ppid = static_cast<pid_t>(parent);
  return state;
}

// Whether `pid` still runs trace_scenarios (a zombie or a reused pid does not count).
bool program_runs(pid_t pid) {
  const char state = proc_state(pid);
  if (state == '\0' || state == 'Z') return false;
  return read_text("/proc/" + std::to_string(pid) + "/cmdline").find("trace_scenarios") != std::string::npos;
}

// The one child of `parent` (0 when there is none).
pid_t child_of(pid_t parent) {
  for (const auto& entry : fs::directory_iterator("/proc")) {
    const std::string name = entry.path().filename().string();
    if (name.empty() || !std::all_of(name.begin(), name.end(), [](char c) { return c >= '0' && c <= '9'; })) {
      continue;
    }
    const auto pid = static_cast<pid_t>(std::stol(name));
    pid_t ppid = 0;
    if (proc_state(pid, &ppid) != '\0' && ppid == parent) return pid;
  }
  return 0;
}

// waitpid with a deadline: true with `status` set when `pid` ended in time (an orphan that is
// not yet this process's child is waited for too).
bool wait_for(pid_t pid, int& status, std::chrono::milliseconds limit) {
  const auto deadline = std::chrono::steady_clock::now() + limit;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) return true;
    if ((r < 0 && errno != ECHILD) || std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

// drvshim-trace started in the background (its own process group), its stdout on a pipe.
struct Background {
  pid_t tracer = -1;
  int out = -1;  // the read end: the program's stdout
  pid_t program = 0;
  std::string seen;

  Background(const fs::path& dir, const std::vector<std::string>& args) {
    std::vector<std::string> words = {kTracer, "--libcuda", DRVSHIM_TEST_FAKE_PATH};
    words.insert(words.end(), args.begin(), args.end());
    std::vector<char*> argv;
    for (auto& w : words) argv.push_back(w.data());
    argv.push_back(nullptr);
    const std::string err = (dir / "err.txt").string();
    int fds[2];
    if (::pipe2(fds, O_CLOEXEC) != 0) return;
    tracer = ::fork();
    if (tracer == 0) {
      ::setpgid(0, 0);
      const int e = ::open(err.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (e < 0 || ::dup2(fds[1], 1) < 0 || ::dup2(e, 2) < 0) ::_exit(126);
      if (e != 2) ::close(e);
      ::execv(argv[0], argv.data());
      ::_exit(127);
    }
    ::close(fds[1]);
    out = fds[0];
  }
  Background(const Background&) = delete;
  Background& operator=(const Background&) = delete;
  ~Background() {
    int status = 0;
    if (tracer > 0 && ::waitpid(tracer, &status, WNOHANG) == 0) {
      ::kill(tracer, SIGKILL);
      ::waitpid(tracer, &status, 0);
    }
    if (program > 0 && program_runs(program)) ::kill(program, SIGKILL);
    if (out >= 0) ::close(out);
  }

  // Waits for the program's "ready", then finds its pid (the tracer's one child).
  bool ready(std::chrono::milliseconds limit = std::chrono::seconds(30)) {
    const auto deadline = std::chrono::steady_clock::now() + limit;
    while (seen.find("ready\n") == std::string::npos) {
      const auto left =
          std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0 || out < 0) return false;
      pollfd p{out, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      char buf[256];
      const ssize_t n = ::read(out, buf, sizeof buf);
      if (n <= 0) return false;  // the tracer ended first
      seen.append(buf, static_cast<std::size_t>(n));
    }
    program = child_of(tracer);
    return program > 0;
  }
};

// Clears the child-subreaper attribute of the test process again.
struct Subreaper {
  Subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 1); }
  Subreaper(const Subreaper&) = delete;
  Subreaper& operator=(const Subreaper&) = delete;
  ~Subreaper() { ::prctl(PR_SET_CHILD_SUBREAPER, 0); }
};

// ---- signals -----------------------------------------------------------------------------

TEST(TracerCli, ASignalSentToTheTracerEndsTheProgramAndTheTraceIsStillWritten) {
  for (const int sig : {SIGTERM, SIGHUP, SIGINT}) {
    SCOPED_TRACE(::strsignal(sig));
    const fs::path dir = fresh_dir("signal");
    const std::string json = (dir / "trace.jsonl").string();
    const std::string report = (dir / "report.txt").string();
    Background bg(dir, {"--json", json, "--report", report, "--", kScenarios, "sleep"});
    ASSERT_GT(bg.tracer, 0);
    ASSERT_TRUE(bg.ready()) << bg.seen << read_text((dir / "err.txt").string());
    ASSERT_TRUE(program_runs(bg.program));
    ASSERT_EQ(::kill(bg.tracer, sig), 0);
    int status = 0;
    ASSERT_TRUE(wait_for(bg.tracer, status, std::chrono::seconds(10))) << "the tracer is still running";
    bg.tracer = -1;
    ASSERT_TRUE(WIFEXITED(status)) << "the tracer was killed by signal " << WTERMSIG(status);
    EXPECT_EQ(WEXITSTATUS(status), 128 + sig) << "the program's status";
    EXPECT_FALSE(program_runs(bg.program)) << "the program outlived the tracer";
    EXPECT_TRUE(has_call(records_in(json), "cuInit")) << read_text(json);
    EXPECT_NE(read_text(report).find("record(s) from 1 process(es)"), std::string::npos) << read_text(report);
  }
}

TEST(TracerCli, AnInterruptToTheWholeGroupLeavesTheTracerToWriteTheTrace) {
  // As a terminal's Ctrl-C, sent by a process: the program and the tracer both get it.
  const fs::path dir = fresh_dir("group");
  const std::string json = (dir / "trace.jsonl").string();
  Background bg(dir, {"--json", json, "-q", "--", kScenarios, "sleep"});
  ASSERT_GT(bg.tracer, 0);
  ASSERT_TRUE(bg.ready()) << bg.seen << read_text((dir / "err.txt").string());
  ASSERT_EQ(::kill(-bg.tracer, SIGINT), 0);
  int status = 0;
  ASSERT_TRUE(wait_for(bg.tracer, status, std::chrono::seconds(10)));
  bg.tracer = -1;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT);
  EXPECT_TRUE(has_call(records_in(json), "cuInit")) << read_text(json) << read_text((dir / "err.txt").string());
}

// Two copies of SIGINT, the second while the first one's handler waits for the trace to be
// written (as a group kill and the tracer's forward can arrive), with another thread that
// does not block SIGINT: the records are written before the program ends.
TEST(TracerCli, ASecondInterruptDuringTheDrainDoesNotLoseTheRecords) {
  const fs::path dir = fresh_dir("twice");
  const std::string json = (dir / "trace.jsonl").string();
  Background bg(dir, {"--json", json, "-q", "--", kScenarios, "interrupt-twice"});
  ASSERT_GT(bg.tracer, 0);
  ASSERT_TRUE(bg.ready()) << bg.seen << read_text((dir / "err.txt").string());
  int status = 0;
  ASSERT_TRUE(wait_for(bg.tracer, status, std::chrono::seconds(20)));
  bg.tracer = -1;
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 128 + SIGINT) << read_text((dir / "err.txt").string());
  const std::string text = read_text(json);
  EXPECT_TRUE(has_call(records_in(json), "cuInit")) << text;
  EXPECT_NE(text.find("reason=signal 2"), std::string::npos) << text;
}

TEST(TracerCli, TheProgramDoesNotOutliveAKilledTracer) {
  const fs::path dir = fresh_dir("sigkill");
  const Subreaper reaper;  // the orphaned program comes to this process, which can see how it ended
  Background bg(dir, {"-q", "--", kScenarios, "sleep"});
  ASSERT_GT(bg.tracer, 0);
  ASSERT_TRUE(bg.ready()) << bg.seen << read_text((dir / "err.txt").string());
  ASSERT_EQ(::kill(bg.tracer, SIGKILL), 0);
  int status = 0;
  ASSERT_TRUE(wait_for(bg.tracer, status, std::chrono::seconds(10)));
  bg.tracer = -1;
  int program_status = 0;
  const bool ended = wait_for(bg.program, program_status, std::chrono::seconds(10));
  if (!ended) {
    ::kill(bg.program, SIGKILL);
    ::waitpid(bg.program, &program_status, 0);
  }
  bg.program = 0;
  ASSERT_TRUE(ended) << "the program still ran 10 s after the tracer was killed";
  ASSERT_TRUE(WIFSIGNALED(program_status));
  EXPECT_EQ(WTERMSIG(program_status), SIGTERM);
}

// ---- the private directory -------------------------------------------------------------------

TEST(TracerCli, ARelativeTmpdirStillWorksAfterTheProgramChangesDirectory) {
  const fs::path dir = fresh_dir("tmpdir");
  fs::create_directories(dir / "rel");
  const std::string json = (dir / "trace.jsonl").string();
  const CliRun run = run_shell(
      dir, "cd " + dir.string() + " && TMPDIR=rel",
      "--libcuda " DRVSHIM_TEST_FAKE_PATH " --json " + json + " -q -- sh -c 'cd / && exec " + kScenarios + " basic'");
  ASSERT_EQ(run.code, 0) << run.err;
  EXPECT_EQ(run.err.find("not traced"), std::string::npos) << run.err;
  EXPECT_TRUE(has_call(records_in(json), "cuInit")) << read_text(json);
  EXPECT_TRUE(fs::is_empty(dir / "rel")) << "the private directory is removed";
}

// ---- --analyse -------------------------------------------------------------------------

TEST(TracerCli, AnalysingADirectoryIsAnError) {
  const fs::path dir = fresh_dir("analyse-dir");
  const CliRun run = analyse(dir, dir.string());
  EXPECT_EQ(run.code, 2) << run.err;
  EXPECT_NE(run.err.find("\"" + dir.string() + "\" is a directory"), std::string::npos) << run.err;
  EXPECT_NE(run.err.find("JSON lines"), std::string::npos) << run.err;
  EXPECT_EQ(run.err.find("0 record(s)"), std::string::npos) << run.err;
}

TEST(TracerCli, AnalysingAFileThatIsNoTraceIsAnError) {
  const fs::path dir = fresh_dir("analyse-binary");
  // A binary (the scenarios program itself), and a text file with no record in it.
  const std::string text = (dir / "notes.txt").string();
  write_text(text, "hello\nworld\n");
  for (const std::string& path : {kScenarios, text}) {
    SCOPED_TRACE(path);
    const CliRun run = analyse(dir, path);
    EXPECT_EQ(run.code, 2) << run.err;
    EXPECT_NE(run.err.find("\"" + path + "\" is not a trace"), std::string::npos) << run.err;
    EXPECT_NE(run.err.find("JSON lines"), std::string::npos) << run.err;
    EXPECT_EQ(run.err.find("0 record(s)"), std::string::npos) << run.err;
  }
}

TEST(TracerCli, AnalysingAnEmptyTraceOrOneWithATornTailWorks) {
  const fs::path dir = fresh_dir("analyse-ok");
  const std::string empty = (dir / "empty.jsonl").string();
  write_text(empty, "");
  const CliRun none = analyse(dir, empty);
  EXPECT_EQ(none.code, 0) << none.err;
  EXPECT_NE(none.err.find("0 record(s)"), std::string::npos) << none.err;
  // A real trace whose last line was torn (a writer killed mid-line).
  const std::string json = (dir / "trace.jsonl").string();
  const CliRun traced =
      run_shell(dir, "", "--libcuda " DRVSHIM_TEST_FAKE_PATH " --json " + json + " -q -- " + kScenarios + " basic");
  ASSERT_EQ(traced.code, 0) << traced.err;
  { std::ofstream(json, std::ios::app) << "{\"seq\":1,\"ts_"; }
  const CliRun torn = analyse(dir, json);
  EXPECT_EQ(torn.code, 0) << torn.err;
  EXPECT_NE(torn.err.find("1 unreadable line(s)"), std::string::npos) << torn.err;
}

// ---- output files ------------------------------------------------------------------------

TEST(TracerCli, AnOutputPathThatCannotBeWrittenIsRefusedBeforeTheProgramRuns) {
  const fs::path dir = fresh_dir("unwritable");
  fs::create_directories(dir / "adir");
  const std::string marker = (dir / "ran").string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {(dir / "adir").string(), "it is a directory"},
      {(dir / "missing" / "x.jsonl").string(), "does not exist"},
  };
  for (const auto& [out, why] : cases) {
    SCOPED_TRACE(out);
    const CliRun run = run_shell(
        dir, "", "--libcuda " DRVSHIM_TEST_FAKE_PATH " -q --json " + out + " -- sh -c 'touch " + marker + "'");
    EXPECT_EQ(run.code, 2);
    EXPECT_NE(run.err.find(why), std::string::npos) << run.err;
    EXPECT_FALSE(fs::exists(marker)) << "the program ran although its trace could not be kept";
  }
}

TEST(TracerCli, OutputFilesReplaceASymbolicLinkNotItsTarget) {
  const fs::path dir = fresh_dir("symlink");
  const std::vector<std::string> names = {"out.json", "chrome.json", "report.txt"};
  for (const auto& name : names) {
    const std::string target = (dir / (name + ".target")).string();
    write_text(target, "x");
    ASSERT_EQ(::chmod(target.c_str(), 0600), 0);
    fs::create_symlink(target, dir / name);
  }
  // An existing regular file keeps its permissions; a new one gets 0666 minus the umask.
  const std::string kept = (dir / "kept.json").string();
  write_text(kept, "old");
  ASSERT_EQ(::chmod(kept.c_str(), 0600), 0);
  const mode_t old_mask = ::umask(022);
  const CliRun run = run_shell(dir, "",
                               "--libcuda " DRVSHIM_TEST_FAKE_PATH " --json " + (dir / "out.json").string() +
                                   " --chrome " + (dir / "chrome.json").string() + " --report " +
                                   (dir / "report.txt").string() + " -- " + kScenarios + " basic");
  const CliRun again =
      run_shell(dir, "", "--libcuda " DRVSHIM_TEST_FAKE_PATH " --json " + kept + " -q -- " + kScenarios + " basic");
  ::umask(old_mask);
  ASSERT_EQ(run.code, 0) << run.err;
  ASSERT_EQ(again.code, 0) << again.err;
  for (const auto& name : names) {
    SCOPED_TRACE(name);
    const std::string target = (dir / (name + ".target")).string();
    EXPECT_EQ(read_text(target), "x") << "the link's target was written";
    struct stat st {};
    ASSERT_EQ(::lstat(target.c_str(), &st), 0);
    EXPECT_EQ(st.st_mode & 07777, 0600u) << "the link's target changed its mode";
    ASSERT_EQ(::lstat((dir / name).c_str(), &st), 0);
    EXPECT_TRUE(S_ISREG(st.st_mode)) << "the link itself is replaced by the file";
    EXPECT_EQ(st.st_mode & 07777, 0644u);
  }
  EXPECT_TRUE(has_call(records_in((dir / "out.json").string()), "cuInit"));
  EXPECT_TRUE(nlohmann::json::parse(read_text((dir / "chrome.json").string()), nullptr, false).contains("traceEvents"));
  EXPECT_NE(read_text((dir / "report.txt").string()).find("record(s) from 1 process(es)"), std::string::npos);
  struct stat st {};
  ASSERT_EQ(::stat(kept.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0600u);
  EXPECT_TRUE(has_call(records_in(kept), "cuInit"));
  for (const auto& entry : fs::directory_iterator(dir)) {
    EXPECT_NE(entry.path().filename().string().rfind(".drvshim-trace-", 0), 0u) << "left behind: " << entry.path();
  }
}

// ---- child processes -------------------------------------------------------------------------

TEST(TracerCli, NoChildrenAlsoKeepsTheAuditModulesRecordsOutOfTheTrace) {
  // The root is sh; its child trace_scenarios opens the driver by an absolute path (the
  // command after it keeps sh from exec'ing it in its own place).
  const std::string command = "sh -c '" + kScenarios + " absolute-path; status=$?; echo child-done; exit $status'";
  for (const bool children : {true, false}) {
    SCOPED_TRACE(children ? "children traced" : "--no-children");
    const fs::path dir = fresh_dir("no-children");
    const std::string json = (dir / "trace.jsonl").string();
    const CliRun run = run_shell(dir, "",
                                 "--libcuda " DRVSHIM_TEST_FAKE_PATH " --json " + json + " -q " +
                                     (children ? "" : "--no-children ") + "-- " + command);
    ASSERT_EQ(run.code, 0) << run.err;
    EXPECT_NE(run.out.find("redirected=1"), std::string::npos) << "the driver is still redirected\n" << run.out;
    EXPECT_NE(run.out.find("child-done"), std::string::npos) << run.out;
    const auto records = records_in(json);
    if (children) {
      EXPECT_GE(count_api(records, "libcuda-redirected"), 1u) << read_text(json);
    } else {
      EXPECT_EQ(count_api(records, "libcuda-redirected"), 0u) << "a record from the program's child\n"
                                                              << read_text(json);
    }
    EXPECT_EQ(has_call(records, "cuInit"), children) << read_text(json);
  }
}

}  // namespace cli_tests
}  // namespace
