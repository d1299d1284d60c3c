// SPDX-License-Identifier: Apache-2.0
// The contract cases of tests/unit/contract_cases.hpp against the real driver.
#include <cstdio>

#include "contract_cases.hpp"
#include "gpu_env.hpp"

namespace {

TEST(GpuContract, RealDriverAgreesWithTheFake) {
  DRVSHIM_REQUIRE_GPU(drv);
  for (const auto& c : drvshim_test::run_contract_cases(drv)) {
    std::printf("[ contract ] %-55s observed=%-30s expected=%s\n", c.name.c_str(), c.observed.c_str(),
                c.expected.c_str());
    EXPECT_EQ(c.observed, c.expected) << c.name;
  }
}

}  // namespace
