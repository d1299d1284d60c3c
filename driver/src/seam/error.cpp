// SPDX-License-Identifier: Apache-2.0
#include <drvshim/error.hpp>

#include <algorithm>

#include <fmt/format.h>

#include <cstring>
#include <utility>

namespace drvshim {
namespace {

struct ResultEntry {
  int code;
  const char* name;
  const char* description;
};

constexpr ResultEntry kResults[] = {
#define DRVSHIM_CU_ERROR(code, name, description) {code, name, description},
#include "generated/cu_errors.inc"
#undef DRVSHIM_CU_ERROR
};

const ResultEntry* find_result(int code) noexcept {
  for (const auto& e : kResults) {
    if (e.code == code) return &e;
  }
  return nullptr;
}

std::string compose(const std::string& summary, const ErrorDetails& d) {
  std::string msg = summary;
  if (!d.objects.empty()) msg += fmt::format(" [{}]", d.objects);
  if (!d.hint.empty()) msg += fmt::format(". Hint: {}", d.hint);
  return msg;
}

std::string join(const std::vector<std::string>& items, const char* sep) {
  std::string out;
  for (std::size_t i = 0; i < items.size(); ++i) {
    if (i != 0) out += sep;
    out += items[i];
  }
  return out;
}

}  // namespace

const char* result_name(int code) noexcept {
  const ResultEntry* e = find_result(code);
  return e != nullptr ? e->name : "unknown CUresult";
}

const char* result_description(int code) noexcept {
  const ResultEntry* e = find_result(code);
  return e != nullptr ? e->description : "This CUresult value is not in drvshim's table (newer driver?).";
}

Error::Error(ErrorKind kind, const std::string& summary, ErrorDetails details)
    : std::runtime_error(compose(summary, details)), kind_(kind), details_(std::move(details)) {}

Error::~Error() = default;

const char* Error::code_name() const noexcept { return details_.code == 0 ? "" : result_name(details_.code); }
const char* Error::description() const noexcept { return details_.code == 0 ? "" : result_description(details_.code); }

DriverNotFoundError::DriverNotFoundError(std::vector<std::string> paths_tried, std::vector<std::string> dl_errors)
    : Error(ErrorKind::driver_not_found,
            fmt::format("no CUDA driver library could be loaded; tried: {}",
                        [&] {
                          std::vector<std::string> parts;
                          for (std::size_t i = 0; i < paths_tried.size(); ++i) {
                            parts.push_back(fmt::format("\"{}\" ({})", paths_tried[i],
                                                        i < dl_errors.size() ? dl_errors[i] : "no error text"));
                          }
                          return join(parts, "; ");
                        }()),
            ErrorDetails{"Driver::load",
                         0,
                         {},
                         // A library that was found but could not get its thread-local storage
                         // (loaded late, after other initial-exec TLS used glibc's surplus) is
                         // no missing driver: say what helps then.
                         std::any_of(dl_errors.begin(), dl_errors.end(),
                                     [](const std::string& e) { return e.find("static TLS") != std::string::npos; })
                             ? "the library was found but glibc had no static TLS left for it when it was loaded: "
                               "load the driver earlier (Driver::load at start-up, or LD_PRELOAD it), or give glibc "
                               "more (GLIBC_TUNABLES=glibc.rtld.optional_static_tls=4096)"
                             : "install the NVIDIA driver (it provides libcuda.so.1), or set "
                               "DRVSHIM_LIBCUDA=/path/to/libcuda.so.1",
                         false}),
      paths_(std::move(paths_tried)),
      dl_errors_(std::move(dl_errors)) {}

StubLibraryError::StubLibraryError(const std::string& api, const std::string& path)
    : Error(
          ErrorKind::stub_library,
          fmt::format("{} returned CUDA_ERROR_STUB_LIBRARY (34): \"{}\" is the CUDA toolkit's link stub, not a driver",
                      api, path),
          ErrorDetails{api, 34, fmt::format("library {}", path),
                       "the stub only satisfies the linker; install the NVIDIA driver or point DRVSHIM_LIBCUDA at the "
                       "real libcuda.so.1 (not .../stubs/libcuda.so)",
                       false}),
      path_(path) {}

DriverTooOldError::DriverTooOldError(const std::string& api, int driver_version, std::vector<std::string> missing,
                                     const std::string& detail)
    : Error(ErrorKind::driver_too_old,
            fmt::format("the CUDA driver (version {}.{}) is too old for {}: {}{}", driver_version / 1000,
                        (driver_version % 1000) / 10, api, detail,
                        missing.empty() ? std::string() : fmt::format(" (missing: {})", join(missing, ", "))),
            ErrorDetails{api, 0, {}, "update the NVIDIA driver", false}),
      driver_version_(driver_version),
      missing_(std::move(missing)) {}

MissingStepError::MissingStepError(const std::string& api, const std::string& step, const std::string& objects)
    : Error(ErrorKind::missing_step, fmt::format("{} needs {} first; drvshim never performs it implicitly", api, step),
            ErrorDetails{api, 0, objects, fmt::format("call {} explicitly before {}", step, api), false}),
      step_(step) {}

UsedAfterForkError::UsedAfterForkError(const std::string& api)
    : Error(ErrorKind::used_after_fork,
            fmt::format("{} was called in a forked child on driver state created before fork(); CUDA state does not "
                        "survive fork and the driver was not called",
                        api),
            ErrorDetails{api,
                         0,
                         {},
                         "load and initialise a new Driver in the child (Driver::load(), init()), or use exec/spawn "
                         "instead of fork",
                         false}) {}

ContextStateError::ContextStateError(const std::string& api, const std::string& summary, ErrorDetails details)
    : Error(ErrorKind::context_state, summary, [&] {
        details.api = api;
        return details;
      }()) {}

InvalidArgumentError::InvalidArgumentError(const std::string& api, const std::string& summary, const std::string& hint)
    : Error(ErrorKind::invalid_argument, fmt::format("{}: {}", api, summary), ErrorDetails{api, 0, {}, hint, false}) {}

CudaError::CudaError(ErrorDetails details) : CudaError(std::move(details), std::string()) {}

CudaError::CudaError(ErrorDetails details, const std::string& extra)
    : Error(ErrorKind::cuda,
            fmt::format("{}{}: {} ({}): {}{}", details.asynchronous ? "asynchronous error, detected at " : "",
                        details.asynchronous ? details.api : details.api + " failed", result_name(details.code),
                        details.code, result_description(details.code), extra),
            details) {}

UnsupportedError::UnsupportedError(const std::string& api, const std::string& summary, const std::string& objects,
                                   const std::string& hint)
    : Error(ErrorKind::unsupported, fmt::format("{}: {}", api, summary), ErrorDetails{api, 0, objects, hint, false}) {}

namespace {
std::string bytes_text(std::size_t n) {
  if (n >= (std::size_t{1} << 30)) return fmt::format("{:.2f} GiB", static_cast<double>(n) / (1u << 30));
  if (n >= (std::size_t{1} << 20)) return fmt::format("{:.2f} MiB", static_cast<double>(n) / (1u << 20));
  return fmt::format("{} bytes", n);
}
}  // namespace

OutOfMemoryError::OutOfMemoryError(ErrorDetails details, std::size_t requested, std::size_t free_bytes,
                                   std::size_t total_bytes)
    : CudaError(std::move(details),
                total_bytes == 0 ? fmt::format(" (requested {})", bytes_text(requested))
                                 : fmt::format(" (requested {}; the device has {} free of {})", bytes_text(requested),
                                               bytes_text(free_bytes), bytes_text(total_bytes))),
      requested_(requested),
      free_(free_bytes),
      total_(total_bytes) {}

// The codes cuda.h documents as leaving the process "in an inconsistent
// state": any further CUDA work returns the same error.
bool is_sticky_error(int code) noexcept {
  switch (code) {
    case 226:  // CONTAINED
    case 700:  // ILLEGAL_ADDRESS
    case 702:  // LAUNCH_TIMEOUT
    case 710:  // ASSERT
    case 714:  // HARDWARE_STACK_ERROR
    case 715:  // ILLEGAL_INSTRUCTION
    case 716:  // MISALIGNED_ADDRESS
    case 717:  // INVALID_ADDRESS_SPACE
    case 718:  // INVALID_PC
    case 719:  // LAUNCH_FAILED
    case 721:  // TENSOR_MEMORY_LEAK
    case 810:  // MPS_CLIENT_TERMINATED
    case 911:  // EXTERNAL_DEVICE
      return true;
    default: return false;
  }
}

ContextPoisonedError::ContextPoisonedError(const std::string& api, int original_code, const std::string& original_api,
                                           const std::string& objects)
    : Error(ErrorKind::context_poisoned,
            fmt::format("{} refused: the context was poisoned by {} ({}) reported at {}; every later call on it fails",
                        api, result_name(original_code), original_code, original_api),
            ErrorDetails{api, original_code, objects,
                         "an earlier kernel or operation faulted; CUDA keeps such an error for the rest of the "
                         "process (on the H200 with driver 580 a released or reset primary context retained again "
                         "fails with the same error): drop the objects made in it and restart the process, or run "
                         "work that may fault in a child process started with exec; run with DRVSHIM_SYNC_EACH_OP=1 "
                         "to find the operation that faulted",
                         true}) {}

HostCallbackError::HostCallbackError(const std::string& api, const std::string& stream, const std::string& message)
    : Error(ErrorKind::host_callback,
            fmt::format("a host callback on {} threw: {} (reported at {})", stream, message, api),
            ErrorDetails{api, 0, stream, "host callbacks must not throw; catch inside the callback", true}) {}

SystemError::SystemError(const std::string& api, const std::string& summary, int errno_value, const std::string& hint)
    : Error(ErrorKind::system, fmt::format("{}: {} ({})", api, summary, std::strerror(errno_value)),
            ErrorDetails{api, 0, {}, hint, false}),
      errno_(errno_value) {}

NotPermittedError::NotPermittedError(const std::string& api, const std::string& summary, const std::string& hint)
    : Error(ErrorKind::not_permitted, fmt::format("{}: {}", api, summary), ErrorDetails{api, 0, {}, hint, false}) {}

std::string Status::to_string() const {
  if (ok()) return "ok";
  return fmt::format("{}: {} ({})", api_, result_name(code_), code_);
}

}  // namespace drvshim
