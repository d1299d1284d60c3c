#include "cpu_budget.hpp"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "test_hooks.hpp"

namespace drvshim::detail {
namespace {

std::optional<long long> to_integer(std::string_view s) noexcept {
  while (!s.empty() && (s.back() == '\n' || s.back() == ' ')) s.remove_suffix(1);
  long long v = 0;
  const auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) return std::nullopt;
  return v;
}

std::string read_small_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return {};
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

unsigned affinity_cpus() noexcept {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return static_cast<unsigned>(n);
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

// The tightest quota on the way from this process's cgroup up to the root.
std::optional<double> cgroup_quota() {
  std::optional<double> tightest;
  auto take = [&](std::optional<double> q) {
    if (q && (!tightest || *q < *tightest)) tightest = q;
  };
  const std::string self = read_small_file("/proc/self/cgroup");
  std::string path(cgroup_v2_path(self));
  if (!path.empty()) {
    for (;;) {
      take(parse_cpu_max(read_small_file("/sys/fs/cgroup" + (path == "/" ? std::string() : path) + "/cpu.max")));
      if (path == "/" || path.empty()) break;
      const auto slash = path.find_last_of('/');
      path = slash == 0 ? "/" : path.substr(0, slash);
    }
    return tightest;
  }
  // cgroup v1: the controller mounted at its usual place (the process's own group, as seen from inside a container).
  for (const char* dir : {"/sys/fs/cgroup/cpu,cpuacct", "/sys/fs/cgroup/cpu"}) {
    const std::string base(dir);
    take(parse_cfs_quota(read_small_file(base + "/cpu.cfs_quota_us"), read_small_file(base + "/cpu.cfs_period_us")));
  }
  return tightest;
}

}  // namespace

std::optional<double> parse_cpu_max(std::string_view text) noexcept {
  const auto space = text.find(' ');
  if (space == std::string_view::npos) return std::nullopt;
  const auto quota = text.substr(0, space);
  if (quota == "max") return std::nullopt;
  const auto q = to_integer(quota);
  const auto p = to_integer(text.substr(space + 1));
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;
  return static_cast<double>(*q) / static_cast<double>(*p);
}

std::optional<double> parse_cfs_quota(std::string_view quota, std::string_view period) noexcept {
  const auto q = to_integer(quota);
  const auto p = to_integer(period);
  if (!q || !p || *q <= 0 || *p <= 0) return std::nullopt;
  return static_cast<double>(*q) / static_cast<double>(*p);
}

std::string_view cgroup_v2_path(std::string_view text) noexcept {
  for (std::size_t at = 0; at < text.size();) {
    const auto end = std::min(text.find('\n', at), text.size());
    const auto line = text.substr(at, end - at);
    if (line.substr(0, 3) == "0::") return line.substr(3);
    at = end + 1;
  }
  return {};
}

unsigned usable_cpus() noexcept {
  if (const unsigned forced = test_hooks::g_usable_cpus.load(std::memory_order_relaxed); forced != 0) return forced;
  unsigned cpus = affinity_cpus();
  try {
    if (const auto quota = cgroup_quota()) {
      cpus = std::min(cpus, static_cast<unsigned>(std::max(1.0, std::ceil(*quota))));
    }
  } catch (...) {
    // Out of memory reading a few bytes: the affinity mask alone.
  }
  return std::max(1u, cpus);
}

}  // namespace drvshim::detail
