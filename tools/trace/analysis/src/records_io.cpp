// SPDX-License-Identifier: Apache-2.0
#include <drvshim_trace/records_io.hpp>

#include <nlohmann/json.hpp>

#include <cstdlib>

namespace drvshim::trace_analysis {
namespace {

std::uintptr_t parse_hex(const std::string& s) {
  return static_cast<std::uintptr_t>(std::strtoull(s.c_str(), nullptr, 16));
}

}  // namespace

bool parse_line(std::string_view line, recorder::Record& r, std::string& why) {
  try {
    const auto j = nlohmann::json::parse(line);
    if (!j.is_object() || !j.contains("kind") || !j.contains("api")) {
      why = "not a trace record (no \"kind\" or \"api\")";
      return false;
    }
    r = {};
    r.seq = j.value("seq", std::uint64_t{0});
    r.ts_ns = j.value("ts_ns", std::int64_t{0});
    r.dur_ns = j.value("dur_ns", std::int64_t{0});
    r.pid = j.value("pid", std::uint32_t{0});
    r.tid = j.value("tid", std::uint64_t{0});
    if (!recorder::parse_kind(j.at("kind").get<std::string>(), r.kind)) {
      why = "unknown kind \"" + j.at("kind").get<std::string>() + "\"";
      return false;
    }
    r.api = j.at("api").get<std::string>();
    r.symbol = j.value("sym", std::string());
    r.args = j.value("args", std::string());
    r.result = j.value("result", 0);
    r.ctx = parse_hex(j.value("ctx", std::string("0x0")));
    r.lib = j.value("lib", std::string());
    r.rt = j.value("rt", std::uint64_t{0});
    r.ns = j.value("ns", std::uint32_t{0});
    r.count = j.value("count", std::uint64_t{0});
    return true;
  } catch (const std::exception& e) {
    why = e.what();
    return false;
  }
}

ParsedTrace parse_jsonl(std::istream& in) {
  ParsedTrace out;
  std::string line;
  std::size_t number = 0;
  while (std::getline(in, line)) {
    ++number;
    if (line.empty()) continue;
    recorder::Record r;
    std::string why;
    if (parse_line(line, r, why)) {
      out.records.push_back(std::move(r));
    } else {
      if (out.bad_lines++ == 0) out.first_error = "line " + std::to_string(number) + ": " + why;
    }
  }
  return out;
}

}  // namespace drvshim::trace_analysis
