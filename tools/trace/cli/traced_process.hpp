// SPDX-License-Identifier: Apache-2.0
#pragma once
// Running a program under the interposer: the environment that puts
// libcuda.so.1 (the interposer) first, and the process handling (children
// reparented to the tracer so every traced process has finished writing
// before the trace is read).
#include <cstdint>
#include <string>
#include <vector>

namespace drvshim::trace_tool {

struct LaunchOptions {
  std::vector<std::string> command;
  std::string trace_path;  // where every traced process appends its records
  std::string mode;        // full | summary
  bool children = true;    // trace child processes too
  bool audit = true;       // LD_AUDIT module for libcuda loaded by path
  bool cupti = false;
  std::string interposer;   // .../libcuda.so.1
  std::string audit_lib;    // .../libdrvshim_trace_audit.so
  std::string preload_lib;  // .../libdrvshim_trace_preload.so (exec and _exit hooks; "" none)
  std::string real_driver;  // the real libcuda.so.1
  std::uint64_t max_bytes = 0;
  int grace_seconds = 10;  // how long to wait for descendants after the program exits
};

// The program's exit code (128 + signal when it was killed), or 127 with `error` set when it could not start.
// While it runs, SIGTERM, SIGINT, SIGHUP and SIGQUIT sent to the tracer are passed on to it (not those a
// terminal sends to the whole foreground group, which the program gets itself), and it is sent SIGTERM
// if the tracer dies first.
int run_traced(const LaunchOptions& options, std::string& error);

// The directory holding the interposer and the audit module: `override_dir`, else
// lib/ next to this executable (build tree), else ../<libdir>/drvshim (installed).
std::string library_dir(const std::string& override_dir);

// The real driver for the program: `explicit_path`, else as the loader would find it
// (LD_LIBRARY_PATH, ld.so.cache, default directories), never `interposer`. "" with `why` when none.
std::string find_real_driver(const std::string& explicit_path, const std::string& interposer, std::string& why);

}  // namespace drvshim::trace_tool
