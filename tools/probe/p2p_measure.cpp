// SPDX-License-Identifier: Apache-2.0
#include "p2p_measure.hpp"

#include <algorithm>
#include <atomic>
#include <cstring>

#include "probe_kernels_ptx.hpp"

namespace drvshim_probe {

using namespace drvshim;

double median(std::vector<double> v) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

StreamLatch::StreamLatch(const ContextRef& context) {
  try {
    flag_.emplace(MappedBuffer::allocate(context, sizeof(int)));
    module_.emplace(
        Module::load(context, std::as_bytes(std::span<const char>(kProbeKernelsPtx, sizeof(kProbeKernelsPtx) - 1))));
    kernel_.emplace(module_->kernel("wait_flag"));
    arm();
  } catch (const Error&) {
    // No mapped memory or no kernel here: measure unlatched.
    kernel_.reset();
    module_.reset();
    flag_.reset();
  }
}

void StreamLatch::arm() noexcept {
  if (flag_) std::atomic_ref<int>(*static_cast<int*>(flag_->data())).store(0, std::memory_order_release);
}

void StreamLatch::release() noexcept {
  if (flag_) std::atomic_ref<int>(*static_cast<int*>(flag_->data())).store(1, std::memory_order_release);
}

void StreamLatch::block(const StreamRef& stream) {
  if (!kernel_) return;
  constexpr unsigned long long kTimeoutNs = 10'000'000'000ull;  // never hang the probe: 10 s at most
  launch(*kernel_, LaunchConfig{{1}, {1}, 0, stream, {}}, flag_->device_address(), kTimeoutNs);
}

namespace {

// Copies of d queued `count` times.
void queue_copies(const Direction& d, int count) {
  for (int i = 0; i < count; ++i) copy_peer_async(d.stream, d.dst, DeviceSpan<const std::byte>(d.src));
}

// Releases latches however a sample ends: a stream left latched would spin for 10 s.
struct ReleaseOnExit {
  std::vector<StreamLatch*> latches;
  ~ReleaseOnExit() {
    for (StreamLatch* l : latches) {
      if (l != nullptr) l->release();
    }
  }
};

double gbps(std::size_t bytes, int copies, Milliseconds t) {
  const double s = t.count() / 1e3;
  return s > 0.0 ? static_cast<double>(bytes) * copies / s / 1e9 : 0.0;
}

}  // namespace

double unidirectional_gbps(const Direction& d, const P2PSettings& settings) {
  const ContextRef& ctx = d.stream.context();
  auto start = Event::create(ctx);
  auto end = Event::create(ctx);
  std::vector<double> samples;
  for (int s = 0; s < settings.samples; ++s) {
    ReleaseOnExit guard{{d.latch}};
    if (d.latch != nullptr) {
      d.latch->arm();
      d.latch->block(d.stream);
    }
    queue_copies(d, settings.warmup);
    start.ref().record(d.stream);
    queue_copies(d, settings.copies);
    end.ref().record(d.stream);
    if (d.latch != nullptr) d.latch->release();
    d.stream.synchronize();
    samples.push_back(gbps(d.dst.size(), settings.copies, elapsed(start.ref(), end.ref())));
  }
  return median(samples);
}

Bidirectional bidirectional_gbps(const Direction& forward, const Direction& reverse, const P2PSettings& settings) {
  const ContextRef& fctx = forward.stream.context();
  const ContextRef& rctx = reverse.stream.context();
  auto fstart = Event::create(fctx);
  auto fend = Event::create(fctx);
  auto rstart = Event::create(rctx);
  auto rend = Event::create(rctx);
  std::vector<double> fs, rs;
  for (int s = 0; s < settings.samples; ++s) {
    ReleaseOnExit guard{{forward.latch, reverse.latch}};
    for (const Direction* d : {&forward, &reverse}) {
      if (d->latch != nullptr) {
        d->latch->arm();
        d->latch->block(d->stream);
      }
      queue_copies(*d, settings.warmup);
    }
    fstart.ref().record(forward.stream);
    reverse.stream.wait(fstart.ref());  // both directions start together
    rstart.ref().record(reverse.stream);
    queue_copies(forward, settings.copies);
    fend.ref().record(forward.stream);
    queue_copies(reverse, settings.copies);
    rend.ref().record(reverse.stream);
    for (const Direction* d : {&forward, &reverse}) {
      if (d->latch != nullptr) d->latch->release();
    }
    forward.stream.synchronize();
    reverse.stream.synchronize();
    fs.push_back(gbps(forward.dst.size(), settings.copies, elapsed(fstart.ref(), fend.ref())));
    rs.push_back(gbps(reverse.dst.size(), settings.copies, elapsed(rstart.ref(), rend.ref())));
  }
  return Bidirectional{median(fs), median(rs)};
}

double latency_us(const Direction& d, const P2PSettings& settings) {
  const Direction small{d.dst.subspan(0, settings.latency_bytes), d.src.subspan(0, settings.latency_bytes), d.stream,
                        d.latch};
  const ContextRef& ctx = d.stream.context();
  auto start = Event::create(ctx);
  auto end = Event::create(ctx);
  std::vector<double> samples;
  for (int s = 0; s < settings.samples; ++s) {
    ReleaseOnExit guard{{small.latch}};
    if (small.latch != nullptr) {
      small.latch->arm();
      small.latch->block(small.stream);
    }
    queue_copies(small, settings.warmup);
    start.ref().record(small.stream);
    queue_copies(small, settings.latency_copies);
    end.ref().record(small.stream);
    if (small.latch != nullptr) small.latch->release();
    small.stream.synchronize();
    samples.push_back(elapsed(start.ref(), end.ref()).count() * 1e3 / settings.latency_copies);
  }
  return median(samples);
}

}  // namespace drvshim_probe
