// SPDX-License-Identifier: Apache-2.0
// Entry points the real driver resolves (cuGetProcAddress) but neither exports
// nor declares in cuda.h (cuGL*, cuEGL*, cuVDPAU* in a driver without graphics
// interop): the interposer has no wrapper for them, so it cannot trace their
// calls. It says so once per (symbol, version, flags), not once per lookup
// (the CUDA Runtime, cuBLAS and cuBLASLt each resolve the same ~30), and on
// x86-64 hands out a counting trampoline instead of the driver's pointer: a
// stub that adds one to a per-entry counter and jumps to the driver's function
// with every register as the caller left it (signature unknown, so nothing is
// read). At exit, the entries that were called are named with their count.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <string>

#include "interposer.hpp"

namespace {
constexpr std::size_t kSlots = 256;  // the .rept count below
}  // namespace

// Read and written by the trampolines (assembly below): hidden, reached PC-relative.
extern "C" {
__attribute__((visibility("hidden"))) std::uint64_t drvshim_trace_untraced_calls[kSlots];
__attribute__((visibility("hidden"))) const void* drvshim_trace_untraced_targets[kSlots];
}

#if defined(__x86_64__)
// kSlots stubs of 16 bytes each: the slot's index in r11, then the common part, which counts
// the call (locked add: any thread) and jumps to the target. r10 and r11 carry no argument in
// the SysV ABI (and al, the vector-register count of a variadic call, is left alone).
asm(R"(
  .text
  .p2align 4
  .globl drvshim_trace_untraced_stubs
  .hidden drvshim_trace_untraced_stubs
  .type drvshim_trace_untraced_stubs, @function
drvshim_trace_untraced_stubs:
  .set drvshim_trace_stub_index, 0
  .rept 256
  .p2align 4
  endbr64
  movl $drvshim_trace_stub_index, %r11d
  jmp drvshim_trace_untraced_common
  .set drvshim_trace_stub_index, drvshim_trace_stub_index + 1
  .endr
  .size drvshim_trace_untraced_stubs, . - drvshim_trace_untraced_stubs
  .p2align 4
  .type drvshim_trace_untraced_common, @function
drvshim_trace_untraced_common:
  leaq drvshim_trace_untraced_calls(%rip), %r10
  lock incq (%r10,%r11,8)
  leaq drvshim_trace_untraced_targets(%rip), %r10
  jmpq *(%r10,%r11,8)
  .size drvshim_trace_untraced_common, . - drvshim_trace_untraced_common
)");
extern "C" __attribute__((visibility("hidden"))) void drvshim_trace_untraced_stubs();
#define DRVSHIM_TRACE_HAVE_STUBS 1
#else
#define DRVSHIM_TRACE_HAVE_STUBS 0
#endif

namespace drvshim::trace_interposer {
namespace {

struct Slot {
  char symbol[96];
  int version;
  unsigned long long flags;
  std::atomic<bool> ready;
};
Slot g_slots[kSlots];
std::atomic<std::size_t> g_claimed{0};

void* stub_address(std::size_t slot) noexcept {
#if DRVSHIM_TRACE_HAVE_STUBS
  return reinterpret_cast<char*>(reinterpret_cast<void*>(&drvshim_trace_untraced_stubs)) + 16 * slot;
#else
  (void)slot;
  return nullptr;
#endif
}

std::string key_of(const Slot& s) { return fmt::format("{}@{} flags {}", s.symbol, s.version, s.flags); }

}  // namespace

UntracedEntry untraced_entry(const void* real, const char* symbol, int version, unsigned long long flags) noexcept {
  const char* name = symbol != nullptr ? symbol : "(null)";
  const std::size_t seen = std::min(g_claimed.load(std::memory_order_acquire), kSlots);
  for (std::size_t i = 0; i < seen; ++i) {
    const Slot& s = g_slots[i];
    if (s.ready.load(std::memory_order_acquire) && drvshim_trace_untraced_targets[i] == real && s.version == version &&
        s.flags == flags && std::strncmp(s.symbol, name, sizeof(s.symbol)) == 0) {
      void* stub = stub_address(i);
      return {stub != nullptr ? stub : const_cast<void*>(real), false};
    }
  }
  // A new entry (two threads asking at once may both get one: both work, and are listed once).
  const std::size_t i = g_claimed.fetch_add(1, std::memory_order_acq_rel);
  if (i >= kSlots) return {const_cast<void*>(real), true};  // none left: the driver's pointer, said each time
  Slot& s = g_slots[i];
  std::strncpy(s.symbol, name, sizeof(s.symbol) - 1);
  s.version = version;
  s.flags = flags;
  drvshim_trace_untraced_targets[i] = real;
  s.ready.store(true, std::memory_order_release);
  void* stub = stub_address(i);
  return {stub != nullptr ? stub : const_cast<void*>(real), true};
}

void untraced_call_records(std::vector<recorder::Record>& out) {
  const std::size_t seen = std::min(g_claimed.load(std::memory_order_acquire), kSlots);
  std::size_t entries = 0;
  auto add = [&](const char* api, std::string args) {
    recorder::Record r;
    r.kind = recorder::Kind::event;
    r.api = api;
    r.args = std::move(args);
    out.push_back(std::move(r));
  };
  for (std::size_t i = 0; i < seen; ++i) {
    if (!g_slots[i].ready.load(std::memory_order_acquire)) continue;
    ++entries;
    const std::uint64_t calls = __atomic_load_n(&drvshim_trace_untraced_calls[i], __ATOMIC_RELAXED);
    if (calls == 0) continue;
    add("untraced-entry-point-called",
        fmt::format("{}: {} call(s) through the pointer handed out for it; their arguments and results are not traced",
                    key_of(g_slots[i]), calls));
  }
  if (const auto lookups = g_untraced.load(); lookups > 0) {
    add("untraced-summary", fmt::format("{} entry point(s) handed out untraced ({} lookup(s)){}", entries, lookups,
                                        DRVSHIM_TRACE_HAVE_STUBS ? "" : "; calls through them are not counted here"));
  }
}

void report_untraced_calls() noexcept {
  try {
    std::vector<recorder::Record> records;
    untraced_call_records(records);
    for (const auto& r : records) recorder::event(r.kind, r.api, r.args);
  } catch (...) {
  }
}

void reset_untraced_calls() noexcept {
  for (auto& c : drvshim_trace_untraced_calls) __atomic_store_n(&c, 0, __ATOMIC_RELAXED);
}

}  // namespace drvshim::trace_interposer
