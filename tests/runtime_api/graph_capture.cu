// SPDX-License-Identifier: Apache-2.0
// Stream capture and graphs as PyTorch uses them: a capture in global mode
// of kernels, a memset and a copy; the question PyTorch's allocator asks
// (cudaStreamIsCapturing) and its relaxed-mode allocation during a capture;
// the capture's info; the graph's nodes; instantiate, upload and launch it
// three times; then the rules: the legacy stream during a blocking capture,
// an allocation that breaks a global capture, ending a capture that is not
// one, and stream ids.
#include "helper_samples.cuh"

__global__ void increment(int* p, int n, int by) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) p[i] += by;
}

namespace {

int failures = 0;

void expect(bool ok, const char* what) {
  std::printf("%s: %s\n", what, ok ? "yes" : "NO");
  if (!ok) ++failures;
}

void expect_code(cudaError_t got, cudaError_t want, const char* what) {
  std::printf("%s: %s\n", what, cudaGetErrorName(got));
  if (got != want) {
    std::printf("  expected %s\n", cudaGetErrorName(want));
    ++failures;
  }
}

}  // namespace

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  const int n = 1000;
  int* data = nullptr;
  int* copy = nullptr;
  checkCudaErrors(cudaMalloc(&data, n * sizeof(int)));
  checkCudaErrors(cudaMalloc(&copy, n * sizeof(int)));
  checkCudaErrors(cudaMemset(data, 0, n * sizeof(int)));
  cudaStream_t s;
  checkCudaErrors(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));

  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  checkCudaErrors(cudaStreamIsCapturing(s, &status));
  expect(status == cudaStreamCaptureStatusNone, "not capturing before the capture");

  // The capture: two kernels, a memset of the copy's target and a copy.
  checkCudaErrors(cudaStreamBeginCapture(s, cudaStreamCaptureModeGlobal));
  checkCudaErrors(cudaStreamIsCapturing(s, &status));
  expect(status == cudaStreamCaptureStatusActive, "capturing after cudaStreamBeginCapture");
  increment<<<(n + 255) / 256, 256, 0, s>>>(data, n, 1);
  increment<<<(n + 255) / 256, 256, 0, s>>>(data, n, 2);
  checkCudaErrors(cudaMemsetAsync(copy, 0, n * sizeof(int), s));
  checkCudaErrors(cudaMemcpyAsync(copy, data, n * sizeof(int), cudaMemcpyDeviceToDevice, s));
  unsigned long long id = 0;
  cudaGraph_t building = nullptr;
  const cudaGraphNode_t* deps = nullptr;
  size_t ndeps = 0;
  checkCudaErrors(cudaStreamGetCaptureInfo(s, &status, &id, &building, &deps, nullptr, &ndeps));
  expect(status == cudaStreamCaptureStatusActive && id != 0 && building != nullptr, "the capture's info");
  expect(ndeps == 1 && deps != nullptr && deps[0] != nullptr, "the next node depends on the copy");
  // PyTorch's allocator: an allocation during a capture, in relaxed mode.
  cudaStreamCaptureMode mode = cudaStreamCaptureModeRelaxed;
  checkCudaErrors(cudaThreadExchangeStreamCaptureMode(&mode));
  expect(mode == cudaStreamCaptureModeGlobal, "the thread's mode was global");
  int* extra = nullptr;
  checkCudaErrors(cudaMalloc(&extra, 4096));
  checkCudaErrors(cudaThreadExchangeStreamCaptureMode(&mode));
  expect(mode == cudaStreamCaptureModeRelaxed, "and relaxed while allocating");
  cudaGraph_t graph = nullptr;
  checkCudaErrors(cudaStreamEndCapture(s, &graph));
  expect(graph != nullptr, "cudaStreamEndCapture gave a graph");
  checkCudaErrors(cudaStreamIsCapturing(s, &status));
  expect(status == cudaStreamCaptureStatusNone, "not capturing after the capture");

  size_t count = 0;
  checkCudaErrors(cudaGraphGetNodes(graph, nullptr, &count));
  std::printf("graph nodes: %zu\n", count);
  cudaGraphNode_t nodes[8];
  size_t capacity = 8;
  checkCudaErrors(cudaGraphGetNodes(graph, nodes, &capacity));
  expect(capacity == count && nodes[count] == nullptr, "cudaGraphGetNodes: every node, null after the last");

  int host[n];
  checkCudaErrors(cudaMemcpy(host, data, sizeof host, cudaMemcpyDeviceToHost));
  expect(host[0] == 0 && host[n - 1] == 0, "nothing ran during the capture");

  cudaGraphExec_t exec = nullptr;
  checkCudaErrors(cudaGraphInstantiateWithFlags(&exec, graph, 0));
  checkCudaErrors(cudaGraphUpload(exec, s));
  for (int i = 0; i < 3; ++i) checkCudaErrors(cudaGraphLaunch(exec, s));
  checkCudaErrors(cudaStreamSynchronize(s));
  checkCudaErrors(cudaMemcpy(host, copy, sizeof host, cudaMemcpyDeviceToHost));
  std::printf("after three launches: copy[0] = %d, copy[%d] = %d (expected 9)\n", host[0], n - 1, host[n - 1]);
  expect(host[0] == 9 && host[n - 1] == 9, "three launches ran the kernels three times");
  checkCudaErrors(cudaGraphExecDestroy(exec));
  cudaGraphExec_t exec2 = nullptr;
  checkCudaErrors(cudaGraphInstantiate(&exec2, graph, 0));
  checkCudaErrors(cudaGraphDestroy(graph));  // the executable graph does not need it
  checkCudaErrors(cudaGraphLaunch(exec2, s));
  checkCudaErrors(cudaStreamSynchronize(s));
  checkCudaErrors(cudaMemcpy(host, copy, sizeof host, cudaMemcpyDeviceToHost));
  expect(host[0] == 12, "a fourth launch after the graph was destroyed");
  checkCudaErrors(cudaGraphExecDestroy(exec2));

  // The legacy stream while a blocking stream captures: an error of its own
  // that leaves the capture intact.
  cudaStream_t blocking;
  checkCudaErrors(cudaStreamCreate(&blocking));
  checkCudaErrors(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal));
  expect_code(cudaStreamIsCapturing(cudaStreamLegacy, &status), cudaErrorStreamCaptureImplicit,
              "cudaStreamIsCapturing(legacy) during a blocking capture");
  expect_code(cudaGetLastError(), cudaErrorStreamCaptureImplicit, "recorded as the last error");
  checkCudaErrors(cudaStreamIsCapturing(blocking, &status));
  expect(status == cudaStreamCaptureStatusActive, "the capture is still active");
  // An allocation in global mode breaks it.
  int* refused = nullptr;
  expect_code(cudaMalloc(&refused, 4096), cudaErrorStreamCaptureUnsupported, "cudaMalloc during a global capture");
  checkCudaErrors(cudaStreamIsCapturing(blocking, &status));
  expect(status == cudaStreamCaptureStatusInvalidated, "the capture is invalidated");
  cudaGraph_t broken = reinterpret_cast<cudaGraph_t>(0x1234);
  expect_code(cudaStreamEndCapture(blocking, &broken), cudaErrorStreamCaptureInvalidated,
              "cudaStreamEndCapture of the broken capture");
  expect(broken == nullptr, "and no graph");
  expect_code(cudaStreamEndCapture(blocking, &broken), cudaErrorIllegalState, "cudaStreamEndCapture once more");
  expect_code(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported,
              "capturing the legacy stream");
  cudaGetLastError();

  unsigned long long id_s = 0, id_b = 0;
  checkCudaErrors(cudaStreamGetId(s, &id_s));
  checkCudaErrors(cudaStreamGetId(blocking, &id_b));
  expect(id_s != 0 && id_b != 0 && id_s != id_b, "streams have distinct ids");

  checkCudaErrors(cudaStreamDestroy(blocking));
  checkCudaErrors(cudaStreamDestroy(s));
  checkCudaErrors(cudaFree(extra));
  checkCudaErrors(cudaFree(copy));
  checkCudaErrors(cudaFree(data));
  if (failures != 0) {
    std::fprintf(stderr, "%d expectations failed\n", failures);
    return 1;
  }
  std::printf("graph_capture: PASS\n");
  return 0;
}
