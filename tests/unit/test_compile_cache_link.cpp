// SPDX-License-Identifier: Apache-2.0
// The NVRTC compile cache's PTX -> SASS link path, against the fake driver.
#include "compile_cache_test_support.hpp"

using namespace cache_test;

namespace {

void adds_cpu(const drvshim_fake_launch* l, void** args) {
  auto* p = *static_cast<int* const*>(args[0]);
  for (unsigned i = 0; i < l->block[0]; ++i) p[i] += 1;
}

class CompileCacheLink : public PrimaryContextTest {
 protected:
  // Device 0 newer than NVRTC's newest target (compute capability 10.1), with
  // the test kernel's CPU version: compiles for it take the PTX + link path.
  static void device_newer_than_nvrtc() {
    drvshim_fake_register_kernel("add", &adds_cpu);
    drvshim_fake_set_attribute(0, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 10);
    drvshim_fake_set_attribute(0, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 1);
  }
};

// A device newer than NVRTC's newest target: PTX, linked to SASS by the
// driver, and that SASS is what the cache keeps (keyed by driver and device).
TEST_F(CompileCacheLink, PtxForANewerDeviceIsLinkedOnceAndTheLinkedImageCached) {
  device_newer_than_nvrtc();
  TempDir dir;
  const auto nv = load_nvrtc();
  KernelSource p = program(1);
  p.options.arch.clear();  // chosen from the device
  const auto links_before = drvshim_fake_call_count("cuLinkComplete");
  CachedCompile first = CompileCache(nv, in(dir / "c")).compile_for(ctx(), p);
  EXPECT_EQ(first.outcome, CacheOutcome::compiled);
  EXPECT_TRUE(first.linked);
  EXPECT_TRUE(first.result.cubin);
  EXPECT_NE(std::find(first.result.options.begin(), first.result.options.end(), "--gpu-architecture=compute_100"),
            first.result.options.end());
  EXPECT_EQ(drvshim_fake_call_count("cuLinkComplete"), links_before + 1);
  EXPECT_EQ(drvshim_fake_call_count("cuLinkDestroy"), drvshim_fake_call_count("cuLinkCreate"));

  CompileCache fresh(NvrtcLoadOptions{}, in(dir / "c"));
  const auto second = fresh.compile_for(ctx(), p);
  EXPECT_FALSE(fresh.nvrtc_loaded()) << "the toolchain memo names NVRTC's targets; a hit needs no compiler";
  EXPECT_EQ(second.outcome, CacheOutcome::disk_hit);
  EXPECT_TRUE(second.linked);
  EXPECT_EQ(drvshim_fake_call_count("cuLinkComplete"), links_before + 1) << "a hit does not link again";
  EXPECT_NE(second.key, fresh.compile(program(1)).key) << "the linked entry is keyed apart from the plain PTX";

  auto m = Module::load(ctx(), second.result.image);
  std::vector<int> v(32);
  std::iota(v.begin(), v.end(), 0);
  auto buf = DeviceBuffer::allocate(ctx(), v.size() * sizeof(int));
  copy(buf.as<int>(), std::span<const int>(v));
  launch(m.kernel("add"), LaunchConfig{{1}, {32}, 0, {}, {}}, buf.address());
  copy(std::span<int>(v), DeviceSpan<const int>(buf.as<int>()));
  EXPECT_EQ(v[31], 32);
}

// SASS is the driver's work: after a driver update the PTX is linked again,
// never served as the old driver linked it.
TEST_F(CompileCacheLink, ADriverOfAnotherVersionLinksAgain) {
  device_newer_than_nvrtc();
  TempDir dir;
  const auto nv = load_nvrtc();
  KernelSource p = program(1);
  p.options.arch.clear();
  const CachedCompile first = CompileCache(nv, in(dir / "c")).compile_for(ctx(), p);
  ASSERT_TRUE(first.linked);
  primary_.reset();
  drv_.reset();
  drvshim_fake_set_driver_version(13010);  // the driver was updated
  drv_.emplace(load_and_init());
  primary_.emplace(drv_->device(0).retain_primary_context());
  const auto links_before = drvshim_fake_call_count("cuLinkComplete");
  const CachedCompile second = CompileCache(nv, in(dir / "c")).compile_for(ctx(), p);
  EXPECT_EQ(second.outcome, CacheOutcome::compiled) << "SASS the old driver linked was served";
  EXPECT_TRUE(second.linked);
  EXPECT_NE(second.key, first.key);
  EXPECT_EQ(drvshim_fake_call_count("cuLinkComplete"), links_before + 1);
}

// The toolchain memo is found whatever path reached libnvrtc (here: a link to
// its directory, then the path the library is mapped by): a hit in a fresh
// cache object still needs no compiler to choose its target.
TEST_F(CompileCacheLink, TheToolchainMemoIsFoundThroughAnyPathToNvrtc) {
  drvshim_fake_set_attribute(0, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9);
  drvshim_fake_set_attribute(0, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0);
  TempDir dir;
  const fs::path mapped = load_nvrtc().loaded_path();
  fs::create_directory_symlink(mapped.parent_path(), dir / "lnk");
  NvrtcLoadOptions through_link;
  through_link.path = (fs::path(dir / "lnk") / mapped.filename()).string();
  KernelSource p = program(1);
  p.options.arch.clear();  // chosen from the device, with the memo's targets
  const auto first = CompileCache(through_link, in(dir / "c")).compile_for(ctx(), p);
  ASSERT_EQ(first.outcome, CacheOutcome::compiled) << first.miss_reason;
  CompileCache fresh(NvrtcLoadOptions{}, in(dir / "c"));
  const auto second = fresh.compile_for(ctx(), p);
  EXPECT_EQ(second.outcome, CacheOutcome::disk_hit) << second.miss_reason;
  EXPECT_FALSE(fresh.nvrtc_loaded()) << "the memo written through the link names the same NVRTC";
}

TEST_F(CompileCacheLink, ALinkFailureCarriesTheJitLogAndLeavesNoLinkState) {
  const std::string bad = ".version 8.0\n.target sm_90\n.visible .entry broken( {\n";
  const auto e = expect_throw<CudaError>(
      [&] { (void)link_ptx(ctx(), std::as_bytes(std::span<const char>(bad.data(), bad.size())), "broken.ptx"); });
  EXPECT_NE(std::string(e.what()).find("cuLinkAddData"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("broken.ptx"), std::string::npos) << e.what();
  EXPECT_EQ(drvshim_fake_call_count("cuLinkDestroy"), drvshim_fake_call_count("cuLinkCreate"));
  const std::string not_ptx =
      "\x7f"
      "ELF....";
  expect_throw<InvalidArgumentError>(
      [&] { (void)link_ptx(ctx(), std::as_bytes(std::span<const char>(not_ptx.data(), not_ptx.size())), "x"); });
}

}  // namespace
