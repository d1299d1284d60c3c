// SPDX-License-Identifier: Apache-2.0
#pragma once
/* The handshake between drvshim-trace's preload library (LD_PRELOAD: it
   wraps exec*, posix_spawn* and _exit, which a libcuda loaded with dlopen
   cannot) and the interposer: the interposer, once started, hands the
   preload these hooks through drvshim_trace_preload_register(). */
#ifdef __cplusplus
extern "C" {
#endif

struct DrvshimTraceHooks {
  int version; /* DRVSHIM_TRACE_HOOKS_VERSION */
  /* Before an exec replaces this image: records it and writes every record.
     `traced` says whether the new image's environment keeps tracing; `why`
     says what takes it out of tracing (NULL when traced). Returns 0 when the
     hook did nothing (a vfork child: the caller writes its own note). */
  int (*before_exec)(const char* path, int traced, const char* why);
  /* The exec returned: it failed with `err`. */
  void (*exec_failed)(int err);
  /* Before _exit/_Exit ends the process without exit handlers. */
  void (*before_exit)(const char* how, int status);
  /* A child was spawned (posix_spawn) into an environment without tracing. */
  int (*child_untraced)(const char* path, const char* why);
};

#define DRVSHIM_TRACE_HOOKS_VERSION 1

/* Exported by the preload library. */
void drvshim_trace_preload_register(const struct DrvshimTraceHooks* hooks);

#ifdef __cplusplus
}
#endif
