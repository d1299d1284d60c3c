// SPDX-License-Identifier: Apache-2.0
// A staged copy in progress (the conductor): the calling thread issues every
// DMA and watches every event while the crew copies bytes.
#include <drvshim/event.hpp>
#include <drvshim/memory.hpp>
#include <drvshim/pinned_pool.hpp>
#include <drvshim/stream.hpp>

#include <algorithm>
#include <array>
#include <atomic>
#include <cstddef>
#include <mutex>
#include <optional>
#include <span>
#include <vector>

#include "devices/context_scope.hpp"
#include "seam/access.hpp"
#include "staging/backoff.hpp"
#include "staging/host_copy.hpp"
#include "staging/ring_plan.hpp"
#include "staging/staged_copy.hpp"
#include "staging/staging_core.hpp"
#include "staging/staging_job.hpp"
#include "support/test_hooks.hpp"

namespace drvshim {
namespace detail {

namespace {

// A staged copy in progress: its ring (blocks from the pool), the job the
// crew works on, and the DMAs queued (in order; DMA k uses the engine's
// event k mod kMaxInFlight).
class StagedCopy {
 public:
  StagedCopy(StagingCore& c, bool to_device, std::byte* host, std::size_t bytes, const StreamRef& stream,
             std::vector<PinnedBlock>& spent, bool in_flight = false)
      : c_(c),
        spent_(spent),
        in_flight_(in_flight),
        stream_(stream),
        scope_(*detail::Access::core(c.pool.context().device()), c.pool.context().address(),
               to_device ? "StagingEngine::copy_to_device" : "StagingEngine::copy_to_host"),
        plan_(ring_for(c.options, bytes)) {
    c_.crew.rouse();
    StagingJob& j = job_;
    j.to_device = to_device;
    j.host = host;
    j.bytes = bytes;
    StagingOptions asked;
    asked.threads = c.automatic_threads ? 0 : c.options.threads;
    const unsigned workers = threads_for_copy(asked, static_cast<unsigned>(c.crew.size()) + 1, bytes);
    j.helpers = workers - 1;
    j.kernel = kernel_for(to_device, bytes, workers);
    j.block_bytes = plan_.block_bytes;
    j.ring_bytes = plan_.blocks * plan_.block_bytes;
    j.plan_pieces(workers);
    while (c.events.size() < StagingCore::kMaxInFlight)
      c.events.push_back(Event::create(c.pool.context(), EventFlags::disable_timing));
    blocks_.reserve(plan_.blocks);
    spent_.reserve(spent_.size() + plan_.blocks);
    j.blocks.reserve(plan_.blocks);
    try {
      for (std::size_t i = 0; i < plan_.blocks; ++i) {
        blocks_.push_back(c.pool.acquire(plan_.block_bytes));
        j.blocks.push_back(blocks_.back().data());
      }
    } catch (...) {
      // The blocks already taken go back after the engine's lock, like a finished copy's.
      for (auto& b : blocks_) spent_.push_back(std::move(b));
      throw;
    }
  }
  StagedCopy(const StagedCopy&) = delete;
  StagedCopy& operator=(const StagedCopy&) = delete;

  // On any exit: the crew has left the job, and no DMA still uses a block
  // that goes back to the pool (after an error: the stream waited for, errors
  // of that wait dropped, as the first error is on its way).
  ~StagedCopy() {
    job_.abort.store(true);
    c_.crew.retire();
    if (queued_ && in_flight_) {
      // Not waited for (the engine's lock is held, and the caller's stream
      // may wait for another thread's copy on this engine): each block goes
      // back once the stream has passed it. Only where that cannot be
      // arranged is the stream waited for.
      try {
        for (auto& b : blocks_) b.release_after(stream_);
        queued_ = false;
      } catch (...) {
      }
    }
    if (queued_) {
      try {
        stream_.synchronize();
      } catch (...) {
        // The error being thrown is the first one; a second report of it is dropped.
      }
    }
    {
      std::lock_guard<std::mutex> lock(c_.stats_mutex);
      c_.stats.chunks += issued_;
    }
    // Handed to the caller, who gives them back after the engine's lock:
    // over the pool's cap a block is freed, and freeing pinned memory makes
    // the driver wait for the device (every stream, a caller's too).
    for (auto& b : blocks_) spent_.push_back(std::move(b));  // reserved: never allocates
  }

  // A synchronous copy is ordered as the driver's synchronous copies are:
  // after the work already queued on the legacy default stream (and, through
  // it, on every blocking stream). The engine's own stream is non-blocking,
  // so it waits for an event recorded there: two calls, no host wait.
  void order_after_legacy_stream() {
    if (!c_.legacy_mark) c_.legacy_mark.emplace(Event::create(c_.pool.context(), EventFlags::disable_timing));
    c_.legacy_mark->ref().record(StreamRef::legacy_default(c_.pool.context()));
    stream_.wait(c_.legacy_mark->ref());
  }

  void to_device(const DeviceSpan<std::byte>& dst, DeviceCopyEnd end) {
    StagingJob& j = job_;
    if (end == DeviceCopyEnd::complete_after_legacy) order_after_legacy_stream();
    dst_.emplace(dst);
    j.open_until.store(std::min(j.bytes, j.ring_bytes), std::memory_order_release);
    c_.crew.publish(&j);
    auto between = [this] { send(); };
    Backoff backoff;
    while (sent_ < j.bytes) {
      if (send() || j.try_piece(between)) {
        backoff.reset();
      } else {
        backoff.wait();
      }
    }
    c_.crew.retire();  // every piece is in: the source has been read completely
    if (end != DeviceCopyEnd::in_flight) {
      stream_.synchronize();
      queued_ = false;
      return;
    }
    // Still in flight: reusable once the stream passes this point.
    for (auto& b : blocks_) b.release_after(stream_);
    queued_ = false;
  }

  void to_host(const DeviceSpan<const std::byte>& src) {
    StagingJob& j = job_;
    order_after_legacy_stream();
    src_.emplace(src);
    ends_ = host_dma_ends(plan_, j.bytes);
    c_.crew.publish(&j);
    auto between = [this] { fetch(); };
    Backoff backoff;
    while (emptied_ < j.bytes) {
      if (fetch() || j.try_piece(between)) {
        backoff.reset();
      } else {
        backoff.wait();
      }
    }
    queued_ = false;  // every byte copied out: every DMA has landed
  }

 private:
  // Notices the oldest DMA landing, and opens what it frees (to the device:
  // its ring bytes; to the host: its bytes). Returns whether one landed.
  bool land() {
    // In flight, nothing is watched: the ring holds the whole copy.
    if (in_flight_ || landed_ == issued_ || !c_.events[landed_ % StagingCore::kMaxInFlight].ref().query()) return false;
    const std::size_t landed_bytes = dma_end_[landed_ % StagingCore::kMaxInFlight];
    ++landed_;
    const StagingJob& j = job_;
    job_.open_until.store(j.to_device ? std::min(j.bytes, landed_bytes + j.ring_bytes) : landed_bytes,
                          std::memory_order_release);
    return true;
  }

  // Pieces finished in order from the front: the bytes through which the
  // host-side copy is complete.
  std::size_t copied_through() noexcept {
    const StagingJob& j = job_;
    while (front_ < j.pieces && j.done[front_].load(std::memory_order_acquire)) ++front_;
    return j.piece_at[front_];
  }

  void queue_dma(std::size_t from, std::size_t to) {
    const std::size_t slot = issued_ % StagingCore::kMaxInFlight;
    std::byte* stage = job_.staged(from);
    queued_ = true;
    if (job_.to_device) {
      copy_async(stream_, dst_->subspan(from, to - from), std::span<const std::byte>(stage, to - from));
      test_hooks::at(test_hooks::Point::staging_dma_queued);
    } else {
      copy_async(stream_, std::span<std::byte>(stage, to - from), src_->subspan(from, to - from));
    }
    if (!in_flight_) {
      c_.events[slot].ref().record(stream_);
      dma_end_[slot] = to;
    }
    ++issued_;
  }

  // To the device: a DMA for what has been copied in since the last one,
  // when the bus is idle, or when it makes a batch worth queueing behind the
  // running DMA, or when it reaches a block's end or the copy's.
  bool send() {
    bool moved = land();
    const std::size_t ready = copied_through();
    if (ready > sent_ && (in_flight_ || issued_ - landed_ < StagingCore::kMaxInFlight)) {
      const std::size_t block_end = (sent_ / plan_.block_bytes + 1) * plan_.block_bytes;
      const std::size_t to = std::min(ready, block_end);
      if (issued_ == landed_ || to - sent_ >= plan_.batch || to == block_end || to == job_.bytes) {
        queue_dma(sent_, to);
        sent_ = to;
        moved = true;
      }
    }
    return moved;
  }

  // To the host: the next planned DMA once the ring bytes it overwrites have
  // been copied out.
  bool fetch() {
    bool moved = land();
    emptied_ = copied_through();
    if (issued_ < ends_.size() && issued_ - landed_ < StagingCore::kMaxInFlight &&
        ends_[issued_] <= emptied_ + job_.ring_bytes) {
      queue_dma(issued_ == 0 ? 0 : ends_[issued_ - 1], ends_[issued_]);
      moved = true;
    }
    return moved;
  }

  StagingCore& c_;
  std::vector<PinnedBlock>& spent_;
  // The ring holds the whole copy and no DMA is waited for (DeviceCopyEnd::in_flight).
  const bool in_flight_;
  StreamRef stream_;
  // The context stays current for the whole copy, so each DMA, record and
  // query inside skips its own push and pop.
  ContextScope scope_;
  RingPlan plan_;
  StagingJob job_;
  std::vector<PinnedBlock> blocks_;                 // declared after job_: returned only after the destructor body ran
  std::optional<DeviceSpan<std::byte>> dst_;        // to the device
  std::optional<DeviceSpan<const std::byte>> src_;  // to the host
  std::vector<std::size_t> ends_;                   // to the host: where each DMA ends
  std::array<std::size_t, StagingCore::kMaxInFlight> dma_end_{};
  std::size_t issued_ = 0, landed_ = 0;  // DMAs
  std::size_t sent_ = 0, emptied_ = 0, front_ = 0;
  bool queued_ = false;  // a DMA may be queued that nobody has waited for
};

}  // namespace

bool fits_ring(const StagingCore& c, std::size_t bytes) noexcept {
  const RingPlan plan = ring_for(c.options, bytes);
  return plan.blocks * plan.block_bytes >= bytes;
}

void stage_to_device(StagingCore& c, const DeviceSpan<std::byte>& dst, std::span<const std::byte> src,
                     const StreamRef& stream, DeviceCopyEnd end, std::vector<PinnedBlock>& spent) {
  // The job writes through `host` only when copying to the host.
  StagedCopy copy(c, true, const_cast<std::byte*>(src.data()), src.size(), stream, spent,
                  end == DeviceCopyEnd::in_flight);
  copy.to_device(dst, end);
}

void stage_to_host(StagingCore& c, std::span<std::byte> dst, const DeviceSpan<const std::byte>& src,
                   const StreamRef& stream, std::vector<PinnedBlock>& spent) {
  StagedCopy copy(c, false, dst.data(), dst.size(), stream, spent);
  copy.to_host(src);
}

}  // namespace detail

}  // namespace drvshim
