// SPDX-License-Identifier: Apache-2.0
// NVRTC (the toolkit's real library; no GPU needed): options, programs, name
// expressions, headers, logs and errors, target selection, and an end-to-end
// compile -> load -> launch against the fake driver.
#include <cstring>
#include <numeric>
#include <optional>
#include <vector>

#include "fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

std::string text_of(const CompileResult& r) {
  return std::string(reinterpret_cast<const char*>(r.image.data()), r.image.size());
}

TEST(NvrtcOptions, RenderEveryFlagInOnePlace) {
  CompileOptions o;
  o.arch = "sm_90";
  o.standard = "c++20";
  o.defines = {{"N", "4"}, {"FAST", ""}};
  o.include_paths = {"/opt/inc"};
  o.fast_math = o.line_info = o.debug = o.relocatable = true;
  o.extra = {"--extra-device-vectorization"};
  EXPECT_EQ(o.render(),
            (std::vector<std::string>{"--gpu-architecture=sm_90", "--std=c++20", "-DN=4", "-DFAST", "-I/opt/inc",
                                      "--use_fast_math", "--generate-line-info", "--device-debug",
                                      "--relocatable-device-code=true", "--extra-device-vectorization"}));
}

TEST(NvrtcCompile, PtxAndCubinForAnExplicitArchitectureWithoutADevice) {
  const auto nv = load_nvrtc();
  EXPECT_FALSE(nv.cuda_include_dir().empty());
  const char* src = "extern \"C\" __global__ void k(float* p) { p[threadIdx.x] *= 2.0f; }\n";
  CompileOptions o;
  o.arch = "compute_90";
  const auto ptx = nv.compile(src, "k.cu", o);
  EXPECT_FALSE(ptx.cubin);
  EXPECT_NE(text_of(ptx).find(".entry k("), std::string::npos);
  EXPECT_EQ(ptx.options.back(), "-I" + nv.cuda_include_dir());
  EXPECT_GT(ptx.compile_ms, 0.0);
  o.arch = "sm_90";
  const auto cubin = nv.compile(src, "k.cu", o);
  EXPECT_TRUE(cubin.cubin);
  ASSERT_GE(cubin.image.size(), 4u);
  EXPECT_EQ(std::memcmp(cubin.image.data(),
                        "\x7f"
                        "ELF",
                        4),
            0);
  EXPECT_EQ(detect_module_format(cubin.image), ModuleFormat::cubin);
}

TEST(NvrtcCompile, NameExpressionsHeadersDefinesAndToolkitIncludes) {
  const auto nv = load_nvrtc();
  const char* src = R"(
#include <cuda_fp16.h>
#include "scale.h"
static_assert(FACTOR == 3, "the define reached the program");
template <typename T> __global__ void scale(T* p) { p[threadIdx.x] = p[threadIdx.x] * T(FACTOR * kBase); }
)";
  CompileOptions o;
  o.arch = "compute_90";
  o.defines = {{"FACTOR", "3"}};
  const auto r =
      nv.compile(src, "scale.cu", o, {{"scale.h", "constexpr int kBase = 2;\n"}}, {"scale<float>", "scale<__half>"});
  ASSERT_EQ(r.lowered_names.size(), 2u);
  EXPECT_EQ(r.lowered_names.at("scale<float>").rfind("_Z", 0), 0u) << r.lowered_names.at("scale<float>");
  EXPECT_NE(r.lowered_names.at("scale<float>"), r.lowered_names.at("scale<__half>"));
  EXPECT_NE(text_of(r).find(r.lowered_names.at("scale<float>")), std::string::npos);
}

TEST(NvrtcCompile, WarningsAreKeptOnSuccess) {
  const auto nv = load_nvrtc();
  CompileOptions o;
  o.arch = "compute_90";
  const auto r = nv.compile("__global__ void k() { int unused = 1; }\n", "warn.cu", o);
  EXPECT_NE(r.log.find("warning"), std::string::npos) << r.log;
}

TEST(NvrtcCompile, AFailureCarriesTheLogTheOptionsAndTheOffendingLines) {
  const auto nv = load_nvrtc();
  CompileOptions o;
  o.arch = "compute_90";
  o.defines = {{"MODE", "1"}};
  const std::string src = "__global__ void k(float* p) {\n  p[0] = 1.0f;\n  this line is wrong;\n}\n";
  try {
    (void)nv.compile(src, "bad.cu", o);
    FAIL() << "compiled";
  } catch (const NvrtcCompileError& e) {
    const std::string what = e.what();
    EXPECT_NE(e.log().find("bad.cu(3)"), std::string::npos) << e.log();
    EXPECT_NE(what.find("-DMODE=1"), std::string::npos) << what;
    EXPECT_NE(what.find("   3 |   this line is wrong;"), std::string::npos) << what;
    EXPECT_NE(std::find(e.options().begin(), e.options().end(), "--gpu-architecture=compute_90"), e.options().end());
  }
  expect_throw<InvalidArgumentError>([&] { (void)nv.compile(src, "bad.cu", CompileOptions{}); });
}

// The excerpt quotes the program's own lines only: an error in a header whose
// name ends with the program's ("xbad.cu(1)") is not a line of bad.cu.
TEST(NvrtcCompile, TheExcerptQuotesOnlyTheProgramsOwnLines) {
  const auto nv = load_nvrtc();
  CompileOptions o;
  o.arch = "compute_90";
  const std::string src = "#include \"xbad.cu\"\n__global__ void k() {}\n";
  try {
    (void)nv.compile(src, "bad.cu", o, {{"xbad.cu", "this line is wrong;\n"}});
    FAIL() << "compiled";
  } catch (const NvrtcCompileError& e) {
    const std::string what = e.what();
    EXPECT_NE(e.log().find("xbad.cu(1)"), std::string::npos) << e.log();
    EXPECT_EQ(what.find("   1 | #include"), std::string::npos) << what;
  }
}

class NvrtcTarget : public PrimaryContextTest {};

TEST_F(NvrtcTarget, TheDevicesOwnArchitectureOrTheHighestBelowIt) {
  const auto nv = load_nvrtc();
  EXPECT_EQ(nv.target_for(drv_->device(0)), "sm_90");
  drvshim_fake_set_attribute(0, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 10);
  drvshim_fake_set_attribute(0, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 1);
  EXPECT_EQ(nv.target_for(drv_->device(0)), "compute_100") << "sm_101 is not an NVRTC target";
  drvshim_fake_set_attribute(0, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 5);
  drvshim_fake_set_attribute(0, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 3);
  auto e = expect_throw<InvalidArgumentError>([&] { (void)nv.target_for(drv_->device(0)); });
  EXPECT_NE(std::string(e.what()).find("sm_53"), std::string::npos);
}

void doubles_cpu(const drvshim_fake_launch* l, void** args) {
  auto* p = *static_cast<float* const*>(args[0]);
  for (unsigned i = 0; i < l->block[0]; ++i) p[i] *= 2.0f;
}

TEST_F(NvrtcTarget, CompileLoadAndLaunchEndToEnd) {
  drvshim_fake_register_kernel("doubles", &doubles_cpu);
  const auto nv = load_nvrtc();
  CompileOptions o;
  o.arch = "compute_90";  // the fake loads PTX
  const auto r = nv.compile("extern \"C\" __global__ void doubles(float* p) { p[threadIdx.x] *= 2.0f; }\n", "d.cu", o);
  auto m = Module::load(ctx(), r.image);
  std::vector<float> v(64);
  std::iota(v.begin(), v.end(), 1.0f);
  auto buf = DeviceBuffer::allocate(ctx(), v.size() * 4);
  copy(buf.as<float>(), std::span<const float>(v));
  launch(m.kernel("doubles"), LaunchConfig{{1}, {64}, 0, {}, {}}, buf.address());
  copy(std::span<float>(v), DeviceSpan<const float>(buf.as<float>()));
  EXPECT_EQ(v[63], 128.0f);
}

// A compile loaded with its name expressions: a template instantiation by the
// expression it was compiled with, an extern "C" kernel by its name, globals
// likewise, and the misses named.
TEST_F(NvrtcTarget, ACompiledModuleFindsKernelsByTheirNameExpressions) {
  const auto nv = load_nvrtc();
  CompileOptions o;
  o.arch = "compute_90";
  const auto r = nv.compile(
      "template <typename T> __global__ void scale(T* p) { p[threadIdx.x] *= T(2); }\n"
      "template <typename T> __device__ T bias;\n"
      "extern \"C\" __global__ void plain(int* p) { *p = 1; }\n",
      "s.cu", o, {}, {"scale<float>", "scale<int>", "&bias<float>"});
  const CompiledModule m = CompiledModule::load(ctx(), r);
  EXPECT_EQ(m.kernel("scale<float>").name(), r.lowered_names.at("scale<float>"));
  EXPECT_EQ(m.kernel("scale<int>").name(), r.lowered_names.at("scale<int>"));
  EXPECT_NE(m.kernel("scale<float>").native(), m.kernel("scale<int>").native());
  EXPECT_EQ(m.kernel("plain").name(), "plain");
  EXPECT_EQ(m.kernel(r.lowered_names.at("scale<int>")).native(), m.kernel("scale<int>").native())
      << "the mangled name works too";
  EXPECT_EQ(m.global<float>("&bias<float>").size(), 1u);
  EXPECT_EQ(m.symbol("plain"), "plain");
  EXPECT_EQ(m.symbol("scale<float>"), r.lowered_names.at("scale<float>"));
  EXPECT_EQ(m.lowered_names(), r.lowered_names);
  EXPECT_TRUE(static_cast<bool>(m.module()));

  const auto not_lowered = expect_throw<InvalidArgumentError>([&] { (void)m.kernel("scale<double>"); });
  EXPECT_NE(std::string(not_lowered.what()).find("\"scale<double>\" is not a name expression of this compile"),
            std::string::npos)
      << not_lowered.what();
  EXPECT_NE(not_lowered.hint().find("&bias<float>, scale<float>, scale<int>"), std::string::npos) << not_lowered.hint();
  const auto no_global = expect_throw<InvalidArgumentError>([&] { (void)m.global<float>("bias<float>"); });
  EXPECT_NE(std::string(no_global.what()).find("CompiledModule::global"), std::string::npos) << no_global.what();
  EXPECT_NE(no_global.hint().find("a variable's with its &"), std::string::npos) << no_global.hint();
  const auto missing = expect_throw<InvalidArgumentError>([&] { (void)m.kernel("nope"); });
  EXPECT_NE(std::string(missing.what()).find("no kernel named \"nope\""), std::string::npos) << missing.what();

  const auto bare = nv.compile("extern \"C\" __global__ void k() {}\n", "b.cu", o);
  const auto unlowered =
      expect_throw<InvalidArgumentError>([&] { (void)CompiledModule::load(ctx(), bare).kernel("scale<float>"); });
  EXPECT_NE(unlowered.hint().find("given no name expressions"), std::string::npos) << unlowered.hint();

  CompiledModule moved = CompiledModule::load(ctx(), r);
  const CompiledModule taker = std::move(moved);
  EXPECT_EQ(taker.kernel("plain").name(), "plain");
  for (const char* name : {"scale<float>", "plain"}) {
    const auto gone =
        expect_throw<InvalidArgumentError>([&] { (void)moved.kernel(name); });  // NOLINT(bugprone-use-after-move)
    EXPECT_NE(std::string(gone.what()).find("this CompiledModule is empty"), std::string::npos) << gone.what();
  }

  CompileResult empty;
  empty.options = {"--gpu-architecture=compute_90"};
  const auto no_image = expect_throw<InvalidArgumentError>([&] { (void)CompiledModule::load(ctx(), empty); });
  EXPECT_NE(std::string(no_image.what()).find("no image (options: --gpu-architecture=compute_90)"), std::string::npos)
      << no_image.what();
}

// The module stays loaded while a kernel of it lives, after the CompiledModule is gone.
TEST_F(NvrtcTarget, AKernelOfACompiledModuleOutlivesIt) {
  drvshim_fake_register_kernel("doubles", &doubles_cpu);
  const auto nv = load_nvrtc();
  CompileOptions o;
  o.arch = "compute_90";
  CachedCompile c;
  c.result = nv.compile("extern \"C\" __global__ void doubles(float* p) { p[threadIdx.x] *= 2.0f; }\n", "d.cu", o);
  const auto unloads = drvshim_fake_call_count("cuModuleUnload");
  std::optional<Kernel> k;
  {
    const CompiledModule m = CompiledModule::load(ctx(), c);
    k = m.kernel("doubles");
  }
  EXPECT_EQ(drvshim_fake_call_count("cuModuleUnload"), unloads);
  std::vector<float> v(32, 1.5f);
  auto buf = DeviceBuffer::allocate(ctx(), v.size() * 4);
  copy(buf, v);
  launch(*k, LaunchConfig{{1}, {32}}, buf.address());
  copy(v, buf);
  EXPECT_EQ(v[31], 3.0f);
  k.reset();
  EXPECT_EQ(drvshim_fake_call_count("cuModuleUnload"), unloads + 1);
}

}  // namespace
