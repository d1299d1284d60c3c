/* Control API of libdrvshim_fakecuda.so, the fake CUDA driver used by
 * drvshim's tests (and usable by drvshim's users to test their own init order
 * and failure handling without a GPU).
 *
 * The fake is loaded by drvshim's real loader (DRVSHIM_LIBCUDA=/path/to/it),
 * exports cuDriverGetVersion and cuGetProcAddress(_v2) like libcuda, and
 * implements the driver functions drvshim uses on host memory. Profiles
 * (DRVSHIM_FAKE_PROFILE, or drvshim_fake_set_profile):
 *   discrete  one H200-like device (default)
 *   tx1       Jetson TX1-like: cc 5.3, integrated, host registration unsupported
 *   dual      two discrete devices
 *   none      no device: cuInit returns CUDA_ERROR_NO_DEVICE
 *   stub      every call returns CUDA_ERROR_STUB_LIBRARY, like the toolkit's stub
 *   old       a CUDA 11.8 driver: newer functions absent
 * DRVSHIM_FAKE_INIT_DELAY_MS=n makes the first cuInit take n ms (callers on
 * several threads then overlap, as with a real driver's slow initialisation).
 * DRVSHIM_FAKE_PROC_SHIMS=1 makes cuGetProcAddress hand out another address for
 * cuDeviceGetCount at versions from 12000 (a per-version shim).
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
 * "cuInit", or "*" for any API) return `code` instead of running. */
DRVSHIM_FAKE_API void drvshim_fake_fail_call(const char* api, int nth, int code);
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

/* The memory ledger (leak checks): live device allocations (cuMemAlloc,
 * managed, stream-ordered), pinned host allocations, host registrations, streams. */
DRVSHIM_FAKE_API int drvshim_fake_live_device_allocations(void);
DRVSHIM_FAKE_API int drvshim_fake_live_pinned_allocations(void);
DRVSHIM_FAKE_API int drvshim_fake_live_registrations(void);
DRVSHIM_FAKE_API int drvshim_fake_live_streams(void);
/* Streams with controllable completion. A held stream's queued work does not
 * complete: cuStreamQuery and its events' queries answer CUDA_ERROR_NOT_READY
 * and host functions wait; releasing (on = 0) or synchronising completes it,
 * running the host functions in order. */
DRVSHIM_FAKE_API void drvshim_fake_stream_hold(void* stream, int on);
/* The stream's next query or synchronize reports `code` as the failure of
 * earlier work; a sticky code (700, 710, 714-719) also poisons its context:
 * every later call in it returns the code. */
DRVSHIM_FAKE_API void drvshim_fake_stream_fail(void* stream, int code);
DRVSHIM_FAKE_API int drvshim_fake_live_events(void);
/* Handle recycling: a created stream gets the handle of the last destroyed
 * one, as a real driver may, so caches keyed by handle can be tested (reset: off). */
DRVSHIM_FAKE_API void drvshim_fake_recycle_handles(int on);

/* Kernels. The fake loads PTX (entry names, parameter sizes and globals are
 * parsed from the text; CUBIN and fatbin images are refused with
 * CUDA_ERROR_INVALID_IMAGE) and runs kernels through CPU implementations
 * registered by entry name; a launch of an unregistered kernel does nothing. */
typedef struct drvshim_fake_launch {
  unsigned grid[3];
  unsigned block[3];
  unsigned shared_bytes;
} drvshim_fake_launch;
typedef void (*drvshim_fake_kernel_fn)(const drvshim_fake_launch* launch, void** args);
DRVSHIM_FAKE_API void drvshim_fake_register_kernel(const char* name, drvshim_fake_kernel_fn fn);
DRVSHIM_FAKE_API int drvshim_fake_live_modules(void);
/* Launches made so far (since the last reset). */
DRVSHIM_FAKE_API unsigned long long drvshim_fake_launch_count(void);

/* Frees every device and pinned allocation the fake still holds (after a test
 * made a free fail on purpose). Returns how many there were. */
DRVSHIM_FAKE_API int drvshim_fake_drop_allocations(void);

/* Live non-primary contexts (leak check). */
DRVSHIM_FAKE_API int drvshim_fake_live_contexts(void);
/* A device's primary context: retain count and whether it is active. */
DRVSHIM_FAKE_API int drvshim_fake_primary_refcount(int device);
DRVSHIM_FAKE_API int drvshim_fake_primary_active(int device);
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

#ifdef __cplusplus
}
#endif

#endif /* DRVSHIM_FAKE_CONTROL_H */
