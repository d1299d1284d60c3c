// SPDX-License-Identifier: Apache-2.0
#pragma once
// The fake driver's own entry points, for tests that play a program making
// Driver-API calls beside drvshim: looked up through cuGetProcAddress as a
// program loading the driver itself would, at the ABI the test calls.
#include <cuda.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

extern "C" CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* status);

namespace drvshim_test {

// At 12.0 "cuCtxCreate" is cuCtxCreate_v3 (execution affinity): the
// three-argument form the tests call is 3.2's.
template <class F>
F raw(const char* name) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult q{};
  const int version = std::string(name) == "cuCtxCreate" ? 3020 : 12000;
  if (cuGetProcAddress_v2(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &q) == CUDA_SUCCESS && p != nullptr) {
    return reinterpret_cast<F>(p);
  }
  // An 11.x driver has only the four-argument form.
  using Old = CUresult (*)(const char*, void**, int, cuuint64_t);
  if (auto old = reinterpret_cast<Old>(dlsym(RTLD_DEFAULT, "cuGetProcAddress"));
      old != nullptr && old(name, &p, 11000, CU_GET_PROC_ADDRESS_DEFAULT) == CUDA_SUCCESS && p != nullptr) {
    return reinterpret_cast<F>(p);
  }
  ADD_FAILURE() << "the fake has no " << name;
  std::abort();
}

}  // namespace drvshim_test
