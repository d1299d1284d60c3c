// SPDX-License-Identifier: Apache-2.0
// The consumer: reads every thread's log, puts the entries in time order,
// numbers them, and writes them to the file (rendered straight from the
// entries into one reused buffer) and/or keeps them in memory. Runs under
// the consumer lock, which producers never take.
#include <drvshim_recorder/json_line.hpp>

#include <string.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "entry.hpp"
#include "recorder_state.hpp"

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

void write_truncation_notice(State& s, std::int64_t ts, std::uint32_t pid, std::size_t unwritten) {
  Record last;
  last.seq = ++s.next_seq;
  last.pid = pid;
  last.ts_ns = ts;
  last.tid = thread_id();
  last.kind = Kind::event;
  last.api = "trace-truncated";
  if (s.file.failed()) {
    last.args = s.file.failure() + "; " + std::to_string(unwritten) +
                " record(s) and every later record of this process were not written (is the disk full?)";
  } else {
    last.args = "the trace file reached its cap of " + std::to_string(s.file.max_bytes()) + " bytes; " +
                std::to_string(unwritten) +
                " record(s) and every later record of this process were not written (raise the cap: "
                "DRVSHIM_TRACE_MAX_BYTES or drvshim-trace --max-size)";
  }
  std::string line = to_json(last);
  line += '\n';
  s.file.write_final(line);
}

// The last record of an image that ends by a signal or _exit (note_ending()).
void note_trace_end(State& s) {
  const char* how = s.ending_how.load(std::memory_order_acquire);
  if (how == nullptr || s.ending_written) return;
  s.ending_written = true;
  const int value = s.ending_value.load(std::memory_order_relaxed);
  const std::int64_t ts = s.ending_ns.load(std::memory_order_relaxed) - s.epoch;
  const std::uint64_t tid = s.ending_tid.load(std::memory_order_relaxed);
  if (auto make = s.ending_records.load(std::memory_order_acquire); make != nullptr) {
    std::vector<Record> more;
    make(more);
    for (auto& m : more) {
      m.ts_ns = ts;
      m.tid = tid;
      s.extras.push_back(std::move(m));
    }
  }
  Record r;
  r.ts_ns = ts;
  r.tid = tid;
  r.kind = Kind::process;
  r.api = "trace-end";
  if (std::strcmp(how, "signal") == 0) {
    const char* name = ::sigabbrev_np(value);
    r.args = "reason=signal " + std::to_string(value) + (name != nullptr ? std::string(" (SIG") + name + ")" : "");
  } else {
    r.args = std::string("reason=") + how + "; status=" + std::to_string(value);
  }
  s.extras.push_back(std::move(r));
}

// A record saying how many records a thread lost since the last one, and why.
void note_dropped(State& s, std::uint64_t tid, std::uint64_t count, const char* reason) {
  if (count == 0) return;
  Record r;
  r.ts_ns = now_ns() - s.epoch;
  r.tid = tid;
  r.kind = Kind::event;
  r.api = "records-dropped";
  r.args = "count=" + std::to_string(count) + "; reason=" + reason;
  s.extras.push_back(std::move(r));
}

// Writes out one record: to the file buffer and/or the memory store.
// Records the consumer makes (thread names, counts, lost records) are for the file only.
void emit_one(State& s, Record& r, std::uint32_t pid, bool to_file, bool to_memory, bool made_here, std::size_t& kept) {
  // Without a file the consumer's own records take no number.
  if (!to_file && made_here) return;
  r.seq = ++s.next_seq;
  r.pid = pid;
  r.ns = s.ns;
  if (to_file) {
    append_json(s.lines, r);
    s.lines += '\n';
  }
  if (to_memory && !made_here) {
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
    s.callers.refresh();
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
      const std::uint64_t behind = log->dropped.exchange(0, std::memory_order_relaxed);
      const std::uint64_t oom = log->dropped_oom.exchange(0, std::memory_order_relaxed);
      const std::uint64_t reentrant = log->dropped_reentrant.exchange(0, std::memory_order_relaxed);
      s.dropped += behind + oom + reentrant;
      note_dropped(s, log->tid, behind, "writer-behind");
      note_dropped(s, log->tid, oom, "out-of-memory");
      note_dropped(s, log->tid, reentrant, "reentrant");
    }
    if (s.unwritable > 0) {
      note_dropped(s, thread_id(), s.unwritable, "unwritable");
      s.unwritable = 0;
    }
    if (const std::uint64_t orphan = s.reentrant_without_log.exchange(0, std::memory_order_relaxed); orphan > 0) {
      s.dropped += orphan;
      note_dropped(s, 0, orphan, "reentrant");
    }
    note_trace_end(s);
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
    const bool to_file = !s.file.stopped();
    const bool to_memory = s.memory_on.load(std::memory_order_relaxed);
    std::size_t kept = 0;
    s.lines.clear();
    std::size_t e = 0;
    for (const auto& ref : s.refs) {
      // Consumer-made records (a thread's name, counts) go before entries of the same time.
      while (e < s.extras.size() && s.extras[e].ts_ns <= ref.ts - s.epoch)
        emit_one(s, s.extras[e++], pid, to_file, to_memory, true, kept);
      decode_into(s, ref.entry, ref.log->tid, s.scratch);
      emit_one(s, s.scratch, pid, to_file, to_memory, false, kept);
    }
    while (e < s.extras.size()) emit_one(s, s.extras[e++], pid, to_file, to_memory, true, kept);
    if (to_file && !s.lines.empty()) {
      const std::size_t written = s.file.write_lines(s.lines);
      if (written < s.lines.size()) {
        const auto unwritten = static_cast<std::size_t>(
            std::count(s.lines.begin() + static_cast<std::ptrdiff_t>(written), s.lines.end(), '\n'));
        if (!to_memory) s.dropped += unwritten;
        if (s.file.stopped()) {
          write_truncation_notice(s, s.refs.empty() ? now_ns() - s.epoch : s.refs.back().ts - s.epoch, pid, unwritten);
        } else {
          // The program's descriptors got in the way of this batch only: said with the next one.
          s.unwritable += unwritten;
        }
      }
    } else if (!to_file && s.file.is_open() && !to_memory) {
      s.dropped += s.refs.size();  // after the file stopped
    }
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
