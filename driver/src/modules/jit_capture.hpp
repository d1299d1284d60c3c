// SPDX-License-Identifier: Apache-2.0
#pragma once
// The JIT options drvshim passes to every module load, library load and link:
// the info and error logs, the wall time and verbose logging. Header-only and
// free of driver calls, so the unit tests check the sizing and the reading of
// the option slots directly.
#include <cuda.h>

#include <drvshim/module.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

namespace drvshim::detail {

// Room for each log of a JIT of `image`. ptxas's verbose info log takes about
// 300 bytes per function plus its name two or three times (a fixed 16 KiB
// holds about 55 kernels on the H200), so PTX gets 512
// bytes and four times the name for every .entry and .func it declares, on
// top of a 16 KiB base. Other images are JIT-compiled only when they carry
// PTX for another architecture (fatbins): they get 64 KiB. A log that still
// fills its buffer is marked as cut (finish_jit_log).
inline std::size_t jit_log_bytes(std::span<const std::byte> image, ModuleFormat format) noexcept {
  constexpr std::size_t kBase = std::size_t{16} * 1024;
  constexpr std::size_t kCap = 64u << 20;
  if (format != ModuleFormat::ptx) return std::size_t{64} * 1024;
  const std::string_view text(reinterpret_cast<const char*>(image.data()), image.size());
  std::size_t bytes = kBase;
  for (const std::string_view keyword : {std::string_view(".entry"), std::string_view(".func")}) {
    for (std::size_t pos = text.find(keyword); pos != std::string_view::npos && bytes < kCap;
         pos = text.find(keyword, pos + keyword.size())) {
      // The name runs to the parameter list; ".func (.param ...) name(" has its return value first.
      std::size_t start = pos + keyword.size();
      std::size_t open = text.find('(', start);
      if (open != std::string_view::npos &&
          text.substr(start, open - start).find_first_not_of(" \t\r\n") == std::string_view::npos) {
        const std::size_t close = text.find(')', open);
        start = close == std::string_view::npos ? open : close + 1;
        open = text.find('(', start);
      }
      start = std::min(text.find_first_not_of(" \t\r\n", start), open);
      const std::size_t name = open == std::string_view::npos ? 64 : std::min<std::size_t>(open - start, 4096);
      bytes += 512 + 4 * name;
    }
  }
  return std::min(bytes, kCap);
}

// The text in a log buffer the driver filled, up to its NUL. The driver caps a
// log at the buffer's size, NUL included, without saying so: a log that fills
// the buffer may have been cut, and says so at its end.
inline std::string finish_jit_log(const std::string& buffer, const char* which) {
  const std::size_t length = strnlen(buffer.data(), buffer.size());
  std::string out(buffer.data(), length);
  if (!buffer.empty() && length + 1 >= buffer.size()) {
    out += std::string("\n[drvshim: the JIT ") + which + " log filled its " + std::to_string(buffer.size()) +
           "-byte buffer; anything after this point was cut]";
  }
  return out;
}

// The options and their value slots, at one address for as long as the driver
// may write into them (a library under lazy loading JIT-compiles later).
struct JitCapture {
  static constexpr unsigned kCount = 6;
  static constexpr unsigned kWallTimeSlot = 4;

  explicit JitCapture(std::size_t log_bytes)
      : info(log_bytes, '\0'),
        error(log_bytes, '\0'),
        options{CU_JIT_INFO_LOG_BUFFER,  CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES,
                CU_JIT_WALL_TIME,        CU_JIT_LOG_VERBOSE},
        values{info.data(),  reinterpret_cast<void*>(static_cast<std::uintptr_t>(log_bytes)),
               error.data(), reinterpret_cast<void*>(static_cast<std::uintptr_t>(log_bytes)),
               nullptr,      reinterpret_cast<void*>(std::uintptr_t{1})} {}
  JitCapture(const JitCapture&) = delete;
  JitCapture& operator=(const JitCapture&) = delete;

  // CU_JIT_WALL_TIME is an output written into the option's value slot itself
  // ("overwrites the option value", a float), not through a pointer in it.
  float wall_ms() const noexcept {
    float ms = 0.0f;
    std::memcpy(&ms, &values[kWallTimeSlot], sizeof ms);
    return ms;
  }
  // The error log as the driver left it (no note), "" when it wrote none.
  std::string error_text() const { return std::string(error.data(), strnlen(error.data(), error.size())); }
  JitLog take() const { return JitLog{finish_jit_log(info, "info"), finish_jit_log(error, "error"), wall_ms()}; }

  std::string info;
  std::string error;
  CUjit_option options[kCount];
  void* values[kCount];
};

}  // namespace drvshim::detail
