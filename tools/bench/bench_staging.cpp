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
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s OUTPUT.md\n", argv[0]);
    return 2;
  }
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

    // ---- sweep: chunk x threads at 256 MiB ----
    {
      const std::size_t n = std::size_t{256} << 20;
      out += "### Chunk size, ring depth and host threads, 256 MiB, GB/s (median of 3)\n\n| chunk | depth | threads | H2D | D2H |\n|---:|---:|---:|---:|---:|\n";
      struct Config {
        std::size_t chunk;
        unsigned depth, threads;
      };
      std::vector<Config> configs;
      for (unsigned t : {1u, 4u, 8u, 12u}) configs.push_back({std::size_t{4} << 20, 3, t});
      for (std::size_t chunk : {std::size_t{8} << 20, std::size_t{16} << 20}) {
        for (unsigned t : {8u, 12u, 16u}) configs.push_back({chunk, 3, t});
      }
      configs.push_back({std::size_t{16} << 20, 4, 12});
      for (const auto& [chunk, depth, threads] : configs) {
        {
          StagingOptions o;
          o.chunk_bytes = chunk;
          o.depth = depth;
          o.threads = threads;
          StagingEngine e(pool, o);
          std::vector<double> h2d, d2h;
          for (int r = 0; r < 4; ++r) {
            const double a = timed([&] { e.copy_to_device(dev.as<std::byte>().subspan(0, n), std::span(pageable).first(n)); });
            const double b = timed([&] { e.copy_to_host(std::span(back).first(n), DeviceSpan<const std::byte>(dev.as<std::byte>().subspan(0, n))); });
            if (r > 0) {
              h2d.push_back(a);
              d2h.push_back(b);
            }
          }
          out += fmt::format("| {} MiB | {} | {} | {:.1f} | {:.1f} |\n", chunk >> 20, depth, threads, static_cast<double>(n) / median(h2d) / 1e9,
                             static_cast<double>(n) / median(d2h) / 1e9);
        }
      }
      out += "\n";
    }
    std::fputs(out.c_str(), stdout);
    const std::size_t printed = out.size();

    // ---- copies ----
    StagingEngine engine(pool);
    const auto& eo = engine.options();
    out += fmt::format(
        "### Copies, GB/s (medians of interleaved rounds; engine defaults: {} MiB chunks, depth {}, {} threads)\n\n"
        "| size | direction | direct pageable | staged pageable | pinned (ceiling) | staged / pinned | staged / direct |\n"
        "|---:|---|---:|---:|---:|---:|---:|\n",
        eo.chunk_bytes >> 20, eo.depth, eo.threads);
    bool targets_met = true;
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

    // ---- pool vs cuMemHostAlloc ----
    out += "### Pinned blocks: pool reuse vs a fresh allocation, microseconds (medians)\n\n"
           "| size | PinnedPool acquire + release (reused) | cuMemHostAlloc + cuMemFreeHost | ratio |\n|---:|---:|---:|---:|\n";
    bool pool_met = true;
    for (std::size_t n : {std::size_t{1} << 20, std::size_t{16} << 20, std::size_t{256} << 20, kMax}) {
      std::vector<double> fresh, reused;
      const int fresh_rounds = n >= (std::size_t{256} << 20) ? 3 : 9;
      for (int r = 0; r < fresh_rounds; ++r) {
        fresh.push_back(timed([&] {
          auto b = PinnedBuffer::allocate(ctx, n);
          b.free();
        }));
      }
      PinnedPool p(ctx);
      (void)p.acquire(n);  // the first acquire allocates; every later one reuses
      for (int r = 0; r < 101; ++r) {
        reused.push_back(timed([&] {
          auto b = p.acquire(n);
          b.release();
        }));
      }
      if (p.stats().allocations != 1) throw std::runtime_error("the pool allocated more than once");
      const double f = median(fresh) * 1e6, u = median(reused) * 1e6;
      if (f / u < 100) pool_met = false;
      out += fmt::format("| {} MiB | {:.2f} | {:.0f} | {:.0f}x |\n", n >> 20, u, f, f / u);
    }
    out += fmt::format("\nTarget (reuse >= 100x cheaper than a fresh cuMemHostAlloc): {}\n", pool_met ? "met" : "NOT met");
    std::fputs(out.c_str() + out.rfind("### Pinned"), stdout);
    std::ofstream(argv[1], std::ios::app) << out;
    return targets_met && pool_met ? 0 : 3;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_staging: %s\n", e.what());
    return 1;
  }
}
