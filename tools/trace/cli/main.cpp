// SPDX-License-Identifier: Apache-2.0
// drvshim-trace: runs a program with every driver call traced, then explains
// the context-creation order it saw (timeline, summary, diagnostics) and
// writes the trace as JSON lines and as Chrome/Perfetto JSON.
//
//   drvshim-trace [options] -- PROGRAM [ARGS...]
//   drvshim-trace --json out.jsonl --chrome out.json -- python3 train.py
//   drvshim-trace --analyse out.jsonl            (a recorded trace, nothing run)
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>
#include <CLI/CLI.hpp>
#include <drvshim_trace/chrome_trace.hpp>
#include <drvshim_trace/model.hpp>
#include <drvshim_trace/records_io.hpp>
#include <drvshim_trace/report.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <vector>

#include "driver_search.hpp"
#include "env.hpp"
#include "traced_process.hpp"

namespace fs = std::filesystem;
using namespace drvshim;

namespace {

bool write_all(int fd, const char* data, std::size_t size) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    data += n;
    size -= static_cast<std::size_t>(n);
  }
  return true;
}

// Puts the file's content on `fd`; false with errno set when that failed.
using Fill = std::function<bool(int fd)>;

// Writes `path` without following it when it is a symbolic link: the content goes into a new
// file in the same directory, renamed over `path` (which replaces a link, not its target). A
// new file gets 0666 minus the umask, as before; a regular file replaced keeps its permissions.
// Special files (a FIFO, /dev/null) and the links of /dev and /proc (/dev/stdout, /proc/self/fd/N)
// are written in place, appended to.
bool write_output(const std::string& path, const Fill& fill, std::string& why) {
  const auto failed = [&](int err) {
    why = fmt::format("cannot write \"{}\": {}", path, std::strerror(err));
    return false;
  };
  struct stat st {};
  const bool exists = ::lstat(path.c_str(), &st) == 0;
  const bool system_link = S_ISLNK(st.st_mode) && (path.rfind("/dev/", 0) == 0 || path.rfind("/proc/", 0) == 0);
  const bool special =
      exists && (system_link || (!S_ISREG(st.st_mode) && !S_ISLNK(st.st_mode) && !S_ISDIR(st.st_mode)));
  const auto in_place = [&](int flags) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CLOEXEC | O_NOCTTY | flags);
    if (fd < 0) return failed(errno);
    const bool ok = fill(fd);
    const int err = errno;
    if (::close(fd) != 0 && ok) return failed(errno);
    return ok ? true : failed(err);
  };
  if (special) return in_place(O_APPEND);
  const auto slash = path.rfind('/');
  const std::string dir = slash == std::string::npos ? "." : slash == 0 ? "/" : path.substr(0, slash);
  std::string temp = dir + (dir.back() == '/' ? "" : "/") + ".drvshim-trace-XXXXXX";
  const int fd = ::mkostemp(temp.data(), O_CLOEXEC);
  if (fd < 0) {
    // A directory where no file can be created: a regular file in it is written in place (not a link).
    if (exists && S_ISREG(st.st_mode)) return in_place(O_TRUNC | O_NOFOLLOW);
    return failed(errno);
  }
  const mode_t mask = ::umask(0);
  ::umask(mask);
  const mode_t mode = exists && S_ISREG(st.st_mode) ? (st.st_mode & 0777) : (0666 & ~mask);
  bool ok = ::fchmod(fd, mode) == 0 && fill(fd);
  int err = errno;
  if (::close(fd) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && ::rename(temp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    ::unlink(temp.c_str());
    return failed(err);
  }
  return true;
}

bool write_file(const std::string& path, const std::string& text, std::string& why) {
  return write_output(
      path, [&](int fd) { return write_all(fd, text.data(), text.size()); }, why);
}

// A copy of `from` (nothing when it does not exist: no process wrote to the trace).
bool copy_trace(const std::string& from, const std::string& to, std::string& why) {
  const int in = ::open(from.c_str(), O_RDONLY | O_CLOEXEC);
  if (in < 0 && errno != ENOENT) {
    why = fmt::format("cannot read \"{}\": {}", from, std::strerror(errno));
    return false;
  }
  const bool ok = write_output(
      to,
      [&](int fd) {
        if (in < 0) return true;
        std::vector<char> buf(std::size_t{1} << 20);
        for (;;) {
          const ssize_t n = ::read(in, buf.data(), buf.size());
          if (n < 0 && errno == EINTR) continue;
          if (n < 0) return false;
          if (n == 0) return true;
          if (!write_all(fd, buf.data(), static_cast<std::size_t>(n))) return false;
        }
      },
      why);
  if (in >= 0) ::close(in);
  return ok;
}

// The private directory for the trace, absolute: every traced process opens the trace by this
// path from its own current directory.
std::string temp_dir() {
  const char* env = drvshim::detail::env::value("TMPDIR");
  std::string base = env != nullptr && *env != '\0' ? env : "/tmp";
  if (base.front() != '/') {
    std::error_code ec;
    const fs::path absolute = fs::absolute(base, ec);
    if (!ec) base = absolute.string();
  }
  std::string tmpl = base + "/drvshim-trace.XXXXXX";
  return ::mkdtemp(tmpl.data()) != nullptr ? tmpl : std::string();
}

}  // namespace

// Why `path` cannot take an output file ("" when it can): a directory, a missing or
// unwritable parent directory.
static std::string output_problem(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) == 0) {
    if (S_ISDIR(st.st_mode)) return fmt::format("cannot write \"{}\": it is a directory (give a file name)", path);
    if (!S_ISREG(st.st_mode)) return {};  // /dev/stdout, a FIFO: written in place
  }
  const fs::path parent = fs::path(path).parent_path().empty() ? fs::path(".") : fs::path(path).parent_path();
  std::error_code ec;
  if (!fs::is_directory(parent, ec)) {
    return fmt::format("cannot write \"{}\": the directory \"{}\" does not exist", path, parent.string());
  }
  if (::access(parent.c_str(), W_OK) != 0) {
    return fmt::format("cannot write \"{}\": the directory \"{}\" is not writable ({})", path, parent.string(),
                       std::strerror(errno));
  }
  return {};
}

int main(int argc, char** argv) {
  CLI::App app{"drvshim-trace: trace the CUDA driver calls and context-creation order of any program"};
  std::string json_path, chrome_path, report_path, mode = "full", libcuda, libdir, analyse_path;
  bool no_children = false, no_audit = false, cupti = false, quiet = false;
  std::uint64_t max_size = std::uint64_t{1} << 30;
  std::size_t max_timeline = 2000;
  int grace = 10;
  std::vector<std::string> command;
  app.add_option("--json", json_path, "write the trace (JSON lines, docs/trace-format.md) to FILE");
  app.add_option("--chrome", chrome_path, "write a Chrome trace-event / Perfetto JSON file to FILE");
  app.add_option("--report", report_path, "write the report to FILE instead of stderr (- for stdout)");
  app.add_option("--mode", mode, "full: every call; summary: state-changing calls and errors, the rest counted")
      ->check(CLI::IsMember({"full", "summary"}));
  app.add_flag("--no-children", no_children, "trace only the program, not the processes it starts");
  app.add_flag("--cupti", cupti, "nest driver calls under the Runtime-API call that made them (needs libcupti.so.13)");
  app.add_flag("--no-audit", no_audit, "do not redirect libcuda loaded by absolute path (LD_AUDIT)");
  app.add_option("--libcuda", libcuda, "the real driver (default: DRVSHIM_LIBCUDA, else found as the loader would)");
  app.add_option("--libdir", libdir, "where the interposer libcuda.so.1 and the audit module are");
  app.add_option("--max-size", max_size, "cap of the trace file in bytes (0: none)");
  app.add_option("--max-timeline", max_timeline, "timeline lines per process in the report");
  app.add_option("--wait-children", grace, "seconds to wait for descendants after the program exits");
  app.add_flag("-q,--quiet", quiet, "no report (files only)");
  app.add_option("--analyse", analyse_path, "analyse a recorded JSON-lines trace instead of running a program");
  app.add_option("command", command, "PROGRAM [ARGS...] (after --)");
  // Everything after the first "--" is the program's, untouched; without "--", the
  // first word that is not an option starts the program.
  int own = argc;
  for (int k = 1; k < argc; ++k) {
    if (std::strcmp(argv[k], "--") == 0) {
      own = k;
      break;
    }
  }
  app.prefix_command(own == argc);
  try {
    app.parse(own, argv);
    for (const auto& extra : app.remaining()) command.push_back(extra);
    for (int k = own + 1; k < argc; ++k) command.emplace_back(argv[k]);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  if (command.empty() == analyse_path.empty()) {
    std::fprintf(stderr, "drvshim-trace: give either a program to run (after --) or --analyse FILE\n%s",
                 app.help().c_str());
    return 2;
  }

  // The output files are checked before the program runs: a run is never spent on a trace
  // that could not be kept.
  for (const auto* out : {&json_path, &chrome_path, &report_path}) {
    if (out->empty() || *out == "-") continue;
    if (std::string why = output_problem(*out); !why.empty()) {
      std::fprintf(stderr, "drvshim-trace: %s\n", why.c_str());
      return 2;
    }
  }

  int exit_code = 0;
  std::string trace_file = analyse_path;
  std::string work_dir;
  if (analyse_path.empty()) {
    const std::string dir = trace_tool::library_dir(libdir);
    const std::string interposer = trace_tool::real_path(dir + "/libcuda.so.1");
    const std::string audit = trace_tool::real_path(dir + "/libdrvshim_trace_audit.so");
    if (interposer.empty()) {
      std::fprintf(stderr,
                   "drvshim-trace: the interposer %s/libcuda.so.1 is missing; give its directory with --libdir\n",
                   dir.c_str());
      return 127;
    }
    if (libcuda.empty()) {
      if (const char* env = drvshim::detail::env::value("DRVSHIM_LIBCUDA"); env != nullptr) libcuda = env;
    }
    std::string why;
    const std::string real = trace_tool::find_real_driver(libcuda, interposer, why);
    if (real.empty()) {
      std::fprintf(stderr, "drvshim-trace: %s\n", why.c_str());
      return 127;
    }
    work_dir = temp_dir();
    if (work_dir.empty()) {
      std::fprintf(stderr, "drvshim-trace: cannot create a private directory in $TMPDIR or /tmp: %s\n",
                   std::strerror(errno));
      return 127;
    }
    trace_file = work_dir + "/trace.jsonl";
    trace_tool::LaunchOptions o;
    o.command = command;
    o.trace_path = trace_file;
    o.mode = mode;
    o.children = !no_children;
    o.audit = !no_audit && !audit.empty();
    o.cupti = cupti;
    o.interposer = interposer;
    o.audit_lib = audit;
    o.preload_lib = trace_tool::real_path(dir + "/libdrvshim_trace_preload.so");
    if (o.preload_lib.find_first_of(" :") != std::string::npos) {
      // LD_PRELOAD separates entries by spaces and colons and has no quoting.
      std::fprintf(stderr,
                   "drvshim-trace: the preload library's path \"%s\" contains a space or a colon, which LD_PRELOAD "
                   "cannot carry; records made just before an exec or _exit may be lost (install drvshim-trace under "
                   "a path without them)\n",
                   o.preload_lib.c_str());
      o.preload_lib.clear();
    }
    o.real_driver = real;
    o.max_bytes = max_size;
    o.grace_seconds = grace;
    std::string error;
    exit_code = trace_tool::run_traced(o, error);
    if (!error.empty()) {
      std::fprintf(stderr, "drvshim-trace: %s\n", error.c_str());
      fs::remove_all(work_dir);
      return exit_code;
    }
  }

  constexpr const char* kAccepted = "--analyse takes a trace in JSON lines, as written by --json";
  if (!analyse_path.empty()) {
    struct stat st {};
    if (::stat(analyse_path.c_str(), &st) == 0 && S_ISDIR(st.st_mode)) {
      std::fprintf(stderr, "drvshim-trace: \"%s\" is a directory; %s\n", analyse_path.c_str(), kAccepted);
      return 2;
    }
  }
  std::ifstream in(trace_file);
  if (!in && !analyse_path.empty()) {
    std::fprintf(stderr, "drvshim-trace: cannot read \"%s\": %s\n", trace_file.c_str(), std::strerror(errno));
    return 2;
  }
  auto parsed = trace_analysis::parse_jsonl(in);
  in.close();
  if (!analyse_path.empty() && parsed.records.empty() && parsed.bad_lines > 0) {
    // Not a trace at all (a torn last line of a real one leaves the other records).
    std::string first = parsed.first_error.substr(0, 200);
    for (char& c : first) {
      if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) c = '?';
    }
    std::fprintf(stderr, "drvshim-trace: \"%s\" is not a trace: none of its %zu line(s) is a record (%s); %s\n",
                 analyse_path.c_str(), parsed.bad_lines, first.c_str(), kAccepted);
    return 2;
  }
  int status = exit_code;
  std::string why;
  if (!json_path.empty() && analyse_path.empty() && !copy_trace(trace_file, json_path, why)) {
    std::fprintf(stderr, "drvshim-trace: %s\n", why.c_str());
    status = status != 0 ? status : 2;
  }
  if (!work_dir.empty()) fs::remove_all(work_dir);
  const std::size_t record_count = parsed.records.size();
  const auto analysis = trace_analysis::analyse(std::move(parsed.records));
  if (!chrome_path.empty() && !write_file(chrome_path, trace_analysis::chrome_trace_json(analysis), why)) {
    std::fprintf(stderr, "drvshim-trace: %s\n", why.c_str());
    status = status != 0 ? status : 2;
  }
  if (!quiet) {
    trace_analysis::ReportOptions ro;
    ro.max_timeline_lines = max_timeline;
    std::string report = trace_analysis::format_report(analysis, ro);
    report += fmt::format("drvshim-trace: {} record(s) from {} process(es), {} diagnostic(s){}\n", record_count,
                          analysis.processes.size(), analysis.diagnostics.size(),
                          parsed.bad_lines > 0
                              ? fmt::format("; {} unreadable line(s), first: {}", parsed.bad_lines, parsed.first_error)
                              : "");
    if (report_path.empty()) {
      std::fputs(report.c_str(), stderr);
    } else if (report_path == "-") {
      std::fputs(report.c_str(), stdout);
    } else if (!write_file(report_path, report, why)) {
      std::fprintf(stderr, "drvshim-trace: %s\n", why.c_str());
      status = status != 0 ? status : 2;
    }
  }
  return status;
}
