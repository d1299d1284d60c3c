#pragma once
/// @file nvrtc.hpp
/// NVRTC, loaded at run time like the driver (never linked): its library, its
/// version and the GPU architectures it can compile for. The compile API lands
/// with the NVRTC issue; this is the loader the probe reports on.
#include <drvshim/error.hpp>
#include <drvshim/export.hpp>

#include <memory>
#include <string>
#include <vector>

namespace drvshim {

namespace detail {
struct NvrtcCore;
}  // namespace detail

/// No NVRTC library (or its builtins library) could be loaded. Lists every
/// path tried with dlopen's text.
class DRVSHIM_API NvrtcNotFoundError : public Error {
 public:
  NvrtcNotFoundError(const std::string& what, std::vector<std::string> paths_tried, std::vector<std::string> dl_errors);
  const std::vector<std::string>& paths_tried() const noexcept { return paths_; }
  const std::vector<std::string>& dl_errors() const noexcept { return dl_errors_; }

 private:
  std::vector<std::string> paths_;
  std::vector<std::string> dl_errors_;
};

/// Where to load NVRTC from.
struct NvrtcLoadOptions {
  /// An explicit path or soname. Empty: DRVSHIM_LIBNVRTC when set (and
  /// use_environment), else libnvrtc.so.<major of the CUDA headers drvshim was
  /// built with>, then the same name under /usr/local/cuda/lib64.
  std::string path;
  bool use_environment = true;
};

/// The loaded NVRTC library (a shared handle, like Driver).
class DRVSHIM_API Nvrtc {
 public:
  /// dlopen(RTLD_NOW|RTLD_LOCAL), resolves NVRTC's functions with dlsym, reads
  /// its version and checks that its builtins library
  /// (libnvrtc-builtins.so.<major>.<minor>) loads. Throws NvrtcNotFoundError.
  static Nvrtc load(const NvrtcLoadOptions& options = {});

  const std::string& requested_path() const noexcept;
  const std::string& loaded_path() const noexcept;
  /// The builtins library that was found (its real path).
  const std::string& builtins_path() const noexcept;
  int version_major() const noexcept;
  int version_minor() const noexcept;
  /// The architectures NVRTC can target (nvrtcGetSupportedArchs): 75, 80, ..., 120.
  const std::vector<int>& supported_architectures() const noexcept;

 private:
  explicit Nvrtc(std::shared_ptr<detail::NvrtcCore> core) noexcept;
  std::shared_ptr<detail::NvrtcCore> core_;
};

}  // namespace drvshim
