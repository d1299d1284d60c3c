// SPDX-License-Identifier: Apache-2.0
// Kernels: attributes, occupancy, and the parameter layout read at lookup.
#include <drvshim/module.hpp>

#include <algorithm>
#include <limits>
#include <utility>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "modules/module_internal.hpp"
#include "seam/core_of.hpp"

namespace drvshim {
namespace {

using detail::core_of;
using detail::fn;

// The most parameter bytes a kernel can take (CUDA 12.1+ on Volta and newer;
// 4 KiB before): a layout the driver reports beyond it is not believed, and
// the probe of parameters stops there whatever the driver answers.
constexpr std::size_t kMaxParamBytes = 32764;

// Logs why a kernel's launches go unchecked and keeps the reason for the
// warning at its first unchecked launch; the layout is then unknown.
std::nullopt_t unchecked(const std::string& name, std::string why, std::string& reason) {
  detail::logf(log::Level::debug, "kernel {}: parameter layout unknown ({}); its launches are not checked", name, why);
  reason = std::move(why);
  return std::nullopt;
}

// The parameter layout through cuFuncGetParamInfo, in the kernel's context
// (made current by the caller). Whatever the driver cannot tell, or tells
// implausibly, makes the layout unknown: the kernel stays usable, its launches
// unchecked. Only errors that make every call fail (sticky ones, a
// deinitialised driver) are raised.
std::optional<std::vector<ParamInfo>> read_param_layout(const detail::DriverCore& core, CUfunction f,
                                                        const std::string& name, std::string& reason,
                                                        bool& none_at_zero) {
  if (!core.has(detail::Api::k_cuFuncGetParamInfo)) {
    return unchecked(name,
                     fmt::format("driver {}.{} lacks cuFuncGetParamInfo (CUDA 12.4)", core.version / 1000,
                                 (core.version % 1000) / 10),
                     reason);
  }
  std::vector<ParamInfo> params;
  std::size_t end = 0;
  // Every parameter takes at least a byte: no kernel has more parameters than bytes.
  for (std::size_t i = 0; i <= kMaxParamBytes; ++i) {
    ParamInfo p;
    const CUresult r = DRVSHIM_CU(core, cuFuncGetParamInfo, f, i, &p.offset, &p.size);
    if (r == CUDA_ERROR_INVALID_VALUE) {
      if (i == 0) {
        none_at_zero = true;
        return unchecked(name,
                         "cuFuncGetParamInfo answers CUDA_ERROR_INVALID_VALUE for parameter 0: the kernel takes no "
                         "parameters, or the driver does not know its layout",
                         reason);
      }
      return params;  // past the last parameter
    }
    if (r != CUDA_SUCCESS) {
      if (is_sticky_error(static_cast<int>(r)) || r == CUDA_ERROR_DEINITIALIZED) {
        detail::raise(core, static_cast<int>(r), "cuFuncGetParamInfo", fmt::format("kernel {}, parameter {}", name, i));
      }
      return unchecked(name,
                       fmt::format("cuFuncGetParamInfo failed for parameter {} with {} ({})", i,
                                   result_name(static_cast<int>(r)), static_cast<int>(r)),
                       reason);
    }
    if (p.size == 0 || p.offset < end || p.size > kMaxParamBytes || p.offset > kMaxParamBytes - p.size) {
      return unchecked(name,
                       fmt::format("the driver reports parameter {} at offset {} with {} bytes, after {} bytes "
                                   "of earlier parameters, within at most {}",
                                   i, p.offset, p.size, end, kMaxParamBytes),
                       reason);
    }
    end = p.offset + p.size;
    params.push_back(p);
  }
  return unchecked(name, fmt::format("the driver reports more than {} parameters", kMaxParamBytes), reason);
}

}  // namespace

namespace detail {

int function_attribute(const Kernel& k, CUfunction_attribute attribute, const char* what) {
  const auto& core = core_of(k.context());
  ContextScope scope(core, k.context().address(), "Kernel attribute");
  int value = 0;
  DRVSHIM_TRY(core, cuFuncGetAttribute, fmt::format("kernel {}, attribute {}", k.name(), what), &value, attribute,
              fn(k));
  return value;
}

Kernel make_kernel(const ContextRef& context, std::uintptr_t function, const std::string& name,
                   std::shared_ptr<const void> code) {
  const auto& core = core_of(context);
  const auto f = reinterpret_cast<CUfunction>(function);
  auto state = std::make_shared<KernelState>();
  state->function = function;
  state->name = name;
  state->code = std::move(code);
  Kernel k(context, state);
  state->max_threads = function_attribute(k, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, "max threads per block");
  ContextScope scope(core, context.address(), "kernel parameter layout");
  state->params = read_param_layout(core, f, name, state->unchecked_reason, state->no_parameter_zero);
  return k;
}

}  // namespace detail

const std::string& Kernel::name() const noexcept { return state_->name; }
std::uintptr_t Kernel::native() const noexcept { return state_->function; }
int Kernel::registers() const { return detail::function_attribute(*this, CU_FUNC_ATTRIBUTE_NUM_REGS, "registers"); }
int Kernel::static_shared_bytes() const {
  return detail::function_attribute(*this, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, "static shared bytes");
}
int Kernel::max_threads_per_block() const { return state_->max_threads; }
int Kernel::local_bytes() const {
  return detail::function_attribute(*this, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, "local bytes");
}
const std::optional<std::vector<ParamInfo>>& Kernel::params() const { return state_->params; }

int Kernel::max_active_blocks_per_sm(unsigned block_threads, std::size_t dynamic_shared_bytes) const {
  const auto& core = core_of(context_);
  detail::ContextScope scope(core, context_.address(), "Kernel::max_active_blocks_per_sm");
  int blocks = 0;
  DRVSHIM_TRY(
      core, cuOccupancyMaxActiveBlocksPerMultiprocessor,
      fmt::format("kernel {}, {} threads, {} dynamic shared bytes", name(), block_threads, dynamic_shared_bytes),
      &blocks, fn(*this), static_cast<int>(block_threads), dynamic_shared_bytes);
  return blocks;
}

int Kernel::max_active_blocks_per_sm(unsigned block_threads, std::size_t dynamic_shared_bytes, unsigned flags) const {
  const auto& core = core_of(context_);
  core.require_function(detail::Api::k_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
                        "Kernel::max_active_blocks_per_sm with flags");
  detail::ContextScope scope(core, context_.address(), "Kernel::max_active_blocks_per_sm");
  int blocks = 0;
  DRVSHIM_TRY(core, cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags,
              fmt::format("kernel {}, {} threads, {} dynamic shared bytes, flags {}", name(), block_threads,
                          dynamic_shared_bytes, flags),
              &blocks, fn(*this), static_cast<int>(block_threads), dynamic_shared_bytes, flags);
  return blocks;
}

std::size_t Kernel::available_dynamic_shared_bytes(int blocks_per_sm, unsigned block_threads) const {
  const auto& core = core_of(context_);
  core.require_function(detail::Api::k_cuOccupancyAvailableDynamicSMemPerBlock,
                        "Kernel::available_dynamic_shared_bytes");
  detail::ContextScope scope(core, context_.address(), "Kernel::available_dynamic_shared_bytes");
  std::size_t bytes = 0;
  DRVSHIM_TRY(core, cuOccupancyAvailableDynamicSMemPerBlock,
              fmt::format("kernel {}, {} blocks of {} threads per SM", name(), blocks_per_sm, block_threads), &bytes,
              fn(*this), blocks_per_sm, static_cast<int>(block_threads));
  return bytes;
}

BlockSuggestion Kernel::suggested_block(std::size_t dynamic_shared_bytes, unsigned block_limit) const {
  const auto& core = core_of(context_);
  core.require_function(detail::Api::k_cuOccupancyMaxPotentialBlockSize, "Kernel::suggested_block");
  if (block_limit > static_cast<unsigned>(std::numeric_limits<int>::max())) {
    throw InvalidArgumentError("Kernel::suggested_block", fmt::format("a block limit of {} threads", block_limit),
                               "give 0 for the kernel's own limit, or any limit up to 2147483647 (the "
                               "driver caps it at the kernel's and the device's)");
  }
  detail::ContextScope scope(core, context_.address(), "Kernel::suggested_block");
  int min_grid = 0;
  int block = 0;
  DRVSHIM_TRY(
      core, cuOccupancyMaxPotentialBlockSize,
      fmt::format("kernel {}, {} dynamic shared bytes, block limit {}", name(), dynamic_shared_bytes, block_limit),
      &min_grid, &block, fn(*this), nullptr, dynamic_shared_bytes, static_cast<int>(block_limit));
  return BlockSuggestion{static_cast<unsigned>(std::max(block, 0)), static_cast<unsigned>(std::max(min_grid, 0))};
}

namespace {
// The public enum mirrors cuda.h.
static_assert(static_cast<int>(FunctionAttribute::max_dynamic_shared_size_bytes) ==
              CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
static_assert(static_cast<int>(FunctionAttribute::non_portable_cluster_size_allowed) ==
              CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED);
static_assert(static_cast<int>(FunctionAttribute::cluster_scheduling_policy_preference) + 1 == CU_FUNC_ATTRIBUTE_MAX);
static_assert(static_cast<int>(CachePreference::equal) == CU_FUNC_CACHE_PREFER_EQUAL);
}  // namespace

int Kernel::attribute(FunctionAttribute attribute) const {
  return detail::function_attribute(*this, static_cast<CUfunction_attribute>(attribute), "by number");
}

void Kernel::set_attribute(FunctionAttribute attribute, int value) const {
  const auto& core = core_of(context_);
  core.require_function(detail::Api::k_cuFuncSetAttribute, "Kernel::set_attribute");
  detail::ContextScope scope(core, context_.address(), "Kernel::set_attribute");
  DRVSHIM_TRY(core, cuFuncSetAttribute,
              fmt::format("kernel {}, attribute {}, value {}", name(), static_cast<int>(attribute), value), fn(*this),
              static_cast<CUfunction_attribute>(attribute), value);
}

void Kernel::set_cache_preference(CachePreference preference) const {
  const auto& core = core_of(context_);
  core.require_function(detail::Api::k_cuFuncSetCacheConfig, "Kernel::set_cache_preference");
  detail::ContextScope scope(core, context_.address(), "Kernel::set_cache_preference");
  DRVSHIM_TRY(core, cuFuncSetCacheConfig, fmt::format("kernel {}, preference {}", name(), static_cast<int>(preference)),
              fn(*this), static_cast<CUfunc_cache>(preference));
}

}  // namespace drvshim
