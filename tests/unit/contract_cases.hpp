// SPDX-License-Identifier: Apache-2.0
#pragma once
// Contract cases: one table of context situations whose results must be the
// same on the fake driver (tests/unit, CI) and on the real driver (tests/gpu,
// the GPU machine). Where they disagree, the fake is fixed and the case noted
// in docs/contract-cases.md. Each case leaves the device as it found it.
#include <drvshim/drvshim.hpp>

#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

namespace drvshim_test {

struct ContractResult {
  std::string name;
  std::string observed;
  std::string expected;
};

inline std::string code_of_failure(const std::function<void()>& f) {
  try {
    f();
    return "ok";
  } catch (const drvshim::Error& e) {
    return std::string(drvshim::ErrorKind::cuda == e.kind() ? e.code_name() : "drvshim-error");
  }
}

inline std::string state_text(const drvshim::PrimaryContextState& s) {
  return std::string(s.active ? "active" : "inactive") + "," + drvshim::to_string(s.flags);
}

// A kernel in PTX that no earlier run compiled: the comment makes the text
// unique, so the driver's JIT cache (~/.nv/ComputeCache) cannot answer for
// the JIT and the wall time is a real compile's.
inline std::string fresh_ptx() {
  const auto now = std::chrono::steady_clock::now().time_since_epoch().count();
  return "// drvshim contract case " + std::to_string(::getpid()) + "-" + std::to_string(now) +
         "\n.version 7.0\n.target sm_75\n.address_size 64\n"
         ".visible .entry drvshim_contract_scale(\n    .param .u64 p,\n    .param .f32 f\n)\n{\n"
         "    .reg .b64 %rd<3>;\n    .reg .f32 %f<3>;\n    ld.param.u64 %rd1, [p];\n"
         "    cvta.to.global.u64 %rd2, %rd1;\n    ld.param.f32 %f1, [f];\n    ld.global.f32 %f2, [%rd2];\n"
         "    mul.f32 %f2, %f2, %f1;\n    st.global.f32 [%rd2], %f2;\n    ret;\n}\n";
}

inline std::string positive_ms(float ms) { return ms > 0.0f ? "positive" : ms == 0.0f ? "zero" : "negative"; }

inline std::vector<ContractResult> run_contract_cases(const drvshim::Driver& drv) {
  using namespace drvshim;
  std::vector<ContractResult> out;
  const Device dev = drv.device(0);
  auto add = [&](std::string name, std::string observed, std::string expected) {
    out.push_back(ContractResult{std::move(name), std::move(observed), std::move(expected)});
  };

  add("fresh process: primary context inactive, flags sched_auto", state_text(dev.primary_context_state()),
      "inactive,sched_auto");
  add("fresh process: no current context", drv.current_context() == 0 ? "none" : "some", "none");
  {
    PrimaryContext p = dev.retain_primary_context();
    add("retain: active", state_text(dev.primary_context_state()), "active,sched_auto");
    add("retain: not made current", drv.current_context() == 0 ? "none" : "some", "none");
    {
      ScopedCurrentContext guard(p.ref());
      add("scoped guard: current is the primary context",
          drv.current_context() == p.ref().address() ? "primary" : "other", "primary");
    }
    add("after the guard: no current context", drv.current_context() == 0 ? "none" : "some", "none");
    {
      PrimaryContext second = dev.retain_primary_context();
      add("second retain: same context", second.ref().address() == p.ref().address() ? "same" : "different", "same");
      // drvshim's own first retain activated it: the second is not an adoption.
      add("second retain: not adopted (drvshim activated it)", second.adopted() ? "adopted" : "activated", "activated");
    }
    add("one of two retains released: still active", state_text(dev.primary_context_state()), "active,sched_auto");
    add("set other flags while active: refused",
        code_of_failure([&] { dev.set_primary_context_flags(ContextFlags::sched_spin); }), "drvshim-error");
    const MemoryInfo info = p.ref().memory_info();
    add("memory_info total equals cuDeviceTotalMem", info.total == dev.total_memory() ? "equal" : "different", "equal");
    add("memory_info free within total", info.free > 0 && info.free <= info.total ? "yes" : "no", "yes");
  }
  add("all retains released: inactive", state_text(dev.primary_context_state()), "inactive,sched_auto");
  {
    dev.set_primary_context_flags(ContextFlags::sched_blocking_sync);
    add("flags set before activation", state_text(dev.primary_context_state()), "inactive,sched_blocking_sync");
    {
      PrimaryContext p = dev.retain_primary_context();
      const auto flags = static_cast<unsigned>(p.ref().flags());
      add("activated context has the blocking-sync bit", (flags & 0x04u) != 0 ? "yes" : "no", "yes");
    }
    // The real driver (580.159.04) drops the flags when the last release deactivates the context.
    add("flags reset by deactivation", state_text(dev.primary_context_state()), "inactive,sched_auto");
    dev.set_primary_context_flags(ContextFlags::sched_auto);
    add("flags reset", state_text(dev.primary_context_state()), "inactive,sched_auto");
  }
  {
    // CU_JIT_WALL_TIME is written into the option's value slot (a float) by
    // the module loader and by the linker at cuLinkComplete.
    PrimaryContext p = dev.retain_primary_context();
    const std::string ptx = fresh_ptx();
    const auto image = std::as_bytes(std::span<const char>(ptx.data(), ptx.size()));
    add("PTX module load: JIT wall time reported", positive_ms(Module::load(p.ref(), image).jit_log().wall_ms),
        "positive");
    const std::string ptx2 = fresh_ptx();
    add("link_ptx: JIT wall time reported",
        positive_ms(link_ptx(p.ref(), std::as_bytes(std::span<const char>(ptx2.data(), ptx2.size())), "contract.ptx")
                        .log.wall_ms),
        "positive");
  }
  {
    // Launch attributes go to cuLaunchKernelEx as given: the driver knows
    // programmatic dependent launch and priorities, and refuses a number it
    // does not know.
    PrimaryContext p = dev.retain_primary_context();
    const std::string ptx = fresh_ptx();
    const Module m = Module::load(p.ref(), std::as_bytes(std::span<const char>(ptx.data(), ptx.size())));
    const Kernel k = m.kernel("drvshim_contract_scale");
    DeviceBuffer buf = DeviceBuffer::allocate(p.ref(), 4);
    Stream s = Stream::create(p.ref());
    const auto launch_with = [&](LaunchAttribute a) {
      return code_of_failure([&] {
        LaunchConfig config{{1}, {1}, 0, s.ref(), {}};
        config.attributes = std::span<const LaunchAttribute>(&a, 1);
        launch(k, config, buf.address(), 2.0f);
        s.ref().synchronize();
      });
    };
    add("launch attribute: programmatic stream serialization",
        launch_with(LaunchAttribute::programmatic_stream_serialization()), "ok");
    add("launch attribute: priority", launch_with(LaunchAttribute::priority(0)), "ok");
    add("launch attribute: ignore", launch_with(LaunchAttribute{}), "ok");
    add("launch attribute: an unknown number", launch_with(LaunchAttribute::raw(99, {})), "CUDA_ERROR_INVALID_VALUE");
    const auto cooperative_cluster = [&](unsigned grid) {
      return code_of_failure([&] {
        launch(k, LaunchConfig{{grid}, {1}, 0, s.ref(), Dim3{1, 1, 1}, true}, buf.address(), 2.0f);
        s.ref().synchronize();
      });
    };
    add("cooperative launch with a cluster: fits", cooperative_cluster(1), "ok");
    add("cooperative launch with a cluster: a grid of 2^20 blocks", cooperative_cluster(1u << 20),
        "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE");
    // The block-size suggestion is the occupancy query's best block (the
    // largest of equals), its grid fills every SM, and a cooperative launch of
    // that grid fits where one block more does not.
    const BlockSuggestion suggestion = k.suggested_block();
    bool most_resident = suggestion.block_threads % 32 == 0 && suggestion.block_threads > 0;
    const int resident = most_resident ? k.max_active_blocks_per_sm(suggestion.block_threads) : 0;
    for (unsigned b = 32; most_resident && b <= static_cast<unsigned>(k.max_threads_per_block()); b += 32) {
      const int threads = k.max_active_blocks_per_sm(b) * static_cast<int>(b);
      const int best = resident * static_cast<int>(suggestion.block_threads);
      if (threads > best || (b > suggestion.block_threads && threads == best)) most_resident = false;
    }
    add("suggested block: the largest with the most resident threads", most_resident ? "yes" : "no", "yes");
    add("suggested block: its grid is resident blocks x SMs",
        suggestion.min_grid_blocks == static_cast<unsigned>(resident * dev.sm_count()) ? "yes" : "no", "yes");
    // 32 resident blocks of 64 threads (2048) beat 21 of 96 (2016).
    add("suggested block: a limit of 100 threads gives 64", std::to_string(k.suggested_block(0, 100).block_threads),
        "64");
    std::string too_much_shared;
    const std::string failure = code_of_failure(
        [&] { too_much_shared = std::to_string(k.suggested_block(std::size_t{1} << 30).block_threads); });
    add("suggested block: 1 GiB of dynamic shared memory", failure == "ok" ? too_much_shared : failure, "0");
    const auto grid_stride_cooperative = [&](unsigned extra) {
      return code_of_failure([&] {
        LaunchConfig config = LaunchConfig::grid_stride(k, std::size_t{1} << 40, 0, s.ref());
        config.grid.x += extra;
        config.cooperative = true;
        launch(k, config, buf.address(), 1.0f);
        s.ref().synchronize();
      });
    };
    add("grid_stride launch, cooperative: fits", grid_stride_cooperative(0), "ok");
    add("grid_stride launch and one block more, cooperative", grid_stride_cooperative(1),
        "CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE");
  }
  {
    // Stream capture: work on a capturing stream is recorded, and the graph
    // replays it; what a capture refuses, and what that does to it.
    PrimaryContext p = dev.retain_primary_context();
    const std::string ptx = fresh_ptx();
    const Module m = Module::load(p.ref(), std::as_bytes(std::span<const char>(ptx.data(), ptx.size())));
    const Kernel k = m.kernel("drvshim_contract_scale");
    DeviceBuffer buf = DeviceBuffer::allocate(p.ref(), 4);
    PinnedBuffer host = PinnedBuffer::allocate(p.ref(), 4);
    const auto value = host.as<float>();
    value[0] = 1.0f;
    copy(buf.as<float>(), std::span<const float>(value));
    Stream s = Stream::create(p.ref(), StreamFlags::blocking);
    const auto status = [&](const StreamRef& stream) {
      std::string text;
      const std::string failure = code_of_failure([&] { text = to_string(capture_status(stream)); });
      return failure == "ok" ? text : failure;
    };
    add("capture: a stream before", status(s.ref()), "none");
    add("capture: begin, global mode", code_of_failure([&] { begin_capture(s.ref(), CaptureMode::global); }), "ok");
    add("capture: a stream while it captures", status(s.ref()), "active");
    add("capture: the legacy stream while a blocking stream captures", status(StreamRef::legacy_default(p.ref())),
        "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT");
    add("capture: a kernel launch", code_of_failure([&] {
          launch(k, LaunchConfig{{1}, {1}, 0, s.ref()}, buf.address(), 2.0f);
        }),
        "ok");
    add("capture: a copy to pinned memory", code_of_failure([&] { copy_async(s.ref(), value, buf.as<float>()); }),
        "ok");
    add("capture: an allocation in relaxed mode", code_of_failure([&] {
          ScopedCaptureMode relaxed(drv, CaptureMode::relaxed);
          (void)DeviceBuffer::allocate(p.ref(), 64);
        }),
        "ok");
    add("capture: the capture after a relaxed allocation", status(s.ref()), "active");
    const auto info_of = [&] {
      std::string text;
      const std::string failure = code_of_failure([&] {
        const CaptureInfo info = capture_info(s.ref());
        text = std::string(to_string(info.status)) + (info.id != 0 ? ",id" : ",no id") +
               (info.graph != 0 ? ",graph" : ",no graph");
      });
      return failure == "ok" ? text : failure;
    };
    add("capture: the info while capturing", info_of(), "active,id,graph");
    std::uintptr_t last_dependency = 0;
    add("capture: the node the next operation depends on", code_of_failure([&] {
          const CaptureInfo info = capture_info(s.ref());
          if (info.dependencies == 1 && info.native_dependencies != nullptr) {
            // The array holds CUgraphNode values: pointers, read as their bytes.
            std::memcpy(&last_dependency, info.native_dependencies, sizeof last_dependency);
          }
        }),
        "ok");
    std::optional<Graph> graph;
    add("capture: end", code_of_failure([&] { graph.emplace(end_capture(s.ref())); }), "ok");
    add("capture: the launch did not run while captured", value[0] == 1.0f ? "not run" : "ran", "not run");
    add("graph: nodes of a kernel and a copy", graph ? std::to_string(graph->node_count()) : "no graph", "2");
    std::string last_node = "no graph";
    if (graph) {
      (void)code_of_failure([&] {
        const std::vector<std::uintptr_t> nodes = graph->nodes();
        last_node = !nodes.empty() && nodes.back() == last_dependency ? "the capture's dependency" : "another node";
      });
    }
    add("graph: its last node", last_node, "the capture's dependency");
    add("graph: three launches of an instantiated graph", code_of_failure([&] {
          const GraphExec exec = graph->instantiate();
          for (int i = 0; i < 3; ++i) exec.launch(s.ref());
          s.ref().synchronize();
        }),
        "ok");
    add("graph: the data after three launches", std::to_string(static_cast<int>(value[0])), "8");
    // A call the capture mode forbids is refused, and ends what the capture can give.
    begin_capture(s.ref(), CaptureMode::global);
    add("capture: an allocation on the capturing thread, global mode",
        code_of_failure([&] { (void)DeviceBuffer::allocate(p.ref(), 64); }), "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
    add("capture: the capture after that refusal", status(s.ref()), "invalidated");
    add("capture: the info of an invalidated capture", info_of(), "invalidated,no id,no graph");
    add("capture: end it", code_of_failure([&] { (void)end_capture(s.ref()); }),
        "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
    begin_capture(s.ref());
    add("capture: synchronize a capturing stream", code_of_failure([&] { s.ref().synchronize(); }),
        "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED");
    add("capture: the capture after a synchronize", status(s.ref()), "invalidated");
    add("capture: end an invalidated capture", code_of_failure([&] { (void)end_capture(s.ref()); }),
        "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED");
    add("capture: a stream after the invalidated capture ended", status(s.ref()), "none");
    begin_capture(s.ref());
    std::vector<float> pageable(1, 0.0f);
    add("capture: a copy to pageable memory",
        code_of_failure([&] { copy_async(s.ref(), std::span<float>(pageable), buf.as<float>()); }), "ok");
    add("capture: the capture after a pageable copy", status(s.ref()), "active");
    std::string pageable_nodes;
    add("capture: end after a pageable copy",
        code_of_failure([&] { pageable_nodes = std::to_string(end_capture(s.ref()).node_count()); }), "ok");
    add("graph: nodes of a pageable copy", pageable_nodes, "1");
    begin_capture(s.ref());
    add("capture: a launch on the legacy stream while a blocking stream captures", code_of_failure([&] {
          launch(k, LaunchConfig{{1}, {1}, 0, StreamRef::legacy_default(p.ref())}, buf.address(), 1.0f);
        }),
        "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT");
    add("capture: the capture after that launch", status(s.ref()), "invalidated");
    (void)code_of_failure([&] { (void)end_capture(s.ref()); });
    add("capture: end a stream that does not capture", code_of_failure([&] { (void)end_capture(s.ref()); }),
        "CUDA_ERROR_ILLEGAL_STATE");
    s.ref().synchronize();
    std::string ids = "failed";
    (void)code_of_failure([&] {
      const Stream other = Stream::create(p.ref());
      const std::uint64_t a = s.ref().id(), b = other.id(), legacy = StreamRef::legacy_default(p.ref()).id();
      ids = a != b && a == s.ref().id() && legacy != a && legacy != b ? "distinct, stable" : "not distinct";
    });
    add("stream ids: two streams and the legacy stream", ids, "distinct, stable");
  }
  {
    // An allocation's addresses as the current context sees them (what
    // cudaPointerGetAttributes reports) and as its own context does.
    PrimaryContext p = dev.retain_primary_context();
    DeviceBuffer buf = DeviceBuffer::allocate(p.ref(), 256);
    PinnedBuffer pinned = PinnedBuffer::allocate(p.ref(), 256);
    const auto seen = [&](DevicePtr address, AddressesIn where) {
      std::string text;
      try {
        const PointerInfo info = inspect_pointer(drv, address, where);
        text = std::string(to_string(info.kind)) + (info.device_address == 0 ? ",dev=0" : ",dev=set") +
               (info.host_address == nullptr ? ",host=null" : ",host=set");
      } catch (const drvshim::Error& e) {
        text = drvshim::ErrorKind::cuda == e.kind() ? e.code_name() : "drvshim-error";
      }
      return text;
    };
    const auto pinned_address = reinterpret_cast<DevicePtr>(pinned.data());
    add("pointer: device memory, no current context", seen(buf.address(), AddressesIn::current_context),
        "device memory,dev=0,host=null");
    add("pointer: device memory, own context", seen(buf.address(), AddressesIn::own_context),
        "device memory,dev=set,host=null");
    add("pointer: pinned memory, no current context", seen(pinned_address, AddressesIn::current_context),
        "page-locked host memory,dev=0,host=set");
    {
      ScopedCurrentContext scope(p.ref());
      add("pointer: device memory, its context current", seen(buf.address(), AddressesIn::current_context),
          "device memory,dev=set,host=null");
      add("pointer: pinned memory, its context current", seen(pinned_address, AddressesIn::current_context),
          "page-locked host memory,dev=set,host=set");
    }
    {
      Context other = dev.create_context();
      {
        ScopedCurrentContext scope(other.ref());
        add("pointer: device memory, another context of its device current",
            seen(buf.address(), AddressesIn::current_context), "device memory,dev=set,host=null");
      }
      other.destroy();
    }
    add("sticky_error: a healthy context", std::to_string(p.ref().sticky_error()), "0");
  }
  {
    Context c = dev.create_context();
    add("create_context: not left current", drv.current_context() == 0 ? "none" : "some", "none");
    add("create_context: primary unaffected", state_text(dev.primary_context_state()), "inactive,sched_auto");
    add("non-primary memory_info works", code_of_failure([&] { (void)c.ref().memory_info(); }), "ok");
    add("destroy", code_of_failure([&] { c.destroy(); }), "ok");
  }
  {
    // A stream of one context waits for an event of another (the pinned
    // pool relays releases after other contexts' streams so): the recording
    // context is destroyed with its work maybe still queued and the event
    // already destroyed; the wait still ends.
    PrimaryContext primary = dev.retain_primary_context();
    Stream waiter = Stream::create(primary.ref());
    Event mine = Event::create(primary.ref(), EventFlags::disable_timing);
    add("a wait across contexts: the recording context destroyed", code_of_failure([&] {
          Context other = dev.create_context();
          {
            DeviceBuffer buf = DeviceBuffer::allocate(other.ref(), 64 << 20);
            Stream s = Stream::create(other.ref());
            for (int i = 0; i < 4; ++i) fill_async(s.ref(), buf.as<std::uint32_t>(), std::uint32_t(i));
            Event theirs = Event::create(other.ref(), EventFlags::disable_timing);
            theirs.ref().record(s.ref());
            waiter.ref().wait(theirs.ref());
            mine.ref().record(waiter.ref());
            (void)buf.detach();  // freed with its context
          }
          other.destroy();
          mine.ref().synchronize();
          waiter.ref().synchronize();
        }),
        "ok");
  }
  {
    // cuMemcpyPeerAsync between two contexts of one device, queued on a
    // stream of a third context: the driver names both contexts and takes
    // any stream (copy_peer_async allows it since).
    PrimaryContext primary = dev.retain_primary_context();
    Context other = dev.create_context();
    Context third = dev.create_context();
    std::string data = "not run";
    const std::string result = code_of_failure([&] {
      DeviceBuffer src = DeviceBuffer::allocate(primary.ref(), 4096);
      DeviceBuffer dst = DeviceBuffer::allocate(other.ref(), 4096);
      fill(src.as<std::uint32_t>(), 0x5a5a5a5au);
      fill(dst.as<std::uint32_t>(), 0u);
      // A memset returns before it is done, and the third context's stream
      // is not ordered after the other contexts' work: wait for both.
      primary.ref().synchronize();
      other.ref().synchronize();
      Stream s = Stream::create(third.ref());
      copy_peer_async(s.ref(), dst.as<std::uint32_t>(), src.as<std::uint32_t>());
      s.ref().synchronize();
      std::vector<std::uint32_t> back(1024);
      copy(std::span<std::uint32_t>(back), DeviceSpan<const std::uint32_t>(dst.as<std::uint32_t>()));
      data = back.front() == 0x5a5a5a5au && back.back() == 0x5a5a5a5au ? "copied" : "wrong";
    });
    add("peer copy between two contexts on a stream of a third", result + "," + data, "ok,copied");
    third.destroy();
    other.destroy();
  }
  return out;
}

}  // namespace drvshim_test
