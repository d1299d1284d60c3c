// SPDX-License-Identifier: Apache-2.0
#pragma once
// Operations drvshim cannot let a capture record: what they queue on the
// stream refers to state of this call (a callback freed after one run, a
// staging block reused by the next copy), so a graph replaying it would run
// freed code or copy stale data.
#include <drvshim/stream.hpp>

namespace drvshim::detail {

// Throws InvalidArgumentError naming `api`, the stream and `why` (the way
// out) when `stream` is capturing, CudaError when the driver cannot answer;
// nothing for a driver without the question (before CUDA 10) or for the
// legacy default stream.
void refuse_if_capturing(const StreamRef& stream, const char* api, const char* why);

}  // namespace drvshim::detail
