// SPDX-License-Identifier: Apache-2.0
#include "cache/option_inputs.hpp"

#include <string_view>

namespace drvshim::detail {
namespace {

enum class Role {
  plain,        // changes the output only through its text, which the key holds
  include_dir,  // -I
  pre_include,  // -include
  no_source,    // --no-source-include
  ptxas,        // -Xptxas: checked for ptxas options that read or write files
  reads_file,   // reads a file the cache cannot key
  writes_file,  // writes a file a cache hit would not write
};

struct Known {
  std::string_view long_name;   // without the leading "--", '-' between words
  std::string_view short_name;  // without the leading "-"; empty when none
  bool value;                   // takes a value (=value or the next argument)
  Role role;
};

// NVRTC 13.0's documented options (the NVRTC guide, "Supported Compile Options").
constexpr Known kKnown[] = {
    {"gpu-architecture", "arch", true, Role::plain},
    {"relocatable-device-code", "rdc", true, Role::plain},
    {"extensible-whole-program", "ewp", false, Role::plain},
    {"device-c", "dc", false, Role::plain},
    {"device-w", "dw", false, Role::plain},
    {"device-debug", "G", false, Role::plain},
    {"generate-line-info", "lineinfo", false, Role::plain},
    {"dopt", "dopt", true, Role::plain},
    {"Ofast-compile", "Ofc", true, Role::plain},
    {"ptxas-options", "Xptxas", true, Role::ptxas},
    {"maxrregcount", "maxrregcount", true, Role::plain},
    {"ftz", "ftz", true, Role::plain},
    {"prec-sqrt", "prec-sqrt", true, Role::plain},
    {"prec-div", "prec-div", true, Role::plain},
    {"fmad", "fmad", true, Role::plain},
    {"use-fast-math", "use-fast-math", false, Role::plain},
    {"extra-device-vectorization", "extra-device-vectorization", false, Role::plain},
    {"modify-stack-limit", "modify-stack-limit", true, Role::plain},
    {"dlink-time-opt", "dlto", false, Role::plain},
    {"gen-opt-lto", "gen-opt-lto", false, Role::plain},
    {"optix-ir", "optix-ir", false, Role::plain},
    {"jump-table-density", "jtd", true, Role::plain},
    {"device-stack-protector", "device-stack-protector", true, Role::plain},
    {"no-cache", "no-cache", false, Role::plain},
    {"frandom-seed", "frandom-seed", true, Role::plain},
    {"define-macro", "D", true, Role::plain},
    {"undefine-macro", "U", true, Role::plain},
    {"include-path", "I", true, Role::include_dir},
    {"pre-include", "include", true, Role::pre_include},
    {"no-source-include", "no-source-include", false, Role::no_source},
    {"std", "std", true, Role::plain},
    {"builtin-move-forward", "builtin-move-forward", true, Role::plain},
    {"builtin-initializer-list", "builtin-initializer-list", true, Role::plain},
    {"disable-warnings", "w", false, Role::plain},
    {"restrict", "restrict", false, Role::plain},
    {"device-as-default-execution-space", "default-device", false, Role::plain},
    {"device-int128", "device-int128", false, Role::plain},
    {"device-float128", "device-float128", false, Role::plain},
    {"optimization-info", "opt-info", true, Role::plain},
    {"display-error-number", "err-no", false, Role::plain},
    {"no-display-error-number", "no-err-no", false, Role::plain},
    {"diag-error", "diag-error", true, Role::plain},
    {"diag-suppress", "diag-suppress", true, Role::plain},
    {"diag-warn", "diag-warn", true, Role::plain},
    {"brief-diagnostics", "brief-diag", true, Role::plain},
    {"split-compile", "split-compile", true, Role::plain},
    {"fdevice-syntax-only", "fdevice-syntax-only", false, Role::plain},
    {"minimal", "minimal", false, Role::plain},
    // Precompiled headers: a PCH file is an input (or an output) the key cannot hold.
    {"pch", "pch", false, Role::reads_file},
    {"use-pch", "use-pch", true, Role::reads_file},
    {"pch-dir", "pch-dir", true, Role::reads_file},
    {"create-pch", "create-pch", true, Role::writes_file},
    {"pch-verbose", "pch-verbose", true, Role::plain},
    {"pch-messages", "pch-messages", true, Role::plain},
    {"instantiate-templates-in-pch", "instantiate-templates-in-pch", true, Role::plain},
    {"time", "time", true, Role::writes_file},
    {"fdevice-time-trace", "fdevice-time-trace", true, Role::writes_file},
    // nvcc's options file: not an NVRTC option, but should a version accept it, it is a file read.
    {"options-file", "optf", true, Role::reads_file},
};

// NVRTC spells some options with '_' ("--use_fast_math"): both spellings name one option.
bool same_name(std::string_view spelled, std::string_view known) noexcept {
  if (spelled.size() != known.size()) return false;
  for (std::size_t i = 0; i < spelled.size(); ++i) {
    if ((spelled[i] == '_' ? '-' : spelled[i]) != known[i]) return false;
  }
  return true;
}

const Known* find_long(std::string_view name) {
  for (const auto& k : kKnown) {
    if (same_name(name, k.long_name)) return &k;
  }
  return nullptr;
}

const Known* find_short(std::string_view name) {
  for (const auto& k : kKnown) {
    if (!k.short_name.empty() && same_name(name, k.short_name)) return &k;
  }
  return nullptr;
}

}  // namespace

OptionInputs option_inputs(const std::vector<std::string>& options) {
  OptionInputs out;
  auto refuse = [&](std::string why) {
    if (out.unknowable.empty()) out.unknowable = std::move(why);
  };
  for (std::size_t i = 0; i < options.size(); ++i) {
    const std::string& arg = options[i];
    const Known* known = nullptr;
    std::string value;
    bool has_value = false;
    if (arg.rfind("--", 0) == 0) {
      const auto eq = arg.find('=');
      known = find_long(std::string_view(arg).substr(2, eq == std::string::npos ? std::string::npos : eq - 2));
      if (eq != std::string::npos) {
        value = arg.substr(eq + 1);
        has_value = true;
      }
    } else if (arg.size() > 1 && arg[0] == '-') {
      const auto eq = arg.find('=');
      known = find_short(std::string_view(arg).substr(1, eq == std::string::npos ? std::string::npos : eq - 1));
      if (known != nullptr && eq != std::string::npos) {
        value = arg.substr(eq + 1);
        has_value = true;
      }
      // -I<dir>, -D<name>, -U<name>: the value written on, as the compilers allow.
      if (known == nullptr && (arg[1] == 'I' || arg[1] == 'D' || arg[1] == 'U')) {
        known = find_short(arg.substr(1, 1));
        value = arg.substr(2);
        has_value = true;
      }
    }
    if (known == nullptr) {
      refuse("option \"" + arg + "\" is not one the cache knows (it cannot tell which files it makes NVRTC read)");
      continue;
    }
    if (known->value && !has_value) {
      if (i + 1 >= options.size()) {
        refuse("option \"" + arg + "\" lacks its value");
        continue;
      }
      value = options[++i];
      has_value = true;
    } else if (!known->value && has_value) {
      refuse("option \"" + arg + "\" takes no value");
      continue;
    }
    switch (known->role) {
      case Role::plain: break;
      case Role::include_dir: {
        // NVRTC trims blanks around a directory ("-I inc" as one option reads inc/): the
        // trimmed spelling is looked up first, the one as given after it (a key can only be
        // stricter for it).
        const auto first = value.find_first_not_of(" \t");
        const auto last = value.find_last_not_of(" \t");
        const std::string trimmed = first == std::string::npos ? std::string() : value.substr(first, last - first + 1);
        if (trimmed != value && !trimmed.empty()) out.include_dirs.push_back(trimmed);
        out.include_dirs.push_back(value);
        break;
      }
      case Role::pre_include: out.pre_includes.push_back(value); break;
      case Role::no_source: out.source_include = false; break;
      case Role::ptxas:
        if (value.find("file") != std::string::npos || value.find("optf") != std::string::npos) {
          refuse("option \"" + arg + "\" passes ptxas an option that reads or writes a file");
        }
        break;
      case Role::reads_file:
        refuse("option \"" + arg + "\" makes NVRTC read a file (a precompiled header or options) the cache cannot key");
        break;
      case Role::writes_file:
        refuse("option \"" + arg + "\" makes NVRTC write a file, which a cache hit would not");
        break;
    }
  }
  return out;
}

}  // namespace drvshim::detail
