// SPDX-License-Identifier: Apache-2.0
#pragma once
// The table of every environment variable drvshim's components read: its
// name, what it accepts, its default, whether it is read with secure_getenv,
// who reads it and what it does. A constant, so that a name is checked when
// the code that reads it compiles (env::Name), and README.md's table is
// generated from it.
#include <cstddef>
#include <span>
#include <string_view>

namespace drvshim::detail::env {

// Who reads a variable: libdrvshim, libdrvshim_cudart, drvshim-trace's parts
// inside the traced program, the fake driver, the repository's build and GPU
// scripts (listed so that libdrvshim, which they run, knows their names), or
// (system) another program's variable that drvshim also reads.
enum class Group { library, runtime, trace, fake, scripts, system };

// One variable: its name, what it accepts, what applies when it is unset or
// not understood, whether it is read with secure_getenv, who reads it and
// what it does.
struct Variable {
  const char* name;
  const char* accepts;
  const char* fallback;
  bool secure;
  Group group;
  const char* effect;
};

inline constexpr const char* kSwitch = "1/true/yes/on or 0/false/no/off";
inline constexpr const char* kByDrvshimTrace = "set by drvshim-trace";

inline constexpr Variable kVariables[] = {
    // libdrvshim
    {"DRVSHIM_LIBCUDA", "a path to the driver library", "libcuda.so.1 as the loader finds it", true, Group::library,
     "load this driver library instead of `libcuda.so.1`"},
    {"DRVSHIM_LOG", "off, error, warn, info, debug, trace", "warn", false, Group::library,
     "level of the library's `drvshim` logger (trace logs every driver call)"},
    {"DRVSHIM_TRACE", kSwitch, "off", false, Group::library,
     "record driver calls in-process from the first load (`drvshim::trace::records()`)"},
    {"DRVSHIM_TRACE_FILE", "a path", "no trace file", true, Group::library,
     "append every trace record to the file as JSON lines (docs/trace-format.md); the file itself is never a "
     "symbolic link: created 0600, refused unless a regular file of this user's"},
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
    // The fake driver (tools/fakecuda)
    {"DRVSHIM_FAKE_PROFILE", "discrete, tx1, dual, oneway, trio, none, stub, old", "discrete", false, Group::fake,
     "the devices and driver the fake models (`oneway`: two devices, 0 may access 1 but 1 not 0; `trio`: three "
     "devices, device 2 without peer-to-peer); any other "
     "value stops the program with a message"},
    {"DRVSHIM_FAKE_FAIL", "api:nth:code[,api:nth:code...]; api a base name the fake models, or *",
     "no injected failure", false, Group::fake,
     "the fake fails the nth call of `api` with `code`; any other value stops the program with a message"},
    {"DRVSHIM_FAKE_CC", "a compute capability as digits, 10 to 999, such as 90 or 101", "the profile's", false,
     Group::fake, "every device reports this compute capability; any other value stops the program with a message"},
    {"DRVSHIM_FAKE_INIT_DELAY_MS", "milliseconds, 0 to 600000", "0", false, Group::fake,
     "the first `cuInit` takes this long; any other value stops the program with a message"},
    {"DRVSHIM_FAKE_PROC_SHIMS", kSwitch, "off", false, Group::fake,
     "`cuGetProcAddress` answers `cuDeviceGetCount` with a forwarding shim, as some drivers do"},
    {"DRVSHIM_FAKE_REPORT", "a path", "no report", true, Group::fake,
     "at exit the fake writes its counts of calls while deinitialised, of misuse and of live contexts to this file"},
    // The build and GPU scripts' (tools/test.sh, tools/setup-deps.sh, tools/gpu/)
    {"DRVSHIM_CUDA_ROOT", "the CUDA toolkit's root", "/usr/local/cuda", false, Group::scripts,
     "where tools/setup-deps.sh and tools/gpu/bundle.sh look for the toolkit, and the default of the CMake option of "
     "the same name"},
    {"DRVSHIM_BUILD_DIR", "a directory", "build/", false, Group::scripts,
     "the main build of tools/test.sh and tools/probe.sh"},
    {"DRVSHIM_ASAN_BUILD_DIR", "a directory", "build-asan/", false, Group::scripts, "tools/test.sh's ASan+UBSan build"},
    {"DRVSHIM_TSAN_BUILD_DIR", "a directory", "build-tsan/", false, Group::scripts, "tools/test.sh's TSan build"},
    {"DRVSHIM_GPU_BUILD_DIR", "a directory", "build-gpu/", false, Group::scripts,
     "the build tools/gpu/bundle.sh and build-runtime-api.sh bundle"},
    {"DRVSHIM_RT_BUNDLE", "a directory", ".gpu-bundle-rt/", false, Group::scripts,
     "where tools/gpu/build-runtime-api.sh writes its bundle"},
    {"DRVSHIM_SKIP_SANITIZER", "1", "off", false, Group::scripts,
     "tools/gpu/run-gpu-suite.sh skips compute-sanitizer over the GPU tests"},
    {"DRVSHIM_SKIP_BENCH", "1", "off", false, Group::scripts, "tools/gpu/run-gpu-suite.sh skips bench_transfers"},
    {"DRVSHIM_SKIP_LAUNCH_BENCH", "1", "off", false, Group::scripts,
     "tools/gpu/run-gpu-suite.sh skips the launch benchmarks"},
    {"DRVSHIM_SKIP_STAGING_BENCH", "1", "off", false, Group::scripts,
     "tools/gpu/run-gpu-suite.sh skips the staging benchmarks"},
    {"DRVSHIM_SKIP_COMPILE_BENCH", "1", "off", false, Group::scripts,
     "tools/gpu/run-gpu-suite.sh skips the compile-cache benchmarks"},
    {"DRVSHIM_SKIP_PEER_BENCH", "1", "off", false, Group::scripts, "tools/gpu/run-multi-gpu.sh skips bench_peer"},
    {"DRVSHIM_SKIP_TRACE_BENCH", "1", "off", false, Group::scripts,
     "tools/gpu/trace-gpu.sh skips drvshim-trace's cost benchmark"},
    {"DRVSHIM_SKIP_TORCH_BENCH", "1", "off", false, Group::scripts,
     "tools/gpu/trace-gpu.sh skips the PyTorch launch-loop benchmark"},
    {"DRVSHIM_TORCH_ROUNDS", "a count", "10", false, Group::scripts,
     "rounds of tools/gpu/trace-gpu.sh's PyTorch launch-loop benchmark"},
    // Other programs' variables drvshim reads (not DRVSHIM_*): listed so that
    // every read goes through this table too.
    {"LD_LIBRARY_PATH", "the loader's search path", "-", false, Group::system,
     "where drvshim-trace and the compile cache look for the libraries the loader would find"},
    {"LD_AUDIT", "the loader's audit libraries", "-", false, Group::system,
     "drvshim-trace's preload library checks that its audit module is still on it"},
    {"HOME", "a directory", "-", true, Group::system, "the compile cache's default directory is under it"},
    {"XDG_CACHE_HOME", "an absolute path", "-", true, Group::system, "the compile cache's default directory"},
    {"TMPDIR", "a directory", "/tmp", true, Group::system, "where drvshim-trace writes its temporary files"},
    {"NVRTC_APPEND_FLAGS", "NVRTC options", "-", false, Group::system,
     "options NVRTC adds to every compile: a compile is left uncached while it is set"},
};

// The table (README.md's "Environment" is generated from it, and a test keeps
// them equal).
constexpr std::span<const Variable> variables() noexcept { return kVariables; }

inline constexpr std::size_t kNotInTheTable = sizeof(kVariables) / sizeof(kVariables[0]);

// The index of `name` in the table, or kNotInTheTable.
constexpr std::size_t index_of(std::string_view name) noexcept {
  for (std::size_t i = 0; i < kNotInTheTable; ++i) {
    if (name == kVariables[i].name) return i;
  }
  return kNotInTheTable;
}

// The entry for `name`, or nullptr.
constexpr const Variable* find(std::string_view name) noexcept {
  const std::size_t i = index_of(name);
  return i == kNotInTheTable ? nullptr : &kVariables[i];
}

// Never defined: calling it in a constant expression is what makes a name
// outside the table a compile error, with this name in the message (a throw
// would say it better, but the preload library is built without exceptions).
void environment_variable_not_in_the_table_of_common_env_table_hpp();

// The name of a variable in the table, checked when the program compiles: a
// name that is not in the table does not compile. It keeps the entry's index,
// not its address: GCC with -fsanitize=undefined cannot compare the address of
// a table entry with null in a constant expression.
class Name {
 public:
  consteval Name(const char* name) : index_(index_of(name)) {  // NOLINT(google-explicit-constructor)
    if (index_ == kNotInTheTable) environment_variable_not_in_the_table_of_common_env_table_hpp();
  }
  constexpr const Variable& variable() const noexcept { return kVariables[index_]; }
  constexpr const char* c_str() const noexcept { return kVariables[index_].name; }

 private:
  std::size_t index_;
};

}  // namespace drvshim::detail::env
