// SPDX-License-Identifier: Apache-2.0
#pragma once
// How many CPUs this process may really use: the scheduler affinity mask
// (taskset, a container's cpuset) and the cgroup CPU quota (a container's CPU
// limit), not the machine's hardware threads. Work spread over more threads
// than that only takes turns on the same CPUs.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace drvshim::detail {

// The CPUs this process may use now: the smaller of the calling thread's
// affinity mask and the cgroup quota rounded up (at least 1).
unsigned usable_cpus() noexcept;

// The quota of a cgroup v2 `cpu.max` text ("200000 100000" -> 2.0; "max
// 100000" -> none), or of cgroup v1 cpu.cfs_quota_us / cpu.cfs_period_us
// ("-1" -> none). Unreadable text -> none.
std::optional<double> parse_cpu_max(std::string_view text) noexcept;
std::optional<double> parse_cfs_quota(std::string_view quota, std::string_view period) noexcept;

// The tightest CPU quota of this process's cgroups, v2 and v1 alike (a
// hybrid host has both): its own group's and every group's above it, with
// the files read under `root` ("" for the real ones; a test's fake tree
// otherwise). None when no quota is set or none can be read.
std::optional<double> cgroup_quota(const std::string& root);

// A mounted cgroup hierarchy that can limit the CPU: cgroup2, or cgroup v1
// with the cpu controller (from /proc/self/mountinfo).
struct CgroupMount {
  bool v2 = false;
  std::string root;         // the cgroup that is the mount's root ("/", or a container's own group)
  std::string mount_point;  // where it is mounted
};
std::vector<CgroupMount> cgroup_mounts(std::string_view proc_self_mountinfo);

// The cgroup v1 path of this process's cpu controller from
// /proc/self/cgroup's "N:cpu,cpuacct:/path" line ("" when there is none).
std::string_view cgroup_v1_cpu_path(std::string_view proc_self_cgroup) noexcept;

// The cgroup v2 path of this process from /proc/self/cgroup's "0::/path"
// line ("" when there is none, e.g. cgroup v1 only).
std::string_view cgroup_v2_path(std::string_view proc_self_cgroup) noexcept;

}  // namespace drvshim::detail
