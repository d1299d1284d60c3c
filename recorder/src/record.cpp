// SPDX-License-Identifier: Apache-2.0
#include <drvshim_recorder/record.hpp>

namespace drvshim::recorder {
namespace {
constexpr const char* kNames[] = {"call", "event", "runtime", "counts", "thread", "process"};
}

const char* kind_name(Kind kind) noexcept {
  const auto i = static_cast<std::size_t>(kind);
  return i < std::size(kNames) ? kNames[i] : "call";
}

bool parse_kind(std::string_view name, Kind& kind) noexcept {
  for (std::size_t i = 0; i < std::size(kNames); ++i) {
    if (name == kNames[i]) {
      kind = static_cast<Kind>(i);
      return true;
    }
  }
  return false;
}

}  // namespace drvshim::recorder
