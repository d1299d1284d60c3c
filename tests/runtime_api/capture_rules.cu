// SPDX-License-Identifier: Apache-2.0
// What a capture in global mode makes of each kind of runtime call on the
// capturing stream, and the edges of the capture queries: the return code
// and whether the capture survived, one line per call. A transcript, not a
// test of its own: the GPU machine diffs it between the real cudart and
// libdrvshim_cudart (tools/gpu/run-runtime-api.sh); on the fake it runs to
// the end.
#include <cstdio>
#include <cstring>

#include "helper_samples.cuh"

__global__ void touch_first(int* p) { *p = 1; }

namespace {

cudaStream_t s;  // captures (non-blocking)
cudaStream_t t;  // does not (blocking)

const char* text(cudaStreamCaptureStatus st) {
  switch (st) {
    case cudaStreamCaptureStatusNone: return "none";
    case cudaStreamCaptureStatusActive: return "active";
    case cudaStreamCaptureStatusInvalidated: return "invalidated";
  }
  return "?";
}

// Ends whatever capture `s` has and begins a fresh one in global mode.
void fresh_capture() {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  cudaStreamIsCapturing(s, &st);
  if (st != cudaStreamCaptureStatusNone) {
    cudaGraph_t g = nullptr;
    if (cudaStreamEndCapture(s, &g) == cudaSuccess && g != nullptr) cudaGraphDestroy(g);
  }
  cudaGetLastError();
  cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal);
}

// One call made during a fresh capture: its code, the last error it left,
// and the capture afterwards.
void during(const char* what, cudaError_t r) {
  const cudaError_t last = cudaGetLastError();
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  const cudaError_t q = cudaStreamIsCapturing(s, &st);
  std::printf("%-44s %-36s last %-36s capture %s\n", what, cudaGetErrorName(r), cudaGetErrorName(last),
              q == cudaSuccess ? text(st) : cudaGetErrorName(q));
}

const char* set_or_null(const void* p) { return p == nullptr ? "null" : "set"; }

void host_function(void*) {}
void CUDART_CB stream_callback(cudaStream_t, cudaError_t, void*) {}

}  // namespace

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  checkCudaErrors(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  checkCudaErrors(cudaStreamCreate(&t));
  void *pinned_a = nullptr, *pinned_b = nullptr;
  int *dev = nullptr, *dev2 = nullptr, *dev3 = nullptr;
  static char pageable_a[64], pageable_b[64];
  checkCudaErrors(cudaMallocHost(&pinned_a, 64));
  checkCudaErrors(cudaMallocHost(&pinned_b, 64));
  checkCudaErrors(cudaMalloc(&dev, 64));
  checkCudaErrors(cudaMalloc(&dev2, 64));
  checkCudaErrors(cudaMalloc(&dev3, 64));
  cudaEvent_t e;
  checkCudaErrors(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
  checkCudaErrors(cudaEventRecord(e, t));
  checkCudaErrors(cudaDeviceSynchronize());

  std::printf("-- calls on the capturing stream\n");
  fresh_capture();
  during("cudaLaunchHostFunc", cudaLaunchHostFunc(s, host_function, nullptr));
  fresh_capture();
  during("cudaStreamAddCallback", cudaStreamAddCallback(s, stream_callback, nullptr, 0));
  fresh_capture();
  during("cudaMemcpyAsync host to host, pinned", cudaMemcpyAsync(pinned_a, pinned_b, 64, cudaMemcpyHostToHost, s));
  fresh_capture();
  during("cudaMemcpyAsync default, pinned", cudaMemcpyAsync(pinned_a, pinned_b, 64, cudaMemcpyDefault, s));
  fresh_capture();
  during("cudaMemcpyAsync host to host, pageable",
         cudaMemcpyAsync(pageable_a, pageable_b, 64, cudaMemcpyHostToHost, s));
  fresh_capture();
  during("cudaMemcpyAsync device to pageable", cudaMemcpyAsync(pageable_a, dev, 64, cudaMemcpyDeviceToHost, s));
  fresh_capture();
  during("cudaMemsetAsync", cudaMemsetAsync(dev, 0, 64, s));
  fresh_capture();
  during("cudaEventRecordWithFlags external", cudaEventRecordWithFlags(e, s, cudaEventRecordExternal));
  fresh_capture();
  during("cudaStreamWaitEvent external", cudaStreamWaitEvent(s, e, cudaEventWaitExternal));
  fresh_capture();
  during("cudaStreamSynchronize", cudaStreamSynchronize(s));
  fresh_capture();
  during("cudaStreamQuery", cudaStreamQuery(s));
  fresh_capture();
  int* async = nullptr;
  during("cudaMallocAsync", cudaMallocAsync(&async, 64, s));
  during("cudaFreeAsync of it", cudaFreeAsync(async, s));
  fresh_capture();
  during("cudaFreeAsync of cudaMalloc memory, other stream", cudaFreeAsync(dev2, t));
  fresh_capture();
  during("cudaFree", cudaFree(dev3));
  fresh_capture();
  during("cudaMalloc", cudaMalloc(&async, 64));
  fresh_capture();
  during("cudaEventQuery", cudaEventQuery(e));
  fresh_capture();
  during("cudaDeviceSynchronize", cudaDeviceSynchronize());
  fresh_capture();
  touch_first<<<1, 1, 0, cudaStreamLegacy>>>(dev);
  during("a launch on the legacy stream", cudaGetLastError());

  std::printf("-- the capture's info\n");
  fresh_capture();
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  const cudaGraphNode_t* deps = reinterpret_cast<const cudaGraphNode_t*>(0x55);
  size_t count = 77;
  cudaError_t r = cudaStreamGetCaptureInfo(s, &st, nullptr, nullptr, &deps, nullptr, &count);
  std::printf("nothing captured yet: %s, %s, dependencies %s, count %zu\n", cudaGetErrorName(r), text(st),
              set_or_null(deps), count);
  unsigned long long id = 7;
  cudaGraph_t g = reinterpret_cast<cudaGraph_t>(0x55);
  deps = reinterpret_cast<const cudaGraphNode_t*>(0x55);
  count = 77;
  r = cudaStreamGetCaptureInfo(t, &st, &id, &g, &deps, nullptr, &count);
  std::printf("a stream that does not capture: %s, %s, id %llu, graph %s, dependencies %s, count %zu\n",
              cudaGetErrorName(r), text(st), id, set_or_null(g), set_or_null(deps), count);
  checkCudaErrors(cudaMemsetAsync(dev, 0, 8, s));
  checkCudaErrors(cudaMemsetAsync(dev, 1, 8, s));
  checkCudaErrors(cudaStreamEndCapture(s, &g));
  cudaGraphNode_t nodes[3];
  std::memset(static_cast<void*>(nodes), 0x5a, sizeof nodes);
  count = 1;
  r = cudaGraphGetNodes(g, nodes, &count);
  std::printf("cudaGraphGetNodes, room for 1 of 2: %s, count %zu\n", cudaGetErrorName(r), count);
  count = 3;
  r = cudaGraphGetNodes(g, nodes, &count);
  std::printf("cudaGraphGetNodes, room for 3 of 2: %s, count %zu, third %s\n", cudaGetErrorName(r), count,
              set_or_null(nodes[2]));
  checkCudaErrors(cudaGraphDestroy(g));

  std::printf("-- ending captures\n");
  g = reinterpret_cast<cudaGraph_t>(0x55);
  r = cudaStreamEndCapture(s, &g);
  std::printf("a stream that does not capture: %s, graph %s\n", cudaGetErrorName(r), set_or_null(g));
  cudaGetLastError();
  fresh_capture();
  checkCudaErrors(cudaEventRecord(e, s));
  checkCudaErrors(cudaStreamWaitEvent(t, e, 0));
  checkCudaErrors(cudaMemsetAsync(dev, 1, 8, t));
  g = reinterpret_cast<cudaGraph_t>(0x55);
  r = cudaStreamEndCapture(s, &g);
  std::printf("a joined stream not joined back: %s, graph %s\n", cudaGetErrorName(r), set_or_null(g));
  cudaGetLastError();
  cudaStreamCaptureStatus tst = cudaStreamCaptureStatusNone;
  r = cudaStreamIsCapturing(t, &tst);
  std::printf("the joined stream afterwards: %s, %s\n", cudaGetErrorName(r), text(tst));
  cudaGetLastError();

  checkCudaErrors(cudaDeviceSynchronize());
  cudaFree(dev);
  cudaFree(dev2);
  cudaFree(dev3);
  cudaFreeHost(pinned_a);
  cudaFreeHost(pinned_b);
  cudaEventDestroy(e);
  cudaStreamDestroy(s);
  cudaStreamDestroy(t);
  std::printf("capture_rules: done\n");
  return 0;
}
