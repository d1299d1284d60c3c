// SPDX-License-Identifier: Apache-2.0
// GPU tests: the real libcuda.so.1 (or DRVSHIM_LIBCUDA). Every test skips with
// the reason when no driver or device is present.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <string>

namespace drvshim_gpu {
int illegal_address_child();
int poison_recovery_child(const std::string& how);
}  // namespace drvshim_gpu

int main(int argc, char** argv) {
  // The illegal-address scenario poisons its context, so it runs in a child process of its own.
  if (argc > 1 && std::strcmp(argv[1], "--drvshim-illegal-address-child") == 0)
    return drvshim_gpu::illegal_address_child();
  constexpr const char* kRecovery = "--drvshim-poison-recovery-child=";
  if (argc > 1 && std::strncmp(argv[1], kRecovery, std::strlen(kRecovery)) == 0) {
    std::setvbuf(stdout, nullptr, _IOLBF, 0);  // its lines reach the parent even if it crashes
    return drvshim_gpu::poison_recovery_child(argv[1] + std::strlen(kRecovery));
  }
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
