// SPDX-License-Identifier: Apache-2.0
#pragma once
// The compile cache's file-system primitives: descriptors closed on scope,
// time stamps, this user's own regular files opened without following a link
// or blocking, and directory listings.
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include <cstdint>
#include <string>
#include <utility>

namespace drvshim::detail {

// A closed-on-scope file descriptor.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) noexcept : fd(f) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd = std::exchange(o.fd, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() noexcept {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  explicit operator bool() const noexcept { return fd >= 0; }
};

std::string errno_text(int err);

// The effective user, asked once (it is checked against every file opened).
uid_t me() noexcept;

inline std::uint64_t mtime_ns(const struct stat& st) {
  return static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(st.st_mtim.tv_nsec);
}

inline std::uint64_t ctime_ns(const struct stat& st) {
  return static_cast<std::uint64_t>(st.st_ctim.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(st.st_ctim.tv_nsec);
}

// openat2 with no symbolic link allowed anywhere on `path` and nothing outside
// `dirfd`: one system call for a path whose directories were checked. -1 with
// errno ENOSYS where the kernel (or a seccomp filter) does not offer openat2.
int open_beneath(int dirfd, const char* path, int flags) noexcept;

// A regular file of this user's under `dirfd`, not writable by group or
// others, opened without following a link or blocking (a FIFO there is
// refused, never waited on); no fd otherwise.
Fd open_own_file(int dirfd, const char* name, int flags);

// Whether the lock `fd` holds is still the file at `name` (not one removed by
// its writer or the housekeeping since it was opened).
inline bool still_linked(int dirfd, const std::string& name, int fd) {
  struct stat mine {
  }, now{};
  return ::fstat(fd, &mine) == 0 && ::fstatat(dirfd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
         mine.st_dev == now.st_dev && mine.st_ino == now.st_ino;
}

// Removes the directory `name` under `parent` and everything in it, never
// following a link, at most 16 levels deep; whether it is gone (errno set when not).
bool remove_tree(int parent, const std::string& name, int depth = 0);

// Every regular file in each subdirectory of `parent` (objects/ or locks/):
// f(subdirectory fd, its name, file name, stat).
template <class F>
void for_each_entry(int parent, F&& f) {
  Fd scan(::openat(parent, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  DIR* top = scan ? ::fdopendir(scan.fd) : nullptr;
  if (top == nullptr) return;
  scan.fd = -1;  // owned by `top` now
  while (const dirent* d = ::readdir(top)) {
    if (d->d_name[0] == '.') continue;
    Fd sub(::openat(parent, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) continue;
    const int subfd = ::dup(sub.fd);
    DIR* inner = subfd >= 0 ? ::fdopendir(subfd) : nullptr;
    if (inner == nullptr) continue;
    while (const dirent* e = ::readdir(inner)) {
      if (e->d_name[0] == '.') continue;
      struct stat st {};
      if (::fstatat(sub.fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
      f(sub.fd, std::string(d->d_name), std::string(e->d_name), st);
    }
    ::closedir(inner);
  }
  ::closedir(top);
}

// Every regular file directly in `dirfd`: f(name, stat).
template <class F>
void for_each_file(int dirfd, F&& f) {
  const int copy = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = copy >= 0 ? ::fdopendir(copy) : nullptr;
  if (d == nullptr) {
    if (copy >= 0) ::close(copy);
    return;
  }
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    struct stat st {};
    if (::fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    f(std::string(e->d_name), st);
  }
  ::closedir(d);
}

}  // namespace drvshim::detail
