// SPDX-License-Identifier: Apache-2.0
// Launching kernels: the argument check of the typed launch and launch_raw.
#include <drvshim/module.hpp>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "modules/module_internal.hpp"
#include "seam/access.hpp"
#include "seam/core_of.hpp"
#include "support/view_checks.hpp"

namespace drvshim {
namespace {

using detail::core_of;
using detail::fn;

// A LaunchConfig as the driver's CUlaunchConfig: the cluster and cooperative
// attributes first, then the caller's, in storage of its own (a launch takes
// a handful; more than fit inline come from the heap). Not copyable: the
// config points into it.
class NativeConfig {
 public:
  NativeConfig(const Kernel& kernel, const LaunchConfig& config, CUstream stream, const char* api) {
    const std::size_t count = (config.cluster ? 1u : 0u) + (config.cooperative ? 1u : 0u) + config.attributes.size();
    CUlaunchAttribute* attrs = inline_;
    if (count > kInline) {
      heap_.resize(count);
      attrs = heap_.data();
    }
    std::size_t n = 0;
    if (config.cluster) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
      attrs[n].value.clusterDim.x = config.cluster->x;
      attrs[n].value.clusterDim.y = config.cluster->y;
      attrs[n].value.clusterDim.z = config.cluster->z;
      ++n;
    }
    if (config.cooperative) {
      attrs[n].id = CU_LAUNCH_ATTRIBUTE_COOPERATIVE;
      attrs[n].value.cooperative = 1;
      ++n;
    }
    for (const LaunchAttribute& a : config.attributes) {
      if (a.id == CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION || a.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE) {
        // The driver's answer to two of one attribute is not documented.
        throw InvalidArgumentError(
            api,
            fmt::format("kernel {}: launch attribute {} is LaunchConfig's own", kernel.name(),
                        a.id == CU_LAUNCH_ATTRIBUTE_COOPERATIVE ? "cooperative (2)" : "cluster dimension (4)"),
            "set LaunchConfig::cluster or LaunchConfig::cooperative instead");
      }
      // Copied as a number: the driver answers for ids no enumerator names,
      // and converting such a value to the enum is undefined behaviour.
      static_assert(sizeof attrs[n].id == sizeof a.id);
      std::memcpy(&attrs[n].id, &a.id, sizeof a.id);
      std::memcpy(&attrs[n].value, a.value.data(), sizeof attrs[n].value);
      ++n;
    }
    lc_.gridDimX = config.grid.x;
    lc_.gridDimY = config.grid.y;
    lc_.gridDimZ = config.grid.z;
    lc_.blockDimX = config.block.x;
    lc_.blockDimY = config.block.y;
    lc_.blockDimZ = config.block.z;
    lc_.sharedMemBytes = config.shared_bytes;
    lc_.hStream = stream;
    lc_.attrs = attrs;
    lc_.numAttrs = static_cast<unsigned>(n);
  }
  NativeConfig(const NativeConfig&) = delete;
  NativeConfig& operator=(const NativeConfig&) = delete;
  const CUlaunchConfig* get() const noexcept { return &lc_; }

 private:
  static constexpr std::size_t kInline = 8;
  CUlaunchAttribute inline_[kInline]{};
  std::vector<CUlaunchAttribute> heap_;
  CUlaunchConfig lc_{};
};

}  // namespace

static_assert(sizeof(LaunchAttribute) == sizeof(CUlaunchAttribute) &&
                  offsetof(LaunchAttribute, value) == offsetof(CUlaunchAttribute, value) &&
                  sizeof(LaunchAttribute::value) == sizeof(CUlaunchAttributeValue) &&
                  alignof(LaunchAttribute) == alignof(CUlaunchAttribute),
              "LaunchAttribute is laid out as the driver's CUlaunchAttribute");

LaunchConfig LaunchConfig::covering(std::size_t elements, unsigned block_threads, std::optional<StreamRef> stream) {
  if (elements == 0 || block_threads == 0) {
    throw InvalidArgumentError(
        "LaunchConfig::covering", fmt::format("{} elements in blocks of {} threads", elements, block_threads),
        elements == 0 ? "there is nothing to launch for 0 elements: skip the launch" : "give a block size such as 256");
  }
  constexpr std::uint64_t max_blocks = (std::uint64_t{1} << 31) - 1;
  const std::uint64_t blocks = elements / block_threads + (elements % block_threads != 0 ? 1 : 0);
  if (blocks > max_blocks) {
    throw InvalidArgumentError("LaunchConfig::covering",
                               fmt::format("{} elements in blocks of {} threads need {} blocks, more than the {} the "
                                           "driver allows in x",
                                           elements, block_threads, blocks, max_blocks),
                               "use larger blocks, a 2D grid, or a grid-stride loop over fewer blocks");
  }
  LaunchConfig config;
  config.grid = Dim3{static_cast<unsigned>(blocks), 1, 1};
  config.block = Dim3{block_threads, 1, 1};
  config.stream = std::move(stream);
  return config;
}

namespace {
BlockSuggestion suggestion_for(const char* api, const Kernel& kernel, unsigned shared_bytes) {
  const BlockSuggestion s = kernel.suggested_block(shared_bytes);
  if (s.block_threads == 0 || s.min_grid_blocks == 0) {
    throw InvalidArgumentError(
        api,
        fmt::format("the driver suggests no block size for kernel {} with {} bytes of dynamic shared memory per block",
                    kernel.name(), shared_bytes),
        "no block of the kernel can have that much: above 48 KiB the kernel needs its opt-in "
        "(Kernel::set_attribute(FunctionAttribute::max_dynamic_shared_size_bytes, bytes)), and no block may "
        "have more than a multiprocessor holds (Kernel::available_dynamic_shared_bytes)");
  }
  return s;
}
}  // namespace

LaunchConfig LaunchConfig::covering(const Kernel& kernel, std::size_t elements, unsigned shared_bytes,
                                    std::optional<StreamRef> stream) {
  if (elements == 0) {
    throw InvalidArgumentError("LaunchConfig::covering", fmt::format("0 elements for kernel {}", kernel.name()),
                               "there is nothing to launch for 0 elements: skip the launch");
  }
  const BlockSuggestion s = suggestion_for("LaunchConfig::covering", kernel, shared_bytes);
  LaunchConfig config = covering(elements, s.block_threads, std::move(stream));
  config.shared_bytes = shared_bytes;
  return config;
}

LaunchConfig LaunchConfig::grid_stride(const Kernel& kernel, std::size_t elements, unsigned shared_bytes,
                                       std::optional<StreamRef> stream) {
  if (elements == 0) {
    throw InvalidArgumentError("LaunchConfig::grid_stride", fmt::format("0 elements for kernel {}", kernel.name()),
                               "there is nothing to launch for 0 elements: skip the launch");
  }
  const BlockSuggestion s = suggestion_for("LaunchConfig::grid_stride", kernel, shared_bytes);
  const std::uint64_t needed = elements / s.block_threads + (elements % s.block_threads != 0 ? 1 : 0);
  LaunchConfig config;
  config.grid = Dim3{static_cast<unsigned>(std::min<std::uint64_t>(needed, s.min_grid_blocks)), 1, 1};
  config.block = Dim3{s.block_threads, 1, 1};
  config.shared_bytes = shared_bytes;
  config.stream = std::move(stream);
  return config;
}

LaunchAttribute LaunchAttribute::programmatic_stream_serialization(bool allowed) noexcept {
  LaunchAttribute a;
  a.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
  const int value = allowed ? 1 : 0;
  std::memcpy(a.value.data(), &value, sizeof value);
  return a;
}

LaunchAttribute LaunchAttribute::priority(int priority) noexcept {
  LaunchAttribute a;
  a.id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  std::memcpy(a.value.data(), &priority, sizeof priority);
  return a;
}

LaunchAttribute LaunchAttribute::raw(int id, std::span<const std::byte> value) {
  if (value.size() > sizeof(LaunchAttribute::value)) {
    throw InvalidArgumentError("LaunchAttribute::raw",
                               fmt::format("attribute {}: a value of {} bytes; at most 64 are accepted (the size of "
                                           "CUlaunchAttributeValue)",
                                           id, value.size()));
  }
  LaunchAttribute a;
  a.id = id;
  if (!value.empty()) std::memcpy(a.value.data(), value.data(), value.size());  // an empty span's data() may be null
  return a;
}

namespace detail {

void check_launch_args(const Kernel& kernel, std::span<const std::size_t> sizes, bool require_checked) {
  const auto& params = kernel.params();
  if (!params) {
    KernelState& state = *Access::state(kernel);
    // The driver's answer for a kernel without parameters: no arguments agree with it.
    if (state.no_parameter_zero && sizes.empty()) return;
    if (require_checked) {
      throw UnsupportedError("launch",
                             fmt::format("the {} argument(s) cannot be checked: the kernel's parameter layout is "
                                         "unknown ({})",
                                         sizes.size(), state.unchecked_reason),
                             fmt::format("kernel {}", kernel.name()),
                             state.unchecked_reason.find("lacks cuFuncGetParamInfo") != std::string::npos
                                 ? "a driver with cuFuncGetParamInfo (CUDA 12.4 or later) reports the layout; "
                                   "without LaunchConfig::require_checked the launch goes unchecked"
                                 : "without LaunchConfig::require_checked the launch goes unchecked");
    }
    // Silently unchecked, a wrong argument corrupts memory with nothing said: say it once per kernel.
    if (!state.unchecked_said.exchange(true)) {
      logf(log::Level::warn,
           "kernel {}: launched with {} argument(s) unchecked: its parameter layout is unknown ({}); "
           "LaunchConfig::require_checked refuses such launches",
           kernel.name(), sizes.size(), state.unchecked_reason);
    }
    return;
  }
  if (params->size() != sizes.size()) {
    throw InvalidArgumentError(
        "launch", fmt::format("kernel {} takes {} argument(s), {} given", kernel.name(), params->size(), sizes.size()));
  }
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    if ((*params)[i].size != sizes[i]) {
      throw InvalidArgumentError("launch",
                                 fmt::format("kernel {}: argument {} of {} has {} bytes, the kernel expects {} bytes",
                                             kernel.name(), i + 1, sizes.size(), sizes[i], (*params)[i].size),
                                 "pass the type the kernel declares (device buffers as their DevicePtr address)");
    }
  }
}

}  // namespace detail

namespace {

[[noreturn]] void throw_empty_dimension(const Kernel& kernel, const char* which, const char* axis, const Dim3& d) {
  throw InvalidArgumentError("launch",
                             fmt::format("kernel {}: the {}'s {} dimension is 0 ({} {}x{}x{})", kernel.name(), which,
                                         axis, which, d.x, d.y, d.z),
                             "every grid and block dimension must be at least 1 (Dim3's default)");
}

void check_dimensions(const Kernel& kernel, const char* which, const Dim3& d) {
  if (d.x == 0) throw_empty_dimension(kernel, which, "x", d);
  if (d.y == 0) throw_empty_dimension(kernel, which, "y", d);
  if (d.z == 0) throw_empty_dimension(kernel, which, "z", d);
}

}  // namespace

void launch_raw(const Kernel& kernel, const LaunchConfig& config, void** args) {
  const auto threads = config.block.count();
  if (threads == 0 || config.grid.count() == 0) [[unlikely]] {
    check_dimensions(kernel, "grid", config.grid);
    check_dimensions(kernel, "block", config.block);
  }
  if (threads > static_cast<std::uint64_t>(kernel.max_threads_per_block())) {
    throw InvalidArgumentError(
        "launch",
        fmt::format("kernel {}: a block of {} threads ({}x{}x{}) exceeds the kernel's limit of {}", kernel.name(),
                    threads, config.block.x, config.block.y, config.block.z, kernel.max_threads_per_block()),
        "use smaller blocks (the limit depends on the kernel's register use)");
  }
  if (config.stream) detail::check_stream_view(*config.stream, "launch");
  const ContextRef& ctx = kernel.context();
  const auto& core = core_of(ctx);
  if (config.stream && config.stream->context().address() != ctx.address()) [[unlikely]] {
    // A kernel belongs to its module's context (one device); the driver would
    // answer only CUDA_ERROR_INVALID_HANDLE.
    throw InvalidArgumentError(
        "launch",
        fmt::format("kernel {} belongs to context 0x{:x} on device {}; {} belongs to context 0x{:x} on device {}",
                    kernel.name(), ctx.address(), ctx.device().ordinal(), config.stream->name(),
                    config.stream->context().address(), config.stream->context().device().ordinal()),
        "launch on a stream of the kernel's context: load the module in each device's context (or take the kernel "
        "for that context from a Library: Library::kernel(context, name))");
  }
  // No StreamRef copy on the hot path: the handle is all the launch needs.
  const auto cu_stream = config.stream ? reinterpret_cast<CUstream>(config.stream->native()) : CU_STREAM_LEGACY;
  detail::ContextScope scope(core, ctx.address(), "launch");
  const auto objects = [&] {
    return fmt::format("kernel {}, grid {}x{}x{}, block {}x{}x{}, {} shared bytes, {}", kernel.name(), config.grid.x,
                       config.grid.y, config.grid.z, config.block.x, config.block.y, config.block.z,
                       config.shared_bytes,
                       config.stream ? config.stream->name() : StreamRef::legacy_default(ctx).name());
  };
  if (config.cluster || !config.attributes.empty()) {
    core.require_function(detail::Api::k_cuLaunchKernelEx,
                          config.cluster ? "launch with cluster dimensions" : "launch with launch attributes");
    const NativeConfig native(kernel, config, cu_stream, "launch");
    DRVSHIM_TRY(core, cuLaunchKernelEx, objects(), native.get(), fn(kernel), args, nullptr);
  } else if (config.cooperative) {
    core.require_function(detail::Api::k_cuLaunchCooperativeKernel, "cooperative launch");
    DRVSHIM_TRY(core, cuLaunchCooperativeKernel, objects(), fn(kernel), config.grid.x, config.grid.y, config.grid.z,
                config.block.x, config.block.y, config.block.z, config.shared_bytes, cu_stream, args);
  } else {
    DRVSHIM_TRY(core, cuLaunchKernel, objects(), fn(kernel), config.grid.x, config.grid.y, config.grid.z,
                config.block.x, config.block.y, config.block.z, config.shared_bytes, cu_stream, args, nullptr);
  }
  detail::after_submit(core, cu_stream, "launch", objects);
}

int max_active_clusters(const Kernel& kernel, const LaunchConfig& config) {
  const ContextRef& ctx = kernel.context();
  const auto& core = core_of(ctx);
  core.require_function(detail::Api::k_cuOccupancyMaxActiveClusters, "max_active_clusters");
  if (config.stream) detail::check_stream_view(*config.stream, "max_active_clusters");
  const auto cu_stream = config.stream ? reinterpret_cast<CUstream>(config.stream->native()) : CU_STREAM_LEGACY;
  detail::ContextScope scope(core, ctx.address(), "max_active_clusters");
  const NativeConfig native(kernel, config, cu_stream, "max_active_clusters");
  int clusters = 0;
  DRVSHIM_TRY(core, cuOccupancyMaxActiveClusters,
              fmt::format("kernel {}, block {}x{}x{}, {} shared bytes", kernel.name(), config.block.x, config.block.y,
                          config.block.z, config.shared_bytes),
              &clusters, fn(kernel), native.get());
  return clusters;
}

}  // namespace drvshim
