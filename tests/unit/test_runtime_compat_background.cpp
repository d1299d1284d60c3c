// SPDX-License-Identifier: Apache-2.0
// runtime_compat's background policy (DRVSHIM_RT_POLICY=background) against
// the fake: the first call takes what the background set-up made, a failed
// background cuInit is the first call's error, device flags set before first
// use still apply.
#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "background_test_support.hpp"
#include "rt_fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;
using namespace background_test;

namespace {

// ---- runtime_compat's background policy -------------------------------------------------------

using RuntimeBackground = RuntimeCompatTest;

TEST_F(RuntimeBackground, TheFirstCallTakesWhatTheBackgroundSetUpMadeAndWaitsOnlyForWhatIsLeft) {
  static std::atomic<int> runs{0};
  drvshim_fake_register_kernel("rt_bg_count", [](const drvshim_fake_launch*, void**) { ++runs; });
  Registered fatbin(FatbinBuilder().ptx(ptx_kernel("rt_bg_count", 0)).build());
  static const char stub = 0;
  fatbin.function(&stub, "rt_bg_count");
  fatbin.end();
  const ScopedEnv slow("DRVSHIM_FAKE_INIT_DELAY_MS", "300");
  trace::enable(true);
  rt::set_policy(rt::Policy::background);  // starts the set-up now, as the library's load does
  EXPECT_EQ(rt::policy(), rt::Policy::background);
  on_thread([] {
    int count = 0;
    EXPECT_EQ(cudaGetDeviceCount(&count), cudaSuccess);  // waits for cuInit on the helper thread
    EXPECT_EQ(count, 1);
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 256), cudaSuccess);
    EXPECT_EQ(drvshim_fake_primary_refcount(0), 1) << "the background's retain, taken over: not a second one";
    EXPECT_EQ(cudaLaunchKernel(&stub, dim3(1), dim3(1), nullptr, 0, nullptr), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(cudaFree(p), cudaSuccess);
  });
  EXPECT_EQ(runs.load(), 1);
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 1u);
  EXPECT_EQ(drvshim_fake_call_count("cuDevicePrimaryCtxRetain"), 1u);
  EXPECT_EQ(drvshim_fake_call_count("cuLibraryLoadData"), 1u) << "the fatbin was loaded once, in the background";
  const auto waits = events("background-wait");
  EXPECT_NE(std::find_if(waits.begin(), waits.end(),
                         [](const trace::Record& w) { return w.args.rfind("Driver::init waited ", 0) == 0; }),
            waits.end())
      << "the first call waited for the background cuInit";
  // The launch waited for the fatbins through the registry's lock, not the
  // step's gate: the helper may record the step's end just after.
  for (int i = 0; i < 500 && events("background-step").size() < 4; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  std::vector<std::string> step_names;
  for (const auto& s : events("background-step")) step_names.push_back(s.args.substr(0, s.args.find(':')));
  EXPECT_EQ(step_names, (std::vector<std::string>{"load", "init", "primary-context 0", "task rt-fatbins"}));
  const auto steps = implicit_steps();
  EXPECT_NE(std::find(steps.begin(), steps.end(),
                      "cudaMalloc -> take the primary context of device 0 from the background set-up"),
            steps.end());
}

TEST_F(RuntimeBackground, ABackgroundCuInitFailureIsEveryCallsErrorAsUnderCudart) {
  drvshim_fake_fail_call("cuInit", 1, CUDA_ERROR_OPERATING_SYSTEM);
  rt::set_policy(rt::Policy::background);
  on_thread([] {
    int count = 0;
    EXPECT_EQ(cudaGetDeviceCount(&count), cudaErrorOperatingSystem) << "the original error, as cudart's number";
    EXPECT_NE(rt::last_error_detail().find("cuInit"), std::string::npos) << rt::last_error_detail();
    // cudart initialises once: its failure is the process's (initialise()).
    EXPECT_EQ(cudaGetDeviceCount(&count), cudaErrorOperatingSystem) << "not retried";
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 256), cudaErrorOperatingSystem);
    EXPECT_EQ(cudaGetLastError(), cudaErrorOperatingSystem);
  });
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 1u);
  EXPECT_EQ(drvshim_fake_call_count("cuDevicePrimaryCtxRetain"), 0u) << "the background's retain was skipped";
  rt::shutdown();
  rt::set_policy(rt::Policy::background);
  on_thread([] {
    int count = 0;
    EXPECT_EQ(cudaGetDeviceCount(&count), cudaSuccess) << "a shutdown forgets the failure";
    EXPECT_EQ(count, 1);
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 256), cudaSuccess);
    EXPECT_EQ(cudaFree(p), cudaSuccess);
  });
}

// Reading or setting the flags keeps the context the background made: no
// second activation (adversarial review, 2026-12-01: both gave it back).
TEST_F(RuntimeBackground, FlagsAreReadAndChangedOnTheBackgroundsContextWithoutASecondActivation) {
  rt::set_policy(rt::Policy::background);
  on_thread([] {
    unsigned flags = 0;
    EXPECT_EQ(cudaGetDeviceFlags(&flags), cudaSuccess);
    EXPECT_EQ(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync), cudaSuccess);
    EXPECT_EQ(drvshim_fake_primary_active(0), 1);
    EXPECT_EQ(drvshim_fake_primary_flags(0), static_cast<int>(cudaDeviceScheduleBlockingSync));
    void* p = nullptr;
    EXPECT_EQ(cudaMalloc(&p, 256), cudaSuccess);
    EXPECT_EQ(cudaFree(p), cudaSuccess);
  });
  EXPECT_EQ(drvshim_fake_call_count("cuDevicePrimaryCtxRetain"), 1u) << "the background's retain, taken over";
  EXPECT_EQ(drvshim_fake_call_count("cuDevicePrimaryCtxRelease"), 0u) << "nothing given back";
}

TEST_F(RuntimeBackground, DeviceFlagsSetBeforeFirstUseApplyAsUnderTheLazyPolicy) {
  rt::set_policy(rt::Policy::background);
  on_thread([] {
    EXPECT_EQ(cudaSetDeviceFlags(cudaDeviceScheduleBlockingSync), cudaSuccess)
        << "the background's early activation is given back";
    EXPECT_EQ(cudaSetDevice(0), cudaSuccess);
    unsigned flags = 0;
    EXPECT_EQ(cudaGetDeviceFlags(&flags), cudaSuccess);
    EXPECT_EQ(flags & cudaDeviceScheduleMask, static_cast<unsigned>(cudaDeviceScheduleBlockingSync));
  });
}

}  // namespace
