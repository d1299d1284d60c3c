// Errors: names and texts of every cudaError_t (generated from the toolkit,
// tools/dev/gen_cudart_errors.py), and the calling thread's last error.
#include "state.hpp"

namespace drvshim::rt::impl {
namespace {

struct ErrorText {
  int code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
#define DRVSHIM_CUDART_ERROR(code, name, text) {code, name, text},
#include "cudart_errors.inc"
#undef DRVSHIM_CUDART_ERROR
};

const ErrorText* find(int code) noexcept {
  for (const auto& e : kErrors) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

// What cudart answers for a number that is no cudaError_t.
constexpr const char* kUnrecognized = "unrecognized error code";

}  // namespace
}  // namespace drvshim::rt::impl

using namespace drvshim::rt::impl;

DRVSHIM_CUDART const char* cudaGetErrorName(cudaError_t error) {
  const auto* e = find(static_cast<int>(error));
  return e != nullptr ? e->name : kUnrecognized;
}

DRVSHIM_CUDART const char* cudaGetErrorString(cudaError_t error) {
  const auto* e = find(static_cast<int>(error));
  return e != nullptr ? e->text : kUnrecognized;
}

// A sticky error (an illegal address, a device-side assert, ...) corrupts the
// context: as under cudart, reading the last error clears an ordinary error,
// never a sticky one, which every call returns until cudaDeviceReset.
DRVSHIM_CUDART cudaError_t cudaGetLastError() {
  auto& t = thread();
  const cudaError_t e = t.last;
  t.last = cudaSuccess;
  if (e != cudaSuccess) return e;
  return sticky_error(t.device);
}

DRVSHIM_CUDART cudaError_t cudaPeekAtLastError() {
  auto& t = thread();
  return t.last != cudaSuccess ? t.last : sticky_error(t.device);
}
