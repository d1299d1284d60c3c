// SPDX-License-Identifier: Apache-2.0
#pragma once
// The host side of a staged copy: how its bytes are written into (or out of)
// the pinned staging blocks, chosen per copy from the CPU's features and the
// copy's size.
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#if defined(__x86_64__) || defined(_M_X64)
#include <cpuid.h>
#include <immintrin.h>
#endif

#include "env.hpp"

namespace drvshim::detail {

// How the host side of a staged copy moves its bytes.
//  - stream: non-temporal stores; the lines go to memory, not into a cache,
//    and none is read before it is overwritten.
//  - demote: ordinary stores, each line then pushed from this core's cache to
//    the shared last-level cache (CLDEMOTE), where a DMA reads it without
//    pulling it out of a core: the fastest way to the device below 32 MiB
//    with a large crew.
//  - plain: memcpy. Best both ways from 32 MiB up with a large crew: lines
//    that many leave the cache before their DMA reads them anyway.
// Every variant fetches the source 4 KiB ahead: a core's hardware prefetcher
// alone keeps too few lines in flight. A 16 MiB copy to the host right after
// another measures ~30 % slower, cause not established (docs/staging.md):
// demoting each staging line after reading it helped that case but cost more
// everywhere else (H200, lab/gpu-runs/2026-12-01-run33: 16 MiB 66 % of pinned against 82 % on the
// same host in lab/gpu-runs/2026-12-01-run31; with 2 CPUs 0.6x the driver's path), so it is not done.
enum class Kernel { plain, stream, demote };

inline bool cpu_has_cldemote() noexcept {
#if defined(__x86_64__) || defined(_M_X64)
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid_max(0, nullptr) < 7) return false;
  __cpuid_count(7, 0, a, b, c, d);
  return (c >> 25) & 1u;
#else
  return false;
#endif
}

inline void copy_bytes(std::byte* dst, const std::byte* src, std::size_t n, Kernel kernel) noexcept {
#if defined(__x86_64__) || defined(_M_X64)
  if (kernel == Kernel::plain) {
    std::memcpy(dst, src, n);
    return;
  }
  const std::size_t head = std::min(n, (16 - (reinterpret_cast<std::uintptr_t>(dst) & 15)) & 15);
  std::memcpy(dst, src, head);
  dst += head;
  src += head;
  n -= head;
  auto* d = reinterpret_cast<__m128i*>(dst);
  const auto* s = reinterpret_cast<const __m128i*>(src);
  for (std::size_t i = 0; i < n / 64; ++i, d += 4, s += 4) {
    _mm_prefetch(reinterpret_cast<const char*>(s) + 4096, _MM_HINT_T0);
    const __m128i a = _mm_loadu_si128(s), b = _mm_loadu_si128(s + 1), c = _mm_loadu_si128(s + 2),
                  e = _mm_loadu_si128(s + 3);
    if (kernel == Kernel::stream) {
      _mm_stream_si128(d, a);
      _mm_stream_si128(d + 1, b);
      _mm_stream_si128(d + 2, c);
      _mm_stream_si128(d + 3, e);
    } else {
      _mm_store_si128(d, a);
      _mm_store_si128(d + 1, b);
      _mm_store_si128(d + 2, c);
      _mm_store_si128(d + 3, e);
      // CLDEMOTE [d] (0F 1C /0), spelled out so that no compiler flag is
      // needed; a CPU without it runs it as a no-op (a hint).
      asm volatile(".byte 0x0f, 0x1c, 0x00" : : "a"(d) : "memory");
    }
  }
  std::memcpy(reinterpret_cast<std::byte*>(d), reinterpret_cast<const std::byte*>(s), n % 64);
  // Streaming stores are weakly ordered: fenced before the piece is counted as done.
  if (kernel == Kernel::stream) _mm_sfence();
#else
  (void)kernel;
  std::memcpy(dst, src, n);
#endif
}

// DRVSHIM_STAGING_STORES, read once: "auto" (below), "stream", "demote" or
// "plain" (that kernel for every copy, both directions; demote only to the
// device, plain to the host). A tuning and diagnosis switch.
enum class Stores { automatic, stream, demote, plain };
inline Stores stores_mode() noexcept {
  static const Stores mode = [] {
    try {
      return static_cast<Stores>(env::choice("DRVSHIM_STAGING_STORES", {"auto", "stream", "demote", "plain"}, 0));
    } catch (...) {
      return Stores::automatic;
    }
  }();
  return mode;
}

// With a large crew, copies from this size up use plain memcpy (see Kernel).
constexpr std::size_t kStreamBelow = std::size_t{32} << 20;

// Up to this many threads (the conductor and its helpers), streaming stores
// win at every size: a small crew is limited by its own copying, and
// streaming stores move more bytes per thread (no read for ownership of the
// lines written). H200 machine, 2026-12-01 (lab/gpu-runs/2026-12-01-run31 and -run32, taskset): 6 threads
// to the device, 1 GiB 31-34 GB/s streaming against 19-24 with memcpy,
// 16 MiB 32-34 against 26-28 with CLDEMOTE; 9 threads to the host, 1 GiB 97 %
// of pinned against 92-93 %, but to the device memcpy 94-95 % against 83 %;
// 12 threads: memcpy ahead both ways from 256 MiB (84-97 % against 75-94 %).
// Seven and eight threads were not measured: the boundary to the device is
// the last count measured to win.
inline constexpr unsigned kSmallCrewToDevice = 6;
inline constexpr unsigned kSmallCrewToHost = 9;

// The kernel for a copy of `bytes` by `threads` threads (pure: `mode` is
// DRVSHIM_STAGING_STORES, `cpu_demotes` whether the CPU has CLDEMOTE).
// Automatically: streaming stores to the host, CLDEMOTE to the device where
// the CPU has it (streaming stores elsewhere); plain memcpy from kStreamBelow
// up, except with a small crew, which streams every size.
constexpr Kernel choose_kernel(bool to_device, std::size_t bytes, unsigned threads, Stores mode,
                               bool cpu_demotes) noexcept {
  switch (mode) {
    case Stores::stream: return Kernel::stream;
    case Stores::demote: return to_device ? Kernel::demote : Kernel::plain;
    case Stores::plain: return Kernel::plain;
    case Stores::automatic: break;
  }
  if (threads <= (to_device ? kSmallCrewToDevice : kSmallCrewToHost)) return Kernel::stream;
  if (bytes >= kStreamBelow) return Kernel::plain;
  return to_device && cpu_demotes ? Kernel::demote : Kernel::stream;
}

inline Kernel kernel_for(bool to_device, std::size_t bytes, unsigned threads) noexcept {
  static const bool demotes = cpu_has_cldemote();
  return choose_kernel(to_device, bytes, threads, stores_mode(), demotes);
}

}  // namespace drvshim::detail
