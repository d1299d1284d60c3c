// SPDX-License-Identifier: Apache-2.0
#pragma once
// drvshim-probe's JSON building blocks: the report is built as JSON first and
// the text form is rendered from it (probe_text.hpp), so both always agree.
#include <drvshim/drvshim.hpp>
#include <nlohmann/json.hpp>

#include <cstdint>
#include <exception>
#include <functional>
#include <string>

namespace drvshim_probe {

using nlohmann::ordered_json;

// Milliseconds from nanoseconds, rounded to the microsecond.
double ms(std::int64_t ns);
// "13.0" from 13000.
std::string version_text(int v);
ordered_json attribute_json(const drvshim::AttributeValue& v);
// Runs one live check in isolation: a failure becomes that check's result, never the probe's.
ordered_json run_check(const std::function<ordered_json()>& check);
// {"status": "ok"} with the members of `extra`.
ordered_json ok(ordered_json extra = ordered_json::object());
// What went wrong in one step, as the JSON reports it: the step, the
// message, and for driver errors the API and result.
ordered_json error_json(const std::string& step, const std::exception& e);
// Rewrites every string in `j` so it is UTF-8: bytes that are not are written as \xNN.
void make_utf8_safe(ordered_json& j);
ordered_json state_json(const drvshim::PrimaryContextState& s);

}  // namespace drvshim_probe
