// SPDX-License-Identifier: Apache-2.0
// runtime_compat beside the Driver API, as cudart 13.0 behaves on the GPU:
// the runtime works in whatever context is current (a program's own
// cuCtxCreate context: allocations and streams land there, cudaDeviceReset
// leaves it alone), cudaStream_t is CUstream and cudaEvent_t is CUevent
// (streams and events made with the driver work in every Runtime call), and
// the frees take memory the driver allocated. The driver's own entry points
// come from the fake through cuGetProcAddress, as a program's would.
#include <cuda.h>

#include <cstdlib>

#include "raw_driver.hpp"
#include "rt_fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

struct Raw {
  CUresult (*init)(unsigned) = raw<decltype(init)>("cuInit");
  CUresult (*ctx_create)(CUcontext*, unsigned, CUdevice) = raw<decltype(ctx_create)>("cuCtxCreate");
  CUresult (*ctx_destroy)(CUcontext) = raw<decltype(ctx_destroy)>("cuCtxDestroy");
  CUresult (*ctx_get_current)(CUcontext*) = raw<decltype(ctx_get_current)>("cuCtxGetCurrent");
  CUresult (*stream_create)(CUstream*, unsigned, int) = raw<decltype(stream_create)>("cuStreamCreateWithPriority");
  CUresult (*stream_get_ctx)(CUstream, CUcontext*) = raw<decltype(stream_get_ctx)>("cuStreamGetCtx");
  CUresult (*event_create)(CUevent*, unsigned) = raw<decltype(event_create)>("cuEventCreate");
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = raw<decltype(mem_alloc)>("cuMemAlloc");
  CUresult (*mem_free)(CUdeviceptr) = raw<decltype(mem_free)>("cuMemFree");
  CUresult (*mem_host_alloc)(void**, size_t, unsigned) = raw<decltype(mem_host_alloc)>("cuMemHostAlloc");
  CUresult (*mem_host_register)(void*, size_t, unsigned) = raw<decltype(mem_host_register)>("cuMemHostRegister");
};

CUcontext current_context(const Raw& r) {
  CUcontext c = nullptr;
  EXPECT_EQ(r.ctx_get_current(&c), CUDA_SUCCESS);
  return c;
}

using RuntimeInterop = RuntimeCompatTest;

TEST_F(RuntimeInterop, TheRuntimeWorksInTheContextTheProgramMadeCurrent) {
  on_thread([] {
    Raw r;
    ASSERT_EQ(r.init(0), CUDA_SUCCESS);
    CUcontext mine = nullptr;
    ASSERT_EQ(r.ctx_create(&mine, 0, 0), CUDA_SUCCESS);

    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    EXPECT_EQ(current_context(r), mine) << "the runtime left the program's context current";
    EXPECT_EQ(drvshim_fake_primary_active(0), 0) << "and never activated the primary context";
    CUcontext of_stream = nullptr;
    EXPECT_EQ(r.stream_get_ctx(reinterpret_cast<CUstream>(s), &of_stream), CUDA_SUCCESS);
    EXPECT_EQ(of_stream, mine) << "the stream was created in the current context";
    int device = -1;
    EXPECT_EQ(cudaGetDevice(&device), cudaSuccess);
    EXPECT_EQ(device, 0);

    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    EXPECT_EQ(current_context(r), mine) << "a reset leaves the program's context current";
    EXPECT_EQ(cudaMemset(p, 1, 4096), cudaSuccess) << "and its allocations usable";
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaFree(p), cudaSuccess);
    EXPECT_EQ(drvshim_fake_primary_active(0), 0);
    EXPECT_EQ(r.ctx_destroy(mine), CUDA_SUCCESS);

    // With no context current any more the runtime falls back to the primary context.
    ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
    EXPECT_EQ(drvshim_fake_primary_active(0), 1);
    EXPECT_EQ(cudaFree(p), cudaSuccess);
  });
  EXPECT_EQ(drvshim_fake_live_device_allocations(), 0);
  EXPECT_EQ(drvshim_fake_live_streams(), 0);
}

TEST_F(RuntimeInterop, StreamsAndEventsMadeWithTheDriverWorkInRuntimeCalls) {
  on_thread([] {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    Raw r;
    CUstream cs = nullptr;
    CUevent ce = nullptr;
    CUevent ce2 = nullptr;
    ASSERT_EQ(r.stream_create(&cs, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(r.event_create(&ce, 0), CUDA_SUCCESS);
    ASSERT_EQ(r.event_create(&ce2, 0), CUDA_SUCCESS);
    auto* s = reinterpret_cast<cudaStream_t>(cs);
    auto* e = reinterpret_cast<cudaEvent_t>(ce);
    auto* e2 = reinterpret_cast<cudaEvent_t>(ce2);

    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(p, 7, 4096, s), cudaSuccess);
    EXPECT_EQ(cudaEventRecord(e, s), cudaSuccess);
    EXPECT_EQ(cudaEventRecord(e2, s), cudaSuccess);
    EXPECT_EQ(cudaStreamWaitEvent(cudaStreamLegacy, e, 0), cudaSuccess);
    static bool ran = false;
    ran = false;
    EXPECT_EQ(cudaLaunchHostFunc(
                  s, [](void*) { ran = true; }, nullptr),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_TRUE(ran) << "a host function queued on a driver-made stream ran";
    EXPECT_EQ(cudaStreamQuery(s), cudaSuccess);
    EXPECT_EQ(cudaEventSynchronize(e), cudaSuccess);
    EXPECT_EQ(cudaEventQuery(e2), cudaSuccess);
    float ms = -1.0f;
    EXPECT_EQ(cudaEventElapsedTime(&ms, e, e2), cudaSuccess);
    EXPECT_GE(ms, 0.0f);
    int device = -1;
    EXPECT_EQ(cudaStreamGetDevice(s, &device), cudaSuccess);
    EXPECT_EQ(device, 0);
    unsigned char host[16] = {};
    EXPECT_EQ(cudaMemcpyAsync(host, p, sizeof host, cudaMemcpyDeviceToHost, s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(host[0], 7);

    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess) << "the runtime destroys a driver-made stream, as cudart";
    EXPECT_EQ(drvshim_fake_live_streams(), 0) << "the driver no longer has it";
    EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
    EXPECT_EQ(cudaEventDestroy(e2), cudaSuccess);
    EXPECT_EQ(drvshim_fake_live_events(), 0);
    EXPECT_EQ(cudaStreamDestroy(cudaStreamLegacy), cudaErrorInvalidResourceHandle) << "default streams stay";
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaEventDestroy(nullptr), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaEventRecord(nullptr, 0), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaFree(p), cudaSuccess);
  });
}

TEST_F(RuntimeInterop, TheFreesTakeMemoryTheDriverAllocated) {
  on_thread([] {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    Raw r;
    CUdeviceptr d = 0;
    ASSERT_EQ(r.mem_alloc(&d, 4096), CUDA_SUCCESS);
    cudaPointerAttributes attributes{};
    EXPECT_EQ(cudaPointerGetAttributes(&attributes, reinterpret_cast<void*>(d)), cudaSuccess);
    EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
    EXPECT_EQ(cudaFree(reinterpret_cast<void*>(d)), cudaSuccess);
    EXPECT_EQ(drvshim_fake_live_device_allocations(), 0);

    void* h = nullptr;
    ASSERT_EQ(r.mem_host_alloc(&h, 4096, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
    unsigned flags = 0;
    EXPECT_EQ(cudaHostGetFlags(&flags, h), cudaSuccess);
    EXPECT_NE(flags & cudaHostAllocMapped, 0u);
    EXPECT_EQ(cudaFreeHost(h), cudaSuccess);
    EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 0);

    void* pageable = std::aligned_alloc(4096, 8192);
    ASSERT_EQ(r.mem_host_register(pageable, 8192, 0), CUDA_SUCCESS);
    EXPECT_EQ(cudaHostUnregister(pageable), cudaSuccess);
    EXPECT_EQ(drvshim_fake_live_registrations(), 0);
    EXPECT_EQ(cudaHostUnregister(pageable), cudaErrorHostMemoryNotRegistered) << "the driver's answer, as cudart";
    EXPECT_EQ(cudaGetLastError(), cudaErrorHostMemoryNotRegistered);
    std::free(pageable);
  });
}

}  // namespace

namespace {

TEST_F(RuntimeInterop, APrimaryContextTheProgramMadeCurrentIsThePrimaryContext) {
  on_thread([] {
    Raw r;
    ASSERT_EQ(r.init(0), CUDA_SUCCESS);
    auto retain = raw<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain");
    auto release = raw<CUresult (*)(CUdevice)>("cuDevicePrimaryCtxRelease");
    auto set_current = raw<CUresult (*)(CUcontext)>("cuCtxSetCurrent");
    CUcontext primary = nullptr;
    ASSERT_EQ(retain(&primary, 0), CUDA_SUCCESS);
    ASSERT_EQ(set_current(primary), CUDA_SUCCESS);
    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
    EXPECT_EQ(current_context(r), primary);
    EXPECT_EQ(drvshim_fake_primary_refcount(0), 2) << "the runtime retained it too, as its own";
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    EXPECT_EQ(drvshim_fake_live_device_allocations(), 0) << "the reset freed the runtime's allocation there";
    EXPECT_EQ(drvshim_fake_primary_refcount(0), 1) << "and gave the runtime's retain back";
    EXPECT_EQ(release(0), CUDA_SUCCESS);
  });
}

TEST_F(RuntimeInterop, WhatTheRuntimeMakesInTheProgramsContextIsTheProgramsAfterItIsDestroyed) {
  on_thread([] {
    Raw r;
    ASSERT_EQ(r.init(0), CUDA_SUCCESS);
    CUcontext a = nullptr;
    ASSERT_EQ(r.ctx_create(&a, 0, 0), CUDA_SUCCESS);
    void* p = nullptr;
    cudaStream_t s = nullptr;
    cudaEvent_t e = nullptr;
    ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
    ASSERT_EQ(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, -1), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
    unsigned flags = 0;
    int priority = 0;
    EXPECT_EQ(cudaStreamGetFlags(s, &flags), cudaSuccess);
    EXPECT_EQ(flags, static_cast<unsigned>(cudaStreamNonBlocking)) << "the driver's answer";
    EXPECT_EQ(cudaStreamGetPriority(s, &priority), cudaSuccess);
    EXPECT_EQ(priority, -1);
    // The program destroys its context with everything in it, then makes another.
    ASSERT_EQ(r.ctx_destroy(a), CUDA_SUCCESS);
    CUcontext b = nullptr;
    ASSERT_EQ(r.ctx_create(&b, 0, 0), CUDA_SUCCESS);
    void* q = nullptr;
    ASSERT_EQ(cudaMalloc(&q, 4096), cudaSuccess) << "nothing of the destroyed context is in the way";
    EXPECT_EQ(cudaMemset(q, 0, 4096), cudaSuccess);
    EXPECT_EQ(cudaFree(q), cudaSuccess);
    EXPECT_EQ(drvshim_fake_live_device_allocations(), 0);
    ASSERT_EQ(r.ctx_destroy(b), CUDA_SUCCESS);
  });
}

TEST_F(RuntimeInterop, StreamOrderedFreeTakesDriverAllocatedMemory) {
  on_thread([] {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    auto alloc_async = raw<CUresult (*)(CUdeviceptr*, size_t, CUstream)>("cuMemAllocAsync");
    CUdeviceptr d = 0;
    ASSERT_EQ(alloc_async(&d, 4096, nullptr), CUDA_SUCCESS);
    EXPECT_EQ(cudaFreeAsync(reinterpret_cast<void*>(d), nullptr), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    EXPECT_EQ(drvshim_fake_live_device_allocations(), 0);
  });
}

}  // namespace

namespace {

TEST_F(RuntimeInterop, AnEventRecordedOnAnotherContextsStreamIsTheDriversInvalidHandle) {
  ASSERT_EQ(drvshim_fake_set_profile("dual"), 0);
  on_thread([] {
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    cudaEvent_t e = nullptr;
    ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    EXPECT_EQ(cudaEventRecord(e, s), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaEventRecord(e, nullptr), cudaErrorInvalidResourceHandle) << "device 1's legacy stream";
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  });
}

}  // namespace

namespace {

TEST_F(RuntimeInterop, AProgramsContextWorksOnADriverWithoutContextIds) {
  ASSERT_EQ(drvshim_fake_set_profile("old"), 0);  // driver 11.8
  on_thread([] {
    Raw r;
    ASSERT_EQ(r.init(0), CUDA_SUCCESS);
    CUcontext mine = nullptr;
    ASSERT_EQ(r.ctx_create(&mine, 0, 0), CUDA_SUCCESS);
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 4096), cudaSuccess) << "cuCtxGetId is 12.0's: nothing may need it";
    EXPECT_EQ(cudaMemset(p, 0, 4096), cudaSuccess);
    EXPECT_EQ(cudaFree(p), cudaSuccess);
    EXPECT_EQ(r.ctx_destroy(mine), CUDA_SUCCESS);
  });
}

TEST_F(RuntimeInterop, TellingAPrimaryContextFromTheProgramsOwnRetainsNothing) {
  on_thread([] {
    Raw r;
    ASSERT_EQ(r.init(0), CUDA_SUCCESS);
    auto retain = raw<CUresult (*)(CUcontext*, CUdevice)>("cuDevicePrimaryCtxRetain");
    auto release = raw<CUresult (*)(CUdevice)>("cuDevicePrimaryCtxRelease");
    CUcontext primary = nullptr;
    ASSERT_EQ(retain(&primary, 0), CUDA_SUCCESS);  // another library holds it active
    CUcontext mine = nullptr;
    ASSERT_EQ(r.ctx_create(&mine, 0, 0), CUDA_SUCCESS);
    void* p = nullptr;
    ASSERT_EQ(cudaMalloc(&p, 4096), cudaSuccess);
    EXPECT_EQ(drvshim_fake_primary_refcount(0), 1) << "the runtime kept no retain of a context it does not use";
    EXPECT_EQ(cudaFree(p), cudaSuccess);
    EXPECT_EQ(r.ctx_destroy(mine), CUDA_SUCCESS);
    EXPECT_EQ(release(0), CUDA_SUCCESS);
  });
}

TEST_F(RuntimeInterop, PeerAccessIsBetweenPrimaryContextsWhateverIsCurrent) {
  ASSERT_EQ(drvshim_fake_set_profile("dual"), 0);
  on_thread([] {
    Raw r;
    ASSERT_EQ(r.init(0), CUDA_SUCCESS);
    CUcontext mine = nullptr;
    ASSERT_EQ(r.ctx_create(&mine, 0, 1), CUDA_SUCCESS);
    // cudart 13.0 refuses peer access with a cuCtxCreate context current,
    // before it looks at the peer (H100, conformance suite, drvctx scenario).
    EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaErrorIncompatibleDriverContext);
    EXPECT_EQ(cudaDeviceEnablePeerAccess(64, 0), cudaErrorIncompatibleDriverContext) << "before the peer's check";
    EXPECT_EQ(cudaDeviceDisablePeerAccess(0), cudaErrorIncompatibleDriverContext);
    EXPECT_EQ(cudaSetDeviceFlags(cudaDeviceScheduleSpin), cudaErrorIncompatibleDriverContext);
    EXPECT_EQ(current_context(r), mine) << "left current";
    EXPECT_EQ(r.ctx_destroy(mine), CUDA_SUCCESS);
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaSuccess) << "nothing was enabled before";
    EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessAlreadyEnabled) << "device 1's primary context";
    EXPECT_EQ(cudaDeviceDisablePeerAccess(0), cudaSuccess);
    EXPECT_EQ(cudaGetLastError(), cudaErrorPeerAccessAlreadyEnabled);
  });
}

}  // namespace
