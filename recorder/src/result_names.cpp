// SPDX-License-Identifier: Apache-2.0
// CUresult names for the JSON lines (the same table as libdrvshim's
// drvshim::result_name, generated from cuda.h by tools/dev/gen_cuda_errors.py).
#include <drvshim_recorder/json_line.hpp>

namespace drvshim::recorder {

const char* result_name(int code) noexcept {
  switch (code) {
#define DRVSHIM_CU_ERROR(value, name, text) \
  case value:                               \
    return name;
#include "generated/cu_errors.inc"
#undef DRVSHIM_CU_ERROR
    default: return "unknown CUresult";
  }
}

}  // namespace drvshim::recorder
