// SPDX-License-Identifier: Apache-2.0
// Producers append to their thread's log; the consumer drains all logs into
// the sinks. See recorder.hpp for the design.
#include <drvshim_recorder/json_line.hpp>
#include <drvshim_recorder/recorder.hpp>

#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "entry.hpp"
#include "recorder_state.hpp"

namespace drvshim::recorder {

std::atomic<bool> g_active{false};

namespace detail {

State& state() noexcept {
  static State* s = [] {
    auto* st = new State;
    st->epoch = now_ns();
    st->pid.store(static_cast<std::uint32_t>(::getpid()));
    install_fork_handlers();
    return st;
  }();
  return *s;
}

namespace {

void update_active(State& s) noexcept {
  g_active.store(s.memory_on.load() || s.file_on.load(), std::memory_order_relaxed);
}

// One record's worth of budget for `log`'s thread; false when the cap is reached.
bool take_budget(State& s, ThreadLog& log) noexcept {
  if (log.budget > 0) [[likely]] {
    --log.budget;
    return true;
  }
  std::int64_t available = s.budget.load(std::memory_order_relaxed);
  while (available > 0) {
    const std::int64_t take = std::min(available, kBudgetBlock);
    if (s.budget.compare_exchange_weak(available, available - take, std::memory_order_relaxed)) {
      log.budget = take - 1;
      return true;
    }
  }
  log.dropped.fetch_add(1, std::memory_order_relaxed);
  return false;
}

// Reserves an entry; nullptr when the record is dropped.
unsigned char* begin_entry(State& s, ThreadLog*& log, std::uint32_t bytes) noexcept {
  log = current_log();
  if (log == nullptr || !take_budget(s, *log)) return nullptr;
  const bool grows = log->pos + bytes > log->tail->capacity;
  unsigned char* p = log->reserve(bytes);
  if (p == nullptr) {
    log->dropped_oom.fetch_add(1, std::memory_order_relaxed);
    return nullptr;
  }
  if (grows) {
    // A full chunk: the writer has work. A forked child starts its writer only now: a thread
    // started in the child of a threaded parent is best left to children that record much
    // (the others are written at their exit, _exit or exec).
    if (!s.writer_started.load(std::memory_order_relaxed)) ensure_writer(s);
    wake_writer(s);
  }
  return p;
}

void end_entry(State& s, ThreadLog* log, std::uint32_t bytes) noexcept {
  log->commit(bytes);
  if (s.synchronous.load(std::memory_order_relaxed) || s.after_final.load(std::memory_order_relaxed)) [[unlikely]] {
    std::lock_guard<std::mutex> lock(s.consumer_mutex);
    drain_locked(s);
  }
}

EntryHead make_head(std::uint32_t size, Kind kind, ApiForm form, std::size_t nwords, std::size_t text) noexcept {
  EntryHead h{};
  h.size = size;
  h.kind = kind;
  h.form = form;
  h.nwords = static_cast<std::uint16_t>(nwords);
  h.text_len = static_cast<std::uint32_t>(text);
  return h;
}

// Arguments and details are capped so one record always fits a chunk comfortably.
constexpr std::size_t kMaxText = std::size_t{16} * 1024;

}  // namespace

constinit thread_local int tl_busy = 0;

}  // namespace detail

using namespace detail;

// ---- configuration -----------------------------------------------------------------

void set_epoch(std::int64_t absolute_ns) noexcept { state().epoch = absolute_ns; }
void set_namespace(std::uint32_t ns) noexcept { state().ns = ns; }
std::int64_t epoch() noexcept { return state().epoch; }

void set_memory(bool on) noexcept {
  BusyScope busy;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.consumer_mutex);
  if (!on) drain_locked(s);  // what was recorded while on is kept
  s.memory_on.store(on);
  update_active(s);
}

bool memory() noexcept { return state().memory_on.load(); }

std::string set_file(const std::string& path, std::uint64_t max_bytes) {
  State& s = state();
  BusyScope busy;
  TraceFile opened;
  if (!path.empty()) {
    if (std::string why = opened.open(path, max_bytes); !why.empty()) return why;
  }
  std::lock_guard<std::mutex> lock(s.consumer_mutex);
  drain_locked(s);  // earlier records go to the earlier file (or nowhere)
  s.file.close();
  if (!path.empty()) {
    s.file.swap(opened);
  }
  s.file_on.store(s.file.is_open());
  update_active(s);
  if (s.file.is_open()) ensure_writer(s);
  return {};
}

bool file_open() noexcept { return state().file_on.load(); }

void set_counters(const CallDesc* descs, std::size_t n) noexcept {
  State& s = state();
  calibrate_ticks();
  s.counter_descs = descs;
  s.counter_slots = n;
}

void set_synchronous(bool on) noexcept { state().synchronous.store(on); }

// ---- producers ------------------------------------------------------------------------

void call_text(const char* api, std::int64_t start_ns, std::int64_t duration_ns, std::string_view args, int result,
               std::uintptr_t context) noexcept {
  if (tl_busy != 0) [[unlikely]] {
    note_reentrant();
    return;
  }
  BusyScope busy;
  State& s = state();
  if (args.size() > kMaxText) args = args.substr(0, kMaxText);
  const std::uint32_t bytes = entry_bytes(0, args.size());
  ThreadLog* log = nullptr;
  unsigned char* p = begin_entry(s, log, bytes);
  if (p == nullptr) return;
  EntryHead h = make_head(bytes, Kind::call, ApiForm::cstr, 0, args.size());
  h.ts = start_ns;
  h.dur = duration_ns;
  h.result = result;
  h.ctx = context;
  h.api = api;
  std::memcpy(p, &h, sizeof(h));
  if (!args.empty()) std::memcpy(p + sizeof(h), args.data(), args.size());
  end_entry(s, log, bytes);
}

void call_words(const CallDesc* desc, const ArgKind* kinds, std::int64_t start_ns, std::int64_t duration_ns, int result,
                std::uintptr_t context, std::uintptr_t caller, std::uint64_t rt, const std::uint64_t* words,
                std::size_t nwords, std::string_view strings) noexcept {
  if (tl_busy != 0) [[unlikely]] {
    note_reentrant();
    return;
  }
  BusyScope busy;
  State& s = state();
  if (strings.size() > kMaxText) strings = strings.substr(0, kMaxText);
  const std::uint32_t bytes = entry_bytes(nwords, strings.size());
  ThreadLog* log = nullptr;
  unsigned char* p = begin_entry(s, log, bytes);
  if (p == nullptr) return;
  EntryHead h = make_head(bytes, Kind::call, ApiForm::desc, nwords, strings.size());
  h.ts = start_ns;
  h.dur = duration_ns;
  h.result = result;
  h.ctx = context;
  h.caller = caller;
  h.rt = rt;
  h.api = desc;
  h.aux = kinds;
  std::memcpy(p, &h, sizeof(h));
  if (nwords > 0) std::memcpy(p + sizeof(h), words, 8 * nwords);
  if (!strings.empty()) std::memcpy(p + sizeof(h) + 8 * nwords, strings.data(), strings.size());
  end_entry(s, log, bytes);
}

void event(Kind kind, std::string_view api, std::string_view detail, std::int64_t start_ns, std::int64_t duration_ns,
           std::uint64_t rt, int result) noexcept {
  if (tl_busy != 0) [[unlikely]] {
    note_reentrant();
    return;
  }
  BusyScope busy;
  State& s = state();
  if (api.size() > 256) api = api.substr(0, 256);
  if (detail.size() > kMaxText) detail = detail.substr(0, kMaxText);
  const std::size_t text = api.size() + detail.size();
  const std::uint32_t bytes = entry_bytes(0, text);
  ThreadLog* log = nullptr;
  unsigned char* p = begin_entry(s, log, bytes);
  if (p == nullptr) return;
  EntryHead h = make_head(bytes, kind, ApiForm::inline_, 0, text);
  h.ts = start_ns != 0 ? start_ns : now_ns();
  h.dur = duration_ns;
  h.rt = rt;
  h.result = result;
  h.api_len = static_cast<std::uint32_t>(api.size());
  std::memcpy(p, &h, sizeof(h));
  std::memcpy(p + sizeof(h), api.data(), api.size());
  if (!detail.empty()) std::memcpy(p + sizeof(h) + api.size(), detail.data(), detail.size());
  end_entry(s, log, bytes);
}

// ---- consumers ------------------------------------------------------------------------

std::vector<Record> records() {
  BusyScope busy;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.consumer_mutex);
  drain_locked(s);
  return s.memory_store;
}

namespace detail {
void visit_records(void (*visit)(void*, const Record&), void* ctx) {
  BusyScope busy;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.consumer_mutex);
  drain_locked(s);
  for (const auto& r : s.memory_store) visit(ctx, r);
}
}  // namespace detail

void clear() {
  BusyScope busy;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.consumer_mutex);
  const bool memory_on = s.memory_on.load();
  s.memory_on.store(false);  // what is pending is drained to the file only
  drain_locked(s);
  s.memory_on.store(memory_on);
  s.budget.fetch_add(static_cast<std::int64_t>(s.memory_store.size()), std::memory_order_relaxed);
  s.memory_store.clear();
  s.memory_store.shrink_to_fit();
  s.dropped = 0;
}

std::size_t max_records() noexcept { return kMaxRecords; }

void testing::take_budget(std::int64_t n) noexcept {
  State& s = state();
  s.budget.fetch_sub(n, std::memory_order_relaxed);
  // The calling thread's block goes back too, so the next record asks the global budget.
  if (ThreadLog* log = current_log(); log != nullptr) {
    s.budget.fetch_add(log->budget, std::memory_order_relaxed);
    log->budget = 0;
  }
}

bool room_for_optional() noexcept {
  return state().budget.load(std::memory_order_relaxed) > static_cast<std::int64_t>(kMaxRecords / 4);
}

std::uint64_t dropped() noexcept {
  State& s = state();
  std::lock_guard<std::mutex> lock(s.consumer_mutex);
  std::uint64_t total = s.dropped;
  std::lock_guard<std::mutex> reg(s.registry_mutex);
  for (ThreadLog* l = s.logs; l != nullptr; l = l->next) total += l->dropped.load(std::memory_order_relaxed);
  return total;
}

void flush() noexcept {
  if (tl_busy != 0) return;  // a signal handler on a thread inside the recorder: left to the writer
  BusyScope busy;
  State& s = state();
  std::lock_guard<std::mutex> lock(s.consumer_mutex);
  drain_locked(s);
}

void final_flush() noexcept {
  State& s = state();
  s.after_final.store(true);
  flush();
}

std::uint32_t process_id() noexcept { return state().pid.load(std::memory_order_relaxed); }

}  // namespace drvshim::recorder
