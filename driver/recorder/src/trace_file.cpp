#include <drvshim_recorder/trace_file.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace drvshim::recorder {
namespace {
// Room kept below the cap for the truncation notice.
constexpr std::uint64_t kFinalReserve = 4096;
// Lines are grouped into writes of at most this many bytes (a longer line is one write of its own).
constexpr std::size_t kWriteGroup = std::size_t{64} * 1024;
}  // namespace

std::string TraceFile::open(const std::string& path, std::uint64_t max_bytes) {
  // O_NONBLOCK: opening a FIFO for writing must not hang; it is refused below.
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK, 0600);
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
  } else if (const int fl = ::fcntl(fd, F_GETFL); fl < 0 || ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) != 0) {
    why = fmt::format("cannot configure \"{}\": {}", path, std::strerror(errno));
  }
  if (!why.empty()) {
    ::close(fd);
    return why;
  }
  close();
  fd_ = fd;
  max_bytes_ = max_bytes;
  capped_ = false;
  return {};
}

void TraceFile::swap(TraceFile& other) noexcept {
  std::swap(fd_, other.fd_);
  std::swap(max_bytes_, other.max_bytes_);
  std::swap(capped_, other.capped_);
}

void TraceFile::close() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

bool TraceFile::write_all(std::string_view bytes) noexcept {
  while (!bytes.empty()) {
    const ssize_t n = ::write(fd_, bytes.data(), bytes.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return false;
    }
    bytes.remove_prefix(static_cast<std::size_t>(n));
  }
  return true;
}

bool TraceFile::write_lines(std::string_view lines) noexcept {
  if (fd_ < 0 || capped_) return false;
  if (max_bytes_ != 0) {
    struct stat st {};
    // The size is read from the file, not counted here: other processes append too.
    const std::uint64_t size = ::fstat(fd_, &st) == 0 ? static_cast<std::uint64_t>(st.st_size) : 0;
    const std::uint64_t room = max_bytes_ > kFinalReserve ? max_bytes_ - kFinalReserve : 0;
    if (size + lines.size() > room) return false;
  }
  while (!lines.empty()) {
    std::size_t cut = lines.size();
    if (cut > kWriteGroup) {
      // The last line end within the group, or the end of the first line when it alone is longer.
      const std::size_t nl = lines.rfind('\n', kWriteGroup - 1);
      cut = nl != std::string_view::npos ? nl + 1 : lines.find('\n') + 1;
      if (cut == 0) cut = lines.size();
    }
    if (!write_all(lines.substr(0, cut))) return false;
    lines.remove_prefix(cut);
  }
  return true;
}

void TraceFile::write_final(std::string_view line) noexcept {
  if (fd_ < 0 || capped_) return;
  (void)write_all(line);
  capped_ = true;
}

}  // namespace drvshim::recorder
