// SPDX-License-Identifier: Apache-2.0
#pragma once
// Running a program under drvshim-trace with the fake driver behind the
// interposer, for the tracer's end-to-end tests: the exit code, the program's
// output, the report, the parsed records, their analysis and the Chrome file.
#include <sys/wait.h>
#include <unistd.h>

#include <drvshim_trace/model.hpp>
#include <drvshim_trace/records_io.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace trace_tests {

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

struct TraceRun {
  int code = -1;
  std::string out;     // the program's stdout
  std::string err;     // stderr (the program's and the tracer's messages)
  std::string report;  // --report
  std::vector<drvshim::recorder::Record> records;
  drvshim::trace_analysis::Analysis analysis;
  nlohmann::json chrome;
  std::size_t bad_lines = 0;
  std::filesystem::path dir;  // where the run's files are
};

// Runs `command` under drvshim-trace (at most 120 s: a hang fails the test, it does not
// stop the run) with the fake, or `libcuda`, behind the interposer.
inline TraceRun trace(const std::vector<std::string>& tracer_args, const std::vector<std::string>& command,
                      const std::string& env = "", const std::string& libcuda = DRVSHIM_TEST_FAKE_PATH) {
  namespace fs = std::filesystem;
  static int counter = 0;
  TraceRun run;
  run.dir = fs::path(DRVSHIM_TEST_WORK_DIR) / "runs" / (std::to_string(::getpid()) + "-" + std::to_string(++counter));
  fs::create_directories(run.dir);
  const std::string json = (run.dir / "trace.jsonl").string();
  const std::string chrome = (run.dir / "trace.json").string();
  const std::string report = (run.dir / "report.txt").string();
  std::string cmd = env + " timeout -s KILL 120 " DRVSHIM_TEST_TRACER " --libcuda " + libcuda + " --json " + json +
                    " --chrome " + chrome + " --report " + report;
  for (const auto& a : tracer_args) cmd += " " + a;
  cmd += " --";
  for (const auto& c : command) cmd += " " + c;
  cmd += " >" + (run.dir / "out.txt").string() + " 2>" + (run.dir / "err.txt").string();
  const int status = std::system(cmd.c_str());
  run.code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.out = slurp((run.dir / "out.txt").string());
  run.err = slurp((run.dir / "err.txt").string());
  run.report = slurp(report);
  std::ifstream in(json);
  auto parsed = drvshim::trace_analysis::parse_jsonl(in);
  run.bad_lines = parsed.bad_lines;
  run.records = parsed.records;
  run.analysis = drvshim::trace_analysis::analyse(std::move(parsed.records));
  if (fs::exists(chrome)) run.chrome = nlohmann::json::parse(slurp(chrome), nullptr, false);
  return run;
}

}  // namespace trace_tests
