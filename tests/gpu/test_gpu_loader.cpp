// SPDX-License-Identifier: Apache-2.0
// The loader against the real driver: the whole table resolves, cuInit runs.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>

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
  EXPECT_EQ(drv.functions_resolved(), drv.functions_total())
      << "a CUDA 13 driver provides every function drvshim lists";
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

// A child forked from a process that initialised CUDA cannot initialise it
// again: on the real driver cuInit answers CUDA_ERROR_NOT_INITIALIZED there,
// and drvshim keeps that code and says why (fork after init; start the child
// with exec). The fake models it; this is the contract case on the real driver.
TEST(GpuLoader, AChildForkedAfterInitIsToldWhyCuInitFails) {
  DRVSHIM_REQUIRE_GPU(drv);
  (void)drv;
  std::fflush(nullptr);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    int code = 0;
    try {
      auto fresh = drvshim::Driver::load();
      fresh.init();
      code = 1;
    } catch (const drvshim::CudaError& e) {
      std::printf("[ child    ] %s\n", e.what());
      if (e.code() != 3 /* CUDA_ERROR_NOT_INITIALIZED */)
        code = 2;
      else if (std::string(e.what()).find("forked") == std::string::npos)
        code = 3;
    } catch (const drvshim::Error& e) {
      std::printf("[ child    ] other error: %s\n", e.what());
      code = 4;
    }
    std::fflush(nullptr);
    _exit(code);
  }
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "1: init worked in the child, 2: code lost, 3: message, 4: another error kind";
}
