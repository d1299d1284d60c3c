// SPDX-License-Identifier: Apache-2.0
#include "cache/directory_trust.hpp"

#include <fmt/format.h>

#include <cerrno>
#include <utility>

namespace drvshim::detail {

std::string directory_problem(const struct stat& st, const std::string& path, bool allow_root_owner) {
  if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a directory", path);
  if (st.st_uid != me() && !(allow_root_owner && st.st_uid == 0)) {
    return fmt::format("{} is owned by uid {}, not by this user (uid {})", path, st.st_uid, me());
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fmt::format("{} is writable by group or others (mode {:04o}); chmod 700 it", path, st.st_mode & 07777);
  }
  return {};
}

namespace {

// `fd` (an open directory) when its owner and mode can be trusted; otherwise
// closed, with `problem` saying why.
Fd trusted_or_closed(Fd fd, const std::string& shown, bool allow_root_owner, std::string& problem) {
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) {
    problem = fmt::format("cannot stat {}: {}", shown, errno_text(errno));
    return {};
  }
  problem = directory_problem(st, shown, allow_root_owner);
  if (!problem.empty()) return {};
  return fd;
}

}  // namespace
Fd open_subdir(int parent, const std::string& name, const std::string& shown, bool create, bool allow_root_owner,
               std::string& problem, bool* missing) {
  if (missing != nullptr) *missing = false;
  constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  Fd fd(::openat(parent, name.c_str(), kFlags));
  // Created only when missing: an existing cache opens with no extra system call.
  if (!fd && errno == ENOENT && create) {
    if (::mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST) {
      problem = fmt::format("cannot create {}: {}", shown, errno_text(errno));
      return {};
    }
    fd = Fd(::openat(parent, name.c_str(), kFlags));
  }
  if (!fd) {
    if (missing != nullptr) *missing = errno == ENOENT;
    problem = errno == ELOOP || errno == ENOTDIR ? fmt::format("{} is a symbolic link or not a directory", shown)
                                                 : fmt::format("cannot open {}: {}", shown, errno_text(errno));
    return {};
  }
  return trusted_or_closed(std::move(fd), shown, allow_root_owner, problem);
}

std::string check_subdir(int parent, const std::string& name, const std::string& shown, bool allow_root_owner,
                         bool* missing) {
  if (missing != nullptr) *missing = false;
  struct stat st {};
  if (::fstatat(parent, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
    if (missing != nullptr) *missing = errno == ENOENT;
    return fmt::format("cannot open {}: {}", shown, errno_text(errno));
  }
  if (S_ISLNK(st.st_mode)) return fmt::format("{} is a symbolic link or not a directory", shown);
  return directory_problem(st, shown, allow_root_owner);
}

Fd open_checked_beneath(int parent, const char* path, const std::string& shown, bool allow_root_owner,
                        std::string& problem) {
  Fd fd(open_beneath(parent, path, O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  if (!fd) {
    if (errno == ELOOP || errno == ENOTDIR) problem = fmt::format("{} is a symbolic link or not a directory", shown);
    return {};
  }
  return trusted_or_closed(std::move(fd), shown, allow_root_owner, problem);
}

void create_parents(const std::string& path) {
  for (std::size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    const std::string parent = path.substr(0, pos);
    if (::mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST) return;
  }
}

}  // namespace drvshim::detail
