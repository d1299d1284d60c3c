// SPDX-License-Identifier: Apache-2.0
// The CUDA Runtime interop tests' main (each scenario forks its own child).
#include <gtest/gtest.h>

int main(int argc, char** argv) {
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
