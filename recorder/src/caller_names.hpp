// SPDX-License-Identifier: Apache-2.0
#pragma once
// The calling library of a record: a return address mapped to the file name
// of the object containing it (dladdr), cached per address on the consumer side.
#include <cstdint>
#include <string>
#include <unordered_map>

namespace drvshim::recorder::detail {

class CallerNames {
 public:
  // "" for address 0 or an address in no loaded object.
  const std::string& name(std::uintptr_t address);
  void clear() { cache_.clear(); }
  // Forgets every name once a library was unloaded (dlclose): another one may now live at
  // the addresses cached. Called at the start of each drain.
  void refresh() noexcept;

 private:
  std::unordered_map<std::uintptr_t, std::string> cache_;
  unsigned long long unloads_ = 0;
};

}  // namespace drvshim::recorder::detail
