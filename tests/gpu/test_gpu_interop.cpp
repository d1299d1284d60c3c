// SPDX-License-Identifier: Apache-2.0
// Interop with the CUDA Runtime (linked statically, as most hosts do): who
// activates the primary context first, and what each side sees. Each scenario
// runs in its own forked process, so each starts with the driver untouched.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <drvshim/drvshim.hpp>

#include <cstdio>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace {

constexpr int kSkip = 77;

template <class F>
int in_child(F&& body) {
  std::fflush(stdout);
  const pid_t pid = fork();
  if (pid == 0) {
    int code = 99;
    try {
      code = body();
    } catch (const std::exception& e) {
      std::printf("[ child    ] exception: %s\n", e.what());
      code = 98;
    }
    std::fflush(stdout);
    _exit(code);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

#define CHILD_CHECK(cond, code)                              \
  do {                                                       \
    if (!(cond)) {                                           \
      std::printf("[ child    ] check failed: %s\n", #cond); \
      return code;                                           \
    }                                                        \
  } while (0)

std::string state(const drvshim::Device& d) {
  const auto s = d.primary_context_state();
  return std::string(s.active ? "active" : "inactive") + "," + drvshim::to_string(s.flags);
}

std::optional<drvshim::Driver> try_driver() {
  try {
    auto drv = drvshim::Driver::load();
    drv.init();
    if (drv.device_count() == 0) return std::nullopt;
    return drv;
  } catch (const drvshim::Error& e) {
    std::printf("[ child    ] no usable driver: %s\n", e.what());
    return std::nullopt;
  }
}

TEST(GpuInterop, DrvshimRetainsFirstAndTheRuntimeUsesItsContext) {
  const int code = in_child([]() -> int {
    auto drv_opt = try_driver();
    if (!drv_opt) return kSkip;
    auto& drv = *drv_opt;
    const auto dev = drv.device(0);
    CHILD_CHECK(state(dev) == "inactive,sched_auto", 10);
    auto primary = dev.retain_primary_context();
    CHILD_CHECK(!primary.adopted(), 11);
    CHILD_CHECK(cudaSetDevice(0) == cudaSuccess, 12);
    CHILD_CHECK(cudaFree(nullptr) == cudaSuccess, 13);
    std::printf("[ child    ] runtime's current context %s drvshim's primary context\n",
                drv.current_context() == primary.ref().address() ? "is" : "is NOT");
    CHILD_CHECK(drv.current_context() == primary.ref().address(), 14);
    void* p = nullptr;
    CHILD_CHECK(cudaMalloc(&p, 1 << 20) == cudaSuccess, 15);
    CHILD_CHECK(cudaMemset(p, 0x5a, 1 << 20) == cudaSuccess, 16);
    unsigned char host[16] = {};
    CHILD_CHECK(cudaMemcpy(host, p, sizeof host, cudaMemcpyDeviceToHost) == cudaSuccess, 17);
    CHILD_CHECK(host[0] == 0x5a && host[15] == 0x5a, 18);
    // The runtime's allocation is drvshim-usable memory of drvshim's context, and the reverse.
    const auto info = drvshim::inspect_pointer(drv, p);
    std::printf("[ child    ] cudaMalloc pointer: %s\n", info.to_string().c_str());
    CHILD_CHECK(info.kind == drvshim::MemoryKind::device && info.context == primary.ref().address(), 23);
    drvshim::DeviceSpan<const unsigned char> foreign(primary.ref(), reinterpret_cast<std::uintptr_t>(p), 1 << 20, 0);
    std::vector<unsigned char> seen(1 << 20);
    drvshim::copy(std::span<unsigned char>(seen), foreign);
    CHILD_CHECK(seen.front() == 0x5a && seen.back() == 0x5a, 24);
    auto ours = drvshim::DeviceBuffer::allocate(primary.ref(), 4096);
    drvshim::fill(ours.as<unsigned char>(), static_cast<unsigned char>(0x33));
    CHILD_CHECK(
        cudaMemcpy(host, reinterpret_cast<void*>(ours.address()), sizeof host, cudaMemcpyDeviceToHost) == cudaSuccess,
        25);
    CHILD_CHECK(host[0] == 0x33 && host[15] == 0x33, 26);
    ours.free();
    CHILD_CHECK(cudaFree(p) == cudaSuccess, 19);
    primary.release();
    std::printf("[ child    ] after drvshim's release: %s\n", state(dev).c_str());
    CHILD_CHECK(state(dev) == "active,sched_auto", 20);  // the runtime still holds its retain
    CHILD_CHECK(cudaDeviceReset() == cudaSuccess, 21);
    std::printf("[ child    ] after cudaDeviceReset: %s\n", state(dev).c_str());
    CHILD_CHECK(state(dev) == "inactive,sched_auto", 22);
    return 0;
  });
  if (code == kSkip) GTEST_SKIP() << "no usable CUDA driver";
  EXPECT_EQ(code, 0) << "see the child's output above";
}

TEST(GpuInterop, TheRuntimeActivatesFirstAndDrvshimAdoptsIt) {
  const int code = in_child([]() -> int {
    if (cudaSetDevice(0) != cudaSuccess || cudaFree(nullptr) != cudaSuccess) return kSkip;
    auto drv_opt = try_driver();
    if (!drv_opt) return kSkip;
    auto& drv = *drv_opt;
    const auto dev = drv.device(0);
    std::printf("[ child    ] after cudaSetDevice + cudaFree(0): %s\n", state(dev).c_str());
    CHILD_CHECK(dev.primary_context_state().active, 30);
    drvshim::trace::enable(true);
    auto primary = dev.retain_primary_context();
    CHILD_CHECK(primary.adopted(), 31);
    CHILD_CHECK(drv.current_context() == primary.ref().address(), 32);
    bool marked = false;
    for (const auto& r : drvshim::trace::records()) marked = marked || r.api == "adopt-primary-context";
    CHILD_CHECK(marked, 33);
    auto e = dev.primary_context_state();
    CHILD_CHECK(e.active, 34);
    bool refused = false;
    try {
      dev.set_primary_context_flags(drvshim::ContextFlags::sched_blocking_sync);
    } catch (const drvshim::ContextStateError& err) {
      refused = true;
      std::printf("[ child    ] set flags after the runtime activated it: %s\n", err.what());
    }
    CHILD_CHECK(refused, 35);
    primary.release();
    CHILD_CHECK(state(dev) == "active,sched_auto", 36);
    CHILD_CHECK(cudaDeviceReset() == cudaSuccess, 37);
    std::printf("[ child    ] after cudaDeviceReset: %s\n", state(dev).c_str());
    CHILD_CHECK(state(dev) == "inactive,sched_auto", 38);
    return 0;
  });
  if (code == kSkip) GTEST_SKIP() << "no usable CUDA driver";
  EXPECT_EQ(code, 0) << "see the child's output above";
}

// Two devices: the Runtime enables peer access first (cudaDeviceEnablePeerAccess);
// drvshim adopts it and never disables it; the direction drvshim enabled itself
// it disables, and the Runtime can then enable it afresh. Skips below two devices.
TEST(MultiGpuInterop, PeerAccessTheRuntimeEnabledIsAdoptedAndLeftOn) {
  const int code = in_child([]() -> int {
    int count = 0;
    if (cudaGetDeviceCount(&count) != cudaSuccess || count < 2) return kSkip;
    CHILD_CHECK(cudaSetDevice(0) == cudaSuccess, 10);
    CHILD_CHECK(cudaDeviceEnablePeerAccess(1, 0) == cudaSuccess, 11);  // device 0 may access device 1
    auto drv_opt = try_driver();
    CHILD_CHECK(drv_opt.has_value(), 12);
    auto& drv = *drv_opt;
    auto p0 = drv.device(0).retain_primary_context();
    auto p1 = drv.device(1).retain_primary_context();
    {
      auto adopted = drvshim::PeerAccess::enable(p0.ref(), p1.ref());
      std::printf("[ child    ] 0 -> 1 after cudaDeviceEnablePeerAccess: %s\n",
                  adopted.adopted() ? "adopted" : "not adopted");
      CHILD_CHECK(adopted.adopted(), 13);
      auto own = drvshim::PeerAccess::enable(p1.ref(), p0.ref());
      CHILD_CHECK(!own.adopted() && !own.shared(), 14);
    }
    // The adopted direction is still on; the one drvshim enabled is off again.
    CHILD_CHECK(cudaSetDevice(0) == cudaSuccess, 15);
    const cudaError_t again = cudaDeviceEnablePeerAccess(1, 0);
    std::printf("[ child    ] runtime enables 0 -> 1 again: %s\n", cudaGetErrorName(again));
    CHILD_CHECK(again == cudaErrorPeerAccessAlreadyEnabled, 16);
    (void)cudaGetLastError();
    CHILD_CHECK(cudaSetDevice(1) == cudaSuccess, 17);
    const cudaError_t reverse = cudaDeviceEnablePeerAccess(0, 0);
    std::printf("[ child    ] runtime enables 1 -> 0 after drvshim's owner ended: %s\n", cudaGetErrorName(reverse));
    CHILD_CHECK(reverse == cudaSuccess, 18);
    CHILD_CHECK(cudaDeviceDisablePeerAccess(0) == cudaSuccess, 19);
    CHILD_CHECK(cudaSetDevice(0) == cudaSuccess, 20);
    CHILD_CHECK(cudaDeviceDisablePeerAccess(1) == cudaSuccess, 21);
    return 0;
  });
  if (code == kSkip) GTEST_SKIP() << "needs two devices";
  EXPECT_EQ(code, 0) << "see the child's output above";
}

}  // namespace
