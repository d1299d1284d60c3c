// runtime_compat against the fake: the Runtime's lazy policy pinned call by
// call (what the H200 showed cudart doing: shared/design/BASELINE.md), the
// eager policy, per-thread last error and current device, error numbers,
// implicit steps in the log and the trace, and registered modules loaded at
// first use. Every scenario runs on its own thread (the Runtime makes contexts
// current, which the fixture checks on the main thread) and ends with shutdown().
#include <drvshim/runtime_compat.hpp>

#include <cstring>
#include <thread>

#include "fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

class RuntimeCompat : public FakeDriverTest {
 protected:
  void SetUp() override {
    FakeDriverTest::SetUp();
    rt::shutdown();
    rt::set_policy(rt::Policy::lazy);
  }
  void TearDown() override {
    rt::shutdown();
    FakeDriverTest::TearDown();
  }
  template <class F>
  static void on_thread(F&& f) {
    std::thread t(std::forward<F>(f));
    t.join();
  }
  static std::vector<std::string> implicit_steps() {
    std::vector<std::string> out;
    for (const auto& r : trace::records()) {
      if (r.api == "rt-implicit") out.push_back(r.args);
    }
    return out;
  }
};

TEST_F(RuntimeCompat, TheLazyPolicyCallByCall) {
  trace::enable(true);
  on_thread([] {
    int count = 0;
    EXPECT_EQ(rt::cudaGetDeviceCount(&count), rt::Error::success);
    EXPECT_EQ(count, 1);
    EXPECT_EQ(drvshim_fake_call_count("cuInit"), 1u) << "the device-count query initialised the driver";
    EXPECT_EQ(drvshim_fake_primary_active(0), 0) << "but activated no primary context";
    EXPECT_EQ(drvshim_fake_ctx_stack_top(), nullptr);

    EXPECT_EQ(rt::cudaSetDevice(0), rt::Error::success);
    EXPECT_EQ(drvshim_fake_primary_active(0), 1) << "selecting a device activates its primary context";
    EXPECT_NE(drvshim_fake_ctx_stack_top(), nullptr) << "and makes it current";

    EXPECT_EQ(rt::cudaDeviceReset(), rt::Error::success);
    EXPECT_EQ(drvshim_fake_primary_active(0), 0) << "a reset deactivates it";
  });
  EXPECT_EQ(implicit_steps(), (std::vector<std::string>{
                                  "cudaGetDeviceCount -> load libcuda",
                                  "cudaGetDeviceCount -> cuInit",
                                  "cudaSetDevice -> retain the primary context of device 0",
                                  "cudaSetDevice -> make the primary context of device 0 current on this thread",
                              }));
}

TEST_F(RuntimeCompat, AnAllocationOnAFreshThreadMakesThatThreadsDevicePrimaryContextCurrent) {
  on_thread([] { EXPECT_EQ(rt::cudaSetDevice(0), rt::Error::success); });
  std::vector<std::string> logs;
  log::set_level(log::Level::info);
  log::set_sink([&](log::Level, std::string_view m) { logs.emplace_back(m); });
  on_thread([] {
    EXPECT_EQ(drvshim_fake_ctx_stack_top(), nullptr) << "a fresh thread has no current context";
    void* p = nullptr;
    EXPECT_EQ(rt::cudaMalloc(&p, 4096), rt::Error::success);
    EXPECT_NE(p, nullptr);
    EXPECT_NE(drvshim_fake_ctx_stack_top(), nullptr) << "cudaMalloc made the primary context current here";
    EXPECT_EQ(rt::cudaFree(p), rt::Error::success);
  });
  log::set_sink({});
  ASSERT_FALSE(logs.empty());
  EXPECT_NE(std::find_if(logs.begin(), logs.end(),
                         [](const std::string& m) {
                           return m.find("cudaMalloc -> make the primary context of device 0 current on this thread "
                                         "(implicit)") != std::string::npos;
                         }),
            logs.end());
}

TEST_F(RuntimeCompat, TheEagerPolicySetsEverythingUpAtTheFirstCall) {
  rt::set_policy(rt::Policy::eager);
  on_thread([] {
    int count = 0;
    EXPECT_EQ(rt::cudaGetDeviceCount(&count), rt::Error::success);
    EXPECT_EQ(drvshim_fake_primary_active(0), 1) << "eager: the first call did the whole set-up";
    EXPECT_NE(drvshim_fake_ctx_stack_top(), nullptr);
  });
}

TEST_F(RuntimeCompat, LastErrorIsPerThreadAndCodesFollowCudart) {
  on_thread([] {
    EXPECT_EQ(rt::cudaSetDevice(7), rt::Error::invalid_device);
    EXPECT_NE(rt::last_error_detail().find("device 7 does not exist"), std::string::npos) << rt::last_error_detail();
    std::thread other([] { EXPECT_EQ(rt::cudaPeekAtLastError(), rt::Error::success) << "another thread's error"; });
    other.join();
    EXPECT_EQ(rt::cudaPeekAtLastError(), rt::Error::invalid_device);
    EXPECT_EQ(rt::cudaGetLastError(), rt::Error::invalid_device);
    EXPECT_EQ(rt::cudaGetLastError(), rt::Error::success) << "cleared by the first read";
    int dummy = 0;
    EXPECT_EQ(rt::cudaFree(&dummy), rt::Error::invalid_device_pointer);
    EXPECT_EQ(rt::cudaHostUnregister(&dummy), rt::Error::host_memory_not_registered);
    EXPECT_EQ(rt::cudaMemcpy(&dummy, &dummy, 4, static_cast<rt::MemcpyKind>(9)), rt::Error::invalid_memcpy_direction);
    EXPECT_EQ(rt::cudaStreamDestroy(reinterpret_cast<void*>(0x1234)), rt::Error::invalid_resource_handle);
    EXPECT_EQ(rt::unsupported("cudaMallocManaged"), rt::Error::not_supported);
    EXPECT_STREQ(rt::error_name(rt::Error::not_supported), "cudaErrorNotSupported");
    drvshim_fake_fail_call("cuMemAlloc", 1, 2 /* CUDA_ERROR_OUT_OF_MEMORY */);
    void* p = nullptr;
    EXPECT_EQ(rt::cudaMalloc(&p, 1 << 20), rt::Error::memory_allocation);
    EXPECT_EQ(p, nullptr);
  });
}

TEST_F(RuntimeCompat, PerThreadCurrentDevice) {
  ASSERT_EQ(drvshim_fake_set_profile("dual"), 0);
  on_thread([] {
    EXPECT_EQ(rt::cudaSetDevice(1), rt::Error::success);
    int d = -1;
    EXPECT_EQ(rt::cudaGetDevice(&d), rt::Error::success);
    EXPECT_EQ(d, 1);
    std::thread other([] {
      int o = -1;
      EXPECT_EQ(rt::cudaGetDevice(&o), rt::Error::success);
      EXPECT_EQ(o, 0) << "each thread starts on device 0";
    });
    other.join();
    EXPECT_EQ(drvshim_fake_primary_active(1), 1);
    EXPECT_EQ(drvshim_fake_primary_active(0), 0) << "device 0 was never touched";
  });
}

void vadd_cpu(const drvshim_fake_launch* l, void** args) {
  const auto* a = *static_cast<const float* const*>(args[0]);
  const auto* b = *static_cast<const float* const*>(args[1]);
  auto* c = *static_cast<float* const*>(args[2]);
  for (unsigned i = 0; i < l->grid[0] * l->block[0]; ++i) c[i] = a[i] + b[i];
}

// A fatbin as nvcc lays it out (header, then the entries), with PTX inside as text.
std::vector<unsigned char> fake_fatbin(const std::string& ptx) {
  std::vector<unsigned char> f(16);
  const std::uint32_t magic = 0xBA55ED50u;
  const std::uint16_t version = 1, header = 16;
  const std::uint64_t payload = ptx.size() + 1;
  std::memcpy(f.data(), &magic, 4);
  std::memcpy(f.data() + 4, &version, 2);
  std::memcpy(f.data() + 6, &header, 2);
  std::memcpy(f.data() + 8, &payload, 8);
  f.insert(f.end(), ptx.begin(), ptx.end());
  f.push_back(0);
  return f;
}

TEST_F(RuntimeCompat, ARegisteredModuleLoadsAtFirstUseAndLaunches) {
  drvshim_fake_register_kernel("rt_vadd", &vadd_cpu);
  const std::string ptx =
      ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry rt_vadd(\n.param .u64 a,\n.param .u64 b,\n"
      ".param .u64 c\n)\n{\nret;\n}\n";
  const auto image = fake_fatbin(ptx);
  static const char stub = 0;        // stands in for nvcc's host stub
  static const char unknown = 0;
  void* handle = rt::register_fatbin(image.data());
  rt::register_function(handle, &stub, "rt_vadd");
  trace::enable(true);
  on_thread([] {
    EXPECT_EQ(drvshim_fake_live_modules(), 0) << "registration loads nothing";
    void* kernel = nullptr;
    EXPECT_EQ(rt::get_kernel(&kernel, &stub), rt::Error::success);
    EXPECT_EQ(drvshim_fake_live_modules(), 1) << "the first use loaded it";
    float *a = nullptr, *b = nullptr, *c = nullptr;
    for (float** p : {&a, &b, &c}) ASSERT_EQ(rt::cudaMalloc(reinterpret_cast<void**>(p), 64 * 4), rt::Error::success);
    std::vector<float> ha(64, 1.5f), hb(64, 2.0f), hc(64, 0.0f);
    ASSERT_EQ(rt::cudaMemcpy(a, ha.data(), 256, rt::MemcpyKind::host_to_device), rt::Error::success);
    ASSERT_EQ(rt::cudaMemcpy(b, hb.data(), 256, rt::MemcpyKind::default_), rt::Error::success);
    void* args[] = {&a, &b, &c};
    EXPECT_EQ(rt::launch_kernel(kernel, {1, 1, 1}, {64, 1, 1}, args, 0, nullptr), rt::Error::success);
    ASSERT_EQ(rt::cudaMemcpy(hc.data(), c, 256, rt::MemcpyKind::device_to_host), rt::Error::success);
    EXPECT_EQ(hc[63], 3.5f);
    void* none = nullptr;
    EXPECT_EQ(rt::get_kernel(&none, &unknown), rt::Error::invalid_device_function);
    EXPECT_EQ(rt::cudaLaunchKernel(&stub, {1, 1, 1}, {2048, 1, 1}, args, 0, nullptr), rt::Error::invalid_value)
        << "a block larger than the kernel allows is refused before the driver";
  });
  const auto steps = implicit_steps();
  EXPECT_NE(std::find(steps.begin(), steps.end(), "__cudaGetKernel -> load a registered fatbin (" +
                                                      std::to_string(image.size()) + " bytes, 1 kernels)"),
            steps.end());
  rt::shutdown();
  rt::unregister_fatbin(handle);
}

}  // namespace
