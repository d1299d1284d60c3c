// SPDX-License-Identifier: Apache-2.0
#pragma once
#include <drvshim/trace.hpp>

#include <cstdint>
#include <string>

namespace drvshim::detail {

// Whether in-process recording or a trace file is on.
bool trace_active() noexcept;
// Nanoseconds since the recorder's epoch (steady clock).
std::int64_t trace_now_ns() noexcept;
// Adds a call record (when tracing is on).
void trace_record_call(const char* api, std::int64_t start_ns, std::int64_t duration_ns, const std::string& args,
                       int result, std::uintptr_t context) noexcept;
// Applies DRVSHIM_TRACE / DRVSHIM_TRACE_FILE once per process.
void trace_init_from_env() noexcept;
// The OS thread id of the caller.
std::uint64_t thread_id() noexcept;

}  // namespace drvshim::detail
