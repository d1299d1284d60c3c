// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the analysis knows of each entry point: its base name and parameter
// names (generated from the toolkit, like the interposer's wrappers), and a
// record's arguments split into values.
#include <drvshim_recorder/record.hpp>

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace drvshim::trace_analysis {

struct ApiInfo {
  std::string_view symbol;
  std::string_view base;
  std::vector<std::string_view> params;
};

// The entry point `symbol` names exactly, or for a base name ("cuMemAlloc")
// the variant an application compiled with this toolkit calls
// (cuMemAlloc_v2); nullptr when unknown.
const ApiInfo* api_info(std::string_view symbol_or_base);
// The entry point a call record describes.
const ApiInfo* api_info(const recorder::Record& record);

// One rendered argument: "0", "0x7f00", "null", "\"text\"", "{...}", or an
// out parameter "->0x55aa" (written value), "->?" (not written).
struct ArgValue {
  std::string text;   // the value as rendered (for out parameters, after "->")
  bool out = false;   // an out parameter
  bool known = true;  // false for "->?" and "{...}"
};

std::vector<ArgValue> split_args(std::string_view args);

// The value of parameter `param` of a call record ("" with nullopt when the
// record's API or the parameter is unknown). Handles compare as text.
std::optional<ArgValue> arg(const recorder::Record& record, std::string_view param);

// The exported variant a call record names: its "sym" (the interposer always
// writes it), else its "api" (the in-process trace records base names).
inline const std::string& symbol_of(const recorder::Record& r) { return r.symbol.empty() ? r.api : r.symbol; }

}  // namespace drvshim::trace_analysis
