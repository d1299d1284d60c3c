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

#include <atomic>
#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "fixture.hpp"
#include "raw_driver.hpp"
#include "rt_fixture.hpp"

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

namespace {

// A fault on device 1 that a peer copy into healthy device 0 is the first
// drvshim call to see: the sticky error is device 1's (the driver answers it
// there), and device 0 keeps working.
TEST_F(RuntimeCompatDevices, APeerCopyChargesTheSourcesFaultToTheSourceOnly) {
  on_thread([] {
    void* a0 = nullptr;
    void* b1 = nullptr;
    cudaStream_t s1 = nullptr;
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&a0, 256), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&b1, 256), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
    drvshim_fake_stream_fail(s1, CUDA_ERROR_ILLEGAL_ADDRESS);
    // Another library asks the driver first: drvshim has not seen the fault.
    static const auto sync = raw<CUresult (*)(CUstream)>("cuStreamSynchronize");
    EXPECT_EQ(sync(reinterpret_cast<CUstream>(s1)), CUDA_ERROR_ILLEGAL_ADDRESS);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    EXPECT_EQ(cudaMemcpyPeer(a0, 0, b1, 1, 256), cudaErrorIllegalAddress);
    EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 64), cudaSuccess) << "device 0 is healthy";
    EXPECT_EQ(cudaMemset(a0, 0, 256), cudaSuccess);
    EXPECT_EQ(cudaFree(p), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    EXPECT_EQ(cudaMalloc(&p, 64), cudaErrorIllegalAddress) << "device 1 faulted";
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    EXPECT_EQ(cudaFree(a0), cudaSuccess);
  });
}

// Two devices' events: the driver's CUDA_ERROR_INVALID_HANDLE, which cudart
// answers as cudaErrorInvalidResourceHandle; a P2P attribute no enumerator
// names is refused, not read as another attribute.
TEST_F(RuntimeCompatDevices, EventsOfTwoDevicesAndUnknownLinkAttributesAreRefused) {
  on_thread([] {
    cudaEvent_t e0 = nullptr;
    cudaEvent_t e1 = nullptr;
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&e0), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(e0, nullptr), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&e1), cudaSuccess);
    ASSERT_EQ(cudaEventRecord(e1, nullptr), cudaSuccess);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    float ms = -1.0f;
    EXPECT_EQ(cudaEventElapsedTime(&ms, e0, e1), cudaErrorInvalidResourceHandle);
    EXPECT_NE(rt::last_error_detail().find("same device"), std::string::npos) << rt::last_error_detail();
    EXPECT_EQ(cudaEventDestroy(e1), cudaSuccess);
    EXPECT_EQ(cudaEventDestroy(e0), cudaSuccess);
    int value = -1;
    EXPECT_EQ(cudaDeviceGetP2PAttribute(&value, static_cast<cudaDeviceP2PAttr>(7), 0, 1), cudaErrorInvalidValue);
    EXPECT_EQ(value, -1);
    EXPECT_NE(rt::last_error_detail().find("number 7"), std::string::npos) << rt::last_error_detail();
    EXPECT_STREQ(peer_attribute_name(static_cast<PeerAttribute>(99)), "unknown");
  });
}

// cudaMallocAsync on device 1's stream while device 0 is current is device
// 1's memory: resetting device 0 leaves it alive, resetting device 1 frees it.
TEST_F(RuntimeCompatDevices, StreamOrderedMemoryBelongsToTheStreamsDevice) {
  on_thread([] {
    cudaStream_t s1 = nullptr;
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    void* p = nullptr;
    ASSERT_EQ(cudaMallocAsync(&p, 256, s1), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s1), cudaSuccess);
    EXPECT_EQ(ordinal_of(p), 1);
    const int live = drvshim_fake_live_device_allocations();
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);  // device 0
    EXPECT_EQ(drvshim_fake_live_device_allocations(), live) << "device 1's buffer survives device 0's reset";
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    EXPECT_EQ(cudaFreeAsync(p, s1), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s1), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  });
}

// cudaDeviceEnablePeerAccess racing cudaDeviceReset of the peer: the enable
// runs after the reset dropped the device's accesses and before it released
// the context (the fake's hook at the reset's cuStreamDestroy puts it there).
// The release ends that access in the driver; the runtime must not answer
// "already enabled" for it afterwards, nor "disabled" an access it lost, nor
// name the destroyed context to the driver at a later reset or the shutdown
// (the fixture counts such misuse).
TEST_F(RuntimeCompatDevices, AnEnableRacingTheResetOfThePeerLeavesNoStaleOwner) {
  enum class Then { enable, disable, reset, shutdown };
  for (const Then then : {Then::enable, Then::disable, Then::reset, Then::shutdown}) {
    SCOPED_TRACE(static_cast<int>(then));
    on_thread([then] {
      cudaStream_t s1 = nullptr;
      ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
      ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // device 0's context
      ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
      ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);  // the reset destroys it after dropping the accesses
      std::atomic<int> raced{-1};
      drvshim_fake_before_call(
          "cuStreamDestroy",
          [](void* data) {
            std::thread([data] {
              cudaError_t e = cudaSetDevice(0);
              if (e == cudaSuccess) e = cudaDeviceEnablePeerAccess(1, 0);
              static_cast<std::atomic<int>*>(data)->store(e);
            }).join();
          },
          &raced);
      ASSERT_EQ(cudaDeviceReset(), cudaSuccess);  // device 1
      ASSERT_EQ(raced.load(), cudaSuccess) << "the enable ran inside the reset";
      EXPECT_EQ(drvshim_fake_primary_active(1), 0) << "the reset ended device 1's context";
      EXPECT_EQ(drvshim_fake_peer_access_count(), 0) << "and the access with it";
      ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
      const auto disables = drvshim_fake_call_count("cuCtxDisablePeerAccess");
      switch (then) {
        case Then::enable:
          EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess) << rt::last_error_detail();
          EXPECT_EQ(drvshim_fake_peer_access_count(), 1);
          EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
          EXPECT_EQ(cudaGetLastError(), cudaErrorPeerAccessAlreadyEnabled);
          EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaSuccess);
          break;
        case Then::disable:
          EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
          EXPECT_EQ(cudaGetLastError(), cudaErrorPeerAccessNotEnabled);
          EXPECT_EQ(drvshim_fake_call_count("cuCtxDisablePeerAccess"), disables);
          break;
        case Then::reset:
          EXPECT_EQ(cudaDeviceReset(), cudaSuccess);  // device 0
          EXPECT_EQ(drvshim_fake_call_count("cuCtxDisablePeerAccess"), disables) << "the stale owner is abandoned";
          break;
        case Then::shutdown:
          rt::shutdown();
          EXPECT_EQ(drvshim_fake_call_count("cuCtxDisablePeerAccess"), disables) << "the stale owner is abandoned";
          break;
      }
      EXPECT_EQ(drvshim_fake_peer_access_count(), 0);
    });
    rt::shutdown();
  }
}

void fill_cpu(const drvshim_fake_launch* l, void** args) {
  auto* p = *static_cast<float* const*>(args[0]);
  for (unsigned i = 0; i < l->grid[0] * l->block[0]; ++i) p[i] = 4.0f;
}

// "A kernel launch will fail if it is issued to a stream that is not
// associated to the current device" (CUDA Programming Guide): device 1's
// stream with device 0 current is cudaErrorInvalidResourceHandle (the
// driver's answer for a function of one context on a stream of another);
// nothing runs, nothing is loaded on either device for it.
TEST_F(RuntimeCompatDevices, AKernelOnAStreamOfAnotherDeviceIsRefused) {
  drvshim_fake_register_kernel("rt_fill_other", &fill_cpu);
  Registered fatbin(FatbinBuilder().ptx(ptx_kernel("rt_fill_other", 1)).build());
  static const char stub = 0;
  fatbin.function(&stub, "rt_fill_other");
  fatbin.end();
  on_thread([] {
    cudaStream_t s1 = nullptr;
    float* p1 = nullptr;
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&p1), 64 * 4), cudaSuccess);
    ASSERT_EQ(cudaMemset(p1, 0, 64 * 4), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    void* args[] = {&p1};
    const auto launches = drvshim_fake_launch_count();
    EXPECT_EQ(cudaLaunchKernel(&stub, dim3(1), dim3(64), args, 0, s1), cudaErrorInvalidResourceHandle);
    EXPECT_NE(rt::last_error_detail().find("the stream belongs to device 1 and the current device is 0"),
              std::string::npos)
        << rt::last_error_detail();
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    cudaKernel_t kernel = nullptr;
    ASSERT_EQ(__cudaGetKernel(&kernel, &stub), cudaSuccess);
    EXPECT_EQ(__cudaLaunchKernel(kernel, dim3(1), dim3(64), args, 0, s1), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(drvshim_fake_launch_count(), launches) << "nothing ran";
    EXPECT_EQ(cudaStreamSynchronize(s1), cudaSuccess) << "the refusal is no sticky error";
    // With device 1 current the same launch runs there.
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    EXPECT_EQ(cudaLaunchKernel(&stub, dim3(1), dim3(64), args, 0, s1), cudaSuccess);
    std::vector<float> back(64, 0.0f);
    ASSERT_EQ(cudaMemcpy(back.data(), p1, 64 * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(back[63], 4.0f);
    EXPECT_EQ(cudaFree(p1), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s1), cudaSuccess);
  });
}

class RuntimeCompatThreeDevices : public RuntimeCompatDevices {
 protected:
  const char* profile() const override { return "trio"; }
};

// cudaMemcpyPeer is ordered after the current device's work too (cudart's
// documentation): with device 2 current and a copy into the source still
// queued there, the peer copy reads what that copy wrote.
TEST_F(RuntimeCompatThreeDevices, APeerCopyWaitsForTheCurrentDevicesWork) {
  on_thread([] {
    constexpr std::size_t n = 256;
    void* src0 = nullptr;
    void* dst1 = nullptr;
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&src0, n), cudaSuccess);
    ASSERT_EQ(cudaMemset(src0, 0x11, n), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dst1, n), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(2), cudaSuccess);
    cudaStream_t s2 = nullptr;
    ASSERT_EQ(cudaStreamCreate(&s2), cudaSuccess);
    drvshim_fake_stream_hold(s2, 1);
    std::vector<unsigned char> host(n, 0x77);
    ASSERT_EQ(cudaMemcpyAsync(src0, host.data(), n, cudaMemcpyHostToDevice, s2), cudaSuccess);
    std::thread release([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      drvshim_fake_stream_hold(s2, 0);
    });
    EXPECT_EQ(cudaMemcpyPeer(dst1, 1, src0, 0, n), cudaSuccess);
    release.join();
    std::vector<unsigned char> out(n, 0);
    ASSERT_EQ(cudaMemcpy(out.data(), dst1, n, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(out[0], 0x77) << "the peer copy ran before device 2's copy into its source";
    EXPECT_EQ(cudaStreamDestroy(s2), cudaSuccess);
    EXPECT_EQ(cudaFree(dst1), cudaSuccess);
    EXPECT_EQ(cudaFree(src0), cudaSuccess);
  });
}

// "A memory copy will succeed even if it is issued to a stream that is not
// associated to the current device" (CUDA Programming Guide): a peer copy
// from device 0 to device 1 on device 2's stream is queued there, as the same
// copy through cudaMemcpyAsync is.
TEST_F(RuntimeCompatThreeDevices, APeerCopyOnAThirdDevicesStreamIsQueuedThere) {
  on_thread([] {
    constexpr std::size_t n = 256;
    void* src0 = nullptr;
    void* dst1 = nullptr;
    cudaStream_t s2 = nullptr;
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&src0, n), cudaSuccess);
    ASSERT_EQ(cudaMemset(src0, 0x5a, n), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&dst1, n), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(2), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&s2), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    for (const bool peer : {true, false}) {
      SCOPED_TRACE(peer ? "cudaMemcpyPeerAsync" : "cudaMemcpyAsync");
      ASSERT_EQ(cudaMemset(dst1, 0, n), cudaSuccess);
      drvshim_fake_stream_hold(s2, 1);
      EXPECT_EQ(peer ? cudaMemcpyPeerAsync(dst1, 1, src0, 0, n, s2)
                     : cudaMemcpyAsync(dst1, src0, n, cudaMemcpyDeviceToDevice, s2),
                cudaSuccess)
          << rt::last_error_detail();
      EXPECT_EQ(cudaStreamQuery(s2), cudaErrorNotReady) << "queued on device 2's stream";
      drvshim_fake_stream_hold(s2, 0);
      EXPECT_EQ(cudaStreamSynchronize(s2), cudaSuccess);
      std::vector<unsigned char> out(n, 0);
      ASSERT_EQ(cudaMemcpy(out.data(), dst1, n, cudaMemcpyDeviceToHost), cudaSuccess);
      EXPECT_EQ(out[n - 1], 0x5a);
    }
    EXPECT_EQ(cudaStreamDestroy(s2), cudaSuccess);
    EXPECT_EQ(cudaFree(dst1), cudaSuccess);
    EXPECT_EQ(cudaFree(src0), cudaSuccess);
  });
}

}  // namespace
