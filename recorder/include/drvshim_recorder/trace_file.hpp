// SPDX-License-Identifier: Apache-2.0
#pragma once
// The trace file: opened safely, written in whole records, capped.
#include <sys/types.h>

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
  // Exchanges the files of two objects.
  void swap(TraceFile& other) noexcept;

  /// Checks that `path` can be the trace file: opened for appending with
  /// O_NOFOLLOW (a symbolic link is refused, not followed), created 0600, and
  /// refused unless it is a regular file owned by this user. Returns "" or why
  /// not. No descriptor of the program's range is kept: writes open the file
  /// again by its absolute path when needed, and check before every write that its
  /// descriptor (kept far above the numbers programs reuse) is still that file
  /// (same device and inode), so a program that closes or reuses descriptors
  /// never receives trace lines and a write never goes to a file that replaced
  /// the trace.
  std::string open(const std::string& path, std::uint64_t max_bytes);
  void close() noexcept;
  bool is_open() const noexcept { return !path_.empty(); }

  /// Appends whole lines (each ending in '\n') with O_APPEND writes that never
  /// split a line, so the records of several processes sharing the file never
  /// interleave. Writes the leading lines that fit under the cap; returns how
  /// many bytes of `lines` were written. Fewer than all: the file is at its cap
  /// (capped()) or a write failed (failed(), with why in failure(): the disk is
  /// full, the file is gone); a line the failing write left half-written is cut
  /// off again, so the file only ever holds whole lines. The caller then writes
  /// one last record with write_final().
  std::size_t write_lines(std::string_view lines) noexcept;
  /// Writes `line` even past the cap (the truncation notice) and stops the file.
  void write_final(std::string_view line) noexcept;
  bool capped() const noexcept { return capped_; }
  bool failed() const noexcept { return failed_what_ != nullptr; }
  /// Why writing failed ("" when it did not): what failed and the system's message.
  std::string failure() const;
  /// Whether nothing more is written (capped, failed or closed).
  bool stopped() const noexcept { return path_.empty() || capped_ || stopped_ || failed_what_ != nullptr; }
  std::uint64_t max_bytes() const noexcept { return max_bytes_; }

 private:
  // The trace file opened again, moved to a high descriptor: the descriptor, -1 (failed())
  // when it is gone or replaced, or kTransient when the program's descriptors got in the way.
  int reopen() noexcept;
  static constexpr int kTransient = -2;
  // The cached descriptor while it is still the trace file, else a new one (a few tries);
  // -1 when there is none for now.
  int usable_descriptor() noexcept;
  // Whether `fd` is still the trace file (same device and inode).
  bool still_ours(int fd) const noexcept;
  void fail(const char* what, int err) noexcept;
  std::string path_;
  int fd_ = -1;  // kept between batches, far above the program's low numbers; checked before use
  dev_t dev_ = 0;
  ino_t ino_ = 0;
  std::uint64_t max_bytes_ = 0;
  bool capped_ = false;
  bool stopped_ = false;
  const char* failed_what_ = nullptr;  // a string literal
  int failed_errno_ = 0;
};

}  // namespace drvshim::recorder
