// SPDX-License-Identifier: Apache-2.0
// drvshim-probe: the text rendering (probe_text.hpp).
#include "probe_text.hpp"

#include "probe_checks.hpp"

#include <cstdio>
#include <functional>
#include <string>

namespace drvshim_probe {
namespace {

// ---- text rendering (from the JSON, so both always agree) -----------------------------------------

std::string scalar(const ordered_json& v) {
  if (v.is_string()) return v.get<std::string>();
  if (v.is_boolean()) return v.get<bool>() ? "yes" : "no";
  return v.dump();
}

// One matrix, row = the first device of a pair, column = the second.
void print_matrix(const char* title, const ordered_json& m,
                  const std::function<std::string(const ordered_json&)>& cell) {
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
    for (const auto& l : p["links"])
      n = std::max<std::size_t>(n, std::max(l["from"].get<std::size_t>(), l["to"].get<std::size_t>()) + 1);
    for (const auto& [key, title] :
         std::vector<std::pair<std::string, std::string>>{{"access", "access (cuDeviceCanAccessPeer)"},
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
    std::printf("  %d -> %d not measured: %s\n", sk["from"].get<int>(), sk["to"].get<int>(),
                scalar(sk["reason"]).c_str());
  }
  for (const auto& e : b["errors"]) {
    std::printf("  %d -> %d failed at step \"%s\": %s\n", e["from"].get<int>(), e["to"].get<int>(),
                scalar(e["step"]).c_str(), scalar(e["detail"]).c_str());
  }
}

}  // namespace

void print_text(const ordered_json& j) {
  std::printf("drvshim-probe %s (driver table written against CUDA %s)\n",
              j["drvshim"]["version"].get<std::string>().c_str(),
              version_text(j["drvshim"]["cuda_header_version"].get<int>()).c_str());
  const auto& l = j["loader"];
  std::printf("\nLoader\n");
  std::printf("  %-22s %s\n", "status", scalar(l["status"]).c_str());
  if (l.contains("paths_tried")) {
    for (const auto& p : l["paths_tried"]) {
      std::printf("  %-22s %s\n  %-22s %s\n", "tried", scalar(p["path"]).c_str(), "", scalar(p["error"]).c_str());
    }
  }
  if (l.contains("path"))
    std::printf("  %-22s %s -> %s\n", "library", scalar(l["requested"]).c_str(), scalar(l["path"]).c_str());
  if (l.contains("driver_version")) {
    std::printf("  %-22s %s (%d)\n", "driver version", version_text(l["driver_version"].get<int>()).c_str(),
                l["driver_version"].get<int>());
    std::printf("  %-22s %s\n", "resolver", scalar(l["resolver"]).c_str());
    std::printf("  %-22s %d/%d resolved\n", "functions", l["functions_resolved"].get<int>(),
                l["functions_total"].get<int>());
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
    std::printf(
        "\nInit\n  %-22s %s\n", "cuInit",
        i["status"] == "ok" ? (scalar(i["cuinit_ms"]) + " ms").c_str() : ("failed: " + scalar(i["detail"])).c_str());
  }
  if (j.contains("devices")) {
    std::printf("\nDevices (%zu)\n", j["devices"].size());
    for (const auto& d : j["devices"]) {
      std::printf("  [%d] %s\n", d["ordinal"].get<int>(), d.contains("name") ? scalar(d["name"]).c_str() : "");
      for (const char* key : {"uuid", "pci_bus_id", "compute_capability", "sm_count", "total_memory_bytes", "clock_khz",
                              "memory_clock_khz"}) {
        if (d.contains(key)) std::printf("      %-46s %s\n", key, scalar(d[key]).c_str());
      }
      if (d.contains("host_mapping")) {
        std::printf("      host mapping\n");
        for (const auto& [k, v] : d["host_mapping"].items())
          std::printf("        %-44s %s\n", k.c_str(), scalar(v).c_str());
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
          if (v.contains("pointers_identical"))
            line +=
                v["pointers_identical"].get<bool>() ? " (host and device pointers identical)" : " (pointers differ)";
          if (v.contains("result")) line += " (" + scalar(v["result"]) + ")";
          std::printf("        %-44s %s\n", k.c_str(), line.c_str());
          if (v["status"] != "ok" && v.contains("detail"))
            std::printf("        %-44s %s\n", "", scalar(v["detail"]).c_str());
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
    std::printf("\nError at step \"%s\": %s\n", scalar(j["error"]["step"]).c_str(),
                scalar(j["error"]["detail"]).c_str());
  }
}

}  // namespace drvshim_probe
