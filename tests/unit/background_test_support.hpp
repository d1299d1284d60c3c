// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the background-initialisation tests share (test_background.cpp,
// test_runtime_compat_background.cpp).
#include <drvshim/trace.hpp>

#include <cstdlib>
#include <string>
#include <vector>

namespace background_test {

// Sets an environment variable for its lifetime.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
};

// The trace events named `event`, as their detail text.
inline std::vector<drvshim::trace::Record> events(const std::string& event) {
  std::vector<drvshim::trace::Record> out;
  for (const auto& r : drvshim::trace::records()) {
    if (r.kind == drvshim::trace::Kind::event && r.api == event) out.push_back(r);
  }
  return out;
}

}  // namespace background_test
