// SPDX-License-Identifier: Apache-2.0
// Staging engine and pinned pool benchmark, one run, side by side:
//   copies  : staged pageable vs the driver's direct pageable copy vs pinned
//             memory (the ceiling), H2D and D2H, 1 MiB .. 1 GiB, interleaved
//             rounds, medians; each staged size checked both ways first.
//   sweep   : chunk size x host threads at 256 MiB (how the defaults were chosen)
//   crew    : the default crew against smaller ones at 256 MiB and 1 GiB,
//             each pageable copy timed until landed; median, fastest and
//             slowest of interleaved rounds (the spread between runs)
//   order   : a staged (or pinned) copy right after each kind of copy: what
//             the copy before it costs it
//   pool    : PinnedPool acquire+release (a reused block) vs a fresh
//             cuMemHostAlloc + cuMemFreeHost of the same size.
//   bench_staging OUTPUT.md
#include <drvshim/drvshim.hpp>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double seconds_of(Clock::time_point t0) { return std::chrono::duration<double>(Clock::now() - t0).count(); }
double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

template <class F>
double timed(F&& f) {
  const auto t0 = Clock::now();
  f();
  return seconds_of(t0);
}

void fill_pattern(std::byte* p, std::size_t n, unsigned seed) {
  auto* w = reinterpret_cast<std::uint64_t*>(p);
  for (std::size_t i = 0; i < n / 8; ++i) w[i] = (i * 0x9E3779B97F4A7C15ull) ^ seed;
  for (std::size_t i = n / 8 * 8; i < n; ++i) p[i] = static_cast<std::byte>(i + seed);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(
        stderr,
        "usage: %s OUTPUT.md [diag] [sweep] [crew] [copies] [order] [pool]   (default: all but diag and crew)\n",
        argv[0]);
    return 2;
  }
  const std::vector<std::string> sections(argv + 2, argv + argc);
  auto wanted = [&](const std::string& name) {
    if (sections.empty()) return name != "diag" && name != "crew";
    return std::find(sections.begin(), sections.end(), name) != sections.end();
  };
  try {
    using namespace drvshim;
    auto drv = Driver::load();
    drv.init();
    auto primary = drv.device(0).retain_primary_context();
    const auto ctx = primary.ref();
    std::string out = fmt::format("## Staged pageable copies ({})\n\n", drv.device(0).name());

    constexpr std::size_t kMax = std::size_t{1} << 30;
    std::vector<std::byte> pageable(kMax), back(kMax);
    fill_pattern(pageable.data(), kMax, 17);
    std::memset(back.data(), 1, kMax);  // touched: no first-touch page faults inside a timing
    auto pinned = PinnedBuffer::allocate(ctx, kMax);
    fill_pattern(static_cast<std::byte*>(pinned.data()), kMax, 17);
    auto dev = DeviceBuffer::allocate(ctx, kMax);
    PinnedPool pool(ctx);

    // Checks both staged directions of `n` bytes against the pattern, each
    // into memory cleared first (a copy that writes nothing fails): the
    // device cleared, a staged copy to it, read back by the driver's copy;
    // then a staged copy to the host.
    auto check_staged = [&](const StagingEngine& e, std::size_t n) {
      const auto d = dev.as<std::byte>().subspan(0, n);
      const DeviceSpan<const std::byte> cd(d);
      const std::span<std::byte> host = std::span(back).first(n);
      fill(d, std::byte{0});
      e.copy_to_device(d, std::span<const std::byte>(pageable).first(n));
      std::memset(host.data(), 0xAA, n);
      copy(host, cd);
      if (std::memcmp(host.data(), pageable.data(), n) != 0)
        throw std::runtime_error(fmt::format("a staged copy of {} bytes to the device differs", n));
      std::memset(host.data(), 0xAA, n);
      e.copy_to_host(host, cd);
      if (std::memcmp(host.data(), pageable.data(), n) != 0)
        throw std::runtime_error(fmt::format("a staged copy of {} bytes to the host differs", n));
    };

    // ---- diag: the host copy alone, and one traced staged copy each way ----
    if (wanted("diag")) {
      out +=
          "### Host copy alone (pageable to pinned), GB/s, medians of 5\n\n| size | 1 thread | 4 | 8 | 12 | 16 "
          "|\n|---:|---:|---:|---:|---:|---:|\n";
      for (std::size_t n : {std::size_t{16} << 20, std::size_t{256} << 20}) {
        out += fmt::format("| {} MiB |", n >> 20);
        for (unsigned t : {1u, 4u, 8u, 12u, 16u}) {
          std::vector<double> v;
          for (int r = 0; r < 6; ++r) {
            const double s = timed([&] {
              std::vector<std::thread> crew;
              const std::size_t part = n / t;
              for (unsigned i = 0; i < t; ++i) {
                crew.emplace_back([&, i] {
                  std::memcpy(static_cast<std::byte*>(pinned.data()) + i * part, pageable.data() + i * part, part);
                });
              }
              for (auto& th : crew) th.join();
            });
            if (r > 0) v.push_back(s);
          }
          out += fmt::format(" {:.1f} |", static_cast<double>(n) / median(v) / 1e9);
        }
        out += "\n";
      }
      // DMA of 16 MiB from pinned memory in pieces, with an event after each:
      // from memory the CPU last wrote long ago (cold) and right after
      // memset (the lines still dirty in this core's cache), on one stream
      // or alternating between two (two copy engines' worth of reads in flight).
      {
        auto stream = Stream::create(ctx, StreamFlags::non_blocking);
        auto stream2 = Stream::create(ctx, StreamFlags::non_blocking);
        auto ev = Event::create(ctx, EventFlags::disable_timing);
        const std::size_t n = std::size_t{16} << 20;
        out +=
            "\n### DMA of 16 MiB from pinned memory in pieces (an event after each), GB/s, medians of 7\n\n"
            "| piece | streams | cold source | source just written by the CPU |\n|---:|---:|---:|---:|\n";
        for (unsigned streams : {1u, 2u}) {
          for (std::size_t piece : {n / 16, n / 8, n / 4, n}) {
            if (streams == 2 && piece == n) continue;
            std::vector<double> cold, hot;
            auto* p = static_cast<std::byte*>(pinned.data());
            for (int r = 0; r < 8; ++r) {
              for (int variant = 0; variant < 2; ++variant) {
                if (variant == 1) std::memset(p, r, n);
                const double t = timed([&] {
                  std::size_t k = 0;
                  for (std::size_t off = 0; off < n; off += piece, ++k) {
                    const StreamRef s = (streams == 2 && k % 2 == 1) ? stream2.ref() : stream.ref();
                    copy_async(s, dev.as<std::byte>().subspan(off, piece), std::span<const std::byte>(p + off, piece));
                    ev.ref().record(s);
                  }
                  stream.ref().synchronize();
                  stream2.ref().synchronize();
                });
                if (r > 0) (variant == 0 ? cold : hot).push_back(t);
              }
              p += n;  // a region not touched since the start for the next cold round
            }
            out += fmt::format("| {} KiB | {} | {:.1f} | {:.1f} |\n", piece >> 10, streams,
                               static_cast<double>(n) / median(cold) / 1e9, static_cast<double>(n) / median(hot) / 1e9);
          }
        }
        // The same 2 MiB-piece DMA from a pool block and from the big buffer,
        // after the CPU wrote the source with streaming stores (as the
        // engine does), with ordinary stores, or long ago.
        {
          auto block = pool.acquire(n);
          out +=
              "\n| source (16 MiB, 2 MiB pieces) | cold | memset | streaming stores | streaming stores, 1 ms later "
              "|\n|---|---:|---:|---:|---:|\n";
          for (int which = 0; which < 2; ++which) {
            std::vector<double> v[4];
            for (int r = 0; r < 8; ++r) {
              auto* p = which == 0 ? block.data()
                                   : static_cast<std::byte*>(pinned.data()) + (std::size_t{512} << 20) +
                                         static_cast<std::size_t>(r) * n;
              for (int variant = 0; variant < 4; ++variant) {
                if (variant == 1) std::memset(p, r, n);
                if (variant >= 2) {
#if defined(__x86_64__)
                  for (std::size_t i = 0; i < n; i += 16) {
                    _mm_stream_si128(reinterpret_cast<__m128i*>(p + i),
                                     _mm_loadu_si128(reinterpret_cast<const __m128i*>(pageable.data() + i)));
                  }
                  _mm_sfence();
#endif
                  if (variant == 3) std::this_thread::sleep_for(std::chrono::milliseconds(1));
                }
                const double t = timed([&] {
                  for (std::size_t off = 0; off < n; off += n / 8) {
                    copy_async(stream.ref(), dev.as<std::byte>().subspan(off, n / 8),
                               std::span<const std::byte>(p + off, n / 8));
                    ev.ref().record(stream.ref());
                  }
                  stream.ref().synchronize();
                });
                if (r > 0) v[variant].push_back(t);
              }
            }
            out +=
                fmt::format("| {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |\n",
                            which == 0 ? "pool block (portable)" : "big pinned buffer",
                            static_cast<double>(n) / median(v[0]) / 1e9, static_cast<double>(n) / median(v[1]) / 1e9,
                            static_cast<double>(n) / median(v[2]) / 1e9, static_cast<double>(n) / median(v[3]) / 1e9);
          }
        }
        fill_pattern(static_cast<std::byte*>(pinned.data()), kMax, 17);  // the reference the copies compare against
      }
      // Where a 16 MiB staged copy spends its time, from the driver-call
      // trace: when each chunk's DMA was queued (its last piece copied), and
      // how long the final wait took; medians of 9 traced copies.
      out +=
          "\n### Timeline of a 16 MiB staged copy (µs from the copy's first driver call; medians of 9)\n\n"
          "| direction | chunk, depth, threads | DMAs queued at | last queued | done |\n|---|---|---|---:|---:|\n";
      for (const auto& [chunk, depth, threads] :
           {std::tuple<std::size_t, unsigned, unsigned>{0, 0, 0}, {0, 0, 16}, {2u << 20, 8, 8}, {1u << 20, 16, 12}}) {
        StagingOptions o;
        o.chunk_bytes = chunk;
        o.depth = depth;
        o.threads = threads;
        StagingEngine e(pool, o);
        const std::size_t n = std::size_t{16} << 20;
        const auto dspan = dev.as<std::byte>().subspan(0, n);
        for (const bool h2d : {true, false}) {
          std::vector<std::vector<double>> at;
          std::vector<double> last, done;
          for (int r = 0; r < 12; ++r) {
            trace::clear();
            trace::enable(r >= 3);
            const auto t0 = Clock::now();
            if (h2d) {
              e.copy_to_device(dspan, std::span(pageable).first(n));
            } else {
              e.copy_to_host(std::span(back).first(n), DeviceSpan<const std::byte>(dspan));
            }
            const double total = seconds_of(t0) * 1e6;
            trace::enable(false);
            if (r < 3) continue;
            const auto recs = trace::records();
            if (recs.empty()) continue;
            const double start = static_cast<double>(recs.front().timestamp_ns) / 1e3;
            std::vector<double> queued;
            for (const auto& rec : recs) {
              if (rec.api == (h2d ? "cuMemcpyHtoDAsync" : "cuMemcpyDtoHAsync")) {
                queued.push_back(static_cast<double>(rec.timestamp_ns) / 1e3 - start);
              }
            }
            if (at.size() < queued.size()) at.resize(queued.size());
            for (std::size_t i = 0; i < queued.size(); ++i) at[i].push_back(queued[i]);
            last.push_back(queued.empty() ? 0.0 : queued.back());
            done.push_back(total);
          }
          std::string when;
          for (auto& v : at) when += fmt::format("{}{:.0f}", when.empty() ? "" : " ", median(v));
          out += fmt::format("| {} | {}, {}, {} | {} | {:.0f} | {:.0f} |\n", h2d ? "H2D" : "D2H",
                             chunk == 0 ? std::string("auto") : fmt::format("{} KiB", chunk >> 10),
                             depth == 0 ? std::string("auto") : std::to_string(depth), e.options().threads, when,
                             median(last), median(done));
        }
      }
    }

    // ---- sweep: chunk x depth x threads at 16 and 256 MiB ----
    // "back to back": copies follow each other (the helpers are awake);
    // "after a pause": 10 ms of idleness before each copy, longer than the
    // helpers' default spin (they sleep, and the copy waits for them to wake).
    if (wanted("sweep")) {
      out +=
          "### Chunk size, ring depth and host threads, GB/s (medians)\n\n"
          "| size | chunk | depth | threads | H2D back to back | D2H back to back | H2D after a pause | D2H after a "
          "pause |\n"
          "|---:|---:|---:|---:|---:|---:|---:|---:|\n";
      struct Config {
        std::size_t bytes, chunk;
        unsigned depth, threads;
      };
      std::vector<Config> configs;
      const std::size_t mib = std::size_t{1} << 20;
      for (std::size_t chunk : {mib, 2 * mib, 4 * mib}) {
        for (unsigned depth : {4u, 8u}) {
          for (unsigned t : {8u, 12u}) configs.push_back({16 * mib, chunk, depth, t});
        }
      }
      for (std::size_t chunk : {4 * mib, 8 * mib, 16 * mib}) {
        for (unsigned depth : {4u, 8u}) {
          for (unsigned t : {8u, 12u}) configs.push_back({256 * mib, chunk, depth, t});
        }
      }
      configs.push_back({16 * mib, 0, 0, 0});
      configs.push_back({256 * mib, 0, 0, 0});
      for (const auto& [n, chunk, depth, threads] : configs) {
        StagingOptions o;
        o.chunk_bytes = chunk;
        o.depth = depth;
        o.threads = threads;
        StagingEngine e(pool, o);
        const auto dspan = dev.as<std::byte>().subspan(0, n);
        const DeviceSpan<const std::byte> cdspan(dspan);
        check_staged(e, n);
        const int reps = n > 16 * mib ? 5 : 15;
        std::vector<double> h2d, d2h, h2d_cold, d2h_cold;
        for (int r = 0; r < reps + 1; ++r) {
          const double a = timed([&] { e.copy_to_device(dspan, std::span(pageable).first(n)); });
          const double b = timed([&] { e.copy_to_host(std::span(back).first(n), cdspan); });
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          const double c = timed([&] { e.copy_to_device(dspan, std::span(pageable).first(n)); });
          std::this_thread::sleep_for(std::chrono::milliseconds(10));
          const double d = timed([&] { e.copy_to_host(std::span(back).first(n), cdspan); });
          if (r == 0) continue;  // warm-up round
          h2d.push_back(a);
          d2h.push_back(b);
          h2d_cold.push_back(c);
          d2h_cold.push_back(d);
        }
        const double nb = static_cast<double>(n);
        out += fmt::format("| {} MiB | {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |\n", n >> 20,
                           chunk == 0 ? std::string("auto") : fmt::format("{} KiB", chunk >> 10),
                           depth == 0 ? std::string("auto") : std::to_string(depth), e.options().threads,
                           nb / median(h2d) / 1e9, nb / median(d2h) / 1e9, nb / median(h2d_cold) / 1e9,
                           nb / median(d2h_cold) / 1e9);
      }
      out += "\n";
    }
    // ---- crew: does the default thread count ever lose to a smaller one? ----
    if (wanted("crew")) {
      StagingEngine automatic(pool);
      const unsigned auto_threads = automatic.options().threads;
      out += fmt::format(
          "### Crew size at 256 MiB and 1 GiB, GB/s: median [slowest, fastest] of interleaved rounds (default crew: {} "
          "threads of {} CPUs)\n\n"
          "| size | threads | H2D | D2H |\n|---:|---:|---|---|\n",
          auto_threads, std::thread::hardware_concurrency());
      std::vector<unsigned> counts{0};
      for (unsigned t : {4u, 6u, 8u, 9u, 10u, 12u}) {
        if (t < auto_threads) counts.push_back(t);
      }
      std::vector<StagingEngine> engines;
      for (const unsigned t : counts) {
        StagingOptions o;
        o.threads = t;
        engines.emplace_back(pool, o);
      }
      for (const std::size_t n : {std::size_t{256} << 20, kMax}) {
        const auto dspan = dev.as<std::byte>().subspan(0, n);
        const DeviceSpan<const std::byte> cdspan(dspan);
        for (auto& e : engines) check_staged(e, n);
        const int rounds = 7;
        std::vector<std::vector<double>> h2d(engines.size()), d2h(engines.size());
        for (int r = 0; r < rounds + 1; ++r) {
          for (std::size_t i = 0; i < engines.size(); ++i) {
            // Each round in another order, so that no crew always follows the same one.
            const std::size_t k = (i + static_cast<std::size_t>(r)) % engines.size();
            // The other engines' helpers asleep (past their spin), this one's awake: one crew on the CPUs.
            std::this_thread::sleep_for(std::chrono::milliseconds(8));
            engines[k].copy_to_device(dev.as<std::byte>().subspan(0, std::size_t{16} << 20),
                                      std::span(pageable).first(std::size_t{16} << 20));
            const double a = timed([&] {
              engines[k].copy_to_device(dspan, std::span(pageable).first(n));
              ctx.synchronize();
            });
            const double b = timed([&] { engines[k].copy_to_host(std::span(back).first(n), cdspan); });
            if (r == 0) continue;  // warm-up round
            h2d[k].push_back(a);
            d2h[k].push_back(b);
          }
        }
        const double nb = static_cast<double>(n);
        auto cell = [&](std::vector<double> v) {
          std::sort(v.begin(), v.end());
          return fmt::format("{:.1f} [{:.1f}, {:.1f}]", nb / median(v) / 1e9, nb / v.back() / 1e9,
                             nb / v.front() / 1e9);
        };
        for (std::size_t i = 0; i < engines.size(); ++i) {
          out += fmt::format("| {} MiB | {}{} | {} | {} |\n", n >> 20, engines[i].options().threads,
                             counts[i] == 0 ? " (default)" : "", cell(h2d[i]), cell(d2h[i]));
        }
      }
      out += "\n";
    }
    std::fputs(out.c_str(), stdout);
    const std::size_t printed = out.size();

    // ---- copies ----
    bool targets_met = true;
    if (wanted("copies")) {
      StagingEngine engine(pool);
      const auto& eo = engine.options();
      out += fmt::format(
          "### Copies, GB/s (medians of interleaved rounds; engine defaults: {} chunks, depth {}, {} threads, helpers "
          "awake {} ms after a copy)\n\n"
          "| size | direction | direct pageable | staged pageable | pinned (ceiling) | staged / pinned | staged / "
          "direct |\n"
          "|---:|---|---:|---:|---:|---:|---:|\n",
          eo.chunk_bytes == 0 ? std::string("auto") : fmt::format("{} MiB", eo.chunk_bytes >> 20),
          eo.depth == 0 ? std::string("auto") : std::to_string(eo.depth), eo.threads,
          static_cast<double>(eo.spin.count()) / 1e3);
      for (std::size_t n : {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{256} << 20, kMax}) {
        const int rounds = n >= kMax ? 5 : 9;
        std::vector<double> dh, sh, ph, dd, sd, pd;
        const auto dspan = dev.as<std::byte>().subspan(0, n);
        const DeviceSpan<const std::byte> cdspan(dspan);
        const std::span<const std::byte> src = std::span(pageable).first(n);
        const std::span<const std::byte> psrc(static_cast<const std::byte*>(pinned.data()), n);
        const std::span<std::byte> pdst(static_cast<std::byte*>(pinned.data()), n);
        // A copy to the device is timed until its data is there: the driver's
        // pageable cuMemcpyHtoD returns once the source sits in the driver's
        // own staging memory, before the last DMA is done, and the next copy
        // timed would pay for it (earlier versions of this benchmark timed without the synchronise:
        // the direct path looked up to 1.25x faster than the same path taken
        // through the engine right after it).
        auto landed = [&](auto&& f) {
          return timed([&] {
            f();
            ctx.synchronize();
          });
        };
        check_staged(engine, n);
        for (int r = 0; r < rounds + 1; ++r) {
          const double a = landed([&] { copy(dspan, src); });
          const double b = landed([&] { engine.copy_to_device(dspan, src); });
          const double c = landed([&] { copy(dspan, psrc); });
          const double d = timed([&] { copy(std::span(back).first(n), cdspan); });
          const double e = timed([&] { engine.copy_to_host(std::span(back).first(n), cdspan); });
          const double f = timed([&] { copy(pdst, cdspan); });
          if (r == 0) continue;  // warm-up round
          dh.push_back(a);
          sh.push_back(b);
          ph.push_back(c);
          dd.push_back(d);
          sd.push_back(e);
          pd.push_back(f);
        }
        auto row = [&](const char* dir, double direct, double staged, double pin) {
          const double nb = static_cast<double>(n);
          const double gd = nb / direct / 1e9, gs = nb / staged / 1e9, gp = nb / pin / 1e9;
          if (n >= (std::size_t{16} << 20) && gs < 0.8 * gp) targets_met = false;
          out += fmt::format("| {} MiB | {} | {:.1f} | {:.1f} | {:.1f} | {:.0f} % | {:.1f}x |\n", n >> 20, dir, gd, gs,
                             gp, 100.0 * gs / gp, gs / gd);
        };
        row("H2D", median(dh), median(sh), median(ph));
        row("D2H", median(dd), median(sd), median(pd));
      }
      out += fmt::format("\nTarget (16 MiB and up: staged >= 80 % of pinned): {}\n\n", targets_met ? "met" : "NOT met");
      std::fputs(out.c_str() + printed, stdout);
    }

    // ---- order: what the copy right before a staged one costs it ----
    // The copies table runs the driver's pageable copy right before each
    // staged one. Here each staged copy follows a driver pageable copy, a
    // pinned copy or another staged copy, in one interleaved sequence per
    // round (and pinned copies after a pageable and after a staged one), so
    // that an effect of the copy before shows as a difference of columns.
    // Not separated: "staged after pageable" also comes three copies after a
    // staged copy in the same direction, and at 256 MiB the driver's copy
    // (~40 ms) outlasts the helpers' spin, so it includes their wake-up.
    if (wanted("order")) {
      StagingEngine engine(pool);
      const std::size_t printed_before = out.size();
      out +=
          "### A copy after each kind of copy, GB/s (medians of interleaved rounds; copies to the device timed "
          "until the data is there)\n\n"
          "| size | direction | staged after pageable | staged after pinned | staged after staged | pinned after "
          "pageable | pinned after staged |\n"
          "|---:|---|---:|---:|---:|---:|---:|\n";
      for (std::size_t n : {std::size_t{16} << 20, std::size_t{256} << 20}) {
        const auto dspan = dev.as<std::byte>().subspan(0, n);
        const DeviceSpan<const std::byte> cdspan(dspan);
        const std::span<const std::byte> src = std::span(pageable).first(n);
        const std::span<const std::byte> psrc(static_cast<const std::byte*>(pinned.data()), n);
        const std::span<std::byte> pdst(static_cast<std::byte*>(pinned.data()), n);
        const std::span<std::byte> dst = std::span(back).first(n);
        for (const bool to_device : {true, false}) {
          // One copy in this pass's direction, waited for.
          auto one = [&](auto&& to_dev, auto&& to_host) {
            if (to_device) {
              to_dev();
            } else {
              to_host();
            }
            ctx.synchronize();
          };
          auto direct = [&] { one([&] { copy(dspan, src); }, [&] { copy(dst, cdspan); }); };
          auto staged = [&] {
            one([&] { engine.copy_to_device(dspan, src); }, [&] { engine.copy_to_host(dst, cdspan); });
          };
          auto pin = [&] { one([&] { copy(dspan, psrc); }, [&] { copy(pdst, cdspan); }); };
          if (to_device) check_staged(engine, n);
          std::vector<double> s_pageable, s_pinned, s_staged, p_pageable, p_staged;
          const int rounds = n > (std::size_t{16} << 20) ? 7 : 15;
          for (int r = 0; r < rounds + 1; ++r) {
            direct();
            const double a = timed(staged);
            const double b = timed(pin);
            const double c = timed(staged);
            const double d = timed(staged);
            direct();
            const double e = timed(pin);
            if (r == 0) continue;  // warm-up round
            s_pageable.push_back(a);
            p_staged.push_back(b);
            s_pinned.push_back(c);
            s_staged.push_back(d);
            p_pageable.push_back(e);
          }
          const double nb = static_cast<double>(n) / 1e9;
          out += fmt::format("| {} MiB | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |\n", n >> 20,
                             to_device ? "H2D" : "D2H", nb / median(s_pageable), nb / median(s_pinned),
                             nb / median(s_staged), nb / median(p_pageable), nb / median(p_staged));
        }
      }
      out += "\n";
      std::fputs(out.c_str() + printed_before, stdout);
    }

    // ---- pool vs cuMemHostAlloc ----
    // Each sample times a loop and divides (a clock read costs tens of
    // nanoseconds on a VM, as much as a pool reuse); fresh and reused rounds
    // interleave.
    out +=
        "### Pinned blocks: pool reuse vs a fresh allocation, microseconds per acquire + release (medians)\n\n"
        "| size | PinnedPool reuse (default: the thread's last block) | PinnedPool reuse through the lock "
        "(thread_cache off) | "
        "cuMemHostAlloc + cuMemFreeHost | ratio | ratio through the lock | cuMemHostAlloc of new memory (8 held) |\n"
        "|---:|---:|---:|---:|---:|---:|---:|\n";
    const std::size_t pool_mark = out.size();
    bool pool_met = true;
    for (std::size_t n : {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{256} << 20, kMax}) {
      if (!wanted("pool")) break;
      std::vector<double> fresh, reused, locked, held;
      const int rounds = n >= (std::size_t{256} << 20) ? 3 : 11;
      const int fresh_loop = n <= (std::size_t{1} << 20) ? 200 : 1;
      constexpr int kReuseLoop = 20000;
      PinnedPool p(ctx);
      PinnedPoolOptions no_cache;
      no_cache.thread_cache = false;
      PinnedPool q(ctx, no_cache);
      (void)p.acquire(n);  // the first acquire allocates; every later one reuses
      (void)q.acquire(n);
      auto reuse_loop = [&](const PinnedPool& which) {
        return timed([&] {
                 for (int i = 0; i < kReuseLoop; ++i) {
                   auto b = which.acquire(n);
                   if (b.data() == nullptr) throw std::runtime_error("empty block");
                   b.release();
                 }
               }) /
               kReuseLoop;
      };
      for (int r = 0; r < rounds + 1; ++r) {
        const double f = timed([&] {
                           for (int i = 0; i < fresh_loop; ++i) {
                             auto b = PinnedBuffer::allocate(ctx, n);
                             b.free();
                           }
                         }) /
                         fresh_loop;
        const double u = reuse_loop(p);
        const double l = reuse_loop(q);
        // New memory each time: eight blocks allocated while the earlier ones are still held.
        double h = 0;
        if (n <= (std::size_t{16} << 20)) {
          std::vector<PinnedBuffer> keep;
          h = timed([&] {
                for (int i = 0; i < 8; ++i) keep.push_back(PinnedBuffer::allocate(ctx, n));
              }) /
              8;
        }
        if (r == 0) continue;  // warm-up round
        fresh.push_back(f);
        reused.push_back(u);
        locked.push_back(l);
        held.push_back(h);
      }
      if (p.stats().allocations != 1 || q.stats().allocations != 1)
        throw std::runtime_error("a pool allocated more than once");
      const double f = median(fresh) * 1e6, u = median(reused) * 1e6, l = median(locked) * 1e6, h = median(held) * 1e6;
      if (f / u < 100) pool_met = false;
      out += fmt::format("| {} MiB | {:.4f} | {:.4f} | {:.1f} | {:.0f}x | {:.0f}x | {} |\n", n >> 20, u, l, f, f / u,
                         f / l, h > 0 ? fmt::format("{:.1f}", h) : std::string("-"));
    }
    out +=
        fmt::format("\nTarget (reuse >= 100x cheaper than a fresh cuMemHostAlloc): {}\n", pool_met ? "met" : "NOT met");
    std::fputs(out.c_str() + pool_mark, stdout);
    std::ofstream(argv[1], std::ios::app) << out;
    return targets_met && pool_met ? 0 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_staging: %s\n", e.what());
    return 1;
  }
}
