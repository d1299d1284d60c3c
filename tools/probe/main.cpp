// SPDX-License-Identifier: Apache-2.0
// drvshim-probe: what this machine's CUDA driver really is and supports, as
// text (default) or JSON (--json; schema in docs/probe.md).
//
// Exit codes: 0 the probe ran (an "unsupported" check is information, not
// failure); 2 no usable driver could be loaded (absent, stub, too old);
// 3 the driver loaded but has no device; 1 bad arguments or an unexpected error
// (the JSON then says which: a top-level or per-device "error" object).
#include <fcntl.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <drvshim/drvshim.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <charconv>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdio>
#include <cstring>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "p2p_measure.hpp"
#include "probe_checks.hpp"
#include "probe_json.hpp"
#include "probe_text.hpp"

using nlohmann::ordered_json;
using namespace drvshim_probe;

namespace {

constexpr int kExitOk = 0;
constexpr int kExitUnexpected = 1;
constexpr int kExitNoDriver = 2;
constexpr int kExitNoDevice = 3;

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

// Prints `j` as the user asked: JSON, or text rendered from it. False (with why on stderr)
// when the report could not be written (standard output full or gone).
bool emit(ordered_json& j, bool json) {
  make_utf8_safe(j);
  if (json) {
    std::printf("%s\n", j.dump(2).c_str());
  } else {
    print_text(j);
  }
  if (std::fflush(stdout) != 0 || std::ferror(stdout) != 0) {
    // A reader that stopped reading (`| head -1`) wanted no more: not a failure to report.
    if (errno == EPIPE) return true;
    std::fprintf(stderr, "drvshim-probe: writing the report to standard output failed: %s\n", std::strerror(errno));
    return false;
  }
  return true;
}

// A closed standard output would hand its number to the next file opened (the trace file,
// a driver's), and the report would be written into that file: refused before anything opens.
bool stdout_is_open() { return ::fcntl(STDOUT_FILENO, F_GETFD) != -1 || errno != EBADF; }

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
      (void)emit(j, true);
    }
    return kExitUnexpected;
  };
  // A closed pipe is a write error (EPIPE, handled where the report is written), not a kill.
  (void)std::signal(SIGPIPE, SIG_IGN);
  if (!stdout_is_open()) {
    std::fprintf(stderr, "drvshim-probe: standard output is closed: there is nowhere to write the report\n");
    return kExitUnexpected;
  }
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
  if (app.count("--device") > 0) {  // also "--device ''": an empty ordinal is refused, not "every device"
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
    j["loader"] = {
        {"status", "stub"}, {"path", e.path()}, {"requested", e.path()}, {"message", e.what()}, {"hint", e.hint()}};
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
      exit_code = e.code() == 100                                ? kExitNoDevice
                  : e.kind() == drvshim::ErrorKind::stub_library ? kExitNoDriver
                                                                 : kExitUnexpected;
      // Exit code 1 always comes with the step that failed (docs/probe.md).
      if (exit_code == kExitUnexpected) j["error"] = error_json("cuInit", e);
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
                    {"detail", "--device " + std::to_string(only_device) + ": the driver reports " +
                                   std::to_string(count) + " device(s), ordinals 0 to " + std::to_string(count - 1)}};
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
            {"pageable_memory_access_uses_host_page_tables",
             attribute_json(hm.pageable_memory_access_uses_host_page_tables)},
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
            } else {
              // A failed run: "bandwidth" stays the array docs/probe.md promises (empty), and the
              // failure is the device's error, in the JSON, the text and the exit code.
              ordered_json failure = std::move(d["bandwidth"]);
              d["bandwidth"] = ordered_json::array();
              d["error"] = {{"step", "bandwidth"}, {"detail", failure.value("detail", std::string("failed"))}};
              if (failure.contains("result")) d["error"]["result"] = failure["result"];
              exit_code = kExitUnexpected;
            }
          }
          step = "release primary context";
        }
        step = "primary context state";
        d["primary_context"] = {{"before", state_json(before)},
                                {"after", state_json(dev.primary_context_state())},
                                {"activated_by_another_component", before.active}};
        std::string verdict = hm.verdict();
        if (d["checks"]["host_registration"]["status"] == "failed")
          verdict += "; but the live registration check failed";
        if (d["checks"]["mapped_allocation"]["status"] == "failed")
          verdict += "; but the live mapped-memory check failed";
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
  if (!emit(j, json)) return kExitUnexpected;
  return exit_code;
}
