// SPDX-License-Identifier: Apache-2.0
// Thread-block clusters (compute capability 9.0): a launch with
// cudaLaunchKernelEx and a cluster-dimension attribute, and a cluster above
// the portable size, refused until the kernel opts in with
// cudaFuncAttributeNonPortableClusterSizeAllowed; how many clusters of each
// size can be resident at once (cudaOccupancyMaxActiveClusters).
#include <cooperative_groups.h>

#include "helper_samples.cuh"

namespace cg = cooperative_groups;

__global__ void cluster_ranks(int* ranks) {
  cg::cluster_group cluster = cg::this_cluster();
  if (threadIdx.x == 0) ranks[blockIdx.x] = static_cast<int>(cluster.block_rank());
}

int main(int argc, char** argv) {
  const int device = find_cuda_device(argc, argv);
  int clusters = 0;
  checkCudaErrors(cudaDeviceGetAttribute(&clusters, cudaDevAttrClusterLaunch, device));
  if (!clusters) {
    std::printf("cluster_launch: clusters unsupported: skipped\n");
    return 0;
  }
  const int blocks = 32;
  int* ranks = nullptr;
  checkCudaErrors(cudaMalloc(&ranks, blocks * sizeof(int)));
  cudaLaunchConfig_t config = {};
  config.gridDim = dim3(blocks);
  config.blockDim = dim3(128);
  cudaLaunchAttribute attribute[1];
  attribute[0].id = cudaLaunchAttributeClusterDimension;
  attribute[0].val.clusterDim.x = 2;
  attribute[0].val.clusterDim.y = 1;
  attribute[0].val.clusterDim.z = 1;
  config.attrs = attribute;
  config.numAttrs = 1;
  checkCudaErrors(cudaLaunchKernelEx(&config, cluster_ranks, ranks));
  int host[blocks];
  checkCudaErrors(cudaMemcpy(host, ranks, sizeof host, cudaMemcpyDeviceToHost));
  int wrong = 0;
  for (int b = 0; b < blocks; ++b) wrong += host[b] != b % 2;
  std::printf("clusters of 2: block ranks %d %d %d %d ..., %d wrong\n", host[0], host[1], host[2], host[3], wrong);
  int resident = 0;
  checkCudaErrors(cudaOccupancyMaxActiveClusters(&resident, cluster_ranks, &config));
  std::printf("clusters of 2 resident at once: %s\n", resident > 0 ? "some" : "none");
  attribute[0].val.clusterDim.x = 16;
  const cudaError_t refused = cudaLaunchKernelEx(&config, cluster_ranks, ranks);
  std::printf("clusters of 16 without the opt-in: %s\n", cudaGetErrorName(refused));
  (void)cudaGetLastError();
  const cudaError_t occupancy_refused = cudaOccupancyMaxActiveClusters(&resident, cluster_ranks, &config);
  std::printf("occupancy of clusters of 16 without the opt-in: %s\n", cudaGetErrorName(occupancy_refused));
  (void)cudaGetLastError();
  checkCudaErrors(cudaFuncSetAttribute(cluster_ranks, cudaFuncAttributeNonPortableClusterSizeAllowed, 1));
  checkCudaErrors(cudaLaunchKernelEx(&config, cluster_ranks, ranks));
  checkCudaErrors(cudaMemcpy(host, ranks, sizeof host, cudaMemcpyDeviceToHost));
  for (int b = 0; b < blocks; ++b) wrong += host[b] != b % 16;
  std::printf("clusters of 16 with it: block 15 has rank %d\n", host[15]);
  checkCudaErrors(cudaOccupancyMaxActiveClusters(&resident, cluster_ranks, &config));
  std::printf("clusters of 16 resident at once: %s\n", resident > 0 ? "some" : "none");
  checkCudaErrors(cudaFree(ranks));
  if (wrong != 0 || refused == cudaSuccess) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("cluster_launch: PASS\n");
  return 0;
}
