// SPDX-License-Identifier: Apache-2.0
#include "cache/cache_files.hpp"

#include <linux/openat2.h>
#include <sys/syscall.h>

#include <atomic>
#include <cstring>
#include <string_view>
#include <vector>

namespace drvshim::detail {

std::string errno_text(int err) { return std::strerror(err); }

bool remove_tree(int parent, const std::string& name, int depth) {
  if (depth > 16) {
    errno = ELOOP;
    return false;
  }
  const int fd = ::openat(parent, name.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return false;
  DIR* d = ::fdopendir(fd);
  if (d == nullptr) {
    ::close(fd);
    return false;
  }
  std::vector<std::string> names;
  while (const dirent* e = ::readdir(d)) {
    const std::string_view n = e->d_name;
    if (n != "." && n != "..") names.emplace_back(n);
  }
  for (const auto& n : names) {
    struct stat st {};
    if (::fstatat(fd, n.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) continue;
    if (S_ISDIR(st.st_mode)) {
      (void)remove_tree(fd, n, depth + 1);
    } else {
      (void)::unlinkat(fd, n.c_str(), 0);
    }
  }
  ::closedir(d);
  return ::unlinkat(parent, name.c_str(), AT_REMOVEDIR) == 0;
}

uid_t me() noexcept {
  static const uid_t uid = ::geteuid();
  return uid;
}

int open_beneath(int dirfd, const char* path, int flags) noexcept {
#if defined(SYS_openat2)
  static std::atomic<bool> unavailable{false};
  if (!unavailable.load(std::memory_order_relaxed)) {
    open_how how{};
    how.flags = static_cast<__u64>(static_cast<unsigned>(flags));
    how.resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH;
    const long fd = ::syscall(SYS_openat2, dirfd, path, &how, sizeof how);
    if (fd >= 0) return static_cast<int>(fd);
    // A seccomp filter that does not know openat2 answers EPERM.
    if (errno != ENOSYS && errno != EPERM) return -1;
    unavailable.store(true, std::memory_order_relaxed);
  }
#endif
  errno = ENOSYS;
  return -1;
}

Fd open_own_file(int dirfd, const char* name, int flags) {
  Fd fd(::openat(dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600));
  struct stat st {};
  if (!fd || ::fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != me() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return {};
  }
  return fd;
}

}  // namespace drvshim::detail
