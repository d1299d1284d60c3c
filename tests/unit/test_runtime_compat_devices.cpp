// runtime_compat with two devices (the fake's dual profile): the Runtime's
// per-thread current device, one primary context per device (activated by the
// first call that needs it on that device), allocations and streams landing
// on the selected device, default-kind copies between the devices, and two
// threads each on another device. Kept apart from test_runtime_compat.cpp
// while runtime_compat is rewritten: these are behaviours of the Runtime API,
// whatever the implementation. Every scenario runs on threads of its own (the
// Runtime leaves contexts current; the fixture checks the main thread).
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
    EXPECT_EQ(rt::cudaGetDevice(&device), rt::Error::success);
    EXPECT_EQ(device, 0) << "a thread starts on device 0";
    EXPECT_EQ(rt::cudaSetDevice(1), rt::Error::success);
    EXPECT_EQ(rt::cudaGetDevice(&device), rt::Error::success);
    EXPECT_EQ(device, 1);
    std::thread other([] {
      int d = -1;
      EXPECT_EQ(rt::cudaGetDevice(&d), rt::Error::success);
      EXPECT_EQ(d, 0) << "another thread's choice does not leak here";
    });
    other.join();
    EXPECT_EQ(rt::cudaSetDevice(2), rt::Error::invalid_device);
    EXPECT_EQ(rt::cudaGetDevice(&device), rt::Error::success);
    EXPECT_EQ(device, 1) << "a refused cudaSetDevice changes nothing";
  });
}

TEST_F(RuntimeCompatDevices, APrimaryContextPerDeviceActivatedByItsFirstUse) {
  on_thread([] {
    EXPECT_EQ(rt::cudaSetDevice(1), rt::Error::success);
    EXPECT_EQ(drvshim_fake_primary_active(1), 1);
    EXPECT_EQ(drvshim_fake_primary_active(0), 0) << "device 0 was never used";
    void* p = nullptr;
    EXPECT_EQ(rt::cudaMalloc(&p, 4096), rt::Error::success);
    EXPECT_EQ(drvshim_fake_primary_active(0), 0);
    EXPECT_EQ(ordinal_of(p), 1) << "the allocation is on the selected device";
    EXPECT_EQ(rt::cudaSetDevice(0), rt::Error::success);
    EXPECT_EQ(drvshim_fake_primary_active(0), 1);
    void* q = nullptr;
    EXPECT_EQ(rt::cudaMalloc(&q, 4096), rt::Error::success);
    EXPECT_EQ(ordinal_of(q), 0);
    EXPECT_EQ(rt::cudaFree(p), rt::Error::success) << "freeing device 1's memory while device 0 is current";
    EXPECT_EQ(rt::cudaFree(q), rt::Error::success);
  });
}

TEST_F(RuntimeCompatDevices, DefaultKindCopiesBetweenTheDevices) {
  on_thread([] {
    constexpr std::size_t n = 1024;
    std::vector<int> values(n), back(n, 0);
    for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<int>(i * 7);
    void* on0 = nullptr;
    void* on1 = nullptr;
    ASSERT_EQ(rt::cudaSetDevice(0), rt::Error::success);
    ASSERT_EQ(rt::cudaMalloc(&on0, n * sizeof(int)), rt::Error::success);
    ASSERT_EQ(rt::cudaMemcpy(on0, values.data(), n * sizeof(int), rt::MemcpyKind::host_to_device), rt::Error::success);
    ASSERT_EQ(rt::cudaSetDevice(1), rt::Error::success);
    ASSERT_EQ(rt::cudaMalloc(&on1, n * sizeof(int)), rt::Error::success);
    EXPECT_EQ(rt::cudaMemcpy(on1, on0, n * sizeof(int), rt::MemcpyKind::default_), rt::Error::success)
        << rt::last_error_detail();
    EXPECT_EQ(rt::cudaMemcpy(back.data(), on1, n * sizeof(int), rt::MemcpyKind::default_), rt::Error::success)
        << rt::last_error_detail();
    EXPECT_EQ(back, values);
    EXPECT_EQ(rt::cudaFree(on0), rt::Error::success);
    EXPECT_EQ(rt::cudaFree(on1), rt::Error::success);
  });
}

TEST_F(RuntimeCompatDevices, AStreamBelongsToTheDeviceCurrentAtItsCreation) {
  on_thread([] {
    ASSERT_EQ(rt::cudaSetDevice(1), rt::Error::success);
    void* stream = nullptr;
    ASSERT_EQ(rt::cudaStreamCreate(&stream), rt::Error::success);
    void* on1 = nullptr;
    ASSERT_EQ(rt::cudaMalloc(&on1, 4096), rt::Error::success);
    std::vector<unsigned char> host(4096, 3);
    ASSERT_EQ(rt::cudaSetDevice(0), rt::Error::success);
    // Device 0 is current; the stream and the memory are device 1's.
    EXPECT_EQ(rt::cudaMemcpyAsync(on1, host.data(), host.size(), rt::MemcpyKind::host_to_device, stream),
              rt::Error::success)
        << rt::last_error_detail();
    EXPECT_EQ(rt::cudaStreamSynchronize(stream), rt::Error::success) << rt::last_error_detail();
    EXPECT_EQ(rt::cudaStreamDestroy(stream), rt::Error::success);
    EXPECT_EQ(rt::cudaFree(on1), rt::Error::success);
  });
}

TEST_F(RuntimeCompatDevices, TwoThreadsEachOnAnotherDevice) {
  auto work = [](int device) {
    if (rt::cudaSetDevice(device) != rt::Error::success) ADD_FAILURE() << "cudaSetDevice(" << device << ")";
    for (int r = 0; r < 50; ++r) {
      void* p = nullptr;
      std::vector<int> v(256, device * 1000 + r), back(256, -1);
      if (rt::cudaMalloc(&p, 1024) != rt::Error::success ||
          rt::cudaMemcpy(p, v.data(), 1024, rt::MemcpyKind::host_to_device) != rt::Error::success ||
          rt::cudaMemcpy(back.data(), p, 1024, rt::MemcpyKind::device_to_host) != rt::Error::success ||
          rt::cudaFree(p) != rt::Error::success) {
        ADD_FAILURE() << "device " << device << " round " << r << ": " << rt::last_error_detail();
        return;
      }
      if (back != v) ADD_FAILURE() << "device " << device << " round " << r << ": wrong data";
      int current = -1;
      (void)rt::cudaGetDevice(&current);
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
    ASSERT_EQ(rt::cudaSetDevice(0), rt::Error::success);
    ASSERT_EQ(rt::cudaSetDevice(1), rt::Error::success);
    EXPECT_EQ(rt::cudaDeviceReset(), rt::Error::success);
    EXPECT_EQ(drvshim_fake_primary_active(1), 0) << "the current device's primary context is reset";
    EXPECT_EQ(drvshim_fake_primary_active(0), 1) << "the other device's is not";
  });
}

}  // namespace
