// SPDX-License-Identifier: Apache-2.0
// A consumer kernel waits on the device for a flag that a producer thread
// copies in afterwards, on another stream: the runtime must let the copy
// through while the kernel runs (cudart runs the two concurrently).
#include <chrono>
#include <thread>

#include "helper_samples.cuh"

__global__ void consume(volatile int* flag, int* result, long long spin_limit) {
  long long spins = 0;
  while (*flag == 0 && spins < spin_limit) ++spins;
  *result = *flag != 0 ? 42 : -1;
}

int main(int argc, char** argv) {
  find_cuda_device(argc, argv);
  int *flag, *result;
  checkCudaErrors(cudaMalloc(&flag, sizeof(int)));
  checkCudaErrors(cudaMalloc(&result, sizeof(int)));
  checkCudaErrors(cudaMemset(flag, 0, sizeof(int)));
  checkCudaErrors(cudaMemset(result, 0, sizeof(int)));
  checkCudaErrors(cudaDeviceSynchronize());  // the non-blocking streams below do not wait for the memsets
  cudaStream_t consumer_stream, producer_stream;
  checkCudaErrors(cudaStreamCreateWithFlags(&consumer_stream, cudaStreamNonBlocking));
  checkCudaErrors(cudaStreamCreateWithFlags(&producer_stream, cudaStreamNonBlocking));
  // The producer starts first and copies the flag in once the consumer is running.
  std::thread producer([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    const int one = 1;
    checkCudaErrors(cudaMemcpyAsync(flag, &one, sizeof one, cudaMemcpyHostToDevice, producer_stream));
    checkCudaErrors(cudaStreamSynchronize(producer_stream));
  });
  consume<<<1, 1, 0, consumer_stream>>>(flag, result, 1ll << 34);
  getLastCudaError("consume");
  producer.join();
  checkCudaErrors(cudaStreamSynchronize(consumer_stream));
  int host = 0;
  checkCudaErrors(cudaMemcpy(&host, result, sizeof host, cudaMemcpyDeviceToHost));
  std::printf("the consumer saw the producer's flag: %s\n", host == 42 ? "yes" : "no");
  checkCudaErrors(cudaStreamDestroy(consumer_stream));
  checkCudaErrors(cudaStreamDestroy(producer_stream));
  checkCudaErrors(cudaFree(flag));
  checkCudaErrors(cudaFree(result));
  if (host != 42) {
    std::fprintf(stderr, "WRONG RESULT\n");
    return 1;
  }
  std::printf("producer_consumer: PASS\n");
  return 0;
}
