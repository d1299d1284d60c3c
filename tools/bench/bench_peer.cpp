// SPDX-License-Identifier: Apache-2.0
// Peer-copy benchmark for a machine with two GPUs (two H200s on NVLink when measured):
//
// A. drvshim's copies between the devices against the raw driver call on the
//    same buffers, with peer access enabled both ways: copy_peer vs
//    cuMemcpyPeer, copy_peer_async vs cuMemcpyPeerAsync, and the
//    unified-address copy (copy between two devices' spans) vs cuMemcpyDtoD.
//    Each sample is a batch of copies ended by one synchronisation (the same
//    raw call for both sides), divided by the batch size; drvshim and raw
//    batches alternate (their order flips every round); medians. Goal: drvshim
//    within 2 % of raw.
// B. The probe's P2P bandwidth (tools/probe/p2p_measure, what `drvshim-probe
//    --bandwidth` reports) against a raw-driver measurement made the
//    nvbandwidth way: cuMemcpyAsync of 256 MiB on a non-blocking stream of the
//    source device, behind a spinning-kernel latch, 4 warm-up copies, 16 timed
//    copies between events. One sample of each per round, alternating;
//    medians. Goal: within 5 %. Latency (4-byte copies) is reported without a goal.
//
// The raw functions are libcuda's own, resolved by this program through
// cuGetProcAddress_v2 (the library drvshim loads), called with the same
// context current as drvshim's call finds.
//
//   bench_peer [OUT.md] [COMMIT]
#include <dlfcn.h>

#include <drvshim/drvshim.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <functional>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "p2p_measure.hpp"
#include "probe_kernels_ptx.hpp"

namespace {

using namespace drvshim;
using drvshim_probe::median;

using Ctx = void*;
using Strm = void*;
using Ev = void*;
struct Raw {
  int (*memcpy_peer)(std::uint64_t, Ctx, std::uint64_t, Ctx, std::size_t) = nullptr;
  int (*memcpy_peer_async)(std::uint64_t, Ctx, std::uint64_t, Ctx, std::size_t, Strm) = nullptr;
  int (*memcpy_dtod)(std::uint64_t, std::uint64_t, std::size_t) = nullptr;
  int (*memcpy_async)(std::uint64_t, std::uint64_t, std::size_t, Strm) = nullptr;
  int (*ctx_synchronize)() = nullptr;
  int (*stream_synchronize)(Strm) = nullptr;
  int (*stream_wait_event)(Strm, Ev, unsigned) = nullptr;
  int (*event_record)(Ev, Strm) = nullptr;
  int (*event_elapsed)(float*, Ev, Ev) = nullptr;
  int (*launch)(void*, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, Strm, void**,
                void**) = nullptr;
};

// From the very library drvshim loaded (dlopen of the same path hands back the same handle).
Raw resolve_raw(const std::string& path) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib == nullptr) throw std::runtime_error("dlopen " + path + ": " + dlerror());
  using GetProc = int (*)(const char*, void**, int, std::uint64_t, int*);
  auto get = reinterpret_cast<GetProc>(dlsym(lib, "cuGetProcAddress_v2"));
  if (get == nullptr) throw std::runtime_error("no cuGetProcAddress_v2");
  Raw raw;
  auto one = [&](auto& slot, const char* name, int version) {
    void* p = nullptr;
    int status = 0;
    if (get(name, &p, version, 1, &status) != 0 || status != 0 || p == nullptr) {
      throw std::runtime_error(std::string("cannot resolve ") + name);
    }
    slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(p);
  };
  one(raw.memcpy_peer, "cuMemcpyPeer", 4000);
  one(raw.memcpy_peer_async, "cuMemcpyPeerAsync", 4000);
  one(raw.memcpy_dtod, "cuMemcpyDtoD", 3020);
  one(raw.memcpy_async, "cuMemcpyAsync", 4000);
  one(raw.ctx_synchronize, "cuCtxSynchronize", 2000);
  one(raw.stream_synchronize, "cuStreamSynchronize", 2000);
  one(raw.stream_wait_event, "cuStreamWaitEvent", 3020);
  one(raw.event_record, "cuEventRecord", 2000);
  one(raw.event_elapsed, "cuEventElapsedTime", 2000);
  one(raw.launch, "cuLaunchKernel", 4000);
  return raw;
}

void check(int r, const char* what) {
  if (r != 0) throw std::runtime_error(std::string(what) + " failed with CUresult " + std::to_string(r));
}

template <class F>
double seconds(F&& f) {
  const auto t0 = std::chrono::steady_clock::now();
  f();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Ctx native(const ContextRef& c) { return reinterpret_cast<Ctx>(c.address()); }
Strm native(const StreamRef& s) { return reinterpret_cast<Strm>(s.native()); }
Ev native(const EventRef& e) { return reinterpret_cast<Ev>(e.native()); }

std::string table;
void emit(const std::string& line) {
  table += line;
  std::fputs(line.c_str(), stdout);
  std::fflush(stdout);
}

struct Goals {
  int met = 0;
  int missed = 0;
  std::string verdict(double ratio, double goal) {
    const bool ok = std::abs(ratio - 1.0) <= goal;
    (ok ? met : missed)++;
    return ok ? "met" : "MISSED";
  }
} goals;

// ---- A: the cost of drvshim's copy calls ------------------------------------------------------------

void part_a(const Raw& raw, const ContextRef& c0, const ContextRef& c1, const DeviceBuffer& src0, DeviceBuffer& dst1) {
  emit(
      "\n## A. Peer copies: drvshim against the raw driver call (peer access on, device 0 -> 1)\n\n"
      "Per copy: a batch of copies plus one synchronisation, divided by the batch size; medians over rounds in which "
      "drvshim and raw alternate.\n\n"
      "| call | size | batch | rounds | drvshim median | raw median | drvshim vs raw | goal (2 %) |\n"
      "|---|---|---|---|---|---|---|---|\n");
  ScopedCurrentContext current(c1);  // the destination's context is current, for drvshim and raw alike
  auto s1 = Stream::create(c1);
  const StreamRef stream = s1.ref();
  struct Size {
    std::size_t bytes;
    int batch;
    int rounds;
  };
  for (const Size sz : {Size{4 << 10, 200, 31}, Size{1 << 20, 50, 21}, Size{64 << 20, 8, 11}}) {
    const auto dst = dst1.as<std::byte>().subspan(0, sz.bytes);
    const auto src = DeviceSpan<const std::byte>(src0.as<std::byte>().subspan(0, sz.bytes));
    struct Case {
      const char* name;
      std::function<void()> drvshim_copy;
      std::function<void()> raw_copy;
      std::function<void()> sync;
    };
    const std::vector<Case> cases = {
        {"copy_peer / cuMemcpyPeer", [&] { copy_peer(dst, src); },
         [&] {
           check(raw.memcpy_peer(dst.address(), native(c1), src.address(), native(c0), sz.bytes), "cuMemcpyPeer");
         },
         [&] { check(raw.ctx_synchronize(), "cuCtxSynchronize"); }},
        {"copy_peer_async / cuMemcpyPeerAsync", [&] { copy_peer_async(stream, dst, src); },
         [&] {
           check(raw.memcpy_peer_async(dst.address(), native(c1), src.address(), native(c0), sz.bytes, native(stream)),
                 "cuMemcpyPeerAsync");
         },
         [&] { check(raw.stream_synchronize(native(stream)), "cuStreamSynchronize"); }},
        {"copy (unified address) / cuMemcpyDtoD", [&] { copy(dst, src); },
         [&] { check(raw.memcpy_dtod(dst.address(), src.address(), sz.bytes), "cuMemcpyDtoD"); },
         [&] { check(raw.ctx_synchronize(), "cuCtxSynchronize"); }},
    };
    for (const auto& c : cases) {
      auto batch = [&](const std::function<void()>& one) {
        return seconds([&] {
                 for (int i = 0; i < sz.batch; ++i) one();
                 c.sync();
               }) /
               sz.batch;
      };
      batch(c.drvshim_copy);  // warm-up
      batch(c.raw_copy);
      std::vector<double> td, tr;
      for (int r = 0; r < sz.rounds; ++r) {
        if (r % 2 == 0) {
          td.push_back(batch(c.drvshim_copy));
          tr.push_back(batch(c.raw_copy));
        } else {
          tr.push_back(batch(c.raw_copy));
          td.push_back(batch(c.drvshim_copy));
        }
      }
      const double md = median(td), mr = median(tr);
      char line[320];
      std::snprintf(line, sizeof line, "| %s | %zu KiB | %d | %d | %.2f µs | %.2f µs | %+.2f %% | %s |\n", c.name,
                    sz.bytes >> 10, sz.batch, sz.rounds, md * 1e6, mr * 1e6, (md / mr - 1.0) * 100.0,
                    goals.verdict(md / mr, 0.02).c_str());
      emit(line);
    }
  }
}

// ---- B: the probe's P2P bandwidth against nvbandwidth's way with raw calls ---------------------------

// A latch for the raw side: the probe's wait_flag kernel, launched with cuLaunchKernel.
struct RawLatch {
  RawLatch(const ContextRef& ctx)
      : flag(MappedBuffer::allocate(ctx, sizeof(int))),
        module(Module::load(ctx, std::as_bytes(std::span<const char>(kProbeKernelsPtx, sizeof(kProbeKernelsPtx) - 1)))),
        kernel(module.kernel("wait_flag")) {}
  void block(const Raw& raw, Strm s) {
    *static_cast<volatile int*>(flag.data()) = 0;
    std::uint64_t p = flag.device_address();
    unsigned long long timeout = 10'000'000'000ull;
    void* args[] = {&p, &timeout};
    check(raw.launch(reinterpret_cast<void*>(kernel.native()), 1, 1, 1, 1, 1, 1, 0, s, args, nullptr),
          "cuLaunchKernel");
  }
  void release() { *static_cast<volatile int*>(flag.data()) = 1; }
  MappedBuffer flag;
  Module module;
  Kernel kernel;
};

struct RawDirection {
  const ContextRef* ctx;  // the source's, whose stream runs the copies
  std::uint64_t dst;
  std::uint64_t src;
  std::size_t bytes;
  StreamRef stream;
  RawLatch* latch;
  Event start;
  Event end;
};

void queue_raw(const Raw& raw, const RawDirection& d, int n, std::size_t bytes) {
  for (int i = 0; i < n; ++i) check(raw.memcpy_async(d.dst, d.src, bytes, native(d.stream)), "cuMemcpyAsync");
}

double raw_elapsed(const Raw& raw, const RawDirection& d) {
  float ms = 0.0f;
  check(raw.event_elapsed(&ms, native(d.start.ref()), native(d.end.ref())), "cuEventElapsedTime");
  return static_cast<double>(ms);
}

// nvbandwidth's sample, raw: one direction.
double raw_unidirectional(const Raw& raw, RawDirection& d, const drvshim_probe::P2PSettings& s) {
  ScopedCurrentContext current(*d.ctx);
  d.latch->block(raw, native(d.stream));
  queue_raw(raw, d, s.warmup, d.bytes);
  check(raw.event_record(native(d.start.ref()), native(d.stream)), "cuEventRecord");
  queue_raw(raw, d, s.copies, d.bytes);
  check(raw.event_record(native(d.end.ref()), native(d.stream)), "cuEventRecord");
  d.latch->release();
  check(raw.stream_synchronize(native(d.stream)), "cuStreamSynchronize");
  return static_cast<double>(d.bytes) * s.copies / (raw_elapsed(raw, d) / 1e3) / 1e9;
}

// Both directions at once, the second stream started by an event of the first.
std::pair<double, double> raw_bidirectional(const Raw& raw, RawDirection& f, RawDirection& r,
                                            const drvshim_probe::P2PSettings& s) {
  for (RawDirection* d : {&f, &r}) {
    ScopedCurrentContext current(*d->ctx);
    d->latch->block(raw, native(d->stream));
    queue_raw(raw, *d, s.warmup, d->bytes);
  }
  {
    ScopedCurrentContext current(*f.ctx);
    check(raw.event_record(native(f.start.ref()), native(f.stream)), "cuEventRecord");
  }
  {
    ScopedCurrentContext current(*r.ctx);
    check(raw.stream_wait_event(native(r.stream), native(f.start.ref()), 0), "cuStreamWaitEvent");
    check(raw.event_record(native(r.start.ref()), native(r.stream)), "cuEventRecord");
  }
  for (RawDirection* d : {&f, &r}) {
    ScopedCurrentContext current(*d->ctx);
    queue_raw(raw, *d, s.copies, d->bytes);
    check(raw.event_record(native(d->end.ref()), native(d->stream)), "cuEventRecord");
  }
  f.latch->release();
  r.latch->release();
  for (RawDirection* d : {&f, &r}) check(raw.stream_synchronize(native(d->stream)), "cuStreamSynchronize");
  const auto gb = [&](RawDirection& d) {
    return static_cast<double>(d.bytes) * s.copies / (raw_elapsed(raw, d) / 1e3) / 1e9;
  };
  return {gb(f), gb(r)};
}

double raw_latency_us(const Raw& raw, RawDirection& d, const drvshim_probe::P2PSettings& s) {
  ScopedCurrentContext current(*d.ctx);
  d.latch->block(raw, native(d.stream));
  queue_raw(raw, d, s.warmup, s.latency_bytes);
  check(raw.event_record(native(d.start.ref()), native(d.stream)), "cuEventRecord");
  queue_raw(raw, d, s.latency_copies, s.latency_bytes);
  check(raw.event_record(native(d.end.ref()), native(d.stream)), "cuEventRecord");
  d.latch->release();
  check(raw.stream_synchronize(native(d.stream)), "cuStreamSynchronize");
  return raw_elapsed(raw, d) * 1e3 / s.latency_copies;
}

void part_b(const Raw& raw, const ContextRef& c0, const ContextRef& c1) {
  drvshim_probe::P2PSettings settings;  // the probe's defaults: 256 MiB, 16 copies, 4 warm-up
  settings.samples = 1;                 // one sample per round; rounds interleave probe and raw
  constexpr int kRounds = 7;
  const ContextRef ctx[2] = {c0, c1};
  std::vector<DeviceBuffer> bufs;  // per device: a (forward), b (reverse)
  for (const ContextRef& c : ctx) {
    bufs.push_back(DeviceBuffer::allocate(c, settings.bytes));
    bufs.push_back(DeviceBuffer::allocate(c, settings.bytes));
    fill(bufs[bufs.size() - 2].as<std::uint8_t>(), std::uint8_t{0x5a});
    fill(bufs.back().as<std::uint8_t>(), std::uint8_t{0xa5});
  }
  std::vector<Stream> streams;
  for (const ContextRef& c : ctx) streams.push_back(Stream::create(c));
  drvshim_probe::StreamLatch probe_latch0(c0), probe_latch1(c1);
  drvshim_probe::StreamLatch* probe_latches[2] = {&probe_latch0, &probe_latch1};
  RawLatch raw_latch0(c0), raw_latch1(c1);
  RawLatch* raw_latches[2] = {&raw_latch0, &raw_latch1};
  auto a = [&](int d) -> DeviceBuffer& { return bufs[static_cast<std::size_t>(2 * d)]; };
  auto b = [&](int d) -> DeviceBuffer& { return bufs[static_cast<std::size_t>(2 * d + 1)]; };

  emit(
      "\n## B. P2P bandwidth: the probe's measurement against nvbandwidth's way with raw calls\n\n"
      "256 MiB copies, 4 warm-up + 16 timed between events, behind a latch; one sample of each per round, " +
      std::to_string(kRounds) +
      " rounds alternating; medians. Probe: copy_peer_async (cuMemcpyPeerAsync); raw: cuMemcpyAsync.\n\n"
      "| measurement | probe median | raw median | probe vs raw | goal (5 %) |\n|---|---|---|---|---|\n");
  for (const auto& [from, to] : {std::pair{0, 1}, std::pair{1, 0}}) {
    const drvshim_probe::Direction probe_fwd{a(to).as<std::byte>(), a(from).as<std::byte>(),
                                             streams[static_cast<std::size_t>(from)].ref(), probe_latches[from]};
    const drvshim_probe::Direction probe_rev{b(from).as<std::byte>(), b(to).as<std::byte>(),
                                             streams[static_cast<std::size_t>(to)].ref(), probe_latches[to]};
    RawDirection raw_fwd{&ctx[from],
                         a(to).address(),
                         a(from).address(),
                         settings.bytes,
                         streams[static_cast<std::size_t>(from)].ref(),
                         raw_latches[from],
                         Event::create(ctx[from]),
                         Event::create(ctx[from])};
    RawDirection raw_rev{&ctx[to],
                         b(from).address(),
                         b(to).address(),
                         settings.bytes,
                         streams[static_cast<std::size_t>(to)].ref(),
                         raw_latches[to],
                         Event::create(ctx[to]),
                         Event::create(ctx[to])};
    std::vector<double> pu, ru, pb, rb, pl, rl;
    (void)drvshim_probe::unidirectional_gbps(probe_fwd, settings);  // warm-up of both paths
    (void)raw_unidirectional(raw, raw_fwd, settings);
    for (int r = 0; r < kRounds; ++r) {
      auto probe_round = [&] {
        pu.push_back(drvshim_probe::unidirectional_gbps(probe_fwd, settings));
        const auto both = drvshim_probe::bidirectional_gbps(probe_fwd, probe_rev, settings);
        pb.push_back(both.forward + both.reverse);
        pl.push_back(drvshim_probe::latency_us(probe_fwd, settings));
      };
      auto raw_round = [&] {
        ru.push_back(raw_unidirectional(raw, raw_fwd, settings));
        const auto both = raw_bidirectional(raw, raw_fwd, raw_rev, settings);
        rb.push_back(both.first + both.second);
        rl.push_back(raw_latency_us(raw, raw_fwd, settings));
      };
      if (r % 2 == 0) {
        probe_round();
        raw_round();
      } else {
        raw_round();
        probe_round();
      }
    }
    char line[320];
    const double mpu = median(pu), mru = median(ru), mpb = median(pb), mrb = median(rb);
    std::snprintf(line, sizeof line, "| %d -> %d unidirectional | %.1f GB/s | %.1f GB/s | %+.2f %% | %s |\n", from, to,
                  mpu, mru, (mpu / mru - 1.0) * 100.0, goals.verdict(mpu / mru, 0.05).c_str());
    emit(line);
    std::snprintf(line, sizeof line, "| %d <-> %d bidirectional (total) | %.1f GB/s | %.1f GB/s | %+.2f %% | %s |\n",
                  from, to, mpb, mrb, (mpb / mrb - 1.0) * 100.0, goals.verdict(mpb / mrb, 0.05).c_str());
    emit(line);
    std::snprintf(line, sizeof line, "| %d -> %d latency, 4-byte copy | %.2f µs | %.2f µs | %+.2f %% | (no goal) |\n",
                  from, to, median(pl), median(rl), (median(pl) / median(rl) - 1.0) * 100.0);
    emit(line);
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char* out_path = argc > 1 ? argv[1] : nullptr;
  const std::string commit = argc > 2 ? argv[2] : "unknown";
  try {
    auto drv = Driver::load();
    drv.init();
    if (drv.device_count() < 2) {
      std::fprintf(stderr, "bench_peer: needs two devices; the driver reports %d\n", drv.device_count());
      return 2;
    }
    const Raw raw = resolve_raw(drv.loaded_path());
    auto p0 = drv.device(0).retain_primary_context();
    auto p1 = drv.device(1).retain_primary_context();
    const ContextRef c0 = p0.ref(), c1 = p1.ref();
    PeerAccess there = PeerAccess::enable(c0, c1);
    PeerAccess back = PeerAccess::enable(c1, c0);
    char date[32];
    const std::time_t now = std::time(nullptr);
    std::strftime(date, sizeof date, "%Y-%m-%d %H:%M UTC", std::gmtime(&now));
    emit("# bench_peer: " + std::string(date) + ", commit " + commit + "\n\n" + drv.device(0).name() + " x " +
         std::to_string(drv.device_count()) + ", driver " + std::to_string(drv.version()) + "; " +
         peer_link(drv.device(0), drv.device(1)).to_string() + "\n");
    auto src0 = DeviceBuffer::allocate(c0, 64 << 20);
    auto dst1 = DeviceBuffer::allocate(c1, 64 << 20);
    fill(src0.as<std::uint32_t>(), 0x01020304u);
    part_a(raw, c0, c1, src0, dst1);
    part_b(raw, c0, c1);
    emit("\nGoals: " + std::to_string(goals.met) + " met, " + std::to_string(goals.missed) + " missed.\n");
    if (out_path != nullptr) {
      if (std::FILE* f = std::fopen(out_path, "w")) {
        std::fputs(table.c_str(), f);
        std::fclose(f);
      }
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_peer: %s\n", e.what());
    return 1;
  }
  return 0;
}
