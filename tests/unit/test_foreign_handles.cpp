// SPDX-License-Identifier: Apache-2.0
// Views and owners of what drvshim did not make: the context the program made
// current, the context of a stream from cuStreamCreate, streams and events
// made with the driver (wrapped, or adopted and destroyed), and memory the
// driver allocated, freed through drvshim. The objects come from the fake
// through cuGetProcAddress, as a program's own driver calls would.
#include <cuda.h>

#include <cstdlib>

#include "fixture.hpp"
#include "raw_driver.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

using ForeignHandles = FakeDriverTest;

TEST_F(ForeignHandles, TheCurrentContextIsSeenWhoeverMadeIt) {
  Driver driver = load_and_init();
  EXPECT_FALSE(current_context(driver).has_value()) << "no context is current on a fresh thread";
  auto create = raw<CUresult (*)(CUcontext*, unsigned, CUdevice)>("cuCtxCreate");
  auto destroy = raw<CUresult (*)(CUcontext)>("cuCtxDestroy");
  CUcontext mine = nullptr;
  ASSERT_EQ(create(&mine, 0, 0), CUDA_SUCCESS);
  const auto view = current_context(driver);
  ASSERT_TRUE(view.has_value());
  EXPECT_EQ(view->address(), reinterpret_cast<std::uintptr_t>(mine));
  EXPECT_EQ(view->device().ordinal(), 0);
  EXPECT_FALSE(view->is_primary()) << "the driver cannot say; the view does not claim it";
  EXPECT_EQ(destroy(mine), CUDA_SUCCESS);
}

TEST_F(ForeignHandles, DriverMadeStreamsAndEventsAreWrappedOrAdopted) {
  Driver driver = load_and_init();
  PrimaryContext primary = driver.device(0).retain_primary_context();
  const ContextRef ctx = primary.ref();
  CUstream cs = nullptr;
  CUevent ce = nullptr;
  {
    ScopedCurrentContext current(ctx);
    ASSERT_EQ(raw<CUresult (*)(CUstream*, unsigned, int)>("cuStreamCreateWithPriority")(&cs, 0, 0), CUDA_SUCCESS);
    ASSERT_EQ(raw<CUresult (*)(CUevent*, unsigned)>("cuEventCreate")(&ce, 0), CUDA_SUCCESS);
  }
  const auto handle = reinterpret_cast<std::uintptr_t>(cs);
  const ContextRef of_stream = context_of_stream(driver, handle);
  EXPECT_EQ(of_stream.address(), ctx.address());
  EXPECT_EQ(of_stream.device().ordinal(), 0);
  EXPECT_THROW((void)context_of_stream(driver, 0x1), InvalidArgumentError) << "the default streams have no context";

  const StreamRef s = StreamRef::wrap(of_stream, handle);
  const EventRef e = EventRef::wrap(ctx, reinterpret_cast<std::uintptr_t>(ce));
  EXPECT_TRUE(e.recorded()) << "unknown, so assumed: the driver checks";
  e.record(s);
  s.wait(e);
  s.synchronize();
  EXPECT_TRUE(e.query());
  EXPECT_GE(elapsed(e, e).count(), 0.0);
  EXPECT_EQ(StreamRef::wrap(ctx, 0x2), StreamRef::per_thread_default(ctx));
  EXPECT_THROW((void)EventRef::wrap(ctx, 0), InvalidArgumentError);

  EXPECT_THROW((void)Stream::adopt(ctx, 0x1), InvalidArgumentError) << "nobody destroys a default stream";
  Stream::adopt(ctx, handle).destroy();
  Event::adopt(ctx, reinterpret_cast<std::uintptr_t>(ce)).destroy();
  EXPECT_EQ(drvshim_fake_live_streams(), 0);
  EXPECT_EQ(drvshim_fake_live_events(), 0);
}

TEST_F(ForeignHandles, ARefusedStreamContextQueryIsTheDriversError) {
  Driver driver = load_and_init();
  PrimaryContext primary = driver.device(0).retain_primary_context();
  CUstream cs = nullptr;
  {
    ScopedCurrentContext current(primary.ref());
    ASSERT_EQ(raw<CUresult (*)(CUstream*, unsigned, int)>("cuStreamCreateWithPriority")(&cs, 0, 0), CUDA_SUCCESS);
  }
  drvshim_fake_fail_call("cuStreamGetCtx", 1, 400 /* CUDA_ERROR_INVALID_HANDLE */);
  try {
    (void)context_of_stream(driver, reinterpret_cast<std::uintptr_t>(cs));
    ADD_FAILURE() << "no error";
  } catch (const CudaError& e) {
    EXPECT_EQ(e.code(), 400);
    EXPECT_NE(std::string(e.what()).find("cuStreamGetCtx"), std::string::npos) << e.what();
  }
  Stream::adopt(primary.ref(), reinterpret_cast<std::uintptr_t>(cs)).destroy();
}

TEST_F(ForeignHandles, DriverAllocatedMemoryIsFreedThroughTheContext) {
  Driver driver = load_and_init();
  PrimaryContext primary = driver.device(0).retain_primary_context();
  const ContextRef ctx = primary.ref();
  CUdeviceptr d = 0;
  void* h = nullptr;
  void* pageable = std::aligned_alloc(4096, 8192);
  {
    ScopedCurrentContext current(ctx);
    ASSERT_EQ(raw<CUresult (*)(CUdeviceptr*, size_t)>("cuMemAlloc")(&d, 4096), CUDA_SUCCESS);
    ASSERT_EQ(raw<CUresult (*)(void**, size_t, unsigned)>("cuMemHostAlloc")(&h, 4096, 0), CUDA_SUCCESS);
    ASSERT_EQ(raw<CUresult (*)(void*, size_t, unsigned)>("cuMemHostRegister")(pageable, 8192, 0), CUDA_SUCCESS);
  }
  free_device_memory(ctx, d);
  free_host_memory(ctx, h);
  unregister_host_memory(ctx, pageable);
  EXPECT_EQ(drvshim_fake_live_device_allocations(), 0);
  EXPECT_EQ(drvshim_fake_live_pinned_allocations(), 0);
  EXPECT_EQ(drvshim_fake_live_registrations(), 0);
  try {
    unregister_host_memory(ctx, pageable);
    ADD_FAILURE() << "unregistered twice without an error";
  } catch (const CudaError& e) {
    EXPECT_EQ(e.code(), 713) << "CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED";
  }
  std::free(pageable);
}

}  // namespace

namespace {

TEST_F(ForeignHandles, DetachedOwnersLeaveTheirResourceToTheCaller) {
  Driver driver = load_and_init();
  PrimaryContext primary = driver.device(0).retain_primary_context();
  const ContextRef ctx = primary.ref();
  DeviceBuffer buffer = DeviceBuffer::allocate(ctx, 4096);
  const DevicePtr address = buffer.detach();
  EXPECT_FALSE(buffer) << "the owner is empty";
  EXPECT_EQ(drvshim_fake_live_device_allocations(), 1) << "and the memory is still there";
  free_device_memory(ctx, address);

  PinnedBuffer pinned = PinnedBuffer::allocate(ctx, 4096);
  free_host_memory(ctx, pinned.detach());

  Stream stream = Stream::create(ctx, StreamFlags::non_blocking, -1);
  const std::uintptr_t handle = stream.detach();
  const StreamRef view = StreamRef::wrap(ctx, handle);
  EXPECT_EQ(view.flags(), StreamFlags::non_blocking) << "the driver's answer";
  EXPECT_EQ(view.priority(), -1);
  EXPECT_EQ(drvshim_fake_live_streams(), 1);
  Stream::adopt(ctx, handle).destroy();

  Event event = Event::create(ctx);
  const EventRef event_view = event.ref();
  Event::adopt(ctx, event.detach()).destroy();
  EXPECT_EQ(drvshim_fake_live_events(), 0);
  (void)event_view;
}

TEST_F(ForeignHandles, AContextsUniqueIdIsNotItsAddress) {
  Driver driver = load_and_init();
  Context a = driver.device(0).create_context();
  Context b = driver.device(0).create_context();
  EXPECT_NE(a.ref().unique_id(), b.ref().unique_id());
  EXPECT_EQ(a.ref().unique_id(), a.ref().unique_id());
}

}  // namespace

namespace {

TEST_F(ForeignHandles, ALaterStreamAtAWrappedStreamsHandleInheritsNoCallbackError) {
  drvshim_fake_recycle_handles(1);
  Driver driver = load_and_init();
  PrimaryContext primary = driver.device(0).retain_primary_context();
  const ContextRef ctx = primary.ref();
  auto create = raw<CUresult (*)(CUstream*, unsigned, int)>("cuStreamCreateWithPriority");
  CUstream first = nullptr;
  {
    ScopedCurrentContext current(ctx);
    ASSERT_EQ(create(&first, 0, 0), CUDA_SUCCESS);
  }
  const auto handle = reinterpret_cast<std::uintptr_t>(first);
  StreamRef::wrap(ctx, handle).launch_host_func([] { throw std::runtime_error("from the first stream"); });
  Stream::adopt(ctx, handle).destroy();  // before anyone synchronised: the error is pending
  CUstream second = nullptr;
  {
    ScopedCurrentContext current(ctx);
    ASSERT_EQ(create(&second, 0, 0), CUDA_SUCCESS);
  }
  ASSERT_EQ(reinterpret_cast<std::uintptr_t>(second), handle) << "the fake handed the handle out again";
  EXPECT_NO_THROW(StreamRef::wrap(ctx, handle).synchronize()) << "the new stream has no error of the old one";
  Stream::adopt(ctx, handle).destroy();
}

}  // namespace
