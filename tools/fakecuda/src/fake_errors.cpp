// SPDX-License-Identifier: Apache-2.0
// Error names and descriptions (cuGetErrorName, cuGetErrorString), from the
// table generated from cuda.h (common/generated/cu_errors.inc), so they match the driver's.
#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

struct ErrorEntry {
  int code;
  const char* name;
  const char* description;
};
constexpr ErrorEntry kErrors[] = {
#define DRVSHIM_CU_ERROR(code, name, description) {code, name, description},
#include "generated/cu_errors.inc"
#undef DRVSHIM_CU_ERROR
};

CUresult fake_cuGetErrorName(CUresult error, const char** str) {
  FAKE_ENTER_AS("cuGetErrorName", false);
  for (const auto& entry : kErrors) {
    if (entry.code == static_cast<int>(error)) {
      *str = entry.name;
      return CUDA_SUCCESS;
    }
  }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuGetErrorString(CUresult error, const char** str) {
  FAKE_ENTER_AS("cuGetErrorString", false);
  for (const auto& entry : kErrors) {
    if (entry.code == static_cast<int>(error)) {
      *str = entry.description;
      return CUDA_SUCCESS;
    }
  }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

}  // namespace

std::vector<ProcEntry> error_procs() {
  return {
      {"cuGetErrorName", 6000, erase_fn(&fake_cuGetErrorName)},
      {"cuGetErrorString", 6000, erase_fn(&fake_cuGetErrorString)},
  };
}

}  // namespace drvshim::fake
