// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file nvrtc.hpp
/// NVRTC, loaded at run time like the driver (never linked): its library, its
/// version, the GPU architectures it can compile for, and compilation
/// (Nvrtc::compile, CompileOptions); the compile cache is compile_cache.hpp.
#include <drvshim/error.hpp>
#include <drvshim/export.hpp>

#include <cstddef>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace drvshim {

class Device;

namespace detail {
struct NvrtcCore;
}  // namespace detail

/// Compiler options as a typed struct, rendered to NVRTC flags in one place
/// (CompileOptions::render()).
struct DRVSHIM_API CompileOptions {
  /// "sm_90" (a CUBIN for exactly that GPU) or "compute_90" (PTX). Required:
  /// pick it explicitly or with Nvrtc::target_for(device).
  std::string arch{};
  std::string standard = "c++17";                              ///< --std=
  std::vector<std::pair<std::string, std::string>> defines{};  ///< -DNAME or -DNAME=VALUE
  std::vector<std::string> include_paths{};                    ///< -I, searched before the CUDA include directory
  bool fast_math = false;                                      ///< --use_fast_math
  bool line_info = false;                                      ///< --generate-line-info
  bool debug = false;                                          ///< --device-debug
  bool relocatable = false;                                    ///< --relocatable-device-code=true
  /// Adds the CUDA toolkit's include directory (found at run time) so
  /// #include <cuda_fp16.h> works without the caller passing paths.
  bool cuda_includes = true;
  std::vector<std::string> extra{};  ///< passed through as given
  /// The flags NVRTC receives (without the CUDA include directory).
  std::vector<std::string> render() const;
};

/// A header given to NVRTC in memory: #include "name" finds it.
struct Header {
  std::string name{};
  std::string source{};
};

/// What a compile produced.
struct CompileResult {
  std::vector<std::byte> image;  ///< CUBIN (for sm_XY) or PTX text (for compute_XY)
  bool cubin = false;
  std::string log;                                   ///< NVRTC's log, warnings included
  std::vector<std::string> options;                  ///< the flags actually passed
  std::map<std::string, std::string> lowered_names;  ///< name expression -> mangled kernel name
  double compile_ms = 0.0;
};

/// NVRTC rejected the program. Carries the log, the options used and the
/// source lines the log points at.
class DRVSHIM_API NvrtcCompileError : public Error {
 public:
  NvrtcCompileError(const std::string& program, const std::string& log, std::vector<std::string> options,
                    const std::string& excerpt, int code);
  const std::string& log() const noexcept { return log_; }
  const std::vector<std::string>& options() const noexcept { return options_; }

 private:
  std::string log_;
  std::vector<std::string> options_;
};

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
  std::string path{};
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

  /// The target for a device: "sm_XY" (a CUBIN) when NVRTC supports the
  /// device's exact compute capability, else "compute_XY" (PTX, for the driver
  /// to JIT) for the highest supported architecture not above the device's.
  /// Throws InvalidArgumentError when NVRTC supports nothing that old.
  std::string target_for(const Device& device) const;
  /// The CUDA toolkit include directory found at run time (DRVSHIM_CUDA_INCLUDE,
  /// else next to the loaded NVRTC, else /usr/local/cuda/include); empty if none has cuda_fp16.h.
  const std::string& cuda_include_dir() const noexcept;

  /// The flags compile() passes for `options`: options.render(), then -I of
  /// cuda_include_dir() when options.cuda_includes and one was found.
  std::vector<std::string> effective_options(const CompileOptions& options) const;

  /// Compiles `source` (named `name` in diagnostics) with `options`, the
  /// in-memory `headers`, and registers `name_expressions` (such as
  /// "scale<float>") whose lowered names the result carries. Throws
  /// InvalidArgumentError without options.arch, NvrtcCompileError with the log
  /// when NVRTC rejects the program.
  CompileResult compile(const std::string& source, const std::string& name, const CompileOptions& options,
                        const std::vector<Header>& headers = {},
                        const std::vector<std::string>& name_expressions = {}) const;

 private:
  explicit Nvrtc(std::shared_ptr<detail::NvrtcCore> core) noexcept;
  std::shared_ptr<detail::NvrtcCore> core_;
};

}  // namespace drvshim
