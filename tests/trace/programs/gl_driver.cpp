// SPDX-License-Identifier: Apache-2.0
// A driver for drvshim-trace's tests that resolves entry points it neither
// exports nor declares in cuda.h, as a driver without graphics interop answers
// cuGetProcAddress for cuGL*, cuEGL* and cuVDPAU* (seen on the H200 under
// PyTorch, CuPy and the CUDA Runtime); every other lookup goes to the fake.
#include <cuda.h>
#include <dlfcn.h>

#include <atomic>
#include <cstring>

namespace {

std::atomic<int> g_gl_init_calls{0};

CUresult gl_init(unsigned flags) {
  g_gl_init_calls.fetch_add(1);
  return flags == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}
CUresult gl_get_devices(unsigned* count, CUdevice* devices, unsigned size, int which) {
  (void)devices, (void)size, (void)which;
  if (count != nullptr) *count = 0;
  return CUDA_SUCCESS;
}
CUresult vdpau_get_device(CUdevice* device, void* vdp, void* proc) {
  (void)vdp, (void)proc;
  if (device != nullptr) *device = 0;
  return CUDA_SUCCESS;
}
CUresult gl_map_buffer_ptsz(CUdeviceptr* ptr, size_t* size, unsigned buffer) {
  (void)ptr, (void)size, (void)buffer;
  return CUDA_ERROR_NOT_SUPPORTED;
}

struct Extra {
  const char* name;
  int since;
  cuuint64_t per_thread;  // 2: the per-thread default-stream variant
  void* fn;
};
const Extra kExtras[] = {
    {"cuGLInit", 2000, 0, reinterpret_cast<void*>(&gl_init)},
    {"cuGLGetDevices", 4010, 0, reinterpret_cast<void*>(&gl_get_devices)},
    {"cuVDPAUGetDevice", 3010, 0, reinterpret_cast<void*>(&vdpau_get_device)},
    {"cuGLMapBufferObject", 7000, 2, reinterpret_cast<void*>(&gl_map_buffer_ptsz)},
};

using Gpa = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);

Gpa fake_gpa() {
  static const Gpa gpa = [] {
    void* h = dlopen(DRVSHIM_TEST_FAKE_PATH, RTLD_NOW | RTLD_LOCAL);
    return h != nullptr ? reinterpret_cast<Gpa>(dlsym(h, "cuGetProcAddress_v2")) : nullptr;
  }();
  return gpa;
}

}  // namespace

extern "C" {

__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                                                    cuuint64_t flags,
                                                                    CUdriverProcAddressQueryResult* status) {
  if (symbol != nullptr && pfn != nullptr) {
    for (const Extra& e : kExtras) {
      if (std::strcmp(symbol, e.name) == 0 && version >= e.since && (flags == 2) == (e.per_thread == 2)) {
        *pfn = e.fn;
        if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
        return CUDA_SUCCESS;
      }
    }
  }
  const Gpa gpa = fake_gpa();
  return gpa != nullptr ? gpa(symbol, pfn, version, flags, status) : CUDA_ERROR_STUB_LIBRARY;
}

// How often gl_init ran: the calls made through what the interposer handed out reached it.
__attribute__((visibility("default"))) int trace_gl_driver_init_calls() { return g_gl_init_calls.load(); }

}  // extern "C"
