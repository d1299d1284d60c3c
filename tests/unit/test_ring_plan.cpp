// SPDX-License-Identifier: Apache-2.0
// The staging engine's plans (pure: sizes in, sizes out): the ring chosen per
// copy (ring_plan.hpp), where each DMA to the host ends, and how the host-side
// work is cut into pieces (staging_job.hpp). The exact plans are pinned: they
// were tuned on the H200 (docs/staging.md), so a change to one must be seen
// here, not found later in a benchmark.
#include <gtest/gtest.h>

#include <cstddef>
#include <memory>
#include <utility>
#include <vector>

#include "staging/ring_plan.hpp"
#include "staging/staging_job.hpp"

using drvshim::StagingOptions;
using drvshim::detail::host_dma_ends;
using drvshim::detail::ring_for;
using drvshim::detail::RingPlan;
using drvshim::detail::StagingJob;

namespace {

constexpr std::size_t KiB = std::size_t{1} << 10;
constexpr std::size_t MiB = std::size_t{1} << 20;

// Sizes as runs: {size, how many in a row}.
using Runs = std::vector<std::pair<std::size_t, std::size_t>>;

Runs runs_of(const std::vector<std::size_t>& sizes) {
  Runs r;
  for (const std::size_t s : sizes) {
    if (!r.empty() && r.back().first == s) {
      ++r.back().second;
    } else {
      r.emplace_back(s, 1);
    }
  }
  return r;
}

// Differences between consecutive ends, starting from 0.
std::vector<std::size_t> sizes_of(const std::vector<std::size_t>& ends, std::size_t first = 0) {
  std::vector<std::size_t> sizes;
  std::size_t at = first;
  for (const std::size_t e : ends) {
    sizes.push_back(e - at);
    at = e;
  }
  return sizes;
}

std::vector<std::size_t> dma_sizes(const StagingOptions& o, std::size_t bytes) {
  return sizes_of(host_dma_ends(ring_for(o, bytes), bytes));
}

// (A job holds atomics: it stays where it was made.)
std::unique_ptr<StagingJob> planned_job(std::size_t bytes, std::size_t block_bytes, std::size_t threads) {
  auto j = std::make_unique<StagingJob>();
  j->bytes = bytes;
  j->block_bytes = block_bytes;
  j->plan_pieces(threads);
  return j;
}

std::vector<std::size_t> piece_sizes(std::size_t bytes, std::size_t block_bytes, std::size_t threads) {
  const auto j = planned_job(bytes, block_bytes, threads);
  return sizes_of(std::vector<std::size_t>(j->piece_at.begin() + 1, j->piece_at.end()));
}

StagingOptions chunked(std::size_t chunk_bytes, unsigned depth) {
  StagingOptions o;
  o.chunk_bytes = chunk_bytes;
  o.depth = depth;
  return o;
}

// Copy sizes around every boundary the plans have: powers of two from 1 byte
// to 1 GiB, each one byte either side, and odd sizes in between.
std::vector<std::size_t> sweep_sizes() {
  std::vector<std::size_t> sizes;
  for (std::size_t p = 1; p <= 1024 * MiB; p *= 2) {
    for (const std::size_t s : {p - 1, p, p + 1, p + p / 2 + 7}) {
      if (s != 0) sizes.push_back(s);
    }
  }
  for (const std::size_t s :
       {std::size_t{3} * MiB + 5, std::size_t{100000}, std::size_t{12345678}, std::size_t{77} * MiB + 333}) {
    sizes.push_back(s);
  }
  return sizes;
}

std::vector<StagingOptions> sweep_options() {
  // Chunks that are not powers of two among them (3 MiB, 1.5 MiB, 1,000,000 bytes): any size the options accept.
  return {StagingOptions{},         chunked(64 * KiB, 0),     chunked(100000, 3),  chunked(2 * MiB, 2),
          chunked(16 * MiB, 5),     chunked(3 * MiB, 0),      chunked(1000000, 2), chunked(MiB + MiB / 2, 4),
          chunked(5 * MiB + 17, 3), chunked(192 * KiB + 1, 7)};
}

}  // namespace

// The defaults choose the ring per copy: blocks of the copy's size rounded up
// to a power of two, 1 to 8 MiB, at most four, only as many as the copy
// fills; to the device a DMA queued behind a running one waits for an eighth
// of the copy (1-8 MiB, at most a block); to the host the largest DMA is a
// quarter of the copy (1-8 MiB, at most a block).
TEST(StagingPlan, TheRingFollowsTheCopySize) {
  struct Case {
    std::size_t bytes, block_bytes, blocks, batch, top;
  };
  const StagingOptions defaults;
  for (const Case& c :
       {Case{1, MiB, 1, MiB, MiB}, Case{64 * KiB, MiB, 1, MiB, MiB}, Case{MiB - 1, MiB, 1, MiB, MiB},
        Case{MiB, MiB, 1, MiB, MiB}, Case{MiB + 1, 2 * MiB, 1, MiB, MiB}, Case{3 * MiB + 5, 4 * MiB, 1, MiB, MiB},
        Case{4 * MiB, 4 * MiB, 1, MiB, MiB}, Case{16 * MiB, 8 * MiB, 2, 2 * MiB, 4 * MiB},
        Case{16 * MiB + 1, 8 * MiB, 3, 2 * MiB, 4 * MiB}, Case{32 * MiB, 8 * MiB, 4, 4 * MiB, 8 * MiB},
        Case{64 * MiB, 8 * MiB, 4, 8 * MiB, 8 * MiB}, Case{1024 * MiB, 8 * MiB, 4, 8 * MiB, 8 * MiB}}) {
    SCOPED_TRACE(c.bytes);
    const RingPlan r = ring_for(defaults, c.bytes);
    EXPECT_EQ(r.block_bytes, c.block_bytes);
    EXPECT_EQ(r.blocks, c.blocks);
    EXPECT_EQ(r.batch, c.batch);
    EXPECT_EQ(r.top, c.top);
  }
  // An explicit chunk size is the block size (and caps both DMA sizes); an
  // explicit depth caps the blocks, which are still only as many as the copy fills.
  const RingPlan small = ring_for(chunked(64 * KiB, 2), MiB);
  EXPECT_EQ(small.block_bytes, 64 * KiB);
  EXPECT_EQ(small.blocks, 2u);
  EXPECT_EQ(small.batch, 64 * KiB);
  EXPECT_EQ(small.top, 64 * KiB);
  const RingPlan odd = ring_for(chunked(100000, 3), 16 * MiB);
  EXPECT_EQ(odd.block_bytes, 100000u);
  EXPECT_EQ(odd.blocks, 3u);
  EXPECT_EQ(odd.batch, 100000u);
  EXPECT_EQ(odd.top, 100000u);
  const RingPlan deep = ring_for(chunked(MiB, 16), 5 * MiB + 1);
  EXPECT_EQ(deep.blocks, 6u);
  EXPECT_EQ(deep.batch, MiB);
  EXPECT_EQ(deep.top, MiB);
}

// To the host: 256 KiB, 256 KiB, 512 KiB ... up to half the largest DMA,
// largest DMAs, and the head again reversed; a DMA that would cross a block
// is cut at the block's end.
TEST(StagingPlan, DmasToTheHostFollowTheFixedPlan) {
  const StagingOptions defaults;
  EXPECT_EQ(runs_of(dma_sizes(defaults, MiB)), (Runs{{256 * KiB, 4}}));
  EXPECT_EQ(runs_of(dma_sizes(defaults, MiB - 1)), (Runs{{256 * KiB, 3}, {256 * KiB - 1, 1}}));
  // 1 MiB + 1 byte: a 2 MiB block, a 1 MiB top halved to 512 KiB; the odd byte in the middle.
  EXPECT_EQ(runs_of(dma_sizes(defaults, MiB + 1)), (Runs{{256 * KiB, 2}, {1, 1}, {256 * KiB, 2}}));
  EXPECT_EQ(runs_of(dma_sizes(defaults, 3 * MiB + 5)),
            (Runs{{256 * KiB, 2}, {512 * KiB, 1}, {MiB, 1}, {5, 1}, {512 * KiB, 1}, {256 * KiB, 2}}));
  EXPECT_EQ(runs_of(dma_sizes(defaults, 4 * MiB)),
            (Runs{{256 * KiB, 2}, {512 * KiB, 1}, {MiB, 2}, {512 * KiB, 1}, {256 * KiB, 2}}));
  EXPECT_EQ(runs_of(dma_sizes(defaults, 16 * MiB)), (Runs{{256 * KiB, 2},
                                                          {512 * KiB, 1},
                                                          {MiB, 1},
                                                          {2 * MiB, 1},
                                                          {4 * MiB, 2},
                                                          {2 * MiB, 1},
                                                          {MiB, 1},
                                                          {512 * KiB, 1},
                                                          {256 * KiB, 2}}));
  // One byte over 16 MiB: the odd byte after the top-sized DMAs, and the last
  // 256 KiB cut where the third 8 MiB block begins.
  EXPECT_EQ(runs_of(dma_sizes(defaults, 16 * MiB + 1)), (Runs{{256 * KiB, 2},
                                                              {512 * KiB, 1},
                                                              {MiB, 1},
                                                              {2 * MiB, 1},
                                                              {4 * MiB, 2},
                                                              {1, 1},
                                                              {2 * MiB, 1},
                                                              {MiB, 1},
                                                              {512 * KiB, 1},
                                                              {256 * KiB, 1},
                                                              {256 * KiB - 1, 1},
                                                              {1, 1}}));
  EXPECT_EQ(runs_of(dma_sizes(defaults, 64 * MiB)), (Runs{{256 * KiB, 2},
                                                          {512 * KiB, 1},
                                                          {MiB, 1},
                                                          {2 * MiB, 1},
                                                          {4 * MiB, 1},
                                                          {8 * MiB, 6},
                                                          {4 * MiB, 1},
                                                          {2 * MiB, 1},
                                                          {MiB, 1},
                                                          {512 * KiB, 1},
                                                          {256 * KiB, 2}}));
  EXPECT_EQ(dma_sizes(defaults, 1024 * MiB).size(), 138u);
  // Blocks smaller than the smallest head DMA: no head, block-sized DMAs.
  EXPECT_EQ(runs_of(dma_sizes(chunked(100000, 3), MiB)), (Runs{{100000, 10}, {48576, 1}}));
  EXPECT_EQ(runs_of(dma_sizes(defaults, 1)), (Runs{{1, 1}}));
}

// Whatever the size and options: the DMAs cover the copy in order, none is
// larger than the plan's largest, none crosses a block, and the largest ones
// start where a largest one may (a multiple of their size), so that they
// stay aligned to the blocks.
TEST(StagingPlan, NoDmaToTheHostCrossesABlock) {
  for (const StagingOptions& o : sweep_options()) {
    for (const std::size_t bytes : sweep_sizes()) {
      SCOPED_TRACE(testing::Message() << "chunk_bytes " << o.chunk_bytes << ", depth " << o.depth << ", bytes "
                                      << bytes);
      const RingPlan plan = ring_for(o, bytes);
      ASSERT_GE(plan.blocks, 1u);
      ASSERT_LE(plan.blocks, o.depth != 0 ? o.depth : 4u);
      ASSERT_LE(plan.blocks * plan.block_bytes, bytes + plan.block_bytes - 1) << "more blocks than the copy fills";
      ASSERT_LE(plan.batch, plan.block_bytes);
      ASSERT_LE(plan.top, plan.block_bytes);
      const std::vector<std::size_t> ends = host_dma_ends(plan, bytes);
      ASSERT_FALSE(ends.empty());
      ASSERT_EQ(ends.back(), bytes);
      std::size_t at = 0;
      for (const std::size_t end : ends) {
        ASSERT_GT(end, at) << "DMAs in order, none empty";
        ASSERT_LE(end - at, plan.top);
        ASSERT_EQ(at / plan.block_bytes, (end - 1) / plan.block_bytes)
            << "the DMA [" << at << ", " << end << ") crosses a block";
        if (end - at == plan.top && plan.block_bytes % plan.top == 0) {
          ASSERT_EQ(at % plan.top, 0u) << "a largest DMA at " << at;
        }
        at = end;
      }
    }
  }
}

// Pieces start at 64 KiB, one per thread, grow to 128 KiB and shrink to
// 64 KiB again over the last few; none crosses a block (with one thread, the
// first 64 KiB piece shifts the 128 KiB ones, so the last before a block's
// end is cut to 64 KiB).
TEST(StagingPlan, PiecesRampUpAndDown) {
  EXPECT_EQ(runs_of(piece_sizes(16 * MiB, 8 * MiB, 12)), (Runs{{64 * KiB, 12}, {128 * KiB, 115}, {64 * KiB, 14}}));
  EXPECT_EQ(runs_of(piece_sizes(16 * MiB, 8 * MiB, 2)), (Runs{{64 * KiB, 2}, {128 * KiB, 120}, {64 * KiB, 14}}));
  EXPECT_EQ(runs_of(piece_sizes(16 * MiB, 8 * MiB, 1)),
            (Runs{{64 * KiB, 1}, {128 * KiB, 63}, {64 * KiB, 1}, {128 * KiB, 57}, {64 * KiB, 14}}));
  EXPECT_EQ(runs_of(piece_sizes(16 * MiB + 1, 8 * MiB, 12)),
            (Runs{{64 * KiB, 12}, {128 * KiB, 115}, {64 * KiB, 14}, {1, 1}}));
  EXPECT_EQ(runs_of(piece_sizes(4 * MiB, 4 * MiB, 12)), (Runs{{64 * KiB, 12}, {128 * KiB, 19}, {64 * KiB, 14}}));
  EXPECT_EQ(runs_of(piece_sizes(3 * MiB + 5, 4 * MiB, 2)),
            (Runs{{64 * KiB, 2}, {128 * KiB, 16}, {64 * KiB, 14}, {5, 1}}));
  EXPECT_EQ(runs_of(piece_sizes(MiB, MiB, 12)), (Runs{{64 * KiB, 16}}));
  EXPECT_EQ(runs_of(piece_sizes(256 * MiB, 8 * MiB, 12)), (Runs{{64 * KiB, 12}, {128 * KiB, 2035}, {64 * KiB, 14}}));
  EXPECT_EQ(runs_of(piece_sizes(1, MiB, 4)), (Runs{{1, 1}}));
  // Blocks of 100000 bytes: every piece ends at a block's end or before it.
  std::vector<std::size_t> odd;
  for (int i = 0; i < 2; ++i) {
    odd.push_back(64 * KiB);
    odd.push_back(100000 - 64 * KiB);
  }
  for (int i = 0; i < 156; ++i) odd.push_back(100000);
  for (int i = 0; i < 9; ++i) {
    odd.push_back(64 * KiB);
    odd.push_back(100000 - 64 * KiB);
  }
  odd.push_back(64 * KiB);
  odd.push_back(16 * MiB - 167 * 100000 - 64 * KiB);
  EXPECT_EQ(piece_sizes(16 * MiB, 100000, 4), odd);
}

// Whatever the size, block and thread count: the pieces cover the copy in
// order, none is empty, larger than StagingJob::kPieceMax or across a block,
// the first one per thread are 64 KiB at most, and each has its done flag,
// clear.
TEST(StagingPlan, NoPieceCrossesABlock) {
  for (const StagingOptions& o : sweep_options()) {
    for (const std::size_t bytes : sweep_sizes()) {
      const std::size_t block = ring_for(o, bytes).block_bytes;
      for (const std::size_t threads :
           {std::size_t{1}, std::size_t{2}, std::size_t{3}, std::size_t{12}, std::size_t{64}}) {
        SCOPED_TRACE(testing::Message() << "block " << block << ", bytes " << bytes << ", threads " << threads);
        const auto job = planned_job(bytes, block, threads);
        const StagingJob& j = *job;
        ASSERT_EQ(j.piece_at.size(), j.pieces + 1);
        ASSERT_EQ(j.piece_at.front(), 0u);
        ASSERT_EQ(j.piece_at.back(), bytes);
        for (std::size_t p = 0; p < j.pieces; ++p) {
          const std::size_t at = j.piece_at[p], end = j.piece_at[p + 1];
          ASSERT_GT(end, at);
          ASSERT_LE(end - at, StagingJob::kPieceMax);
          ASSERT_EQ(at / block, (end - 1) / block) << "the piece [" << at << ", " << end << ") crosses a block";
          if (p < threads) {
            ASSERT_LE(end - at, 64 * KiB) << "piece " << p;
          }
          ASSERT_FALSE(j.done[p].load());
        }
      }
    }
  }
}

// Byte x of a copy is staged at ring position x mod the ring's size: block
// (x / block) mod blocks, offset x mod block.
TEST(StagingPlan, TheRingWrapsOverItsBlocks) {
  std::vector<std::byte> a(4), b(4), c(4);
  StagingJob j;
  j.block_bytes = 4;
  j.ring_bytes = 12;
  j.blocks = {a.data(), b.data(), c.data()};
  EXPECT_EQ(j.staged(0), a.data());
  EXPECT_EQ(j.staged(3), a.data() + 3);
  EXPECT_EQ(j.staged(4), b.data());
  EXPECT_EQ(j.staged(11), c.data() + 3);
  EXPECT_EQ(j.staged(12), a.data());
  EXPECT_EQ(j.staged(4 * 12 + 6), b.data() + 2);
}
