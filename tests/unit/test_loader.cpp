// SPDX-License-Identifier: Apache-2.0
// The loader: dlopen, version before init, cuGetProcAddress resolution, and
// every way loading can fail.
#include <dlfcn.h>
#include <limits.h>
#include <stdlib.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include "fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

std::string real(const char* path) {
  char buf[PATH_MAX];
  return realpath(path, buf) != nullptr ? std::string(buf) : std::string(path);
}

const MissingFunction* find_missing(const Driver& drv, const std::string& name) {
  for (const auto& m : drv.missing_functions()) {
    if (m.name == name) return &m;
  }
  return nullptr;
}

class Loader : public FakeDriverTest {};

TEST_F(Loader, LoadsTheFakeThroughDrvshimLibcudaAndResolvesTheWholeTable) {
  ASSERT_STREQ(std::getenv("DRVSHIM_LIBCUDA"), DRVSHIM_TEST_FAKE_PATH);
  Driver drv = Driver::load();
  EXPECT_EQ(drv.requested_path(), DRVSHIM_TEST_FAKE_PATH);
  EXPECT_EQ(drv.loaded_path(), real(DRVSHIM_TEST_FAKE_PATH));
  EXPECT_EQ(drv.version(), 13000);
  EXPECT_EQ(drv.resolver(), "cuGetProcAddress_v2");
  EXPECT_EQ(drv.functions_resolved(), drv.functions_total());
  EXPECT_TRUE(drv.missing_functions().empty());
  EXPECT_TRUE(drv.has_function("cuInit"));
  EXPECT_FALSE(drv.has_function("cuNoSuchFunction"));
  EXPECT_FALSE(drv.initialized());
}

TEST_F(Loader, ReadsTheVersionBeforeAnyInitAndResolvesEachFunctionOnce) {
  drvshim_fake_clear_call_log();
  Driver drv = load_fake();
  const auto calls = fake_calls();
  ASSERT_FALSE(calls.empty());
  EXPECT_EQ(calls.front(), "cuDriverGetVersion");
  EXPECT_EQ(std::count(calls.begin(), calls.end(), "cuInit"), 0) << "loading must not initialise";
  EXPECT_EQ(drvshim_fake_call_count("cuGetProcAddress"), drv.functions_total());
  drv.init();
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 1u);
}

TEST_F(Loader, ExplicitPathWinsOverTheEnvironment) {
  LoadOptions options;
  options.path = "/nonexistent/libcuda.so.1";
  auto e = expect_throw<DriverNotFoundError>([&] { Driver::load(options); });
  ASSERT_EQ(e.paths_tried().size(), 1u);
  EXPECT_EQ(e.paths_tried()[0], "/nonexistent/libcuda.so.1");
  ASSERT_EQ(e.dl_errors().size(), 1u);
  EXPECT_NE(e.dl_errors()[0].find("No such file"), std::string::npos) << e.dl_errors()[0];
  EXPECT_EQ(e.kind(), ErrorKind::driver_not_found);
  EXPECT_NE(std::string(e.what()).find("/nonexistent/libcuda.so.1"), std::string::npos);
  EXPECT_NE(e.hint().find("DRVSHIM_LIBCUDA"), std::string::npos);
}

TEST_F(Loader, DefaultSearchTriesTheSonameNeverTheLinkStub) {
  void* probe = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (probe != nullptr) {
    dlclose(probe);
    GTEST_SKIP() << "this machine has a real libcuda.so.1; the not-found path cannot be shown here";
  }
  LoadOptions options;
  options.use_environment = false;
  auto e = expect_throw<DriverNotFoundError>([&] { Driver::load(options); });
  ASSERT_FALSE(e.paths_tried().empty());
  EXPECT_EQ(e.paths_tried().front(), "libcuda.so.1");
  for (const auto& p : e.paths_tried()) {
    EXPECT_EQ(p.find("libcuda.so.1"), p.size() - std::string("libcuda.so.1").size()) << p;
  }
  EXPECT_EQ(e.paths_tried().size(), e.dl_errors().size());
}

TEST_F(Loader, StubProfileIsReportedAsTheLinkStub) {
  drvshim_fake_set_profile("stub");
  auto e = expect_throw<StubLibraryError>([] { load_fake(); });
  EXPECT_EQ(e.api(), "cuDriverGetVersion");
  EXPECT_EQ(e.code(), 34);
  EXPECT_STREQ(e.code_name(), "CUDA_ERROR_STUB_LIBRARY");
  EXPECT_EQ(e.path(), real(DRVSHIM_TEST_FAKE_PATH));
  EXPECT_NE(std::string(e.what()).find("link stub"), std::string::npos) << e.what();
}

TEST_F(Loader, TheToolkitsRealStubIsRefusedWithAnExplanation) {
  if (access(DRVSHIM_TEST_CUDA_STUB_PATH, R_OK) != 0) GTEST_SKIP() << "no toolkit stub at " DRVSHIM_TEST_CUDA_STUB_PATH;
  LoadOptions options;
  options.path = DRVSHIM_TEST_CUDA_STUB_PATH;
  auto e = expect_throw<StubLibraryError>([&] { Driver::load(options); });
  EXPECT_EQ(e.code(), 34);
  EXPECT_NE(e.hint().find("stubs/libcuda.so"), std::string::npos) << e.hint();
}

TEST_F(Loader, OldDriverLoadsWithNewerFunctionsReportedMissing) {
  drvshim_fake_set_profile("old");
  Driver drv = load_fake();
  EXPECT_EQ(drv.version(), 11080);
  const MissingFunction* create = find_missing(drv, "cuCtxCreate");
  ASSERT_NE(create, nullptr);
  EXPECT_EQ(create->version, 12050);
  EXPECT_FALSE(create->required);
  EXPECT_EQ(create->reason, "needs driver >= 12.5 (this is 11.8)");
  const MissingFunction* id = find_missing(drv, "cuCtxGetId");
  ASSERT_NE(id, nullptr);
  EXPECT_FALSE(drv.has_function("cuCtxGetId"));
  EXPECT_EQ(drv.functions_resolved() + drv.missing_functions().size(), drv.functions_total());
  // The driver is never asked for an ABI newer than itself (that is CUDA_ERROR_INVALID_VALUE).
  EXPECT_EQ(drvshim_fake_call_count("cuGetProcAddress"), drv.functions_resolved());
}

TEST_F(Loader, FallsBackToTheElevenXResolverWithoutCuGetProcAddressV2) {
  LoadOptions options;
  options.path = DRVSHIM_TEST_FAKE_NOV2_PATH;
  Driver drv = Driver::load(options);
  EXPECT_EQ(drv.resolver(), "cuGetProcAddress");
  EXPECT_EQ(drv.functions_resolved(), drv.functions_total());
}

TEST_F(Loader, OptionalFunctionReportedVersionNotSufficientMakesItsFeatureUnsupported) {
  drvshim_fake_set_proc_status("cuDeviceGetUuid", 2);
  Driver drv = load_fake();
  const MissingFunction* m = find_missing(drv, "cuDeviceGetUuid");
  ASSERT_NE(m, nullptr);
  EXPECT_NE(m->reason.find("not sufficient"), std::string::npos) << m->reason;
  drv.init();
  auto e = expect_throw<DriverTooOldError>([&] { (void)drv.device(0).uuid(); });
  EXPECT_NE(std::string(e.what()).find("cuDeviceGetUuid"), std::string::npos) << e.what();
  EXPECT_EQ(drv.device(0).name(), "NVIDIA H200") << "the rest of the driver keeps working";
}

TEST_F(Loader, MissingRequiredFunctionFailsTheLoadNamingIt) {
  drvshim_fake_set_proc_status("cuCtxPushCurrent", 1);
  auto e = expect_throw<DriverTooOldError>([] { load_fake(); });
  ASSERT_EQ(e.missing().size(), 1u);
  EXPECT_NE(e.missing()[0].find("cuCtxPushCurrent"), std::string::npos);
  EXPECT_NE(std::string(e.what()).find("symbol not found"), std::string::npos) << e.what();
  EXPECT_EQ(e.driver_version(), 13000);
}

TEST_F(Loader, FailingVersionQueryIsACudaErrorNamingTheCall) {
  drvshim_fake_fail_call("cuDriverGetVersion", 1, CUDA_ERROR_UNKNOWN);
  auto e = expect_throw<CudaError>([] { load_fake(); });
  EXPECT_EQ(e.api(), "cuDriverGetVersion");
  EXPECT_EQ(e.code(), 999);
}

TEST_F(Loader, ResolverErrorsAreReportedPerFunction) {
  drvshim_fake_fail_call("cuGetProcAddress", 3, CUDA_ERROR_INVALID_VALUE);  // the third entry: cuInit
  auto e = expect_throw<DriverTooOldError>([] { load_fake(); });
  ASSERT_EQ(e.missing().size(), 1u);
  EXPECT_NE(e.missing()[0].find("cuInit"), std::string::npos) << e.missing()[0];
  EXPECT_NE(e.missing()[0].find("CUDA_ERROR_INVALID_VALUE"), std::string::npos) << e.missing()[0];
}

TEST_F(Loader, ALibraryThatIsNotADriverIsRefused) {
  LoadOptions options;
  options.path = "libm.so.6";
  // No driver was found: none is too old, and nothing asks to update one.
  auto e = expect_throw<DriverNotFoundError>([&] { Driver::load(options); });
  EXPECT_NE(std::string(e.what()).find("\"libm.so.6\" (loaded "), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("which does not export cuDriverGetVersion: it is not a CUDA driver"),
            std::string::npos)
      << e.what();
  EXPECT_EQ(e.hint().find("update"), std::string::npos) << e.hint();
}

}  // namespace

namespace {

TEST(NvrtcLoader, AMissingLibraryListsThePathsTried) {
  drvshim::NvrtcLoadOptions options;
  options.path = "/nonexistent/libnvrtc.so.13";
  try {
    (void)drvshim::Nvrtc::load(options);
    FAIL() << "loaded a library that does not exist";
  } catch (const drvshim::NvrtcNotFoundError& e) {
    ASSERT_EQ(e.paths_tried().size(), 1u);
    EXPECT_EQ(e.paths_tried()[0], "/nonexistent/libnvrtc.so.13");
    EXPECT_NE(e.dl_errors()[0].find("No such file"), std::string::npos);
    EXPECT_NE(e.hint().find("DRVSHIM_LIBNVRTC"), std::string::npos);
  }
}

TEST(NvrtcLoader, TheToolkitsNvrtcLoadsWithItsBuiltinsAndArchitectures) {
  drvshim::Nvrtc nv = [] {
    try {
      return drvshim::Nvrtc::load();
    } catch (const drvshim::NvrtcNotFoundError& e) {
      throw std::runtime_error(e.what());
    }
  }();
  EXPECT_EQ(nv.version_major(), drvshim::library_version().cuda_header_version / 1000);
  EXPECT_NE(nv.builtins_path().find("libnvrtc-builtins.so"), std::string::npos);
  EXPECT_FALSE(nv.supported_architectures().empty());
  EXPECT_NE(std::find(nv.supported_architectures().begin(), nv.supported_architectures().end(), 90),
            nv.supported_architectures().end());
}

TEST(NvrtcLoader, ALibraryWithoutNvrtcIsRefusedNamingTheMissingFunction) {
  drvshim::NvrtcLoadOptions options;
  options.path = "libm.so.6";
  try {
    (void)drvshim::Nvrtc::load(options);
    FAIL();
  } catch (const drvshim::NvrtcNotFoundError& e) {
    EXPECT_NE(std::string(e.what()).find("nvrtcVersion"), std::string::npos) << e.what();
  }
}

}  // namespace

// A driver found but refused its thread-local storage (dlopen'ed late, after
// other initial-exec TLS used glibc's surplus) is not a missing driver: the
// hint says what helps (adversarial review, 2026-12-01).
TEST(LoaderErrors, AStaticTlsFailureGetsItsOwnHint) {
  const drvshim::DriverNotFoundError tls({"/x/libcuda.so.1"},
                                         {"/x/libcuda.so.1: cannot allocate memory in static TLS block"});
  EXPECT_NE(tls.hint().find("static TLS"), std::string::npos) << tls.hint();
  EXPECT_NE(tls.hint().find("LD_PRELOAD"), std::string::npos) << tls.hint();
  EXPECT_EQ(tls.hint().find("install the NVIDIA driver"), std::string::npos) << tls.hint();
  const drvshim::DriverNotFoundError missing({"libcuda.so.1"}, {"libcuda.so.1: cannot open shared object file"});
  EXPECT_NE(missing.hint().find("install the NVIDIA driver"), std::string::npos) << missing.hint();
}
