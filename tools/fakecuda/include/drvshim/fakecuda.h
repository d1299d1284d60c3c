// SPDX-License-Identifier: Apache-2.0
/* libdrvshim_fakecuda.so: a fake CUDA driver on host memory, for testing host
 * code that uses CUDA (through drvshim or directly) on a machine without a
 * GPU, and this header, its control API.
 *
 * Using it:
 *   - With drvshim: DRVSHIM_LIBCUDA=<prefix>/lib/libdrvshim_fakecuda.so makes
 *     drvshim's loader load the fake instead of libcuda.so.1.
 *   - With -lcuda: link libdrvshim_fakecuda.so instead (CMake: drvshim::fakecuda).
 *     It exports every name the toolkit's cuda.h declares to applications
 *     (the names cuda.h maps calls to, such as cuMemAlloc_v2), plus
 *     cuGetProcAddress and cuGetProcAddress_v2. A function the fake does not model returns
 *     CUDA_ERROR_NOT_SUPPORTED and says so once on stderr. Per-thread-stream
 *     variants (_ptsz/_ptds) are not exported: build with the legacy default stream.
 *   - To call the control API below, link libdrvshim_fakecuda.so too.
 *
 * What it models: the driver functions drvshim uses (about 130): devices, contexts,
 * streams with queued work, events, device, pinned, mapped, registered,
 * managed and stream-ordered memory, copies, modules and libraries from PTX,
 * launches (running a CPU version of each kernel, registered by entry name:
 * drvshim_fake_register_kernel; drvshim's examples' kernels vadd,
 * vadd_stride3, stencil3, scale and saxpy<float> are built in, for a kernel of
 * that name and parameter count without a registered version), peers. A launch of a kernel with no CPU
 * version fails with CUDA_ERROR_NOT_SUPPORTED and says so once per kernel on
 * stderr: nothing ran. Images it cannot read (a CUBIN, a fatbin given to
 * cuModuleLoadData) are refused with CUDA_ERROR_INVALID_IMAGE, the reason in
 * the JIT error log and on stderr; compile to PTX for tests on the fake (with
 * drvshim's compile cache, a DRVSHIM_FAKE_CC newer than NVRTC's newest
 * architecture, such as 999, makes compile_for produce PTX).
 *
 * Environment (read at the first call; a value it does not accept stops the
 * program with a message naming what is accepted):
 *   DRVSHIM_FAKE_PROFILE (or drvshim_fake_set_profile):
 *     discrete  one H200-like device (default)
 *     tx1       Jetson TX1-like: cc 5.3, integrated, host registration unsupported
 *     dual      two discrete devices, peers of each other (peer access, P2P
 *               attributes and peer copies are modelled)
 *     oneway    two discrete devices; device 0 may access device 1's memory, 1 not 0's
 *     trio      three discrete devices; device 2 has no peer-to-peer path to 0 or 1
 *     none      no device: cuInit returns CUDA_ERROR_NO_DEVICE
 *     stub      every call returns CUDA_ERROR_STUB_LIBRARY, like the toolkit's stub
 *     old       a CUDA 11.8 driver: newer functions absent from cuGetProcAddress
 *   DRVSHIM_FAKE_FAIL=api:nth:code[,...] injects failures from the start, as
 *     drvshim_fake_fail_call does (for whole programs). `api` is a base name
 *     (cuMemAlloc, not cuMemAlloc_v2) of a function the fake models, or "*".
 *   DRVSHIM_FAKE_CC=digits: every device reports this compute capability (101: 10.1).
 *   DRVSHIM_FAKE_INIT_DELAY_MS=n makes the first cuInit take n ms (callers on
 *     several threads then overlap, as with a real driver's slow initialisation).
 *   DRVSHIM_FAKE_PROC_SHIMS=1 makes cuGetProcAddress hand out another address for
 *     cuDeviceGetCount at versions from 12000 (a per-version shim).
 *   DRVSHIM_FAKE_REPORT=path: at exit, counts of misuse, calls while
 *     deinitialised and live contexts are written there.
 */
#ifndef DRVSHIM_FAKE_CONTROL_H
#define DRVSHIM_FAKE_CONTROL_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define DRVSHIM_FAKE_API __attribute__((visibility("default")))

/* Selects a profile and resets all state. Returns 0, or -1 for an unknown name. */
DRVSHIM_FAKE_API int drvshim_fake_set_profile(const char* name);
/* The current profile's name. */
DRVSHIM_FAKE_API const char* drvshim_fake_profile(void);
/* Resets all state (initialisation, contexts, injections, counters, log),
 * keeping the profile. Contexts still current on other threads dangle. */
DRVSHIM_FAKE_API void drvshim_fake_reset(void);

/* Makes the nth call (1 = the next one) of `api` (a base name such as
 * "cuInit", or "*" for any API) return `code` instead of running. A name the
 * fake does not model, a versioned name or nth < 1 is reported on stderr and
 * counted as misuse, and nothing is injected. */
DRVSHIM_FAKE_API void drvshim_fake_fail_call(const char* api, int nth, int code);
/* Drops every injected failure not yet consumed. */
DRVSHIM_FAKE_API void drvshim_fake_clear_injections(void);
/* Injected failures not yet consumed (their call has not come). */
DRVSHIM_FAKE_API int drvshim_fake_pending_injections(void);
/* Makes cuGetProcAddress report `status` (1 not found, 2 version not
 * sufficient) for `symbol`; 0 clears it. */
DRVSHIM_FAKE_API void drvshim_fake_set_proc_status(const char* symbol, int status);
/* Overrides one device attribute's value, or makes reading it fail with `code`. */
DRVSHIM_FAKE_API void drvshim_fake_set_attribute(int device, int attribute, int value);
DRVSHIM_FAKE_API void drvshim_fake_set_attribute_error(int device, int attribute, int code);

/* Calls made to `api` since the last reset (every entry point counts, failed
 * ones too). */
DRVSHIM_FAKE_API unsigned long long drvshim_fake_call_count(const char* api);
/* The call log: base names in call order. */
DRVSHIM_FAKE_API size_t drvshim_fake_call_log_size(void);
DRVSHIM_FAKE_API const char* drvshim_fake_call_log_entry(size_t index);
DRVSHIM_FAKE_API void drvshim_fake_clear_call_log(void);

/* Misuse the fake detected (double destroy, use after destroy, releasing an
 * unretained primary context, unknown handles), and the last one's text. */
DRVSHIM_FAKE_API unsigned long long drvshim_fake_misuse_count(void);
DRVSHIM_FAKE_API const char* drvshim_fake_last_misuse(void);
/* The misuse count, then zero: for a test that passes a dead handle on
 * purpose (the Runtime hands unknown handles to the driver, as cudart does)
 * and asserts exactly how many the fake saw. */
DRVSHIM_FAKE_API unsigned long long drvshim_fake_take_misuse(void);

/* The memory ledger (leak checks): live device allocations (cuMemAlloc,
 * managed, stream-ordered), pinned host allocations, host registrations, streams. */
DRVSHIM_FAKE_API int drvshim_fake_live_device_allocations(void);
DRVSHIM_FAKE_API int drvshim_fake_live_pinned_allocations(void);
DRVSHIM_FAKE_API int drvshim_fake_live_registrations(void);
DRVSHIM_FAKE_API int drvshim_fake_live_streams(void);
/* Calls fn(data) once, on the calling thread, when the next call of the
 * driver function `api` (as the fake names it: "cuStreamDestroy", not
 * "cuStreamDestroy_v2") starts, before the fake reads its arguments or takes
 * its lock: a test runs another thread's calls at that exact point of a
 * drvshim operation. fn may call the fake. A null fn removes the hook. */
DRVSHIM_FAKE_API void drvshim_fake_before_call(const char* api, void (*fn)(void*), void* data);
/* Streams with controllable completion. Work on a stream runs in order, when
 * the stream may run: asynchronous copies, memsets and kernel launches, event
 * records, waits for events (cuStreamWaitEvent) and host functions. A held
 * stream's work does not run: cuStreamQuery and its events' queries answer
 * CUDA_ERROR_NOT_READY, copies have not happened, streams waiting for its
 * events wait; releasing (on = 0) or synchronising it (stream, event, context,
 * or a synchronous operation that waits for it) runs it, host functions in
 * order. The legacy default stream orders as the driver's: a blocking stream's
 * work waits for the legacy stream's earlier work, legacy work (and every
 * synchronous copy or memset, which runs there) for every blocking stream's. */
DRVSHIM_FAKE_API void drvshim_fake_stream_hold(void* stream, int on);
/* Streams created while on (reset: off) start held, as drvshim_fake_stream_hold
 * would hold them: for streams a library creates inside, whose handles a test
 * does not see. drvshim_fake_release_streams releases every held stream. */
DRVSHIM_FAKE_API void drvshim_fake_hold_new_streams(int on);
DRVSHIM_FAKE_API void drvshim_fake_release_streams(void);
/* The version cuDriverGetVersion reports from now on (a driver updated
 * between two runs; the profile sets it again). */
DRVSHIM_FAKE_API void drvshim_fake_set_driver_version(int version);
/* Holds the legacy default stream of `context` (a CUcontext), likewise. */
DRVSHIM_FAKE_API void drvshim_fake_legacy_stream_hold(void* context, int on);
/* The stream's next query or synchronize reports `code` as the failure of
 * earlier work; a sticky code (226, 700, 702, 710, 714-719, 721, 810, 911) also poisons its context:
 * every later call in it returns the code. */
DRVSHIM_FAKE_API void drvshim_fake_stream_fail(void* stream, int code);
DRVSHIM_FAKE_API int drvshim_fake_live_events(void);
// Graphs (from cuStreamEndCapture), executable graphs not yet destroyed, and
// user objects the program still holds references to.
DRVSHIM_FAKE_API int drvshim_fake_live_graphs(void);
/* Handle recycling: a created stream gets the handle of the last destroyed
 * one, as a real driver may, so caches keyed by handle can be tested (reset: off). */
DRVSHIM_FAKE_API void drvshim_fake_recycle_handles(int on);

/* Kernels. The fake loads PTX (entry names, parameter sizes and globals are
 * parsed from the text; CUBINs, and fatbins given to cuModuleLoadData, are
 * refused with CUDA_ERROR_INVALID_IMAGE) and runs kernels through CPU
 * implementations registered by entry name (the mangled name for C++ kernels);
 * a launch of a kernel with none fails with CUDA_ERROR_NOT_SUPPORTED.
 * A CPU version is called once per launch, for the whole grid, with the
 * launch's dimensions and its argument pointers (args[i] points at the
 * value of parameter i, as in cuLaunchKernel). Device memory of the fake is
 * host memory: pointer arguments can be dereferenced.
 * JIT options: CU_JIT_WALL_TIME is written into its value slot; with
 * CU_JIT_LOG_VERBOSE the info log has ptxas's lines for every entry. Libraries
 * load lazily: a syntax error in a library's PTX surfaces at the first
 * cuKernelGetFunction (CUDA_ERROR_INVALID_PTX, no log), as on the H200. */
typedef struct drvshim_fake_launch {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
  unsigned cluster[3]; /* 1, 1, 1 unless launched with cluster dimensions */
} drvshim_fake_launch;
typedef void (*drvshim_fake_kernel_fn)(const drvshim_fake_launch* launch, void** args);
DRVSHIM_FAKE_API void drvshim_fake_register_kernel(const char* name, drvshim_fake_kernel_fn fn);
/* The memory of a loaded module's or library's variable (__device__,
 * __constant__, __managed__) by its PTX name, for CPU kernels that use one;
 * NULL when none is loaded. */
DRVSHIM_FAKE_API void* drvshim_fake_find_global(const char* name);
DRVSHIM_FAKE_API int drvshim_fake_live_modules(void);
/* A broken driver: cuFuncGetParamInfo answers every index with an 8-byte
 * parameter, never CUDA_ERROR_INVALID_VALUE (reset: off). */
DRVSHIM_FAKE_API void drvshim_fake_endless_param_info(int on);
/* Exported names (each an ABI variant a program compiled against cuda.h may
 * call, such as cuMemAlloc_v2) of functions the fake implements, but not in
 * that variant; comma-separated, empty when there is none. */
DRVSHIM_FAKE_API const char* drvshim_fake_export_gaps(void);
/* Launches made so far (since the last reset). */
DRVSHIM_FAKE_API unsigned long long drvshim_fake_launch_count(void);

/* Frees every device and pinned allocation the fake still holds (after a test
 * made a free fail on purpose). Returns how many there were. */
DRVSHIM_FAKE_API int drvshim_fake_drop_allocations(void);

/* Live non-primary contexts (leak check). */
DRVSHIM_FAKE_API int drvshim_fake_live_contexts(void);
/* A device's primary context: retain count, whether it is active, its flags
   (as cuDevicePrimaryCtxGetState reports them; -1 for a bad device). */
DRVSHIM_FAKE_API int drvshim_fake_primary_refcount(int device);
DRVSHIM_FAKE_API int drvshim_fake_primary_active(int device);
DRVSHIM_FAKE_API int drvshim_fake_primary_flags(int device);
/* Simulates another component (such as the CUDA Runtime) activating the
 * primary context with `flags`: one retain that drvshim does not own. */
DRVSHIM_FAKE_API void drvshim_fake_activate_primary_externally(int device, unsigned flags);

/* The calling thread's context stack: depth and top (NULL when empty). */
DRVSHIM_FAKE_API int drvshim_fake_ctx_stack_depth(void);
DRVSHIM_FAKE_API void* drvshim_fake_ctx_stack_top(void);

/* Deinitialised mode: every call returns CUDA_ERROR_DEINITIALIZED and is
 * counted, as during libcuda's own teardown at exit. */
DRVSHIM_FAKE_API void drvshim_fake_set_deinitialized(int on);
DRVSHIM_FAKE_API unsigned long long drvshim_fake_calls_while_deinitialized(void);

/* Several GPUs. Whether `device` has a peer-to-peer path to `peer`
 * (cuDeviceCanAccessPeer, the access, atomics and array attributes, and
 * cuCtxEnablePeerAccess follow it; reset: every pair has one, except the trio
 * profile's device 2). */
DRVSHIM_FAKE_API void drvshim_fake_set_peer_supported(int device, int peer, int supported);
/* Overrides one link attribute (CUdevice_P2PAttribute) from `src` to `dst`, or
 * makes reading it fail with `code`. */
DRVSHIM_FAKE_API void drvshim_fake_set_p2p_attribute(int src, int dst, int attribute, int value);
DRVSHIM_FAKE_API void drvshim_fake_set_p2p_attribute_error(int src, int dst, int attribute, int code);
/* Whether access from one context (a CUcontext) to another's memory is
 * enabled, and how many directions are enabled in all (leak check). */
DRVSHIM_FAKE_API int drvshim_fake_peer_access_enabled(void* from_context, void* to_context);
DRVSHIM_FAKE_API int drvshim_fake_peer_access_count(void);
/* Simulates another component enabling (disabling) access from one context
 * to another; returns the CUresult cuCtxEnablePeerAccess (Disable) would. */
DRVSHIM_FAKE_API int drvshim_fake_enable_peer_access_externally(void* from_context, void* to_context);
DRVSHIM_FAKE_API int drvshim_fake_disable_peer_access_externally(void* from_context, void* to_context);

#ifdef __cplusplus
}
#endif

#endif /* DRVSHIM_FAKE_CONTROL_H */
