// SPDX-License-Identifier: Apache-2.0
// Memory: every allocation kind, copies, fills, failure paths, pointer inspection.
#include <algorithm>
#include <array>
#include <functional>
#include <numeric>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "fixture.hpp"
#include "register_cases.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

class Memory : public PrimaryContextTest {
 protected:
};

TEST_F(Memory, DeviceBufferRoundTripsDataThroughTypedViews) {
  auto buf = DeviceBuffer::allocate(ctx(), 1000 * sizeof(int));
  EXPECT_EQ(drvshim_fake_live_device_allocations(), 1);
  std::vector<int> in(1000);
  std::iota(in.begin(), in.end(), 7);
  copy(buf.as<int>(), std::span<const int>(in));
  std::vector<int> out(1000, -1);
  copy(std::span<int>(out), DeviceSpan<const int>(buf.as<int>()));
  EXPECT_EQ(out, in);
  auto other = DeviceBuffer::allocate(ctx(), 1000 * sizeof(int));
  copy(other.as<int>(), DeviceSpan<const int>(buf.as<int>()));
  std::vector<int> out2(1000, -1);
  copy(std::span<int>(out2), DeviceSpan<const int>(other.as<int>()));
  EXPECT_EQ(out2, in);
  buf.free();
  EXPECT_FALSE(buf);
  EXPECT_EQ(drvshim_fake_live_device_allocations(), 1);
}

TEST_F(Memory, FillsUseTheElementWidth) {
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  fill(buf.as<std::uint8_t>(), std::uint8_t{0xab});
  std::vector<std::uint8_t> bytes(64);
  copy(std::span<std::uint8_t>(bytes), DeviceSpan<const std::uint8_t>(buf.as<std::uint8_t>()));
  EXPECT_TRUE(std::all_of(bytes.begin(), bytes.end(), [](auto b) { return b == 0xab; }));
  fill(buf.as<std::uint16_t>().subspan(2, 4), std::uint16_t{0x1234});
  fill(buf.as<float>().subspan(8, 2), 1.5f);
  std::vector<std::uint16_t> halves(32);
  copy(std::span<std::uint16_t>(halves), DeviceSpan<const std::uint16_t>(buf.as<std::uint16_t>()));
  EXPECT_EQ(halves[1], 0xabab);
  EXPECT_EQ(halves[2], 0x1234);
  EXPECT_EQ(halves[5], 0x1234);
  EXPECT_EQ(halves[6], 0xabab);
  std::vector<float> floats(16);
  copy(std::span<float>(floats), DeviceSpan<const float>(buf.as<float>()));
  EXPECT_EQ(floats[8], 1.5f);
  EXPECT_EQ(floats[9], 1.5f);
  EXPECT_EQ(drvshim_fake_call_count("cuMemsetD8"), 1u);
  EXPECT_EQ(drvshim_fake_call_count("cuMemsetD16"), 1u);
  EXPECT_EQ(drvshim_fake_call_count("cuMemsetD32"), 1u);
}

TEST_F(Memory, AsyncCopiesAndFillsRunOnTheGivenStream) {
  auto stream = Stream::create(ctx());
  auto buf = DeviceBuffer::allocate(ctx(), 256);
  std::vector<std::uint32_t> in(64, 0xdeadbeef);
  std::vector<std::uint32_t> out(64, 0);
  fill_async(stream.ref(), buf.as<std::uint32_t>(), 1u);
  copy_async(stream.ref(), buf.as<std::uint32_t>(), std::span<const std::uint32_t>(in));
  copy_async(stream.ref(), std::span<std::uint32_t>(out), DeviceSpan<const std::uint32_t>(buf.as<std::uint32_t>()));
  stream.ref().synchronize();
  EXPECT_EQ(out, in);
  EXPECT_EQ(drvshim_fake_call_count("cuMemcpyHtoDAsync"), 1u);
  EXPECT_EQ(drvshim_fake_call_count("cuMemcpyDtoHAsync"), 1u);
  EXPECT_EQ(drvshim_fake_call_count("cuMemsetD32Async"), 1u);
}

TEST_F(Memory, CopiesLongerThanTheDestinationAreRefusedBeforeTheDriver) {
  auto small = DeviceBuffer::allocate(ctx(), 16);
  std::vector<std::uint8_t> big(17);
  drvshim_fake_clear_call_log();
  auto e =
      expect_throw<InvalidArgumentError>([&] { copy(small.as<std::uint8_t>(), std::span<const std::uint8_t>(big)); });
  EXPECT_NE(std::string(e.what()).find("copying 17 bytes into a destination of 16 bytes"), std::string::npos)
      << e.what();
  std::vector<std::uint8_t> tiny(8);
  expect_throw<InvalidArgumentError>(
      [&] { copy(std::span<std::uint8_t>(tiny), DeviceSpan<const std::uint8_t>(small.as<std::uint8_t>())); });
  auto e2 = expect_throw<InvalidArgumentError>([&] { (void)small.as<std::uint8_t>().subspan(10, 7); });
  EXPECT_NE(std::string(e2.what()).find("outside a view of 16 elements"), std::string::npos);
  expect_throw<InvalidArgumentError>([&] { (void)small.as<std::array<char, 3>>(); });
  EXPECT_TRUE(fake_calls().empty()) << "no driver call for refused input";
}

TEST_F(Memory, ZeroSizedAllocationsAreRefusedClearly) {
  auto e = expect_throw<InvalidArgumentError>([&] { (void)DeviceBuffer::allocate(ctx(), 0); });
  EXPECT_NE(std::string(e.what()).find("0 bytes"), std::string::npos);
  expect_throw<InvalidArgumentError>([&] { (void)PinnedBuffer::allocate(ctx(), 0); });
  EXPECT_EQ(drvshim_fake_call_count("cuMemAlloc"), 0u);
}

TEST_F(Memory, TooLargeAnAllocationIsATypedOutOfMemoryErrorWithTheNumbers) {
  const std::size_t huge = std::size_t{200} << 30;
  auto e = expect_throw<OutOfMemoryError>([&] { (void)DeviceBuffer::allocate(ctx(), huge); });
  EXPECT_EQ(e.code(), 2);
  EXPECT_EQ(e.requested(), huge);
  EXPECT_EQ(e.total_bytes(), 150754820096ull);
  EXPECT_GT(e.free_bytes(), 0u);
  EXPECT_NE(std::string(e.what()).find("requested 200.00 GiB; the device has"), std::string::npos) << e.what();
}

TEST_F(Memory, FailuresInjectedIntoAllocationLeaveNothingBehind) {
  drvshim_fake_fail_call("cuMemHostAlloc", 1, CUDA_ERROR_OUT_OF_MEMORY);
  auto e = expect_throw<OutOfMemoryError>([&] { (void)PinnedBuffer::allocate(ctx(), 4096); });
  EXPECT_EQ(e.api(), "cuMemHostAlloc");
  drvshim_fake_fail_call("cuMemHostGetDevicePointer", 1, CUDA_ERROR_UNKNOWN);
  expect_throw<CudaError>([&] { (void)MappedBuffer::allocate(ctx(), 4096); });
  drvshim_fake_fail_call("cuMemFree", 1, CUDA_ERROR_UNKNOWN);
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  const Status s = buf.free(std::nothrow);
  EXPECT_EQ(s.code(), 999);
  EXPECT_FALSE(buf) << "the owner is empty either way";
  // The driver kept the allocation whose free failed; nothing else is left behind.
  EXPECT_EQ(drvshim_fake_drop_allocations(), 1);
}

TEST_F(Memory, PinnedBuffersCarryTheirFlags) {
  auto pinned = PinnedBuffer::allocate(ctx(), 4096, HostAllocFlags::portable | HostAllocFlags::write_combined);
  EXPECT_EQ(to_string(pinned.flags()), "portable|write_combined");
  auto span = pinned.as<std::uint32_t>();
  EXPECT_EQ(span.size(), 1024u);
  span[3] = 42;
  EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 1);
  expect_throw<InvalidArgumentError>(
      [&] { (void)PinnedBuffer::allocate(ctx(), 64, static_cast<HostAllocFlags>(0x10)); });
}

TEST_F(Memory, MappedBuffersExposeHostAndDeviceViews) {
  auto mapped = MappedBuffer::allocate(ctx(), 256);
  EXPECT_TRUE(has(mapped.flags(), HostAllocFlags::device_map));
  EXPECT_TRUE(mapped.pointers_identical());
  auto host = mapped.as<std::uint8_t>();
  std::fill(host.begin(), host.end(), std::uint8_t{5});
  auto dev = DeviceBuffer::allocate(ctx(), 256);
  copy(dev.as<std::uint8_t>(), DeviceSpan<const std::uint8_t>(mapped.device_as<std::uint8_t>()));
  std::vector<std::uint8_t> out(256);
  copy(std::span<std::uint8_t>(out), DeviceSpan<const std::uint8_t>(dev.as<std::uint8_t>()));
  EXPECT_EQ(out[255], 5);
}

TEST_F(Memory, MappedBuffersAreRefusedWhereTheDeviceCannotMapHostMemory) {
  drvshim_fake_set_attribute(0, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 0);
  auto e = expect_throw<UnsupportedError>([&] { (void)MappedBuffer::allocate(ctx(), 256); });
  EXPECT_NE(std::string(e.what()).find("can_map_host_memory attribute is 0"), std::string::npos) << e.what();
  EXPECT_EQ(drvshim_fake_call_count("cuMemHostAlloc"), 0u);
}

// A stream-ordered free on another stream than the allocation's is ordered
// after that stream's work: the driver is told that stream.
TEST_F(Memory, AStreamOrderedFreeGoesToTheStreamItIsGiven) {
  auto allocated_on = Stream::create(ctx());
  auto used_on = Stream::create(ctx());
  auto pooled = AsyncDeviceBuffer::allocate(allocated_on.ref(), 512);
  trace::enable(true);
  pooled.free(used_on.ref());
  trace::enable(false);
  std::ostringstream hex;
  hex << ", 0x" << std::hex << used_on.ref().native();
  const std::string expected = hex.str();
  int frees = 0;
  for (const auto& r : trace::records()) {
    if (r.api != "cuMemFreeAsync") continue;
    ++frees;
    EXPECT_TRUE(r.args.size() >= expected.size() &&
                r.args.compare(r.args.size() - expected.size(), expected.size(), expected) == 0)
        << "cuMemFreeAsync(" << r.args << ") was not given the stream " << expected.substr(2);
  }
  EXPECT_EQ(frees, 1);
  EXPECT_EQ(drvshim_fake_live_device_allocations(), 0);
}

TEST_F(Memory, ManagedAndStreamOrderedAllocations) {
  auto managed = ManagedBuffer::allocate(ctx(), 128);
  static_cast<char*>(managed.data())[0] = 'x';
  auto stream = Stream::create(ctx());
  {
    auto pooled = AsyncDeviceBuffer::allocate(stream.ref(), 512);
    fill_async(stream.ref(), pooled.as<std::uint8_t>(), std::uint8_t{1});
    EXPECT_EQ(drvshim_fake_live_device_allocations(), 2);
  }
  EXPECT_EQ(drvshim_fake_call_count("cuMemFreeAsync"), 1u);
  drvshim_fake_set_attribute(0, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0);
  auto e = expect_throw<UnsupportedError>([&] { (void)AsyncDeviceBuffer::allocate(stream.ref(), 512); });
  EXPECT_NE(std::string(e.what()).find("memory_pools_supported attribute is 0"), std::string::npos);
  drvshim_fake_set_attribute(0, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 0);
  expect_throw<UnsupportedError>([&] { (void)ManagedBuffer::allocate(ctx(), 128); });
}

TEST_F(Memory, PointerInspectionTellsTheKinds) {
  auto dev = DeviceBuffer::allocate(ctx(), 64);
  auto pinned = PinnedBuffer::allocate(ctx(), 64);
  auto managed = ManagedBuffer::allocate(ctx(), 64);
  std::vector<char> pageable(64);
  const auto d = inspect_pointer(*drv_, dev.address() + 8);
  EXPECT_EQ(d.kind, MemoryKind::device);
  EXPECT_EQ(d.range_start, dev.address());
  EXPECT_EQ(d.range_size, 64u);
  EXPECT_EQ(d.context, ctx().address());
  EXPECT_EQ(d.device_ordinal, 0);
  EXPECT_EQ(d.device_address, dev.address() + 8) << "asked inside the pointer's own context";
  EXPECT_EQ(drvshim_fake_ctx_stack_depth(), 0);
  EXPECT_EQ(inspect_pointer(*drv_, pinned.data()).kind, MemoryKind::page_locked_host);
  EXPECT_EQ(inspect_pointer(*drv_, managed.data()).kind, MemoryKind::managed);
  const auto p = inspect_pointer(*drv_, pageable.data());
  EXPECT_EQ(p.kind, MemoryKind::pageable_host);
  EXPECT_EQ(p.to_string(), "pageable host memory (unknown to the driver)");
  EXPECT_NE(d.to_string().find("device memory of device 0"), std::string::npos) << d.to_string();
}

TEST_F(Memory, ViewsOfAFreedBufferAreCaughtInDebugBuilds) {
  if (!view_checks_enabled()) GTEST_SKIP() << "this libdrvshim build does not check views (not a Debug build)";
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  auto view = buf.as<std::uint8_t>();
  buf.free();
  std::vector<std::uint8_t> host(64);
  auto e = expect_throw<InvalidArgumentError>(
      [&] { copy(std::span<std::uint8_t>(host), DeviceSpan<const std::uint8_t>(view)); });
  EXPECT_NE(std::string(e.what()).find("after the buffer that owned it was freed"), std::string::npos);
  // A registered range's device view, after the registration ended.
  std::vector<std::uint8_t> block(4096);
  auto range = RegisteredRange::register_range(ctx(), block.data(), block.size(), HostRegisterFlags::device_map);
  const auto range_view = range.device_as<std::uint8_t>();
  range.unregister();
  expect_throw<InvalidArgumentError>(
      [&] { copy(std::span<std::uint8_t>(host), DeviceSpan<const std::uint8_t>(range_view)); });
}

TEST_F(Memory, CallsRestoreTheCallersContextStack) {
  auto other = drv_->device(0).create_context();
  ScopedCurrentContext current(other.ref());
  auto buf = DeviceBuffer::allocate(ctx(), 64);  // in the primary context, pushed and popped
  fill(buf.as<std::uint8_t>(), std::uint8_t{1});
  EXPECT_EQ(drv_->current_context(), other.ref().address());
  EXPECT_EQ(inspect_pointer(*drv_, buf.address()).context, ctx().address());
}

// ---- registered host ranges: the table of cases -------------------------------------------

class Register : public Memory {};

TEST_F(Register, TableOfCases) {
  for (const auto& c : register_cases()) EXPECT_EQ(run_register_case(ctx(), c), c.expected) << c.name;
}

TEST_F(Register, UnregisteringTwiceAndForeignPointers) {
  std::vector<std::uint8_t> block(8192);
  auto range = RegisteredRange::register_range(ctx(), block.data(), block.size(), HostRegisterFlags::device_map);
  EXPECT_EQ(range.device_address(), reinterpret_cast<std::uintptr_t>(block.data()));
  range.unregister();
  range.unregister();  // the owner is empty: no second driver call
  EXPECT_EQ(drvshim_fake_call_count("cuMemHostUnregister"), 1u);
  const Status s = unregister_host_range(ctx(), block.data());
  EXPECT_EQ(s.code(), 713) << s.to_string();
  EXPECT_EQ(s.to_string(), "cuMemHostUnregister: CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED (713)");
}

// A typed device view of a registered range: the device address, the count of
// elements, usable as a copy side and by a kernel; bad views refused by name.
TEST_F(Register, ATypedDeviceViewOfTheRange) {
  alignas(64) std::array<float, 1024> host{};
  auto range = RegisteredRange::register_range(ctx(), host.data(), sizeof host, HostRegisterFlags::device_map);
  EXPECT_EQ(range.context(), ctx());
  const DeviceSpan<float> view = range.device_as<float>();
  EXPECT_EQ(view.address(), range.device_address());
  EXPECT_EQ(view.size(), host.size());
  EXPECT_EQ(view.context(), ctx());
  EXPECT_EQ(range.device_as<double>().size(), host.size() / 2);
  std::vector<float> values(host.size());
  std::iota(values.begin(), values.end(), 0.5f);
  copy(view, values);  // into the registered memory through its device view
  EXPECT_EQ(host[1023], 1023.5f);
  auto device = DeviceBuffer::allocate(ctx(), sizeof host);
  copy(device.as<float>(), view);
  std::vector<float> back(host.size());
  copy(back, device);
  EXPECT_EQ(back, values);

  struct Odd {
    char bytes[3];
  };
  auto odd = expect_throw<InvalidArgumentError>([&] { (void)range.device_as<Odd>(); });
  EXPECT_NE(std::string(odd.what()).find("not a multiple of the element size 3"), std::string::npos) << odd.what();
  auto shifted = RegisteredRange::register_range(ctx(), reinterpret_cast<std::byte*>(values.data()) + 2, 4000,
                                                 HostRegisterFlags::device_map);
  auto misaligned = expect_throw<InvalidArgumentError>([&] { (void)shifted.device_as<float>(); });
  EXPECT_NE(std::string(misaligned.what()).find("not aligned to the element's 4 bytes"), std::string::npos)
      << misaligned.what();
  EXPECT_EQ(shifted.device_as<std::byte>().size(), 4000u);
  range.unregister();
  auto empty = expect_throw<InvalidArgumentError>([&] { (void)range.device_as<float>(); });
  EXPECT_NE(std::string(empty.what()).find("this range is empty"), std::string::npos) << empty.what();
}

TEST_F(Register, PinnedMemoryCannotBeRegisteredAgain) {
  auto pinned = PinnedBuffer::allocate(ctx(), 8192);
  EXPECT_EQ(outcome([&] { (void)RegisteredRange::register_range(ctx(), pinned.data(), 4096); }),
            "CUDA_ERROR_INVALID_VALUE");
}

TEST_F(Register, ReadOnlyRegistrationIsCheckedAgainstItsAttribute) {
  std::vector<std::uint8_t> block(4096);
  {
    auto ro = RegisteredRange::register_range(ctx(), block.data(), block.size(), HostRegisterFlags::read_only);
    EXPECT_EQ(to_string(ro.flags()), "read_only");
  }
  drvshim_fake_set_attribute(0, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, 0);
  auto e = expect_throw<UnsupportedError>(
      [&] { (void)RegisteredRange::register_range(ctx(), block.data(), block.size(), HostRegisterFlags::read_only); });
  EXPECT_NE(std::string(e.what()).find("read_only_host_register_supported attribute is 0"), std::string::npos);
}

class Tx1Memory : public Memory {
 protected:
  const char* profile() const override { return "tx1"; }
};

TEST_F(Tx1Memory, TheSeedsFailureExplainsItselfAndTheWayOutWorks) {
  std::vector<float> data(1024, 1.0f);
  auto e = expect_throw<UnsupportedError>(
      [&] { (void)RegisteredRange::register_range(ctx(), data.data(), data.size() * sizeof(float)); });
  const std::string msg = e.what();
  EXPECT_NE(msg.find("host registration is not supported on device 0 (NVIDIA Tegra X1)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("host_register_supported attribute is 0"), std::string::npos) << msg;
  EXPECT_NE(e.hint().find("drvshim::MappedBuffer"), std::string::npos) << e.hint();
  EXPECT_EQ(e.kind(), ErrorKind::unsupported);
  EXPECT_EQ(drvshim_fake_call_count("cuMemHostRegister"), 0u) << "refused before the driver, which would say only 801";
  // The way out named in the hint works on this device.
  auto mapped = MappedBuffer::allocate(ctx(), data.size() * sizeof(float));
  EXPECT_TRUE(mapped.pointers_identical());
}

}  // namespace
