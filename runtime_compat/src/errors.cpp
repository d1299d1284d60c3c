// SPDX-License-Identifier: Apache-2.0
// Errors: names and texts of every cudaError_t (generated from the toolkit,
// tools/dev/gen_cudart_errors.py), the driver's errors and drvshim's
// exceptions as cudaError_t, and the calling thread's last error.
#include <cstring>
#include <utility>

#include "runtime.hpp"

namespace drvshim::rt::impl {
namespace {

struct ErrorText {
  int code;
  const char* name;
  const char* text;
};
constexpr ErrorText kErrors[] = {
#define DRVSHIM_CUDART_ERROR(code, name, text) {code, name, text},
#include "generated/cudart_errors.inc"
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

namespace {

constexpr std::pair<int, int> kDriverToRuntime[] = {
#define DRVSHIM_CU_TO_CUDART(cu, rt) {cu, rt},
#include "generated/cudart_errors.inc"
#undef DRVSHIM_CU_TO_CUDART
};

}  // namespace

cudaError_t from_driver(int cu_result) noexcept {
  for (const auto& [cu, runtime] : kDriverToRuntime) {
    if (cu == cu_result) return static_cast<cudaError_t>(runtime);
  }
  return cudaErrorUnknown;
}

cudaError_t from_exception(const drvshim::Error& e) noexcept {
  switch (e.kind()) {
    case ErrorKind::driver_not_found: return cudaErrorInsufficientDriver;
    case ErrorKind::driver_too_old:
      // Too old to load at all, or lacking the one function this call needs.
      return e.api() == "Driver::load" ? cudaErrorInsufficientDriver : cudaErrorCallRequiresNewerDriver;
    case ErrorKind::stub_library: return cudaErrorStubLibrary;
    case ErrorKind::missing_step:
    case ErrorKind::used_after_fork: return cudaErrorInitializationError;
    case ErrorKind::context_state: return cudaErrorSetOnActiveProcess;
    case ErrorKind::invalid_argument: return cudaErrorInvalidValue;
    case ErrorKind::unsupported: return cudaErrorNotSupported;
    case ErrorKind::host_callback:
    case ErrorKind::system: return cudaErrorUnknown;
    // A Runtime-API call made inside a stream callback or host function: cudart says the same.
    case ErrorKind::not_permitted: return cudaErrorNotPermitted;
    case ErrorKind::context_poisoned:
    case ErrorKind::cuda: break;
  }
  return e.code() != 0 ? from_driver(e.code()) : cudaErrorUnknown;
}

namespace {
thread_local ThreadState t_state;
}  // namespace

ThreadState& thread() noexcept { return t_state; }

cudaError_t fail(cudaError_t e, std::string detail) {
  auto& t = thread();
  // cudart records every failure as the last error except "not ready",
  // which is an answer (cudaEventElapsedTime on an unfinished event, H100,
  // tests/runtime_api/conformance, 2026-12-07).
  if (e == cudaErrorNotReady) return e;
  t.last = e;
  t.detail = std::move(detail);
  logf(log::Level::debug, "runtime_compat: {} ({})", static_cast<int>(e), t.detail);
  return e;
}

cudaError_t null_argument(const char* api, const char* what) {
  return fail(cudaErrorInvalidValue, fmt::format("{}: {} is null", api, what));
}

cudaError_t not_supported(const char* api, const char* why) {
  // The functions outside the subset too answer a failed initialisation first,
  // as cudart's do (but cudaGetExportTable, which cudart answers without it).
  if (std::strcmp(api, "cudaGetExportTable") != 0) {
    if (const cudaError_t failed = initialise(api)) return failed;
  }
  logf(log::Level::error, "runtime_compat: {} is outside libdrvshim_cudart's subset{}{} (docs/runtime-compat.md)", api,
       why != nullptr ? ": " : "", why != nullptr ? why : "");
  return fail(cudaErrorNotSupported, fmt::format("{} is not part of libdrvshim_cudart's subset{}{}", api,
                                                 why != nullptr ? ": " : "", why != nullptr ? why : ""));
}

cudaError_t fail_exception(const char* api, const drvshim::Error& e) noexcept {
  const cudaError_t code = from_exception(e);
  try {
    if (e.kind() == ErrorKind::context_poisoned || (e.kind() == ErrorKind::cuda && is_sticky_error(e.code()))) {
      // Charged to the device whose context faulted, which drvshim recorded
      // (a device-1 stream's fault seen from a thread on device 0 leaves
      // device 0 healthy); a fault in a context the program created is that
      // context's, and every primary context stays healthy.
      note_sticky_where_poisoned(code);
    }
    return fail(code, std::string(api) + ": " + e.what());
  } catch (...) {
    thread().last = code;
    return code;
  }
}

cudaError_t fail_other(const char* api, const char* what, bool out_of_memory) noexcept {
  const cudaError_t code = out_of_memory ? cudaErrorMemoryAllocation : cudaErrorUnknown;
  try {
    return fail(code, std::string(api) + ": " + what);
  } catch (...) {
    thread().last = code;
    return code;
  }
}

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

// The thread's last-error slot, as cudart's (measured on the H200 with
// cudart 13.0): a failing call records its code, successful calls leave it,
// reading it clears it, a sticky code too. A sticky error stays the
// device's: every later call in its context fails with it and records it
// again, so a program that checks each call still sees it. Both initialise
// the runtime as every call does (a process whose initialisation failed gets
// that error from both, every time).
// In a child forked after the runtime initialised they answer the thread's
// last error, as cudart's do (H100, cudart 13.0, 2026-12-07), where calls
// that need the driver answer cudaErrorInitializationError.
DRVSHIM_CUDART cudaError_t cudaGetLastError() {
  if (!initialised_before_fork()) {
    if (const cudaError_t failed = initialise("cudaGetLastError")) return failed;
  }
  return std::exchange(thread().last, cudaSuccess);
}

DRVSHIM_CUDART cudaError_t cudaPeekAtLastError() {
  if (!initialised_before_fork()) {
    if (const cudaError_t failed = initialise("cudaPeekAtLastError")) return failed;
  }
  return thread().last;
}
