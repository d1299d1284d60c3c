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
  /// Throws InvalidArgumentError for an empty (moved-from) CompiledModule, for
  /// a template name the compile did not lower (naming the name expressions
  /// it did), and as Module::kernel for a name the module lacks.
  Kernel kernel(const std::string& name) const;
  /// Module::global, with names resolved as kernel() resolves them (a
  /// variable template's expression is spelled with its `&`, as given to
  /// NVRTC: "&bias<float>"). The view does not keep the module loaded.
  template <class T>
  DeviceSpan<T> global(const std::string& name) const {
    return module_.global<T>(resolve("CompiledModule::global", name));
  }
  /// The symbol the module has for `name`: the lowered name of a name
  /// expression of the compile, else `name` itself.
  std::string symbol(const std::string& name) const;

  const Module& module() const noexcept { return module_; }
  Module& module() noexcept { return module_; }
  const std::map<std::string, std::string>& lowered_names() const noexcept { return lowered_; }

 private:
  CompiledModule(Module module, std::map<std::string, std::string> lowered) noexcept;
  std::string resolve(const char* api, const std::string& name) const;
  Module module_;
  std::map<std::string, std::string> lowered_;
};

}  // namespace drvshim
