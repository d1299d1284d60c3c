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

// How the host side of a staged copy writes its bytes.
//  - stream: non-temporal stores; the lines go to memory, not into a cache,
//    and none is read before it is overwritten.
//  - demote: ordinary stores, each line then pushed from this core's cache to
//    the shared last-level cache (CLDEMOTE), where a DMA reads it without
//    pulling it out of a core: the fastest way to the device below 32 MiB.
//  - plain: memcpy. Best both ways from 32 MiB up: lines that many leave the
//    cache before their DMA reads them anyway.
// Every variant fetches the source 4 KiB ahead: a core's hardware prefetcher
// alone keeps too few lines in flight. (Measurements: docs/staging.md.)
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

// Copies below this size use the streaming kernels (see Kernel).
constexpr std::size_t kStreamBelow = std::size_t{32} << 20;

// The kernel for a copy: automatically, under kStreamBelow, demote to the
// device where the CPU has CLDEMOTE (streaming stores elsewhere) and
// streaming stores into the user's buffer to the host (no read for ownership
// of lines that are only written); plain from there up.
inline Kernel kernel_for(bool to_device, std::size_t bytes) noexcept {
  static const bool demote = cpu_has_cldemote();
  switch (stores_mode()) {
    case Stores::stream: return Kernel::stream;
    case Stores::demote: return to_device ? Kernel::demote : Kernel::plain;
    case Stores::plain: return Kernel::plain;
    case Stores::automatic: break;
  }
  if (bytes >= kStreamBelow) return Kernel::plain;
  return to_device && demote ? Kernel::demote : Kernel::stream;
}

}  // namespace drvshim::detail
