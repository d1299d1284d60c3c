// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file link.hpp
/// Linking: the driver's JIT turns PTX into a CUBIN that can be kept and
/// loaded later without a JIT.
#include <drvshim/context.hpp>
#include <drvshim/export.hpp>
#include <drvshim/module_image.hpp>

#include <cstddef>
#include <span>
#include <string>
#include <vector>

namespace drvshim {

/// SASS the driver produced from PTX (link_ptx).
struct LinkedImage {
  std::vector<std::byte> cubin;  ///< an ELF CUBIN for the context's device
  JitLog log;                    ///< the driver JIT's info log and wall time
};

/// Has the driver's JIT turn `ptx` into a CUBIN for `context`'s device
/// (cuLinkCreate, cuLinkAddData(CU_JIT_INPUT_PTX), cuLinkComplete, with the
/// context made current; cuLinkDestroy on every path), so the result can be
/// kept and loaded later without a JIT. `name` appears in diagnostics. Throws
/// InvalidArgumentError when `ptx` is not PTX text, CudaError carrying the
/// JIT's error log when the driver rejects it.
[[nodiscard]] DRVSHIM_API LinkedImage link_ptx(const ContextRef& context, std::span<const std::byte> ptx,
                                               const std::string& name);

}  // namespace drvshim
