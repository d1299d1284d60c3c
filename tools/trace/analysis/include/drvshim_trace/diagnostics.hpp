// SPDX-License-Identifier: Apache-2.0
#pragma once
// The diagnostics: patterns in a record stream that explain a context-order
// problem, each with a one-line explanation and fix (diagnostics.cpp lists them).
#include <drvshim_trace/model.hpp>

namespace drvshim::trace_analysis {

struct DiagnosticKind {
  const char* id;
  const char* explanation;
  const char* fix;
};

// Every kind the analysis can report, in a fixed order (the documentation and the tests list them).
const std::vector<DiagnosticKind>& diagnostic_kinds();

// Appends the diagnostics of `analysis` (called by analyse()).
void find_diagnostics(Analysis& analysis);

}  // namespace drvshim::trace_analysis
