// drvshim-probe: what this machine's CUDA driver really is and supports, as
// text (default) or JSON (--json; schema in docs/probe.md).
//
// Exit codes: 0 the probe ran (an "unsupported" check is information, not
// failure); 2 no usable driver could be loaded (absent, stub, too old);
// 3 the driver loaded but has no device; 1 bad arguments or an unexpected error
// (the JSON then says which: a top-level or per-device "error" object).
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <drvshim/drvshim.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "p2p_measure.hpp"
#include "probe_kernels_ptx.hpp"

using nlohmann::ordered_json;

namespace {

constexpr int kExitOk = 0;
constexpr int kExitUnexpected = 1;
constexpr int kExitNoDriver = 2;
constexpr int kExitNoDevice = 3;

double ms(std::int64_t ns) { return std::round(static_cast<double>(ns) / 1e3) / 1e3; }

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

ordered_json attribute_json(const drvshim::AttributeValue& v) {
  if (v.has_value()) return v.value();
  return v.to_string();  // "unsupported" or "unknown"
}

// Runs one live check in isolation: a failure becomes that check's result, never the probe's.
ordered_json run_check(const std::function<ordered_json()>& check) {
  try {
    return check();
  } catch (const drvshim::UnsupportedError& e) {
    return ordered_json{{"status", "unsupported"}, {"detail", e.what()}};
  } catch (const drvshim::Error& e) {
    ordered_json j{{"status", "failed"}, {"detail", e.what()}};
    if (e.code() != 0) {
      j["result"] = e.code_name();
      j["result_code"] = e.code();
    }
    return j;
  } catch (const std::exception& e) {
    return ordered_json{{"status", "failed"}, {"detail", e.what()}};
  }
}

ordered_json ok(ordered_json extra = ordered_json::object()) {
  ordered_json j{{"status", "ok"}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

// What went wrong in one step, as the JSON reports it: the step, the
// message, and for driver errors the API and result.
ordered_json error_json(const std::string& step, const std::exception& e) {
  ordered_json j{{"step", step}, {"detail", e.what()}};
  if (const auto* d = dynamic_cast<const drvshim::Error*>(&e)) {
    if (!d->api().empty()) j["api"] = d->api();
    if (d->code() != 0) {
      j["result"] = d->code_name();
      j["result_code"] = d->code();
    }
  }
  return j;
}

// ---- text that is not UTF-8 ----------------------------------------------------------------
// Paths (a DRVSHIM_LIBCUDA value, a loader message) are bytes, not text; JSON
// strings must be UTF-8. Bytes that do not form UTF-8 are written as \xNN
// (backslash, x, two hex digits), so nothing is lost and the JSON stays valid.

// The length of the valid UTF-8 sequence at s[i], or 0.
std::size_t utf8_sequence(const std::string& s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned min = 0;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2, min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3, min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  unsigned cp = c & (0x7fu >> n);
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3fu);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

std::string utf8_safe(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    const std::size_t n = utf8_sequence(s, i);
    if (n == 0) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i]));
      out += buf;
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

void make_utf8_safe(ordered_json& j) {
  if (j.is_string()) {
    j = utf8_safe(j.get<std::string>());
  } else if (j.is_structured()) {
    for (auto& v : j) make_utf8_safe(v);
  }
}

ordered_json state_json(const drvshim::PrimaryContextState& s) {
  return ordered_json{{"active", s.active}, {"flags", drvshim::to_string(s.flags)}};
}

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
    copy(std::span<unsigned char>(back), DeviceSpan<const unsigned char>(d.as<unsigned char>().subspan(kBytes - 16, 16)));
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
    {
      auto b = AsyncDeviceBuffer::allocate(s.ref(), kBytes);
    }
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
    auto module = Module::load(ctx, std::as_bytes(std::span<const char>(kProbeKernelsPtx, sizeof(kProbeKernelsPtx) - 1)));
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
    return ordered_json{{"direction", "kernel reads mapped"}, {"memory", "mapped"}, {"bytes", kBytes},
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
  for (int r = 0; r < n; ++r) m.push_back(ordered_json(std::vector<std::nullptr_t>(static_cast<std::size_t>(n), nullptr)));
  return m;
}

double round2(double v) { return std::round(v * 100.0) / 100.0; }

// The P2P bandwidth and latency matrices (row = source, column = destination)
// over the ordered pairs in `pairs` whose link can do peer access.
ordered_json p2p_bandwidth(const drvshim::Driver& drv, const std::vector<std::pair<int, int>>& pairs,
                           const drvshim_probe::P2PSettings& settings, bool progress) {
  using namespace drvshim;
  const int n = drv.device_count();
  ordered_json out{{"method",
                    "copy engine: copy_peer_async (cuMemcpyPeerAsync) on a non-blocking stream of the source device, "
                    "peer access enabled both ways, queued behind a latch, warm-up copies first, events around the "
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
        skipped.push_back({{"from", from}, {"to", to}, {"reason", "no peer access on this link (cuDeviceCanAccessPeer 0)"}});
        continue;
      }
      if (progress) std::fprintf(stderr, "\r  measuring P2P %d -> %d          ", from, to);
      step = "prepare";
      PerDevice& f = prepare(from);
      PerDevice& t = prepare(to);
      latched = latched && f.latch->available() && t.latch->available();
      step = "enable peer access";
      auto there = PeerAccess::enable(f.primary->ref(), t.primary->ref());
      auto back = PeerAccess::enable(t.primary->ref(), f.primary->ref());
      const drvshim_probe::Direction forward{t.a->as<std::byte>(), f.a->as<std::byte>(), f.stream->ref(), &*f.latch};
      const drvshim_probe::Direction reverse{f.b->as<std::byte>(), t.b->as<std::byte>(), t.stream->ref(), &*t.latch};
      step = "unidirectional bandwidth";
      uni[f_i][t_i] = round2(drvshim_probe::unidirectional_gbps(forward, settings));
      step = "bidirectional bandwidth";
      // Each unordered pair once; [a][b] is a -> b while b -> a runs, and the reverse.
      if (bidir[f_i][t_i].is_null()) {
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

// ---- text rendering (from the JSON, so both always agree) -----------------------------------------

std::string scalar(const ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return v.dump();
}

// One matrix, row = the first device of a pair, column = the second.
void print_matrix(const char* title, const ordered_json& m, const std::function<std::string(const ordered_json&)>& cell) {
  std::printf("  %s\n      ", title);
  for (std::size_t c = 0; c < m.size(); ++c) std::printf(" %9s", ("[" + std::to_string(c) + "]").c_str());
  std::printf("\n");
  for (std::size_t r = 0; r < m.size(); ++r) {
    std::printf("    %-3s", ("[" + std::to_string(r) + "]").c_str());
    for (const auto& v : m[r]) std::printf(" %9s", v.is_null() ? "-" : cell(v).c_str());
    std::printf("\n");
  }
}

void print_p2p(const ordered_json& p) {
  std::printf("\nPeer-to-peer (row -> column)\n");
  if (p.contains("links")) {
    // Matrices from the link list: every ordered pair that was read.
    std::size_t n = 0;
    for (const auto& l : p["links"]) n = std::max<std::size_t>(n, std::max(l["from"].get<std::size_t>(), l["to"].get<std::size_t>()) + 1);
    for (const auto& [key, title] : std::vector<std::pair<std::string, std::string>>{
             {"access", "access (cuDeviceCanAccessPeer)"},
             {"native_atomic_supported", "native atomics"},
             {"performance_rank", "performance rank (lower is better)"}}) {
      ordered_json m = null_matrix(static_cast<int>(n));
      for (const auto& l : p["links"]) {
        if (l.contains(key)) {
          m[l["from"].get<std::size_t>()][l["to"].get<std::size_t>()] = l[key];
        } else if (l.contains("error")) {
          m[l["from"].get<std::size_t>()][l["to"].get<std::size_t>()] = "error";
        }
      }
      print_matrix(title.c_str(), m, [](const ordered_json& v) { return scalar(v); });
    }
    for (const auto& l : p["links"]) {
      if (l.contains("error")) {
        std::printf("  link %d -> %d failed: %s\n", l["from"].get<int>(), l["to"].get<int>(),
                    scalar(l["error"]["detail"]).c_str());
      }
    }
  }
  if (!p.contains("bandwidth")) return;
  const auto& b = p["bandwidth"];
  const auto number = [](const ordered_json& v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.2f", v.get<double>());
    return std::string(buf);
  };
  std::printf("\nP2P bandwidth, copy engine: %s x %s copies, median of %s%s\n",
              (std::to_string(b["bytes"].get<std::size_t>() >> 20) + " MiB").c_str(), scalar(b["copies"]).c_str(),
              scalar(b["samples"]).c_str(), b["latched"].get<bool>() ? "" : " (unlatched)");
  print_matrix("unidirectional (GB/s)", b["unidirectional_gb_per_s"], number);
  print_matrix("bidirectional (GB/s, each direction while the other runs)", b["bidirectional_gb_per_s"], number);
  print_matrix(("latency (us per " + scalar(b["latency_bytes"]) + "-byte copy)").c_str(), b["latency_us"], number);
  for (const auto& sk : b["skipped"]) {
    std::printf("  %d -> %d not measured: %s\n", sk["from"].get<int>(), sk["to"].get<int>(), scalar(sk["reason"]).c_str());
  }
  for (const auto& e : b["errors"]) {
    std::printf("  %d -> %d failed at step \"%s\": %s\n", e["from"].get<int>(), e["to"].get<int>(),
                scalar(e["step"]).c_str(), scalar(e["detail"]).c_str());
  }
}

void print_text(const ordered_json& j) {
  std::printf("drvshim-probe %s (driver table written against CUDA %s)\n", j["drvshim"]["version"].get<std::string>().c_str(),
              version_text(j["drvshim"]["cuda_header_version"].get<int>()).c_str());
  const auto& l = j["loader"];
  std::printf("\nLoader\n");
  std::printf("  %-22s %s\n", "status", scalar(l["status"]).c_str());
  if (l.contains("paths_tried")) {
    for (const auto& p : l["paths_tried"]) {
      std::printf("  %-22s %s\n  %-22s %s\n", "tried", scalar(p["path"]).c_str(), "", scalar(p["error"]).c_str());
    }
  }
  if (l.contains("path")) std::printf("  %-22s %s -> %s\n", "library", scalar(l["requested"]).c_str(), scalar(l["path"]).c_str());
  if (l.contains("driver_version")) {
    std::printf("  %-22s %s (%d)\n", "driver version", version_text(l["driver_version"].get<int>()).c_str(),
                l["driver_version"].get<int>());
    std::printf("  %-22s %s\n", "resolver", scalar(l["resolver"]).c_str());
    std::printf("  %-22s %d/%d resolved\n", "functions", l["functions_resolved"].get<int>(), l["functions_total"].get<int>());
    for (const auto& m : l["missing"]) {
      std::printf("  %-22s %s (ABI %d, %s): %s\n", "missing", scalar(m["name"]).c_str(), m["version"].get<int>(),
                  m["required"].get<bool>() ? "required" : "optional", scalar(m["reason"]).c_str());
    }
  }
  if (l.contains("message")) std::printf("  %-22s %s\n", "detail", scalar(l["message"]).c_str());
  if (l.contains("hint")) std::printf("  %-22s %s\n", "hint", scalar(l["hint"]).c_str());

  const auto& n = j["nvrtc"];
  std::printf("\nNVRTC\n  %-22s %s\n", "status", scalar(n["status"]).c_str());
  if (n["status"] == "ok") {
    std::printf("  %-22s %s\n  %-22s %s\n  %-22s %s\n", "library", scalar(n["path"]).c_str(), "version",
                scalar(n["version"]).c_str(), "builtins", scalar(n["builtins_path"]).c_str());
    std::string archs;
    for (const auto& a : n["architectures"]) archs += (archs.empty() ? "sm_" : " sm_") + a.dump();
    std::printf("  %-22s %s\n", "architectures", archs.c_str());
  } else {
    std::printf("  %-22s %s\n", "detail", scalar(n["detail"]).c_str());
  }

  if (j.contains("init")) {
    const auto& i = j["init"];
    std::printf("\nInit\n  %-22s %s\n", "cuInit", i["status"] == "ok" ? (scalar(i["cuinit_ms"]) + " ms").c_str()
                                                                         : ("failed: " + scalar(i["detail"])).c_str());
  }
  if (j.contains("devices")) {
    std::printf("\nDevices (%zu)\n", j["devices"].size());
    for (const auto& d : j["devices"]) {
      std::printf("  [%d] %s\n", d["ordinal"].get<int>(), d.contains("name") ? scalar(d["name"]).c_str() : "");
      for (const char* key : {"uuid", "pci_bus_id", "compute_capability", "sm_count", "total_memory_bytes",
                              "clock_khz", "memory_clock_khz"}) {
        if (d.contains(key)) std::printf("      %-46s %s\n", key, scalar(d[key]).c_str());
      }
      if (d.contains("host_mapping")) {
        std::printf("      host mapping\n");
        for (const auto& [k, v] : d["host_mapping"].items()) std::printf("        %-44s %s\n", k.c_str(), scalar(v).c_str());
      }
      if (d.contains("primary_context")) {
        const auto& pc = d["primary_context"];
        std::printf("      primary context before the probe             %s, flags %s%s\n",
                    pc["before"]["active"].get<bool>() ? "active" : "inactive", scalar(pc["before"]["flags"]).c_str(),
                    pc["before"]["active"].get<bool>() ? " (another component activated it)" : "");
        if (pc.contains("after")) {
          std::printf("      primary context after the probe              %s, flags %s\n",
                      pc["after"]["active"].get<bool>() ? "active" : "inactive", scalar(pc["after"]["flags"]).c_str());
        }
      }
      if (d.contains("checks")) {
        std::printf("      live checks\n");
        for (const auto& [k, v] : d["checks"].items()) {
          std::string line = scalar(v["status"]);
          if (v.contains("pointers_identical")) line += v["pointers_identical"].get<bool>() ? " (host and device pointers identical)" : " (pointers differ)";
          if (v.contains("result")) line += " (" + scalar(v["result"]) + ")";
          std::printf("        %-44s %s\n", k.c_str(), line.c_str());
          if (v["status"] != "ok" && v.contains("detail")) std::printf("        %-44s %s\n", "", scalar(v["detail"]).c_str());
        }
      }
      if (d.contains("verdict")) std::printf("      verdict: %s\n", scalar(d["verdict"]).c_str());
      if (d.contains("error")) {
        std::printf("      failed at step \"%s\": %s\n", scalar(d["error"]["step"]).c_str(),
                    scalar(d["error"]["detail"]).c_str());
      }
    }
  }
  if (j.contains("p2p")) print_p2p(j["p2p"]);
  if (j.contains("timeline")) {
    std::printf("\nInit timeline (from drvshim's trace)\n");
    for (const auto& [k, v] : j["timeline"].items()) std::printf("  %-22s %s ms\n", k.c_str(), scalar(v).c_str());
  }
  if (j.contains("bandwidth")) {
    std::printf("\nBandwidth to and from the host (64 MiB, median of 7)\n");
    for (const auto& b : j["bandwidth"]) {
      const std::string dev = "[" + scalar(b["device"]) + "]";
      if (b.contains("gb_per_s")) {
        std::printf("  %-4s %-20s %-12s %8.1f GB/s\n", dev.c_str(), scalar(b["direction"]).c_str(),
                    scalar(b["memory"]).c_str(), b["gb_per_s"].get<double>());
      } else {
        std::printf("  %-4s %-20s %s: %s\n", dev.c_str(), "kernel reads mapped", scalar(b["status"]).c_str(),
                    b.contains("detail") ? scalar(b["detail"]).c_str() : "");
      }
    }
  }
  if (j.contains("error")) {
    std::printf("\nError at step \"%s\": %s\n", scalar(j["error"]["step"]).c_str(), scalar(j["error"]["detail"]).c_str());
  }
}

}  // namespace

namespace {

// "--device" as given: a non-negative integer, or a message saying why not.
std::optional<std::string> device_argument_problem(const std::string& text, int& ordinal) {
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, ec] = std::from_chars(first, last, ordinal);
  if (ec == std::errc() && end == last && ordinal >= 0) return std::nullopt;
  return "--device " + text +
         ": not a device ordinal; give 0 for the first device, 1 for the second, and so on (without --device every "
         "device is probed)";
}

// Prints `j` as the user asked: JSON, or text rendered from it.
void emit(ordered_json& j, bool json) {
  make_utf8_safe(j);
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_text(j);
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"drvshim-probe: what this machine's CUDA driver really supports"};
  bool json = false;
  bool want_bandwidth = false;
  std::string device_text;
  std::size_t p2p_mib = 256;
  std::string trace_file;
  app.add_flag("--json", json, "print JSON (schema: docs/probe.md) instead of text");
  app.add_flag("--bandwidth", want_bandwidth,
               "also measure H2D/D2H copies per device (pinned, pageable, registered memory) and, with several "
               "devices, the P2P bandwidth and latency matrices");
  app.add_option("--device", device_text, "probe only this device ordinal (and, with several devices, its links)");
  app.add_option("--p2p-size", p2p_mib, "MiB per copy of the P2P bandwidth matrices (default 256)")
      ->check(CLI::Range(std::size_t{1}, std::size_t{16384}));
  app.add_option("--trace", trace_file, "write drvshim's trace of every driver call to FILE (JSON lines)");
  app.footer("Exit codes: 0 ran, 2 no usable driver, 3 no device, 1 bad arguments or unexpected error.");

  ordered_json j;
  const auto lib = drvshim::library_version();
  j["schema"] = "drvshim-probe/1";
  j["drvshim"] = {{"version", lib.string}, {"cuda_header_version", lib.cuda_header_version}};
  // Bad arguments: a message, and with --json a JSON document that says so.
  const auto refuse_arguments = [&](const std::string& detail) {
    bool as_json = json;
    for (int i = 1; i < argc; ++i) as_json = as_json || std::strcmp(argv[i], "--json") == 0;
    std::fprintf(stderr, "drvshim-probe: %s\n", detail.c_str());
    if (as_json) {
      j["error"] = {{"step", "arguments"}, {"detail", detail}};
      j["exit_code"] = kExitUnexpected;
      emit(j, true);
    }
    return kExitUnexpected;
  };
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    return refuse_arguments(e.what());
  }
  int only_device = -1;
  if (!device_text.empty()) {
    if (const auto problem = device_argument_problem(device_text, only_device)) return refuse_arguments(*problem);
  }
  drvshim_probe::P2PSettings p2p_settings;
  p2p_settings.bytes = p2p_mib << 20;

  int exit_code = kExitOk;
  try {
    drvshim::trace::enable(true);
    if (!trace_file.empty()) drvshim::trace::set_file(trace_file);
  } catch (const drvshim::Error& e) {
    return refuse_arguments(std::string("--trace ") + trace_file + ": " + e.what());
  }

  // NVRTC is reported even without a driver: it needs none.
  try {
    auto nv = drvshim::Nvrtc::load();
    j["nvrtc"] = {{"status", "ok"},
                  {"path", nv.loaded_path()},
                  {"version", std::to_string(nv.version_major()) + "." + std::to_string(nv.version_minor())},
                  {"builtins_path", nv.builtins_path()},
                  {"architectures", nv.supported_architectures()}};
  } catch (const drvshim::NvrtcNotFoundError& e) {
    j["nvrtc"] = {{"status", "not_found"}, {"detail", e.what()}};
  }

  std::optional<drvshim::Driver> drv;
  try {
    drv.emplace(drvshim::Driver::load());
    ordered_json missing = ordered_json::array();
    for (const auto& m : drv->missing_functions()) {
      missing.push_back({{"name", m.name}, {"version", m.version}, {"required", m.required}, {"reason", m.reason}});
    }
    j["loader"] = {{"status", "ok"},
                   {"requested", drv->requested_path()},
                   {"path", drv->loaded_path()},
                   {"driver_version", drv->version()},
                   {"resolver", drv->resolver()},
                   {"functions_total", drv->functions_total()},
                   {"functions_resolved", drv->functions_resolved()},
                   {"missing", missing}};
  } catch (const drvshim::DriverNotFoundError& e) {
    ordered_json tried = ordered_json::array();
    for (std::size_t i = 0; i < e.paths_tried().size(); ++i) {
      tried.push_back({{"path", e.paths_tried()[i]}, {"error", i < e.dl_errors().size() ? e.dl_errors()[i] : ""}});
    }
    j["loader"] = {{"status", "not_found"}, {"paths_tried", tried}, {"hint", e.hint()}};
    exit_code = kExitNoDriver;
  } catch (const drvshim::StubLibraryError& e) {
    j["loader"] = {{"status", "stub"}, {"path", e.path()}, {"requested", e.path()}, {"message", e.what()}, {"hint", e.hint()}};
    exit_code = kExitNoDriver;
  } catch (const drvshim::Error& e) {
    j["loader"] = {{"status", e.kind() == drvshim::ErrorKind::driver_too_old ? "too_old" : "failed"},
                   {"message", e.what()}};
    exit_code = kExitNoDriver;
  }

  if (drv) {
    try {
      drv->init();
      j["init"] = {{"status", "ok"}, {"cuinit_ms", ms(drv->init_duration_ns())}};
    } catch (const drvshim::Error& e) {
      j["init"] = {{"status", "failed"}, {"result", e.code_name()}, {"detail", e.what()}};
      exit_code = e.code() == 100 ? kExitNoDevice : e.kind() == drvshim::ErrorKind::stub_library ? kExitNoDriver : kExitUnexpected;
    }
  }

  if (drv && drv->initialized()) {
    int count = 0;
    try {
      count = drv->device_count();
    } catch (const std::exception& e) {
      j["error"] = error_json("device count", e);
      exit_code = kExitUnexpected;
    }
    if (count == 0 && !j.contains("error")) exit_code = kExitNoDevice;
    if (only_device >= count && count > 0) {
      j["error"] = {{"step", "arguments"},
                    {"detail", "--device " + std::to_string(only_device) + ": the driver reports " + std::to_string(count) +
                                   " device(s), ordinals 0 to " + std::to_string(count - 1)}};
      std::fprintf(stderr, "drvshim-probe: %s\n", j["error"]["detail"].get<std::string>().c_str());
      exit_code = kExitUnexpected;
      count = 0;  // nothing is probed
    }
    const bool progress = want_bandwidth && isatty(STDERR_FILENO) != 0;
    if (count > 0) j["devices"] = ordered_json::array();
    ordered_json host_rows = ordered_json::array();
    for (int ord = 0; ord < count; ++ord) {
      if (only_device >= 0 && ord != only_device) continue;
      // Each step of a device is named; a failure is reported in the device's
      // own "error" object, keeps what was gathered, and the next device runs.
      ordered_json d;
      d["ordinal"] = ord;
      std::string step = "identity";
      try {
        const auto dev = drv->device(ord);
        d["name"] = dev.name();
        d["uuid"] = run_check([&] { return ordered_json(dev.uuid_string()); });
        d["pci_bus_id"] = dev.pci_bus_id();
        const auto cc = dev.compute_capability();
        d["compute_capability"] = std::to_string(cc.major) + "." + std::to_string(cc.minor);
        d["sm_count"] = dev.sm_count();
        d["total_memory_bytes"] = dev.total_memory();
        step = "attributes";
        d["clock_khz"] = attribute_json(dev.attribute(drvshim::DeviceAttribute::clock_rate_khz));
        d["memory_clock_khz"] = attribute_json(dev.attribute(drvshim::DeviceAttribute::memory_clock_rate_khz));
        const auto hm = dev.host_mapping();
        d["host_mapping"] = {
            {"can_map_host_memory", attribute_json(hm.can_map_host_memory)},
            {"unified_addressing", attribute_json(hm.unified_addressing)},
            {"integrated", attribute_json(hm.integrated)},
            {"host_register_supported", attribute_json(hm.host_register_supported)},
            {"read_only_host_register_supported", attribute_json(hm.read_only_host_register_supported)},
            {"can_use_host_pointer_for_registered_mem", attribute_json(hm.can_use_host_pointer_for_registered_mem)},
            {"pageable_memory_access", attribute_json(hm.pageable_memory_access)},
            {"pageable_memory_access_uses_host_page_tables", attribute_json(hm.pageable_memory_access_uses_host_page_tables)},
            {"managed_memory", attribute_json(hm.managed_memory)},
            {"concurrent_managed_access", attribute_json(hm.concurrent_managed_access)},
            {"memory_pools_supported", attribute_json(hm.memory_pools_supported)},
            {"host_native_atomic_supported", attribute_json(hm.host_native_atomic_supported)}};
        step = "primary context state";
        const auto before = dev.primary_context_state();
        d["primary_context"] = {{"before", state_json(before)}, {"activated_by_another_component", before.active}};
        {
          step = "retain primary context";
          auto primary = dev.retain_primary_context();
          step = "live checks";
          d["checks"] = live_checks(*drv, dev, primary.ref());
          if (want_bandwidth) {
            step = "bandwidth";
            d["bandwidth"] = run_check([&] { return bandwidth(primary.ref(), progress); });
            if (d["bandwidth"].is_array()) {
              for (auto& row : d["bandwidth"]) {
                ordered_json r{{"device", ord}};
                for (auto& [k, v] : row.items()) r[k] = v;
                row = r;
                host_rows.push_back(r);
              }
            }
          }
          step = "release primary context";
        }
        step = "primary context state";
        d["primary_context"] = {{"before", state_json(before)},
                                {"after", state_json(dev.primary_context_state())},
                                {"activated_by_another_component", before.active}};
        std::string verdict = hm.verdict();
        if (d["checks"]["host_registration"]["status"] == "failed") verdict += "; but the live registration check failed";
        if (d["checks"]["mapped_allocation"]["status"] == "failed") verdict += "; but the live mapped-memory check failed";
        d["verdict"] = verdict;
      } catch (const std::exception& e) {
        d["error"] = error_json(step, e);
        exit_code = kExitUnexpected;
      }
      j["devices"].push_back(d);
    }
    if (!host_rows.empty()) j["bandwidth"] = host_rows;

    if (count > 1) {
      // Every ordered pair (with --device, the pairs that involve it).
      std::vector<std::pair<int, int>> pairs;
      for (int a = 0; a < count; ++a) {
        for (int b = 0; b < count; ++b) {
          if (a != b && (only_device < 0 || a == only_device || b == only_device)) pairs.emplace_back(a, b);
        }
      }
      ordered_json links = ordered_json::array();
      ordered_json matrix = null_matrix(count);
      for (const auto& [a, b] : pairs) {
        try {
          const auto link = drvshim::peer_link(drv->device(a), drv->device(b));
          links.push_back(link_json(link));
          matrix[static_cast<std::size_t>(a)][static_cast<std::size_t>(b)] = link.can_access;
        } catch (const std::exception& e) {
          links.push_back({{"from", a}, {"to", b}, {"error", error_json("link", e)}});
          exit_code = kExitUnexpected;
        }
      }
      j["peer_access"] = matrix;
      j["p2p"]["links"] = links;
      if (want_bandwidth) {
        try {
          j["p2p"]["bandwidth"] = p2p_bandwidth(*drv, pairs, p2p_settings, progress);
          if (!j["p2p"]["bandwidth"]["errors"].empty()) exit_code = kExitUnexpected;
        } catch (const std::exception& e) {
          j["p2p"]["error"] = error_json("p2p bandwidth", e);
          exit_code = kExitUnexpected;
        }
      }
    }
  }

  // The init timeline from the trace: cuInit and the first primary-context retain.
  for (const auto& r : drvshim::trace::records()) {
    if (r.kind != drvshim::trace::Kind::call) continue;
    if (r.api == "cuInit" && !j["timeline"].contains("cuinit_ms")) j["timeline"]["cuinit_ms"] = ms(r.duration_ns);
    if (r.api == "cuDevicePrimaryCtxRetain" && !j["timeline"].contains("first_retain_ms")) {
      j["timeline"]["first_retain_ms"] = ms(r.duration_ns);
    }
  }
  if (j.contains("timeline") && j["timeline"].is_null()) j.erase("timeline");
  j["exit_code"] = exit_code;
  emit(j, json);
  return exit_code;
}
