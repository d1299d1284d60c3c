// SPDX-License-Identifier: Apache-2.0
#pragma once
// Rendering an analysis for people: the context-state timeline, the summary
// and the diagnostics, as plain text.
#include <drvshim_trace/model.hpp>

#include <string>

namespace drvshim::trace_analysis {

struct ReportOptions {
  bool timeline = true;
  bool summary = true;
  bool diagnostics = true;
  std::size_t max_timeline_lines = 2000;  // per process; the rest is counted
};

std::string format_report(const Analysis& analysis, const ReportOptions& options = {});
std::string format_timeline(const Analysis& analysis, const ProcessInfo& process, std::size_t max_lines);
std::string format_summary(const Analysis& analysis, const ProcessInfo& process);
std::string format_diagnostics(const Analysis& analysis);

}  // namespace drvshim::trace_analysis
