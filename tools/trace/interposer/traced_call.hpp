// SPDX-License-Identifier: Apache-2.0
#pragma once
// The body of every generated wrapper: time the real call, then record it as
// raw words (no formatting on the caller's thread), or only count it
// (summary mode, a call that changes no state and succeeded: timed in ticks,
// added to this thread's counters).
#include <cstring>
#include <type_traits>

#include "interposer.hpp"

namespace drvshim::trace_interposer {

template <class T>
inline std::uint64_t word_of(T v) noexcept {
  if constexpr (std::is_pointer_v<T>) {
    return reinterpret_cast<std::uintptr_t>(v);
  } else if constexpr (std::is_floating_point_v<T>) {
    const double d = static_cast<double>(v);
    std::uint64_t bits = 0;
    std::memcpy(&bits, &d, sizeof(bits));
    return bits;
  } else if constexpr (std::is_enum_v<T>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
  } else if constexpr (std::is_integral_v<T> && std::is_signed_v<T>) {
    return static_cast<std::uint64_t>(static_cast<std::int64_t>(v));
  } else if constexpr (std::is_integral_v<T>) {
    return static_cast<std::uint64_t>(v);
  } else {
    return 0;  // a struct passed by value
  }
}

// The value an out parameter points to.
template <class T>
inline std::uint64_t pointee_word(T p) noexcept {
  using P = std::remove_pointer_t<T>;
  P v;
  std::memcpy(&v, p, sizeof(P));
  return word_of(v);
}

template <class... A>
struct Kinds {
  // One extra entry so a function without parameters still has an array.
  static constexpr recorder::ArgKind value[] = {recorder::arg_kind<A>()..., recorder::ArgKind::aggregate};
  static constexpr std::size_t count = sizeof...(A);
  static constexpr std::size_t words = recorder::words_for(value, count);
};

struct Capture {
  std::uint64_t* words;
  std::size_t next_out;  // index of the next out value
  std::uint64_t valid = 0;
  char* strings;
  std::size_t used = 0;
  std::size_t room;
  bool ok;          // the call succeeded: out values are valid
  const char* hex;  // the desc's per-parameter hints: 'a' marks an input array, never read

  template <class T>
  void operator()(std::size_t i, T v) noexcept {
    constexpr recorder::ArgKind kind = recorder::arg_kind<T>();
    words[i] = word_of(v);
    if constexpr (recorder::is_out(kind)) {
      std::uint64_t out = 0;
      if (ok && v != nullptr && hex[i] != 'a') {
        out = pointee_word(v);
        if (i < 64) valid |= std::uint64_t{1} << i;
      }
      words[next_out++] = out;
    } else if constexpr (kind == recorder::ArgKind::str) {
      if (v != nullptr && room > used) {
        const std::size_t n = ::strnlen(v, room - used - 1);
        std::memcpy(strings + used, v, n);
        used += n;
        strings[used++] = '\0';
      }
    }
  }
};

inline std::uintptr_t current_context() noexcept {
  static constexpr std::size_t kGetCurrent = id_of("cuCtxGetCurrent");
  if (!g_initialized.load(std::memory_order_relaxed)) return 0;
  void* raw = g_real[kGetCurrent];
  if (raw == nullptr) return 0;
  auto fn = reinterpret_cast<CUresult (*)(CUcontext*)>(raw);
  CUcontext ctx = nullptr;
  return fn(&ctx) == CUDA_SUCCESS ? reinterpret_cast<std::uintptr_t>(ctx) : 0;
}

constexpr bool same(const char* a, const char* b) { return std::string_view(a) == std::string_view(b); }

// Failures that answer a question rather than report a problem: counted in summary mode.
template <std::size_t Id>
inline bool counted_failure(CUresult r) noexcept {
  constexpr bool query = same(kFns[Id].base, "cuStreamQuery") || same(kFns[Id].base, "cuEventQuery");
  if constexpr (query) {
    return r == CUDA_ERROR_NOT_READY;
  } else {
    return false;
  }
}

template <std::size_t Id, class... A>
[[gnu::noinline]] void record_call(void* caller, std::int64_t t0, std::int64_t dur, CUresult r, A... a) noexcept {
  using K = Kinds<A...>;
  std::uint64_t words[K::words];
  char strings[512];
  Capture cap{words, K::count, 0, strings, 0, sizeof(strings), r == CUDA_SUCCESS, kDescs[Id].hex};
  std::size_t i = 0;
  (cap(i++, a), ...);
  words[K::words - 1] = cap.valid;
  recorder::call_words(&kDescs[Id], K::value, t0, dur, static_cast<int>(r), current_context(),
                       reinterpret_cast<std::uintptr_t>(caller), current_runtime_call(), words, K::words,
                       std::string_view(strings, cap.used));
}

// `after` runs between the real call and the record (it may rewrite out values, as
// cuGetProcAddress's hook does with the pointer it hands back).
template <std::size_t Id, class After, class... A>
inline CUresult traced_with(void* caller, After&& after, A... a) noexcept {
  using Fn = CUresult (*)(A...);
  void* raw = g_real[Id];
  const int mode = g_mode.load(std::memory_order_relaxed);
  if (raw == nullptr) [[unlikely]] {
    // A call of an entry point the real driver lacks is a failed call like any other.
    const std::int64_t t0 = recorder::now_ns();
    const CUresult r = missing_function(Id);
    after(r);
    if (mode != kOff) record_call<Id>(caller, t0, recorder::now_ns() - t0, r, a...);
    return r;
  }
  const Fn fn = reinterpret_cast<Fn>(raw);
  if (mode == kOff) {
    const CUresult r = fn(a...);
    after(r);
    return r;
  }
  if constexpr (!kFns[Id].interesting) {
    if (mode == kSummary) {
      // Summary mode's hot path (launches, queries, copies): two reads of the tick counter
      // and two plain adds to this thread's counters; the caller's address, the current
      // context and the arguments are taken only for a call that failed (recorded one by one).
      const std::uint64_t t0 = recorder::ticks();
      const CUresult r = fn(a...);
      const std::uint64_t ticks = recorder::ticks() - t0;
      after(r);
      // An answer that is not an event (a query's NOT_READY) is counted like a success; so
      // is any failure once the record budget runs low, which state changes keep for themselves.
      if (r == CUDA_SUCCESS || counted_failure<Id>(r) || !recorder::room_for_optional()) [[likely]] {
        recorder::count(Id, ticks);
      } else {
        const auto dur = static_cast<std::int64_t>(static_cast<double>(ticks) * recorder::ns_per_tick());
        record_call<Id>(caller, recorder::now_ns() - dur, dur, r, a...);
      }
      return r;
    }
  }
  const std::int64_t t0 = recorder::now_ns();
  const CUresult r = fn(a...);
  const std::int64_t dur = recorder::now_ns() - t0;
  after(r);
  record_call<Id>(caller, t0, dur, r, a...);
  return r;
}

template <std::size_t Id, class... A>
inline CUresult traced(void* caller, A... a) noexcept {
  if constexpr (Id == id_of("cuInit")) {
    before_init();
    return traced_with<Id>(
        caller, [](CUresult r) { after_init(r); }, a...);
  } else {
    return traced_with<Id>(
        caller, [](CUresult) {}, a...);
  }
}

// cuGetProcAddress (v1 and v2): the pointer the real driver returned is
// replaced by the wrapper of exactly that variant; a pointer that is no
// export of the real driver is handed out untraced (through a counting
// trampoline where there is one: untraced_entries.cpp).
template <std::size_t Id, class... A>
inline CUresult hooked(void* caller, const char* symbol, void** pfn, int version, cuuint64_t flags,
                       A... rest) noexcept {
  auto after = [&](CUresult r) {
    if (r != CUDA_SUCCESS || pfn == nullptr || *pfn == nullptr) return;
    if (const int id = id_of_real(*pfn); id >= 0) {
      *pfn = drvshim_trace_wrapper_table[id];
    } else if (const int named = id_for_lookup(symbol, version, flags); named >= 0) {
      // An address the driver has only for this version (a shim): the wrapper of the variant
      // its own rule names, calling that variant's export.
      lookup_matched_by_name(symbol, version, flags, static_cast<std::size_t>(named));
      *pfn = drvshim_trace_wrapper_table[named];
    } else {
      *pfn = untraced_lookup(symbol, version, flags, *pfn);
    }
  };
  return traced_with<Id>(caller, after, symbol, pfn, version, flags, rest...);
}

}  // namespace drvshim::trace_interposer
