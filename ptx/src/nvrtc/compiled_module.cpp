// SPDX-License-Identifier: Apache-2.0
// A compile's image loaded, with its name expressions.
#include <drvshim/compiled_module.hpp>
#include <drvshim/error.hpp>

#include <fmt/format.h>

#include <utility>

namespace drvshim {

CompiledModule::CompiledModule(Module module, std::map<std::string, std::string> lowered) noexcept
    : module_(std::move(module)), lowered_(std::move(lowered)) {}

CompiledModule CompiledModule::load(const ContextRef& context, const CompileResult& result) {
  if (result.image.empty()) {
    std::string options;
    for (const auto& o : result.options) options += (options.empty() ? "" : " ") + o;
    throw InvalidArgumentError(
        "CompiledModule::load",
        fmt::format("the compile result has no image (options: {})", options.empty() ? "none" : options),
        "load the result of a successful Nvrtc::compile, compile_for or CompileCache call");
  }
  return CompiledModule(Module::load(context, result.image), result.lowered_names);
}

CompiledModule CompiledModule::load(const ContextRef& context, const CachedCompile& compile) {
  return load(context, compile.result);
}

std::string CompiledModule::symbol(const std::string& name) const {
  const auto it = lowered_.find(name);
  return it != lowered_.end() ? it->second : name;
}

// A name with template arguments, a call or an address-of is a name
// expression: only the compile's lowering can turn it into a symbol.
std::string CompiledModule::resolve(const char* api, const std::string& name) const {
  if (!module_) throw InvalidArgumentError(api, "this CompiledModule is empty (moved from or unloaded)");
  if (const auto it = lowered_.find(name); it != lowered_.end()) return it->second;
  if (name.find_first_of("<(&") != std::string::npos) {
    std::string given;
    for (const auto& [expression, lowered] : lowered_) given += (given.empty() ? "" : ", ") + expression;
    throw InvalidArgumentError(
        api, fmt::format("\"{}\" is not a name expression of this compile", name),
        given.empty() ? std::string("the compile was given no name expressions: list it in the program's "
                                    "name_expressions (or Nvrtc::compile's) so NVRTC instantiates and lowers it")
                      : fmt::format("its name expressions are: {} (spelled exactly as given at compile; a "
                                    "variable's with its &)",
                                    given));
  }
  return name;
}

Kernel CompiledModule::kernel(const std::string& name) const {
  return module_.kernel(resolve("CompiledModule::kernel", name));
}

}  // namespace drvshim
