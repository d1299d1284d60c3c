// What a child forked after the parent initialised gets from cudart: the
// last-error calls, a call that needs the device, the driver version and the
// device count. Built against cudart and against libdrvshim_cudart.
#include <cuda_runtime_api.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

int main() {
  int count = -1;
  void* p = nullptr;
  const int a = cudaGetDeviceCount(&count), b = cudaMalloc(&p, 16);
  std::printf("parent: count %d (%d) malloc %d\n", a, count, b);
  std::fflush(stdout);
  if (fork() == 0) {
    int v = -1, c = -1;
    const int g1 = cudaGetLastError(), g2 = cudaGetLastError(), pk = cudaPeekAtLastError();
    const int m = cudaMalloc(&p, 16);
    const int g3 = cudaGetLastError(), g4 = cudaGetLastError();
    const int dv = cudaDriverGetVersion(&v), n = cudaGetDeviceCount(&c), nn = cudaGetDeviceCount(nullptr);
    const int g5 = cudaGetLastError(), g6 = cudaGetLastError();
    std::printf(
        "child: get %d get %d peek %d malloc %d get %d get %d drvver %d (%d) count %d (%d) countnull %d get %d get "
        "%d\n",
        g1, g2, pk, m, g3, g4, dv, v, n, c, nn, g5, g6);
    std::fflush(stdout);
    _exit(0);
  }
  int status = 0;
  wait(&status);
  return 0;
}
