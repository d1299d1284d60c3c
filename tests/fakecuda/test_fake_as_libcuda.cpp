// SPDX-License-Identifier: Apache-2.0
// The fake driver as a user's program meets it: linked in place of libcuda
// (-lcuda), called through cuda.h's names, with no drvshim in between.
// What a user relies on: every name of cuda.h links and runs at its current
// ABI, work runs on the CPU versions they register, and whatever the fake
// cannot do fails loudly (an unregistered kernel, a CUBIN, a function it does
// not model, a misspelt failure injection) instead of passing silently.
#include <cuda.h>
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/time.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <drvshim/fakecuda.h>

namespace {

#define CHECK_CU(call) ASSERT_EQ((call), CUDA_SUCCESS) << #call

const char* const kPtx =
    ".version 7.0\n.target sm_75\n.address_size 64\n"
    ".visible .entry twice(\n    .param .u64 p,\n    .param .u32 n\n)\n{\n    ret;\n}\n"
    ".visible .entry unregistered_kernel(\n    .param .u64 p\n)\n{\n    ret;\n}\n"
    // A user's kernel named like one of the fake's built-in CPU versions, with another signature.
    ".visible .entry scale(\n    .param .u64 p,\n    .param .f32 f\n)\n{\n    ret;\n}\n";

void cpu_twice(const drvshim_fake_launch* launch, void** args) {
  float* p = nullptr;
  unsigned n = 0;
  std::memcpy(&p, args[0], sizeof p);
  std::memcpy(&n, args[1], sizeof n);
  for (unsigned i = 0; i < n && i < launch->grid[0] * launch->block[0]; ++i) p[i] *= 2.0f;
}

class FakeAsLibcuda : public ::testing::Test {
 protected:
  void SetUp() override {
    drvshim_fake_set_profile("discrete");
    CHECK_CU(cuInit(0));
    CUdevice dev = 0;
    CHECK_CU(cuDeviceGet(&dev, 0));
    CHECK_CU(cuCtxCreate(&ctx_, nullptr, 0, dev));  // cuCtxCreate_v4 in cuda.h 12.5 and later
    CHECK_CU(cuModuleLoadData(&module_, kPtx));
  }
  void TearDown() override {
    EXPECT_EQ(cuModuleUnload(module_), CUDA_SUCCESS);
    EXPECT_EQ(cuCtxDestroy(ctx_), CUDA_SUCCESS);
    EXPECT_EQ(drvshim_fake_live_contexts(), 0);
    EXPECT_EQ(drvshim_fake_live_device_allocations(), 0);
  }
  CUfunction function(const char* name) {
    CUfunction f = nullptr;
    EXPECT_EQ(cuModuleGetFunction(&f, module_, name), CUDA_SUCCESS) << name;
    return f;
  }
  CUcontext ctx_ = nullptr;
  CUmodule module_ = nullptr;
};

TEST_F(FakeAsLibcuda, ARegisteredKernelRunsOnDataCopiedThroughTheDriverNames) {
  drvshim_fake_register_kernel("twice", &cpu_twice);
  std::vector<float> host{1.0f, 2.0f, 3.0f, 4.0f};
  CUdeviceptr d = 0;
  CHECK_CU(cuMemAlloc(&d, host.size() * sizeof(float)));
  CHECK_CU(cuMemcpyHtoD(d, host.data(), host.size() * sizeof(float)));
  unsigned n = 4;
  void* args[] = {&d, &n};
  CHECK_CU(cuLaunchKernel(function("twice"), 1, 1, 1, 32, 1, 1, 0, nullptr, args, nullptr));
  CHECK_CU(cuCtxSynchronize());  // cuCtxSynchronize_v2 in cuda.h 13
  CHECK_CU(cuMemcpyDtoH(host.data(), d, host.size() * sizeof(float)));
  EXPECT_EQ(host, (std::vector<float>{2.0f, 4.0f, 6.0f, 8.0f}));
  CUdevice dev = -1;
  CHECK_CU(cuCtxGetDevice(&dev));
  EXPECT_EQ(dev, 0);
  CHECK_CU(cuCtxGetDevice_v2(&dev, ctx_));  // the 13.0 form names a context
  EXPECT_EQ(dev, 0);
  CHECK_CU(cuMemFree(d));
}

TEST_F(FakeAsLibcuda, EveryFunctionItModelsHasItsCurrentAbi) { EXPECT_STREQ(drvshim_fake_export_gaps(), ""); }

TEST_F(FakeAsLibcuda, AKernelWithoutACpuVersionFailsAndSaysWhy) {
  CUdeviceptr d = 0;
  CHECK_CU(cuMemAlloc(&d, 16));
  void* args[] = {&d};
  ::testing::internal::CaptureStderr();
  const CUresult r = cuLaunchKernel(function("unregistered_kernel"), 1, 1, 1, 1, 1, 1, 0, nullptr, args, nullptr);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(r, CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_NE(err.find("kernel 'unregistered_kernel' has no CPU version"), std::string::npos) << err;
  EXPECT_NE(err.find("drvshim_fake_register_kernel"), std::string::npos) << err;
  // Named like a built-in (scale, four parameters) but with two: not run as the built-in.
  float f = 2.0f;
  void* scale_args[] = {&d, &f};
  EXPECT_EQ(cuLaunchKernel(function("scale"), 1, 1, 1, 1, 1, 1, 0, nullptr, scale_args, nullptr),
            CUDA_ERROR_NOT_SUPPORTED);
  CHECK_CU(cuMemFree(d));
}

TEST_F(FakeAsLibcuda, ACubinIsRefusedWithTheTrueReasonInTheErrorLog) {
  unsigned char elf[128] = {0x7f, 'E', 'L', 'F', 2, 1, 1};
  char log[512] = {};
  CUjit_option options[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* values[] = {log, reinterpret_cast<void*>(sizeof log)};
  CUmodule m = nullptr;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cuModuleLoadDataEx(&m, elf, 2, options, values), CUDA_ERROR_INVALID_IMAGE);
  (void)::testing::internal::GetCapturedStderr();
  EXPECT_NE(std::string(log).find("a module from a CUBIN (ELF): the fake runs kernels from PTX text"),
            std::string::npos)
      << log;
}

TEST_F(FakeAsLibcuda, AFunctionItDoesNotModelFailsAndSaysWhich) {
  CUgraph graph = nullptr;
  ::testing::internal::CaptureStderr();
  EXPECT_EQ(cuGraphCreate(&graph, 0), CUDA_ERROR_NOT_SUPPORTED);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(err.find("cuGraphCreate is not modelled by the fake"), std::string::npos) << err;
}

TEST_F(FakeAsLibcuda, AnInjectionThatCouldNeverMatchIsReportedNotIgnored) {
  const unsigned long long misuse = drvshim_fake_misuse_count();
  ::testing::internal::CaptureStderr();
  drvshim_fake_fail_call("cuMemAlloc_v2", 1, CUDA_ERROR_OUT_OF_MEMORY);
  drvshim_fake_fail_call("cuMemAllco", 1, CUDA_ERROR_OUT_OF_MEMORY);
  drvshim_fake_fail_call("cuMemAlloc", 0, CUDA_ERROR_OUT_OF_MEMORY);
  const std::string err = ::testing::internal::GetCapturedStderr();
  EXPECT_EQ(drvshim_fake_pending_injections(), 0);
  EXPECT_EQ(drvshim_fake_take_misuse(), misuse + 3);
  EXPECT_NE(err.find("nth 0: the call to fail, counted from 1"), std::string::npos) << err;
  EXPECT_NE(err.find("'cuMemAlloc_v2' is a versioned name: failures are injected by base name ('cuMemAlloc')"),
            std::string::npos)
      << err;
  EXPECT_NE(err.find("'cuMemAllco' is not a driver function the fake models"), std::string::npos) << err;
  drvshim_fake_fail_call("cuMemAlloc", 1, CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr d = 0;
  EXPECT_EQ(cuMemAlloc(&d, 16), CUDA_ERROR_OUT_OF_MEMORY);
}

// A signal handler may call the driver while its thread is inside the same entry
// point: the forwarders resolve nothing at their first call (a guarded static would abort).
std::atomic<long> g_handler_calls{0};
void call_from_handler(int) {
  CUgraph graph = nullptr;
  (void)cuGraphCreate(&graph, 0);
  g_handler_calls.fetch_add(1);
}

TEST(FakeSignals, AnEntryPointCalledFromASignalHandlerInsideItselfReturns) {
  struct sigaction action {};
  action.sa_handler = &call_from_handler;
  ASSERT_EQ(::sigaction(SIGALRM, &action, nullptr), 0);
  itimerval timer{{0, 15}, {0, 15}};
  ::testing::internal::CaptureStderr();
  ASSERT_EQ(::setitimer(ITIMER_REAL, &timer, nullptr), 0);
  for (int i = 0; i < 200000 && g_handler_calls.load() < 50; ++i) {
    CUgraph graph = nullptr;
    EXPECT_EQ(cuGraphCreate(&graph, 0), CUDA_ERROR_NOT_SUPPORTED);
  }
  itimerval off{};
  ::setitimer(ITIMER_REAL, &off, nullptr);
  ::signal(SIGALRM, SIG_DFL);
  (void)::testing::internal::GetCapturedStderr();
  EXPECT_GT(g_handler_calls.load(), 0);
}

// The environment is read at the fake's first call: each case runs in a fresh process.
void first_call_with_fail(const char* value) {
  ::setenv("DRVSHIM_FAKE_FAIL", value, 1);
  (void)cuInit(0);
  std::exit(0);
}

TEST(FakeEnvironment, AFailureSpecThatCouldNeverMatchStopsTheProgramNamingIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(first_call_with_fail("cuMemAlloc_v2:1:2"), ::testing::KilledBySignal(SIGABRT),
              "DRVSHIM_FAKE_FAIL item 'cuMemAlloc_v2:1:2' names 'cuMemAlloc_v2' is a versioned name");
  EXPECT_EXIT(first_call_with_fail("cuInit:first:100"), ::testing::KilledBySignal(SIGABRT),
              "item 'cuInit:first:100' is not api:nth:code");
  EXPECT_EXIT(first_call_with_fail("cuInit:0:100"), ::testing::KilledBySignal(SIGABRT),
              "has nth 0: the call to fail, counted from 1");
  EXPECT_EXIT(first_call_with_fail("cuInit:1:0"), ::testing::KilledBySignal(SIGABRT),
              "has code 0: a CUresult other than CUDA_SUCCESS");
  EXPECT_EXIT(first_call_with_fail("cuInit:1:-5"), ::testing::KilledBySignal(SIGABRT), "is not api:nth:code");
  EXPECT_EXIT(first_call_with_fail("cuInit: 1:5"), ::testing::KilledBySignal(SIGABRT), "is not api:nth:code");
  EXPECT_EXIT(first_call_with_fail("cuInit:1:100"), ::testing::ExitedWithCode(0), "");
}

}  // namespace
