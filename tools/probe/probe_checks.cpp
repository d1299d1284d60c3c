// SPDX-License-Identifier: Apache-2.0
// drvshim-probe: the live checks and measurements (probe_checks.hpp).
#include "probe_checks.hpp"

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <optional>
#include <string>

#include "probe_kernels_ptx.hpp"

namespace drvshim_probe {

ordered_json live_checks(const drvshim::Driver& drv, const drvshim::Device& dev, const drvshim::ContextRef& ctx) {
  using namespace drvshim;
  ordered_json checks;
  constexpr std::size_t kBytes = 1 << 20;
  checks["pinned_allocation"] = run_check([&] {
    auto p = PinnedBuffer::allocate(ctx, kBytes);
    return ok();
  });
  checks["mapped_allocation"] = run_check([&] {
    auto m = MappedBuffer::allocate(ctx, kBytes);
    auto d = DeviceBuffer::allocate(ctx, kBytes);
    // A real round trip through the device address proves the mapping works.
    std::fill_n(static_cast<unsigned char*>(m.data()), kBytes, static_cast<unsigned char>(0x5a));
    copy(d.as<unsigned char>(), DeviceSpan<const unsigned char>(m.device_as<unsigned char>()));
    unsigned char back[16] = {};
    copy(std::span<unsigned char>(back),
         DeviceSpan<const unsigned char>(d.as<unsigned char>().subspan(kBytes - 16, 16)));
    if (back[15] != 0x5a) throw std::runtime_error("data read through the device address did not match");
    return ok({{"pointers_identical", m.pointers_identical()}});
  });
  std::vector<unsigned char> host(kBytes, 1);
  checks["host_registration"] = run_check([&] {
    auto r = RegisteredRange::register_range(ctx, host.data(), host.size());
    return ok();
  });
  checks["read_only_host_registration"] = run_check([&] {
    auto r = RegisteredRange::register_range(ctx, host.data(), host.size(), HostRegisterFlags::read_only);
    return ok();
  });
  checks["managed_allocation"] = run_check([&] {
    auto m = ManagedBuffer::allocate(ctx, kBytes);
    return ok();
  });
  checks["pool_allocation"] = run_check([&] {
    auto s = Stream::create(ctx);
    { auto b = AsyncDeviceBuffer::allocate(s.ref(), kBytes); }
    s.ref().synchronize();
    return ok();
  });
  checks["pageable_access"] = run_check([&] {
    const auto attr = dev.attribute(DeviceAttribute::pageable_memory_access);
    return ordered_json{{"status", attr.is_true() ? "reported" : "unsupported"},
                        {"detail", "from the pageable_memory_access attribute (" + attr.to_string() +
                                       "); a kernel touching pageable memory is not tried yet"}};
  });
  (void)drv;
  return checks;
}

ordered_json bandwidth(const drvshim::ContextRef& ctx, bool progress) {
  using namespace drvshim;
  constexpr std::size_t kBytes = std::size_t{64} << 20;
  constexpr int kReps = 7;
  ordered_json rows = ordered_json::array();
  auto dev = DeviceBuffer::allocate(ctx, kBytes);
  auto pinned = PinnedBuffer::allocate(ctx, kBytes);
  std::vector<unsigned char> pageable(kBytes, 3);
  std::vector<unsigned char> reg_storage(kBytes, 5);
  std::fill_n(static_cast<unsigned char*>(pinned.data()), kBytes, static_cast<unsigned char>(7));
  std::optional<RegisteredRange> reg;
  try {
    reg.emplace(RegisteredRange::register_range(ctx, reg_storage.data(), kBytes));
  } catch (const Error&) {
  }
  struct Src {
    const char* name;
    unsigned char* data;
  };
  std::vector<Src> sources = {{"pinned", static_cast<unsigned char*>(pinned.data())}, {"pageable", pageable.data()}};
  if (reg) sources.push_back({"registered", reg_storage.data()});
  for (const bool h2d : {true, false}) {
    for (const auto& s : sources) {
      if (progress) std::fprintf(stderr, "\r  measuring %s %-10s", h2d ? "H2D" : "D2H", s.name);
      std::vector<double> t;
      std::span<unsigned char> host(s.data, kBytes);
      for (int r = 0; r < kReps + 1; ++r) {
        const auto t0 = std::chrono::steady_clock::now();
        if (h2d) {
          copy(dev.as<unsigned char>(), std::span<const unsigned char>(host));
        } else {
          copy(host, DeviceSpan<const unsigned char>(dev.as<unsigned char>()));
        }
        const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (r > 0) t.push_back(sec);  // the first is a warm-up
      }
      std::sort(t.begin(), t.end());
      rows.push_back({{"direction", h2d ? "H2D" : "D2H"},
                      {"memory", s.name},
                      {"bytes", kBytes},
                      {"gb_per_s", std::round(static_cast<double>(kBytes) / t[t.size() / 2] / 1e8) / 10.0}});
    }
  }
  if (progress) std::fprintf(stderr, "\r  measuring a kernel reading mapped memory");
  rows.push_back(run_check([&] {
    // A kernel streaming through zero-copy memory: every byte crosses the bus once.
    auto mapped = MappedBuffer::allocate(ctx, kBytes);
    std::fill_n(static_cast<float*>(mapped.data()), kBytes / sizeof(float), 1.0f);
    auto sink = DeviceBuffer::allocate(ctx, sizeof(float));
    auto module =
        Module::load(ctx, std::as_bytes(std::span<const char>(kProbeKernelsPtx, sizeof(kProbeKernelsPtx) - 1)));
    const Kernel read_sum = module.kernel("read_sum");
    auto stream = Stream::create(ctx);
    const LaunchConfig config{{static_cast<unsigned>(ctx.device().sm_count()) * 8}, {256}, 0, stream.ref(), {}};
    const unsigned long long n = kBytes / 16;
    std::vector<double> t;
    for (int r = 0; r < kReps + 1; ++r) {
      EventTimer timer(stream.ref());
      launch(read_sum, config, mapped.device_address(), n, sink.address());
      const double ms = timer.stop().count();
      if (r > 0) t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    return ordered_json{{"direction", "kernel reads mapped"},
                        {"memory", "mapped"},
                        {"bytes", kBytes},
                        {"gb_per_s", std::round(static_cast<double>(kBytes) / (t[t.size() / 2] / 1e3) / 1e8) / 10.0}};
  }));
  if (progress) std::fprintf(stderr, "\r%50s\r", "");
  return rows;
}

// ---- several devices: the links and the P2P matrices --------------------------------------------

ordered_json link_json(const drvshim::PeerLink& l) {
  return ordered_json{{"from", l.from},
                      {"to", l.to},
                      {"access", l.can_access},
                      {"access_supported", attribute_json(l.access_supported)},
                      {"native_atomic_supported", attribute_json(l.native_atomic_supported)},
                      {"only_partial_native_atomic_supported", attribute_json(l.only_partial_native_atomic_supported)},
                      {"cuda_array_access_supported", attribute_json(l.cuda_array_access_supported)},
                      {"performance_rank", attribute_json(l.performance_rank)}};
}

ordered_json null_matrix(int n) {
  ordered_json m = ordered_json::array();
  for (int r = 0; r < n; ++r)
    m.push_back(ordered_json(std::vector<std::nullptr_t>(static_cast<std::size_t>(n), nullptr)));
  return m;
}

namespace {
double round2(double v) { return std::round(v * 100.0) / 100.0; }
}  // namespace

// The P2P bandwidth and latency matrices (row = source, column = destination)
// over the ordered pairs in `pairs` whose link can do peer access.
ordered_json p2p_bandwidth(const drvshim::Driver& drv, const std::vector<std::pair<int, int>>& pairs,
                           const drvshim_probe::P2PSettings& settings, bool progress) {
  using namespace drvshim;
  const int n = drv.device_count();
  ordered_json out{{"method",
                    "copy engine: copy_peer_async (cuMemcpyPeerAsync) on a non-blocking stream of the source device, "
                    "peer access enabled each way the driver allows (both ways for the bidirectional rate), queued "
                    "behind a latch, warm-up copies first, events around the "
                    "timed copies; the median of the samples"},
                   {"bytes", settings.bytes},
                   {"copies", settings.copies},
                   {"warmup", settings.warmup},
                   {"samples", settings.samples},
                   {"latency_bytes", settings.latency_bytes},
                   {"latency_copies", settings.latency_copies}};
  ordered_json uni = null_matrix(n), bidir = null_matrix(n), lat = null_matrix(n);
  ordered_json skipped = ordered_json::array(), errors = ordered_json::array();
  // Per device: its primary context, a latch, two buffers of settings.bytes (retained lazily, kept to the end).
  struct PerDevice {
    std::optional<PrimaryContext> primary;
    std::optional<drvshim_probe::StreamLatch> latch;
    std::optional<DeviceBuffer> a, b;
    std::optional<Stream> stream;
  };
  std::map<int, PerDevice> devs;
  auto prepare = [&](int ord) -> PerDevice& {
    PerDevice& p = devs[ord];
    if (!p.primary) {
      p.primary.emplace(drv.device(ord).retain_primary_context());
      const ContextRef c = p.primary->ref();
      p.latch.emplace(c);
      p.a.emplace(DeviceBuffer::allocate(c, settings.bytes));
      p.b.emplace(DeviceBuffer::allocate(c, settings.bytes));
      fill(p.a->as<std::uint8_t>(), std::uint8_t{0x5a});
      fill(p.b->as<std::uint8_t>(), std::uint8_t{0xa5});
      p.stream.emplace(Stream::create(c));
    }
    return p;
  };
  bool latched = true;
  for (const auto& [from, to] : pairs) {
    const auto f_i = static_cast<std::size_t>(from);
    const auto t_i = static_cast<std::size_t>(to);
    std::string step = "link";
    try {
      if (!drv.device(from).can_access_peer(drv.device(to))) {
        skipped.push_back(
            {{"from", from}, {"to", to}, {"reason", "no peer access on this link (cuDeviceCanAccessPeer 0)"}});
        continue;
      }
      if (progress) std::fprintf(stderr, "\r  measuring P2P %d -> %d          ", from, to);
      step = "prepare";
      PerDevice& f = prepare(from);
      PerDevice& t = prepare(to);
      latched = latched && f.latch->available() && t.latch->available();
      step = "enable peer access";
      auto there = PeerAccess::enable(f.primary->ref(), t.primary->ref());
      // Access can be one way (to -> from refused): the way back is enabled,
      // and both ways measured at once, only where the driver allows it.
      const bool both_ways = drv.device(to).can_access_peer(drv.device(from));
      std::optional<PeerAccess> back;
      if (both_ways) back.emplace(PeerAccess::enable(t.primary->ref(), f.primary->ref()));
      const drvshim_probe::Direction forward{t.a->as<std::byte>(), f.a->as<std::byte>(), f.stream->ref(), &*f.latch};
      const drvshim_probe::Direction reverse{f.b->as<std::byte>(), t.b->as<std::byte>(), t.stream->ref(), &*t.latch};
      step = "unidirectional bandwidth";
      uni[f_i][t_i] = round2(drvshim_probe::unidirectional_gbps(forward, settings));
      step = "bidirectional bandwidth";
      // Each unordered pair once; [a][b] is a -> b while b -> a runs, and the reverse.
      if (!both_ways) {
        skipped.push_back(
            {{"from", from},
             {"to", to},
             {"reason", "bidirectional bandwidth: no peer access the other way (cuDeviceCanAccessPeer 0)"}});
      } else if (bidir[f_i][t_i].is_null()) {
        const auto both = drvshim_probe::bidirectional_gbps(forward, reverse, settings);
        bidir[f_i][t_i] = round2(both.forward);
        bidir[t_i][f_i] = round2(both.reverse);
      }
      step = "latency";
      lat[f_i][t_i] = round2(drvshim_probe::latency_us(forward, settings));
    } catch (const std::exception& e) {
      ordered_json err = error_json(step, e);
      err["from"] = from;
      err["to"] = to;
      errors.push_back(err);
    }
  }
  if (progress) std::fprintf(stderr, "\r%50s\r", "");
  out["latched"] = latched;
  out["unidirectional_gb_per_s"] = uni;
  out["bidirectional_gb_per_s"] = bidir;
  out["latency_us"] = lat;
  out["skipped"] = skipped;
  out["errors"] = errors;
  return out;
}

}  // namespace drvshim_probe
