// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file nvrtc_warmup.hpp
/// NVRTC warmed up on a BackgroundInit's helper thread (background.hpp).
#include <drvshim/background.hpp>
#include <drvshim/export.hpp>
#include <drvshim/nvrtc.hpp>

#include <string>

namespace drvshim {

/// A BackgroundTask named "nvrtc-warmup": loads NVRTC (Nvrtc::load with
/// `options`) and compiles one empty kernel to CUBIN for the oldest
/// architecture it supports, so the program's own first Nvrtc::load and
/// compile find NVRTC and its builtins mapped and its one-time set-up done.
/// Nothing waits for it implicitly (no call needs it); BackgroundInit::wait
/// ("task nvrtc-warmup") does. Its errors (NvrtcNotFoundError,
/// NvrtcCompileError) are the step's.
DRVSHIM_API BackgroundTask nvrtc_warmup(NvrtcLoadOptions options = {});

}  // namespace drvshim
