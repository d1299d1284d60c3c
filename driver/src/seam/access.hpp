// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one door from library code to what the public types keep private: the
// driver core a Device or Driver shares, a Kernel's state, a StreamRef's keys.
// The public headers name detail::Access a friend and nothing else, so none
// of it is part of the API (no public member documented "Internal").
#include <drvshim/device.hpp>
#include <drvshim/driver.hpp>
#include <drvshim/module.hpp>
#include <drvshim/stream.hpp>

#include <cstdint>
#include <memory>
#include <utility>

namespace drvshim::detail {

struct Access {
  static const std::shared_ptr<DriverCore>& core(const Device& d) noexcept { return d.core_; }
  static const std::shared_ptr<DriverCore>& core(const Driver& d) noexcept { return d.core_; }
  static const std::shared_ptr<KernelState>& state(const Kernel& k) noexcept { return k.state_; }
  // The key of per-stream state: its context, and its owner's id (the handle
  // for the default streams, which have no owner).
  static std::pair<std::uintptr_t, std::uint64_t> key(const StreamRef& s) noexcept {
    return {s.context_.address(), s.id_ != 0 ? s.id_ : s.handle_};
  }
  // The id of the owning Stream (0 for the default streams), for the debug view check.
  static std::uint64_t owner_id(const StreamRef& s) noexcept { return s.id_; }
};

}  // namespace drvshim::detail
