// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file runtime_compat.hpp
/// The CUDA Runtime API's policy, reproduced on top of drvshim and made
/// visible: libdrvshim_cudart.so (link target drvshim::cudart) exports the
/// Runtime API itself under cudart's C names and ABI, for programs built with
/// `nvcc -cudart none` (or, as a drop-in libcudart.so.13, for programs built
/// with `-cudart shared`). Build with `nvcc -cudart none` and link
/// libdrvshim_cudart.so (CMake: drvshim_use_cudart(target), from the drvshim
/// package), or run an unchanged `-cudart shared` program with
/// LD_LIBRARY_PATH=<prefix>/lib/drvshim/cudart. Its functions are declared by
/// the toolkit's cuda_runtime_api.h.
///
/// Under the lazy policy (the Runtime's) each implicit step — loading
/// libcuda, cuInit, retaining a primary context, making it current, loading a
/// registered fatbin — happens at the first call that needs it; under the
/// eager policy all of them happen together at the first call (or at
/// setup()); under the background policy the eager set-up (load, cuInit,
/// device 0's primary context, the fatbins registered by then) starts on a
/// helper thread when libdrvshim_cudart.so loads (drvshim::BackgroundInit),
/// and the first call that needs a step finds it done or waits for what is
/// left, visibly ("background-wait" in the trace); a step's error is returned
/// by that first call. Every implicit step is logged at info level naming the
/// call that triggered it, and marked in the trace ("rt-implicit").
///
/// This header holds the controls a C++ program or test uses next to the
/// Runtime API; they are exported by libdrvshim_cudart.so.
#include <drvshim/export.hpp>

#include <string>

namespace drvshim::rt {

/// The Runtime's lazy policy, everything set up at once at the first call, or
/// that set-up started in the background when the library loads.
enum class Policy { lazy, eager, background };
/// Sets the policy for the calls that follow (default: DRVSHIM_RT_POLICY=lazy|eager|background,
/// else lazy). Setting background starts the background set-up now, unless the
/// runtime is set up already or a background set-up runs.
DRVSHIM_API void set_policy(Policy policy) noexcept;
DRVSHIM_API Policy policy() noexcept;
/// The eager set-up, now: load, cuInit, retain and make current the calling
/// thread's device's primary context, load the registered fatbins (a fatbin
/// that cannot be loaded is reported at the launch that needs it). Returns the
/// cudaError_t number (0 on success).
DRVSHIM_API int setup();
/// Releases everything the runtime holds (allocations, streams, events,
/// loaded fatbins, primary-context retains, the driver handle); the next call
/// starts over. Registrations and the kernel handles nvcc's generated code
/// keeps stay valid. For tests and orderly shutdown; no other runtime call may
/// run concurrently.
DRVSHIM_API void shutdown() noexcept;

/// The detail of the calling thread's last error: the call, and what drvshim
/// reported (the driver function, its result, the objects involved).
DRVSHIM_API std::string last_error_detail();

}  // namespace drvshim::rt
