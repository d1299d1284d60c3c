// SPDX-License-Identifier: Apache-2.0
// The Runtime API surface of libdrvshim_cudart against the fake, by area:
// device, memory, streams and events, execution, symbols and managed
// variables, peer access, calls outside the subset. Each checks cudart's
// semantics and error codes and what reached the driver.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "rt_fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

using RuntimeDevice = RuntimeCompatTest;

// As cudart 13.0 on the H200 (tests/runtime_api/context_state.expected):
// cudaSetDeviceFlags sets the primary context's flags and initialises the
// device (active, current on this thread); on an active context it changes
// them; cudaDeviceMapHost is implicit and never reaches the driver.
TEST_F(RuntimeDevice, FlagsAreThePrimaryContextsAndSettingThemInitialisesTheDevice) {
  on_thread([] {
    EXPECT_EQ(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync), cudaSuccess);
    EXPECT_EQ(drvshim_fake_primary_active(0), 1) << "cudaSetDeviceFlags initialises the device";
    EXPECT_EQ(drvshim_fake_primary_refcount(0), 1);
    unsigned flags = 0;
    EXPECT_EQ(cudaGetDeviceFlags(&flags), cudaSuccess);
    EXPECT_EQ(flags, static_cast<unsigned>(cudaDeviceScheduleBlockingSync | cudaDeviceMapHost));
    EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
    EXPECT_EQ(drvshim_fake_primary_refcount(0), 1) << "one retain for the runtime";
    EXPECT_EQ(cudaSetDeviceFlags(cudaDeviceScheduleSpin | cudaDeviceMapHost), cudaSuccess) << "changed while active";
    EXPECT_EQ(cudaGetDeviceFlags(&flags), cudaSuccess);
    EXPECT_EQ(flags, static_cast<unsigned>(cudaDeviceScheduleSpin | cudaDeviceMapHost));
    EXPECT_EQ(drvshim_fake_primary_flags(0), static_cast<int>(cudaDeviceScheduleSpin)) << "map host not passed on";
    EXPECT_EQ(cudaSetDeviceFlags(0x3), cudaErrorInvalidValue) << "two scheduling policies";
    EXPECT_EQ(cudaSetDeviceFlags(0x100), cudaErrorInvalidValue);
    EXPECT_EQ(drvshim_fake_primary_flags(0), static_cast<int>(cudaDeviceScheduleSpin)) << "bad flags change nothing";
  });
}

// Under the eager policy a first call that only reads or sets flags leaves
// the eager set-up to the next call, which does it (adversarial review).
TEST_F(RuntimeDevice, TheEagerSetUpFollowsAFirstCallThatOnlyTouchedFlags) {
  rt::set_policy(rt::Policy::eager);
  on_thread([] {
    unsigned flags = 0;
    EXPECT_EQ(cudaGetDeviceFlags(&flags), cudaSuccess);
    int count = 0;
    EXPECT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
    EXPECT_EQ(drvshim_fake_primary_active(0), 1) << "the eager set-up ran at the second call";
  });
}

// cudaInitDevice with cudaInitDeviceFlagsAreValid sets flags as cudaSetDeviceFlags does:
// also on an active context, without passing cudaDeviceMapHost to the driver.
TEST_F(RuntimeDevice, InitDeviceWithFlagsChangesThemLikeSetDeviceFlags) {
  on_thread([] {
    EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
    EXPECT_EQ(cudaInitDevice(0, cudaDeviceScheduleYield | cudaDeviceMapHost, cudaInitDeviceFlagsAreValid), cudaSuccess);
    EXPECT_EQ(drvshim_fake_primary_flags(0), static_cast<int>(cudaDeviceScheduleYield));
    EXPECT_EQ(drvshim_fake_primary_active(0), 1);
  });
}

TEST_F(RuntimeDevice, LimitsPciIdsChoiceMemoryAndPriorities) {
  on_thread([] {
    size_t value = 0;
    EXPECT_EQ(cudaDeviceGetLimit(&value, cudaLimitPrintfFifoSize), cudaSuccess);
    EXPECT_EQ(value, 1048576u);
    EXPECT_EQ(cudaDeviceSetLimit(cudaLimitMallocHeapSize, 32u << 20), cudaSuccess);
    EXPECT_EQ(cudaDeviceGetLimit(&value, cudaLimitMallocHeapSize), cudaSuccess);
    EXPECT_EQ(value, 32u << 20);
    // As the H100 answers: a number that names no limit is invalid; the device
    // runtime's synchronisation depth is unsupported from compute capability 9.0.
    EXPECT_EQ(cudaDeviceSetLimit(static_cast<cudaLimit>(0x7), 1), cudaErrorInvalidValue);
    EXPECT_EQ(cudaDeviceSetLimit(cudaLimitDevRuntimeSyncDepth, 4), cudaErrorUnsupportedLimit);
    char bus[32] = {};
    EXPECT_EQ(cudaDeviceGetPCIBusId(bus, sizeof bus, 0), cudaSuccess);
    EXPECT_STREQ(bus, "0000:18:00.0");
    int device = -1;
    EXPECT_EQ(cudaDeviceGetByPCIBusId(&device, "0000:18:00.0"), cudaSuccess);
    EXPECT_EQ(device, 0);
    EXPECT_EQ(cudaDeviceGetByPCIBusId(&device, "18:00.0"), cudaSuccess) << "the domain is optional";
    EXPECT_EQ(cudaDeviceGetByPCIBusId(&device, "0000:99:00.0"), cudaErrorInvalidDevice);
    EXPECT_EQ(cudaDeviceGetByPCIBusId(&device, "bus zero"), cudaErrorInvalidValue);
    cudaDeviceProp want{};
    want.major = 8;
    EXPECT_EQ(cudaChooseDevice(&device, &want), cudaSuccess);
    EXPECT_EQ(device, 0);
    size_t free_bytes = 0, total = 0;
    EXPECT_EQ(cudaMemGetInfo(&free_bytes, &total), cudaSuccess);
    EXPECT_EQ(total, 150754820096ull);
    EXPECT_LT(free_bytes, total);
    int least = 1, greatest = 1;
    EXPECT_EQ(cudaDeviceGetStreamPriorityRange(&least, &greatest), cudaSuccess);
    EXPECT_EQ(least, 0);
    EXPECT_EQ(greatest, -5);
    int driver = 0, runtime = 0;
    EXPECT_EQ(cudaDriverGetVersion(&driver), cudaSuccess);
    EXPECT_EQ(driver, 13000);
    EXPECT_EQ(cudaRuntimeGetVersion(&runtime), cudaSuccess);
    EXPECT_EQ(runtime, CUDART_VERSION);
    EXPECT_EQ(cudaProfilerStart(), cudaSuccess);
    EXPECT_EQ(cudaProfilerStop(), cudaSuccess);
    EXPECT_EQ(cudaCtxResetPersistingL2Cache(), cudaSuccess);
  });
}

TEST_F(RuntimeDevice, NoDeviceIsCudaErrorNoDevice) {
  ASSERT_EQ(drvshim_fake_set_profile("none"), 0);
  on_thread([] {
    int count = -1;
    EXPECT_EQ(cudaGetDeviceCount(&count), cudaErrorNoDevice);
    EXPECT_EQ(count, -1) << "cudart 13.0 writes no count (H100, CUDA_VISIBLE_DEVICES=\"\")";
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 16), cudaErrorNoDevice);
  });
}

// ---- memory ----------------------------------------------------------------------------------

using RuntimeMemory = RuntimeCompatTest;

TEST_F(RuntimeMemory, PitchedAnd2DCopiesAndMemsets) {
  on_thread([] {
    unsigned char* d = nullptr;
    size_t pitch = 0;
    ASSERT_EQ(cudaMallocPitch(reinterpret_cast<void**>(&d), &pitch, 100, 4), cudaSuccess);
    EXPECT_EQ(pitch, 512u);
    EXPECT_EQ(cudaMemset2D(d, pitch, 7, 100, 4), cudaSuccess);
    std::vector<unsigned char> h(100 * 4, 0);
    EXPECT_EQ(cudaMemcpy2D(h.data(), 100, d, pitch, 100, 4, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(h[399], 7);
    std::fill(h.begin(), h.end(), 9);
    EXPECT_EQ(cudaMemcpy2DAsync(d, pitch, h.data(), 100, 100, 4, cudaMemcpyHostToDevice, nullptr), cudaSuccess);
    EXPECT_EQ(cudaMemset2DAsync(d, pitch, 3, 10, 1, nullptr), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    EXPECT_EQ(cudaMemcpy2D(h.data(), 100, d, pitch, 100, 4, cudaMemcpyDefault), cudaSuccess);
    EXPECT_EQ(h[0], 3);
    EXPECT_EQ(h[10], 9);
    // Wider than the pitch: several rows are a pitch error, one row a value error, as under cudart 13.0.
    EXPECT_EQ(cudaMemcpy2D(h.data(), 50, d, pitch, 100, 4, cudaMemcpyDeviceToHost), cudaErrorInvalidPitchValue);
    EXPECT_EQ(cudaMemcpy2D(h.data(), 50, d, pitch, 100, 1, cudaMemcpyDeviceToHost), cudaErrorInvalidValue);
    EXPECT_EQ(cudaFree(d), cudaSuccess);
  });
}

TEST_F(RuntimeMemory, HostMemoryFlagsAndPointerAttributes) {
  on_thread([] {
    void* h = nullptr;
    ASSERT_EQ(cudaHostAlloc(&h, 4096, cudaHostAllocMapped | cudaHostAllocPortable), cudaSuccess);
    unsigned flags = 0;
    EXPECT_EQ(cudaHostGetFlags(&flags, h), cudaSuccess);
    EXPECT_EQ(flags, static_cast<unsigned>(cudaHostAllocMapped | cudaHostAllocPortable))
        << "as the driver reports them";
    EXPECT_EQ(cudaHostGetFlags(&flags, static_cast<char*>(h) + 100), cudaSuccess) << "inside the allocation";
    int local = 0;
    EXPECT_EQ(cudaHostGetFlags(&flags, &local), cudaErrorInvalidValue);
    cudaPointerAttributes a{};
    EXPECT_EQ(cudaPointerGetAttributes(&a, h), cudaSuccess);
    EXPECT_EQ(a.type, cudaMemoryTypeHost);
    EXPECT_EQ(a.hostPointer, h);
    EXPECT_EQ(cudaPointerGetAttributes(&a, &local), cudaSuccess) << "CUDA 11+: unregistered host memory is no error";
    EXPECT_EQ(a.type, cudaMemoryTypeUnregistered);
    void* d = nullptr;
    ASSERT_EQ(cudaMalloc(&d, 64), cudaSuccess);
    EXPECT_EQ(cudaPointerGetAttributes(&a, d), cudaSuccess);
    EXPECT_EQ(a.type, cudaMemoryTypeDevice);
    EXPECT_EQ(a.device, 0);
    EXPECT_EQ(a.devicePointer, d);
    EXPECT_EQ(cudaMemsetAsync(d, 0xab, 64, cudaStreamPerThread), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(h, d, 64, cudaMemcpyDefault, cudaStreamPerThread), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(cudaStreamPerThread), cudaSuccess);
    EXPECT_EQ(static_cast<unsigned char*>(h)[63], 0xab);
    EXPECT_EQ(cudaFree(d), cudaSuccess);
    EXPECT_EQ(cudaFreeHost(h), cudaSuccess);
    EXPECT_EQ(cudaHostAlloc(&h, 16, 0x10), cudaErrorInvalidValue);
  });
}

TEST_F(RuntimeMemory, ManagedMemoryHintsAndStreamOrderedAllocations) {
  on_thread([] {
    int* m = nullptr;
    ASSERT_EQ(cudaMallocManaged(reinterpret_cast<void**>(&m), 1024, cudaMemAttachGlobal), cudaSuccess);
    m[255] = 42;  // host access
    cudaMemLocation dev{cudaMemLocationTypeDevice, 0};
    EXPECT_EQ(cudaMemAdvise(m, 1024, cudaMemAdviseSetPreferredLocation, dev), cudaSuccess);
    EXPECT_EQ(cudaMemPrefetchAsync(m, 1024, dev, 0, nullptr), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    EXPECT_EQ(cudaStreamAttachMemAsync(s, m, 0, cudaMemAttachSingle), cudaSuccess);
    EXPECT_EQ(cudaMallocManaged(reinterpret_cast<void**>(&m), 16, 0x4), cudaErrorInvalidValue);
    void* a = nullptr;
    EXPECT_EQ(cudaMallocAsync(&a, 4096, s), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(a, 1, 4096, s), cudaSuccess);
    EXPECT_EQ(cudaFreeAsync(a, s), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(cudaFreeAsync(a, s), cudaErrorInvalidValue) << "freed already: the driver says so";
    EXPECT_EQ(drvshim_fake_take_misuse(), 1u) << "the freed address reached the driver, as under cudart";
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    int* again = nullptr;
    ASSERT_EQ(cudaMallocManaged(reinterpret_cast<void**>(&again), 64, cudaMemAttachHost), cudaSuccess);
    EXPECT_EQ(cudaFree(again), cudaSuccess);
  });
}

// ---- streams and events ------------------------------------------------------------------------

using RuntimeStreams = RuntimeCompatTest;

std::vector<int> g_order;
std::mutex g_order_mutex;
void CUDART_CB record_callback(cudaStream_t, cudaError_t status, void* data) {
  std::lock_guard<std::mutex> lock(g_order_mutex);
  g_order.push_back(status == cudaSuccess ? *static_cast<int*>(data) : -1);
}
void CUDART_CB record_host_fn(void* data) {
  std::lock_guard<std::mutex> lock(g_order_mutex);
  g_order.push_back(*static_cast<int*>(data));
}

TEST_F(RuntimeStreams, CallbacksAndHostFunctionsRunInStreamOrder) {
  g_order.clear();
  on_thread([] {
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    drvshim_fake_stream_hold(s, 1);  // queued work waits
    static int one = 1, two = 2, three = 3;
    EXPECT_EQ(cudaStreamAddCallback(s, record_callback, &one, 0), cudaSuccess);
    EXPECT_EQ(cudaLaunchHostFunc(s, record_host_fn, &two), cudaSuccess);
    EXPECT_EQ(cudaStreamAddCallback(s, record_callback, &three, 0), cudaSuccess);
    EXPECT_EQ(cudaStreamQuery(s), cudaErrorNotReady);
    EXPECT_TRUE(g_order.empty()) << "nothing runs before the stream gets there";
    EXPECT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(g_order, (std::vector<int>{1, 2, 3}));
    EXPECT_EQ(cudaStreamAddCallback(s, record_callback, &one, 1), cudaErrorInvalidValue) << "flags must be 0";
    unsigned flags = 9;
    EXPECT_EQ(cudaStreamGetFlags(s, &flags), cudaSuccess);
    EXPECT_EQ(flags, static_cast<unsigned>(cudaStreamNonBlocking));
    EXPECT_EQ(cudaStreamGetFlags(nullptr, &flags), cudaSuccess);
    EXPECT_EQ(flags, 0u);
    int device = -1;
    EXPECT_EQ(cudaStreamGetDevice(s, &device), cudaSuccess);
    EXPECT_EQ(device, 0);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  });
}

TEST_F(RuntimeStreams, PrioritiesAreClampedAndAttributesRoundTrip) {
  on_thread([] {
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithPriority(&s, cudaStreamDefault, -100), cudaSuccess);
    int priority = 0;
    EXPECT_EQ(cudaStreamGetPriority(s, &priority), cudaSuccess);
    EXPECT_EQ(priority, -5) << "clamped to the greatest priority";
    cudaStreamAttrValue v{};
    v.accessPolicyWindow.base_ptr = nullptr;
    v.accessPolicyWindow.num_bytes = 1 << 20;
    v.accessPolicyWindow.hitRatio = 0.6f;
    v.accessPolicyWindow.hitProp = cudaAccessPropertyPersisting;
    v.accessPolicyWindow.missProp = cudaAccessPropertyStreaming;
    EXPECT_EQ(cudaStreamSetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &v), cudaSuccess);
    cudaStreamAttrValue out{};
    EXPECT_EQ(cudaStreamGetAttribute(s, cudaStreamAttributeAccessPolicyWindow, &out), cudaSuccess);
    EXPECT_EQ(out.accessPolicyWindow.num_bytes, 1u << 20);
    EXPECT_EQ(out.accessPolicyWindow.hitProp, cudaAccessPropertyPersisting);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s), cudaErrorInvalidResourceHandle) << "destroyed already: the driver says so";
    EXPECT_EQ(drvshim_fake_take_misuse(), 1u) << "the dead handle reached the driver, as under cudart";
  });
}

TEST_F(RuntimeStreams, EventsFlagsTimingAndTheirErrors) {
  on_thread([] {
    cudaEvent_t timed = nullptr, untimed = nullptr, never = nullptr;
    ASSERT_EQ(cudaEventCreate(&timed), cudaSuccess);
    ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming | cudaEventBlockingSync), cudaSuccess);
    ASSERT_EQ(cudaEventCreate(&never), cudaSuccess);
    EXPECT_EQ(cudaEventCreateWithFlags(&never, cudaEventInterprocess), cudaErrorInvalidValue)
        << "interprocess needs cudaEventDisableTiming";
    EXPECT_EQ(cudaEventRecord(timed, nullptr), cudaSuccess);
    EXPECT_EQ(cudaEventRecord(untimed, cudaStreamPerThread), cudaSuccess);
    EXPECT_EQ(cudaEventSynchronize(timed), cudaSuccess);
    EXPECT_EQ(cudaEventQuery(untimed), cudaSuccess);
    float ms = -1.0f;
    EXPECT_EQ(cudaEventElapsedTime(&ms, timed, timed), cudaSuccess);
    EXPECT_EQ(ms, 0.0f);
    EXPECT_EQ(cudaEventElapsedTime(&ms, timed, untimed), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaEventElapsedTime(&ms, timed, never), cudaErrorInvalidResourceHandle) << "never recorded";
    EXPECT_EQ(cudaEventRecordWithFlags(timed, nullptr, cudaEventRecordExternal), cudaErrorNotSupported);
    EXPECT_EQ(cudaStreamWaitEvent(nullptr, timed, 0), cudaSuccess);
    for (cudaEvent_t e : {timed, untimed, never}) EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
    EXPECT_EQ(cudaEventQuery(timed), cudaErrorInvalidResourceHandle);
  });
}

// ---- execution --------------------------------------------------------------------------------

using RuntimeExecution = RuntimeCompatTest;

unsigned g_shared_bytes = 0;
bool g_cooperative_ran = false;

TEST_F(RuntimeExecution, AttributesOccupancyAndLaunchForms) {
  drvshim_fake_register_kernel("rt_big",
                               [](const drvshim_fake_launch* l, void**) { g_shared_bytes = l->shared_bytes; });
  drvshim_fake_register_kernel("rt_coop", [](const drvshim_fake_launch*, void**) { g_cooperative_ran = true; });
  Registered fatbin(FatbinBuilder().ptx(ptx_kernel("rt_big", 0) + ".visible .entry rt_coop(\n)\n{\nret;\n}\n").build());
  static const char big = 0, coop = 0;
  fatbin.function(&big, "rt_big");
  fatbin.function(&coop, "rt_coop");
  on_thread([] {
    cudaFuncAttributes attr{};
    EXPECT_EQ(cudaFuncGetAttributes(&attr, &big), cudaSuccess);
    EXPECT_EQ(attr.maxThreadsPerBlock, 1024);
    EXPECT_EQ(attr.numRegs, 32);
    EXPECT_EQ(attr.binaryVersion, 90);
    EXPECT_EQ(attr.maxDynamicSharedSizeBytes, 49152);
    const size_t bytes = 96 * 1024;
    EXPECT_EQ(cudaLaunchKernel(&big, dim3(1), dim3(32), nullptr, bytes, nullptr), cudaErrorInvalidValue)
        << "more than 48 KiB needs the opt-in";
    EXPECT_EQ(cudaFuncSetAttribute(&big, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes)),
              cudaSuccess);
    EXPECT_EQ(cudaLaunchKernel(&big, dim3(1), dim3(32), nullptr, bytes, nullptr), cudaSuccess);
    EXPECT_EQ(g_shared_bytes, bytes);
    EXPECT_EQ(cudaFuncGetAttributes(&attr, &big), cudaSuccess);
    EXPECT_EQ(attr.maxDynamicSharedSizeBytes, static_cast<int>(bytes));
    EXPECT_EQ(cudaFuncSetAttribute(&big, cudaFuncAttributeMaxDynamicSharedMemorySize, 512 * 1024),
              cudaErrorInvalidValue);
    EXPECT_EQ(cudaFuncSetAttribute(&big, static_cast<cudaFuncAttribute>(4), 1), cudaErrorInvalidValue) << "read-only";
    EXPECT_EQ(cudaFuncSetCacheConfig(&big, cudaFuncCachePreferShared), cudaSuccess);
    const char* name = nullptr;
    EXPECT_EQ(cudaFuncGetName(&name, &big), cudaSuccess);
    EXPECT_STREQ(name, "rt_big");
    int blocks = 0;
    EXPECT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, &coop, 256, 0), cudaSuccess);
    EXPECT_EQ(blocks, 8);
    EXPECT_EQ(cudaOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(&blocks, &coop, 1024, 0, cudaOccupancyDefault),
              cudaSuccess);
    EXPECT_EQ(blocks, 2);
    size_t dynamic = 0;
    EXPECT_EQ(cudaOccupancyAvailableDynamicSMemPerBlock(&dynamic, &coop, 2, 256), cudaSuccess);
    EXPECT_GT(dynamic, 0u);
    EXPECT_EQ(cudaLaunchCooperativeKernel(&coop, dim3(132 * 8), dim3(256), nullptr, 0, nullptr), cudaSuccess);
    EXPECT_TRUE(g_cooperative_ran);
    EXPECT_EQ(cudaLaunchCooperativeKernel(&coop, dim3(132 * 8 + 1), dim3(256), nullptr, 0, nullptr),
              cudaErrorCooperativeLaunchTooLarge);
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = 2;
    cluster.val.clusterDim.y = 1;
    cluster.val.clusterDim.z = 1;
    cudaLaunchConfig_t config{};
    config.gridDim = dim3(4);
    config.blockDim = dim3(64);
    config.attrs = &cluster;
    config.numAttrs = 1;
    EXPECT_EQ(cudaLaunchKernelExC(nullptr, &coop, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(cudaLaunchKernelExC(&config, &coop, nullptr), cudaSuccess);
    // Every other attribute goes to the driver as given (CUB launches merge
    // sort with programmatic stream serialization); the driver refuses a
    // number it does not know.
    cudaLaunchAttribute attrs[2]{};
    attrs[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attrs[0].val.programmaticStreamSerializationAllowed = 1;
    attrs[1].id = cudaLaunchAttributePriority;
    attrs[1].val.priority = -1;
    config.attrs = attrs;
    config.numAttrs = 2;
    const unsigned long long ex_before = drvshim_fake_call_count("cuLaunchKernelEx");
    EXPECT_EQ(cudaLaunchKernelExC(&config, &coop, nullptr), cudaSuccess);
    EXPECT_EQ(drvshim_fake_call_count("cuLaunchKernelEx"), ex_before + 1) << "the attributes need cuLaunchKernelEx";
    const int unnamed = 99;  // no cudaLaunchAttributeID names it
    std::memcpy(&attrs[1].id, &unnamed, sizeof unnamed);
    EXPECT_EQ(cudaLaunchKernelExC(&config, &coop, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
    config.attrs = nullptr;
    EXPECT_EQ(cudaLaunchKernelExC(&config, &coop, nullptr), cudaErrorInvalidValue) << "attrs null, numAttrs 2";
    config.numAttrs = 0;
    EXPECT_EQ(cudaLaunchKernelExC(&config, &coop, nullptr), cudaSuccess) << "no attributes at all";
    static const char unknown = 0;
    // As cudart 13.0: an address that is no kernel is an invalid handle, a null one an invalid function.
    EXPECT_EQ(cudaFuncGetAttributes(&attr, &unknown), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaLaunchKernel(&unknown, dim3(1), dim3(1), nullptr, 0, nullptr), cudaErrorInvalidResourceHandle);
    EXPECT_EQ(cudaFuncGetAttributes(&attr, nullptr), cudaErrorInvalidDeviceFunction);
  });
}

TEST_F(RuntimeExecution, ThePerThreadDefaultStreamEntryPointsUseIt) {
  drvshim_fake_register_kernel("rt_ptsz", [](const drvshim_fake_launch*, void**) {});
  Registered fatbin(FatbinBuilder().ptx(ptx_kernel("rt_ptsz", 0)).build());
  static const char stub = 0;
  fatbin.function(&stub, "rt_ptsz");
  trace::enable(true);
  on_thread([] {
    cudaKernel_t k = nullptr;
    ASSERT_EQ(__cudaGetKernel(&k, &stub), cudaSuccess);
    EXPECT_EQ(__cudaLaunchKernel_ptsz(k, dim3(1), dim3(1), nullptr, 0, nullptr), cudaSuccess);
    cudaEvent_t e = nullptr;
    ASSERT_EQ(cudaEventCreate(&e), cudaSuccess);
    EXPECT_EQ(cudaEventRecord_ptsz(e, nullptr), cudaSuccess);
    EXPECT_EQ(cudaStreamWaitEvent_ptsz(nullptr, e, 0), cudaSuccess);
    EXPECT_EQ(cudaLaunchHostFunc_ptsz(
                  nullptr, [](void*) {}, nullptr),
              cudaSuccess);
    EXPECT_EQ(cudaStreamQuery_ptsz(nullptr), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize_ptsz(nullptr), cudaSuccess);
    EXPECT_EQ(cudaEventDestroy(e), cudaSuccess);
  });
  // Each driver call names the stream (its argument at this index): CU_STREAM_PER_THREAD is 0x2, the
  // legacy stream 0x1 or 0.
  const std::map<std::string, std::size_t> stream_argument = {{"cuLaunchKernel", 8},    {"cuEventRecord", 1},
                                                              {"cuStreamWaitEvent", 0}, {"cuLaunchHostFunc", 0},
                                                              {"cuStreamQuery", 0},     {"cuStreamSynchronize", 0}};
  std::map<std::string, int> seen;
  for (const auto& r : trace::records()) {
    const auto it = stream_argument.find(r.api);
    if (it == stream_argument.end()) continue;
    ++seen[r.api];
    std::vector<std::string> args;
    for (std::size_t from = 0;;) {
      const std::size_t comma = r.args.find(", ", from);
      args.push_back(r.args.substr(from, comma - from));
      if (comma == std::string::npos) break;
      from = comma + 2;
    }
    ASSERT_GT(args.size(), it->second) << r.api << "(" << r.args << ")";
    EXPECT_EQ(args[it->second], "0x2") << r.api << "(" << r.args << ") on stream 0 of a _ptsz call";
  }
  for (const auto& [api, _] : stream_argument) EXPECT_GE(seen[api], 1) << api << " was not called";
}

// cudaStreamLegacy and cudaStreamPerThread name the driver's two default
// streams whichever form a program calls: the legacy stream's work stays
// ordered with the blocking streams, the per-thread stream's does not.
TEST_F(RuntimeExecution, TheNamedDefaultStreamsAreTheDriversInEitherForm) {
  trace::enable(true);
  on_thread([] {
    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 64), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(dev, 1, 64, cudaStreamLegacy), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync_ptsz(dev, 2, 64, cudaStreamLegacy), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync(dev, 3, 64, cudaStreamPerThread), cudaSuccess);
    EXPECT_EQ(cudaMemsetAsync_ptsz(dev, 4, 64, cudaStreamPerThread), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
  });
  std::vector<std::string> streams;
  for (const auto& r : trace::records()) {
    if (r.api.rfind("cuMemsetD8", 0) == 0) streams.push_back(r.args.substr(r.args.rfind(", ") + 2));
  }
  EXPECT_EQ(streams, (std::vector<std::string>{"0x1", "0x1", "0x2", "0x2"}));
}

// In a per-thread-default-stream program the synchronous copy and memset go
// on the thread's stream and return once it has run them: the host may read
// the destination at once.
TEST_F(RuntimeExecution, SynchronousCopiesOfAPerThreadProgramWaitForItsStream) {
  trace::enable(true);
  on_thread([] {
    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 64), cudaSuccess);
    std::vector<unsigned char> host(64, 7);
    EXPECT_EQ(cudaMemset_ptds(dev, 3, 64), cudaSuccess);
    EXPECT_EQ(cudaMemcpy_ptds(host.data(), dev, 64, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(host[63], 3);
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
  });
  // Each operation on CU_STREAM_PER_THREAD (0x2) is followed by a wait for that stream.
  std::vector<std::string> calls;
  for (const auto& r : trace::records()) {
    if (r.api.rfind("cuMemsetD8", 0) == 0 || r.api.rfind("cuMemcpy", 0) == 0 || r.api == "cuStreamSynchronize") {
      calls.push_back(r.api + "(" + r.args + ")");
    }
  }
  ASSERT_EQ(calls.size(), 4u) << ::testing::PrintToString(calls);
  EXPECT_EQ(calls[0].rfind("cuMemsetD8Async(", 0), 0u) << calls[0];
  EXPECT_NE(calls[0].find(", 0x2)"), std::string::npos) << calls[0];
  EXPECT_EQ(calls[1], "cuStreamSynchronize(0x2)");
  EXPECT_EQ(calls[2].rfind("cuMemcpyDtoHAsync", 0), 0u) << calls[2];
  EXPECT_NE(calls[2].find(", 0x2)"), std::string::npos) << calls[2];
  EXPECT_EQ(calls[3], "cuStreamSynchronize(0x2)");
}

// ---- symbols and managed variables ---------------------------------------------------------------

using RuntimeSymbols = RuntimeCompatTest;

TEST_F(RuntimeSymbols, DeviceConstantAndManagedVariables) {
  const std::string globals =
      ".global .align 4 .u32 counter = 11;\n.const .align 4 .b8 coeffs[16];\n"
      ".global .attribute(.managed) .align 4 .u32 total = 5;\n";
  Registered fatbin(FatbinBuilder().ptx(ptx_kernel("rt_sym", 0, globals)).build());
  static int counter_shadow = 0;  // nvcc's host shadows
  static float coeffs_shadow[4] = {};
  static int* total_ptr = nullptr;  // __managed__: the host's pointer to it
  __cudaRegisterVar(fatbin.handle(), reinterpret_cast<char*>(&counter_shadow), const_cast<char*>("counter"), "counter",
                    0, sizeof(int), 0, 0);
  __cudaRegisterVar(fatbin.handle(), reinterpret_cast<char*>(coeffs_shadow), const_cast<char*>("coeffs"), "coeffs", 0,
                    sizeof coeffs_shadow, 1, 0);
  __cudaRegisterManagedVar(fatbin.handle(), reinterpret_cast<void**>(&total_ptr), const_cast<char*>("total"), "total",
                           0, sizeof(int), 0, 0);
  on_thread([&fatbin] {
    int counter = 0;
    EXPECT_EQ(cudaMemcpyFromSymbol(&counter, &counter_shadow, sizeof counter), cudaSuccess);
    EXPECT_EQ(counter, 11) << "the variable's initial value";
    const float c[4] = {1, 2, 3, 4};
    EXPECT_EQ(cudaMemcpyToSymbol(coeffs_shadow, c, sizeof c), cudaSuccess);
    float back[2] = {};
    EXPECT_EQ(
        cudaMemcpyFromSymbolAsync(back, coeffs_shadow, sizeof back, 2 * sizeof(float), cudaMemcpyDeviceToHost, nullptr),
        cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(nullptr), cudaSuccess);
    EXPECT_EQ(back[0], 3.0f);
    EXPECT_EQ(back[1], 4.0f);
    EXPECT_EQ(cudaMemcpyToSymbol(coeffs_shadow, c, sizeof c, 4), cudaErrorInvalidValue) << "past its end";
    EXPECT_EQ(cudaMemcpyToSymbol(coeffs_shadow, c, 4, 0, cudaMemcpyDeviceToHost), cudaErrorInvalidMemcpyDirection);
    static int not_a_symbol = 0;
    EXPECT_EQ(cudaMemcpyToSymbol(&not_a_symbol, c, 4), cudaErrorInvalidSymbol);
    void* address = nullptr;
    size_t size = 0;
    EXPECT_EQ(cudaGetSymbolAddress(&address, &counter_shadow), cudaSuccess);
    EXPECT_EQ(cudaGetSymbolSize(&size, coeffs_shadow), cudaSuccess);
    EXPECT_EQ(size, 16u);
    EXPECT_EQ(cudaMemset(address, 0, sizeof(int)), cudaSuccess);
    EXPECT_EQ(cudaMemcpyFromSymbol(&counter, &counter_shadow, sizeof counter), cudaSuccess);
    EXPECT_EQ(counter, 0);
    // nvcc's __nv_init_managed_rt: once, before the first host access.
    EXPECT_EQ(total_ptr, nullptr);
    EXPECT_EQ(__cudaInitModule(fatbin.handle()), 1);
    ASSERT_NE(total_ptr, nullptr) << "the managed variable's host pointer is valid";
    EXPECT_EQ(*total_ptr, 5);
    *total_ptr = 9;
    int total = 0;
    EXPECT_EQ(cudaMemcpyFromSymbol(&total, &total_ptr, sizeof total), cudaSuccess);
    EXPECT_EQ(total, 9);
  });
}

// ---- peer access -------------------------------------------------------------------------------

class RuntimePeer : public RuntimeCompatTest {
 protected:
  const char* profile() const override { return "dual"; }
};

TEST_F(RuntimePeer, EnableDisableAttributesAndCopies) {
  on_thread([] {
    int can = -1;
    EXPECT_EQ(cudaDeviceCanAccessPeer(&can, 0, 1), cudaSuccess);
    EXPECT_EQ(can, 1);
    EXPECT_EQ(cudaDeviceCanAccessPeer(&can, 0, 0), cudaSuccess);
    EXPECT_EQ(can, 0) << "a device is not its own peer";
    EXPECT_EQ(cudaDeviceCanAccessPeer(&can, 0, 2), cudaErrorInvalidDevice);
    int value = -1;
    EXPECT_EQ(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrAccessSupported, 0, 1), cudaSuccess);
    EXPECT_EQ(value, 1);
    EXPECT_EQ(cudaDeviceGetP2PAttribute(&value, cudaDevP2PAttrPerformanceRank, 0, 1), cudaSuccess);
    EXPECT_EQ(value, 0);
    EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
    EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaSuccess);
    EXPECT_EQ(drvshim_fake_primary_active(1), 1) << "the peer's primary context is retained";
    EXPECT_EQ(cudaDeviceEnablePeerAccess(1, 0), cudaErrorPeerAccessAlreadyEnabled);
    EXPECT_EQ(cudaDeviceEnablePeerAccess(0, 0), cudaErrorPeerAccessUnsupported) << "the current device itself";
    EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaSuccess);
    EXPECT_EQ(cudaDeviceDisablePeerAccess(1), cudaErrorPeerAccessNotEnabled);
    int *a = nullptr, *b = nullptr;
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&a), 64), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&b), 64), cudaSuccess);
    ASSERT_EQ(cudaMemset(b, 0, 64), cudaSuccess);
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    ASSERT_EQ(cudaMemset(a, 0x11, 64), cudaSuccess);
    EXPECT_EQ(cudaMemcpyPeer(b, 1, a, 0, 64), cudaSuccess);
    EXPECT_EQ(cudaMemcpyPeerAsync(b, 1, a, 0, 0, nullptr), cudaSuccess);
    int host[16] = {};
    EXPECT_EQ(cudaMemcpy(host, b, 64, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(host[15], 0x11111111);
    EXPECT_EQ(cudaFree(a), cudaSuccess);
    EXPECT_EQ(cudaFree(b), cudaSuccess);
  });
}

// ---- outside the subset -------------------------------------------------------------------------

TEST_F(RuntimeCompatTest, ACallOutsideTheSubsetFailsNamingItself) {
  std::vector<std::string> errors;
  log::set_sink([&](log::Level level, std::string_view m) {
    if (level == log::Level::error) errors.emplace_back(m);
  });
  on_thread([] {
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaGraphCreate(&graph, 0), cudaErrorNotSupported);
    EXPECT_NE(rt::last_error_detail().find("cudaGraphCreate is not part of libdrvshim_cudart's subset"),
              std::string::npos)
        << rt::last_error_detail();
    EXPECT_EQ(cudaGetLastError(), cudaErrorNotSupported);
    EXPECT_EQ(cudaGraphDebugDotPrint(graph, "graph.dot", 0), cudaErrorNotSupported);
  });
  log::set_sink({});
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors.front().find("cudaGraphCreate is outside libdrvshim_cudart's subset"), std::string::npos)
      << errors.front();
}

}  // namespace
