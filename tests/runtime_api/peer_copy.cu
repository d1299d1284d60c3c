// SPDX-License-Identifier: Apache-2.0
// Peer access between two devices (in the manner of simpleP2P): capability,
// P2P attributes, enabling access, cudaMemcpyPeer, and a kernel on one
// device reading the other's memory directly. Skips with fewer than two.
#include "helper_samples.cuh"

__global__ void add_peer(float* mine, const float* peer, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) mine[i] += peer[i];
}

int main() {
  int count = 0;
  checkCudaErrors(cudaGetDeviceCount(&count));
  if (count < 2) {
    std::printf("peer_copy: needs two devices, found %d: skipped\n", count);
    return 0;
  }
  int can01 = 0, can10 = 0, rank = 0, atomics = 0;
  checkCudaErrors(cudaDeviceCanAccessPeer(&can01, 0, 1));
  checkCudaErrors(cudaDeviceCanAccessPeer(&can10, 1, 0));
  checkCudaErrors(cudaDeviceGetP2PAttribute(&rank, cudaDevP2PAttrPerformanceRank, 0, 1));
  checkCudaErrors(cudaDeviceGetP2PAttribute(&atomics, cudaDevP2PAttrNativeAtomicSupported, 0, 1));
  std::printf("peer access 0->1: %d, 1->0: %d, performance rank %d, native atomics %d\n", can01, can10, rank, atomics);
  if (!can01 || !can10) {
    std::printf("peer_copy: the devices are not peers: skipped\n");
    return 0;
  }
  const int n = 1 << 20;
  float *d0, *d1;
  checkCudaErrors(cudaSetDevice(0));
  checkCudaErrors(cudaDeviceEnablePeerAccess(1, 0));
  const cudaError_t twice = cudaDeviceEnablePeerAccess(1, 0);
  std::printf("enabling twice: %s\n", cudaGetErrorName(twice));
  (void)cudaGetLastError();
  checkCudaErrors(cudaMalloc(&d0, n * sizeof(float)));
  checkCudaErrors(cudaSetDevice(1));
  checkCudaErrors(cudaDeviceEnablePeerAccess(0, 0));
  checkCudaErrors(cudaMalloc(&d1, n * sizeof(float)));
  float* host = nullptr;
  checkCudaErrors(cudaMallocHost(&host, n * sizeof(float)));
  for (int i = 0; i < n; ++i) host[i] = static_cast<float>(i % 64);
  checkCudaErrors(cudaMemcpy(d0, host, n * sizeof(float), cudaMemcpyHostToDevice));
  checkCudaErrors(cudaMemcpyPeer(d1, 1, d0, 0, n * sizeof(float)));  // device 0 -> device 1
  add_peer<<<(n + 255) / 256, 256>>>(d1, d0, n);                     // device 1 reads device 0's memory
  getLastCudaError("add_peer");
  checkCudaErrors(cudaMemcpyPeerAsync(d0, 0, d1, 1, n * sizeof(float), nullptr));
  checkCudaErrors(cudaDeviceSynchronize());
  checkCudaErrors(cudaSetDevice(0));
  checkCudaErrors(cudaMemcpy(host, d0, n * sizeof(float), cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int i = 0; i < n; ++i) wrong += host[i] != 2.0f * static_cast<float>(i % 64);
  std::printf("peer copies and peer reads: %d wrong\n", wrong);
  checkCudaErrors(cudaDeviceDisablePeerAccess(1));
  checkCudaErrors(cudaFree(d0));
  checkCudaErrors(cudaSetDevice(1));
  checkCudaErrors(cudaDeviceDisablePeerAccess(0));
  checkCudaErrors(cudaFree(d1));
  checkCudaErrors(cudaFreeHost(host));
  if (wrong != 0) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("peer_copy: PASS\n");
  return 0;
}
