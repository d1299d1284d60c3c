// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file module_image.hpp
/// Module images: recognising CUBIN, PTX and fatbin by their contents, and the
/// JIT log every load, library load and link captures.
#include <drvshim/export.hpp>

#include <cstddef>
#include <span>
#include <string>

namespace drvshim {

/// What a module image is.
enum class ModuleFormat { cubin, ptx, fatbin };
DRVSHIM_API const char* to_string(ModuleFormat format) noexcept;

/// Recognises an image by its contents: ELF (CUBIN), the fatbin magic, or PTX
/// text. Throws InvalidArgumentError for anything else (and for an empty image).
DRVSHIM_API ModuleFormat detect_module_format(std::span<const std::byte> image);

/// The JIT's output for a module load: its info and error logs and wall time
/// (CU_JIT_WALL_TIME; 0 when nothing was JIT-compiled, e.g. a CUBIN). The log
/// buffers are sized for the image (room per kernel of PTX); a log that still
/// filled its buffer ends with a note that the rest was cut.
struct JitLog {
  std::string info;
  std::string error;
  float wall_ms = 0.0f;
};

}  // namespace drvshim
