// SPDX-License-Identifier: Apache-2.0
#include "memory/memory_errors.hpp"

#include <drvshim/error.hpp>

#include <utility>

#include "log_internal.hpp"
#include "seam/core.hpp"

namespace drvshim::detail {

std::string bytes_text(std::size_t n) {
  if (n >= (std::size_t{1} << 20)) return fmt::format("{} bytes ({:.2f} MiB)", n, static_cast<double>(n) / (1u << 20));
  return fmt::format("{} bytes", n);
}

std::string context_text(const ContextRef& ctx) {
  return fmt::format("device {}, context 0x{:x}", ctx.device().ordinal(), ctx.address());
}

void require_bytes(const char* api, std::size_t bytes) {
  if (bytes == 0) {
    throw InvalidArgumentError(api, "an allocation of 0 bytes was requested",
                               "ask for at least one byte; the driver itself answers CUDA_ERROR_INVALID_VALUE");
  }
}

void check_whole_view(const char* api, const char* empty, bool held, std::size_t bytes, std::size_t element_size) {
  if (!held) throw InvalidArgumentError(api, empty);
  if (bytes % element_size != 0) {
    throw InvalidArgumentError(
        api, fmt::format("{} is not a multiple of the element size {}", bytes_text(bytes), element_size));
  }
}

void raise_out_of_memory(const ContextRef& ctx, const char* api, std::string objects, std::size_t bytes,
                         bool device_memory) {
  std::size_t free_bytes = 0;
  std::size_t total_bytes = 0;
  if (device_memory) {
    try {
      const MemoryInfo info = ctx.memory_info();
      free_bytes = info.free;
      total_bytes = info.total;
    } catch (const Error&) {
      // The numbers are a courtesy; the allocation failure is the error.
    }
  }
  throw OutOfMemoryError(
      ErrorDetails{api, CUDA_ERROR_OUT_OF_MEMORY, std::move(objects),
                   device_memory ? "free device memory, or use smaller or stream-ordered allocations"
                                 : "pin less host memory at once (pinned memory is limited by RAM and ulimit -l)",
                   false},
      bytes, free_bytes, total_bytes);
}

}  // namespace drvshim::detail
