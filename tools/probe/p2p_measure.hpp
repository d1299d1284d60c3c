// SPDX-License-Identifier: Apache-2.0
#pragma once
// Copy-engine measurements between two devices, the way nvbandwidth makes
// them: large copies queued on a non-blocking stream of the source device
// behind a latch (a kernel spinning on mapped host memory, so that every copy
// is queued before the first one starts), a few warm-up copies, events around
// the timed copies, the median of several samples. Shared by drvshim-probe
// (its --bandwidth P2P matrices) and tools/bench/bench_peer.cpp (which holds
// them against the raw driver calls).
#include <drvshim/drvshim.hpp>

#include <cstddef>
#include <memory>
#include <optional>
#include <vector>

namespace drvshim_probe {

struct P2PSettings {
  std::size_t bytes = std::size_t{256} << 20;  ///< per copy (nvbandwidth's buffer size)
  int copies = 16;                             ///< timed copies per sample (nvbandwidth's loop count)
  int warmup = 4;                              ///< untimed copies first
  int samples = 3;                             ///< the median is reported
  std::size_t latency_bytes = 4;               ///< the small copy of the latency measurement
  int latency_copies = 100;                    ///< small copies per latency sample
};

/// Holds streams of one context until release() (see the file comment).
/// Without mapped memory or without the probe's kernel it does nothing, and
/// the measurements run unlatched (available() says which).
class StreamLatch {
 public:
  explicit StreamLatch(const drvshim::ContextRef& context);
  bool available() const noexcept { return kernel_.has_value(); }
  /// Queues the spinning kernel on `stream` (the flag must be armed).
  void block(const drvshim::StreamRef& stream);
  /// Arms the flag (0) for the next block().
  void arm() noexcept;
  /// Lets every blocked stream go.
  void release() noexcept;

 private:
  std::optional<drvshim::MappedBuffer> flag_;
  std::optional<drvshim::Module> module_;
  std::optional<drvshim::Kernel> kernel_;
};

/// One direction of a measurement: `count` copies of dst.size() bytes from
/// src to dst, queued on `stream` (cuMemcpyPeerAsync through drvshim).
struct Direction {
  drvshim::DeviceSpan<std::byte> dst;
  drvshim::DeviceSpan<std::byte> src;
  drvshim::StreamRef stream;
  StreamLatch* latch = nullptr;  ///< the latch of the stream's context (may be null)
};

/// The median GB/s (1e9 bytes per second) of `settings.samples` samples of
/// one direction alone.
double unidirectional_gbps(const Direction& d, const P2PSettings& settings);

/// Both directions at once, each on its own stream, started together (the
/// second stream waits for an event recorded on the first); the median GB/s
/// of each direction while the other runs.
struct Bidirectional {
  double forward = 0.0;
  double reverse = 0.0;
};
Bidirectional bidirectional_gbps(const Direction& forward, const Direction& reverse, const P2PSettings& settings);

/// The median time of one small copy (settings.latency_bytes), in
/// microseconds, from `latency_copies` back-to-back copies between events.
double latency_us(const Direction& d, const P2PSettings& settings);

/// The median of `v` (mean of the middle two for an even count); 0 for none.
double median(std::vector<double> v);

}  // namespace drvshim_probe
