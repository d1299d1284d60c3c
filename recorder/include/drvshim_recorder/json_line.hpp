// SPDX-License-Identifier: Apache-2.0
#pragma once
// The JSON-lines form of a record (docs/trace-format.md): written by the
// recorder, returned by drvshim::trace::to_json, parsed by the analysis.
#include <drvshim_recorder/record.hpp>

#include <string>

namespace drvshim::recorder {

/// Appends `record` as one JSON object (no newline) to `out`. Optional keys
/// ("pid", "sym", "lib", "rt", "count") are written only when set.
void append_json(std::string& out, const Record& record);
std::string to_json(const Record& record);

/// The CUresult's name ("CUDA_ERROR_OUT_OF_MEMORY"), or "unknown CUresult".
const char* result_name(int code) noexcept;

}  // namespace drvshim::recorder
