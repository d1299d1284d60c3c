// SPDX-License-Identifier: Apache-2.0
#include "staging/cpu_budget.hpp"

#include <sched.h>

#include <algorithm>
#include <charconv>
#include <cmath>
#include <fstream>
#include <sstream>
#include <string>
#include <thread>

#include "support/test_hooks.hpp"

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

// The tightest quota on the way from `group` (a cgroup path, "/a/b") up to
// the hierarchy's root at `mount`, read by `quota_of(directory)`.
template <class QuotaOf>
std::optional<double> tightest_up_from(const std::string& mount, std::string group, QuotaOf quota_of) {
  std::optional<double> tightest;
  for (;;) {
    const auto q = quota_of(mount + (group == "/" ? std::string() : group));
    if (q && (!tightest || *q < *tightest)) tightest = q;
    if (group == "/" || group.empty()) break;
    const auto slash = group.find_last_of('/');
    group = slash == 0 || slash == std::string::npos ? "/" : group.substr(0, slash);
  }
  return tightest;
}

// The process's group `group` as a path under a mount whose root is the
// cgroup `mount_root`: the part below the mount's root, or "/" when the
// group lies outside it (a container that sees its own group as the mount).
std::string group_under(const std::string& group, const std::string& mount_root) {
  if (mount_root == "/" || mount_root.empty()) return group;
  if (group == mount_root) return "/";
  if (group.size() > mount_root.size() && group.compare(0, mount_root.size(), mount_root) == 0 &&
      group[mount_root.size()] == '/') {
    return group.substr(mount_root.size());
  }
  return "/";
}

}  // namespace

std::vector<CgroupMount> cgroup_mounts(std::string_view mountinfo) {
  std::vector<CgroupMount> out;
  // mountinfo escapes blanks, tabs, newlines and backslashes as \ooo.
  auto unescape = [](std::string_view field) {
    std::string s;
    for (std::size_t i = 0; i < field.size(); ++i) {
      if (field[i] == '\\' && i + 3 < field.size() &&
          field.substr(i + 1, 3).find_first_not_of("01234567") == std::string_view::npos) {
        s += static_cast<char>(((field[i + 1] - '0') << 6) | ((field[i + 2] - '0') << 3) | (field[i + 3] - '0'));
        i += 3;
      } else {
        s += field[i];
      }
    }
    return s;
  };
  for (std::size_t at = 0; at < mountinfo.size();) {
    const auto end = std::min(mountinfo.find('\n', at), mountinfo.size());
    const std::string_view line = mountinfo.substr(at, end - at);
    at = end + 1;
    // "ID PARENT MAJ:MIN ROOT MOUNT-POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER-OPTIONS"
    std::vector<std::string_view> fields;
    for (std::size_t f = 0; f < line.size();) {
      const auto space = std::min(line.find(' ', f), line.size());
      if (space > f) fields.push_back(line.substr(f, space - f));
      f = space + 1;
    }
    std::size_t dash = 6;
    while (dash < fields.size() && fields[dash] != "-") ++dash;
    if (fields.size() < 5 || dash + 1 >= fields.size()) continue;
    const std::string_view type = fields[dash + 1];
    bool cpu = false;
    if (type == "cgroup" && dash + 3 < fields.size()) {
      std::string_view options = fields[dash + 3];
      while (!options.empty()) {
        const auto comma = std::min(options.find(','), options.size());
        cpu = cpu || options.substr(0, comma) == "cpu";
        options.remove_prefix(std::min(comma + 1, options.size()));
      }
    }
    if (type != "cgroup2" && !cpu) continue;
    out.push_back({type == "cgroup2", unescape(fields[3]), unescape(fields[4])});
  }
  return out;
}

std::optional<double> cgroup_quota(const std::string& root) {
  const std::string self = read_small_file(root + "/proc/self/cgroup");
  std::optional<double> tightest;
  auto take = [&](std::optional<double> q) {
    if (q && (!tightest || *q < *tightest)) tightest = q;
  };
  // Where the hierarchies are mounted (/proc/self/mountinfo; a hybrid host
  // has v2 at /sys/fs/cgroup/unified, v1's cpu may share a mount with
  // cpuset), else the usual places.
  std::vector<CgroupMount> mounts = cgroup_mounts(read_small_file(root + "/proc/self/mountinfo"));
  if (mounts.empty()) {
    mounts = {{true, "/", "/sys/fs/cgroup"},
              {false, "/", "/sys/fs/cgroup/cpu,cpuacct"},
              {false, "/", "/sys/fs/cgroup/cpuacct,cpu"},
              {false, "/", "/sys/fs/cgroup/cpu"}};
  }
  const std::string v2(cgroup_v2_path(self));
  const std::string v1(cgroup_v1_cpu_path(self));
  for (const CgroupMount& m : mounts) {
    // Each hierarchy in the process's own group and every group above it,
    // v1 also where a v2 line exists (a hybrid host). Inside a container the
    // group is often "/" (a cgroup namespace) or outside the mount's root (the
    // mount is the group itself): the walk ends at the mount either way.
    const std::string& group = m.v2 ? v2 : v1;
    if (group.empty()) continue;
    if (m.v2) {
      take(tightest_up_from(root + m.mount_point, group_under(group, m.root),
                            [](const std::string& dir) { return parse_cpu_max(read_small_file(dir + "/cpu.max")); }));
    } else {
      take(tightest_up_from(root + m.mount_point, group_under(group, m.root), [](const std::string& d) {
        return parse_cfs_quota(read_small_file(d + "/cpu.cfs_quota_us"), read_small_file(d + "/cpu.cfs_period_us"));
      }));
    }
  }
  return tightest;
}

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

std::string_view cgroup_v1_cpu_path(std::string_view text) noexcept {
  for (std::size_t at = 0; at < text.size();) {
    const auto end = std::min(text.find('\n', at), text.size());
    const auto line = text.substr(at, end - at);
    at = end + 1;
    // "ID:controller,controller:/path"
    const auto first = line.find(':');
    const auto second = first == std::string_view::npos ? first : line.find(':', first + 1);
    if (second == std::string_view::npos) continue;
    std::string_view controllers = line.substr(first + 1, second - first - 1);
    while (!controllers.empty()) {
      const auto comma = std::min(controllers.find(','), controllers.size());
      if (controllers.substr(0, comma) == "cpu") return line.substr(second + 1);
      controllers.remove_prefix(std::min(comma + 1, controllers.size()));
    }
  }
  return {};
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
    if (const auto quota = cgroup_quota(test_hooks::cgroup_root())) {
      cpus = std::min(cpus, static_cast<unsigned>(std::max(1.0, std::ceil(*quota))));
    }
  } catch (...) {
    // Out of memory reading a few bytes: the affinity mask alone.
  }
  return std::max(1u, cpus);
}

}  // namespace drvshim::detail
