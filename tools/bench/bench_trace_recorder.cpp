// SPDX-License-Identifier: Apache-2.0
// The trace recorder's own cost (recorder/, behind drvshim::trace and
// drvshim-trace): what the issue measured on the old recorder (one global
// mutex per record, the file written under it: 1.9 us per call in memory,
// 4.4 us to a file with two threads, single calls stalled 30-62 ms when the
// vector grew, records() 88 ms at the 1M cap), measured the same way here.
//
//   bench_trace_recorder [RECORDS_PER_THREAD] [OUT.md]
// Rows: per-record cost (trace::mark) with 1, 2 and 4 threads, in memory and
// to a file; the longest single record (a stall shows here); the time of
// records() at the cap; and one driver call through drvshim's seam with the
// trace off and on (DRVSHIM_LIBCUDA names the driver: the fake in CI).
#include <drvshim/drvshim.hpp>

#include <unistd.h>
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Result {
  double ns_per_record;
  double p999_us;   // 99.9th percentile of single records
  double worst_us;  // includes the thread being descheduled (more threads than cores)
};

Result hammer(int threads, int per_thread) {
  std::vector<std::vector<float>> lat(static_cast<std::size_t>(threads));
  std::vector<std::thread> pool;
  const auto t0 = Clock::now();
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      const std::string what = "record " + std::to_string(t);
      auto& mine = lat[static_cast<std::size_t>(t)];
      mine.reserve(static_cast<std::size_t>(per_thread));
      for (int i = 0; i < per_thread; ++i) {
        const auto a = Clock::now();
        drvshim::trace::mark("bench", what);
        mine.push_back(std::chrono::duration<float, std::micro>(Clock::now() - a).count());
      }
    });
  }
  for (auto& t : pool) t.join();
  const double ns = std::chrono::duration<double, std::nano>(Clock::now() - t0).count();
  std::vector<float> all;
  for (const auto& v : lat) all.insert(all.end(), v.begin(), v.end());
  std::sort(all.begin(), all.end());
  return {ns / per_thread, all[all.size() * 999 / 1000], all.back()};
}

}  // namespace

int main(int argc, char** argv) {
  const int per_thread = argc > 1 ? std::atoi(argv[1]) : 200000;
  std::string table =
      "| case | threads | ns per record (wall / records per thread) | single record p99.9 | longest |\n"
      "|---|---|---|---|---|\n";
  char path[] = "/tmp/bench_trace_recorder_XXXXXX";
  const int fd = ::mkstemp(path);
  ::close(fd);
  for (const bool to_file : {false, true}) {
    for (const int threads : {1, 2, 4}) {
      drvshim::trace::clear();
      if (to_file) {
        drvshim::trace::enable(false);
        drvshim::trace::set_file(path);
      } else {
        drvshim::trace::enable(true);
      }
      const Result r = hammer(threads, per_thread);
      drvshim::trace::set_file("");
      drvshim::trace::enable(false);
      char row[256];
      std::snprintf(row, sizeof row, "| %s | %d | %.0f | %.2f us | %.1f us |\n", to_file ? "file" : "memory", threads,
                    r.ns_per_record, r.p999_us, r.worst_us);
      table += row;
    }
  }
  std::remove(path);
  // records() at the cap: the first call also gathers what the threads recorded, the second only copies.
  drvshim::trace::clear();
  drvshim::trace::enable(true);
  (void)hammer(4, static_cast<int>(drvshim::trace::max_records() / 4));
  char row[256];
  for (const char* which : {"first", "second"}) {
    const auto t0 = Clock::now();
    const auto all = drvshim::trace::records();
    const double ms = std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
    std::snprintf(row, sizeof row, "| records() of %zu records (%s call) | 1 | %.1f ms | | |\n", all.size(), which, ms);
    table += row;
  }
  drvshim::trace::enable(false);
  drvshim::trace::clear();
  // One driver call through the seam (cuDeviceGetAttribute), trace off and on.
  try {
    auto drv = drvshim::Driver::load();
    drv.init();
    const auto dev = drv.device(0);
    for (const bool on : {false, true}) {
      drvshim::trace::enable(on);
      std::vector<double> rounds;
      for (int r = 0; r < 21; ++r) {
        const auto a = Clock::now();
        for (int i = 0; i < 10000; ++i) (void)dev.sm_count();
        rounds.push_back(std::chrono::duration<double, std::nano>(Clock::now() - a).count() / 10000);
      }
      std::sort(rounds.begin(), rounds.end());
      std::snprintf(row, sizeof row, "| seam call, trace %s | 1 | %.0f | | |\n", on ? "on (memory)" : "off",
                    rounds[rounds.size() / 2]);
      table += row;
      drvshim::trace::enable(false);
      drvshim::trace::clear();
    }
  } catch (const std::exception& e) {
    table += std::string("| seam call | - | no driver: ") + e.what() + " | | |\n";
  }
  std::fputs(table.c_str(), stdout);
  if (argc > 2) {
    if (std::FILE* f = std::fopen(argv[2], "a")) {
      std::fputs(table.c_str(), f);
      std::fclose(f);
    }
  }
  return 0;
}
