// SPDX-License-Identifier: Apache-2.0
#pragma once
// The staging engine's helper threads.
#include <atomic>
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <thread>
#include <vector>

#include "seam/process.hpp"
#include "staging/backoff.hpp"
#include "staging/staging_job.hpp"
#include "support/cpu_pause.hpp"
#include "support/threads.hpp"

namespace drvshim::detail {

// Helper threads for the host-side copies. Between copies they stay awake
// for StagingOptions::spin (pausing, and after the first 0.3 ms yielding to
// any other thread that wants the CPU), then sleep on a futex
// (std::atomic::wait). Waking a sleeping helper took 50-100 µs on the H200
// machine's VM (its virtual CPU halted), a large part of a 16 MiB copy.
// A copy wakes every sleeper with one call (one futex wake for all): their
// wake-ups then overlap. Before, it woke one and each woken helper woke two
// more, so the last helpers joined three wake-ups later; a 16 MiB copy to the
// device after the helpers had fallen asleep went from 29-30 to 34-36 GB/s
// (H200, 2026-12-01: lab/gpu-runs/2026-12-01-run37). A copy's first pieces are taken by whoever is awake.
class CopyCrew {
 public:
  // Throws SystemError when a helper cannot be started; the ones already
  // started are stopped first.
  CopyCrew(unsigned helpers, std::chrono::microseconds spin) : spin_(spin) {
    try {
      threads_.reserve(helpers);
      for (unsigned i = 0; i < helpers; ++i) threads_.push_back(start_thread("StagingEngine", [this, i] { run(i); }));
    } catch (...) {
      stop();
      throw;
    }
  }
  ~CopyCrew() { stop(); }
  CopyCrew(const CopyCrew&) = delete;
  CopyCrew& operator=(const CopyCrew&) = delete;

  std::size_t size() const noexcept { return threads_.size(); }

  // Wakes sleeping helpers ahead of a job: they spin until it is published.
  void rouse() {
    if (sleepers_.load() != 0) ring();
  }

  void publish(StagingJob* job) {
    job_.store(job);
    generation_.fetch_add(1);
    if (sleepers_.load() != 0) ring();
  }

  // Closes the job to late joiners and waits for every helper to leave it.
  void retire() noexcept {
    job_.store(nullptr);
    Backoff backoff;
    while (active_.load() != 0) backoff.wait();
  }

 private:
  void stop() noexcept {
    if (fork_generation_ != current_fork_generation()) [[unlikely]] {
      // A forked child has none of these threads: joining them would hang,
      // destroying them joinable would terminate. They are left behind.
      static auto* orphans = new std::vector<std::thread>;  // never destroyed
      for (auto& t : threads_) orphans->push_back(std::move(t));
      threads_.clear();
      return;
    }
    stop_.store(true);
    bell_.fetch_add(1);
    bell_.notify_all();
    for (auto& t : threads_) t.join();
    threads_.clear();
  }

  void ring() {
    bell_.fetch_add(1);
    bell_.notify_all();
  }

  // `index`: this helper's place in the crew; a job names how many may join.
  void run(std::size_t index) {
    std::uint64_t seen = generation_.load();
    for (;;) {
      const auto start = std::chrono::steady_clock::now();
      for (unsigned i = 1; generation_.load() == seen && !stop_.load(); ++i) {
        cpu_pause();
        if (i % 64 == 0) {
          const auto awake = std::chrono::steady_clock::now() - start;
          if (awake > spin_) break;
          if (awake > std::chrono::microseconds(300)) std::this_thread::yield();
        }
      }
      if (generation_.load() == seen && !stop_.load()) {
        // Read the bell before the last look: a job published after that
        // look rings it, and wait() returns at once.
        const std::uint32_t bell = bell_.load();
        sleepers_.fetch_add(1);
        if (generation_.load() == seen && !stop_.load()) bell_.wait(bell);
        sleepers_.fetch_sub(1);
        continue;  // woken (or roused): spin for the job
      }
      if (stop_.load()) return;
      seen = generation_.load();
      // Joining is announced before the job is read, so retire() (which
      // clears the job, then waits for the count) never misses a joiner.
      active_.fetch_add(1);
      if (StagingJob* job = job_.load(); job != nullptr && index < job->helpers) {
        while (job->take_piece()) {
        }
      }
      active_.fetch_sub(1);
    }
  }

  const std::chrono::microseconds spin_;
  const std::uint64_t fork_generation_ = current_fork_generation();
  std::vector<std::thread> threads_;
  std::atomic<bool> stop_{false};
  std::atomic<std::uint64_t> generation_{0};
  std::atomic<std::uint32_t> bell_{0};
  std::atomic<StagingJob*> job_{nullptr};
  std::atomic<int> active_{0}, sleepers_{0};
};

}  // namespace drvshim::detail
