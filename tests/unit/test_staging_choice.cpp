// SPDX-License-Identifier: Apache-2.0
// The staging engine's choices from its options and the process's CPU budget
// (staging_choice.hpp): how many copy threads, and which copies go straight
// to the driver. Pinned here because each number came from an H200
// measurement (docs/staging.md): a change must be seen, not found later in a
// benchmark.
#include <gtest/gtest.h>

#include <cstddef>
#include <tuple>
#include <utility>

#include "staging/staging_choice.hpp"

using drvshim::StagingOptions;
using namespace drvshim::detail;

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

StagingOptions automatic() { return StagingOptions{}; }
StagingOptions with_threads(unsigned n) {
  StagingOptions o;
  o.threads = n;
  return o;
}

TEST(StagingChoice, TheAutomaticThreadCountIsThreeQuartersOfTheUsableCpusAtMostTwelve) {
  for (const auto& [cpus, threads] :
       {std::pair{1u, 1u}, {2u, 2u}, {3u, 3u}, {4u, 3u}, {5u, 4u}, {8u, 6u}, {16u, 12u}, {64u, 12u}, {0u, 1u}}) {
    EXPECT_EQ(resolved_options(automatic(), cpus).threads, threads) << cpus << " CPUs";
  }
  EXPECT_EQ(resolved_options(with_threads(8), 4).threads, 4u) << "never more threads than CPUs";
  EXPECT_EQ(resolved_options(with_threads(2), 16).threads, 2u) << "an explicit count is kept";
}

TEST(StagingChoice, FewThreadsSendEveryCopyInADirectionStraightToTheDriver) {
  // 1 CPU: nothing staged; 2 CPUs: only to the host; 4 CPUs (3 threads): both.
  for (const auto& [cpus, to_device, to_host] :
       {std::tuple{1u, false, false}, {2u, false, true}, {4u, true, true}, {16u, true, true}}) {
    const auto r = resolved_options(automatic(), cpus);
    EXPECT_EQ(stages_to_device(automatic(), r), to_device) << cpus << " CPUs";
    EXPECT_EQ(stages_to_host(r), to_host) << cpus << " CPUs";
  }
  // An explicit count of two is the caller's choice: it stages both ways.
  const auto two = resolved_options(with_threads(2), 16);
  EXPECT_TRUE(stages_to_device(with_threads(2), two));
  EXPECT_TRUE(stages_to_host(two));
}

// H200, 4 CPUs: three threads staged 1 MiB to the device at 0.8x the
// driver's own path (2026-12-01, timed until the data was on the device).
TEST(StagingChoice, ThreeAutomaticThreadsSendCopiesToTheDeviceBelowFourMiBStraightToTheDriver) {
  const auto three = resolved_options(automatic(), 4);
  ASSERT_EQ(three.threads, 3u);
  EXPECT_EQ(direct_below_to_device_for(automatic(), three), 4 * MiB);
  // Four threads (5 CPUs) are enough: the caller's threshold (1 MiB by default) stands.
  ASSERT_EQ(resolved_options(automatic(), 5).threads, 4u);
  EXPECT_EQ(direct_below_to_device_for(automatic(), resolved_options(automatic(), 5)), 1 * MiB);
  EXPECT_EQ(direct_below_to_device_for(automatic(), resolved_options(automatic(), 6)), 1 * MiB);
  EXPECT_EQ(direct_below_to_device_for(automatic(), resolved_options(automatic(), 16)), 1 * MiB);
  // An explicit thread count keeps the caller's threshold, and a larger
  // threshold asked for is never lowered.
  EXPECT_EQ(direct_below_to_device_for(with_threads(3), resolved_options(with_threads(3), 4)), 1 * MiB);
  StagingOptions big = automatic();
  big.direct_below = 32 * MiB;
  EXPECT_EQ(direct_below_to_device_for(big, resolved_options(big, 4)), 32 * MiB);
}

}  // namespace

// Copies of 128 MiB and more are bus-bound: an automatic crew sends at most
// nine threads at them (H100 bench_staging crew, 2026-12-06: at 256 MiB 8-9
// threads beat 12 both ways); smaller copies, and an explicit count, keep the crew.
TEST(StagingChoice, LargeCopiesUseAtMostNineThreadsOfAnAutomaticCrew) {
  using drvshim::detail::threads_for_copy;
  EXPECT_EQ(threads_for_copy(automatic(), 12, 128 * MiB), 9u);
  EXPECT_EQ(threads_for_copy(automatic(), 12, 1024 * MiB), 9u);
  EXPECT_EQ(threads_for_copy(automatic(), 12, 128 * MiB - 1), 12u);
  EXPECT_EQ(threads_for_copy(automatic(), 12, 16 * MiB), 12u);
  EXPECT_EQ(threads_for_copy(automatic(), 6, 1024 * MiB), 6u) << "never more than the crew";
  EXPECT_EQ(threads_for_copy(with_threads(12), 12, 1024 * MiB), 12u) << "an explicit count is the caller's";
}
