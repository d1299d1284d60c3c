// Staging engine and pinned pool benchmark (issue 11), one run, side by side:
//   copies  : staged pageable vs the driver's direct pageable copy vs pinned
//             memory (the ceiling), H2D and D2H, 1 MiB .. 1 GiB, interleaved
//             rounds, medians; every staged result checked.
//   sweep   : chunk size x host threads at 256 MiB (how the defaults were chosen)
//   pool    : PinnedPool acquire+release (a reused block) vs a fresh
//             cuMemHostAlloc + cuMemFreeHost of the same size.
//   bench_staging OUTPUT.md
#include <drvshim/drvshim.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <tuple>
#include <thread>
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
    std::fprintf(stderr, "usage: %s OUTPUT.md [diag] [sweep] [copies] [pool]   (default: sweep, copies, pool)\n", argv[0]);
    return 2;
  }
  const std::vector<std::string> sections(argv + 2, argv + argc);
  auto wanted = [&](const std::string& name) {
    if (sections.empty()) return name != "diag";
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

    // ---- diag: the host copy alone, and one traced staged copy each way ----
    if (wanted("diag")) {
      out += "### Host copy alone (pageable to pinned), GB/s, medians of 5\n\n| size | 1 thread | 4 | 8 | 12 | 16 |\n|---:|---:|---:|---:|---:|---:|\n";
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
      // memset (the lines still dirty in this core's cache).
      {
        auto stream = Stream::create(ctx, StreamFlags::non_blocking);
        auto ev = Event::create(ctx, EventFlags::disable_timing);
        const std::size_t n = std::size_t{16} << 20;
        out += "\n### DMA of 16 MiB from pinned memory in pieces (an event after each), GB/s, medians of 7\n\n"
               "| piece | cold source | source just written by the CPU |\n|---:|---:|---:|\n";
        for (std::size_t piece : {n / 16, n / 8, n / 4, n}) {
          std::vector<double> cold, hot;
          auto* p = static_cast<std::byte*>(pinned.data());
          for (int r = 0; r < 8; ++r) {
            for (int variant = 0; variant < 2; ++variant) {
              if (variant == 1) std::memset(p, r, n);
              const double t = timed([&] {
                for (std::size_t off = 0; off < n; off += piece) {
                  copy_async(stream.ref(), dev.as<std::byte>().subspan(off, piece), std::span<const std::byte>(p + off, piece));
                  ev.ref().record(stream.ref());
                }
                stream.ref().synchronize();
              });
              if (r > 0) (variant == 0 ? cold : hot).push_back(t);
            }
            p += n;  // a region not touched since the start for the next cold round
          }
          out += fmt::format("| {} KiB | {:.1f} | {:.1f} |\n", piece >> 10, static_cast<double>(n) / median(cold) / 1e9,
                             static_cast<double>(n) / median(hot) / 1e9);
        }
        fill_pattern(static_cast<std::byte*>(pinned.data()), kMax, 17);  // the reference the copies compare against
      }
      for (const auto& [chunk, depth, threads] : {std::tuple<std::size_t, unsigned, unsigned>{0, 4, 0}, {4u << 20, 4, 8}}) {
        StagingOptions o;
        o.chunk_bytes = chunk;
        o.depth = depth;
        o.threads = threads;
        StagingEngine e(pool, o);
        const std::size_t n = std::size_t{16} << 20;
        const auto dspan = dev.as<std::byte>().subspan(0, n);
        for (int r = 0; r < 5; ++r) {
          e.copy_to_device(dspan, std::span(pageable).first(n));
          e.copy_to_host(std::span(back).first(n), DeviceSpan<const std::byte>(dspan));
        }
        trace::clear();
        trace::enable(true);
        e.copy_to_device(dspan, std::span(pageable).first(n));
        e.copy_to_host(std::span(back).first(n), DeviceSpan<const std::byte>(dspan));
        trace::enable(false);
        out += fmt::format("\n### Trace of one 16 MiB copy each way (chunk {}, depth {}, {} threads)\n\n```\n{}```\n",
                           chunk >> 10, depth, e.options().threads, trace::format_timeline(trace::records()));
      }
    }

    // ---- sweep: chunk x depth x threads at 16 and 256 MiB ----
    // "back to back": copies follow each other (the helpers are spinning);
    // "after a pause": 3 ms of idleness before each copy (the helpers sleep).
    if (wanted("sweep")) {
      out += "### Chunk size, ring depth and host threads, GB/s (medians)\n\n"
             "| size | chunk | depth | threads | H2D back to back | D2H back to back | H2D after a pause | D2H after a pause |\n"
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
        const int reps = n > 16 * mib ? 5 : 15;
        std::vector<double> h2d, d2h, h2d_cold, d2h_cold;
        for (int r = 0; r < reps + 1; ++r) {
          const double a = timed([&] { e.copy_to_device(dspan, std::span(pageable).first(n)); });
          const double b = timed([&] { e.copy_to_host(std::span(back).first(n), cdspan); });
          std::this_thread::sleep_for(std::chrono::milliseconds(3));
          const double c = timed([&] { e.copy_to_device(dspan, std::span(pageable).first(n)); });
          std::this_thread::sleep_for(std::chrono::milliseconds(3));
          const double d = timed([&] { e.copy_to_host(std::span(back).first(n), cdspan); });
          if (r == 0) {
            if (std::memcmp(back.data(), pageable.data(), n) != 0) throw std::runtime_error("staged round trip differs");
            continue;
          }
          h2d.push_back(a); d2h.push_back(b); h2d_cold.push_back(c); d2h_cold.push_back(d);
        }
        const double nb = static_cast<double>(n);
        out += fmt::format("| {} MiB | {} | {} | {} | {:.1f} | {:.1f} | {:.1f} | {:.1f} |\n", n >> 20,
                           chunk == 0 ? std::string("auto") : fmt::format("{} KiB", chunk >> 10),
                           depth == 0 ? std::string("auto") : std::to_string(depth), e.options().threads,
                           nb / median(h2d) / 1e9, nb / median(d2h) / 1e9, nb / median(h2d_cold) / 1e9, nb / median(d2h_cold) / 1e9);
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
        "### Copies, GB/s (medians of interleaved rounds; engine defaults: {} chunks, depth {}, {} threads)\n\n"
        "| size | direction | direct pageable | staged pageable | pinned (ceiling) | staged / pinned | staged / direct |\n"
        "|---:|---|---:|---:|---:|---:|---:|\n",
        eo.chunk_bytes == 0 ? std::string("auto") : fmt::format("{} MiB", eo.chunk_bytes >> 20),
        eo.depth == 0 ? std::string("auto") : std::to_string(eo.depth), eo.threads);
    for (std::size_t n : {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{256} << 20, kMax}) {
      const int rounds = n >= kMax ? 5 : 9;
      std::vector<double> dh, sh, ph, dd, sd, pd;
      const auto dspan = dev.as<std::byte>().subspan(0, n);
      const DeviceSpan<const std::byte> cdspan(dspan);
      const std::span<const std::byte> src = std::span(pageable).first(n);
      const std::span<const std::byte> psrc(static_cast<const std::byte*>(pinned.data()), n);
      const std::span<std::byte> pdst(static_cast<std::byte*>(pinned.data()), n);
      for (int r = 0; r < rounds + 1; ++r) {
        const double a = timed([&] { copy(dspan, src); });
        const double b = timed([&] { engine.copy_to_device(dspan, src); });
        const double c = timed([&] { copy(dspan, psrc); });
        const double d = timed([&] { copy(std::span(back).first(n), cdspan); });
        const double e = timed([&] { engine.copy_to_host(std::span(back).first(n), cdspan); });
        if (r == 0 && std::memcmp(back.data(), pageable.data(), n) != 0) throw std::runtime_error("staged round trip differs");
        const double f = timed([&] { copy(pdst, cdspan); });
        if (r == 0) continue;  // warm-up round
        dh.push_back(a); sh.push_back(b); ph.push_back(c); dd.push_back(d); sd.push_back(e); pd.push_back(f);
      }
      auto row = [&](const char* dir, double direct, double staged, double pin) {
        const double nb = static_cast<double>(n);
        const double gd = nb / direct / 1e9, gs = nb / staged / 1e9, gp = nb / pin / 1e9;
        if (n >= (std::size_t{16} << 20) && gs < 0.8 * gp) targets_met = false;
        out += fmt::format("| {} MiB | {} | {:.1f} | {:.1f} | {:.1f} | {:.0f} % | {:.1f}x |\n", n >> 20, dir, gd, gs, gp,
                           100.0 * gs / gp, gs / gd);
      };
      row("H2D", median(dh), median(sh), median(ph));
      row("D2H", median(dd), median(sd), median(pd));
    }
    out += fmt::format("\nTarget (16 MiB and up: staged >= 80 % of pinned): {}\n\n", targets_met ? "met" : "NOT met");
    std::fputs(out.c_str() + printed, stdout);
    }

    // ---- pool vs cuMemHostAlloc ----
    // Each sample times a loop and divides (a clock read costs tens of
    // nanoseconds on a VM, as much as a pool reuse); fresh and reused rounds
    // interleave.
    out += "### Pinned blocks: pool reuse vs a fresh allocation, microseconds per acquire + release (medians)\n\n"
           "| size | PinnedPool acquire + release (reused) | cuMemHostAlloc + cuMemFreeHost | ratio |\n|---:|---:|---:|---:|\n";
    const std::size_t pool_mark = out.size();
    bool pool_met = true;
    for (std::size_t n : {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{256} << 20, kMax}) {
      if (!wanted("pool")) break;
      std::vector<double> fresh, reused;
      const int rounds = n >= (std::size_t{256} << 20) ? 3 : 11;
      const int fresh_loop = n <= (std::size_t{1} << 20) ? 200 : 1;
      constexpr int kReuseLoop = 20000;
      PinnedPool p(ctx);
      (void)p.acquire(n);  // the first acquire allocates; every later one reuses
      for (int r = 0; r < rounds + 1; ++r) {
        const double f = timed([&] {
          for (int i = 0; i < fresh_loop; ++i) {
            auto b = PinnedBuffer::allocate(ctx, n);
            b.free();
          }
        }) / fresh_loop;
        const double u = timed([&] {
          for (int i = 0; i < kReuseLoop; ++i) {
            auto b = p.acquire(n);
            if (b.data() == nullptr) throw std::runtime_error("empty block");
            b.release();
          }
        }) / kReuseLoop;
        if (r == 0) continue;  // warm-up round
        fresh.push_back(f);
        reused.push_back(u);
      }
      if (p.stats().allocations != 1) throw std::runtime_error("the pool allocated more than once");
      const double f = median(fresh) * 1e6, u = median(reused) * 1e6;
      if (f / u < 100) pool_met = false;
      out += fmt::format("| {} MiB | {:.3f} | {:.1f} | {:.0f}x |\n", n >> 20, u, f, f / u);
    }
    out += fmt::format("\nTarget (reuse >= 100x cheaper than a fresh cuMemHostAlloc): {}\n", pool_met ? "met" : "NOT met");
    std::fputs(out.c_str() + pool_mark, stdout);
    std::ofstream(argv[1], std::ios::app) << out;
    return targets_met && pool_met ? 0 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_staging: %s\n", e.what());
    return 1;
  }
}
