// drvshim-probe: what this machine's CUDA driver really is and supports.
//
// Exit codes: 0 the probe ran; 2 no usable driver could be loaded (absent,
// stub, too old); 3 the driver loaded but has no device; 1 unexpected error.
#include <drvshim/drvshim.hpp>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace {

constexpr int kExitOk = 0;
constexpr int kExitUnexpected = 1;
constexpr int kExitNoDriver = 2;
constexpr int kExitNoDevice = 3;

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

void usage() {
  std::printf(
      "usage: drvshim-probe [--help]\n"
      "Loads the CUDA driver the way libdrvshim does (libcuda.so.1, or DRVSHIM_LIBCUDA),\n"
      "initialises it explicitly and reports the driver and its devices.\n"
      "Exit codes: 0 ran, 2 no usable driver, 3 no device, 1 unexpected error.\n");
}

}  // namespace

int main(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0) {
      usage();
      return kExitOk;
    }
    std::fprintf(stderr, "drvshim-probe: unknown argument \"%s\" (try --help)\n", argv[i]);
    return kExitUnexpected;
  }

  const auto lib = drvshim::library_version();
  std::printf("drvshim-probe %s (driver table written against CUDA %s)\n\n", lib.string,
              version_text(lib.cuda_header_version).c_str());

  drvshim::Driver drv = [&]() -> drvshim::Driver {
    try {
      return drvshim::Driver::load();
    } catch (const drvshim::DriverNotFoundError& e) {
      std::printf("Loader\n  status           no CUDA driver found\n");
      for (std::size_t i = 0; i < e.paths_tried().size(); ++i) {
        std::printf("  tried            %s\n                   %s\n", e.paths_tried()[i].c_str(),
                    i < e.dl_errors().size() ? e.dl_errors()[i].c_str() : "");
      }
      std::printf("  hint             %s\n", e.hint().c_str());
      std::exit(kExitNoDriver);
    } catch (const drvshim::StubLibraryError& e) {
      std::printf("Loader\n  status           stub library\n  library          %s\n  hint             %s\n",
                  e.path().c_str(), e.hint().c_str());
      std::exit(kExitNoDriver);
    } catch (const drvshim::DriverTooOldError& e) {
      std::printf("Loader\n  status           driver too old\n  detail           %s\n", e.what());
      std::exit(kExitNoDriver);
    }
  }();

  std::printf("Loader\n");
  std::printf("  library          %s -> %s\n", drv.requested_path().c_str(), drv.loaded_path().c_str());
  std::printf("  driver version   %s (%d)\n", version_text(drv.version()).c_str(), drv.version());
  std::printf("  resolver         %s\n", drv.resolver().c_str());
  std::printf("  functions        %zu/%zu resolved\n", drv.functions_resolved(), drv.functions_total());
  for (const auto& m : drv.missing_functions()) {
    std::printf("  missing          %s (ABI %d, %s): %s\n", m.name.c_str(), m.version,
                m.required ? "required" : "optional", m.reason.c_str());
  }

  try {
    drv.init();
  } catch (const drvshim::CudaError& e) {
    std::printf("\nInit\n  cuInit           failed: %s (%d)\n  hint             %s\n", e.code_name(), e.code(),
                e.hint().c_str());
    return e.code() == 100 ? kExitNoDevice : kExitUnexpected;
  } catch (const drvshim::Error& e) {
    std::printf("\nInit\n  failed           %s\n", e.what());
    return e.kind() == drvshim::ErrorKind::stub_library ? kExitNoDriver : kExitUnexpected;
  }
  std::printf("\nInit\n  cuInit           %.3f ms\n", static_cast<double>(drv.init_duration_ns()) / 1e6);

  try {
    const int count = drv.device_count();
    std::printf("\nDevices            %d\n", count);
    for (const auto& dev : drv.devices()) {
      const auto cc = dev.compute_capability();
      std::printf("  [%d] %s  cc %d.%d  %d SMs  %.1f GiB  %s\n", dev.ordinal(), dev.name().c_str(), cc.major,
                  cc.minor, dev.sm_count(), static_cast<double>(dev.total_memory()) / (1024.0 * 1024.0 * 1024.0),
                  dev.pci_bus_id().c_str());
      const auto state = dev.primary_context_state();
      std::printf("      primary ctx  %s, flags %s\n", state.active ? "active" : "inactive",
                  drvshim::to_string(state.flags).c_str());
      std::printf("      host mapping %s\n", dev.host_mapping().verdict().c_str());
    }
    return count == 0 ? kExitNoDevice : kExitOk;
  } catch (const drvshim::Error& e) {
    std::printf("\nDevices\n  failed           %s\n", e.what());
    return kExitUnexpected;
  }
}
