// SPDX-License-Identifier: Apache-2.0
#include "support/threads.hpp"

#include <drvshim/error.hpp>

#include <cerrno>
#include <system_error>

#include "support/test_hooks.hpp"

namespace drvshim::detail {

std::thread start_thread(const char* who, std::function<void()> body) {
  try {
    if (!test_hooks::at(test_hooks::Point::thread_start)) {
      throw std::system_error(std::make_error_code(std::errc::resource_unavailable_try_again));
    }
    return std::thread(std::move(body));
  } catch (const std::system_error& e) {
    const int code = e.code().category() == std::generic_category() || e.code().category() == std::system_category()
                         ? e.code().value()
                         : EAGAIN;
    throw SystemError(who, "a helper thread could not be started", code,
                      "the process is at its thread or memory limit; raise it (ulimit -u, the container's pids "
                      "limit) or ask for fewer threads");
  }
}

}  // namespace drvshim::detail
