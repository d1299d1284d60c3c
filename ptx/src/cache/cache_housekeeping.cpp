// SPDX-License-Identifier: Apache-2.0
// The disk tier's size and tidiness with bounded work per write: a size
// ledger every writer updates, and now and then a full scan that totals the
// size, removes what crashed processes left and evicts the least recently used.
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <optional>

#include "cache/cache_core.hpp"
#include "cache/cache_log.hpp"

namespace drvshim::detail {
namespace {

// The size ledger (v1/ledger): "<bytes> <writes since the last scan>\n",
// changed under flock by every writer, so a write costs one small read and
// write instead of a listing of the whole cache.
constexpr std::uint64_t kScanEveryWrites = 256;
// A temporary file this old belongs to a writer that died (a write takes
// seconds at most).
constexpr std::uint64_t kStaleTemporaryNs = 3600ull * 1000000000ull;

struct Ledger {
  std::uint64_t bytes = 0;
  std::uint64_t writes = 0;
};

std::optional<Ledger> read_ledger(int fd) {
  char text[64] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  if (n <= 0) return std::nullopt;
  Ledger l;
  char* end = nullptr;
  l.bytes = std::strtoull(text, &end, 10);
  if (end == text || *end != ' ') return std::nullopt;
  char* end2 = nullptr;
  l.writes = std::strtoull(end + 1, &end2, 10);
  if (end2 == end + 1 || *end2 != '\n') return std::nullopt;
  return l;
}

void write_ledger(int fd, const Ledger& l) {
  const std::string text = fmt::format("{} {}\n", l.bytes, l.writes);
  if (::pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size())) {
    (void)::ftruncate(fd, static_cast<off_t>(text.size()));
  }
}

}  // namespace

std::uint64_t CacheCore::disk_bytes() const {
  std::uint64_t total = 0;
  if (!disk) return 0;
  for_each_entry(objects.fd, [&](int, const std::string&, const std::string&, const struct stat& st) {
    total += static_cast<std::uint64_t>(st.st_size);
  });
  Fd t(::openat(v1_dir().fd, "tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (t)
    for_each_file(t.fd,
                  [&](const std::string&, const struct stat& st) { total += static_cast<std::uint64_t>(st.st_size); });
  return total;
}

void CacheCore::after_write(const std::string& hex, std::uint64_t size) const {
  bool scan = true;
  if (Fd fd = open_own_file(v1_dir().fd, "ledger", O_RDWR | O_CREAT); fd && ::flock(fd.fd, LOCK_EX) == 0) {
    if (auto l = read_ledger(fd.fd)) {
      l->bytes += size;
      l->writes += 1;
      scan = l->bytes > options.max_bytes || l->writes >= kScanEveryWrites;
      write_ledger(fd.fd, *l);
    }
    // Missing or unreadable: a scan rebuilds it.
  }
  if (scan) housekeeping(hex);
}

// The occasional full scan, by one process at a time (gc.lock, never waited
// for: a busy collector is as good as this one): the true size (entries and
// live temporary files), temporary files of writers that died, lock files
// nobody holds, and eviction of the least recently used entries down to 90 %
// of the cap, never the entry `keep_hex` just written. Ends by resetting the ledger.
void CacheCore::housekeeping(const std::string& keep_hex) const {
  Fd gc = open_own_file(root.fd, "gc.lock", O_RDWR | O_CREAT);
  const bool locked = gc && ::flock(gc.fd, LOCK_EX | LOCK_NB) == 0;
  if (!locked) {
    // Busy: another process is collecting. Anything else would leave the cache
    // growing past its cap without a word: said once.
    if (!gc || (errno != EWOULDBLOCK && errno != EINTR)) {
      warn_once(
          directory + "/gc.lock",
          fmt::format("{}/gc.lock cannot be {} ({}); the cache is not kept under its size cap of {} bytes", directory,
                      gc ? "locked" : "opened as this user's lock file", errno_text(errno), options.max_bytes));
    }
    return;
  }
  bump([](CacheStats& s) { ++s.housekeeping_scans; });
  struct Item {
    std::uint64_t mtime;
    std::uint64_t size;
    std::string sub;
    std::string name;
    dev_t dev;
    ino_t ino;
  };
  std::vector<Item> items;
  std::uint64_t total = 0;
  for_each_entry(objects.fd, [&](int, const std::string& sub, const std::string& name, const struct stat& st) {
    total += static_cast<std::uint64_t>(st.st_size);
    if (sub + name == keep_hex) return;
    items.push_back({mtime_ns(st), static_cast<std::uint64_t>(st.st_size), sub, name, st.st_dev, st.st_ino});
  });
  std::uint64_t removed = 0;
  const std::uint64_t now = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch())
          .count());
  if (const Fd& t = tmp_dir()) {
    for_each_file(t.fd, [&](const std::string& name, const struct stat& st) {
      if (mtime_ns(st) + kStaleTemporaryNs < now && ::unlinkat(t.fd, name.c_str(), 0) == 0) {
        ++removed;
        cache_log(log::Level::info, "compile cache: removed {}/v1/tmp/{}, left by a writer that stopped", directory,
                  name);
      } else {
        total += static_cast<std::uint64_t>(st.st_size);
      }
    });
  }
  if (const Fd& l = locks_dir()) {
    // A lock file nobody holds is removed while held here; a process that
    // opened it before sees, once it holds the lock, that the path is gone and
    // takes a new one (lock_key), so one compile per key still holds.
    for_each_entry(l.fd, [&](int dirfd, const std::string&, const std::string& name, const struct stat&) {
      Fd lock = open_own_file(dirfd, name.c_str(), O_RDWR);
      if (lock && ::flock(lock.fd, LOCK_EX | LOCK_NB) == 0 && ::unlinkat(dirfd, name.c_str(), 0) == 0) ++removed;
    });
  }
  if (removed != 0) bump([&](CacheStats& s) { s.stale_removed += removed; });
  if (total > options.max_bytes) {
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.mtime < b.mtime; });
    const std::uint64_t target = options.max_bytes / 10 * 9;
    for (const auto& item : items) {
      if (total <= target) break;
      // Removed only if it is still the file listed, unused since: same
      // device, inode, size and time (a hit since refreshed its time).
      Fd dir(::openat(objects.fd, item.sub.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      struct stat st {};
      const bool same = dir && ::fstatat(dir.fd, item.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                        st.st_dev == item.dev && st.st_ino == item.ino &&
                        static_cast<std::uint64_t>(st.st_size) == item.size && mtime_ns(st) == item.mtime;
      if (same && ::unlinkat(dir.fd, item.name.c_str(), 0) == 0) {
        total -= item.size;
        bump([](CacheStats& s) { ++s.evictions; });
        cache_log(log::Level::debug, "compile cache: evicted {} ({} bytes, least recently used)",
                  (item.sub + item.name).substr(0, 14), item.size);
      }
    }
  }
  if (Fd fd = open_own_file(v1_dir().fd, "ledger", O_RDWR | O_CREAT); fd && ::flock(fd.fd, LOCK_EX) == 0) {
    write_ledger(fd.fd, Ledger{total, 0});
  }
}

}  // namespace drvshim::detail
