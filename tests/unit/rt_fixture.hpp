// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the runtime_compat tests share: the fixture (every scenario runs on a
// thread of its own, because the Runtime makes contexts current, which the
// base fixture checks on the main thread, and ends with rt::shutdown()),
// fatbins laid out as nvcc lays them out, and registration as nvcc's
// generated code performs it.
#include <cuda_profiler_api.h>
#include <cuda_runtime_api.h>
#include <drvshim/runtime_compat.hpp>

#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "fixture.hpp"

// nvcc's registration and launch entry points (crt/host_runtime.h, an internal header).
extern "C" {
void** __cudaRegisterFatBinary(void* fat_cubin);
void __cudaRegisterFatBinaryEnd(void** handle);
void __cudaUnregisterFatBinary(void** handle);
void __cudaRegisterFunction(void** handle, const char* host_fun, char* device_fun, const char* device_name,
                            int thread_limit, uint3* tid, uint3* bid, dim3* bdim, dim3* gdim, int* wsize);
void __cudaRegisterVar(void** handle, char* host_var, char* device_address, const char* device_name, int ext,
                       size_t size, int constant, int global);
void __cudaRegisterManagedVar(void** handle, void** host_var_ptr_address, char* device_address, const char* device_name,
                              int ext, size_t size, int constant, int global);
char __cudaInitModule(void** handle);
cudaError_t __cudaGetKernel(cudaKernel_t* kernel, const void* host_stub);
cudaError_t __cudaLaunchKernel(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shared,
                               cudaStream_t stream);
cudaError_t __cudaLaunchKernel_ptsz(cudaKernel_t kernel, dim3 grid, dim3 block, void** args, size_t shared,
                                    cudaStream_t stream);
// The per-thread-default-stream forms a program built with
// --default-stream per-thread calls (cuda_runtime_api.h renames them).
cudaError_t cudaStreamSynchronize_ptsz(cudaStream_t stream);
cudaError_t cudaStreamQuery_ptsz(cudaStream_t stream);
cudaError_t cudaStreamWaitEvent_ptsz(cudaStream_t stream, cudaEvent_t event, unsigned flags);
cudaError_t cudaEventRecord_ptsz(cudaEvent_t event, cudaStream_t stream);
cudaError_t cudaLaunchHostFunc_ptsz(cudaStream_t stream, cudaHostFn_t fn, void* user_data);
cudaError_t cudaMemcpy_ptds(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemset_ptds(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync_ptsz(void* ptr, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaStreamBeginCapture_ptsz(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaGraphLaunch_ptsz(cudaGraphExec_t exec, cudaStream_t stream);
unsigned __cudaPushCallConfiguration(dim3 grid, dim3 block, size_t shared, struct CUstream_st* stream);
cudaError_t __cudaPopCallConfiguration(dim3* grid, dim3* block, size_t* shared, void* stream);
}

namespace drvshim_test {

// A fatbin as nvcc lays it out: the header (magic, version, header size,
// payload size), then entries with their own headers (kind 1 PTX / 2 ELF,
// the architecture).
class FatbinBuilder {
 public:
  FatbinBuilder& ptx(const std::string& text, unsigned arch = 90) {
    std::vector<unsigned char> payload(text.begin(), text.end());
    payload.push_back(0);
    return entry(1, arch, payload);
  }
  FatbinBuilder& entry(std::uint16_t kind, unsigned arch, const std::vector<unsigned char>& payload) {
    std::vector<unsigned char> header(64, 0);
    const std::uint32_t header_size = 64;
    const std::uint64_t size = payload.size();
    std::memcpy(header.data(), &kind, 2);
    std::memcpy(header.data() + 4, &header_size, 4);
    std::memcpy(header.data() + 8, &size, 8);
    std::memcpy(header.data() + 28, &arch, 4);
    entries_.insert(entries_.end(), header.begin(), header.end());
    entries_.insert(entries_.end(), payload.begin(), payload.end());
    return *this;
  }
  std::vector<unsigned char> build() const {
    std::vector<unsigned char> f(16);
    const std::uint32_t magic = 0xBA55ED50u;
    const std::uint16_t version = 1, header = 16;
    const std::uint64_t payload = entries_.size();
    std::memcpy(f.data(), &magic, 4);
    std::memcpy(f.data() + 4, &version, 2);
    std::memcpy(f.data() + 6, &header, 2);
    std::memcpy(f.data() + 8, &payload, 8);
    f.insert(f.end(), entries_.begin(), entries_.end());
    return f;
  }

 private:
  std::vector<unsigned char> entries_;
};

// PTX with one entry `name` taking `params` 64-bit parameters.
inline std::string ptx_kernel(const std::string& name, int params, const std::string& globals = {}) {
  std::string p;
  for (int i = 0; i < params; ++i) p += std::string(i == 0 ? "" : ",\n") + ".param .u64 p" + std::to_string(i);
  return ".version 8.0\n.target sm_90\n.address_size 64\n" + globals + ".visible .entry " + name + "(\n" + p +
         "\n)\n{\nret;\n}\n";
}

// A registered fatbin, as nvcc's generated constructor registers one.
class Registered {
 public:
  explicit Registered(std::vector<unsigned char> image) : image_(std::move(image)) {
    wrapper_.magic = 0x466243B1;
    wrapper_.version = 1;
    wrapper_.data = reinterpret_cast<const unsigned long long*>(image_.data());
    handle_ = __cudaRegisterFatBinary(&wrapper_);
  }
  ~Registered() { __cudaUnregisterFatBinary(handle_); }
  Registered(const Registered&) = delete;
  Registered& operator=(const Registered&) = delete;
  void** handle() const { return handle_; }
  // Registers a kernel; `stub` stands in for nvcc's host stub.
  const void* function(const char* stub, const char* name) {
    __cudaRegisterFunction(handle_, stub, const_cast<char*>(name), name, -1, nullptr, nullptr, nullptr, nullptr,
                           nullptr);
    return stub;
  }
  void end() { __cudaRegisterFatBinaryEnd(handle_); }

 private:
  struct Wrapper {
    int magic;
    int version;
    const unsigned long long* data;
    void* filename_or_fatbins;
  };
  std::vector<unsigned char> image_;
  Wrapper wrapper_{};
  void** handle_ = nullptr;
};

class RuntimeCompatTest : public FakeDriverTest {
 protected:
  void SetUp() override {
    FakeDriverTest::SetUp();
    drvshim::rt::shutdown();
    drvshim::rt::set_policy(drvshim::rt::Policy::lazy);
  }
  void TearDown() override {
    drvshim::rt::shutdown();
    FakeDriverTest::TearDown();
  }
  template <class F>
  static void on_thread(F&& f) {
    std::thread t(std::forward<F>(f));
    t.join();
  }
  static std::vector<std::string> implicit_steps() {
    std::vector<std::string> out;
    for (const auto& r : drvshim::trace::records()) {
      if (r.api == "rt-implicit") out.push_back(r.args);
    }
    return out;
  }
};

}  // namespace drvshim_test
