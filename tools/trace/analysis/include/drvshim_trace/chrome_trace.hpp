// SPDX-License-Identifier: Apache-2.0
#pragma once
// The Chrome trace-event / Perfetto JSON form of an analysed trace: one
// process per traced process, one track per thread (named), driver and
// Runtime-API calls as complete ("X") slices, context changes and
// initialisation as instant ("i") events, context lifetimes as async
// ("b"/"e") spans, timestamps in microseconds relative to the trace start
// with three decimals (ns exact).
#include <drvshim_trace/model.hpp>

#include <string>

namespace drvshim::trace_analysis {

std::string chrome_trace_json(const Analysis& analysis);

}  // namespace drvshim::trace_analysis
