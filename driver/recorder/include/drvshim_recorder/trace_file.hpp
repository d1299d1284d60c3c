#pragma once
// The trace file: opened safely, written in whole records, capped.
#include <cstdint>
#include <string>
#include <string_view>

namespace drvshim::recorder {

class TraceFile {
 public:
  TraceFile() = default;
  TraceFile(const TraceFile&) = delete;
  TraceFile& operator=(const TraceFile&) = delete;
  ~TraceFile() { close(); }
  // Exchanges the open files of two objects.
  void swap(TraceFile& other) noexcept;

  /// Opens `path` for appending: O_NOFOLLOW (a symbolic link is refused, not
  /// followed), created 0600, and refused unless it is a regular file owned
  /// by this user. Returns "" or why not.
  std::string open(const std::string& path, std::uint64_t max_bytes);
  void close() noexcept;
  bool is_open() const noexcept { return fd_ >= 0; }

  /// Appends whole lines (each ending in '\n') with O_APPEND writes that never
  /// split a line, so the records of several processes sharing the file never
  /// interleave. Returns false, writing nothing, when the lines would take the
  /// file past its cap; the caller then writes one last record with write_final().
  bool write_lines(std::string_view lines) noexcept;
  /// Writes `line` even past the cap (the truncation notice) and stops the file.
  void write_final(std::string_view line) noexcept;
  bool capped() const noexcept { return capped_; }
  std::uint64_t max_bytes() const noexcept { return max_bytes_; }

 private:
  bool write_all(std::string_view bytes) noexcept;
  int fd_ = -1;
  std::uint64_t max_bytes_ = 0;
  bool capped_ = false;
};

}  // namespace drvshim::recorder
