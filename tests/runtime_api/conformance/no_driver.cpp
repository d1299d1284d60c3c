// SPDX-License-Identifier: Apache-2.0
// A machine without the CUDA driver, for one process: preloaded (LD_PRELOAD),
// this library answers every dlopen of libcuda.so.* (how cudart and drvshim
// find the driver) and of the file DRVSHIM_LIBCUDA names (the fake driver)
// as the dynamic loader does for a file that is not there. The conformance
// suite's nodriver scenario runs the cudart build and the drvshim build under
// it and compares what each answers.
#include <dlfcn.h>

#include <cstdlib>
#include <cstring>

namespace {

bool refused(const char* file) noexcept {
  if (file == nullptr) return false;
  const char* slash = std::strrchr(file, '/');
  const char* base = slash != nullptr ? slash + 1 : file;
  if (std::strncmp(base, "libcuda.so", 10) == 0) return true;
  const char* chosen = std::getenv("DRVSHIM_LIBCUDA");
  return chosen != nullptr && chosen[0] != '\0' && std::strcmp(file, chosen) == 0;
}

using DlopenFn = void* (*)(const char*, int);

}  // namespace

extern "C" __attribute__((visibility("default"))) void* dlopen(const char* file, int mode) noexcept {
  static const auto real = reinterpret_cast<DlopenFn>(dlsym(RTLD_NEXT, "dlopen"));
  // The loader's own error for a missing file, so that dlerror() reads as it would.
  if (refused(file)) return real("/nonexistent/libcuda.so.1", mode);
  return real(file, mode);
}
