// SPDX-License-Identifier: Apache-2.0
// Modules and launches against the fake: PTX parsed for entries, parameter
// layouts and globals; kernels run as registered CPU implementations.
#include <atomic>
#include <cerrno>
#include <cstring>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "fixture.hpp"
#include "modules/jit_capture.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

constexpr const char* kPtx = R"(
.version 8.0
.target sm_90
.address_size 64
.global .align 4 .u32 launches_seen;
.visible .entry vadd(
    .param .u64 vadd_param_0,
    .param .u64 vadd_param_1,
    .param .u64 vadd_param_2,
    .param .u32 vadd_param_3
)
{
    ret;
}
.visible .entry scale(
    .param .u64 scale_param_0,
    .param .f32 scale_param_1,
    .param .align 8 .b8 scale_param_2[24]
)
{
    ret;
}
)";

// The CPU implementation of vadd: c[i] = a[i] + b[i] for every thread of the grid.
void vadd_cpu(const drvshim_fake_launch* l, void** args) {
  const auto* a = *static_cast<const float* const*>(args[0]);
  const auto* b = *static_cast<const float* const*>(args[1]);
  auto* c = *static_cast<float* const*>(args[2]);
  const unsigned n = *static_cast<const unsigned*>(args[3]);
  const unsigned threads = l->grid[0] * l->block[0];
  for (unsigned i = 0; i < n && i < threads; ++i) c[i] = a[i] + b[i];
}

std::span<const std::byte> bytes_of(const char* text) {
  return std::as_bytes(std::span<const char>(text, std::strlen(text)));
}

class Modules : public PrimaryContextTest {
 protected:
  void SetUp() override {
    drvshim_fake_register_kernel("vadd", &vadd_cpu);
    PrimaryContextTest::SetUp();
  }
};

TEST_F(Modules, FormatsAreRecognisedByContent) {
  EXPECT_EQ(detect_module_format(bytes_of(kPtx)), ModuleFormat::ptx);
  const unsigned char elf[] = {0x7f, 'E', 'L', 'F', 2, 1, 1, 0};
  EXPECT_EQ(detect_module_format(std::as_bytes(std::span<const unsigned char>(elf))), ModuleFormat::cubin);
  const unsigned char fatbin[] = {0x50, 0xed, 0x55, 0xba, 1, 0, 0x10, 0};
  EXPECT_EQ(detect_module_format(std::as_bytes(std::span<const unsigned char>(fatbin))), ModuleFormat::fatbin);
  expect_throw<InvalidArgumentError>([] { (void)detect_module_format(bytes_of("hello world")); });
}

TEST_F(Modules, PtxLoadsWithItsLogAndKernelsAreFoundAndDescribed) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  EXPECT_EQ(m.format(), ModuleFormat::ptx);
  EXPECT_NE(m.jit_log().info.find("2 entry function(s)"), std::string::npos) << m.jit_log().info;
  EXPECT_GT(m.jit_log().wall_ms, 0.0f);
  EXPECT_EQ(m.kernel_names(), (std::vector<std::string>{"vadd", "scale"}));
  const Kernel k = m.kernel("scale");
  ASSERT_TRUE(k.params().has_value());
  ASSERT_EQ(k.params()->size(), 3u);
  EXPECT_EQ((*k.params())[1].offset, 8u);
  EXPECT_EQ((*k.params())[1].size, 4u);
  EXPECT_EQ((*k.params())[2].offset, 16u) << "aligned to 8";
  EXPECT_EQ((*k.params())[2].size, 24u);
  EXPECT_EQ(k.max_threads_per_block(), 1024);
  EXPECT_EQ(k.registers(), 32);
  EXPECT_EQ(k.max_active_blocks_per_sm(256), 8);
  EXPECT_EQ(module_loading_mode(*drv_), "lazy");
}

TEST_F(Modules, AMissingKernelListsTheModulesKernels) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  auto e = expect_throw<InvalidArgumentError>([&] { (void)m.kernel("vad"); });
  EXPECT_NE(std::string(e.what()).find("no kernel named \"vad\""), std::string::npos);
  EXPECT_NE(e.hint().find("its kernels are: vadd, scale"), std::string::npos) << e.hint();
}

TEST_F(Modules, APtxSyntaxErrorCarriesTheJitLog) {
  const std::string bad = std::string(kPtx) + "\nsyntax_error here;\n";
  auto e = expect_throw<CudaError>([&] { (void)Module::load(ctx(), bytes_of(bad.c_str())); });
  EXPECT_EQ(e.code(), 218);
  EXPECT_NE(std::string(e.what()).find("JIT error log: ptxas application ptx input, line"), std::string::npos)
      << e.what();
  EXPECT_NE(std::string(e.what()).find("syntax error"), std::string::npos);
}

TEST_F(Modules, UnreadableFilesAreNamed) {
  auto e = expect_throw<SystemError>([&] { (void)Module::load_file(ctx(), "/nonexistent/k.ptx"); });
  EXPECT_NE(std::string(e.what()).find("/nonexistent/k.ptx"), std::string::npos);
  EXPECT_EQ(e.system_code(), ENOENT);
}

TEST_F(Modules, ATypedLaunchRunsAndComputes) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  const Kernel vadd = m.kernel("vadd");
  const unsigned n = 1000;
  std::vector<float> a(n), b(n), c(n, -1.0f);
  std::iota(a.begin(), a.end(), 1.0f);
  std::iota(b.begin(), b.end(), 100.0f);
  auto da = DeviceBuffer::allocate(ctx(), n * 4);
  auto db = DeviceBuffer::allocate(ctx(), n * 4);
  auto dc = DeviceBuffer::allocate(ctx(), n * 4);
  copy(da.as<float>(), std::span<const float>(a));
  copy(db.as<float>(), std::span<const float>(b));
  auto s = Stream::create(ctx());
  launch(vadd, LaunchConfig{{(n + 255) / 256}, {256}, 0, s.ref(), {}}, da.address(), db.address(), dc.address(), n);
  s.ref().synchronize();
  copy(std::span<float>(c), DeviceSpan<const float>(dc.as<float>()));
  EXPECT_EQ(c[0], 101.0f);
  EXPECT_EQ(c[n - 1], 1000.0f + 1099.0f);
  EXPECT_EQ(drvshim_fake_launch_count(), 1u);
}

TEST_F(Modules, WrongArgumentsAreRefusedBeforeTheDriverNamingTheArgument) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  const Kernel vadd = m.kernel("vadd");
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  const LaunchConfig cfg{{1}, {32}, 0, {}, {}};
  auto e1 = expect_throw<InvalidArgumentError>([&] { launch(vadd, cfg, buf.address(), buf.address()); });
  EXPECT_NE(std::string(e1.what()).find("kernel vadd takes 4 argument(s), 2 given"), std::string::npos) << e1.what();
  auto e2 = expect_throw<InvalidArgumentError>(
      [&] { launch(vadd, cfg, buf.address(), buf.address(), buf.address(), std::uint64_t{16}); });
  EXPECT_NE(std::string(e2.what()).find("argument 4 of 4 has 8 bytes, the kernel expects 4 bytes"), std::string::npos)
      << e2.what();
  auto e3 = expect_throw<InvalidArgumentError>([&] {
    launch(vadd, LaunchConfig{{1}, {32, 64}, 0, {}, {}}, buf.address(), buf.address(), buf.address(), 16u);
  });
  EXPECT_NE(std::string(e3.what()).find("a block of 2048 threads (32x64x1) exceeds the kernel's limit of 1024"),
            std::string::npos)
      << e3.what();
  EXPECT_EQ(drvshim_fake_call_count("cuLaunchKernel"), 0u) << "refused before the driver";
}

TEST_F(Modules, RawAndClusterLaunches) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  const Kernel vadd = m.kernel("vadd");
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  DevicePtr p = buf.address();
  unsigned n = 0;
  void* args[] = {&p, &p, &p, &n};
  launch_raw(vadd, LaunchConfig{{1}, {32}, 0, {}, {}}, args);
  launch(vadd, LaunchConfig{{2}, {32}, 0, {}, Dim3{2, 1, 1}}, p, p, p, n);
  EXPECT_EQ(drvshim_fake_call_count("cuLaunchKernel"), 1u);
  EXPECT_EQ(drvshim_fake_call_count("cuLaunchKernelEx"), 1u);
}

TEST_F(Modules, GlobalsAreTypedDeviceViews) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  auto g = m.global<std::uint32_t>("launches_seen");
  EXPECT_EQ(g.size(), 1u);
  const std::uint32_t v = 42;
  copy(g, std::span<const std::uint32_t>(&v, 1));
  std::uint32_t back = 0;
  copy(std::span<std::uint32_t>(&back, 1), DeviceSpan<const std::uint32_t>(g));
  EXPECT_EQ(back, 42u);
  expect_throw<InvalidArgumentError>([&] { (void)m.global<std::uint64_t>("launches_seen"); });
  expect_throw<CudaError>([&] { (void)m.global<std::uint32_t>("nope"); });
}

TEST_F(Modules, UnloadIsExplicitOrAtDestruction) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  EXPECT_EQ(drvshim_fake_live_modules(), 1);
  auto moved = std::move(m);
  moved.unload();
  EXPECT_EQ(drvshim_fake_live_modules(), 0);
  moved.unload();
  EXPECT_EQ(drvshim_fake_call_count("cuModuleUnload"), 1u);
}

class OldModules : public Modules {
 protected:
  const char* profile() const override { return "old"; }
};

TEST_F(OldModules, WithoutParamInfoTheLayoutIsUnknownAndLaunchesAreUnchecked) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  const Kernel vadd = m.kernel("vadd");
  EXPECT_FALSE(vadd.params().has_value());
  EXPECT_TRUE(m.kernel_names().empty()) << "11.8 cannot enumerate a module's functions";
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  launch(vadd, LaunchConfig{{1}, {32}, 0, {}, {}}, buf.address(), buf.address(), buf.address(), 0u);
  EXPECT_EQ(drvshim_fake_launch_count(), 1u);
}

}  // namespace

namespace {

class Libraries : public Modules {};

TEST_F(Libraries, LoadOnceAndGetKernelsPerContext) {
  auto lib = Library::load(*drv_, bytes_of(kPtx));
  EXPECT_EQ(lib.format(), ModuleFormat::ptx);
  auto other = drv_->device(0).create_context();
  const Kernel in_primary = lib.kernel(ctx(), "vadd");
  const Kernel in_other = lib.kernel(other.ref(), "vadd");
  ASSERT_TRUE(in_primary.params().has_value());
  EXPECT_EQ(in_primary.params()->size(), 4u);
  EXPECT_EQ(in_other.context().address(), other.ref().address());
  const unsigned n = 8;
  std::vector<float> a(n, 1.0f), c(n, 0.0f);
  auto da = DeviceBuffer::allocate(ctx(), n * 4);
  auto dc = DeviceBuffer::allocate(ctx(), n * 4);
  copy(da.as<float>(), std::span<const float>(a));
  launch(in_primary, LaunchConfig{{1}, {32}, 0, {}, {}}, da.address(), da.address(), dc.address(), n);
  copy(std::span<float>(c), DeviceSpan<const float>(dc.as<float>()));
  EXPECT_EQ(c[7], 2.0f);
  auto e = expect_throw<InvalidArgumentError>([&] { (void)lib.kernel(ctx(), "nope"); });
  EXPECT_NE(std::string(e.what()).find("no kernel named \"nope\""), std::string::npos);
  lib.unload();
  EXPECT_FALSE(lib);
  EXPECT_EQ(drvshim_fake_live_modules(), 1) << "its two Kernels keep the library loaded";
  EXPECT_EQ(drvshim_fake_call_count("cuLibraryUnload"), 0u);
}

TEST_F(OldModules, ContextIndependentLoadingNeedsACuda12Driver) {
  auto e = expect_throw<DriverTooOldError>([&] { (void)Library::load(*drv_, bytes_of(kPtx)); });
  EXPECT_NE(std::string(e.what()).find("cuLibraryLoadData"), std::string::npos) << e.what();
}

}  // namespace

// ---- kernels keep their code loaded; the parameter probe; JIT outputs -------------------------

namespace {

class KernelLifetime : public Modules {};

// Before: a launch after Module::unload reached the driver with the unloaded
// function's handle (the fake counts it as misuse and answers INVALID_HANDLE).
TEST_F(KernelLifetime, AKernelKeepsItsModuleLoadedUntilItIsDestroyed) {
  std::optional<Kernel> vadd;
  {
    auto m = Module::load(ctx(), bytes_of(kPtx));
    vadd.emplace(m.kernel("vadd"));
    m.unload();
    EXPECT_FALSE(m);
  }
  EXPECT_EQ(drvshim_fake_live_modules(), 1);
  EXPECT_EQ(drvshim_fake_call_count("cuModuleUnload"), 0u);
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  launch(*vadd, LaunchConfig{{1}, {32}, 0, {}, {}}, buf.address(), buf.address(), buf.address(), 0u);
  EXPECT_EQ(drvshim_fake_launch_count(), 1u);
  EXPECT_EQ(drvshim_fake_misuse_count(), 0u) << drvshim_fake_last_misuse();
  const Kernel copy = *vadd;
  vadd.reset();
  EXPECT_EQ(drvshim_fake_live_modules(), 1) << "a copy of the Kernel still holds it";
  (void)copy;
}

TEST_F(KernelLifetime, TheLastKernelUnloadsTheModuleAndAKernelOfATemporaryModuleWorks) {
  {
    const Kernel vadd = Module::load(ctx(), bytes_of(kPtx)).kernel("vadd");
    EXPECT_EQ(drvshim_fake_live_modules(), 1);
    auto buf = DeviceBuffer::allocate(ctx(), 64);
    launch(vadd, LaunchConfig{{1}, {32}, 0, {}, {}}, buf.address(), buf.address(), buf.address(), 0u);
  }
  EXPECT_EQ(drvshim_fake_live_modules(), 0);
  EXPECT_EQ(drvshim_fake_call_count("cuModuleUnload"), 1u);
}

TEST_F(KernelLifetime, ExplicitUnloadWithoutKernelsStillUnloadsAtOnce) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  { (void)m.kernel("vadd"); }
  m.unload();
  EXPECT_EQ(drvshim_fake_call_count("cuModuleUnload"), 1u);
  EXPECT_EQ(drvshim_fake_live_modules(), 0);
}

TEST_F(KernelLifetime, ALibraryKernelKeepsItsLibraryLoaded) {
  std::optional<Kernel> vadd;
  {
    auto lib = Library::load(*drv_, bytes_of(kPtx));
    vadd.emplace(lib.kernel(ctx(), "vadd"));
  }
  EXPECT_EQ(drvshim_fake_live_modules(), 1);
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  launch(*vadd, LaunchConfig{{1}, {32}, 0, {}, {}}, buf.address(), buf.address(), buf.address(), 0u);
  EXPECT_EQ(drvshim_fake_launch_count(), 1u);
  vadd.reset();
  EXPECT_EQ(drvshim_fake_live_modules(), 0);
  EXPECT_EQ(drvshim_fake_call_count("cuLibraryUnload"), 1u);
}

// Kernel copies on several threads launch before, during and after the
// owner's unload: every launch reaches a loaded module, and the last copy, on
// whichever thread, unloads it once (also run under TSan). Before: the
// launches after the unload reached the driver with an unloaded function.
TEST_F(KernelLifetime, ConcurrentLaunchesAndAnUnloadNeverMeetAnUnloadedModule) {
  auto m = std::make_unique<Module>(Module::load(ctx(), bytes_of(kPtx)));
  std::optional<Kernel> vadd(m->kernel("vadd"));
  std::atomic<int> started{0};
  std::atomic<bool> unloaded{false};
  std::atomic<unsigned> launches{0};
  std::atomic<unsigned> failures{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < 6; ++t) {
    threads.emplace_back([&, copy = *vadd] {
      ++started;
      const auto one = [&] {
        try {
          launch(copy, LaunchConfig{{1}, {32}, 0, {}, {}}, DevicePtr{0}, DevicePtr{0}, DevicePtr{0}, 0u);
          ++launches;
        } catch (const Error&) {
          ++failures;
        }
      };
      while (!unloaded.load()) one();
      for (int i = 0; i < 50; ++i) one();
    });
  }
  while (started.load() < 6) std::this_thread::yield();
  m->unload();
  m.reset();
  vadd.reset();  // the last copy now dies on a worker thread, which unloads the module
  unloaded = true;
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0u);
  EXPECT_EQ(drvshim_fake_launch_count(), launches.load());
  EXPECT_EQ(drvshim_fake_misuse_count(), 0u) << drvshim_fake_last_misuse();
  EXPECT_EQ(drvshim_fake_live_modules(), 0);
  EXPECT_EQ(drvshim_fake_call_count("cuModuleUnload"), 1u);
}

class ParamProbe : public Modules {
 protected:
  // The debug log's lines while `f` runs.
  template <class F>
  std::vector<std::string> debug_lines(F&& f) {
    std::vector<std::string> lines;
    log::set_level(log::Level::debug);
    log::set_sink([&](log::Level, std::string_view m) { lines.emplace_back(m); });
    f();
    log::set_sink({});
    log::set_level(log::Level::warn);
    return lines;
  }
  static bool said_unchecked(const std::vector<std::string>& lines, const std::string& why) {
    for (const auto& l : lines) {
      if (l.find("kernel vadd: parameter layout unknown") != std::string::npos &&
          l.find("its launches are not checked") != std::string::npos && l.find(why) != std::string::npos) {
        return true;
      }
    }
    return false;
  }
};

// Before: INVALID_VALUE at index 0 meant "no parameters": the four-argument launch was refused.
TEST_F(ParamProbe, InvalidValueForTheFirstParameterMeansUncheckedNotZeroArguments) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  drvshim_fake_fail_call("cuFuncGetParamInfo", 1, CUDA_ERROR_INVALID_VALUE);
  std::optional<Kernel> vadd;
  const auto lines = debug_lines([&] { vadd.emplace(m.kernel("vadd")); });
  EXPECT_FALSE(vadd->params().has_value());
  EXPECT_TRUE(said_unchecked(lines, "CUDA_ERROR_INVALID_VALUE for parameter 0")) << ::testing::PrintToString(lines);
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  launch(*vadd, LaunchConfig{{1}, {32}, 0, {}, {}}, buf.address(), buf.address(), buf.address(), 0u);
  EXPECT_EQ(drvshim_fake_launch_count(), 1u);
}

// An unchecked launch is said once per kernel (a warning, not only the debug
// lookup line), and require_checked refuses it before the driver is called.
TEST_F(ParamProbe, AnUncheckedLaunchIsSaidOnceAndRefusedWhenChecksAreRequired) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  drvshim_fake_fail_call("cuFuncGetParamInfo", 1, CUDA_ERROR_INVALID_VALUE);
  const Kernel vadd = m.kernel("vadd");
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  LaunchConfig strict{{1}, {32}};
  strict.require_checked = true;
  try {
    launch(vadd, strict, buf.address(), buf.address(), buf.address(), 0u);
    ADD_FAILURE() << "an unchecked launch with require_checked went ahead";
  } catch (const UnsupportedError& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("the 4 argument(s) cannot be checked: the kernel's parameter layout is unknown "
                        "(cuFuncGetParamInfo answers CUDA_ERROR_INVALID_VALUE for parameter 0"),
              std::string::npos)
        << what;
    EXPECT_NE(what.find("kernel vadd"), std::string::npos) << what;
    EXPECT_EQ(what.find("CUDA 12.4 or later"), std::string::npos) << "this driver has the query: " << what;
  }
  EXPECT_EQ(drvshim_fake_launch_count(), 0u);
  std::size_t warnings = 0;
  log::set_sink([&](log::Level level, std::string_view line) {
    if (level == log::Level::warn && line.find("kernel vadd: launched with 4 argument(s) unchecked") != line.npos &&
        line.find("LaunchConfig::require_checked refuses such launches") != line.npos) {
      ++warnings;
    }
  });
  for (int i = 0; i < 3; ++i) launch(vadd, LaunchConfig{{1}, {32}}, buf.address(), buf.address(), buf.address(), 0u);
  log::set_sink({});
  EXPECT_EQ(warnings, 1u);
  EXPECT_EQ(drvshim_fake_launch_count(), 3u);
}

// A kernel without parameters: the driver calls parameter 0 invalid, and no
// arguments agree with that, so require_checked launches it.
TEST_F(ParamProbe, AKernelWithoutParametersLaunchesWhenChecksAreRequired) {
  static const char* const kNoParams =
      ".version 7.0\n.target sm_75\n.address_size 64\n.visible .entry no_parameters()\n{\n    ret;\n}\n";
  drvshim_fake_register_kernel("no_parameters", [](const drvshim_fake_launch*, void**) {});
  auto m = Module::load(ctx(), bytes_of(kNoParams));
  const Kernel k = m.kernel("no_parameters");
  EXPECT_FALSE(k.params().has_value());
  LaunchConfig strict{{1}, {1}};
  strict.require_checked = true;
  launch(k, strict);
  EXPECT_EQ(drvshim_fake_launch_count(), 1u);
  EXPECT_THROW(launch(k, strict, 1), UnsupportedError) << "one argument where the layout is unknown";
}

// Before: any other error made the kernel unusable (Module::kernel threw).
TEST_F(ParamProbe, AFailedQueryLeavesTheKernelUsableAndUnchecked) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  drvshim_fake_fail_call("cuFuncGetParamInfo", 3, CUDA_ERROR_NOT_SUPPORTED);
  std::optional<Kernel> vadd;
  const auto lines = debug_lines([&] { vadd.emplace(m.kernel("vadd")); });
  EXPECT_FALSE(vadd->params().has_value()) << "two of four parameters are not a layout";
  EXPECT_TRUE(said_unchecked(lines, "failed for parameter 2 with CUDA_ERROR_NOT_SUPPORTED"))
      << ::testing::PrintToString(lines);
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  launch(*vadd, LaunchConfig{{1}, {32}, 0, {}, {}}, buf.address(), buf.address(), buf.address(), 0u);
  EXPECT_EQ(drvshim_fake_launch_count(), 1u);
}

// A sticky error while reading the layout is the context's death, not an
// unknown layout: it is raised (and poisons the context) rather than giving
// back a kernel whose launches would all fail.
TEST_F(ParamProbe, AStickyErrorDuringTheProbeIsRaisedNotTakenForAnUnknownLayout) {
  {
    auto m = Module::load(ctx(), bytes_of(kPtx));
    drvshim_fake_fail_call("cuFuncGetParamInfo", 2, CUDA_ERROR_ILLEGAL_ADDRESS);
    const auto e = expect_throw<CudaError>([&] { (void)m.kernel("vadd"); });
    EXPECT_EQ(e.code(), CUDA_ERROR_ILLEGAL_ADDRESS);
    EXPECT_NE(std::string(e.what()).find("kernel vadd, parameter 1"), std::string::npos) << e.what();
    EXPECT_EQ(expect_throw<ContextPoisonedError>([&] { (void)DeviceBuffer::allocate(ctx(), 64); }).code(),
              CUDA_ERROR_ILLEGAL_ADDRESS);
  }
  primary_.reset();
  drv_.reset();
  drvshim_fake_reset();  // the poisoned context's module was leaked on purpose; the fake starts over
}

// Before: the probe asked for ever larger indices (this test hung).
TEST_F(ParamProbe, TheProbeIsBoundedAgainstADriverThatNeverSaysEnough) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  drvshim_fake_endless_param_info(1);
  std::optional<Kernel> vadd;
  const auto lines = debug_lines([&] { vadd.emplace(m.kernel("vadd")); });
  EXPECT_FALSE(vadd->params().has_value());
  EXPECT_LE(drvshim_fake_call_count("cuFuncGetParamInfo"), 32765u);
  EXPECT_TRUE(said_unchecked(lines, "within at most 32764")) << ::testing::PrintToString(lines);
}

TEST_F(ParamProbe, AKnownLayoutIsStillRead) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  const Kernel vadd = m.kernel("vadd");
  ASSERT_TRUE(vadd.params().has_value());
  EXPECT_EQ(vadd.params()->size(), 4u);
  EXPECT_GE(drvshim_fake_call_count("cuFuncGetParamInfo"), 5u) << "four parameters, then the end";
}

class JitOutputs : public Modules {};

// Before: the wall time was read through a pointer the driver never writes
// (0 ms on the H200); the fake now writes the slot as the driver does.
TEST_F(JitOutputs, TheWallTimeIsReadFromTheOptionSlot) {
  auto m = Module::load(ctx(), bytes_of(kPtx));
  EXPECT_EQ(m.jit_log().wall_ms, 0.25f);
  const auto linked = link_ptx(ctx(), bytes_of(kPtx), "k.ptx");
  EXPECT_EQ(linked.log.wall_ms, 0.5f) << "the linker writes it at cuLinkComplete";
  auto lib = Library::load(*drv_, bytes_of(kPtx));
  EXPECT_EQ(lib.jit_log().wall_ms, 0.25f);
}

std::string many_kernels_ptx(int count) {
  std::string ptx = ".version 8.0\n.target sm_90\n.address_size 64\n";
  for (int i = 0; i < count; ++i) {
    ptx += ".visible .entry kernel_number_" + std::to_string(i) + "(\n    .param .u64 p0\n)\n{\n    ret;\n}\n";
  }
  return ptx;
}

// Before: 16 KiB held the verbose log of about 55 kernels; the rest vanished silently.
TEST_F(JitOutputs, TheVerboseInfoLogOfManyKernelsIsWhole) {
  const std::string ptx = many_kernels_ptx(300);
  auto m = Module::load(ctx(), bytes_of(ptx.c_str()));
  const std::string& info = m.jit_log().info;
  EXPECT_GT(info.size(), 16384u);
  EXPECT_NE(info.find("Compiling entry function 'kernel_number_299'"), std::string::npos);
  EXPECT_EQ(info.find("was cut"), std::string::npos);
  auto lib = Library::load(*drv_, bytes_of(ptx.c_str()));
  EXPECT_NE(lib.jit_log().info.find("Used 32 registers, used 0 barriers, 388 bytes cmem[0]"), std::string::npos);
  EXPECT_NE(lib.jit_log().info.find("'kernel_number_299'"), std::string::npos);
}

TEST(JitCaptureSizing, RoomGrowsWithTheFunctionsAndAFullBufferSaysItWasCut) {
  using drvshim::detail::finish_jit_log;
  using drvshim::detail::jit_log_bytes;
  const std::string one = many_kernels_ptx(1);
  const std::string many = many_kernels_ptx(1000);
  const auto bytes = [](const std::string& s) { return std::as_bytes(std::span<const char>(s.data(), s.size())); };
  EXPECT_GE(jit_log_bytes(bytes(one), ModuleFormat::ptx), 16384u);
  EXPECT_GE(jit_log_bytes(bytes(many), ModuleFormat::ptx), 1000u * 512u);
  EXPECT_EQ(jit_log_bytes(bytes(many), ModuleFormat::cubin), 65536u);
  const std::string device_func = ".func (.param .b32 r) helper_with_a_name(.param .b32 x)\n{\n ret;\n}\n";
  EXPECT_EQ(jit_log_bytes(bytes(device_func), ModuleFormat::ptx), 16384u + 512u + 4u * 18u)
      << "the name, not the return";
  std::string full(8, '\0');
  full.replace(0, 7, "abcdefg");
  EXPECT_EQ(finish_jit_log(full, "info"),
            "abcdefg\n[drvshim: the JIT info log filled its 8-byte buffer; anything after this point was cut]");
  std::string roomy(8, '\0');
  roomy.replace(0, 3, "abc");
  EXPECT_EQ(finish_jit_log(roomy, "error"), "abc");
  drvshim::detail::JitCapture jit(64);
  const float ms = 12.5f;
  std::memcpy(&jit.values[drvshim::detail::JitCapture::kWallTimeSlot], &ms, sizeof ms);
  EXPECT_EQ(jit.wall_ms(), 12.5f);
  EXPECT_EQ(jit.options[drvshim::detail::JitCapture::kWallTimeSlot], CU_JIT_WALL_TIME);
}

// Before: under lazy loading the JIT error surfaced at cuKernelGetFunction as
// a bare CUDA_ERROR_INVALID_PTX; now it carries the JIT's log.
TEST_F(JitOutputs, ALazyJitErrorOfALibraryCarriesItsLog) {
  const std::string bad = std::string(kPtx) + "\nsyntax_error here;\n";
  auto lib = Library::load(*drv_, bytes_of(bad.c_str()));
  auto e = expect_throw<CudaError>([&] { (void)lib.kernel(ctx(), "vadd"); });
  EXPECT_EQ(e.code(), 218);
  EXPECT_EQ(e.api(), "cuKernelGetFunction");
  const std::string what = e.what();
  EXPECT_NE(what.find("kernel \"vadd\""), std::string::npos) << what;
  EXPECT_NE(what.find("lazy loading"), std::string::npos) << what;
  EXPECT_NE(what.find("ptxas application ptx input, line"), std::string::npos) << what;
  EXPECT_NE(what.find("syntax error"), std::string::npos) << what;
  EXPECT_NE(what.find("through the linker again"), std::string::npos) << what;
  EXPECT_EQ(drvshim_fake_call_count("cuLinkDestroy"), 1u) << "the recovery's link state is destroyed";
}

}  // namespace
