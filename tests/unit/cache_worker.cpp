// One process of the "many processes ask for one missing key" test: waits for
// a start file (so all workers start together), compiles one program through
// the compile cache in the directory given, and prints the outcome.
#include <drvshim/compile_cache.hpp>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

int main(int argc, char** argv) {
  if (argc != 4) {
    std::fprintf(stderr, "usage: %s CACHE_DIR START_FILE SEED\n", argv[0]);
    return 2;
  }
  try {
    drvshim::CacheOptions options;
    options.directory = argv[1];
    drvshim::CompileCache cache(drvshim::NvrtcLoadOptions{}, options);
    drvshim::KernelSource program;
    program.source = std::string("extern \"C\" __global__ void worker(int* p) { p[threadIdx.x] += ") + argv[3] + "; }\n";
    program.name = "worker.cu";
    program.options.arch = "compute_90";
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
    while (access(argv[2], F_OK) != 0) {
      if (std::chrono::steady_clock::now() > deadline) return 3;
      std::this_thread::sleep_for(std::chrono::milliseconds(1));
    }
    const auto r = cache.compile(program);
    std::printf("%s\n", drvshim::to_string(r.outcome));
    return r.result.image.empty() ? 4 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cache_worker: %s\n", e.what());
    return 1;
  }
}
