// SPDX-License-Identifier: Apache-2.0
// Stream capture and graphs through libdrvshim_cudart against the fake: what
// a capture records and a launch replays, the thread's capture mode, the
// capture's info, node lists, handles made by the driver API, and the
// answers to bad input.
#include <atomic>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "rt_fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

using RuntimeGraphs = RuntimeCompatTest;

// Captured work runs only when the graph is launched, once per launch, and
// the program's graph outlives neither its executable graph's launches nor
// leaves anything behind (the fixture checks that no graph leaked).
TEST_F(RuntimeGraphs, CapturedCopiesAndMemsetsRunOncePerLaunch) {
  on_thread([] {
    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 64), cudaSuccess);
    ASSERT_EQ(cudaMemset(dev, 0, 64), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(dev, 7, 16, s), cudaSuccess);
    ASSERT_EQ(cudaMemcpyAsync(static_cast<char*>(dev) + 32, dev, 16, cudaMemcpyDeviceToDevice, s), cudaSuccess);
    const unsigned long long memsets = drvshim_fake_call_count("cuMemsetD8Async");
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    unsigned char host[64] = {};
    ASSERT_EQ(cudaMemcpy(host, dev, 64, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(host[0], 0) << "captured work does not run";
    EXPECT_EQ(host[32], 0);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(host, dev, 64, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(host[0], 7);
    EXPECT_EQ(host[15], 7);
    EXPECT_EQ(host[16], 0);
    EXPECT_EQ(host[32], 7) << "the copy ran after the memset, as captured";
    EXPECT_EQ(drvshim_fake_call_count("cuMemsetD8Async"), memsets) << "a launch calls no memset of its own";
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
  });
}

// PyTorch's allocator: in relaxed mode an allocation during another stream's
// capture succeeds; in global mode it is refused and breaks the capture.
TEST_F(RuntimeGraphs, TheThreadsModeDecidesWhetherAnAllocationBreaksACapture) {
  on_thread([] {
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
    ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
    EXPECT_EQ(mode, cudaStreamCaptureModeGlobal) << "a thread starts in global mode";
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 256), cudaSuccess);
    EXPECT_EQ(cudaFree(p), cudaSuccess);
    ASSERT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaSuccess);
    EXPECT_EQ(mode, cudaStreamCaptureModeRelaxed);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusActive);

    // Another thread's mode is its own: it starts global.
    std::thread([] {
      cudaStreamCaptureMode m = cudaStreamCaptureModeGlobal;
      EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&m), cudaSuccess);
      EXPECT_EQ(m, cudaStreamCaptureModeGlobal);
    }).join();

    EXPECT_EQ(cudaMalloc(&p, 256), cudaErrorStreamCaptureUnsupported);
    EXPECT_EQ(cudaGetLastError(), cudaErrorStreamCaptureUnsupported);
    ASSERT_EQ(cudaStreamIsCapturing(s, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusInvalidated);
    cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(0x10);
    EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    EXPECT_EQ(graph, nullptr) << "an invalidated capture gives no graph";
    EXPECT_NE(rt::last_error_detail().find("cuStreamEndCapture"), std::string::npos) << rt::last_error_detail();
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  });
}

// The legacy stream: never captured, and asking about it while a blocking
// stream captures is an error that leaves the capture as it was.
TEST_F(RuntimeGraphs, TheLegacyStreamIsNeverCapturedAndAskingAboutItKeepsTheCapture) {
  on_thread([] {
    EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
    EXPECT_NE(rt::last_error_detail().find("legacy default stream cannot be captured"), std::string::npos)
        << rt::last_error_detail();
    EXPECT_EQ(cudaStreamBeginCapture(cudaStreamLegacy, cudaStreamCaptureModeRelaxed),
              cudaErrorStreamCaptureUnsupported);
    // In a --default-stream per-thread program, 0 is the per-thread stream:
    // not the legacy one (the fake cannot capture it, but it is asked).
    EXPECT_NE(cudaStreamBeginCapture_ptsz(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
    cudaGetLastError();
    cudaStream_t blocking = nullptr;
    ASSERT_EQ(cudaStreamCreate(&blocking), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeThreadLocal), cudaSuccess);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    EXPECT_EQ(cudaStreamIsCapturing(nullptr, &status), cudaErrorStreamCaptureImplicit);
    EXPECT_EQ(cudaStreamIsCapturing(blocking, &status), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusActive);
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamEndCapture(blocking, &graph), cudaSuccess);
    EXPECT_NE(graph, nullptr);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    EXPECT_EQ(cudaStreamEndCapture(blocking, &graph), cudaErrorIllegalState) << "not capturing any more";
    EXPECT_EQ(cudaStreamDestroy(blocking), cudaSuccess);
  });
}

// The capture's info: its id and graph, and the node the next operation will
// depend on, which is the graph's node.
TEST_F(RuntimeGraphs, CaptureInfoNamesTheGraphAndTheNodeTheNextOperationDependsOn) {
  on_thread([] {
    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 64), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
    unsigned long long id = 1;
    cudaGraph_t building = nullptr;
    ASSERT_EQ(cudaStreamGetCaptureInfo(s, &status, &id, &building), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusNone);
    EXPECT_EQ(id, 0u);
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(dev, 1, 64, s), cudaSuccess);
    const cudaGraphNode_t* deps = nullptr;
    const cudaGraphEdgeData* edges = nullptr;
    size_t count = 0;
    ASSERT_EQ(cudaStreamGetCaptureInfo(s, &status, &id, &building, &deps, &edges, &count), cudaSuccess);
    EXPECT_EQ(status, cudaStreamCaptureStatusActive);
    EXPECT_NE(id, 0u);
    ASSERT_NE(building, nullptr);
    ASSERT_EQ(count, 1u);
    ASSERT_NE(deps, nullptr);
    cudaGraphNode_t nodes[2] = {};
    size_t n = 2;
    ASSERT_EQ(cudaGraphGetNodes(building, nodes, &n), cudaSuccess);
    EXPECT_EQ(n, 1u);
    EXPECT_EQ(nodes[0], deps[0]) << "the memset's node";
    EXPECT_EQ(cudaStreamGetCaptureInfo(s, &status, nullptr, nullptr, nullptr, &edges, &count), cudaErrorInvalidValue)
        << "edges without the dependencies they describe";
    EXPECT_NE(rt::last_error_detail().find("edgeData_out without dependencies_out"), std::string::npos)
        << rt::last_error_detail();
    EXPECT_EQ(cudaStreamGetCaptureInfo(s, nullptr), cudaErrorInvalidValue);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    EXPECT_EQ(graph, building) << "the graph the capture was building";
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
  });
}

// cudaGraphGetNodes as the driver answers: the count alone, as many as fit,
// null past the last node.
TEST_F(RuntimeGraphs, GraphNodesAreListedAsManyAsFitWithNullPastTheLast) {
  on_thread([] {
    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 64), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    for (int i = 0; i < 3; ++i) ASSERT_EQ(cudaMemsetAsync(dev, i, 64, s), cudaSuccess);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    size_t n = 0;
    ASSERT_EQ(cudaGraphGetNodes(graph, nullptr, &n), cudaSuccess);
    EXPECT_EQ(n, 3u);
    cudaGraphNode_t nodes[5];
    std::memset(static_cast<void*>(nodes), 0x5a, sizeof nodes);
    n = 2;
    ASSERT_EQ(cudaGraphGetNodes(graph, nodes, &n), cudaSuccess);
    EXPECT_EQ(n, 2u);
    EXPECT_NE(nodes[1], nullptr);
    cudaGraphNode_t untouched;
    std::memset(static_cast<void*>(&untouched), 0x5a, sizeof untouched);
    EXPECT_EQ(nodes[2], untouched) << "nothing written past the capacity";
    n = 5;
    ASSERT_EQ(cudaGraphGetNodes(graph, nodes, &n), cudaSuccess);
    EXPECT_EQ(n, 3u);
    EXPECT_EQ(nodes[3], nullptr);
    EXPECT_EQ(nodes[4], nullptr);
    EXPECT_EQ(cudaGraphGetNodes(graph, nodes, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGraphGetNodes(nullptr, nodes, &n), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
  });
}

// An executable graph launches on any stream of its context: the per-thread
// default stream by name, and 0 in a per-thread (_ptsz) entry point.
TEST_F(RuntimeGraphs, AnExecutableGraphLaunchesOnThePerThreadStream) {
  on_thread([] {
    void* dev = nullptr;
    ASSERT_EQ(cudaMalloc(&dev, 64), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeRelaxed), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(dev, 3, 64, s), cudaSuccess);
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiateWithFlags(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphUpload(exec, s), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, cudaStreamPerThread), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch_ptsz(exec, nullptr), cudaSuccess) << "0 is the per-thread stream here";
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    unsigned char host[64] = {};
    ASSERT_EQ(cudaMemcpy(host, dev, 64, cudaMemcpyDeviceToHost), cudaSuccess);
    EXPECT_EQ(host[63], 3);
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaFree(dev), cudaSuccess);
  });
}

// Bad input: each refusal names what was wrong and what is accepted, and
// records the error as the last one.
TEST_F(RuntimeGraphs, BadInputIsRefusedNamingTheArgument) {
  on_thread([] {
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
    EXPECT_EQ(cudaStreamBeginCapture(s, static_cast<cudaStreamCaptureMode>(3)), cudaErrorInvalidValue);
    EXPECT_NE(rt::last_error_detail().find("capture mode 3: cudaStreamCaptureModeGlobal (0)"), std::string::npos)
        << rt::last_error_detail();
    cudaStreamCaptureMode mode = static_cast<cudaStreamCaptureMode>(3);
    EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(&mode), cudaErrorInvalidValue);
    EXPECT_EQ(mode, static_cast<cudaStreamCaptureMode>(3)) << "unchanged";
    EXPECT_EQ(cudaThreadExchangeStreamCaptureMode(nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(cudaStreamEndCapture(s, nullptr), cudaErrorInvalidValue);
    EXPECT_NE(rt::last_error_detail().find("pGraph"), std::string::npos) << rt::last_error_detail();
    EXPECT_EQ(cudaStreamIsCapturing(s, nullptr), cudaErrorInvalidValue);
    cudaGraphExec_t exec = nullptr;
    EXPECT_EQ(cudaGraphInstantiate(&exec, nullptr, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGraphInstantiate(nullptr, nullptr, 0), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGraphLaunch(nullptr, s), cudaErrorInvalidValue);
    EXPECT_NE(rt::last_error_detail().find("graphExec"), std::string::npos) << rt::last_error_detail();
    EXPECT_EQ(cudaGraphUpload(nullptr, s), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGraphDestroy(nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGraphExecDestroy(nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
    EXPECT_EQ(cudaStreamGetId(s, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  });
}

// Stream ids: distinct per stream, stable, also for the default streams.
TEST_F(RuntimeGraphs, StreamIdsAreDistinctAndStable) {
  on_thread([] {
    cudaStream_t a = nullptr, b = nullptr;
    ASSERT_EQ(cudaStreamCreate(&a), cudaSuccess);
    ASSERT_EQ(cudaStreamCreate(&b), cudaSuccess);
    unsigned long long ia = 0, ib = 0, ia2 = 0, legacy = 0, per_thread = 0;
    ASSERT_EQ(cudaStreamGetId(a, &ia), cudaSuccess);
    ASSERT_EQ(cudaStreamGetId(b, &ib), cudaSuccess);
    ASSERT_EQ(cudaStreamGetId(a, &ia2), cudaSuccess);
    ASSERT_EQ(cudaStreamGetId(nullptr, &legacy), cudaSuccess);
    ASSERT_EQ(cudaStreamGetId(cudaStreamPerThread, &per_thread), cudaSuccess);
    EXPECT_NE(ia, ib);
    EXPECT_EQ(ia, ia2);
    EXPECT_NE(legacy, per_thread);
    EXPECT_NE(legacy, ia);
    EXPECT_EQ(cudaStreamDestroy(a), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(b), cudaSuccess);
  });
}

// The driver's functions by name, as PyTorch and CUTLASS ask for them: the
// pointer is libcuda's and callable; an unknown name is an answer, not an
// error; a version above the driver's is refused and leaves the pointer.
TEST_F(RuntimeGraphs, DriverEntryPointsAreTheDriversFunctions) {
  on_thread([] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
    ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuDriverGetVersion", &fn, 12000, cudaEnableDefault, &status),
              cudaSuccess);
    EXPECT_EQ(status, cudaDriverEntryPointSuccess);
    ASSERT_NE(fn, nullptr);
    using GetVersion = int (*)(int*);
    GetVersion get = nullptr;
    std::memcpy(&get, &fn, sizeof get);
    int version = 0;
    EXPECT_EQ(get(&version), 0);
    int runtime_view = 0;
    EXPECT_EQ(cudaDriverGetVersion(&runtime_view), cudaSuccess);
    EXPECT_EQ(version, runtime_view);

    ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuNoSuchFunction", &fn, 12000, cudaEnableDefault, &status),
              cudaSuccess);
    EXPECT_EQ(fn, nullptr);
    EXPECT_EQ(status, cudaDriverEntryPointSymbolNotFound);
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "an unknown name is no error";
    ASSERT_EQ(cudaGetDriverEntryPointByVersion("cuMemAllocAsync", &fn, 11000, cudaEnableDefault, &status), cudaSuccess);
    EXPECT_EQ(status, cudaDriverEntryPointVersionNotSufficent);

    void* kept = reinterpret_cast<void*>(0x1234);
    EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuMemAlloc", &kept, 99000, cudaEnableDefault, nullptr),
              cudaErrorInvalidValue);
    EXPECT_EQ(kept, reinterpret_cast<void*>(0x1234)) << "left as it was";
    EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuMemAlloc", &fn, 12000, 4, nullptr), cudaErrorInvalidValue);
    EXPECT_NE(rt::last_error_detail().find("cudaEnablePerThreadDefaultStream (2)"), std::string::npos)
        << rt::last_error_detail();
    EXPECT_EQ(cudaGetDriverEntryPointByVersion(nullptr, &fn, 12000, 0, nullptr), cudaErrorInvalidValue);
    EXPECT_EQ(cudaGetDriverEntryPointByVersion("cuMemAlloc", nullptr, 12000, 0, nullptr), cudaErrorInvalidValue);
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
    ASSERT_EQ(cudaGetDriverEntryPoint("cuMemAlloc", &fn, cudaEnableDefault, &status), cudaSuccess);
#pragma GCC diagnostic pop
    EXPECT_NE(fn, nullptr) << "at the runtime's own version";
  });
}

// A host function is captured and runs at each replay; a stream callback,
// which runs exactly once, is refused during a capture.
TEST_F(RuntimeGraphs, HostFunctionsAreCapturedAndStreamCallbacksRefused) {
  on_thread([] {
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    static std::atomic<int> runs{0};
    runs = 0;
    ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
    ASSERT_EQ(cudaLaunchHostFunc(
                  s, [](void*) { runs.fetch_add(1); }, nullptr),
              cudaSuccess);
    EXPECT_EQ(cudaStreamAddCallback(
                  s, [](cudaStream_t, cudaError_t, void*) {}, nullptr, 0),
              cudaErrorStreamCaptureUnsupported);
    EXPECT_NE(rt::last_error_detail().find("use cudaLaunchHostFunc"), std::string::npos) << rt::last_error_detail();
    cudaGraph_t graph = nullptr;
    ASSERT_EQ(cudaStreamEndCapture(s, &graph), cudaSuccess);
    EXPECT_EQ(runs.load(), 0) << "captured, not run";
    cudaGraphExec_t exec = nullptr;
    ASSERT_EQ(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaGraphLaunch(exec, s), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
    EXPECT_EQ(runs.load(), 2);
    EXPECT_EQ(cudaGraphExecDestroy(exec), cudaSuccess);
    EXPECT_EQ(cudaGraphDestroy(graph), cudaSuccess);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
  });
}

// A free the capture mode refuses leaves the memory allocated and the
// runtime's record in place: the program frees it once the capture is over,
// or cudaDeviceReset does.
TEST_F(RuntimeGraphs, AFreeRefusedDuringACaptureCanBeRepeatedAfterIt) {
  // Nothing may try to free the memory behind the program's back (a record
  // dropped on the refusal would, and log the driver's refusal).
  std::vector<std::string> warnings;
  std::mutex warnings_mutex;
  log::set_sink([&](log::Level level, std::string_view m) {
    if (level < log::Level::warn) return;
    std::lock_guard<std::mutex> lock(warnings_mutex);
    warnings.emplace_back(m);
  });
  on_thread([] {
    void* first = nullptr;
    void* second = nullptr;
    void* host = nullptr;
    ASSERT_EQ(cudaMalloc(&first, 256), cudaSuccess);
    ASSERT_EQ(cudaMalloc(&second, 256), cudaSuccess);
    ASSERT_EQ(cudaMallocHost(&host, 256), cudaSuccess);
    cudaStream_t s = nullptr;
    ASSERT_EQ(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), cudaSuccess);
    cudaGraph_t graph = nullptr;
    for (void* p : {first, second}) {
      ASSERT_EQ(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal), cudaSuccess);
      EXPECT_EQ(cudaFree(p), cudaErrorStreamCaptureUnsupported);
      EXPECT_EQ(cudaStreamEndCapture(s, &graph), cudaErrorStreamCaptureInvalidated);
    }
    EXPECT_EQ(drvshim_fake_live_device_allocations(), 2) << "still allocated";
    cudaPointerAttributes attributes{};
    ASSERT_EQ(cudaPointerGetAttributes(&attributes, first), cudaSuccess);
    EXPECT_EQ(attributes.type, cudaMemoryTypeDevice);
    EXPECT_EQ(cudaFree(first), cudaSuccess);
    EXPECT_EQ(drvshim_fake_live_device_allocations(), 1);
    EXPECT_EQ(cudaFreeHost(host), cudaSuccess);
    EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 0);
    EXPECT_EQ(cudaStreamDestroy(s), cudaSuccess);
    EXPECT_EQ(cudaDeviceReset(), cudaSuccess);
    EXPECT_EQ(drvshim_fake_live_device_allocations(), 0) << "the reset freed what the runtime still knew";
  });
  log::set_sink({});
  for (const std::string& w : warnings) EXPECT_EQ(w.find("cuMemFree"), std::string::npos) << w;
}

}  // namespace
