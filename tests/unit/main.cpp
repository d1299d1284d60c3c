// SPDX-License-Identifier: Apache-2.0
// Unit tests against the fake driver. drvshim loads the fake through its real
// loader (DRVSHIM_LIBCUDA); ctest sets the variable, and main() sets it when
// the binary is run by hand.
#include <gtest/gtest.h>

#include <cstdlib>

int main(int argc, char** argv) {
  setenv("DRVSHIM_LIBCUDA", DRVSHIM_TEST_FAKE_PATH, 0);
  ::testing::InitGoogleTest(&argc, argv);
  // Death tests and fork tests must not fork a process with live threads.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
