// SPDX-License-Identifier: Apache-2.0
#pragma once
// Reading a trace: JSON lines (docs/trace-format.md) into records.
#include <drvshim_recorder/record.hpp>

#include <istream>
#include <string>
#include <string_view>
#include <vector>

namespace drvshim::trace_analysis {

struct ParsedTrace {
  std::vector<recorder::Record> records;
  std::size_t bad_lines = 0;  // lines that are not a record (a crashed writer's torn tail, say)
  std::string first_error;    // the first bad line's reason, with its line number
};

ParsedTrace parse_jsonl(std::istream& in);
// One line; false (with `why`) when it is not a record.
bool parse_line(std::string_view line, recorder::Record& out, std::string& why);

}  // namespace drvshim::trace_analysis
