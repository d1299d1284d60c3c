// SPDX-License-Identifier: Apache-2.0
#include <drvshim_recorder/trace_file.hpp>

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <climits>
#include <cstring>
#include <utility>

namespace drvshim::recorder {
namespace {
// Room kept below the cap for the truncation notice.
constexpr std::uint64_t kFinalReserve = 4096;
// Lines are grouped into writes of at most this many bytes (a longer line is one write of its own).
constexpr std::size_t kWriteGroup = std::size_t{64} * 1024;

// O_NONBLOCK: opening a FIFO for writing must not hang; it is refused by the checks.
constexpr int kOpenFlags = O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK;

// The end of the last whole line within the first `limit` bytes of `lines` (0: none).
std::size_t whole_lines_within(std::string_view lines, std::size_t limit) noexcept {
  if (limit >= lines.size()) return lines.size();
  if (limit == 0) return 0;
  const std::size_t nl = lines.rfind('\n', limit - 1);
  return nl == std::string_view::npos ? 0 : nl + 1;
}
}  // namespace

std::string TraceFile::open(const std::string& path, std::uint64_t max_bytes) {
  std::string absolute = path;
  if (!path.empty() && path.front() != '/') {
    // The file is opened again by this path: a later chdir() of the program must not move it.
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof cwd) == nullptr) {
      return fmt::format("cannot resolve the relative path \"{}\": {}", path, std::strerror(errno));
    }
    absolute = std::string(cwd) + "/" + path;
  }
  const int fd = ::open(absolute.c_str(), kOpenFlags | O_CREAT, 0600);
  if (fd < 0) {
    const int err = errno;
    if (err == ENXIO) {  // a FIFO without a reader (O_NONBLOCK), or a socket
      return fmt::format("\"{}\" is not a regular file", path);
    }
    if (err == ELOOP) {
      return fmt::format("\"{}\" is a symbolic link; the trace file is never opened through one (give the real path)",
                         path);
    }
    return fmt::format("cannot open \"{}\" for appending: {}", path, std::strerror(err));
  }
  struct stat st {};
  std::string why;
  if (::fstat(fd, &st) != 0) {
    why = fmt::format("cannot stat \"{}\": {}", path, std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    why = fmt::format("\"{}\" is not a regular file", path);
  } else if (st.st_uid != ::geteuid()) {
    why =
        fmt::format("\"{}\" belongs to uid {}, not to this user (uid {}); the trace is written only to your own files",
                    path, st.st_uid, ::geteuid());
  }
  ::close(fd);
  if (!why.empty()) return why;
  if (fd_ >= 0 && still_ours(fd_)) ::close(fd_);
  fd_ = -1;
  path_ = std::move(absolute);
  dev_ = st.st_dev;
  ino_ = st.st_ino;
  max_bytes_ = max_bytes;
  capped_ = false;
  stopped_ = false;
  failed_what_ = nullptr;
  failed_errno_ = 0;
  return {};
}

void TraceFile::swap(TraceFile& other) noexcept {
  std::swap(fd_, other.fd_);
  std::swap(path_, other.path_);
  std::swap(dev_, other.dev_);
  std::swap(ino_, other.ino_);
  std::swap(max_bytes_, other.max_bytes_);
  std::swap(capped_, other.capped_);
  std::swap(stopped_, other.stopped_);
  std::swap(failed_what_, other.failed_what_);
  std::swap(failed_errno_, other.failed_errno_);
}

void TraceFile::close() noexcept {
  if (fd_ >= 0 && still_ours(fd_)) ::close(fd_);
  fd_ = -1;
  std::string().swap(path_);
  capped_ = false;
  stopped_ = false;
  failed_what_ = nullptr;
  failed_errno_ = 0;
}

std::string TraceFile::failure() const {
  if (failed_what_ == nullptr) return {};
  return failed_errno_ != 0 ? fmt::format("{}: {}", failed_what_, std::strerror(failed_errno_))
                            : std::string(failed_what_);
}

void TraceFile::fail(const char* what, int err) noexcept {
  failed_what_ = what;
  failed_errno_ = err;
}

// The lowest descriptor number the trace file is moved to: far above the numbers programs
// get from open() and close in loops (3, 4, ...), below the process's limit.
int high_descriptor_floor() noexcept {
  rlimit lim{};
  if (::getrlimit(RLIMIT_NOFILE, &lim) != 0) return 3;
  if (lim.rlim_cur == RLIM_INFINITY || lim.rlim_cur > 1100) return 1024;
  return lim.rlim_cur > 96 ? static_cast<int>(lim.rlim_cur) - 32 : 3;
}

bool TraceFile::still_ours(int fd) const noexcept {
  struct stat st {};
  return ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == dev_ && st.st_ino == ino_;
}

int TraceFile::reopen() noexcept {
  int low = -1;
  do {
    low = ::open(path_.c_str(), kOpenFlags);
  } while (low < 0 && errno == EINTR);
  if (low < 0) {
    if (errno == EMFILE || errno == ENFILE) return kTransient;  // the program's descriptors: later, maybe
    fail("the trace file could not be opened again", errno);
    return -1;
  }
  if (!still_ours(low)) {
    // Either the path names another file now (the trace was replaced), or another thread of
    // the program closed this number and reused it already: then it is the program's.
    struct stat st {};
    if (::stat(path_.c_str(), &st) != 0 || st.st_dev != dev_ || st.st_ino != ino_) {
      if (::fstat(low, &st) == 0 && (st.st_dev != dev_ || st.st_ino != ino_) && ::stat(path_.c_str(), &st) == 0 &&
          st.st_dev == dev_ && st.st_ino == ino_) {
        return kTransient;
      }
      fail("the trace file was removed or replaced by another file", 0);
    }
    return kTransient;
  }
  int fd = low;
  static const int floor = high_descriptor_floor();
  if (floor > low) {
    if (const int high = ::fcntl(low, F_DUPFD_CLOEXEC, floor); high >= 0) {
      if (!still_ours(high)) {
        ::close(high);  // a duplicate of what the program put at `low` meanwhile: ours to close
        return kTransient;
      }
      if (still_ours(low)) ::close(low);  // never a number the program took meanwhile
      fd = high;
    }
  }
  if (const int fl = ::fcntl(fd, F_GETFL); fl >= 0) (void)::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

int TraceFile::usable_descriptor() noexcept {
  if (fd_ >= 0 && still_ours(fd_)) return fd_;
  fd_ = -1;  // closed or reused by the program: not ours to close
  for (int attempt = 0; attempt < 8; ++attempt) {
    const int fd = reopen();
    if (fd >= 0) return fd_ = fd;
    if (fd != kTransient || failed()) return -1;
  }
  return -1;
}

std::size_t TraceFile::write_lines(std::string_view lines) noexcept {
  if (stopped() || lines.empty()) return 0;
  int fd = usable_descriptor();
  if (fd < 0) return 0;
  std::string_view todo = lines;
  struct stat before {};
  // The size is read from the file, not counted here: other processes append too.
  const std::uint64_t size = ::fstat(fd, &before) == 0 ? static_cast<std::uint64_t>(before.st_size) : 0;
  if (max_bytes_ != 0) {
    const std::uint64_t room = max_bytes_ > kFinalReserve ? max_bytes_ - kFinalReserve : 0;
    const std::uint64_t fits = room > size ? room - size : 0;
    if (fits < todo.size()) {
      todo = todo.substr(0, whole_lines_within(todo, static_cast<std::size_t>(fits)));
      capped_ = true;
    }
  }
  std::size_t written = 0;
  while (written < todo.size()) {
    std::string_view group = todo.substr(written);
    if (group.size() > kWriteGroup) {
      // The last line end within the group, or the end of the first line when it alone is longer.
      std::size_t cut = whole_lines_within(group, kWriteGroup);
      if (cut == 0) cut = group.find('\n') + 1;
      if (cut == 0) cut = group.size();
      group = group.substr(0, cut);
    }
    std::size_t done = 0;
    while (done < group.size()) {
      // Another thread of the program may have closed this descriptor, and its number may
      // now be one of the program's files: checked before every write, reopened when so.
      if (done == 0 && !still_ours(fd)) {
        fd = usable_descriptor();
        if (fd < 0) return written;
      }
      const ssize_t n = ::write(fd, group.data() + done, group.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && errno == EBADF && done == 0) continue;  // closed under us: reopened above
      if (n <= 0) {
        const int err = n < 0 ? errno : ENOSPC;
        // This batch is cut off again when nobody appended after it: the file ends on a whole
        // record, and the space it took holds the notice saying why the trace ends here.
        struct stat st {};
        if (still_ours(fd)) {
          if (::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) == size + written + done) {
            (void)::ftruncate(fd, static_cast<off_t>(size));
            written = 0;
          } else if (done > 0 && ::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) >= done) {
            (void)::ftruncate(fd, static_cast<off_t>(static_cast<std::uint64_t>(st.st_size) - done));
          }
          ::close(fd);
          fd_ = -1;
        }
        fail("writing the trace file failed", err);
        return written;
      }
      done += static_cast<std::size_t>(n);
    }
    written += done;
  }
  return written;
}

void TraceFile::write_final(std::string_view line) noexcept {
  if (path_.empty() || stopped_) return;
  stopped_ = true;
  int fd = -1;
  do {
    fd = ::open(path_.c_str(), kOpenFlags);
  } while (fd < 0 && errno == EINTR);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_dev == dev_ && st.st_ino == ino_) {
    std::size_t done = 0;
    while (done < line.size()) {
      const ssize_t n = ::write(fd, line.data() + done, line.size() - done);
      if (n < 0 && errno == EINTR) continue;
      if (n <= 0) {
        if (done > 0 && ::fstat(fd, &st) == 0 && static_cast<std::uint64_t>(st.st_size) >= done) {
          (void)::ftruncate(fd, static_cast<off_t>(static_cast<std::uint64_t>(st.st_size) - done));
        }
        break;
      }
      done += static_cast<std::size_t>(n);
    }
  }
  ::close(fd);
}

}  // namespace drvshim::recorder
