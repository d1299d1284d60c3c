// SPDX-License-Identifier: Apache-2.0
// runtime_compat with two devices (the fake's dual profile): the Runtime's
// per-thread current device, one primary context per device (activated by the
// first call that needs it on that device), allocations and streams landing
// on the selected device, default-kind copies between the devices, and two
// threads each on another device. Kept apart from test_runtime_compat.cpp
// while runtime_compat is rewritten: these are behaviours of the Runtime API,
// whatever the implementation. Every scenario runs on threads of its own (the
// Runtime leaves contexts current; the fixture checks the main thread).
#include <cuda_runtime_api.h>
#include <drvshim/drvshim.hpp>
#include <drvshim/runtime_compat.hpp>

#include <thread>
#include <vector>

#include "fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

class RuntimeCompatDevices : public FakeDriverTest {
 protected:
  const char* profile() const override { return "dual"; }
  void SetUp() override {
    FakeDriverTest::SetUp();
    rt::shutdown();
    rt::set_policy(rt::Policy::lazy);
  }
  void TearDown() override {
    rt::shutdown();
    FakeDriverTest::TearDown();
  }
  template <class F>
  static void on_thread(F&& f) {
    std::thread t(std::forward<F>(f));
    t.join();
  }
  // The device an address belongs to, asked of the driver (not of runtime_compat).
  static int ordinal_of(const void* p) {
    auto drv = load_and_init();
    return inspect_pointer(drv, p).device_ordinal;
  }
};

TEST_F(RuntimeCompatDevices, EachThreadHasItsOwnCurrentDevice) {
  on_thread([] {
    int device = -1;
    EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
    EXPECT_EQ(device, 0) << "a thread starts on device 0";
    EXPECT_EQ(cudaSetDevice(1), cudaSuccess);
    EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
    EXPECT_EQ(device, 1);
    std::thread other([] {
      int d = -1;
      EXPECT_EQ(cudaGetDevice(&d), cudaSuccess);
      EXPECT_EQ(d, 0) << "another thread's choice does not leak here";
    });
    other.join();
    EXPECT_EQ(cudaSetDevice(2), cudaErrorInvalidDevice);
    EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
    EXPECT_EQ(device, 1) << "a refused cudaSetDevice changes nothing";
  });
}

TEST_F(RuntimeCompatDevices, APrimaryContextPerDeviceActivatedByItsFirstUse) {
  on_thread([] {
    EXPECT_EQ(cudaSetDevice(1), cudaSuccess);
    EXPECT_EQ(drvshim_fake_primary_active(1), 1);
    EXPECT_EQ(drvshim_fake_primary_active(0), 0) << "device 0 was never used";
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
    EXPECT_EQ(drvshim_fake_primary_active(0), 0);
    EXPECT_EQ(ordinal_of(p), 1) << "the allocation is on the selected device";
    EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
    EXPECT_EQ(drvshim_fake_primary_active(0), 1);
    void* q = nullptr;
    EXPECT_EQ(cudaMalloc(&q, 4096), cudaSuccess);
    EXPECT_EQ(ordinal_of(q), 0);
    EXPECT_EQ(cudaFree(p), cudaSuccess) << "freeing device 1's memory while device 0 is current";
    EXPECT_EQ(cudaFree(q), cudaSuccess);
  });
}

TEST_F(RuntimeCompatDevices, DefaultKindCopiesBetweenTheDevices) {
  on_thread([] {
    constexpr std::size_t n = 1024;
    std::vector<int> values(n), back(n, 0);
    for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<int>(i * 7);
    void* on0 = nullptr;
    void* on1 = nullptr;
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&on0, n * sizeof(int)), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(on0, values.data(), n * sizeof(int), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&on1, n * sizeof(int)), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(on1, on0, n * sizeof(int), cudaMemcpyDefault), cudaSuccess) << rt::last_error_detail();
    EXPECT_EQ(cudaMemcpy(back.data(), on1, n * sizeof(int), cudaMemcpyDefault), cudaSuccess) << rt::last_error_detail();
    EXPECT_EQ(back, values);
    EXPECT_EQ(cudaFree(on0), cudaSuccess);
    EXPECT_EQ(cudaFree(on1), cudaSuccess);
  });
}

TEST_F(RuntimeCompatDevices, AStreamBelongsToTheDeviceCurrentAtItsCreation) {
  on_thread([] {
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    cudaStream_t stream = nullptr;
    ASSERT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    void* on1 = nullptr;
    ASSERT_EQ(cudaMalloc(&on1, 4096), cudaSuccess);
    std::vector<unsigned char> host(4096, 3);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    // Device 0 is current; the stream and the memory are device 1's.
    EXPECT_EQ(cudaMemcpyAsync(on1, host.data(), host.size(), cudaMemcpyHostToDevice, stream), cudaSuccess)
        << rt::last_error_detail();
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess) << rt::last_error_detail();
    EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
    EXPECT_EQ(cudaFree(on1), cudaSuccess);
  });
}

TEST_F(RuntimeCompatDevices, TwoThreadsEachOnAnotherDevice) {
  auto work = [](int device) {
    if (cudaSetDevice(device) != cudaSuccess) ADD_FAILURE() << "cudaSetDevice(" << device << ")";
    for (int r = 0; r < 50; ++r) {
      void* p = nullptr;
      std::vector<int> v(256, device * 1000 + r), back(256, -1);
      if (cudaMalloc(&p, 1024) != cudaSuccess || cudaMemcpy(p, v.data(), 1024, cudaMemcpyHostToDevice) != cudaSuccess ||
          cudaMemcpy(back.data(), p, 1024, cudaMemcpyDeviceToHost) != cudaSuccess || cudaFree(p) != cudaSuccess) {
        ADD_FAILURE() << "device " << device << " round " << r << ": " << rt::last_error_detail();
        return;
      }
      if (back != v) ADD_FAILURE() << "device " << device << " round " << r << ": wrong data";
      int current = -1;
      (void)cudaGetDevice(&current);
      if (current != device) ADD_FAILURE() << "the thread's device changed under it";
    }
  };
  std::thread t0(work, 0);
  std::thread t1(work, 1);
  t0.join();
  t1.join();
  EXPECT_EQ(drvshim_fake_primary_active(0), 1);
  EXPECT_EQ(drvshim_fake_primary_active(1), 1);
}

TEST_F(RuntimeCompatDevices, ResettingOneDeviceLeavesTheOtherAlone) {
  on_thread([] {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    EXPECT_EQ(drvshim_fake_primary_active(1), 0) << "the current device's primary context is reset";
    EXPECT_EQ(drvshim_fake_primary_active(0), 1) << "the other device's is not";
  });
}

}  // namespace
