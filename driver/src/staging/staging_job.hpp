// SPDX-License-Identifier: Apache-2.0
#pragma once
// One staged copy as its threads share it: the ring's blocks, the pieces of
// host-side work and how far the ring is open.
#include <algorithm>
#include <atomic>
#include <bit>
#include <cstddef>
#include <memory>
#include <vector>

#include "staging/backoff.hpp"
#include "staging/host_copy.hpp"

namespace drvshim::detail {

// One staged copy, shared by the thread that runs it (the conductor: it
// issues every DMA and watches every event) and the crew (helpers that only
// copy bytes).
//
// The copy streams through a ring of pinned blocks: byte x of the copy is
// staged at ring position x mod ring_bytes. The host-side work is cut into
// pieces (64 KiB, growing to 128 KiB; none crosses a block) handed out in
// order from one counter; a piece may be copied once it ends at or below
// `open_until` (to the device: the ring bytes it overwrites have been read by
// their DMA; to the host: its bytes have landed). DMAs are not tied to
// pieces. To the device, each DMA takes everything copied in, in order, since
// the last one: the bus starts after the first 64 KiB, and a DMA never waits
// for the slowest of a dozen pieces of a big chunk (which left the bus idle
// between chunks: docs/staging.md). To the host the DMAs follow host_dma_ends().
struct StagingJob {
  // Pieces stay small: the bytes copied in, in order, lag the pieces handed
  // out by up to one piece per thread (128 KiB measured faster than 256 KiB:
  // docs/staging.md).
  static constexpr std::size_t kPieceMax = std::size_t{128} << 10;
  // The conductor copies its pieces in slices this big and looks after the
  // DMAs between them (a whole piece can take 50 µs on a busy memory bus).
  static constexpr std::size_t kSlice = std::size_t{64} << 10;

  bool to_device = true;
  Kernel kernel = Kernel::plain;
  std::byte* host = nullptr;  // the pageable side (read for H2D, written for D2H)
  std::size_t bytes = 0;
  std::size_t block_bytes = 0, ring_bytes = 0;
  std::vector<std::byte*> blocks;
  std::vector<std::size_t> piece_at;  // piece p covers [piece_at[p], piece_at[p + 1])
  std::size_t pieces = 0;
  std::unique_ptr<std::atomic<bool>[]> done;  // per piece: its host-side copy is complete
  std::atomic<std::size_t> next_piece{0};
  std::atomic<std::size_t> open_until{0};
  std::atomic<bool> abort{false};
  // How many of the crew's helpers may join (the others leave it alone).
  std::size_t helpers = 0;

  // Pieces of 64 KiB, one per thread, then kPieceMax; shrinking again to
  // 64 KiB over the last few. A piece is copied by one thread at 5-9 GB/s
  // (H200 machine), so the bytes copied in, in order, grow only as fast as
  // one piece finishes, and small first pieces start the bus early. The
  // final pieces, copied at the same time by
  // different threads, finish close together, so the last DMA (to the
  // device) or the work after the last landing (to the host) is small.
  void plan_pieces(std::size_t threads) {
    constexpr std::size_t kPieceMin = std::size_t{64} << 10;
    piece_at.assign(1, 0);
    std::size_t ramp = kPieceMin;
    for (std::size_t same = 0; piece_at.back() < bytes;) {
      const std::size_t at = piece_at.back();
      const std::size_t tail = std::max(kPieceMin, std::bit_floor(std::max<std::size_t>((bytes - at) / 8, 1)));
      piece_at.push_back(std::min({at + std::min(ramp, tail), (at / block_bytes + 1) * block_bytes, bytes}));
      if (++same == threads && ramp < kPieceMax) {
        ramp *= 2;
        same = 0;
      }
    }
    pieces = piece_at.size() - 1;
    done = std::make_unique<std::atomic<bool>[]>(pieces);
  }

  std::byte* staged(std::size_t x) const noexcept {
    return blocks[(x / block_bytes) % blocks.size()] + x % block_bytes;
  }

  // Copies piece p, calling `between` after each slice but the last (the
  // conductor's DMA bookkeeping; it may throw, leaving the piece undone).
  template <class Between>
  void copy_piece(std::size_t p, Between&& between) {
    const std::size_t end = piece_at[p + 1];
    for (std::size_t at = piece_at[p]; at < end;) {
      const std::size_t n = std::min(end - at, kSlice);
      std::byte* to = to_device ? staged(at) : host + at;
      const std::byte* from = to_device ? host + at : staged(at);
      copy_bytes(to, from, n, kernel);
      at += n;
      if (at < end) between();
    }
    done[p].store(true, std::memory_order_release);
  }

  // A helper's turn: claims the next piece, waits for it to open, copies it.
  // Returns false when none is left or the copy was abandoned.
  bool take_piece() noexcept {
    const std::size_t p = next_piece.fetch_add(1, std::memory_order_relaxed);
    if (p >= pieces) return false;
    Backoff backoff;
    while (open_until.load(std::memory_order_acquire) < piece_at[p + 1]) {
      if (abort.load(std::memory_order_relaxed)) return false;
      backoff.wait();
    }
    copy_piece(p, [] {});
    return true;
  }

  // The conductor's turn: takes the next piece only if it is open already
  // (the conductor must never wait for bytes only it can open).
  template <class Between>
  bool try_piece(Between&& between) {
    std::size_t p = next_piece.load(std::memory_order_relaxed);
    while (p < pieces && piece_at[p + 1] <= open_until.load(std::memory_order_acquire)) {
      if (next_piece.compare_exchange_weak(p, p + 1, std::memory_order_relaxed)) {
        copy_piece(p, between);
        return true;
      }
    }
    return false;
  }
};

}  // namespace drvshim::detail
