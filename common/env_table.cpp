// SPDX-License-Identifier: Apache-2.0
// The table of every environment variable drvshim's components read, and the
// one function that reads them. Kept free of logging and of allocation so that
// every component can link it: libdrvshim, libdrvshim_cudart, drvshim-trace's
// interposer, audit module and preload library (which run inside programs
// that never asked for drvshim, some of them between fork and exec), and the
// fake driver.
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include <unistd.h>

#include "env.hpp"

extern char** environ;

namespace drvshim::detail::env {
namespace {

constexpr const char* kSwitch = "1/true/yes/on or 0/false/no/off";
constexpr const char* kByDrvshimTrace = "set by drvshim-trace";

constexpr Variable kVariables[] = {
    // libdrvshim
    {"DRVSHIM_LIBCUDA", "a path to the driver library", "libcuda.so.1 as the loader finds it", true, Group::library,
     "load this driver library instead of `libcuda.so.1`"},
    {"DRVSHIM_LOG", "off, error, warn, info, debug, trace", "warn", false, Group::library,
     "level of the library's `drvshim` logger (trace logs every driver call)"},
    {"DRVSHIM_TRACE", kSwitch, "off", false, Group::library,
     "record driver calls in-process from the first load (`drvshim::trace::records()`)"},
    {"DRVSHIM_TRACE_FILE", "a path", "no trace file", true, Group::library,
     "append every trace record to the file as JSON lines (docs/trace-format.md); never through a symbolic link, "
     "created 0600, refused unless a regular file of this user's"},
    {"DRVSHIM_TRACE_MAX_BYTES", "a byte count such as 1G or 512M; 0 for no cap", "1 GiB", false, Group::library,
     "cap of the trace file; a last `trace-truncated` record marks it"},
    {"DRVSHIM_SYNC_EACH_OP", kSwitch, "off", false, Group::library,
     "synchronise the context after every submitted operation, so an asynchronous failure names the operation"},
    {"DRVSHIM_STAGING_STORES", "auto, stream, demote, plain", "auto", false, Group::library,
     "how the staging engine's host copies write (docs/staging.md)"},
    {"DRVSHIM_LIBNVRTC", "a path to the NVRTC library", "libnvrtc.so.<major> as the loader finds it", true,
     Group::library, "load this NVRTC instead of `libnvrtc.so.<major>`"},
    {"DRVSHIM_CUDA_INCLUDE", "the toolkit's include directory", "next to NVRTC, else /usr/local/cuda/include", true,
     Group::library, "the toolkit's include directory for NVRTC"},
    {"DRVSHIM_CACHE_DIR", "an absolute path", "$XDG_CACHE_HOME/drvshim, else ~/.cache/drvshim", true, Group::library,
     "the compile cache's directory"},
    {"DRVSHIM_CACHE_DISABLE", kSwitch, "off (the cache is used)", false, Group::library, "no compile caching at all"},
    {"DRVSHIM_CACHE_READONLY", kSwitch, "off", false, Group::library, "read compile-cache entries, never write them"},
    {"DRVSHIM_CACHE_MAXSIZE", "a byte count such as 1073741824, 512M or 2G", "1 GiB", false, Group::library,
     "size cap of the on-disk compile cache (least recently used entries evicted)"},
    // libdrvshim_cudart (runtime_compat)
    {"DRVSHIM_RT_POLICY", "lazy, eager, background", "lazy", false, Group::runtime,
     "runtime_compat's policy (lazy as the CUDA Runtime; background: the eager set-up starts on a helper thread "
     "when the library loads)"},
    {"DRVSHIM_RT_TRACE", kSwitch, "off", false, Group::runtime,
     "record the trace and print the driver-call timeline at exit"},
    // drvshim-trace: set by the tool for the programs it traces, read by its
    // interposer, audit module and preload library.
    {"DRVSHIM_TRACE_OUT", kByDrvshimTrace, "not traced", true, Group::trace, "the trace file of the traced program"},
    {"DRVSHIM_TRACE_MODE", "full, summary, off", "full", false, Group::trace, "what the interposer records"},
    {"DRVSHIM_TRACE_CHILDREN", kSwitch, "on", false, Group::trace,
     "whether processes the traced program starts are traced too"},
    {"DRVSHIM_TRACE_CUPTI", kSwitch, "off", false, Group::trace,
     "the interposer also records CUPTI's resource events (`drvshim-trace --cupti`)"},
    {"DRVSHIM_TRACE_CUPTI_LIB", "a path to libcupti", "libcupti.so.13 on the loader's path, then under /usr/local/cuda",
     true, Group::trace, "the CUPTI library to load"},
    {"DRVSHIM_TRACE_EPOCH_NS", kByDrvshimTrace, "-", false, Group::trace,
     "the tool's start time, so that every process's records share one clock"},
    {"DRVSHIM_TRACE_INTERPOSER", kByDrvshimTrace, "-", true, Group::trace, "the interposer library to load"},
    {"DRVSHIM_TRACE_REAL_LIBCUDA", "a path to the driver library", "found on the loader's path", true, Group::trace,
     "the real driver the interposer forwards to"},
    {"DRVSHIM_TRACE_ROOT_PID", kByDrvshimTrace, "-", false, Group::trace,
     "the traced program's process id (with children off, only it is traced)"},
    // The fake driver (tests/fake)
    {"DRVSHIM_FAKE_PROFILE", "discrete, tx1, dual, trio, none, stub, old", "discrete", false, Group::fake,
     "the devices and driver the fake models (`trio`: three devices, device 2 without peer-to-peer); any other "
     "value stops the program with a message"},
    {"DRVSHIM_FAKE_FAIL", "api:nth:code[,api:nth:code...]", "no injected failure", false, Group::fake,
     "the fake fails the nth call of `api` with `code`"},
    {"DRVSHIM_FAKE_CC", "a compute capability such as 90 or 101", "the profile's", false, Group::fake,
     "every device reports this compute capability"},
    {"DRVSHIM_FAKE_INIT_DELAY_MS", "milliseconds", "0", false, Group::fake, "the first `cuInit` takes this long"},
    {"DRVSHIM_FAKE_PROC_SHIMS", kSwitch, "off", false, Group::fake,
     "`cuGetProcAddress` answers `cuDeviceGetCount` with a forwarding shim, as some drivers do"},
    {"DRVSHIM_FAKE_REPORT", "a path", "no report", false, Group::fake,
     "at exit the fake writes its counts of calls while deinitialised, of misuse and of live contexts to this file"},
    // Other programs' variables drvshim reads (not DRVSHIM_*): listed so that
    // every read goes through this table too.
    {"LD_LIBRARY_PATH", "the loader's search path", "-", false, Group::system,
     "where drvshim-trace and the compile cache look for the libraries the loader would find"},
    {"LD_AUDIT", "the loader's audit libraries", "-", false, Group::system,
     "drvshim-trace's preload library checks that its audit module is still on it"},
    {"HOME", "a directory", "-", true, Group::system, "the compile cache's default directory is under it"},
    {"XDG_CACHE_HOME", "an absolute path", "-", true, Group::system, "the compile cache's default directory"},
    {"TMPDIR", "a directory", "/tmp", false, Group::system, "where drvshim-trace writes its temporary files"},
    {"NVRTC_APPEND_FLAGS", "NVRTC options", "-", false, Group::system,
     "options NVRTC adds to every compile, so part of the compile cache's key"},
};

}  // namespace

std::span<const Variable> variables() noexcept { return kVariables; }

const Variable* find(std::string_view name) noexcept {
  for (const auto& v : kVariables) {
    if (name == v.name) return &v;
  }
  return nullptr;
}

const char* value(const char* name) noexcept {
  const Variable* v = find(name);
  if (v == nullptr) {
    // A programming error (every read is in the table), caught by the first
    // test that reaches it; write() and abort() are safe wherever this runs.
    static constexpr char kMessage[] = "drvshim: an environment variable read that is not in common/env_table.cpp\n";
    (void)!::write(2, kMessage, sizeof(kMessage) - 1);
    std::abort();
  }
  const char* text = v->secure ? ::secure_getenv(name) : std::getenv(name);
  return text != nullptr && *text != '\0' ? text : nullptr;
}

void for_each_with_prefix(std::string_view prefix, void (*visit)(std::string_view entry, void* user),
                          void* user) noexcept {
  for (char** e = environ; e != nullptr && *e != nullptr; ++e) {
    const std::string_view entry(*e);
    if (entry.substr(0, prefix.size()) == prefix) visit(entry, user);
  }
}

}  // namespace drvshim::detail::env
