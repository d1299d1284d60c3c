// SPDX-License-Identifier: Apache-2.0
#include "caller_names.hpp"

#include <dlfcn.h>
#include <link.h>
#include <unistd.h>

#include <climits>
#include <cstddef>

namespace drvshim::recorder::detail {
namespace {

std::string basename_of(const char* path) {
  std::string p = path != nullptr ? path : "";
  const auto slash = p.rfind('/');
  return slash == std::string::npos ? p : p.substr(slash + 1);
}

std::string executable_name() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return "main";
  buf[n] = '\0';
  return basename_of(buf);
}

}  // namespace

void CallerNames::refresh() noexcept {
  unsigned long long unloads = 0;
  // The loader counts the objects it removed (dlpi_subs); the first object reports it.
  (void)::dl_iterate_phdr(
      [](dl_phdr_info* info, std::size_t size, void* out) -> int {
        if (size >= offsetof(dl_phdr_info, dlpi_subs) + sizeof(info->dlpi_subs)) {
          *static_cast<unsigned long long*>(out) = info->dlpi_subs;
        }
        return 1;
      },
      &unloads);
  if (unloads != unloads_) {
    cache_.clear();
    unloads_ = unloads;
  }
}

const std::string& CallerNames::name(std::uintptr_t address) {
  if (auto it = cache_.find(address); it != cache_.end()) return it->second;
  std::string name;
  if (address != 0) {
    Dl_info info{};
    // address - 1: a return address can point just past the call, into the next object.
    if (::dladdr(reinterpret_cast<void*>(address - 1), &info) != 0) {
      name = basename_of(info.dli_fname);
      if (name.empty()) name = executable_name();
    }
  }
  return cache_.emplace(address, std::move(name)).first->second;
}

}  // namespace drvshim::recorder::detail
