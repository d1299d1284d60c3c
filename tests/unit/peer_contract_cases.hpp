// SPDX-License-Identifier: Apache-2.0
#pragma once
// Contract cases for two devices: one table whose results must be the same on
// the fake driver's dual profile (tests/unit/test_peer.cpp, CI) and on
// the real two-GPU machine (tests/gpu/test_gpu_peer.cpp,
// MultiGpuContract.RealDriverAgreesWithTheFake). Where they disagree, the fake
// is fixed and the case noted in docs/contract-cases.md. Each case leaves the
// devices as it found them (every peer access it enabled is disabled again).
#include <drvshim/drvshim.hpp>

#include <cstdint>
#include <string>
#include <vector>

#include "contract_cases.hpp"

namespace drvshim_test {

inline std::vector<ContractResult> run_peer_contract_cases(const drvshim::Driver& drv) {
  using namespace drvshim;
  std::vector<ContractResult> out;
  auto add = [&](std::string name, std::string observed, std::string expected) {
    out.push_back(ContractResult{std::move(name), std::move(observed), std::move(expected)});
  };
  const Device d0 = drv.device(0);
  const Device d1 = drv.device(1);

  // The link, as the driver describes it (two H200s joined by NVLink; the fake's dual profile).
  add("link 0 -> 1: cuDeviceCanAccessPeer", d0.can_access_peer(d1) ? "yes" : "no", "yes");
  add("link 1 -> 0: cuDeviceCanAccessPeer", d1.can_access_peer(d0) ? "yes" : "no", "yes");
  add("a device is not its own peer (cuDeviceCanAccessPeer 0, 0)", d0.can_access_peer(d0) ? "yes" : "no", "no");
  const PeerLink link = peer_link(d0, d1);
  add("link 0 -> 1: access_supported", link.access_supported.to_string(), "1");
  add("link 0 -> 1: native_atomic_supported", link.native_atomic_supported.to_string(), "1");
  add("link 0 -> 1: cuda_array_access_supported", link.cuda_array_access_supported.to_string(), "1");
  add("link 0 -> 1: only_partial_native_atomic_supported", link.only_partial_native_atomic_supported.to_string(), "0");
  add("link 0 -> 1: performance_rank", link.performance_rank.to_string(), "0");
  add("link of a device with itself: refused by drvshim",
      code_of_failure([&] { (void)peer_attribute(d0, d0, PeerAttribute::access_supported); }), "drvshim-error");

  PrimaryContext p0 = d0.retain_primary_context();
  PrimaryContext p1 = d1.retain_primary_context();
  const ContextRef c0 = p0.ref();
  const ContextRef c1 = p1.ref();
  {
    PeerAccess there = PeerAccess::enable(c0, c1);
    add("enable 0 -> 1: a fresh enablement",
        there.adopted()  ? "adopted"
        : there.shared() ? "shared"
                         : "fresh",
        "fresh");
    PeerAccess again = PeerAccess::enable(c0, c1);
    add("enable 0 -> 1 twice: the driver says already enabled (drvshim shares it)",
        again.adopted()  ? "adopted"
        : again.shared() ? "shared"
                         : "fresh",
        "shared");
    PeerAccess back = PeerAccess::enable(c1, c0);
    add("enable 1 -> 0 while 0 -> 1 is on: access is one-way, this is another enablement",
        back.adopted()  ? "adopted"
        : back.shared() ? "shared"
                        : "fresh",
        "fresh");
    again.disable();
    there.disable();
    back.disable();
  }
  {
    // The last owner's disable really ended it: the driver enables it afresh.
    PeerAccess after = PeerAccess::enable(c0, c1);
    add("enable 0 -> 1 after the last owner disabled it", after.shared() || after.adopted() ? "left on" : "fresh",
        "fresh");
  }
  {
    Context other = d1.create_context();
    add("enable 0 -> a non-primary context of device 1",
        code_of_failure([&] { PeerAccess a = PeerAccess::enable(c0, other.ref()); }), "ok");
    add("enable between two contexts of device 0: refused by drvshim", code_of_failure([&] {
          Context mine = d0.create_context();
          PeerAccess a = PeerAccess::enable(c0, mine.ref());
        }),
        "drvshim-error");
  }

  // Copies between the devices, with and without peer access.
  constexpr std::size_t n = 1 << 16;
  std::vector<std::uint32_t> values(n);
  for (std::size_t i = 0; i < n; ++i) values[i] = static_cast<std::uint32_t>(i * 2654435761u);
  auto a = DeviceBuffer::allocate(c0, n * 4);
  auto b = DeviceBuffer::allocate(c1, n * 4);
  copy(a.as<std::uint32_t>(), std::span<const std::uint32_t>(values));
  std::vector<std::uint32_t> back(n);
  auto same = [&](const DeviceBuffer& buf) {
    std::fill(back.begin(), back.end(), 0u);
    copy(std::span<std::uint32_t>(back), DeviceSpan<const std::uint32_t>(buf.as<std::uint32_t>()));
    return back == values ? "same" : "different";
  };
  fill(b.as<std::uint32_t>(), 0u);
  add("copy_peer (cuMemcpyPeer) without peer access",
      code_of_failure([&] { copy_peer(b.as<std::uint32_t>(), a.as<std::uint32_t>()); }), "ok");
  add("copy_peer: data arrives", same(b), "same");
  fill(b.as<std::uint32_t>(), 0u);
  add("unified-address copy (cuMemcpyDtoD across devices) without peer access",
      code_of_failure([&] { copy(b.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(a.as<std::uint32_t>())); }),
      "ok");
  add("unified-address copy: data arrives", same(b), "same");
  {
    PeerAccess there = PeerAccess::enable(c1, c0);
    auto s1 = Stream::create(c1);
    fill(b.as<std::uint32_t>(), 0u);
    add("copy_peer_async on a stream of the destination, with peer access", code_of_failure([&] {
          copy_peer_async(s1.ref(), b.as<std::uint32_t>(), a.as<std::uint32_t>());
          s1.ref().synchronize();
        }),
        "ok");
    add("copy_peer_async: data arrives", same(b), "same");
    auto s0 = Stream::create(c0);
    fill(b.as<std::uint32_t>(), 0u);
    add("unified-address copy_async on a stream of the source", code_of_failure([&] {
          copy_async(s0.ref(), b.as<std::uint32_t>(), DeviceSpan<const std::uint32_t>(a.as<std::uint32_t>()));
          s0.ref().synchronize();
        }),
        "ok");
    add("unified-address copy_async: data arrives", same(b), "same");
  }

  // Events across devices.
  {
    auto s0 = Stream::create(c0);
    auto s1 = Stream::create(c1);
    auto e0 = Event::create(c0);
    add("cuEventRecord of device 0's event on device 0's stream", code_of_failure([&] { e0.ref().record(s0.ref()); }),
        "ok");
    add("a stream of device 1 waits for device 0's event (cuStreamWaitEvent)", code_of_failure([&] {
          s1.ref().wait(e0.ref());
          s1.ref().synchronize();
        }),
        "ok");
    // drvshim refuses before the driver (EventRef::record checks the contexts; the
    // driver would answer CUDA_ERROR_INVALID_HANDLE, as cuda.h documents).
    add("cuEventRecord of device 0's event on device 1's stream", code_of_failure([&] { e0.ref().record(s1.ref()); }),
        "drvshim-error");
    s0.ref().synchronize();
  }
  return out;
}

}  // namespace drvshim_test
