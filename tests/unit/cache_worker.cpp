// SPDX-License-Identifier: Apache-2.0
// A process of the compile cache's multi-process tests. Waits for a start
// file (so all workers start together), then:
//   cache_worker CACHE_DIR START_FILE SEED
//     compiles one program through the cache in CACHE_DIR and prints the outcome
//     ("many processes ask for one missing key");
//   cache_worker --identity CACHE_DIR [PRELOAD]
//     compiles one program through the cache in CACHE_DIR at once (twice, after
//     loading the library PRELOAD when given) and prints "<outcome>|<key>|<miss
//     reason>" per compile (which NVRTC the keys name);
//   cache_worker --stress CACHE_DIR INCLUDE_DIR START_FILE MILLIS
//     compiles a program including INCLUDE_DIR/value.h for MILLIS ms while the
//     test changes that header, printing "<outcome>|<key>|<value>" per compile
//     (the value the kernel stores, 7310NN -> NN, -1 when none; "failed||0" for a
//     compile NVRTC rejected because it read the header half-written).
#include <drvshim/compile_cache.hpp>

#include <dlfcn.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <string>
#include <thread>

namespace {

bool wait_for_start(const char* start) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (access(start, F_OK) != 0) {
    if (std::chrono::steady_clock::now() > deadline) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return true;
}

int value_in(const std::vector<std::byte>& image) {
  const std::string text(reinterpret_cast<const char*>(image.data()), image.size());
  for (auto pos = text.find("7310"); pos != std::string::npos; pos = text.find("7310", pos + 1)) {
    if (pos + 6 < text.size() && std::isdigit(static_cast<unsigned char>(text[pos + 4])) != 0 &&
        std::isdigit(static_cast<unsigned char>(text[pos + 5])) != 0 &&
        std::isdigit(static_cast<unsigned char>(text[pos + 6])) == 0) {
      return (text[pos + 4] - '0') * 10 + (text[pos + 5] - '0');
    }
  }
  return -1;
}

// A cache in `cache_dir` that finds NVRTC as a program would.
drvshim::CompileCache cache_in(const char* cache_dir) {
  drvshim::CacheOptions options;
  options.directory = cache_dir;
  return drvshim::CompileCache(drvshim::NvrtcLoadOptions{}, options);
}

int stress(const char* cache_dir, const char* include_dir, const char* start, int millis) {
  drvshim::CompileCache cache = cache_in(cache_dir);
  drvshim::KernelSource program;
  program.source = "#include \"value.h\"\nextern \"C\" __global__ void k(int* p) { *p = kValue; }\n";
  program.name = "stress.cu";
  program.options.arch = "compute_90";
  program.options.include_paths = {include_dir};
  if (!wait_for_start(start)) return 3;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(millis);
  while (std::chrono::steady_clock::now() < deadline) {
    try {
      const auto r = cache.compile(program);
      std::printf("%s|%s|%d\n", drvshim::to_string(r.outcome), r.key.c_str(), value_in(r.result.image));
    } catch (const drvshim::NvrtcCompileError&) {
      std::printf("failed||0\n");  // the header was caught half-written
    }
  }
  return 0;
}

}  // namespace

int identity(const char* cache_dir, const char* preload) {
  // A library the program mapped itself before the cache looked (its own builtins, say).
  if (preload != nullptr && dlopen(preload, RTLD_NOW | RTLD_GLOBAL) == nullptr) {
    std::fprintf(stderr, "cache_worker: %s\n", dlerror());
    return 5;
  }
  drvshim::CompileCache cache = cache_in(cache_dir);
  drvshim::KernelSource program;
  program.source = "extern \"C\" __global__ void k(int* p) { *p = 731005; }\n";
  program.name = "identity.cu";
  program.options.arch = "compute_90";
  for (int i = 0; i < (preload != nullptr ? 2 : 1); ++i) {
    const auto r = cache.compile(program);
    std::printf("%s|%s|%s\n", drvshim::to_string(r.outcome), r.key.c_str(), r.miss_reason.c_str());
    if (value_in(r.result.image) != 5) return 4;
  }
  return 0;
}

int main(int argc, char** argv) {
  try {
    if ((argc == 3 || argc == 4) && std::string(argv[1]) == "--identity") {
      return identity(argv[2], argc == 4 ? argv[3] : nullptr);
    }
    if (argc == 6 && std::string(argv[1]) == "--stress") return stress(argv[2], argv[3], argv[4], std::atoi(argv[5]));
    if (argc != 4) {
      std::fprintf(stderr,
                   "usage: %s CACHE_DIR START_FILE SEED\n       %s --stress CACHE_DIR INCLUDE_DIR START_FILE MILLIS\n",
                   argv[0], argv[0]);
      return 2;
    }
    drvshim::CompileCache cache = cache_in(argv[1]);
    drvshim::KernelSource program;
    program.source =
        std::string("extern \"C\" __global__ void worker(int* p) { p[threadIdx.x] += ") + argv[3] + "; }\n";
    program.name = "worker.cu";
    program.options.arch = "compute_90";
    if (!wait_for_start(argv[2])) return 3;
    const auto r = cache.compile(program);
    std::printf("%s\n", drvshim::to_string(r.outcome));
    return r.result.image.empty() ? 4 : 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cache_worker: %s\n", e.what());
    return 1;
  }
}
