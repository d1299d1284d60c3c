// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file compiled_module.hpp
/// A compile's image loaded into a context, with the compile's name
/// expressions: `kernel("scale<float>")` finds the instantiation NVRTC made.
#include <drvshim/compile_cache.hpp>
#include <drvshim/export.hpp>
#include <drvshim/module.hpp>
#include <drvshim/nvrtc.hpp>

#include <map>
#include <string>

namespace drvshim {

/// A loaded compile (move-only owner, as the Module it holds). Built from
/// Nvrtc::compile / compile_for or from the compile cache.
class DRVSHIM_API CompiledModule {
 public:
  /// Module::load of the compile's image (CUBIN or PTX). Throws as Module::load
  /// does (CudaError with the JIT error log; InvalidArgumentError for an empty
  /// image, naming the compile's options).
  [[nodiscard]] static CompiledModule load(const ContextRef& context, const CompileResult& result);
  /// The same for a compile through the cache.
  [[nodiscard]] static CompiledModule load(const ContextRef& context, const CachedCompile& compile);

  /// The kernel for a name expression the compile was given (its lowered
  /// name), else for `name` as the module spells it (extern "C" or mangled).
  /// Throws InvalidArgumentError naming what was asked and, for a template
  /// name the compile did not lower, the name expressions it was given.
  Kernel kernel(const std::string& name) const;
  /// Module::global, with name expressions resolved as kernel() does.
  template <class T>
  DeviceSpan<T> global(const std::string& name) const {
    return module_.global<T>(lowered_or(name));
  }
  /// The mangled name for a name expression of the compile; `name` itself
  /// when the compile was not given it.
  const std::string& lowered_or(const std::string& name) const noexcept;

  const Module& module() const noexcept { return module_; }
  Module& module() noexcept { return module_; }
  const std::map<std::string, std::string>& lowered_names() const noexcept { return lowered_; }

 private:
  CompiledModule(Module module, std::map<std::string, std::string> lowered) noexcept;
  Module module_;
  std::map<std::string, std::string> lowered_;
};

}  // namespace drvshim
