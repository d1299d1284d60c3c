// SPDX-License-Identifier: Apache-2.0
#pragma once
// The plan of a staged copy (pure: sizes in, sizes out): its ring of staging
// blocks and, to the host, where each DMA ends.
#include <drvshim/staging_engine.hpp>

#include <algorithm>
#include <bit>
#include <cstddef>
#include <vector>

namespace drvshim::detail {

// How a copy of `bytes` is staged: the ring's blocks (their size is also
// the largest DMA), and the DMA sizes aimed at. Defaults from the H200
// measurements in docs/staging.md: each DMA costs about 2.6 µs (host to
// device) or 1.8 µs (device to host) on top of its bytes, so a 16 MiB copy
// wants a handful of DMAs, not dozens; one ring as big as a 16 MiB copy
// never waits for a block to come back.
struct RingPlan {
  std::size_t block_bytes = 0;  // each staging block; no DMA or piece crosses one
  std::size_t blocks = 0;       // ring depth (only as many as the copy needs)
  std::size_t batch = 0;        // to the device: a DMA queued behind a running one waits for this many bytes
  std::size_t top = 0;          // to the host: the largest DMA of the plan (it starts and ends small)
};
inline RingPlan ring_for(const StagingOptions& o, std::size_t bytes) {
  constexpr std::size_t MiB = std::size_t{1} << 20;
  RingPlan r;
  r.block_bytes = o.chunk_bytes != 0 ? o.chunk_bytes : std::clamp(std::bit_ceil(bytes), MiB, 8 * MiB);
  const std::size_t depth = o.depth != 0 ? o.depth : 4;
  r.blocks = std::min(depth, (bytes + r.block_bytes - 1) / r.block_bytes);
  r.batch = std::min(r.block_bytes, std::clamp(std::bit_floor(std::max<std::size_t>(bytes / 8, 1)), MiB, 8 * MiB));
  r.top = std::min(r.block_bytes, std::clamp(std::bit_floor(std::max<std::size_t>(bytes / 4, 1)), MiB, 8 * MiB));
  return r;
}

// Device-to-host DMA ends: a head of 256 KiB, 256 KiB, 512 KiB ... doubling
// and cut to add up to plan.top exactly (so the top-sized DMAs after it stay
// aligned to the blocks, whatever their size), top-sized DMAs, and the head
// again reversed: the first bytes land early, and the host-side copy after
// the last DMA is short. None crosses a block; together they cover `bytes`.
inline std::vector<std::size_t> host_dma_ends(const RingPlan& plan, std::size_t bytes) {
  constexpr std::size_t kFirst = std::size_t{256} << 10;
  std::size_t top = plan.top;
  while (top > kFirst && bytes < 2 * top) top /= 2;
  std::vector<std::size_t> head;
  if (bytes >= 2 * top && top >= 2 * kFirst) {
    head.push_back(kFirst);
    for (std::size_t n = kFirst, sum = kFirst; sum < top; sum += head.back(), n *= 2)
      head.push_back(std::min(n, top - sum));
  }
  std::vector<std::size_t> sizes = head;
  std::size_t middle = bytes - 2 * (head.empty() ? 0 : top);
  for (; middle > 0; middle -= std::min(middle, top)) sizes.push_back(std::min(middle, top));
  sizes.insert(sizes.end(), head.rbegin(), head.rend());
  std::vector<std::size_t> ends;
  std::size_t at = 0;
  for (const std::size_t n : sizes) {
    for (const std::size_t to = at + n; at < to;) {
      at = std::min(to, (at / plan.block_bytes + 1) * plan.block_bytes);
      ends.push_back(at);
    }
  }
  return ends;
}

}  // namespace drvshim::detail
