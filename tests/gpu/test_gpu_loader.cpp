// The loader against the real driver: the whole table resolves, cuInit runs.
#include <cstdio>

#include "gpu_env.hpp"

namespace {

TEST(GpuLoader, RealDriverResolvesTheTableAndInitialises) {
  DRVSHIM_REQUIRE_GPU(drv);
  std::printf("[ info     ] library %s -> %s\n", drv.requested_path().c_str(), drv.loaded_path().c_str());
  std::printf("[ info     ] driver version %d, resolver %s, %zu/%zu functions resolved\n", drv.version(),
              drv.resolver().c_str(), drv.functions_resolved(), drv.functions_total());
  for (const auto& m : drv.missing_functions()) {
    std::printf("[ info     ] missing %s %s (ABI %d): %s\n", m.required ? "required" : "optional", m.name.c_str(),
                m.version, m.reason.c_str());
  }
  std::printf("[ info     ] cuInit took %.3f ms\n", static_cast<double>(drv.init_duration_ns()) / 1e6);
  EXPECT_EQ(drv.resolver(), "cuGetProcAddress_v2");
  EXPECT_GE(drv.version(), 12000);
  EXPECT_TRUE(drv.initialized());
  for (const auto& m : drv.missing_functions()) EXPECT_FALSE(m.required) << m.name;
  EXPECT_EQ(drv.functions_resolved(), drv.functions_total()) << "a CUDA 13 driver provides every function drvshim lists";
}

TEST(GpuLoader, DevicesReportIdentityAndHostMapping) {
  DRVSHIM_REQUIRE_GPU(drv);
  for (const auto& dev : drv.devices()) {
    const auto cc = dev.compute_capability();
    const auto mapping = dev.host_mapping();
    std::printf("[ info     ] device %d: %s, cc %d.%d, %d SMs, %zu bytes, %s, %s\n", dev.ordinal(), dev.name().c_str(),
                cc.major, cc.minor, dev.sm_count(), dev.total_memory(), dev.pci_bus_id().c_str(),
                dev.uuid_string().c_str());
    std::printf("[ info     ] device %d host mapping: %s\n", dev.ordinal(), mapping.verdict().c_str());
    EXPECT_FALSE(dev.name().empty());
    EXPECT_GT(dev.sm_count(), 0);
    EXPECT_GT(dev.total_memory(), 0u);
    EXPECT_EQ(dev.uuid_string().rfind("GPU-", 0), 0u);
    EXPECT_TRUE(mapping.can_map_host_memory.has_value());
  }
}

}  // namespace
