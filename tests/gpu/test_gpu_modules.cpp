// SPDX-License-Identifier: Apache-2.0
// Modules and launches on the real driver with kernels nvcc built at build
// time (tests/gpu/kernels/kernels.cu): every format, argument checks, a PTX
// syntax error's JIT log, ordering across streams with a spinning kernel, and
// a real illegal-address fault in its own process.
#include <unistd.h>
#include <filesystem>

#include <climits>
#include <cstdio>
#include <fstream>
#include <optional>
#include <random>
#include <sstream>
#include <vector>

#include "gpu_env.hpp"

using namespace drvshim;

namespace drvshim_gpu {

std::string kernel_dir() {
  char exe[PATH_MAX] = {};
  const ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
  std::string path(exe, n > 0 ? static_cast<std::size_t>(n) : 0);
  return path.substr(0, path.rfind('/')) + "/kernels/";
}

// The child process of GpuModules.AnIllegalAddressPoisonsTheContext (run as
// `drvshim_gpu_tests --drvshim-illegal-address-child`): 0 when every
// expectation held, the failing step's number otherwise.
int illegal_address_child() {
  try {
    auto drv = Driver::load();
    drv.init();
    auto primary = drv.device(0).retain_primary_context();
    auto m = Module::load_file(primary.ref(), kernel_dir() + "kernels.cubin");
    auto s = Stream::create(primary.ref());
    launch(m.kernel("illegal_store"), LaunchConfig{{1}, {1}, 0, s.ref(), {}}, DevicePtr{0x10});
    try {
      s.ref().synchronize();
      return 2;
    } catch (const CudaError& e) {
      std::printf("[ child    ] %s\n", e.what());
      if (e.code() != 700 || !e.asynchronous()) return 3;
      if (std::string(e.what()).find("asynchronous error, detected at cuStreamSynchronize") != 0) return 4;
    }
    try {
      (void)primary.ref().memory_info();
      return 5;
    } catch (const ContextPoisonedError& e) {
      std::printf("[ child    ] %s\n", e.what());
    }
    // ScopedCurrentContext refuses the poisoned context as make_current() does.
    try {
      ScopedCurrentContext guard(primary.ref());
      return 6;
    } catch (const ContextPoisonedError& e) {
      std::printf("[ child    ] %s\n", e.what());
    }
    return 0;  // the stream and module are leaked by their destructors: the context is poisoned
  } catch (const std::exception& e) {
    std::printf("[ child    ] unexpected: %s\n", e.what());
    return 9;
  }
}

// The child of GpuModules.ThePoisonedContextsRecoveryAsTheHintSaysIt:
// `--drvshim-poison-recovery-child=reset|release`. Poisons the primary context
// with an illegal address, drops the objects, then either resets the primary
// context or releases drvshim's retain, retains it again and runs vadd.
// Prints what each step did; returns 0 when vadd computed correctly in the new
// context, 20 + step when the driver refused a step (the step's error printed),
// 9 for anything else.
int poison_recovery_child(const std::string& how) {
  int step = 0;
  try {
    auto drv = Driver::load();
    drv.init();
    const Device dev = drv.device(0);
    std::uintptr_t first = 0;
    {
      auto primary = dev.retain_primary_context();
      first = primary.ref().address();
      {
        auto m = Module::load_file(primary.ref(), kernel_dir() + "kernels.cubin");
        auto s = Stream::create(primary.ref());
        launch(m.kernel("illegal_store"), LaunchConfig{{1}, {1}, 0, s.ref(), {}}, DevicePtr{0x10});
        try {
          s.ref().synchronize();
          return 2;
        } catch (const CudaError& e) {
          std::printf("[ child    ] poisoned: %s\n", e.what());
        }
      }  // the objects go first: a reset kills their handles
      step = 1;
      if (how == "reset") dev.reset_primary_context();
    }  // drvshim's retain goes
    step = 2;
    std::printf("[ child    ] %s done; primary context %s\n", how.c_str(),
                dev.primary_context_state().active ? "active" : "inactive");
    auto again = dev.retain_primary_context();
    std::printf("[ child    ] retained again: context 0x%lx (%s address)\n",
                static_cast<unsigned long>(again.ref().address()),
                again.ref().address() == first ? "the same" : "another");
    step = 3;
    auto m = Module::load_file(again.ref(), kernel_dir() + "kernels.cubin");
    const unsigned n = 4096;
    std::vector<float> a(n, 1.0f), b(n, 2.0f), c(n, 0.0f);
    auto da = DeviceBuffer::allocate(again.ref(), n * 4);
    auto db = DeviceBuffer::allocate(again.ref(), n * 4);
    auto dc = DeviceBuffer::allocate(again.ref(), n * 4);
    copy(da.as<float>(), std::span<const float>(a));
    copy(db.as<float>(), std::span<const float>(b));
    launch(m.kernel("vadd"), LaunchConfig{{n / 256}, {256}, 0, {}, {}}, da.address(), db.address(), dc.address(), n);
    copy(std::span<float>(c), DeviceSpan<const float>(dc.as<float>()));
    for (const float x : c) {
      if (x != 3.0f) return 8;
    }
    std::printf("[ child    ] vadd in the new context: correct\n");
    return 0;
  } catch (const Error& e) {
    std::printf("[ child    ] step %d refused: %s\n", step, e.what());
    return e.kind() == ErrorKind::context_poisoned ? 7 : 20 + step;
  } catch (const std::exception& e) {
    std::printf("[ child    ] unexpected: %s\n", e.what());
    return 9;
  }
}

}  // namespace drvshim_gpu

namespace {

class GpuModules : public drvshim_gpu::GpuContextTest {};

// The recovery ContextPoisonedError's hint describes, on the real driver: the
// result is printed (docs/reliability.md records it). What must hold either
// way: drvshim never refuses a fresh context for a stale poison of its own
// (7), never crashes, and the new context computes when the driver lets it.
TEST_F(GpuModules, ThePoisonedContextsRecoveryAsTheHintSaysIt) {
  char exe[PATH_MAX] = {};
  ASSERT_GT(readlink("/proc/self/exe", exe, sizeof exe - 1), 0);
  for (const char* how : {"reset", "release"}) {
    const std::string cmd = std::string(exe) + " --drvshim-poison-recovery-child=" + how;
    std::FILE* p = popen(cmd.c_str(), "r");
    char line[2048];
    while (std::fgets(line, sizeof line, p) != nullptr) std::fputs(line, stdout);
    const int status = pclose(p);
    ASSERT_TRUE(WIFEXITED(status)) << how << ": the child crashed";
    // popen's shell reports a child killed by a signal as exit 128 + signal.
    const int code = WEXITSTATUS(status);
    const bool refused = code >= 20 && code < 30;
    std::printf("[ recovery ] %s: %s (child exit %d)\n", how,
                code == 0     ? "the new context works"
                : refused     ? "the driver refused a step"
                : code >= 128 ? "the child crashed"
                              : "drvshim failed",
                code);
    EXPECT_TRUE(code == 0 || refused) << how << ": exit " << code;
  }
}

TEST_F(GpuModules, EveryFormatLoadsAndVaddComputes) {
  const unsigned n = 1u << 20;
  std::mt19937 gen(5);
  std::uniform_real_distribution<float> dist(1.0f, 2.0f);
  std::vector<float> a(n), b(n);
  for (auto& x : a) x = dist(gen);
  for (auto& x : b) x = dist(gen);
  auto da = DeviceBuffer::allocate(ctx(), n * 4);
  auto db = DeviceBuffer::allocate(ctx(), n * 4);
  auto dc = DeviceBuffer::allocate(ctx(), n * 4);
  copy(da.as<float>(), std::span<const float>(a));
  copy(db.as<float>(), std::span<const float>(b));
  std::printf("[ info     ] module loading mode: %s\n", module_loading_mode(*drv_).c_str());
  for (const char* file : {"kernels.ptx", "kernels.cubin", "kernels.fatbin"}) {
    auto m = Module::load_file(ctx(), drvshim_gpu::kernel_dir() + file);
    std::printf("[ info     ] %s: format %s, JIT %.3f ms, kernels:", file, to_string(m.format()),
                static_cast<double>(m.jit_log().wall_ms));
    for (const auto& k : m.kernel_names()) std::printf(" %s", k.c_str());
    std::printf("\n");
    const Kernel vadd = m.kernel("vadd");
    ASSERT_TRUE(vadd.params().has_value());
    ASSERT_EQ(vadd.params()->size(), 4u);
    EXPECT_EQ((*vadd.params())[3].size, 4u);
    EXPECT_EQ((*vadd.params())[3].offset, 24u);
    fill(dc.as<float>(), -1.0f);
    launch(vadd, LaunchConfig{{(n + 255) / 256}, {256}, 0, {}, {}}, da.address(), db.address(), dc.address(), n);
    std::vector<float> c(n);
    copy(std::span<float>(c), DeviceSpan<const float>(dc.as<float>()));
    unsigned wrong = 0;
    for (unsigned i = 0; i < n; ++i) wrong += c[i] != a[i] + b[i] ? 1u : 0u;
    EXPECT_EQ(wrong, 0u) << file;
  }
}

TEST_F(GpuModules, WrongArgumentsAndOversizedBlocksAreRefused) {
  auto m = Module::load_file(ctx(), drvshim_gpu::kernel_dir() + "kernels.cubin");
  const Kernel vadd = m.kernel("vadd");
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  try {
    launch(vadd, LaunchConfig{{1}, {32}, 0, {}, {}}, buf.address(), buf.address(), buf.address(), std::uint64_t{1});
    FAIL() << "an 8-byte argument for a 4-byte parameter was accepted";
  } catch (const InvalidArgumentError& e) {
    std::printf("[ info     ] %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("argument 4 of 4 has 8 bytes, the kernel expects 4 bytes"), std::string::npos);
  }
  try {
    launch(vadd, LaunchConfig{{1}, {2048}, 0, {}, {}}, buf.address(), buf.address(), buf.address(), 1u);
    FAIL() << "a 2048-thread block was accepted";
  } catch (const InvalidArgumentError& e) {
    std::printf("[ info     ] %s\n", e.what());
    EXPECT_NE(std::string(e.what()).find("exceeds the kernel's limit of 1024"), std::string::npos);
  }
  try {
    (void)m.kernel("vad");
    FAIL();
  } catch (const InvalidArgumentError& e) {
    EXPECT_NE(e.hint().find("vadd"), std::string::npos) << e.hint();
  }
  std::printf("[ info     ] vadd: %d registers, max %d threads/block, %d blocks/SM at 256 threads\n", vadd.registers(),
              vadd.max_threads_per_block(), vadd.max_active_blocks_per_sm(256));
}

TEST_F(GpuModules, APtxSyntaxErrorShowsTheJitLog) {
  std::ifstream in(drvshim_gpu::kernel_dir() + "kernels.ptx");
  std::stringstream text;
  text << in.rdbuf();
  const std::string bad = text.str() + "\n.visible .entry broken() { this is not ptx; }\n";
  try {
    (void)Module::load(ctx(), std::as_bytes(std::span<const char>(bad.data(), bad.size())));
    FAIL() << "broken PTX loaded";
  } catch (const CudaError& e) {
    std::printf("[ info     ] %s\n", e.what());
    EXPECT_EQ(e.code(), 218);
    EXPECT_NE(std::string(e.what()).find("JIT error log: ptxas"), std::string::npos);
  }
}

TEST_F(GpuModules, AnEventWaitOrdersASpinningKernelBeforeAReadOnAnotherStream) {
  auto m = Module::load_file(ctx(), drvshim_gpu::kernel_dir() + "kernels.cubin");
  auto flag = DeviceBuffer::allocate(ctx(), 4);
  fill(flag.as<std::uint32_t>(), 0u);
  auto a = Stream::create(ctx());
  auto b = Stream::create(ctx());
  auto done = Event::create(ctx(), EventFlags::disable_timing);
  launch(m.kernel("spin_then_write"), LaunchConfig{{1}, {1}, 0, a.ref(), {}}, std::uint64_t{50'000'000}, flag.address(),
         0xC0FFEEu);
  done.ref().record(a.ref());
  b.ref().wait(done.ref());
  std::uint32_t seen = 0;
  copy_async(b.ref(), std::span<std::uint32_t>(&seen, 1), DeviceSpan<const std::uint32_t>(flag.as<std::uint32_t>()));
  b.ref().synchronize();
  EXPECT_EQ(seen, 0xC0FFEEu) << "the read on stream b ran before the 50 ms kernel on stream a finished";
}

TEST_F(GpuModules, AContextIndependentLibraryLaunchesInTheContextAskedFor) {
  auto lib = Library::load_file(*drv_, drvshim_gpu::kernel_dir() + "kernels.cubin");
  const Kernel vadd = lib.kernel(ctx(), "vadd");
  ASSERT_TRUE(vadd.params().has_value());
  EXPECT_EQ(vadd.params()->size(), 4u);
  const unsigned n = 4096;
  std::vector<float> a(n, 1.25f), c(n, 0.0f);
  auto da = DeviceBuffer::allocate(ctx(), n * 4);
  auto dc = DeviceBuffer::allocate(ctx(), n * 4);
  copy(da.as<float>(), std::span<const float>(a));
  launch(vadd, LaunchConfig{{n / 256}, {256}, 0, {}, {}}, da.address(), da.address(), dc.address(), n);
  copy(std::span<float>(c), DeviceSpan<const float>(dc.as<float>()));
  EXPECT_EQ(c[n - 1], 2.5f);
}

TEST_F(GpuModules, GlobalsAreReadableAfterKernelsWriteThem) {
  auto m = Module::load_file(ctx(), drvshim_gpu::kernel_dir() + "kernels.cubin");
  auto counter = m.global<std::uint32_t>("counter");
  fill(counter, 0u);
  launch(m.kernel("bump_counter"), LaunchConfig{{10}, {128}, 0, {}, {}});
  std::uint32_t value = 0;
  copy(std::span<std::uint32_t>(&value, 1), DeviceSpan<const std::uint32_t>(counter));
  EXPECT_EQ(value, 1280u);
}

TEST_F(GpuModules, AnIllegalAddressPoisonsTheContextInItsOwnProcess) {
  char exe[PATH_MAX] = {};
  ASSERT_GT(readlink("/proc/self/exe", exe, sizeof exe - 1), 0);
  const std::string cmd = std::string(exe) + " --drvshim-illegal-address-child";
  std::FILE* p = popen(cmd.c_str(), "r");
  char line[2048];
  while (std::fgets(line, sizeof line, p) != nullptr) std::fputs(line, stdout);
  const int status = pclose(p);
  EXPECT_TRUE(WIFEXITED(status)) << "the child crashed";
  EXPECT_EQ(WEXITSTATUS(status), 0) << "failed at step " << WEXITSTATUS(status);
}

// ---- kernels keep their code loaded, the parameter probe, JIT outputs on the real driver -------

class GpuModuleLifetime : public drvshim_gpu::GpuContextTest {};

std::span<const std::byte> bytes_of(const std::string& text) {
  return std::as_bytes(std::span<const char>(text.data(), text.size()));
}

// A Kernel keeps its module loaded: a launch after Module::unload (and of a
// kernel of a temporary Module) runs the right code. Run under
// compute-sanitizer too: no invalid handle, no leak.
TEST_F(GpuModuleLifetime, AKernelOutlivesItsModuleOwnerAndStillComputes) {
  const unsigned n = 4096;
  std::vector<float> a(n, 1.5f), c(n, 0.0f);
  auto da = DeviceBuffer::allocate(ctx(), n * 4);
  auto dc = DeviceBuffer::allocate(ctx(), n * 4);
  copy(da.as<float>(), std::span<const float>(a));
  std::optional<Kernel> vadd;
  {
    auto m = Module::load_file(ctx(), drvshim_gpu::kernel_dir() + "kernels.cubin");
    vadd.emplace(m.kernel("vadd"));
    m.unload();
  }
  launch(*vadd, LaunchConfig{{n / 256}, {256}, 0, {}, {}}, da.address(), da.address(), dc.address(), n);
  copy(std::span<float>(c), DeviceSpan<const float>(dc.as<float>()));
  EXPECT_EQ(c[0], 3.0f);
  EXPECT_EQ(c[n - 1], 3.0f);
  const Kernel from_temporary = Module::load_file(ctx(), drvshim_gpu::kernel_dir() + "kernels.ptx").kernel("vadd");
  fill(dc.as<float>(), 0.0f);
  launch(from_temporary, LaunchConfig{{n / 256}, {256}, 0, {}, {}}, da.address(), da.address(), dc.address(), n);
  copy(std::span<float>(c), DeviceSpan<const float>(dc.as<float>()));
  EXPECT_EQ(c[n - 1], 3.0f);
  std::optional<Kernel> from_library;
  {
    auto lib = Library::load_file(*drv_, drvshim_gpu::kernel_dir() + "kernels.fatbin");
    from_library.emplace(lib.kernel(ctx(), "vadd"));
  }
  fill(dc.as<float>(), 0.0f);
  launch(*from_library, LaunchConfig{{n / 256}, {256}, 0, {}, {}}, da.address(), da.address(), dc.address(), n);
  copy(std::span<float>(c), DeviceSpan<const float>(dc.as<float>()));
  EXPECT_EQ(c[n - 1], 3.0f);
}

// What the real driver answers for a kernel without parameters: the layout is
// then "unknown" (launches unchecked), and the launch still works.
TEST_F(GpuModuleLifetime, AKernelWithoutParametersIsUncheckedAndLaunches) {
  auto m = Module::load_file(ctx(), drvshim_gpu::kernel_dir() + "kernels.cubin");
  const Kernel bump = m.kernel("bump_counter");
  std::printf(
      "[ info     ] bump_counter: params() %s\n",
      bump.params() ? ("known, " + std::to_string(bump.params()->size()) + " parameter(s)").c_str() : "unknown");
  EXPECT_FALSE(bump.params().has_value());
  auto counter = m.global<std::uint32_t>("counter");
  fill(counter, 0u);
  launch(bump, LaunchConfig{{2}, {64}, 0, {}, {}});
  std::uint32_t value = 0;
  copy(std::span<std::uint32_t>(&value, 1), DeviceSpan<const std::uint32_t>(counter));
  EXPECT_EQ(value, 128u);
  const Kernel vadd = m.kernel("vadd");
  ASSERT_TRUE(vadd.params().has_value());
  EXPECT_EQ(vadd.params()->size(), 4u);
}

std::string many_kernels_ptx(int count) {
  std::string ptx =
      "// drvshim many kernels " + std::to_string(::getpid()) + "\n.version 7.0\n.target sm_75\n.address_size 64\n";
  for (int i = 0; i < count; ++i) {
    ptx += ".visible .entry kernel_number_" + std::to_string(i) + "(\n    .param .u64 p0\n)\n{\n    ret;\n}\n";
  }
  return ptx;
}

// The verbose info log of 300 kernels (the old 16 KiB buffer held about 55)
// is whole; the wall time is read from the option slot (0 before the fix).
TEST_F(GpuModuleLifetime, TheVerboseLogOfManyKernelsIsWholeAndTheWallTimeIsReal) {
  const std::string ptx = many_kernels_ptx(300);
  auto m = Module::load(ctx(), bytes_of(ptx));
  const JitLog& log = m.jit_log();
  std::printf("[ info     ] 300-kernel PTX: JIT %.3f ms, info log %zu bytes, last line: %s\n",
              static_cast<double>(log.wall_ms), log.info.size(),
              log.info.substr(log.info.rfind('\n', log.info.size() - 2) + 1).c_str());
  EXPECT_GT(log.wall_ms, 0.0f);
  EXPECT_GT(log.info.size(), 16384u);
  EXPECT_NE(log.info.find("'kernel_number_299'"), std::string::npos);
  EXPECT_EQ(log.info.find("was cut"), std::string::npos);
  const auto linked = link_ptx(ctx(), bytes_of(ptx), "many.ptx");
  std::printf("[ info     ] link_ptx: JIT %.3f ms, info log %zu bytes\n", static_cast<double>(linked.log.wall_ms),
              linked.log.info.size());
  EXPECT_GT(linked.log.wall_ms, 0.0f);
}

// A library whose PTX does not compile: under lazy loading (the H200's
// default) the error comes when a kernel is bound to the context, and it
// carries the JIT log; under eager loading it comes from Library::load, also
// with the log.
TEST_F(GpuModuleLifetime, ALibraryJitErrorCarriesItsLogUnderEitherLoadingMode) {
  std::ifstream in(drvshim_gpu::kernel_dir() + "kernels.ptx");
  std::stringstream text;
  text << in.rdbuf();
  const std::string bad = text.str() + "\n.visible .entry broken() { this is not ptx; }\n";
  std::string message;
  try {
    auto lib = Library::load(*drv_, bytes_of(bad));
    std::printf("[ info     ] the broken library loaded (%s loading); binding a kernel:\n",
                module_loading_mode(*drv_).c_str());
    (void)lib.kernel(ctx(), "vadd");
    FAIL() << "a kernel of broken PTX was bound";
  } catch (const CudaError& e) {
    message = e.what();
  }
  std::printf("[ info     ] %s\n", message.c_str());
  EXPECT_NE(message.find("ptxas"), std::string::npos) << "no JIT log";
}

}  // namespace

namespace {

class GpuNvrtc : public drvshim_gpu::GpuContextTest {};

TEST_F(GpuNvrtc, CompileForTheDeviceLoadAndLaunch) {
  const auto nv = Nvrtc::load();
  const std::string target = nv.target_for(drv_->device(0));
  std::printf("[ info     ] NVRTC %d.%d targets %s for this device\n", nv.version_major(), nv.version_minor(),
              target.c_str());
  EXPECT_EQ(target, "sm_90");
  const char* src = R"(
#include <cuda_fp16.h>
template <typename T> __global__ void axpy(T a, const T* x, T* y, unsigned n) {
  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
)";
  for (const std::string& arch : {target, std::string("compute_90")}) {
    CompileOptions o;
    o.arch = arch;
    const auto r = nv.compile(src, "axpy.cu", o, {}, {"axpy<float>"});
    auto m = Module::load(ctx(), r.image);
    std::printf("[ info     ] %s: compile %.1f ms, %s image %zu bytes, load JIT %.3f ms\n", arch.c_str(), r.compile_ms,
                to_string(m.format()), r.image.size(), static_cast<double>(m.jit_log().wall_ms));
    const Kernel axpy = m.kernel(r.lowered_names.at("axpy<float>"));
    const unsigned n = 1u << 16;
    std::vector<float> x(n, 2.0f), y(n, 1.0f);
    auto dx = DeviceBuffer::allocate(ctx(), n * 4);
    auto dy = DeviceBuffer::allocate(ctx(), n * 4);
    copy(dx.as<float>(), std::span<const float>(x));
    copy(dy.as<float>(), std::span<const float>(y));
    launch(axpy, LaunchConfig{{n / 256}, {256}, 0, {}, {}}, 3.0f, dx.address(), dy.address(), n);
    copy(std::span<float>(y), DeviceSpan<const float>(dy.as<float>()));
    EXPECT_EQ(y[0], 7.0f) << arch;
    EXPECT_EQ(y[n - 1], 7.0f) << arch;
  }
}

// The compile cache on the real driver: a CUBIN for the device's own
// architecture, then a disk hit in a fresh cache that loads and runs; and the
// PTX -> SASS path through the driver's linker, whose output is an ELF CUBIN
// that loads without a JIT.
TEST_F(GpuNvrtc, CompileCacheHitsLoadAndRunAndTheLinkerMakesACubin) {
  char tmpl[] = "/tmp/drvshim-gpu-cache-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr);
  CacheOptions o;
  o.directory = std::string(tmpl) + "/c";
  KernelSource p;
  p.name = "axpy2.cu";
  p.source =
      "template <typename T> __global__ void axpy(T a, const T* x, T* y, unsigned n) {\n"
      "  const unsigned i = blockIdx.x * blockDim.x + threadIdx.x;\n  if (i < n) y[i] = a * x[i] + y[i];\n}\n";
  p.name_expressions = {"axpy<float>"};
  const auto cold = CompileCache(NvrtcLoadOptions{}, o).compile_for(ctx(), p);
  EXPECT_EQ(cold.outcome, CacheOutcome::compiled);
  EXPECT_FALSE(cold.linked);
  CompileCache warm(NvrtcLoadOptions{}, o);
  const auto hit = warm.compile_for(ctx(), p);
  EXPECT_EQ(hit.outcome, CacheOutcome::disk_hit);
  EXPECT_FALSE(warm.nvrtc_loaded());
  EXPECT_EQ(hit.result.image, cold.result.image);
  std::printf("[ info     ] cache: cold %.2f ms, disk hit %.3f ms (%s)\n", cold.wall_ms, hit.wall_ms,
              hit.result.options.front().c_str());

  CompileOptions ptx_options;
  ptx_options.arch = "compute_90";
  const auto ptx = Nvrtc::load().compile(p.source, p.name, ptx_options, {}, p.name_expressions);
  const auto linked = link_ptx(ctx(), ptx.image, "axpy2.ptx");
  ASSERT_GE(linked.cubin.size(), 4u);
  EXPECT_EQ(detect_module_format(linked.cubin), ModuleFormat::cubin);
  std::printf("[ info     ] link_ptx: %zu bytes of PTX -> %zu bytes of SASS in %.3f ms\n", ptx.image.size(),
              linked.cubin.size(), static_cast<double>(linked.log.wall_ms));

  for (const auto* image : {&hit.result.image, &linked.cubin}) {
    auto m = Module::load(ctx(), *image);
    EXPECT_EQ(m.format(), ModuleFormat::cubin);
    const unsigned n = 4096;
    std::vector<float> x(n, 2.0f), y(n, 1.0f);
    auto dx = DeviceBuffer::allocate(ctx(), n * 4);
    auto dy = DeviceBuffer::allocate(ctx(), n * 4);
    copy(dx.as<float>(), std::span<const float>(x));
    copy(dy.as<float>(), std::span<const float>(y));
    launch(m.kernel(hit.result.lowered_names.at("axpy<float>")), LaunchConfig{{n / 256}, {256}, 0, {}, {}}, 3.0f,
           dx.address(), dy.address(), n);
    copy(std::span<float>(y), DeviceSpan<const float>(dy.as<float>()));
    EXPECT_EQ(y[0], 7.0f);
    EXPECT_EQ(y[n - 1], 7.0f);
  }
  std::filesystem::remove_all(tmpl);
}

}  // namespace
