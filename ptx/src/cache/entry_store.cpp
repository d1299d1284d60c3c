// SPDX-License-Identifier: Apache-2.0
// Entries on disk: the checked fan-out directories, reading an entry (never
// blocking, never following a link, every check before use, a bad one
// removed) and writing one (temporary file, fsync, rename).
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <random>

#include "cache/cache_core.hpp"
#include "cache/cache_log.hpp"
#include "cache/directory_trust.hpp"

namespace drvshim::detail {

void CacheCore::lazy_dirs() const {
  std::lock_guard<std::mutex> lock(dirs_mutex);
  if (dirs_tried || !disk || options.read_only) return;
  dirs_tried = true;
  std::string problem;
  if (!v1_locked()) return;
  locks = open_subdir(v1.fd, "locks", directory + "/v1/locks", true, false, problem);
  if (!problem.empty())
    cache_log(log::Level::warn, "compile cache: {}; compiles here will not wait for other processes", problem);
  problem.clear();
  tmp = open_subdir(v1.fd, "tmp", directory + "/v1/tmp", true, false, problem);
  if (!problem.empty()) cache_log(log::Level::warn, "compile cache: {}; no entry can be written", problem);
}

const Fd& CacheCore::v1_locked() const {
  if (!v1 && disk) {
    std::string problem;
    v1 = open_subdir(root.fd, "v1", directory + "/v1", !options.read_only, options.read_only, problem);
    if (!problem.empty()) cache_log(log::Level::warn, "compile cache: {}; nothing can be written", problem);
  }
  return v1;
}

void CacheCore::warn_once(const std::string& path, const std::string& text) const {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!warned.insert(path).second) return;
  }
  cache_log(log::Level::warn, "compile cache: {}", text);
}

Fd CacheCore::fanout(int parent, const std::string& shown, const std::string& hex, bool create, std::string& problem,
                     bool& missing) const {
  const std::string path = shown + "/" + hex.substr(0, 2);
  Fd dir = open_subdir(parent, hex.substr(0, 2), path, create, options.read_only, problem, &missing);
  if (!dir && !missing) warn_once(path, problem + "; the files under it are not used");
  return dir;
}

std::shared_ptr<const Stored> CacheCore::read_entry(const std::string& hex, const Sha256::Digest& key,
                                                    std::string& reason) const {
  const std::string sub = hex.substr(0, 2);
  const std::string name = hex.substr(2);
  const std::string shown = directory + "/v1/objects/" + sub;
  // Non-blocking: a FIFO planted as an entry must not hang the compile; its type is checked next.
  constexpr int kFlags = O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC;
  // One openat2 with no link anywhere on the way where the kernel has it.
  Fd fd(open_beneath(objects.fd, (sub + "/" + name).c_str(), kFlags));
  int err = fd ? 0 : errno;
  Fd dir;  // the fan-out directory: opened only without openat2, or to remove the entry
  std::string problem;
  bool missing = false;
  if (err == ENOSYS) {
    dir = fanout(objects.fd, directory + "/v1/objects", hex, false, problem, missing);
    if (dir) {
      fd = Fd(::openat(dir.fd, name.c_str(), kFlags | O_NOFOLLOW));
      err = fd ? 0 : errno;
    }
  } else {
    // The fan-out directory's checks without opening it: objects/ is checked,
    // so nobody else can replace the directory in between.
    problem = check_subdir(objects.fd, sub, shown, options.read_only, &missing);
    if (!problem.empty() && !missing) warn_once(shown, problem + "; the files under it are not used");
  }
  if (!problem.empty()) {
    reason = missing ? "no entry" : "unsafe directory (" + problem + ")";
    return nullptr;
  }
  auto entry_dir = [&]() -> int {
    if (!dir) {
      std::string ignored;
      bool gone = false;
      dir = fanout(objects.fd, directory + "/v1/objects", hex, false, ignored, gone);
    }
    return dir.fd;
  };
  if (!fd) {
    const bool link = err == ELOOP;
    reason = link ? "unsafe entry (a symbolic link)" : "no entry";
    if (link) {
      bump([](CacheStats& s) { ++s.corrupt_removed; });
      if (!options.read_only && entry_dir() >= 0) (void)::unlinkat(dir.fd, name.c_str(), 0);
    }
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    problem = "unsafe entry (not a regular file)";
  } else if (st.st_uid != me() && !(options.read_only && st.st_uid == 0)) {
    problem = fmt::format("unsafe entry (owned by uid {})", st.st_uid);
  } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    problem = "unsafe entry (writable by group or others)";
  } else if (static_cast<std::uint64_t>(st.st_size) > kMaxEntryBytes) {
    problem = "corrupt entry (larger than any entry)";
  }
  auto stored = std::make_shared<Stored>();
  if (problem.empty()) {
    std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::pread(fd.fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    bytes.resize(done);
    if (std::string why = decode(bytes, key, *stored); !why.empty()) problem = "corrupt entry (" + why + ")";
  }
  if (!problem.empty()) {
    reason = problem;
    if (options.read_only) return nullptr;
    // Removed only if it is still the file (or directory) just judged: another process may
    // have replaced it. A directory there would fail every write of this key: it goes too.
    struct stat now {};
    const bool same = entry_dir() >= 0 && ::fstatat(dir.fd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
                      now.st_ino == st.st_ino && now.st_dev == st.st_dev;
    if (same && (S_ISDIR(now.st_mode) ? remove_tree(dir.fd, name) : ::unlinkat(dir.fd, name.c_str(), 0) == 0)) {
      bump([](CacheStats& s) { ++s.corrupt_removed; });
      cache_log(log::Level::info, "compile cache: removed entry {}: {}; it will be recompiled", hex.substr(0, 16),
                problem);
    } else if (same) {
      warn_once(shown + "/" + name, fmt::format("{}/{} ({}) cannot be removed ({}); its key is compiled every time",
                                                shown, name, problem, errno_text(errno)));
    }
    return nullptr;
  }
  // LRU: a hit refreshes the entry's time, at most once a minute, so reads stay reads.
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  if (!options.read_only &&
      std::chrono::nanoseconds(now).count() - static_cast<std::int64_t>(mtime_ns(st)) > 60'000'000'000ll) {
    (void)::futimens(fd.fd, nullptr);
  }
  return stored;
}

bool CacheCore::write_entry(const std::string& hex, const Sha256::Digest& key, const Stored& s) const {
  const std::string bytes = encode(key, s);
  // An entry larger than the whole cache is not written: storing it would evict
  // everything, itself included, on every write.
  if (bytes.size() > options.max_bytes) {
    bump([](CacheStats& st) { ++st.oversized; });
    cache_log(log::Level::info, "compile cache: entry {} not stored: its {} bytes exceed the cache's cap of {} bytes",
              hex.substr(0, 16), bytes.size(), options.max_bytes);
    return false;
  }
  std::random_device rd;
  const std::string tmp_name = fmt::format("{:08x}{:08x}{:08x}{:08x}.tmp", rd(), rd(), rd(), rd());
  const Fd& staging = tmp_dir();
  Fd fd(staging ? ::openat(staging.fd, tmp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600)
                : -1);
  std::string problem;
  if (!staging) {
    problem = "its temporary directory v1/tmp cannot be opened";
  } else if (!fd) {
    problem = "create: " + errno_text(errno);
  } else {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd.fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    if (done != bytes.size()) {
      problem = "write: " + errno_text(errno);
    } else if (::fsync(fd.fd) != 0) {
      problem = "fsync: " + errno_text(errno);
    }
    // Closed before the rename, so no reader ever sees a file still being written.
    fd.reset();
    std::string dir_problem;
    bool missing = false;
    Fd dir = problem.empty() ? fanout(objects.fd, directory + "/v1/objects", hex, true, dir_problem, missing) : Fd();
    if (problem.empty() && !dir) problem = "its directory: " + dir_problem;
    if (problem.empty() && ::renameat(staging.fd, tmp_name.c_str(), dir.fd, hex.substr(2).c_str()) != 0) {
      problem = "rename: " + errno_text(errno);
    }
    if (!problem.empty()) (void)::unlinkat(staging.fd, tmp_name.c_str(), 0);
  }
  if (!problem.empty()) {
    bump([](CacheStats& st) { ++st.write_failures; });
    cache_log(log::Level::warn, "compile cache: could not store entry {} in {}: {}", hex.substr(0, 16), directory,
              problem);
    return false;
  }
  bump([](CacheStats& st) { ++st.writes; });
  after_write(hex, bytes.size());
  return true;
}

}  // namespace drvshim::detail
