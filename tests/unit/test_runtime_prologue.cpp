// SPDX-License-Identifier: Apache-2.0
// What cudart 13.0 does at the start of a call, before it looks at the
// arguments, as the conformance suite measured it on an H100: the thread's
// primary context is made current even for a call refused for its arguments;
// inside a host function the call is refused with cudaErrorNotPermitted
// whatever its arguments; after a fault the sticky error comes before the
// argument checks of the calls that answer it first. Some calls check one
// argument before all that (an output pointer, an enum), and the tests pin
// those orders too.
#include <cuda.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "in_child.hpp"
#include "raw_driver.hpp"
#include "rt_fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

CUcontext current() {
  static const auto get = raw<CUresult (*)(CUcontext*)>("cuCtxGetCurrent");
  CUcontext c = nullptr;
  EXPECT_EQ(get(&c), CUDA_SUCCESS);
  return c;
}

// A copy direction no enumerator names (7 is inside the enum's range of values,
// so passing it is defined behaviour).
const cudaMemcpyKind kBadKind = static_cast<cudaMemcpyKind>(7);

using RuntimePrologue = RuntimeCompatTest;

TEST_F(RuntimePrologue, ACallRefusedForItsArgumentsStillMakesThePrimaryContextCurrent) {
  on_thread([] {
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // the runtime set up on this thread
    const CUcontext primary = current();
    ASSERT_NE(primary, nullptr);
    // Each call on a thread of its own: nothing current before it.
    const auto fresh_thread = [](auto call, cudaError_t want, bool context_after, const char* what) {
      std::thread([&] {
        EXPECT_EQ(current(), nullptr);
        EXPECT_EQ(call(), want) << what;
        EXPECT_EQ(current() != nullptr, context_after) << what;
        EXPECT_EQ(cudaGetLastError(), want) << what;
      }).join();
    };
    fresh_thread([] { return cudaDeviceGetLimit(nullptr, cudaLimitStackSize); }, cudaErrorInvalidValue, true,
                 "null output of a context-bound call");
    fresh_thread([] { return cudaMemcpy(nullptr, nullptr, 16, kBadKind); }, cudaErrorInvalidMemcpyDirection, true,
                 "a copy's direction");
    fresh_thread([] { return cudaEventDestroy(nullptr); }, cudaErrorInvalidResourceHandle, true, "a null event");
    fresh_thread([] { return cudaStreamCreate(nullptr); }, cudaErrorInvalidValue, true, "a null stream output");
    // Checked before the context, as cudart does.
    fresh_thread([] { return cudaMalloc(nullptr, 16); }, cudaErrorInvalidValue, false, "cudaMalloc's output");
    fresh_thread(
        [] {
          cudaStreamAttrValue v{};
          return cudaStreamSetAttribute(nullptr, cudaLaunchAttributeCooperative, &v);
        },
        cudaErrorInvalidValue, false, "an attribute no stream has");
    fresh_thread([] { return cudaMemcpyToSymbol(nullptr, nullptr, 0); }, cudaSuccess, false, "nothing to copy");
    fresh_thread([] { return cudaCtxResetPersistingL2Cache(); }, cudaErrorDeviceUninitialized, false,
                 "works on the current context only");
    fresh_thread(
        [] {
          int v = 0;
          return cudaDeviceGetAttribute(&v, cudaDevAttrWarpSize, 0);
        },
        cudaSuccess, false, "an attribute needs no context");
  });
}

struct HostFnResults {
  cudaError_t limit = cudaSuccess;
  cudaError_t limit_null = cudaSuccess;
  cudaError_t malloc_null = cudaSuccess;
  cudaError_t get_device = cudaSuccess;
  cudaError_t attribute_null = cudaSuccess;
  cudaError_t attribute = cudaSuccess;
  cudaError_t can_access_bad_device = cudaSuccess;
  cudaError_t memcpy_bad_kind = cudaSuccess;
  std::atomic<bool> ran{false};
};

TEST_F(RuntimePrologue, InsideAHostFunctionTheCallIsRefusedBeforeItsArgumentsAreChecked) {
  on_thread([] {
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    HostFnResults r;
    ASSERT_EQ(cudaLaunchHostFunc(
                  s,
                  [](void* p) {
                    auto* out = static_cast<HostFnResults*>(p);
                    size_t v = 0;
                    int d = 0;
                    out->limit = cudaDeviceGetLimit(&v, cudaLimitStackSize);
                    out->limit_null = cudaDeviceGetLimit(nullptr, cudaLimitStackSize);
                    out->malloc_null = cudaMalloc(nullptr, 16);
                    out->get_device = cudaGetDevice(&d);
                    out->attribute_null = cudaDeviceGetAttribute(nullptr, cudaDevAttrWarpSize, 0);
                    out->attribute = cudaDeviceGetAttribute(&d, cudaDevAttrWarpSize, 0);
                    out->can_access_bad_device = cudaDeviceCanAccessPeer(&d, 64, 0);
                    out->memcpy_bad_kind = cudaMemcpy(&d, &d, 4, kBadKind);
                    out->ran = true;
                  },
                  &r),
              cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    ASSERT_TRUE(r.ran);
    EXPECT_EQ(r.limit, cudaErrorNotPermitted);
    EXPECT_EQ(r.limit_null, cudaErrorNotPermitted) << "refused before the null output is seen";
    EXPECT_EQ(r.malloc_null, cudaErrorInvalidValue) << "cudaMalloc checks its output first";
    EXPECT_EQ(r.get_device, cudaErrorNotPermitted);
    EXPECT_EQ(r.attribute_null, cudaErrorInvalidValue) << "the output first";
    EXPECT_EQ(r.attribute, cudaErrorNotPermitted);
    EXPECT_EQ(r.can_access_bad_device, cudaErrorInvalidDevice) << "the devices first";
    EXPECT_EQ(r.memcpy_bad_kind, cudaErrorNotPermitted);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  });
}

TEST_F(RuntimePrologue, AfterAFaultTheStickyErrorComesBeforeTheArgumentsWhereCudartPutsIt) {
  on_thread([] {
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    drvshim_fake_stream_fail(s, 700);  // an illegal address in work queued there
    ASSERT_EQ(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    ASSERT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
    EXPECT_EQ(cudaDeviceGetLimit(nullptr, cudaLimitStackSize), cudaErrorIllegalAddress);
    EXPECT_EQ(cudaDeviceSetCacheConfig(cudaFuncCachePreferShared), cudaErrorIllegalAddress);
    cudaFuncCache config{};
    EXPECT_EQ(cudaDeviceGetCacheConfig(&config), cudaErrorIllegalAddress) << "answered from no driver call";
    EXPECT_EQ(cudaMemcpy(nullptr, nullptr, 16, cudaMemcpyHostToDevice), cudaErrorIllegalAddress);
    EXPECT_EQ(cudaMemcpy(nullptr, nullptr, 16, kBadKind), cudaErrorInvalidMemcpyDirection) << "the direction first";
    EXPECT_EQ(cudaMemcpy(nullptr, nullptr, 0, cudaMemcpyHostToDevice), cudaSuccess) << "nothing to copy";
    EXPECT_EQ(cudaMalloc(nullptr, 16), cudaErrorInvalidValue) << "the output first";
    EXPECT_EQ(cudaStreamCreate(nullptr), cudaErrorInvalidValue) << "the output first";
    EXPECT_EQ(cudaEventCreate(nullptr), cudaErrorIllegalAddress);
    EXPECT_EQ(cudaEventCreateWithFlags(nullptr, 0x40000000u), cudaErrorInvalidValue) << "the flags first";
    EXPECT_EQ(cudaFree(nullptr), cudaErrorIllegalAddress);
    EXPECT_EQ(cudaSetDeviceFlags(cudaDeviceScheduleAuto), cudaSuccess) << "cudart changes the flags all the same";
    EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress) << "cudaFree's";
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    EXPECT_EQ(cudaDeviceGetLimit(nullptr, cudaLimitStackSize), cudaErrorInvalidValue) << "a reset clears it";
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
  });
  rt::shutdown();
  drvshim_fake_reset();
}

}  // namespace

namespace {

// Outputs as cudart 13.0 writes them (H100, conformance suite and a byte dump of each structure).
TEST_F(RuntimePrologue, OutputsAreWrittenAsCudartWritesThem) {
  on_thread([] {
    cudaDeviceProp p;
    std::memset(&p, 0x5a, sizeof p);
    ASSERT_EQ(cudaGetDeviceProperties(&p, 0), cudaSuccess);
    EXPECT_EQ(p.major, 9);
    const auto* reserved = reinterpret_cast<const unsigned char*>(p.reserved);
    EXPECT_TRUE(std::all_of(reserved, reserved + sizeof p.reserved, [](unsigned char c) { return c == 0x5a; }))
        << "the reserved words keep the caller's bytes";

    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    cudaStreamAttrValue v;
    std::memset(&v, 0x5a, sizeof v);
    ASSERT_EQ(cudaStreamGetAttribute(s, cudaLaunchAttributeMemSyncDomainMap, &v), cudaSuccess);
    const auto* bytes = reinterpret_cast<const unsigned char*>(&v);
    EXPECT_TRUE(std::all_of(bytes + sizeof(cudaLaunchMemSyncDomainMap), bytes + sizeof v, [](unsigned char c) {
      return c == 0x5a;
    })) << "only the attribute's field is written";
    std::memset(&v, 0x5a, sizeof v);
    ASSERT_EQ(cudaStreamGetAttribute(s, cudaLaunchAttributeAccessPolicyWindow, &v), cudaSuccess);
    EXPECT_EQ(bytes[offsetof(cudaAccessPolicyWindow, missProp) + sizeof(cudaAccessProperty)], 0x5a)
        << "not the window's trailing padding";

    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 256), cudaSuccess);
    std::thread([dev] {
      cudaPointerAttributes a{};
      ASSERT_EQ(cudaPointerGetAttributes(&a, dev), cudaSuccess);
      EXPECT_EQ(a.type, cudaMemoryTypeDevice);
      EXPECT_EQ(a.devicePointer, nullptr) << "no context current: no device address";
      EXPECT_EQ(current(), nullptr);
    }).join();
    cudaPointerAttributes a{};
    ASSERT_EQ(cudaPointerGetAttributes(&a, dev), cudaSuccess);
    EXPECT_EQ(a.devicePointer, dev);

    // A "host to host" copy of device memory: the driver copies it (the CPU cannot).
    const int in[4] = {1, 2, 3, 4};
    int out[4] = {};
    EXPECT_EQ(cudaMemcpy(dev, in, sizeof in, cudaMemcpyHostToHost), cudaSuccess);
    EXPECT_EQ(cudaMemcpy(out, dev, sizeof out, cudaMemcpyHostToHost), cudaSuccess);
    EXPECT_EQ(out[3], 4);

    void* managed = nullptr;
    ASSERT_EQ(cudaMallocManaged(&managed, 256), cudaSuccess);
    EXPECT_EQ(cudaFreeAsync(managed, s), cudaErrorNotSupported);
    EXPECT_EQ(cudaFree(managed), cudaSuccess) << "still allocated after the refusal";

    size_t free_bytes = 1, total_bytes = 1;
    drvshim_fake_stream_fail(s, 700);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaErrorIllegalAddress);
    EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total_bytes), cudaErrorIllegalAddress);
    EXPECT_EQ(free_bytes + total_bytes, 0u) << "cleared before the failure";
    std::memset(&a, 0, sizeof a);
    EXPECT_EQ(cudaPointerGetAttributes(&a, dev), cudaSuccess) << "answers after a fault";
    EXPECT_EQ(a.type, cudaMemoryTypeDevice);
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
  });
  rt::shutdown();
  drvshim_fake_reset();
}

}  // namespace

namespace {

TEST_F(RuntimePrologue, AFaultOnOneDeviceSeenFromAnotherLeavesThatOneHealthy) {
  ASSERT_EQ(drvshim_fake_set_profile("dual"), 0);
  on_thread([] {
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    cudaStream_t s1 = nullptr;
    ASSERT_EQ(cudaStreamCreate(&s1), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    void* d0 = nullptr;
    ASSERT_EQ(cudaMalloc(&d0, 64), cudaSuccess);
    drvshim_fake_stream_fail(s1, 700);  // device 1's context faults
    EXPECT_EQ(cudaStreamSynchronize(s1), cudaErrorIllegalAddress) << "seen from a thread on device 0";
    EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
    // Device 0 is healthy: its calls answer as before, before and after their arguments.
    EXPECT_EQ(cudaMemset(d0, 0, 64), cudaSuccess);
    EXPECT_EQ(cudaDeviceGetLimit(nullptr, cudaLimitStackSize), cudaErrorInvalidValue);
    cudaEvent_t e = nullptr;
    EXPECT_EQ(cudaEventCreate(&e), cudaSuccess);
    EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
    EXPECT_EQ(cudaFree(d0), cudaSuccess);
    // Device 1 answers with its sticky error.
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    EXPECT_EQ(cudaDeviceGetLimit(nullptr, cudaLimitStackSize), cudaErrorIllegalAddress);
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  });
  rt::shutdown();
  drvshim_fake_reset();
}

TEST_F(RuntimePrologue, AProgramContextCurrentBeforeTheFirstCallIsSeenAtTheFirstCall) {
  on_thread([] {
    const auto init = raw<CUresult (*)(unsigned)>("cuInit");
    const auto create = raw<CUresult (*)(CUcontext*, unsigned, CUdevice)>("cuCtxCreate");
    const auto destroy = raw<CUresult (*)(CUcontext)>("cuCtxDestroy");
    ASSERT_EQ(init(0), CUDA_SUCCESS);
    CUcontext mine = nullptr;
    ASSERT_EQ(create(&mine, 0, 0), CUDA_SUCCESS);
    // The runtime's first call: the program's context is seen already.
    unsigned flags = 99;
    EXPECT_EQ(cudaGetDeviceFlags(&flags), cudaSuccess);
    EXPECT_EQ(flags, 0u) << "the program's context's flags";
    EXPECT_EQ(cudaSetDeviceFlags(cudaDeviceScheduleSpin), cudaErrorIncompatibleDriverContext);
    EXPECT_EQ(current(), mine) << "left current";
    EXPECT_EQ(drvshim_fake_primary_active(0), 0);
    EXPECT_EQ(destroy(mine), CUDA_SUCCESS);
  });
}

TEST_F(RuntimePrologue, AResetAsTheFirstCallLeavesThePrimaryContextInactiveUnderEveryPolicy) {
  rt::set_policy(rt::Policy::background);
  on_thread([] {
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    EXPECT_EQ(current(), nullptr) << "it made none current";
    EXPECT_EQ(drvshim_fake_primary_active(0), 0) << "the background set-up's retain went";
    EXPECT_EQ(drvshim_fake_primary_refcount(0), 0);
  });
  rt::shutdown();
  rt::set_policy(rt::Policy::lazy);
}

}  // namespace

namespace {

// The prologue's own driver call failing: the call answers that failure,
// named, and does nothing else.
TEST_F(RuntimePrologue, AFailingPrologueQuestionIsTheCallsAnswer) {
  on_thread([] {
    ASSERT_EQ(cudaFree(nullptr), cudaSuccess);  // set up
    size_t before = 0;
    ASSERT_EQ(cudaDeviceGetLimit(&before, cudaLimitStackSize), cudaSuccess);
    drvshim_fake_fail_call("cuCtxGetCurrent", 1, CUDA_ERROR_UNKNOWN);
    size_t v = 12345;
    EXPECT_EQ(cudaDeviceGetLimit(&v, cudaLimitStackSize), cudaErrorUnknown);
    EXPECT_EQ(v, 12345u) << "nothing written";
    EXPECT_NE(rt::last_error_detail().find("cuCtxGetCurrent"), std::string::npos) << rt::last_error_detail();
    EXPECT_EQ(drvshim_fake_pending_injections(), 0);
    EXPECT_EQ(cudaGetLastError(), cudaErrorUnknown);
    EXPECT_EQ(cudaDeviceGetLimit(&v, cudaLimitStackSize), cudaSuccess) << "the next call asks again";
    EXPECT_EQ(v, before);
  });
}

}  // namespace

namespace {

// The process's initialisation failing (no device, no driver): as cudart,
// every call but the five that need no device answers that error before
// looking at its arguments, writes nothing, and cudaGetLastError returns it
// every time; nothing retries it until the runtime is shut down.
class RuntimeInitError : public RuntimeCompatTest {
 protected:
  // Every kind of call: outputs, devices, memory, streams, events, launches.
  static void expect_every_call_answers(cudaError_t want) {
    int value = -7;
    EXPECT_EQ(cudaGetDeviceCount(nullptr), want) << "before the null output";
    EXPECT_EQ(cudaGetDeviceCount(&value), want);
    EXPECT_EQ(value, -7) << "cudart writes no count";
    EXPECT_EQ(cudaGetDevice(&value), want);
    EXPECT_EQ(value, -7);
    EXPECT_EQ(cudaSetDevice(5), want) << "before the device check";
    EXPECT_EQ(cudaMalloc(nullptr, 16), want) << "before the null output";
    EXPECT_EQ(cudaFree(nullptr), want);
    EXPECT_EQ(cudaMemcpy(nullptr, nullptr, 16, kBadKind), want) << "before the direction";
    EXPECT_EQ(cudaStreamCreate(nullptr), want);
    EXPECT_EQ(cudaStreamQuery(nullptr), want);
    EXPECT_EQ(cudaEventCreate(nullptr), want);
    EXPECT_EQ(cudaDeviceSynchronize(), want);
    EXPECT_EQ(cudaLaunchKernel(nullptr, dim3(1), dim3(1), nullptr, 0, nullptr), want);
    EXPECT_EQ(cudaPeekAtLastError(), want);
    EXPECT_EQ(cudaGetLastError(), want);
    EXPECT_EQ(cudaGetLastError(), want) << "never cleared";
    // The five that need no device.
    EXPECT_EQ(cudaRuntimeGetVersion(&value), cudaSuccess);
    EXPECT_EQ(value, CUDART_VERSION);
    EXPECT_STREQ(cudaGetErrorName(cudaErrorNoDevice), "cudaErrorNoDevice");
    EXPECT_EQ(cudaCreateChannelDesc(8, 0, 0, 0, cudaChannelFormatKindUnsigned).x, 8);
    EXPECT_EQ(cudaRuntimeGetVersion(nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGetLastError(), want) << "the initialisation error, not the last call's";
  }
};

TEST_F(RuntimeInitError, WithNoDeviceEveryCallAnswersNoDeviceBeforeItsArguments) {
  ASSERT_EQ(drvshim_fake_set_profile("none"), 0);
  on_thread([] {
    expect_every_call_answers(cudaErrorNoDevice);
    int version = 0;
    EXPECT_EQ(cudaDriverGetVersion(&version), cudaSuccess) << "the driver is there";
    EXPECT_EQ(version, 13000);
    EXPECT_NE(rt::last_error_detail().find("not retried"), std::string::npos) << rt::last_error_detail();
  });
  std::thread([] { EXPECT_EQ(cudaPeekAtLastError(), cudaErrorNoDevice) << "every thread's"; }).join();
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 1u) << "initialised once, not retried";
  EXPECT_EQ(drvshim_fake_call_count("cuDevicePrimaryCtxRetain"), 0u);
}

TEST_F(RuntimeInitError, WithNoDriverEveryCallAnswersInsufficientDriverAndTheVersionIsZero) {
  const std::string fake = std::getenv("DRVSHIM_LIBCUDA");
  setenv("DRVSHIM_LIBCUDA", "/nonexistent/libcuda.so.1", 1);
  on_thread([] {
    int version = 7;
    EXPECT_EQ(cudaDriverGetVersion(&version), cudaSuccess) << "no driver: version 0, as cudart";
    EXPECT_EQ(version, 0);
    EXPECT_EQ(cudaDriverGetVersion(nullptr), cudaErrorInvalidValue);
    expect_every_call_answers(cudaErrorInsufficientDriver);
  });
  rt::shutdown();
  setenv("DRVSHIM_LIBCUDA", fake.c_str(), 1);
  on_thread([] {
    int count = 0;
    EXPECT_EQ(cudaGetDeviceCount(&count), cudaSuccess) << "a shutdown forgets the failure";
    EXPECT_EQ(count, 1);
  });
}

// A device, but cudaGetLastError and cudaPeekAtLastError as a process's
// first calls: they initialise the driver as cudart's do, and make no
// context current.
TEST_F(RuntimeInitError, TheLastErrorCallsInitialiseTheDriverAndNothingElse) {
  on_thread([] {
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess);
    EXPECT_EQ(current(), nullptr);
  });
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 1u);
  EXPECT_EQ(drvshim_fake_call_count("cuDevicePrimaryCtxRetain"), 0u);
}

}  // namespace

namespace {

// First calls on several threads while cuInit fails: the ones that waited
// for the first get its failure, and nobody runs cuInit again (a driver
// that recovers meanwhile must not bring the process back, as under cudart).
// A child forked after a failed initialisation answers the parent's error,
// and still reads the driver's version (H100, cudart 13.0, 2026-12-07).
TEST_F(RuntimeInitError, AChildOfAFailedInitialisationKeepsItsErrorAndReadsTheVersion) {
  ASSERT_EQ(drvshim_fake_set_profile("none"), 0);
  on_thread([] {
    int count = -1;
    ASSERT_EQ(cudaGetDeviceCount(&count), cudaErrorNoDevice);
    std::fflush(nullptr);
    EXPECT_EQ(in_child([] {
                int version = -1;
                int n = -1;
                const bool ok = cudaGetLastError() == cudaErrorNoDevice &&
                                cudaGetDeviceCount(&n) == cudaErrorNoDevice && n == -1 &&
                                cudaDriverGetVersion(&version) == cudaSuccess && version == 13000;
                return ok ? 0 : 1;
              }),
              0);
  });
}

TEST_F(RuntimeInitError, ThreadsThatWaitedForAFailedInitialisationGetItsFailure) {
  ASSERT_EQ(drvshim_fake_set_profile("none"), 0);
  setenv("DRVSHIM_FAKE_INIT_DELAY_MS", "100", 1);
  std::atomic<int> failed{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([&] {
      int count = -1;
      if (cudaGetDeviceCount(&count) == cudaErrorNoDevice && count == -1) ++failed;
    });
  }
  for (auto& t : threads) t.join();
  unsetenv("DRVSHIM_FAKE_INIT_DELAY_MS");
  EXPECT_EQ(failed.load(), 4);
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 1u) << "one cuInit for the process";
}

// The C++ controls keep a failed initialisation too: rt::setup() answers it,
// rt::set_policy(background) starts no set-up that would hold a context for
// nothing; rt::shutdown() forgets it, and the caller's last error with it.
TEST_F(RuntimeInitError, TheControlsKeepAFailedInitialisationUntilShutdown) {
  drvshim_fake_fail_call("cuInit", 1, CUDA_ERROR_NO_DEVICE);
  on_thread([] {
    int count = 0;
    EXPECT_EQ(cudaGetDeviceCount(&count), cudaErrorNoDevice);
    EXPECT_EQ(rt::setup(), static_cast<int>(cudaErrorNoDevice)) << "not retried by setup()";
    rt::set_policy(rt::Policy::background);
    EXPECT_EQ(cudaMalloc(nullptr, 16), cudaErrorNoDevice);
    rt::shutdown();
    rt::set_policy(rt::Policy::lazy);
    EXPECT_EQ(cudaPeekAtLastError(), cudaSuccess) << "the shut-down runtime's error is gone";
    EXPECT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  });
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 2u) << "once before the shutdown, once after";
  EXPECT_EQ(drvshim_fake_call_count("cuDevicePrimaryCtxRetain"), 0u) << "no background set-up after the failure";
}

// The toolkit's stub library in the driver's place: version 0, as cudart.
class RuntimeStubDriver : public RuntimeCompatTest {
 protected:
  const char* profile() const override { return "stub"; }
};

TEST_F(RuntimeStubDriver, TheDriverVersionIsZeroAndEveryCallAnswersTheStub) {
  on_thread([] {
    int version = 7;
    EXPECT_EQ(cudaDriverGetVersion(&version), cudaSuccess);
    EXPECT_EQ(version, 0);
    int count = -1;
    EXPECT_EQ(cudaGetDeviceCount(&count), cudaErrorStubLibrary);
    EXPECT_EQ(cudaGetLastError(), cudaErrorStubLibrary);
    EXPECT_EQ(cudaGetLastError(), cudaErrorStubLibrary);
  });
}

// nvcc's launch sequence with a failed initialisation: __cudaGetKernel
// answers the error and hands back the stub, as cudart does; the launch
// answers the same error.
TEST_F(RuntimeInitError, TheLaunchSequenceAnswersTheInitialisationError) {
  ASSERT_EQ(drvshim_fake_set_profile("none"), 0);
  on_thread([] {
    static int stub;  // any address: nothing was registered
    cudaKernel_t kernel = nullptr;
    EXPECT_EQ(__cudaGetKernel(nullptr, &stub), cudaErrorInvalidValue) << "its output checked first";
    EXPECT_EQ(__cudaGetKernel(&kernel, &stub), cudaErrorNoDevice);
    EXPECT_EQ(reinterpret_cast<void*>(kernel), static_cast<void*>(&stub));
    EXPECT_EQ(__cudaLaunchKernel(kernel, dim3(1), dim3(1), nullptr, 0, nullptr), cudaErrorNoDevice);
    EXPECT_EQ(cudaGraphCreate(nullptr, 0), cudaErrorNoDevice) << "outside the subset too";
  });
}

}  // namespace
