#include "cache_files.hpp"

#include <cstring>

namespace drvshim::detail {

std::string errno_text(int err) { return std::strerror(err); }

uid_t me() noexcept {
  static const uid_t uid = ::geteuid();
  return uid;
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
