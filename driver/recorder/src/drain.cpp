// The consumer: reads every thread's log, puts the entries in time order,
// numbers them, and writes them to the file (rendered straight from the
// entries into one reused buffer) and/or keeps them in memory. Runs under
// the consumer lock, which producers never take.
#include <drvshim_recorder/json_line.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>

#include "entry.hpp"
#include "state.hpp"

namespace drvshim::recorder::detail {
namespace {

// Fills `r` (reusing its strings' storage) from one entry.
void decode_into(State& s, const unsigned char* entry, std::uint64_t tid, Record& r) {
  EntryHead h;
  std::memcpy(&h, entry, sizeof(h));
  r.seq = 0;
  r.ts_ns = h.ts - s.epoch;
  r.dur_ns = h.dur;
  r.tid = tid;
  r.kind = h.kind;
  r.result = h.result;
  r.ctx = static_cast<std::uintptr_t>(h.ctx);
  r.rt = h.rt;
  r.count = 0;
  r.symbol.clear();
  r.args.clear();
  r.lib.clear();
  const char* text = entry_text(entry, h);
  switch (h.form) {
    case ApiForm::cstr:
      r.api.assign(static_cast<const char*>(h.api));
      r.args.assign(text, h.text_len);
      break;
    case ApiForm::inline_: {
      const std::size_t n = std::min(h.api_len, h.text_len);
      r.api.assign(text, n);
      r.args.assign(text + n, h.text_len - n);
      break;
    }
    case ApiForm::desc: {
      const auto* desc = static_cast<const CallDesc*>(h.api);
      r.api.assign(desc->api);
      r.symbol.assign(desc->symbol);
      render_words(*desc, static_cast<const ArgKind*>(h.aux), entry_words(entry), h.nwords,
                   std::string_view(text, h.text_len), r.args);
      break;
    }
  }
  if (h.caller != 0) r.lib.assign(s.callers.name(static_cast<std::uintptr_t>(h.caller)));
}

void counters_of(State& s, ThreadLog* log) {
  if (log->counters == nullptr) return;
  double ns_per = 0;  // measured once, at the first slot with calls
  for (std::size_t i = 0; i < log->counter_slots && i < s.counter_slots; ++i) {
    const std::uint64_t calls = log->counters[i].calls.exchange(0, std::memory_order_relaxed);
    if (calls == 0) continue;
    if (ns_per == 0) ns_per = ns_per_tick();
    Record r;
    r.ts_ns = now_ns() - s.epoch;
    const auto ticks = log->counters[i].ticks.exchange(0, std::memory_order_relaxed);
    r.dur_ns = std::llround(static_cast<double>(ticks) * ns_per);
    r.tid = log->tid;
    r.kind = Kind::counts;
    r.api = s.counter_descs[i].api;
    r.symbol = s.counter_descs[i].symbol;
    r.count = calls;
    s.extras.push_back(std::move(r));
  }
}

std::vector<ThreadLog*> snapshot(State& s) {
  std::vector<ThreadLog*> out;
  std::lock_guard<std::mutex> lock(s.registry_mutex);
  for (ThreadLog* l = s.logs; l != nullptr; l = l->next) out.push_back(l);
  return out;
}

// Frees the logs of ended threads that were read to the end (their counts go out with the next drain).
void reap(State& s) {
  std::vector<ThreadLog*> dead;
  {
    std::lock_guard<std::mutex> lock(s.registry_mutex);
    ThreadLog** link = &s.logs;
    while (*link != nullptr) {
      ThreadLog* l = *link;
      if (l->exited.load(std::memory_order_acquire) && l->drained()) {
        *link = l->next;
        dead.push_back(l);
      } else {
        link = &l->next;
      }
    }
  }
  for (ThreadLog* l : dead) {
    counters_of(s, l);
    s.dropped += l->dropped.load(std::memory_order_relaxed);
    delete l;
  }
}

void write_truncation_notice(State& s, std::int64_t ts, std::uint32_t pid) {
  Record last;
  last.seq = ++s.next_seq;
  last.pid = pid;
  last.ts_ns = ts;
  last.tid = thread_id();
  last.kind = Kind::event;
  last.api = "trace-truncated";
  last.args = "the trace file reached its cap of " + std::to_string(s.file.max_bytes()) +
              " bytes; later records of this process were not written (raise the cap: DRVSHIM_TRACE_MAX_BYTES or "
              "drvshim-trace --max-size)";
  std::string line = to_json(last);
  line += '\n';
  s.file.write_final(line);
}

// Writes out one record: to the file buffer and/or the memory store.
void emit_one(State& s, Record& r, std::uint32_t pid, bool to_file, bool to_memory, std::size_t& kept) {
  // Thread names and counts are for the file only; without one they take no number.
  if (!to_file && (r.kind == Kind::thread || r.kind == Kind::counts)) return;
  r.seq = ++s.next_seq;
  r.pid = pid;
  if (to_file) {
    append_json(s.lines, r);
    s.lines += '\n';
  }
  if (to_memory && r.kind != Kind::thread && r.kind != Kind::counts) {
    if (s.memory_store.size() < kMaxRecords) {
      s.memory_store.push_back(r);
      ++kept;
    } else {
      ++s.dropped;
    }
  }
}

}  // namespace

void drain_locked(State& s) noexcept {
  try {
    const std::vector<ThreadLog*> logs = snapshot(s);
    s.refs.clear();
    for (ThreadLog* log : logs) {
      const std::size_t first = s.refs.size();
      log->drain(
          [&](const unsigned char* entry) {
            std::int64_t ts = 0;
            std::memcpy(&ts, entry + offsetof(EntryHead, ts), sizeof(ts));
            s.refs.push_back({ts, log, entry});
          },
          [&](Chunk* c) { s.retired.emplace_back(log, c); });
      if (!log->announced && s.refs.size() > first) {
        log->announced = true;
        Record t;
        t.ts_ns = s.refs[first].ts - s.epoch;
        t.tid = log->tid;
        t.kind = Kind::thread;
        t.api = "thread";
        t.args = log->name;
        s.extras.push_back(std::move(t));
      }
      s.dropped += log->dropped.exchange(0, std::memory_order_relaxed);
    }
    if (s.after_final.load(std::memory_order_relaxed) && !s.final_done) {
      s.final_done = true;
      for (ThreadLog* log : logs) counters_of(s, log);
    }
    // Each thread's entries are in order already; across threads, by start time.
    std::stable_sort(s.refs.begin(), s.refs.end(),
                     [](const State::Ref& a, const State::Ref& b) { return a.ts < b.ts; });
    std::stable_sort(s.extras.begin(), s.extras.end(),
                     [](const Record& a, const Record& b) { return a.ts_ns < b.ts_ns; });

    const std::uint32_t pid = s.pid.load(std::memory_order_relaxed);
    const bool to_file = s.file.is_open() && !s.file.capped();
    const bool to_memory = s.memory_on.load(std::memory_order_relaxed);
    std::size_t kept = 0;
    s.lines.clear();
    std::size_t e = 0;
    for (const auto& ref : s.refs) {
      // Consumer-made records (a thread's name, counts) go before entries of the same time.
      while (e < s.extras.size() && s.extras[e].ts_ns <= ref.ts - s.epoch)
        emit_one(s, s.extras[e++], pid, to_file, to_memory, kept);
      decode_into(s, ref.entry, ref.log->tid, s.scratch);
      emit_one(s, s.scratch, pid, to_file, to_memory, kept);
    }
    while (e < s.extras.size()) emit_one(s, s.extras[e++], pid, to_file, to_memory, kept);
    if (to_file && !s.lines.empty() && !s.file.write_lines(s.lines) && !s.file.capped()) {
      write_truncation_notice(s, s.refs.empty() ? now_ns() - s.epoch : s.refs.back().ts - s.epoch, pid);
    }
    if (s.file.capped() && !to_memory) s.dropped += s.refs.size();
    // What memory does not keep frees its budget (consumer-made records took none).
    s.budget.fetch_add(static_cast<std::int64_t>(s.refs.size() - std::min(kept, s.refs.size())),
                       std::memory_order_relaxed);
    s.extras.clear();
    for (const auto& [log, chunk] : s.retired) log->recycle(chunk);
    s.retired.clear();
    s.refs.clear();
    reap(s);
  } catch (...) {
    // Out of memory while draining: this drain's records are lost, the program goes on.
    for (const auto& [log, chunk] : s.retired) log->recycle(chunk);
    s.retired.clear();
    s.refs.clear();
    s.extras.clear();
  }
}

}  // namespace drvshim::recorder::detail
