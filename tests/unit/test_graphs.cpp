// SPDX-License-Identifier: Apache-2.0
// Stream capture and graphs against the fake: a captured sequence replayed
// with new data at each launch, a second stream joined through an event, the
// capture modes' rule on allocations across threads, and what drvshim refuses
// to let a capture record (its own host callbacks, staged copies) or to
// launch (a graph on another context's stream), each with its message.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <memory>
#include <numeric>
#include <optional>
#include <stdexcept>
#include <thread>
#include <vector>

#include "fixture.hpp"
#include "vadd_ptx.hpp"

using namespace drvshim;
using namespace drvshim_test;

namespace {

std::span<const std::byte> bytes_of(const char* text) {
  return std::as_bytes(std::span<const char>(text, std::strlen(text)));
}

class Graphs : public PrimaryContextTest {};

TEST_F(Graphs, ACapturedSequenceRunsOnlyWhenLaunchedAndEachLaunchReadsTheDataAnew) {
  const Module m = Module::load(ctx(), bytes_of(kVaddPtx));
  const Kernel vadd = m.kernel("vadd");
  constexpr unsigned n = 256;
  auto in = PinnedBuffer::allocate(ctx(), n * sizeof(float));
  auto out = PinnedBuffer::allocate(ctx(), n * sizeof(float));
  auto a = DeviceBuffer::allocate(ctx(), n * sizeof(float));
  auto c = DeviceBuffer::allocate(ctx(), n * sizeof(float));
  const auto host_in = in.as<float>();
  const auto host_out = out.as<float>();
  std::iota(host_in.begin(), host_in.end(), 0.0f);
  std::fill(host_out.begin(), host_out.end(), -1.0f);
  const Stream s = Stream::create(ctx());

  EXPECT_EQ(capture_status(s), CaptureStatus::none);
  EXPECT_EQ(capture_info(s).id, 0u);
  begin_capture(s, CaptureMode::thread_local_);
  EXPECT_EQ(capture_status(s), CaptureStatus::active);
  const CaptureInfo first = capture_info(s);
  EXPECT_NE(first.id, 0u);
  EXPECT_NE(first.graph, 0u);
  EXPECT_EQ(first.dependencies, 0u);
  copy_async(s, a.as<float>(), std::span<const float>(host_in));
  launch(vadd, LaunchConfig::covering(n, 64, s), a.address(), a.address(), c.address(), n);
  copy_async(s, host_out, c.as<const float>());
  EXPECT_EQ(capture_info(s).dependencies, 1u);
  EXPECT_EQ(capture_info(s).id, first.id);
  const auto launches_before = drvshim_fake_launch_count();
  Graph graph = end_capture(s);
  EXPECT_EQ(capture_status(s), CaptureStatus::none);
  EXPECT_EQ(drvshim_fake_launch_count(), launches_before) << "captured, not run";
  EXPECT_EQ(host_out[n - 1], -1.0f);
  EXPECT_EQ(graph.node_count(), 3u);
  EXPECT_EQ(graph.context(), ctx());

  const GraphExec exec = graph.instantiate();
  graph.destroy();  // the executable graph does not need it
  for (float scale : {1.0f, 3.0f}) {
    for (unsigned i = 0; i < n; ++i) host_in[i] = scale * static_cast<float>(i);
    exec.launch(s);
    s.synchronize();
    EXPECT_EQ(host_out[n - 1], 2.0f * scale * static_cast<float>(n - 1)) << "scale " << scale;
  }
  exec.upload(s);
  EXPECT_FALSE(static_cast<bool>(graph));
  EXPECT_EQ(expect_throw<InvalidArgumentError>([&] { (void)graph.node_count(); }).hint(), "");
  expect_throw<InvalidArgumentError>([&] { (void)graph.instantiate(); });
}

// A stream that waits for an event recorded in a capture joins it: its work
// is recorded into the same graph.
TEST_F(Graphs, AStreamWaitingForACapturedEventJoinsTheCapture) {
  const Stream origin = Stream::create(ctx());
  const Stream side = Stream::create(ctx());
  const Event forked = Event::create(ctx(), EventFlags::disable_timing);
  const Event joined = Event::create(ctx(), EventFlags::disable_timing);
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  begin_capture(origin);
  forked.record(origin);
  side.wait(forked);
  EXPECT_EQ(capture_status(side), CaptureStatus::active);
  EXPECT_EQ(capture_info(side).id, capture_info(origin).id);
  fill_async(side, buf.as<std::uint32_t>(), 7u);
  joined.record(side);
  origin.wait(joined);
  const Graph graph = end_capture(origin);
  EXPECT_EQ(capture_status(side), CaptureStatus::none);
  EXPECT_EQ(graph.node_count(), 1u);
}

// A fork the origin never waits for again is the driver's "unjoined"; an
// event recorded in a capture refuses questions; a context synchronisation
// during a capture is refused and ends it; a stream that goes away leaves
// its capture (the one it began ends).
TEST_F(Graphs, WhatACaptureRefusesAndHowItEnds) {
  const Stream origin = Stream::create(ctx());
  const Event forked = Event::create(ctx(), EventFlags::disable_timing);
  auto buf = DeviceBuffer::allocate(ctx(), 64);
  {
    const Stream side = Stream::create(ctx());
    begin_capture(origin);
    forked.record(origin);
    side.wait(forked);
    fill_async(side, buf.as<std::uint32_t>(), 7u);
    EXPECT_EQ(expect_throw<CudaError>([&] { (void)end_capture(origin); }).code(), CUDA_ERROR_STREAM_CAPTURE_UNJOINED);
    EXPECT_EQ(capture_status(side), CaptureStatus::none);
  }
  EXPECT_EQ(expect_throw<CudaError>([&] { (void)forked.query(); }).code(), CUDA_ERROR_CAPTURED_EVENT);
  forked.record(origin);
  EXPECT_TRUE(forked.query()) << "recorded outside a capture again";

  begin_capture(origin);
  EXPECT_EQ(expect_throw<CudaError>([&] { ctx().synchronize(); }).code(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_EQ(capture_status(origin), CaptureStatus::invalidated);
  EXPECT_EQ(expect_throw<CudaError>([&] { (void)end_capture(origin); }).code(), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);

  std::optional<Stream> first(Stream::create(ctx()));
  const Stream joiner = Stream::create(ctx());
  begin_capture(*first);
  forked.record(*first);
  joiner.wait(forked);
  EXPECT_EQ(capture_status(joiner), CaptureStatus::active);
  first.reset();  // the stream that began the capture goes away
  EXPECT_EQ(capture_status(joiner), CaptureStatus::none);
  const Stream next = Stream::create(ctx());
  begin_capture(next);
  EXPECT_EQ(end_capture(next).node_count(), 0u);
}

TEST_F(Graphs, TheCaptureModesDecideWhichThreadsMayAllocate) {
  const Stream s = Stream::create(ctx());
  const auto allocate_on_other_thread = [&](CaptureMode mode) {
    std::string result;
    std::thread t([&] {
      ScopedCaptureMode scoped(*drv_, mode);
      try {
        (void)DeviceBuffer::allocate(ctx(), 64);
        result = "ok";
      } catch (const CudaError& e) {
        result = e.code_name();
      }
    });
    t.join();
    return result;
  };
  const auto refused_here = [&] {
    return expect_throw<CudaError>([&] { (void)DeviceBuffer::allocate(ctx(), 64); }).code();
  };
  const auto ended_invalidated = [&] {
    return expect_throw<CudaError>([&] { (void)end_capture(s); }).code() == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  };
  // Global: forbidden on the capturing thread and on other threads in global
  // mode; a refusal leaves the capture invalidated (as on the GPU).
  begin_capture(s, CaptureMode::global);
  EXPECT_EQ(allocate_on_other_thread(CaptureMode::thread_local_), "ok");
  EXPECT_EQ(allocate_on_other_thread(CaptureMode::relaxed), "ok");
  {
    ScopedCaptureMode relaxed(*drv_, CaptureMode::relaxed);
    (void)DeviceBuffer::allocate(ctx(), 64);
  }
  EXPECT_EQ(exchange_capture_mode(*drv_, CaptureMode::global), CaptureMode::global) << "the scope restored it";
  EXPECT_EQ(capture_status(s), CaptureStatus::active);
  EXPECT_EQ(allocate_on_other_thread(CaptureMode::global), "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
  EXPECT_EQ(capture_status(s), CaptureStatus::invalidated);
  EXPECT_TRUE(ended_invalidated());
  begin_capture(s, CaptureMode::global);
  EXPECT_EQ(refused_here(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_TRUE(ended_invalidated());

  // Thread-local: forbidden on the capturing thread only; ended there only.
  begin_capture(s, CaptureMode::thread_local_);
  EXPECT_EQ(allocate_on_other_thread(CaptureMode::global), "ok") << "another thread's thread-local capture";
  CUresult ended_elsewhere = CUDA_SUCCESS;
  std::thread([&] {
    try {
      (void)end_capture(s);
    } catch (const CudaError& e) {
      ended_elsewhere = static_cast<CUresult>(e.code());
    }
  }).join();
  EXPECT_EQ(ended_elsewhere, CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD);
  EXPECT_EQ(capture_status(s), CaptureStatus::active);
  EXPECT_EQ(refused_here(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
  EXPECT_TRUE(ended_invalidated());

  begin_capture(s, CaptureMode::relaxed);
  (void)DeviceBuffer::allocate(ctx(), 64);
  (void)end_capture(s);
}

// What drvshim refuses before the driver: a capture of a default stream, a
// mode it does not know, a graph launched on another context's stream, and
// the operations a graph could not replay safely.
TEST_F(Graphs, WhatCannotBeCapturedOrLaunchedIsRefusedByName) {
  const auto legacy = expect_throw<InvalidArgumentError>([&] { begin_capture(StreamRef::legacy_default(ctx())); });
  EXPECT_NE(std::string(legacy.what()).find("is the legacy default stream"), std::string::npos) << legacy.what();
  const Stream s = Stream::create(ctx());
  const auto mode = expect_throw<InvalidArgumentError>([&] { begin_capture(s, static_cast<CaptureMode>(7)); });
  EXPECT_NE(std::string(mode.what()).find("capture mode 7"), std::string::npos) << mode.what();

  const PinnedPool pool(ctx());
  const StagingEngine engine(pool);
  auto dst = DeviceBuffer::allocate(ctx(), 1 << 20);
  std::vector<std::byte> pageable(1 << 20);
  PinnedBlock block = pool.acquire(4096);
  begin_capture(s);
  EXPECT_EQ(expect_throw<CudaError>([&] { begin_capture(s); }).code(), CUDA_ERROR_ILLEGAL_STATE);
  const auto staged = expect_throw<InvalidArgumentError>(
      [&] { engine.copy_to_device_async(dst.as<std::byte>(), std::span<const std::byte>(pageable), s); });
  EXPECT_NE(staged.hint().find("capture a copy_async from pinned memory"), std::string::npos) << staged.hint();
  const auto released = expect_throw<InvalidArgumentError>([&] { block.release_after(s); });
  EXPECT_NE(std::string(released.what()).find("PinnedBlock::release_after"), std::string::npos) << released.what();
  EXPECT_EQ(capture_status(s), CaptureStatus::active) << "refused before anything reached the capture";
  Graph graph = end_capture(s);
  EXPECT_EQ(graph.node_count(), 0u);

  const GraphExec exec = graph.instantiate();
  Context other = drv_->device(0).create_context();
  const Stream elsewhere = Stream::create(other.ref());
  const auto wrong = expect_throw<InvalidArgumentError>([&] { exec.launch(elsewhere); });
  EXPECT_NE(std::string(wrong.what()).find("the graph belongs to"), std::string::npos) << wrong.what();
  EXPECT_EQ(drvshim_fake_call_count("cuGraphLaunch"), 0u);
  exec.launch(s);
  EXPECT_EQ(drvshim_fake_call_count("cuGraphLaunch"), 1u);
}

// A host callback a capture records runs at every launch of the graph, and
// its closure lives until the graph and every executable graph made from it
// are gone, then is destroyed outside the driver's thread.
TEST_F(Graphs, ACapturedHostCallbackRunsAtEachLaunchAndLivesAsLongAsTheGraph) {
  const Stream s = Stream::create(ctx());
  auto runs = std::make_shared<std::atomic<int>>(0);
  const std::weak_ptr<std::atomic<int>> alive = runs;
  begin_capture(s);
  s.launch_host_func([runs] { runs->fetch_add(1); });
  runs.reset();  // the closure holds the last reference
  Graph graph = end_capture(s);
  EXPECT_EQ(graph.node_count(), 1u);
  {
    const GraphExec exec = graph.instantiate();
    graph.destroy();
    for (int i = 0; i < 3; ++i) exec.launch(s);
    s.synchronize();
    ASSERT_FALSE(alive.expired()) << "the executable graph still holds the closure";
    EXPECT_EQ(alive.lock()->load(), 3);
  }
  s.synchronize();  // buries closures retired on the driver's thread
  EXPECT_TRUE(alive.expired()) << "destroyed with the last graph";
}

// An exception a captured callback throws is reported by the next
// synchronize of the stream it was captured on, at each launch that throws.
TEST_F(Graphs, ACapturedHostCallbacksExceptionIsReportedOnTheCapturingStream) {
  const Stream s = Stream::create(ctx());
  begin_capture(s);
  s.launch_host_func([] { throw std::runtime_error("replayed failure"); });
  Graph graph = end_capture(s);
  const GraphExec exec = graph.instantiate();
  exec.launch(s);
  const auto e = expect_throw<HostCallbackError>([&] { s.synchronize(); });
  EXPECT_NE(std::string(e.what()).find("replayed failure"), std::string::npos) << e.what();
  s.synchronize();  // reported once
}

// A callback queued on a capture that a refused call already invalidated is
// not recorded: the driver's refusal, and nothing kept.
TEST_F(Graphs, AHostCallbackOnAnInvalidatedCaptureIsRefusedAndFreed) {
  const Stream s = Stream::create(ctx());
  auto token = std::make_shared<int>(1);
  const std::weak_ptr<int> alive = token;
  begin_capture(s);
  EXPECT_THROW((void)DeviceBuffer::allocate(ctx(), 256), CudaError) << "an allocation in a global capture";
  ASSERT_EQ(capture_status(s), CaptureStatus::invalidated);
  EXPECT_THROW(s.launch_host_func([token] { (void)*token; }), CudaError);
  token.reset();
  EXPECT_THROW((void)end_capture(s), CudaError);
  s.synchronize();
  EXPECT_TRUE(alive.expired());
}

// An owner adopted from a handle made elsewhere destroys it; a detached one does not.
TEST_F(Graphs, OwnersDestroyWhatTheyHoldOnce) {
  const Stream s = Stream::create(ctx());
  begin_capture(s);
  Graph graph = end_capture(s);
  const std::uintptr_t handle = graph.detach();
  EXPECT_EQ(drvshim_fake_call_count("cuGraphDestroy"), 0u);
  {
    Graph adopted = Graph::adopt(ctx(), handle);
    GraphExec exec = adopted.instantiate();
    exec.destroy();
    exec.destroy();  // empty now: no second driver call
  }
  EXPECT_EQ(drvshim_fake_call_count("cuGraphDestroy"), 1u);
  EXPECT_EQ(drvshim_fake_call_count("cuGraphExecDestroy"), 1u);
  expect_throw<InvalidArgumentError>([&] { (void)Graph::adopt(ctx(), 0); });
  drvshim_fake_fail_call("cuGraphInstantiateWithFlags", 1, CUDA_ERROR_OUT_OF_MEMORY);
  begin_capture(s);
  const Graph again = end_capture(s);
  const auto failed = expect_throw<CudaError>([&] { (void)again.instantiate(); });
  EXPECT_NE(std::string(failed.what()).find("cuGraphInstantiateWithFlags"), std::string::npos) << failed.what();
}

}  // namespace

namespace {

// The driver's own handles, for layers that hand them on: the nodes of a
// graph in order, the capture's dependency array (the last node), and an
// executable graph adopted from its handle.
TEST_F(Graphs, NodesDependenciesAndAdoptedExecutableGraphsAreTheDriversHandles) {
  auto buf = DeviceBuffer::allocate(ctx(), 256);
  const Stream s = Stream::create(ctx());
  begin_capture(s);
  EXPECT_EQ(capture_info(s).native_dependencies, nullptr) << "nothing captured yet";
  fill_async(s, buf.as<std::uint8_t>(), std::uint8_t{1});
  fill_async(s, buf.as<std::uint8_t>(), std::uint8_t{2});
  const CaptureInfo info = capture_info(s);
  ASSERT_EQ(info.dependencies, 1u);
  ASSERT_NE(info.native_dependencies, nullptr);
  const auto last = reinterpret_cast<std::uintptr_t>(*static_cast<const CUgraphNode*>(info.native_dependencies));
  Graph graph = end_capture(s);
  const std::vector<std::uintptr_t> nodes = graph.nodes();
  ASSERT_EQ(nodes.size(), 2u);
  EXPECT_EQ(nodes.back(), last) << "the capture's dependency is the graph's last node";
  EXPECT_EQ(nodes.size(), graph.node_count());

  GraphExec made = graph.instantiate();
  GraphExec adopted = GraphExec::adopt(ctx(), made.detach());
  adopted.launch(s);
  s.synchronize();
  adopted.destroy();
  EXPECT_FALSE(adopted);
  EXPECT_THROW((void)GraphExec::adopt(ctx(), 0), InvalidArgumentError);
  graph.destroy();
  EXPECT_THROW((void)graph.nodes(), InvalidArgumentError);
}

// cuStreamGetId: one id per stream, the same at every question; the
// default streams have their own.
TEST_F(Graphs, StreamsHaveDistinctStableIds) {
  const Stream a = Stream::create(ctx());
  const Stream b = Stream::create(ctx());
  EXPECT_NE(a.id(), b.id());
  EXPECT_EQ(a.id(), a.id());
  const std::uint64_t legacy = StreamRef::legacy_default(ctx()).id();
  const std::uint64_t per_thread = StreamRef::per_thread_default(ctx()).id();
  EXPECT_NE(legacy, per_thread);
  EXPECT_NE(legacy, a.id());
}

}  // namespace
