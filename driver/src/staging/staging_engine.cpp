// SPDX-License-Identifier: Apache-2.0
// StagingEngine (staging_engine.hpp): checks its arguments, sends small and
// page-locked copies straight to the driver, and stages the rest
// (staged_copy.cpp), one copy at a time per engine.
#include <drvshim/error.hpp>
#include <drvshim/event.hpp>
#include <drvshim/memory.hpp>
#include <drvshim/pinned_pool.hpp>
#include <drvshim/staging_engine.hpp>
#include <drvshim/stream.hpp>

#include <algorithm>
#include <cstddef>
#include <cstring>
#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "log_internal.hpp"
#include "pool/pool_core.hpp"
#include "staging/ring_plan.hpp"
#include "staging/staged_copy.hpp"
#include "staging/staging_core.hpp"
#include "streams/capture_check.hpp"

namespace drvshim {
namespace detail {
namespace {

// An engine serves the context of its pool: its stream, its ordering after
// that context's legacy default stream and its events all live there. Memory
// or a stream of another context (another device) would be copied on the
// wrong device's stream and ordered after the wrong device's work.
void check_engine_context(const char* api, const StagingCore& c, const ContextRef& memory, const StreamRef* stream) {
  const ContextRef& own = c.pool.context();
  const ContextRef* other = memory.address() != own.address()                                     ? &memory
                            : (stream != nullptr && stream->context().address() != own.address()) ? &stream->context()
                                                                                                  : nullptr;
  if (other == nullptr) return;
  throw InvalidArgumentError(
      api,
      fmt::format("the {} is in context 0x{:x} on device {}; this engine's pool serves context 0x{:x} on device {}",
                  other == &memory ? "device memory" : "stream", other->address(), other->device().ordinal(),
                  own.address(), own.device().ordinal()),
      "use one PinnedPool and StagingEngine per context (per device); plain copies (drvshim::copy) work with any "
      "context");
}

}  // namespace

// Blocks a stream-ordered copy gives back stay cached until their stream has
// passed them, over the pool's cap if need be. Copies queued faster than the
// stream runs would grow the pool without end: past its cap, the ready ones
// are freed, and if that is not enough the stream's earlier work is waited
// for (the caller holds no lock of the engine here).
void keep_pool_near_its_cap(StagingCore& c, const StreamRef& stream) {
  const std::size_t cap = c.pool.options().max_cached_bytes;
  if (c.pool.stats().bytes_cached <= cap) return;
  c.pool.trim(cap);
  if (c.pool.stats().bytes_cached <= cap) return;
  const Event passed = Event::create(stream.context(), EventFlags::disable_timing);
  passed.ref().record(stream);
  passed.ref().synchronize();
  c.pool.trim(cap);
}

namespace {

void check_sizes(const char* api, std::size_t dst, std::size_t src) {
  if (dst != src) {
    throw InvalidArgumentError(api, fmt::format("destination has {} bytes, source {}", dst, src),
                               "pass spans of the same size");
  }
}

}  // namespace

}  // namespace detail

StagingEngine::StagingEngine(const PinnedPool& pool, StagingOptions options) {
  if (options.depth == 1 || options.threads > 64 || (options.chunk_bytes != 0 && options.chunk_bytes < (64 << 10)) ||
      options.spin.count() < 0) {
    throw InvalidArgumentError("StagingEngine",
                               fmt::format("chunk_bytes {}, depth {}, threads {}, spin {} µs", options.chunk_bytes,
                                           options.depth, options.threads, options.spin.count()),
                               "use chunk_bytes of 0 (automatic) or at least 65536, a depth of 0 (automatic) or at "
                               "least 2, 0 (automatic) to 64 "
                               "threads, and a spin of 0 or more");
  }
  core_ = std::make_shared<detail::StagingCore>(pool, options);
}

const StagingOptions& StagingEngine::options() const noexcept { return core_->options; }
const PinnedPool& StagingEngine::pool() const noexcept { return core_->pool; }

StagingStats StagingEngine::stats() const {
  core_->ensure_usable("StagingEngine::stats");
  std::lock_guard<std::mutex> lock(core_->stats_mutex);
  return core_->stats;
}

void StagingEngine::copy_to_device(const DeviceSpan<std::byte>& dst, std::span<const std::byte> src) const {
  detail::check_sizes("StagingEngine::copy_to_device", dst.size_bytes(), src.size());
  detail::check_engine_context("StagingEngine::copy_to_device", *core_, dst.context(), nullptr);
  auto& c = *core_;
  c.ensure_usable("StagingEngine::copy_to_device");
  if (src.empty()) return;
  if (c.direct(src.data(), src.size(), true)) return copy(dst, src);
  std::vector<PinnedBlock> spent;  // given back after the lock (declared before it)
  std::lock_guard<std::mutex> lock(c.copy_mutex);
  detail::stage_to_device(c, dst, src, c.stream.ref(), detail::DeviceCopyEnd::complete_after_legacy, spent);
}

void StagingEngine::copy_to_host(std::span<std::byte> dst, const DeviceSpan<const std::byte>& src) const {
  detail::check_sizes("StagingEngine::copy_to_host", dst.size(), src.size_bytes());
  detail::check_engine_context("StagingEngine::copy_to_host", *core_, src.context(), nullptr);
  auto& c = *core_;
  c.ensure_usable("StagingEngine::copy_to_host");
  if (dst.empty()) return;
  if (c.direct(dst.data(), dst.size(), false)) return copy(dst, src);
  std::vector<PinnedBlock> spent;  // given back after the lock (declared before it)
  std::lock_guard<std::mutex> lock(c.copy_mutex);
  detail::stage_to_host(c, dst, src, c.stream.ref(), spent);
}

void StagingEngine::copy_to_device_async(const DeviceSpan<std::byte>& dst, std::span<const std::byte> src,
                                         const StreamRef& stream) const {
  detail::check_sizes("StagingEngine::copy_to_device_async", dst.size_bytes(), src.size());
  detail::check_engine_context("StagingEngine::copy_to_device_async", *core_, dst.context(), &stream);
  detail::refuse_if_capturing(stream, "StagingEngine::copy_to_device_async",
                              "a graph would replay the staging engine's copies from staging blocks later copies "
                              "reuse: capture a copy_async from pinned memory instead");
  auto& c = *core_;
  c.ensure_usable("StagingEngine::copy_to_device_async");
  if (src.empty()) return;
  using Route = detail::StagingCore::AsyncToDevice;
  const Route route = c.route_async_to_device(src.data(), src.size());
  // The driver's own pageable path reads the source before it returns, as this form promises.
  if (route == Route::driver) return copy_async(stream, dst, src);
  // No wait for `stream` may happen under the engine's lock: the stream may
  // wait for something another thread does after its own copy on this engine.
  detail::keep_pool_near_its_cap(c, stream);
  if (route == Route::one_block) {
    // Small and page-locked: one block of its size, no ring and no lock.
    PinnedBlock block = c.pool.acquire(src.size());
    std::memcpy(block.data(), src.data(), src.size());
    try {
      copy_async(stream, dst, std::span<const std::byte>(block.data(), src.size()));
    } catch (...) {
      block.release();  // nothing was queued: reusable at once
      throw;
    }
    try {
      block.release_after(stream);
    } catch (...) {
      // No event to give it back with (out of memory, a failed record): the
      // stream is waited for, so its copy has read the block before it goes
      // back. The wait's own error is dropped: the first one is on its way.
      try {
        stream.synchronize();
      } catch (...) {
      }
      throw;
    }
    {
      std::lock_guard<std::mutex> lock(c.stats_mutex);
      ++c.stats.chunks;
    }
    return;
  }
  if (detail::fits_ring(c, src.size())) {
    // The ring holds the whole copy: its DMAs go on `stream`, never waited for.
    std::vector<PinnedBlock> spent;  // given back after the lock (declared before it)
    std::lock_guard<std::mutex> lock(c.copy_mutex);
    return detail::stage_to_device(c, dst, src, stream, detail::DeviceCopyEnd::in_flight, spent);
  }
  // Larger than the ring: its blocks come back only as its DMAs land, after
  // the stream's earlier work. That work is waited for first, outside the
  // lock; the copy then runs on the engine's own stream, complete on return.
  {
    const Event passed = Event::create(stream.context(), EventFlags::disable_timing);
    passed.ref().record(stream);
    passed.ref().synchronize();
  }
  std::vector<PinnedBlock> spent;  // given back after the lock (declared before it)
  std::lock_guard<std::mutex> lock(c.copy_mutex);
  detail::stage_to_device(c, dst, src, c.stream.ref(), detail::DeviceCopyEnd::complete, spent);
}

void StagingEngine::copy_to_host_async(std::span<std::byte> dst, const DeviceSpan<const std::byte>& src,
                                       const StreamRef& stream) const {
  detail::check_sizes("StagingEngine::copy_to_host_async", dst.size(), src.size_bytes());
  detail::check_engine_context("StagingEngine::copy_to_host_async", *core_, src.context(), &stream);
  detail::refuse_if_capturing(stream, "StagingEngine::copy_to_host_async",
                              "a graph would replay the staging engine's copies from staging blocks later copies "
                              "reuse: capture a copy_async from pinned memory instead");
  auto& c = *core_;
  c.ensure_usable("StagingEngine::copy_to_host_async");
  if (dst.empty()) return;
  if (c.direct(dst.data(), dst.size(), false)) return copy_async(stream, dst, src);
  // Stream-ordered: each chunk's DMA into a staging block, then a host
  // function on the same stream copying it out and returning the block (no
  // driver call inside: host functions must not make any). Stream order makes
  // a block reusable once its host function has run.
  const std::size_t chunk = detail::ring_for(c.options, dst.size()).top;
  // The chunk being queued: its DMA may be queued although its host function
  // is not, so its block must not go back to the pool before the stream has
  // passed that DMA.
  std::shared_ptr<PinnedBlock> block;
  try {
    for (std::size_t offset = 0; offset < dst.size(); offset += chunk) {
      const std::size_t n = std::min(chunk, dst.size() - offset);
      block = std::make_shared<PinnedBlock>(c.pool.acquire(n));
      copy_async(stream, std::span<std::byte>(block->data(), n), src.subspan(offset, n));
      std::byte* out = dst.data() + offset;
      stream.launch_host_func([block, out, n] {
        std::memcpy(out, block->data(), n);
        detail::PoolCore::release_in_host_func(*block);
      });
    }
  } catch (...) {
    // Wait for the stream before reporting: the queued DMAs land before their
    // blocks are reused, and no host function of this call writes into `dst`
    // after it returned (its contents are then unspecified). The wait's own
    // error is dropped: the first one is on its way.
    try {
      stream.synchronize();
    } catch (...) {
    }
    throw;
  }
}

}  // namespace drvshim
