// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file error.hpp
/// drvshim's error hierarchy. Every error names the driver API involved, the
/// CUresult (number, name, description) where there is one, the objects
/// involved, and a hint when the cause is a known trap.
///
///     Error
///      +-- DriverNotFoundError   no library could be loaded (paths tried, dlerror texts)
///      +-- StubLibraryError      the toolkit's link stub was loaded instead of the driver
///      +-- DriverTooOldError     the driver lacks a function or version drvshim needs
///      +-- MissingStepError      an explicit step (such as Driver::init) has not happened
///      +-- UsedAfterForkError    an object from before fork() was used in the child
///      +-- ContextStateError     a context is not in the state the call needs
///      +-- InvalidArgumentError  bad input refused before the driver was called
///      +-- UnsupportedError      the device or driver lacks the capability (checked before calling)
///      +-- ContextPoisonedError  an earlier error made the context unusable (illegal address and kin)
///      +-- HostCallbackError     a host callback queued on a stream threw
///      +-- SystemError           an operating-system call failed (a thread could not be started, a file read)
///      +-- NotPermittedError     the call is not allowed where it was made (inside a host function)
///      +-- CudaError             the driver returned an error code
///           +-- OutOfMemoryError  an allocation failed for lack of memory
///
/// Messages are built only when an error is raised; success paths format nothing.
#include <drvshim/export.hpp>

#include <cstddef>
#include <stdexcept>
#include <string>
#include <vector>

namespace drvshim {

/// The name of a CUresult value ("CUDA_ERROR_NO_DEVICE"), from a table built
/// from the toolkit's cuda.h, so it works without a loaded driver. Unknown
/// values give "CUDA_ERROR_<number>"-style text "unknown CUresult".
DRVSHIM_API const char* result_name(int code) noexcept;

/// The one-sentence description of a CUresult value, from the same table.
DRVSHIM_API const char* result_description(int code) noexcept;

/// What went wrong, as a machine-checkable category.
enum class ErrorKind {
  driver_not_found,
  stub_library,
  driver_too_old,
  missing_step,
  used_after_fork,
  context_state,
  invalid_argument,
  unsupported,
  context_poisoned,
  host_callback,
  cuda,
  system,
  not_permitted,
};

/// The parts an error message is made of; each is also readable on its own.
struct ErrorDetails {
  std::string api;            ///< the driver call or drvshim operation ("cuInit", "Driver::load")
  int code = 0;               ///< the CUresult number, 0 when no driver result is involved
  std::string objects;        ///< the objects involved ("device 0", "context 0x...")
  std::string hint;           ///< what to do instead, when known
  bool asynchronous = false;  ///< the error was caused by earlier asynchronous work
};

/// Base of every exception drvshim throws.
class DRVSHIM_API Error : public std::runtime_error {
 public:
  /// Builds the message from `summary` and `details`.
  Error(ErrorKind kind, const std::string& summary, ErrorDetails details);
  ~Error() override;
  Error(const Error&) = default;
  Error& operator=(const Error&) = default;

  ErrorKind kind() const noexcept { return kind_; }
  const std::string& api() const noexcept { return details_.api; }
  /// The CUresult number; 0 when the error did not come from a driver result.
  int code() const noexcept { return details_.code; }
  /// result_name(code()), or "" when code() is 0.
  const char* code_name() const noexcept;
  /// result_description(code()), or "" when code() is 0.
  const char* description() const noexcept;
  const std::string& objects() const noexcept { return details_.objects; }
  const std::string& hint() const noexcept { return details_.hint; }
  bool asynchronous() const noexcept { return details_.asynchronous; }

 private:
  ErrorKind kind_;
  ErrorDetails details_;
};

/// No driver library could be loaded. Lists every path tried and dlopen's text for each.
class DRVSHIM_API DriverNotFoundError : public Error {
 public:
  DriverNotFoundError(std::vector<std::string> paths_tried, std::vector<std::string> dl_errors);
  const std::vector<std::string>& paths_tried() const noexcept { return paths_; }
  const std::vector<std::string>& dl_errors() const noexcept { return dl_errors_; }

 private:
  std::vector<std::string> paths_;
  std::vector<std::string> dl_errors_;
};

/// The library loaded is the CUDA toolkit's link stub (every call returns
/// CUDA_ERROR_STUB_LIBRARY), not a driver.
class DRVSHIM_API StubLibraryError : public Error {
 public:
  StubLibraryError(const std::string& api, const std::string& path);
  const std::string& path() const noexcept { return path_; }

 private:
  std::string path_;
};

/// The loaded driver lacks what drvshim needs: a required function, or a
/// version of one.
class DRVSHIM_API DriverTooOldError : public Error {
 public:
  DriverTooOldError(const std::string& api, int driver_version, std::vector<std::string> missing,
                    const std::string& detail);
  int driver_version() const noexcept { return driver_version_; }
  const std::vector<std::string>& missing() const noexcept { return missing_; }

 private:
  int driver_version_;
  std::vector<std::string> missing_;
};

/// A call needs an explicit step that has not happened (for example
/// Driver::init before any device query). drvshim never performs the step
/// silently; the message names it.
class DRVSHIM_API MissingStepError : public Error {
 public:
  MissingStepError(const std::string& api, const std::string& step, const std::string& objects = {});
  const std::string& step() const noexcept { return step_; }

 private:
  std::string step_;
};

/// An object created before fork() was used in the child process. The driver
/// is not called: CUDA state does not survive fork.
class DRVSHIM_API UsedAfterForkError : public Error {
 public:
  explicit UsedAfterForkError(const std::string& api);
};

/// A context is not in the state the call needs (for example primary-context
/// flags requested after another component activated it with other flags).
class DRVSHIM_API ContextStateError : public Error {
 public:
  ContextStateError(const std::string& api, const std::string& summary, ErrorDetails details);
};

/// Bad input refused before the driver was called.
class DRVSHIM_API InvalidArgumentError : public Error {
 public:
  InvalidArgumentError(const std::string& api, const std::string& summary, const std::string& hint = {});
};

/// The device or driver lacks a capability the call needs; drvshim checked it
/// before calling the driver. The message names the device, the attribute
/// that says so, and the way out.
class DRVSHIM_API UnsupportedError : public Error {
 public:
  UnsupportedError(const std::string& api, const std::string& summary, const std::string& objects,
                   const std::string& hint);
};

/// The context was poisoned by an earlier error that the driver makes sticky
/// (CUDA_ERROR_ILLEGAL_ADDRESS and its kin): every later call on it fails, so
/// drvshim fails fast without calling the driver. code() is the original error.
class DRVSHIM_API ContextPoisonedError : public Error {
 public:
  ContextPoisonedError(const std::string& api, int original_code, const std::string& original_api,
                       const std::string& objects);
};

/// A host callback (StreamRef::launch_host_func) threw; reported on the next
/// synchronize of its stream, with the exception's message.
class DRVSHIM_API HostCallbackError : public Error {
 public:
  HostCallbackError(const std::string& api, const std::string& stream, const std::string& message);
};

/// An operating-system call drvshim needed failed (a helper thread could not
/// be started, a file could not be read). code() is 0; system_code() holds
/// the errno value.
class DRVSHIM_API SystemError : public Error {
 public:
  SystemError(const std::string& api, const std::string& summary, int errno_value, const std::string& hint = {});
  /// The errno value (EAGAIN, EISDIR, ...).
  int system_code() const noexcept { return errno_; }

 private:
  int errno_;
};

/// A drvshim call that must not be made where it was made: inside a host
/// function (StreamRef::launch_host_func), where CUDA forbids every driver
/// call. Refused before the driver is called.
class DRVSHIM_API NotPermittedError : public Error {
 public:
  NotPermittedError(const std::string& api, const std::string& summary, const std::string& hint);
};

/// Whether a CUresult is one the driver makes sticky: after it the context is
/// unusable (illegal address, launch failure, hardware traps, ...).
DRVSHIM_API bool is_sticky_error(int code) noexcept;

/// The driver returned an error code.
class DRVSHIM_API CudaError : public Error {
 public:
  explicit CudaError(ErrorDetails details);

 protected:
  CudaError(ErrorDetails details, const std::string& extra);
};

/// An allocation failed with CUDA_ERROR_OUT_OF_MEMORY. Carries the size asked
/// for and the device's free and total memory at the time (0 when unknown,
/// e.g. for host allocations).
class DRVSHIM_API OutOfMemoryError : public CudaError {
 public:
  OutOfMemoryError(ErrorDetails details, std::size_t requested, std::size_t free_bytes, std::size_t total_bytes);
  std::size_t requested() const noexcept { return requested_; }
  std::size_t free_bytes() const noexcept { return free_; }
  std::size_t total_bytes() const noexcept { return total_; }

 private:
  std::size_t requested_;
  std::size_t free_;
  std::size_t total_;
};

/// The result of a no-throw operation (the twins used on cleanup paths):
/// success, or the API and CUresult that failed.
class DRVSHIM_API Status {
 public:
  Status() noexcept = default;
  Status(const char* api, int code) noexcept : api_(api), code_(code) {}
  bool ok() const noexcept { return code_ == 0; }
  explicit operator bool() const noexcept { return ok(); }
  int code() const noexcept { return code_; }
  /// The API that failed; "" on success.
  const char* api() const noexcept { return api_; }
  /// "cuCtxDestroy: CUDA_ERROR_INVALID_CONTEXT (201)", or "ok".
  std::string to_string() const;

 private:
  const char* api_ = "";
  int code_ = 0;
};

}  // namespace drvshim
