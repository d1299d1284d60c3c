// drvshim-probe: what this machine's CUDA driver really is and supports, as
// text (default) or JSON (--json; schema in docs/probe.md).
//
// Exit codes: 0 the probe ran (an "unsupported" check is information, not
// failure); 2 no usable driver could be loaded (absent, stub, too old);
// 3 the driver loaded but has no device; 1 bad arguments or an unexpected error.
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <drvshim/drvshim.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

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

// ---- text rendering (from the JSON, so both always agree) -----------------------------------------

std::string scalar(const ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return v.dump();
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
      std::printf("  [%d] %s\n", d["ordinal"].get<int>(), scalar(d["name"]).c_str());
      for (const char* key : {"uuid", "pci_bus_id", "compute_capability", "sm_count", "total_memory_bytes",
                              "clock_khz", "memory_clock_khz"}) {
        std::printf("      %-46s %s\n", key, scalar(d[key]).c_str());
      }
      std::printf("      host mapping\n");
      for (const auto& [k, v] : d["host_mapping"].items()) std::printf("        %-44s %s\n", k.c_str(), scalar(v).c_str());
      const auto& pc = d["primary_context"];
      std::printf("      primary context before the probe             %s, flags %s%s\n",
                  pc["before"]["active"].get<bool>() ? "active" : "inactive", scalar(pc["before"]["flags"]).c_str(),
                  pc["before"]["active"].get<bool>() ? " (another component activated it)" : "");
      std::printf("      primary context after the probe              %s, flags %s\n",
                  pc["after"]["active"].get<bool>() ? "active" : "inactive", scalar(pc["after"]["flags"]).c_str());
      std::printf("      live checks\n");
      for (const auto& [k, v] : d["checks"].items()) {
        std::string line = scalar(v["status"]);
        if (v.contains("pointers_identical")) line += v["pointers_identical"].get<bool>() ? " (host and device pointers identical)" : " (pointers differ)";
        if (v.contains("result")) line += " (" + scalar(v["result"]) + ")";
        std::printf("        %-44s %s\n", k.c_str(), line.c_str());
        if (v["status"] != "ok" && v.contains("detail")) std::printf("        %-44s %s\n", "", scalar(v["detail"]).c_str());
      }
      std::printf("      verdict: %s\n", scalar(d["verdict"]).c_str());
    }
  }
  if (j.contains("peer_access")) {
    std::printf("\nPeer access (row can access column)\n");
    for (std::size_t r = 0; r < j["peer_access"].size(); ++r) {
      std::printf("  [%zu]", r);
      for (const auto& c : j["peer_access"][r]) std::printf(" %s", c.is_null() ? "-" : (c.get<bool>() ? "yes" : "no"));
      std::printf("\n");
    }
  }
  if (j.contains("timeline")) {
    std::printf("\nInit timeline (from drvshim's trace)\n");
    for (const auto& [k, v] : j["timeline"].items()) std::printf("  %-22s %s ms\n", k.c_str(), scalar(v).c_str());
  }
  if (j.contains("bandwidth")) {
    std::printf("\nBandwidth (64 MiB, median of 7)\n");
    for (const auto& b : j["bandwidth"]) {
      if (b.contains("gb_per_s")) {
        std::printf("  %-20s %-12s %8.1f GB/s\n", scalar(b["direction"]).c_str(), scalar(b["memory"]).c_str(),
                    b["gb_per_s"].get<double>());
      } else {
        std::printf("  %-20s %s: %s\n", "kernel reads mapped", scalar(b["status"]).c_str(),
                    b.contains("detail") ? scalar(b["detail"]).c_str() : "");
      }
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"drvshim-probe: what this machine's CUDA driver really supports"};
  bool json = false;
  bool want_bandwidth = false;
  int only_device = -1;
  std::string trace_file;
  app.add_flag("--json", json, "print JSON (schema: docs/probe.md) instead of text");
  app.add_flag("--bandwidth", want_bandwidth, "also measure H2D/D2H copies from pinned, pageable and registered memory");
  app.add_option("--device", only_device, "probe only this device ordinal")->check(CLI::NonNegativeNumber);
  app.add_option("--trace", trace_file, "write drvshim's trace of every driver call to FILE (JSON lines)");
  app.footer("Exit codes: 0 ran, 2 no usable driver, 3 no device, 1 bad arguments or unexpected error.");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? kExitOk : kExitUnexpected;
  }

  ordered_json j;
  int exit_code = kExitOk;
  const auto lib = drvshim::library_version();
  j["schema"] = "drvshim-probe/1";
  j["drvshim"] = {{"version", lib.string}, {"cuda_header_version", lib.cuda_header_version}};
  try {
    drvshim::trace::enable(true);
    if (!trace_file.empty()) drvshim::trace::set_file(trace_file);
  } catch (const drvshim::Error& e) {
    std::fprintf(stderr, "drvshim-probe: %s\n", e.what());
    return kExitUnexpected;
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
    try {
      const int count = drv->device_count();
      if (count == 0) exit_code = kExitNoDevice;
      if (only_device >= count) {
        std::fprintf(stderr, "drvshim-probe: --device %d: the driver reports %d device(s)\n", only_device, count);
        return kExitUnexpected;
      }
      j["devices"] = ordered_json::array();
      const bool progress = want_bandwidth && isatty(STDERR_FILENO) != 0;
      for (const auto& dev : drv->devices()) {
        if (only_device >= 0 && dev.ordinal() != only_device) continue;
        ordered_json d;
        d["ordinal"] = dev.ordinal();
        d["name"] = dev.name();
        d["uuid"] = run_check([&] { return ordered_json(dev.uuid_string()); });
        d["pci_bus_id"] = dev.pci_bus_id();
        const auto cc = dev.compute_capability();
        d["compute_capability"] = std::to_string(cc.major) + "." + std::to_string(cc.minor);
        d["sm_count"] = dev.sm_count();
        d["total_memory_bytes"] = dev.total_memory();
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
        const auto before = dev.primary_context_state();
        {
          auto primary = dev.retain_primary_context();
          d["checks"] = live_checks(*drv, dev, primary.ref());
          if (want_bandwidth) {
            d["bandwidth"] = run_check([&] { return bandwidth(primary.ref(), progress); });
            if (d["bandwidth"].is_array()) j["bandwidth"] = d["bandwidth"];
          }
        }
        const auto after = dev.primary_context_state();
        d["primary_context"] = {{"before", state_json(before)},
                                {"after", state_json(after)},
                                {"activated_by_another_component", before.active}};
        std::string verdict = hm.verdict();
        if (d["checks"]["host_registration"]["status"] == "failed") verdict += "; but the live registration check failed";
        if (d["checks"]["mapped_allocation"]["status"] == "failed") verdict += "; but the live mapped-memory check failed";
        d["verdict"] = verdict;
        j["devices"].push_back(d);
      }
      if (count > 1) {
        ordered_json matrix = ordered_json::array();
        for (const auto& a : drv->devices()) {
          ordered_json row = ordered_json::array();
          for (const auto& b : drv->devices()) {
            row.push_back(a.ordinal() == b.ordinal() ? ordered_json(nullptr) : ordered_json(a.can_access_peer(b)));
          }
          matrix.push_back(row);
        }
        j["peer_access"] = matrix;
      }
    } catch (const drvshim::Error& e) {
      j["error"] = e.what();
      exit_code = kExitUnexpected;
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

  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_text(j);
  }
  return exit_code;
}
