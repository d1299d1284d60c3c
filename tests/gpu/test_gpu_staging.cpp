// The staging engine on the real driver: the ordering cases of
// tests/unit/stream_order_cases.hpp (the fake runs the same table), with a
// kernel that spins for 20 ms on the legacy default stream before it fills a
// 64 MiB buffer. Before the fix, a synchronous staged copy right after such a
// kernel returned the buffer's old contents (every element stale, five rounds
// of five on the H200).
#include <cstdio>

#include "gpu_env.hpp"
#include "stream_order_cases.hpp"

using namespace drvshim;

namespace drvshim_gpu {
std::string kernel_dir();
}

namespace {

class GpuStaging : public drvshim_gpu::GpuContextTest {};

TEST_F(GpuStaging, SynchronousCopiesAreOrderedAfterTheLegacyStream) {
  auto module = Module::load_file(ctx(), drvshim_gpu::kernel_dir() + "kernels.cubin");
  const Kernel spin_then_fill = module.kernel("spin_then_fill");
  drvshim_test::BusyLegacyStream busy = [&](DeviceSpan<std::uint32_t> buffer,
                                            std::uint32_t value) -> std::function<void()> {
    LaunchConfig config;  // no stream: the legacy default stream
    config.grid = {264};
    config.block = {256};
    launch(spin_then_fill, config, static_cast<unsigned long long>(20'000'000), buffer.address(),
           static_cast<unsigned long long>(buffer.size()), static_cast<unsigned>(value));
    return [] {};
  };
  for (int round = 0; round < 3; ++round) {
    for (const auto& c : drvshim_test::run_stream_order_cases(ctx(), (64u << 20) / 4, busy)) {
      std::printf("[ order ] round %d  %-70s observed=%-12s expected=%s\n", round, c.name.c_str(), c.observed.c_str(),
                  c.expected.c_str());
      EXPECT_EQ(c.observed, c.expected) << c.name;
    }
  }
}

}  // namespace
