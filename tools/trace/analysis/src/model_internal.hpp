#pragma once
// The model's walk over one process (context_model.cpp), and helpers the
// diagnostics share.
#include <drvshim_trace/model.hpp>

#include <string>

namespace drvshim::trace_analysis {

// "0x55aa" / "123" / "null" as an integer.
std::uintptr_t handle_value(const std::string& text);
// A failed call whose result is an answer (NOT_READY from a query, a probe past the end).
bool is_benign_failure(const Record& r);
// Adds (or extends) a diagnostic of kind `id` for process `pid` with one more piece of evidence.
Diagnostic& add_diagnostic(Analysis& a, const char* id, std::uint32_t pid, std::size_t evidence, std::string title);

class Model {
 public:
  Model(Analysis& analysis, ProcessInfo& process);
  void set_range(std::size_t first, std::size_t last) {
    first_ = first;
    last_ = last;
  }
  void step(std::size_t index);
  void finish();

 private:
  void call(std::size_t index, ThreadInfo& t);
  ThreadInfo& thread(const Record& r);
  std::uintptr_t current(const ThreadInfo& t) const;
  void set_top(ThreadInfo& t, std::uintptr_t ctx);
  std::string describe(std::uintptr_t ctx) const;
  void diagnose(const char* id, std::size_t index, std::string title);
  void untraced(std::size_t index);
  UntracedEntryInfo& untraced_entry(const std::string& key, std::size_t index);

  Analysis& a_;
  ProcessInfo& p_;
  std::vector<ObjectInfo> live_;
  std::size_t first_ = 0;
  std::size_t last_ = 0;
  std::uint64_t untraced_events_ = 0;   // untraced-entry-point records
  std::uint64_t untraced_lookups_ = 0;  // as untraced-summary counted them
};

}  // namespace drvshim::trace_analysis
