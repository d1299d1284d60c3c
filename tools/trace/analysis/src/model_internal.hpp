// SPDX-License-Identifier: Apache-2.0
#pragma once
// The model's walk over one process (context_model.cpp), and helpers the
// diagnostics share.
#include <drvshim_trace/model.hpp>

#include <string>
#include <unordered_map>

namespace drvshim::trace_analysis {

// "0x55aa" / "123" / "null" as an integer.
std::uintptr_t handle_value(const std::string& text);
// A failed call whose result is an answer (NOT_READY from a query, a probe past the end, a lookup that
// found nothing, a query of the current context on a thread that has none).
bool is_benign_failure(const Record& r);
// A query of the calling thread's current context that failed with CUDA_ERROR_INVALID_CONTEXT: how the
// CUDA Runtime asks whether a thread has a current context at all.
bool is_context_probe(const Record& r);
// Whether the exec record at `index` failed: the next record of its thread in [index + 1, end) is exec-failed.
bool exec_failed(const std::vector<Record>& records, std::size_t index, std::size_t end);

// Adds diagnostics to an analysis: a new one, or one more occurrence of the same (kind, process image,
// title). Finds the same one through an index, so that adding is not linear in the diagnostics so far.
class DiagnosticSink {
 public:
  explicit DiagnosticSink(Analysis& analysis);  // indexes the diagnostics already there
  Diagnostic& add(const char* id, const ProcessInfo& process, std::size_t evidence, std::string title);

 private:
  Analysis& a_;
  std::unordered_map<std::string, std::size_t> index_;  // key -> position in a_.diagnostics
};

class Model {
 public:
  Model(Analysis& analysis, ProcessInfo& process, DiagnosticSink& sink);
  void set_range(std::size_t first, std::size_t last) {
    first_ = first;
    last_ = last;
  }
  void step(std::size_t index);
  void finish();

 private:
  void call(std::size_t index, ThreadInfo& t);
  void process_record(std::size_t index);
  ThreadInfo& thread(const Record& r);
  std::uintptr_t current(const ThreadInfo& t) const;
  // The thread's stack: push (cuCtxPushCurrent, cuCtxCreate), pop, and replace the top (cuCtxSetCurrent:
  // NULL pops); the replaced entry is no longer a push.
  static void push(ThreadInfo& t, std::uintptr_t ctx, std::size_t index);
  static void pop(ThreadInfo& t);
  static void set_top(ThreadInfo& t, std::uintptr_t ctx);
  // A new context under `handle` (cuCtxCreate, a primary context's activation): the one the handle named
  // before, if any, is kept in replaced_contexts.
  ContextInfo& new_context(std::uintptr_t handle, std::size_t index);
  std::string describe(std::uintptr_t ctx) const;
  void diagnose(const char* id, std::size_t index, std::string title);
  void untraced(std::size_t index);
  UntracedEntryInfo& untraced_entry(const std::string& key, std::size_t index);
  void add_live(ObjectInfo object);
  bool release_live(const std::string& handle, const char* kinds);

  Analysis& a_;
  ProcessInfo& p_;
  DiagnosticSink& sink_;
  // Objects created, in creation order; released ones are marked and dropped at finish().
  std::vector<ObjectInfo> live_;
  std::vector<bool> released_;
  std::unordered_map<std::string, std::vector<std::size_t>> live_by_handle_;  // handle -> unreleased, in order
  std::size_t first_ = 0;
  std::size_t last_ = 0;
  std::uint64_t untraced_events_ = 0;   // untraced-entry-point records
  std::uint64_t untraced_lookups_ = 0;  // as untraced-summary counted them
};

}  // namespace drvshim::trace_analysis
