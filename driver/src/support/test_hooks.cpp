// SPDX-License-Identifier: Apache-2.0
#include "support/test_hooks.hpp"

#include <new>
#include <string>

namespace drvshim::detail::test_hooks {

std::atomic<Hook> g_hook{nullptr};
std::atomic<unsigned> g_usable_cpus{0};

void set(Hook hook) noexcept { g_hook.store(hook); }

namespace {
std::string& root_of_cgroups() noexcept {
  static std::string root;
  return root;
}
}  // namespace

void set_cgroup_root(const char* root) { root_of_cgroups() = root == nullptr ? "" : root; }
const std::string& cgroup_root() noexcept { return root_of_cgroups(); }

void fail_allocation_if_asked() {
  if (!at(Point::noexcept_alloc)) throw std::bad_alloc();
}

}  // namespace drvshim::detail::test_hooks
