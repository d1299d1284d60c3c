// SPDX-License-Identifier: Apache-2.0
#pragma once
// Starting drvshim's helper threads: the one place that asks the operating
// system for a thread, so a failure is reported as a drvshim error (never
// std::terminate) and tests can make it fail.
#include <functional>
#include <thread>

namespace drvshim::detail {

// Starts a thread running `body`. Throws SystemError (naming `who`) when the
// system refuses one.
std::thread start_thread(const char* who, std::function<void()> body);

}  // namespace drvshim::detail
