#pragma once
// The recorder's clock: CLOCK_MONOTONIC in nanoseconds, shared by every
// process on the machine, so records of a parent and its children line up.
#include <time.h>

#include <cstdint>

namespace drvshim::recorder {

inline std::int64_t now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  return static_cast<std::int64_t>(ts.tv_sec) * 1'000'000'000 + ts.tv_nsec;
}

}  // namespace drvshim::recorder
