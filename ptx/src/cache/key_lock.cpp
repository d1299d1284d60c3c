// SPDX-License-Identifier: Apache-2.0
#include "cache/key_lock.hpp"

#include <sys/file.h>

#include <algorithm>
#include <chrono>
#include <thread>

#include "cache/cache_core.hpp"
#include "cache/cache_log.hpp"

namespace drvshim::detail {

std::shared_ptr<const Stored> lock_key(const CacheCore& c, const std::string& hex, const Sha256::Digest& key,
                                       KeyLock& lock) {
  const Fd& locks = c.locks_dir();
  std::string problem;
  bool missing = false;
  lock.dir = locks ? c.fanout(locks.fd, c.directory + "/v1/locks", hex, true, problem, missing) : Fd();
  lock.name = hex.substr(2);
  const auto deadline = std::chrono::steady_clock::now() + c.options.lock_timeout;
  auto pause = std::chrono::milliseconds(2);
  bool waited = false;
  while (lock.dir) {
    lock.fd = open_own_file(lock.dir.fd, lock.name.c_str(), O_RDWR | O_CREAT);
    if (!lock.fd) {
      c.warn_once(c.directory + "/v1/locks/" + hex,
                  fmt::format("{}/v1/locks/{}/{} is not a lock file of this user's; compiling without waiting for "
                              "other processes",
                              c.directory, hex.substr(0, 2), lock.name));
      break;
    }
    while (!(lock.held = ::flock(lock.fd.fd, LOCK_EX | LOCK_NB) == 0)) {
      if (errno != EWOULDBLOCK && errno != EINTR) break;
      if (std::chrono::steady_clock::now() >= deadline) {
        c.bump([](CacheStats& s) { ++s.lock_timeouts; });
        cache_log(log::Level::warn,
                  "compile cache: waited {} ms for another process compiling {}; compiling it here too",
                  c.options.lock_timeout.count(), hex.substr(0, 16));
        break;
      }
      waited = true;
      std::this_thread::sleep_for(pause);
      pause = std::min(pause * 2, std::chrono::milliseconds(100));
    }
    // Another process may have produced it while this one waited.
    std::string again;
    if (auto hit = c.read_entry(hex, key, again)) {
      if (waited) c.bump([](CacheStats& s) { ++s.lock_waits; });
      return hit;
    }
    // A lock on a file its writer (or the housekeeping) removed meanwhile: take the new one.
    if (lock.held && !still_linked(lock.dir.fd, lock.name, lock.fd.fd)) {
      lock.held = false;
      lock.fd.reset();
      continue;
    }
    break;
  }
  if (waited) c.bump([](CacheStats& s) { ++s.lock_waits; });
  return nullptr;
}

}  // namespace drvshim::detail
