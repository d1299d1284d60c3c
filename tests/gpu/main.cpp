// GPU tests: the real libcuda.so.1 (or DRVSHIM_LIBCUDA). Every test skips with
// the reason when no driver or device is present.
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  return RUN_ALL_TESTS();
}
