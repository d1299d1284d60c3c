// SPDX-License-Identifier: Apache-2.0
#pragma once
// Ordering cases: what a copy sees of work queued before it on the legacy
// default stream. One table, run against the fake driver (test_staging_safety.cpp,
// CI) and the real driver (tests/gpu/test_gpu_staging.cpp); the results must
// agree (docs/contract-cases.md).
#include <drvshim/drvshim.hpp>

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace drvshim_test {

struct OrderCase {
  std::string name;
  std::string observed;
  std::string expected;
};

// Queues, on the legacy default stream of the buffer's context, work that
// completes later and then sets every element of `buffer` to `value` (the
// fake: a held legacy stream released by a timer; the GPU: a kernel that spins
// first). Returns something to call once the case is over (joins a timer).
using BusyLegacyStream =
    std::function<std::function<void()>(drvshim::DeviceSpan<std::uint32_t> buffer, std::uint32_t value)>;

inline std::string stale_text(const std::vector<std::uint32_t>& v, std::uint32_t value) {
  std::size_t stale = 0;
  for (const auto x : v) stale += x != value ? 1 : 0;
  return std::to_string(stale) + " stale";
}

// `count` 32-bit elements; large enough to be staged (see StagingOptions::direct_below).
inline std::vector<OrderCase> run_stream_order_cases(const drvshim::ContextRef& ctx, std::size_t count,
                                                     const BusyLegacyStream& busy) {
  using namespace drvshim;
  std::vector<OrderCase> out;
  auto buffer = DeviceBuffer::allocate(ctx, count * sizeof(std::uint32_t));
  const DeviceSpan<std::uint32_t> span = buffer.as<std::uint32_t>();
  fill(span, 0u);
  std::vector<std::uint32_t> host(count);
  auto run = [&](const char* name, std::uint32_t value, const std::function<void()>& read) {
    std::fill(host.begin(), host.end(), 0xdeadbeefu);
    auto done = busy(span, value);
    read();
    done();
    out.push_back(OrderCase{name, stale_text(host, value), "0 stale"});
  };
  run("drvshim::copy (cuMemcpyDtoH) after legacy-stream work", 1,
      [&] { copy(std::span<std::uint32_t>(host), DeviceSpan<const std::uint32_t>(span)); });
  {
    PinnedPool pool(ctx);
    StagingOptions o;
    o.threads = 2;
    StagingEngine engine(pool, o);
    run("StagingEngine::copy_to_host after legacy-stream work", 2, [&] {
      engine.copy_to_host(std::as_writable_bytes(std::span<std::uint32_t>(host)),
                          DeviceSpan<const std::byte>(ctx, span.address(), span.size_bytes(), span.owner_id()));
    });
  }
  {
    auto pinned = PinnedBuffer::allocate(ctx, count * sizeof(std::uint32_t));
    auto* p = static_cast<std::uint32_t*>(pinned.data());
    auto blocking = Stream::create(ctx, StreamFlags::blocking);
    run("copy_async on a blocking stream after legacy-stream work", 3, [&] {
      copy_async(blocking.ref(), std::span<std::uint32_t>(p, count), DeviceSpan<const std::uint32_t>(span));
      blocking.ref().synchronize();
      std::copy(p, p + count, host.begin());
    });
    auto independent = Stream::create(ctx, StreamFlags::non_blocking);
    auto mark = Event::create(ctx, EventFlags::disable_timing);
    run("non-blocking stream after an event recorded on the legacy stream", 4, [&] {
      mark.ref().record(StreamRef::legacy_default(ctx));
      independent.ref().wait(mark.ref());
      copy_async(independent.ref(), std::span<std::uint32_t>(p, count), DeviceSpan<const std::uint32_t>(span));
      independent.ref().synchronize();
      std::copy(p, p + count, host.begin());
    });
  }
  return out;
}

}  // namespace drvshim_test
