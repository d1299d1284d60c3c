// SPDX-License-Identifier: Apache-2.0
// Explicit initialisation and devices.
#include <atomic>
#include <cstring>
#include <thread>

#include "fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

class Init : public FakeDriverTest {};

TEST_F(Init, SixtyFourThreadsProduceExactlyOneCuInit) {
  Driver drv = load_fake();
  std::atomic<int> ready{0};
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < 64; ++i) {
    threads.emplace_back([&] {
      ++ready;
      while (ready.load() < 64) std::this_thread::yield();
      try {
        drv.init();
        if (!drv.initialized()) ++failures;
      } catch (...) {
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 1u);
  EXPECT_TRUE(drv.initialized());
  EXPECT_GT(drv.init_duration_ns(), 0);
}

TEST_F(Init, NoDeviceProfileFailsInitWithTheDriversCodeAndAHint) {
  drvshim_fake_set_profile("none");
  Driver drv = load_fake();
  auto e = expect_throw<CudaError>([&] { drv.init(); });
  EXPECT_EQ(e.api(), "cuInit");
  EXPECT_EQ(e.code(), 100);
  EXPECT_NE(e.hint().find("CUDA_VISIBLE_DEVICES"), std::string::npos);
  EXPECT_FALSE(drv.initialized());
  expect_throw<MissingStepError>([&] { (void)drv.device_count(); });
}

TEST_F(Init, AFailedInitCanBeRetried) {
  Driver drv = load_fake();
  drvshim_fake_fail_call("cuInit", 1, CUDA_ERROR_UNKNOWN);
  auto e = expect_throw<CudaError>([&] { drv.init(); });
  EXPECT_EQ(e.code(), 999);
  drv.init();
  EXPECT_TRUE(drv.initialized());
  EXPECT_EQ(drvshim_fake_call_count("cuInit"), 2u);
}

TEST_F(Init, EachLoadedDriverInitialisesExplicitly) {
  Driver a = load_and_init();
  Driver b = load_fake();
  EXPECT_FALSE(b.initialized()) << "init state belongs to the Driver object, not to a hidden global";
  Driver copy = a;
  EXPECT_TRUE(copy.initialized());
}

// cuGetProcAddress for programs: the driver's own function, callable; a
// name it does not know is a status, not an error; a version above the
// driver's is the driver's error.
TEST_F(Init, EntryPointsAreTheDriversOwnFunctions) {
  Driver drv = load_and_init();
  const EntryPoint version = drv.entry_point("cuDriverGetVersion", 12000);
  ASSERT_EQ(version.status, EntryPointStatus::found);
  ASSERT_NE(version.function, nullptr);
  using GetVersion = CUresult (*)(int*);
  GetVersion get = nullptr;
  std::memcpy(&get, &version.function, sizeof get);
  int v = 0;
  EXPECT_EQ(get(&v), CUDA_SUCCESS);
  EXPECT_EQ(v, drv.version());
  const EntryPoint missing = drv.entry_point("cuNoSuchFunction", 12000);
  EXPECT_EQ(missing.status, EntryPointStatus::not_found);
  EXPECT_EQ(missing.function, nullptr);
  EXPECT_STREQ(to_string(missing.status), "not found");
  EXPECT_EQ(drv.entry_point("cuMemAllocAsync", 11000).status, EntryPointStatus::version_not_sufficient)
      << "cuMemAllocAsync is from CUDA 11.2";
  EXPECT_EQ(drv.entry_point("cuMemcpyAsync", 12000, 2).status, EntryPointStatus::found) << "the per-thread variant";
  try {
    (void)drv.entry_point("cuMemAlloc", 99000);
    ADD_FAILURE() << "a version above the driver's";
  } catch (const CudaError& e) {
    EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_VALUE);
  }
  EXPECT_THROW((void)drv.entry_point("", 12000), InvalidArgumentError);
  EXPECT_THROW((void)drv.entry_point("cuMemAlloc", 12000, 4), InvalidArgumentError);
}

class Devices : public FakeDriverTest {};

TEST_F(Devices, IdentityOfTheDiscreteProfile) {
  Driver drv = load_and_init();
  ASSERT_EQ(drv.device_count(), 1);
  const Device dev = drv.device(0);
  EXPECT_EQ(dev.ordinal(), 0);
  EXPECT_EQ(dev.name(), "NVIDIA H200");
  EXPECT_EQ(dev.compute_capability(), (ComputeCapability{9, 0}));
  EXPECT_EQ(dev.sm_count(), 132);
  EXPECT_EQ(dev.total_memory(), 150754820096ull);
  EXPECT_EQ(dev.pci_bus_id(), "0000:18:00.0");
  EXPECT_EQ(dev.uuid_string(), "GPU-10111213-1415-1617-1819-1a1b1c1d1e1f");
  EXPECT_EQ(dev.uuid()[0], 0x10);
}

TEST_F(Devices, TheDeviceCountIsAskedOnce) {
  Driver drv = load_and_init();
  EXPECT_EQ(drv.device_count(), 1);
  (void)drv.device(0);
  (void)drv.devices();
  EXPECT_EQ(drvshim_fake_call_count("cuDeviceGetCount"), 1u);
}

TEST_F(Devices, OrdinalOutOfRangeIsRefusedWithTheCount) {
  Driver drv = load_and_init();
  auto e = expect_throw<InvalidArgumentError>([&] { (void)drv.device(1); });
  EXPECT_NE(std::string(e.what()).find("device ordinal 1 is out of range: the driver reports 1 device(s)"),
            std::string::npos)
      << e.what();
  expect_throw<InvalidArgumentError>([&] { (void)drv.device(-1); });
}

TEST_F(Devices, AttributesAreTriState) {
  Driver drv = load_and_init();
  const Device dev = drv.device(0);
  EXPECT_EQ(dev.attribute(DeviceAttribute::warp_size), AttributeValue::of(32));
  drvshim_fake_set_attribute_error(0, CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(dev.attribute(DeviceAttribute::host_register_supported).state(), AttributeValue::State::unsupported);
  drvshim_fake_set_attribute_error(0, CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(dev.attribute(DeviceAttribute::cluster_launch).state(), AttributeValue::State::unknown);
  EXPECT_EQ(dev.attribute(DeviceAttribute::cluster_launch).to_string(), "unknown");
  drvshim_fake_set_attribute_error(0, CU_DEVICE_ATTRIBUTE_WARP_SIZE, CUDA_ERROR_INVALID_DEVICE);
  auto e = expect_throw<CudaError>([&] { (void)dev.attribute(DeviceAttribute::warp_size); });
  EXPECT_NE(e.objects().find("attribute warp_size (10)"), std::string::npos) << e.objects();
  EXPECT_STREQ(attribute_name(DeviceAttribute::memory_pools_supported), "memory_pools_supported");
}

TEST_F(Devices, AttributesNewerThanTheDriverAreUnknownWithoutAsking) {
  drvshim_fake_set_profile("old");
  Driver drv = load_and_init();
  const Device dev = drv.device(0);
  EXPECT_EQ(dev.attribute(DeviceAttribute::cluster_launch).state(), AttributeValue::State::unknown);
  // 11.8 knows memory pools (11.2): it is asked and answers.
  EXPECT_EQ(dev.attribute(DeviceAttribute::memory_pools_supported), AttributeValue::of(1));
}

TEST_F(Devices, HostMappingSummaryOfTheH200) {
  Driver drv = load_and_init();
  const auto s = drv.device(0).host_mapping();
  EXPECT_EQ(s.can_map_host_memory, AttributeValue::of(1));
  EXPECT_EQ(s.unified_addressing, AttributeValue::of(1));
  EXPECT_EQ(s.integrated, AttributeValue::of(0));
  EXPECT_EQ(s.host_register_supported, AttributeValue::of(1));
  EXPECT_EQ(s.read_only_host_register_supported, AttributeValue::of(1));
  EXPECT_EQ(s.pageable_memory_access, AttributeValue::of(0));
  EXPECT_EQ(s.memory_pools_supported, AttributeValue::of(1));
  EXPECT_EQ(s.host_native_atomic_supported, AttributeValue::of(0));
  EXPECT_TRUE(s.zero_copy());
  EXPECT_TRUE(s.host_register());
  EXPECT_EQ(s.verdict(),
            "zero-copy available (host and device pointers identical); host registration supported (read-only too)");
}

class Tx1Devices : public FakeDriverTest {
 protected:
  const char* profile() const override { return "tx1"; }
};

TEST_F(Tx1Devices, TheSeedsDeviceExplainsItsHostRegistrationVerdict) {
  Driver drv = load_and_init();
  const Device dev = drv.device(0);
  EXPECT_EQ(dev.name(), "NVIDIA Tegra X1");
  EXPECT_EQ(dev.compute_capability(), (ComputeCapability{5, 3}));
  const auto s = dev.host_mapping();
  EXPECT_TRUE(s.integrated.is_true());
  EXPECT_TRUE(s.zero_copy());
  EXPECT_FALSE(s.host_register());
  EXPECT_EQ(s.verdict(),
            "zero-copy available (host and device pointers identical); host registration unsupported "
            "(host_register_supported 0): use mapped pinned allocations; integrated GPU (shares host memory)");
}

class DualDevices : public FakeDriverTest {
 protected:
  const char* profile() const override { return "dual"; }
};

TEST_F(DualDevices, TwoDevicesWithDistinctIdentities) {
  Driver drv = load_and_init();
  const auto devs = drv.devices();
  ASSERT_EQ(devs.size(), 2u);
  EXPECT_EQ(devs[1].ordinal(), 1);
  EXPECT_NE(devs[0].uuid_string(), devs[1].uuid_string());
  EXPECT_NE(devs[0].pci_bus_id(), devs[1].pci_bus_id());
}

}  // namespace

namespace {

class Timeline : public drvshim_test::FakeDriverTest {};

TEST_F(Timeline, ATypicalStartIsTracedStepByStep) {
  using namespace drvshim;
  trace::enable(true);
  Driver drv = drvshim_test::load_and_init();
  const Device dev = drv.device(0);
  PrimaryContext primary = dev.retain_primary_context();
  { ScopedCurrentContext current(primary.ref()); }
  std::vector<std::string> got;
  for (const auto& r : trace::records()) got.push_back(r.api);
  const std::vector<std::string> expected = {"load",
                                             "cuDriverGetVersion",
                                             "resolve-table",
                                             "cuInit",
                                             "init",
                                             "cuDeviceGetCount",
                                             "cuDeviceGet",
                                             "cuDevicePrimaryCtxGetState",
                                             "cuDevicePrimaryCtxRetain",
                                             "activate-primary-context",
                                             "cuCtxPushCurrent",
                                             "cuCtxPopCurrent"};
  EXPECT_EQ(got, expected);
  const std::string text = trace::format_timeline(trace::records());
  EXPECT_NE(text.find("call   cuInit(0) -> CUDA_SUCCESS"), std::string::npos) << text;
  EXPECT_NE(text.find("event  activate-primary-context: device 0"), std::string::npos) << text;
  EXPECT_EQ(text.rfind("+    0.000 ms  event  load: ", 0), 0u) << text;
}

}  // namespace
