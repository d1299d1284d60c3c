// SPDX-License-Identifier: Apache-2.0
#pragma once
// One compile per key across processes: a per-key flock'ed file under
// v1/locks, waited for with back-off and a bound (never a deadlock).
#include <memory>
#include <string>

#include "cache/cache_entry.hpp"
#include "cache/cache_files.hpp"
#include "cache/sha256.hpp"

namespace drvshim::detail {

struct CacheCore;

// Holds the per-key lock file; the lock goes with the descriptor.
struct KeyLock {
  Fd dir;
  Fd fd;
  std::string name;
  bool held = false;
  KeyLock() = default;
  KeyLock(const KeyLock&) = delete;
  KeyLock& operator=(const KeyLock&) = delete;
  // Whatever the compile's end (stored, uncached, failed), its lock file goes:
  // none is left behind for the housekeeping to find.
  ~KeyLock() { remove(); }
  // The holder removes its lock file while still holding it: later processes
  // find the entry (or compile), and waiters that opened the file see that its
  // path is gone once they hold it and take a new one.
  void remove() const {
    if (held && still_linked(dir.fd, name, fd.fd)) (void)::unlinkat(dir.fd, name.c_str(), 0);
  }
};

// Takes the lock of key `hex`, waiting (at most CacheOptions::lock_timeout)
// for another process compiling it; returns that process's entry when it
// appeared meanwhile. Without the lock (a timeout, a refused directory or
// file) the caller compiles anyway.
std::shared_ptr<const Stored> lock_key(const CacheCore& c, const std::string& hex, const Sha256::Digest& key,
                                       KeyLock& lock);

}  // namespace drvshim::detail
