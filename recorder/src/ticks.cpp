// SPDX-License-Identifier: Apache-2.0
// ticks(): which counter it reads, and its rate against CLOCK_MONOTONIC
// (clock.hpp). The rate is measured, not looked up: from the reference point
// calibrate_ticks() takes to the moment a sum of ticks is converted.
#include <drvshim_recorder/clock.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <cstring>

namespace drvshim::recorder {

namespace detail {
std::atomic<bool> g_hardware_ticks{false};
std::uint64_t ticks_from_clock() noexcept { return static_cast<std::uint64_t>(now_ns()); }
}  // namespace detail

namespace {

struct Point {
  double tick;
  std::int64_t ns;
};

// Written once by calibrate_ticks() (before any conversion), read without a lock.
std::atomic<bool> g_calibrated{false};
Point g_origin{};

// A tick and a CLOCK_MONOTONIC reading taken together (the tick halfway across the read).
Point sample() noexcept {
  const std::uint64_t a = ticks();
  const std::int64_t ns = now_ns();
  const std::uint64_t b = ticks();
  return {static_cast<double>(a) + static_cast<double>(b - a) / 2, ns};
}

#if defined(__x86_64__)
// The kernel's verdict on the time-stamp counter: it runs at one rate (constant_tsc) and
// does not stop in deep sleep states (nonstop_tsc). Read from the first CPU's flags.
bool tsc_is_invariant() noexcept {
  const int fd = ::open("/proc/cpuinfo", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  char buf[8192];
  std::size_t used = 0;
  while (used < sizeof(buf) - 1) {
    const ssize_t n = ::read(fd, buf + used, sizeof(buf) - 1 - used);
    if (n <= 0) break;
    used += static_cast<std::size_t>(n);
  }
  ::close(fd);
  buf[used] = '\0';
  const char* line = std::strstr(buf, "\nflags");
  if (line == nullptr) return false;
  const char* end = std::strchr(line + 1, '\n');
  if (end == nullptr) end = buf + used;
  const char* colon = static_cast<const char*>(std::memchr(line, ':', static_cast<std::size_t>(end - line)));
  if (colon == nullptr) return false;
  auto has = [&](const char* word) {
    const std::size_t w = std::strlen(word);
    for (const char* p = colon + 1; p < end;) {
      while (p < end && *p == ' ') ++p;
      const char* q = p;
      while (q < end && *q != ' ') ++q;
      if (static_cast<std::size_t>(q - p) == w && std::memcmp(p, word, w) == 0) return true;
      p = q;
    }
    return false;
  };
  return has("constant_tsc") && has("nonstop_tsc");
}
#endif

}  // namespace

void calibrate_ticks() noexcept {
  if (g_calibrated.load()) return;
#if defined(__x86_64__)
  detail::g_hardware_ticks.store(tsc_is_invariant());
#elif defined(__aarch64__)
  detail::g_hardware_ticks.store(true);  // the generic timer runs at a fixed frequency
#endif
  g_origin = sample();
  g_calibrated.store(true);
}

double ns_per_tick() noexcept {
  if (!detail::g_hardware_ticks.load(std::memory_order_relaxed) || !g_calibrated.load()) return 1.0;
  Point now = sample();
  if (now.ns - g_origin.ns < 1'000'000) {
    // Too close to the reference point for a precise rate: wait out the first millisecond.
    while ((now = sample()).ns - g_origin.ns < 1'000'000) {
    }
  }
  const double ticks = now.tick - g_origin.tick;
  return ticks > 0 ? static_cast<double>(now.ns - g_origin.ns) / ticks : 1.0;
}

}  // namespace drvshim::recorder
