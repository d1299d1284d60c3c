// SPDX-License-Identifier: Apache-2.0
// drvshim-trace's preload library (LD_PRELOAD in every traced process): the
// ways a process image ends without exit handlers, which the interposer alone
// cannot see when the program loads libcuda with dlopen (its symbols then do
// not interpose on libc's). Before an exec or _exit it lets the interposer
// write every record; an exec or posix_spawn into an environment that drops
// tracing is written to the trace, so a child that runs untraced is never
// silent. Nothing here allocates: these run in vfork children, in forked
// children of threaded programs and in signal handlers.
#include <dlfcn.h>
#include <fcntl.h>
#include <spawn.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <climits>
#include <cstdarg>
#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "env.hpp"
#include "preload_hooks.h"

extern char** environ;

namespace {

std::atomic<const DrvshimTraceHooks*> g_hooks{nullptr};

using execve_fn = int (*)(const char*, char* const[], char* const[]);
using execv_fn = int (*)(const char*, char* const[]);
using execvpe_fn = int (*)(const char*, char* const[], char* const[]);
using fexecve_fn = int (*)(int, char* const[], char* const[]);
using execveat_fn = int (*)(int, const char*, char* const[], char* const[], int);
using spawn_fn = int (*)(pid_t*, const char*, const posix_spawn_file_actions_t*, const posix_spawnattr_t*,
                         char* const[], char* const[]);

execve_fn real_execve = nullptr;
execv_fn real_execv = nullptr;
execv_fn real_execvp = nullptr;
execvpe_fn real_execvpe = nullptr;
fexecve_fn real_fexecve = nullptr;
execveat_fn real_execveat = nullptr;
spawn_fn real_posix_spawn = nullptr;
spawn_fn real_posix_spawnp = nullptr;

template <class F>
void resolve(F& fn, const char* name) noexcept {
  fn = reinterpret_cast<F>(::dlsym(RTLD_NEXT, name));
}

__attribute__((constructor)) void resolve_all() noexcept {
  resolve(real_execve, "execve");
  resolve(real_execv, "execv");
  resolve(real_execvp, "execvp");
  resolve(real_execvpe, "execvpe");
  resolve(real_fexecve, "fexecve");
  resolve(real_execveat, "execveat");
  resolve(real_posix_spawn, "posix_spawn");
  resolve(real_posix_spawnp, "posix_spawnp");
}

const char* env_in(char* const* envp, const char* key) noexcept {
  if (envp == nullptr) return nullptr;
  const std::size_t n = std::strlen(key);
  for (char* const* e = envp; *e != nullptr; ++e) {
    if (std::strncmp(*e, key, n) == 0 && (*e)[n] == '=') return *e + n + 1;
  }
  return nullptr;
}

// Whether the ':'-separated `list` holds `item`: the same text, or (`as_paths`) the same file
// once both are resolved (a trailing '/', "..", a link).
bool list_has(const char* list, const char* item, std::size_t item_len, bool as_paths) noexcept {
  if (list == nullptr || item_len == 0 || item_len >= PATH_MAX) return false;
  char want[PATH_MAX];
  char want_real[PATH_MAX];
  std::memcpy(want, item, item_len);
  want[item_len] = '\0';
  const bool want_resolved = as_paths && ::realpath(want, want_real) != nullptr;
  const char* p = list;
  while (*p != '\0') {
    const char* end = std::strchr(p, ':');
    const std::size_t len = end != nullptr ? static_cast<std::size_t>(end - p) : std::strlen(p);
    if (len == item_len && std::strncmp(p, item, len) == 0) return true;
    if (want_resolved && len > 0 && len < PATH_MAX) {
      char entry[PATH_MAX];
      char entry_real[PATH_MAX];
      std::memcpy(entry, p, len);
      entry[len] = '\0';
      if (::realpath(entry, entry_real) != nullptr && std::strcmp(entry_real, want_real) == 0) return true;
    }
    if (end == nullptr) break;
    p = end + 1;
  }
  return false;
}

// Why an image started with `envp` (from `path`) is not traced, or nullptr when it is.
const char* why_untraced(const char* path, char* const* envp) noexcept {
  const char* out = env_in(envp, "DRVSHIM_TRACE_OUT");
  const char* mine = drvshim::detail::env::value("DRVSHIM_TRACE_OUT");
  if (out == nullptr || *out == '\0' || mine == nullptr || std::strcmp(out, mine) != 0) {
    return "its environment has no DRVSHIM_TRACE_OUT of this trace (the environment was replaced or cleaned)";
  }
  const char* interposer = drvshim::detail::env::value("DRVSHIM_TRACE_INTERPOSER");
  bool reaches = false;
  if (interposer != nullptr) {
    const char* slash = std::strrchr(interposer, '/');
    if (slash != nullptr) {
      reaches =
          list_has(env_in(envp, "LD_LIBRARY_PATH"), interposer, static_cast<std::size_t>(slash - interposer), true);
    }
  }
  if (const char* audit = drvshim::detail::env::value("LD_AUDIT"); !reaches && audit != nullptr && *audit != '\0') {
    const char* colon = std::strchr(audit, ':');
    reaches = list_has(env_in(envp, "LD_AUDIT"), audit,
                       colon != nullptr ? static_cast<std::size_t>(colon - audit) : std::strlen(audit), true);
  }
  if (!reaches) {
    return "neither LD_LIBRARY_PATH nor LD_AUDIT in its environment leads to drvshim-trace's libcuda.so.1";
  }
  struct stat st {};
  if (path != nullptr && std::strchr(path, '/') != nullptr && ::stat(path, &st) == 0 &&
      (st.st_mode & (S_ISUID | S_ISGID)) != 0) {
    return "it is set-user-ID or set-group-ID: the loader ignores LD_LIBRARY_PATH and LD_AUDIT for it";
  }
  return nullptr;
}

// ---- a record written without the interposer (no allocation) ---------------------------

struct Line {
  char buf[4096];
  std::size_t n = 0;
  void put(const char* s) noexcept {
    while (*s != '\0' && n + 1 < sizeof buf) buf[n++] = *s++;
  }
  void num(unsigned long long v) noexcept {
    char tmp[24];
    std::size_t k = 0;
    do {
      tmp[k++] = static_cast<char>('0' + v % 10);
      v /= 10;
    } while (v != 0);
    while (k > 0 && n + 1 < sizeof buf) buf[n++] = tmp[--k];
  }
  // A JSON string body; bytes that are not plain ASCII are written as \u00XX (reversible).
  void text(const char* s) noexcept {
    static const char hex[] = "0123456789abcdef";
    for (; s != nullptr && *s != '\0' && n + 8 < sizeof buf; ++s) {
      const auto c = static_cast<unsigned char>(*s);
      if (c == '"' || c == '\\') {
        buf[n++] = '\\';
        buf[n++] = static_cast<char>(c);
      } else if (c < 0x20 || c >= 0x7f) {
        put("\\u00");
        buf[n++] = hex[c >> 4];
        buf[n++] = hex[c & 15];
      } else {
        buf[n++] = static_cast<char>(c);
      }
    }
  }
};

long long epoch_ns() noexcept {
  const char* e = drvshim::detail::env::value("DRVSHIM_TRACE_EPOCH_NS");
  return e != nullptr ? std::strtoll(e, nullptr, 10) : 0;
}

// Appends one record (kind `kind`, name `api`) for this process to the trace file.
void write_note(const char* kind, const char* api, const char* path, const char* why) noexcept {
  const char* out = drvshim::detail::env::value("DRVSHIM_TRACE_OUT");
  if (out == nullptr || *out == '\0') return;
  if (!drvshim::detail::env::switch_value("DRVSHIM_TRACE_CHILDREN", true)) {
    const char* root = drvshim::detail::env::value("DRVSHIM_TRACE_ROOT_PID");
    if (root == nullptr || std::strtoll(root, nullptr, 10) != ::getpid()) return;
  }
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  const long long now = static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec - epoch_ns();
  Line l;
  l.put("{\"seq\":0,\"ts_ns\":");
  l.num(static_cast<unsigned long long>(now > 0 ? now : 0));
  l.put(",\"dur_ns\":0,\"tid\":");
  l.num(static_cast<unsigned long long>(::syscall(SYS_gettid)));
  l.put(",\"pid\":");
  l.num(static_cast<unsigned long long>(::getpid()));
  l.put(",\"kind\":\"");
  l.put(kind);
  l.put("\",\"api\":\"");
  l.put(api);
  l.put("\",\"args\":\"path=");
  l.text(path);
  l.put("; traced=0; parent=");
  // For an exec the process's parent; for a spawned child, the process that spawned it.
  l.num(static_cast<unsigned long long>(std::strcmp(api, "exec") == 0 ? ::getppid() : ::getpid()));
  l.put("; why=");
  l.text(why);
  l.put("\",\"result\":0,\"result_name\":\"\",\"ctx\":\"0x0\"}\n");
  const int fd = ::open(out, O_WRONLY | O_APPEND | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
  if (fd < 0) return;
  struct stat st {};
  if (::fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == ::geteuid()) {
    (void)!::write(fd, l.buf, l.n);
  }
  ::close(fd);
}

// Before an exec of `path` with `envp`: the interposer writes its records; an untraced
// new image is said in the trace either way.
void before_exec(const char* path, char* const* envp) noexcept {
  if (drvshim::detail::env::value("DRVSHIM_TRACE_OUT") == nullptr) return;
  const int saved = errno;
  const char* why = why_untraced(path, envp);
  const DrvshimTraceHooks* hooks = g_hooks.load(std::memory_order_acquire);
  const bool recorded = hooks != nullptr && hooks->before_exec(path, why == nullptr ? 1 : 0, why) != 0;
  if (!recorded && why != nullptr) write_note("process", "exec", path, why);
  errno = saved;
}

void after_exec(int err) noexcept {
  const DrvshimTraceHooks* hooks = g_hooks.load(std::memory_order_acquire);
  if (hooks != nullptr) hooks->exec_failed(err);
  errno = err;
}

void before_spawn(const char* path, char* const* envp) noexcept {
  if (drvshim::detail::env::value("DRVSHIM_TRACE_OUT") == nullptr) return;
  const int saved = errno;
  if (const char* why = why_untraced(path, envp); why != nullptr) {
    const DrvshimTraceHooks* hooks = g_hooks.load(std::memory_order_acquire);
    if (hooks == nullptr || hooks->child_untraced(path, why) == 0) write_note("event", "child-untraced", path, why);
  }
  errno = saved;
}

[[noreturn]] void end_now(const char* how, int status) noexcept {
  const DrvshimTraceHooks* hooks = g_hooks.load(std::memory_order_acquire);
  if (hooks != nullptr) hooks->before_exit(how, status);
  for (;;) (void)::syscall(SYS_exit_group, status);
}

int exec_with(const char* path, char* const argv[], char* const envp[], bool search) noexcept {
  before_exec(path, envp);
  int r = -1;
  if (search) {
    r = real_execvpe != nullptr ? real_execvpe(path, argv, envp) : (errno = ENOSYS, -1);
  } else {
    r = real_execve != nullptr ? real_execve(path, argv, envp) : (errno = ENOSYS, -1);
  }
  after_exec(errno);
  return r;
}

}  // namespace

extern "C" {

#define DRVSHIM_PRELOAD_EXPORT __attribute__((visibility("default")))

DRVSHIM_PRELOAD_EXPORT void drvshim_trace_preload_register(const DrvshimTraceHooks* hooks) {
  if (hooks == nullptr || hooks->version != DRVSHIM_TRACE_HOOKS_VERSION) return;
  g_hooks.store(hooks, std::memory_order_release);
}

DRVSHIM_PRELOAD_EXPORT int execve(const char* path, char* const argv[], char* const envp[]) {
  return exec_with(path, argv, envp, false);
}

DRVSHIM_PRELOAD_EXPORT int execv(const char* path, char* const argv[]) { return exec_with(path, argv, environ, false); }

DRVSHIM_PRELOAD_EXPORT int execvp(const char* file, char* const argv[]) { return exec_with(file, argv, environ, true); }

DRVSHIM_PRELOAD_EXPORT int execvpe(const char* file, char* const argv[], char* const envp[]) {
  return exec_with(file, argv, envp, true);
}

DRVSHIM_PRELOAD_EXPORT int fexecve(int fd, char* const argv[], char* const envp[]) {
  // argv is declared non-null, but a NULL argv must reach the kernel (EINVAL) untouched.
  char* const* volatile checked = argv;
  before_exec(checked != nullptr && checked[0] != nullptr ? checked[0] : "(fexecve)", envp);
  const int r = real_fexecve != nullptr ? real_fexecve(fd, argv, envp) : (errno = ENOSYS, -1);
  after_exec(errno);
  return r;
}

DRVSHIM_PRELOAD_EXPORT int execveat(int dirfd, const char* path, char* const argv[], char* const envp[], int flags) {
  before_exec(path, envp);
  const int r = real_execveat != nullptr ? real_execveat(dirfd, path, argv, envp, flags) : (errno = ENOSYS, -1);
  after_exec(errno);
  return r;
}

// execl*: the variadic arguments as an argv on the stack, counted first (any number the
// kernel accepts). A NULL first argument is an empty argv.
#define DRVSHIM_COLLECT_ARGS(first, extra_envp)                                    \
  va_list ap;                                                                      \
  va_start(ap, first);                                                             \
  const char* volatile head = first; /* declared non-null; a NULL must pass */     \
  std::size_t more = 0;                                                            \
  if (head != nullptr) {                                                           \
    va_list counting;                                                              \
    va_copy(counting, ap);                                                         \
    while (va_arg(counting, char*) != nullptr) ++more;                             \
    va_end(counting);                                                              \
  }                                                                                \
  auto** argv = static_cast<char**>(__builtin_alloca((more + 2) * sizeof(char*))); \
  argv[0] = const_cast<char*>(head);                                               \
  for (std::size_t k = 0; k < more; ++k) argv[k + 1] = va_arg(ap, char*);          \
  if (head != nullptr) (void)va_arg(ap, char*);                                    \
  argv[more + 1] = nullptr;                                                        \
  extra_envp;                                                                      \
  va_end(ap)

DRVSHIM_PRELOAD_EXPORT int execl(const char* path, const char* arg, ...) {
  DRVSHIM_COLLECT_ARGS(arg, (void)0);
  return exec_with(path, argv, environ, false);
}

DRVSHIM_PRELOAD_EXPORT int execlp(const char* file, const char* arg, ...) {
  DRVSHIM_COLLECT_ARGS(arg, (void)0);
  return exec_with(file, argv, environ, true);
}

DRVSHIM_PRELOAD_EXPORT int execle(const char* path, const char* arg, ...) {
  char* const* envp = nullptr;
  DRVSHIM_COLLECT_ARGS(arg, envp = va_arg(ap, char* const*));
  return exec_with(path, argv, envp, false);
}

DRVSHIM_PRELOAD_EXPORT int posix_spawn(pid_t* pid, const char* path, const posix_spawn_file_actions_t* actions,
                                       const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) {
  before_spawn(path, envp);
  return real_posix_spawn != nullptr ? real_posix_spawn(pid, path, actions, attr, argv, envp) : ENOSYS;
}

DRVSHIM_PRELOAD_EXPORT int posix_spawnp(pid_t* pid, const char* file, const posix_spawn_file_actions_t* actions,
                                        const posix_spawnattr_t* attr, char* const argv[], char* const envp[]) {
  before_spawn(file, envp);
  return real_posix_spawnp != nullptr ? real_posix_spawnp(pid, file, actions, attr, argv, envp) : ENOSYS;
}

DRVSHIM_PRELOAD_EXPORT void _exit(int status) { end_now("_exit", status); }

DRVSHIM_PRELOAD_EXPORT void _Exit(int status) { end_now("_Exit", status); }

}  // extern "C"
