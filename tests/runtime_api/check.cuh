// SPDX-License-Identifier: Apache-2.0
// The error check the Runtime-API test programs share: a failing call prints
// its text, the error's name and description ("failed:" fails the ctest), and
// main returns 1.
#pragma once
#include <cstdio>

#define CHECK(call)                                                                                      \
  do {                                                                                                   \
    const cudaError_t e_ = (call);                                                                       \
    if (e_ != cudaSuccess) {                                                                             \
      std::fprintf(stderr, "%s failed: %s (%s)\n", #call, cudaGetErrorName(e_), cudaGetErrorString(e_)); \
      return 1;                                                                                          \
    }                                                                                                    \
  } while (0)
