// SPDX-License-Identifier: Apache-2.0
#pragma once
// What NVRTC's options make it read besides the program: include directories
// and pre-included headers, which the compile cache must key by content, and
// options whose inputs or outputs it cannot know (precompiled headers, time
// files, options NVRTC may add in a later version), which keep a compile out
// of the cache. Pure: nothing is looked up here.
#include <string>
#include <vector>

namespace drvshim::detail {

struct OptionInputs {
  std::vector<std::string> include_dirs;  // -I / --include-path, in search order
  std::vector<std::string> pre_includes;  // --pre-include / -include, in order
  bool source_include = true;             // false with --no-source-include
  // Why these options cannot be cached ("--use-pch=a.pch reads a precompiled
  // header"); empty when they can.
  std::string unknowable;
};

// `options` are the flags exactly as NVRTC receives them.
OptionInputs option_inputs(const std::vector<std::string>& options);

}  // namespace drvshim::detail
