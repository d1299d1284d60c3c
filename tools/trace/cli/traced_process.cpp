// SPDX-License-Identifier: Apache-2.0
#include "traced_process.hpp"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>

#include "driver_search.hpp"
#include "env.hpp"

extern char** environ;

namespace drvshim::trace_tool {
namespace {

bool exists(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

std::string self_dir() {
  char buf[PATH_MAX];
  const ssize_t n = ::readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) return ".";
  std::string p(buf, static_cast<std::size_t>(n));
  return p.substr(0, p.rfind('/'));
}

std::vector<std::string> ldconfig_paths() {
  std::vector<std::string> out;
  for (const char* tool : {"/sbin/ldconfig", "/usr/sbin/ldconfig"}) {
    if (!exists(tool)) continue;
    const std::string cmd = std::string(tool) + " -p 2>/dev/null";
    std::FILE* f = ::popen(cmd.c_str(), "r");
    if (f == nullptr) continue;
    char line[4096];
    while (std::fgets(line, sizeof line, f) != nullptr) {
      const std::string l = line;
      if (l.find("libcuda.so.1 ") == std::string::npos || l.find("x86-64") == std::string::npos) continue;
      const auto arrow = l.find("=> ");
      if (arrow == std::string::npos) continue;
      std::string path = l.substr(arrow + 3);
      while (!path.empty() && (path.back() == '\n' || path.back() == ' ')) path.pop_back();
      out.push_back(path);
    }
    ::pclose(f);
    break;
  }
  return out;
}

void put(std::vector<std::string>& env, const std::string& key, const std::string& value) {
  const std::string prefix = key + "=";
  for (auto& e : env) {
    if (e.compare(0, prefix.size(), prefix) == 0) {
      e = prefix + value;
      return;
    }
  }
  env.push_back(prefix + value);
}

std::string get(const std::vector<std::string>& env, const std::string& key) {
  const std::string prefix = key + "=";
  for (const auto& e : env) {
    if (e.compare(0, prefix.size(), prefix) == 0) return e.substr(prefix.size());
  }
  return {};
}

int decode(int status) { return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status); }

// Signals that end a program, passed on to it while it runs: a signal sent to the tracer alone
// (kill, a job scheduler, systemd, timeout) must reach the program, which then ends the way it
// would on its own, and the trace is still read.
constexpr int kForwarded[] = {SIGTERM, SIGINT, SIGHUP, SIGQUIT};
constexpr std::size_t kForwardedCount = sizeof(kForwarded) / sizeof(kForwarded[0]);
std::atomic<pid_t> g_child{0};  // the program while it runs, else 0
std::atomic<int> g_signal{0};   // the last of kForwarded that reached the tracer
static_assert(std::atomic<pid_t>::is_always_lock_free && std::atomic<int>::is_always_lock_free);

void forward(int sig, siginfo_t* info, void* /*context*/) {
  const int saved = errno;
  g_signal.store(sig);
  const pid_t child = g_child.load();
  if (child > 0) {
    // A terminal signals its whole foreground group (Ctrl-C, Ctrl-\, hang-up): a program in
    // the tracer's group has its own copy already.
    const bool from_terminal = info != nullptr && info->si_code == SI_KERNEL && ::getpgid(child) == ::getpgrp();
    if (!from_terminal) (void)::kill(child, sig);
  }
  errno = saved;
}

// Installs the forwarding (signals the tracer was started ignoring stay ignored, for the
// program too) with the signals blocked until the program's pid is known; restores all.
class SignalForwarding {
 public:
  SignalForwarding() {
    sigset_t set;
    sigemptyset(&set);
    for (const int sig : kForwarded) sigaddset(&set, sig);
    ::sigprocmask(SIG_BLOCK, &set, &old_mask_);
    g_signal.store(0);
    struct sigaction action {};
    action.sa_sigaction = &forward;
    action.sa_flags = SA_SIGINFO | SA_RESTART;
    sigemptyset(&action.sa_mask);
    for (std::size_t k = 0; k < kForwardedCount; ++k) {
      ::sigaction(kForwarded[k], nullptr, &old_[k]);
      const bool ignored = (old_[k].sa_flags & SA_SIGINFO) == 0 && old_[k].sa_handler == SIG_IGN;
      if (!ignored) ::sigaction(kForwarded[k], &action, nullptr);
    }
  }
  SignalForwarding(const SignalForwarding&) = delete;
  SignalForwarding& operator=(const SignalForwarding&) = delete;
  ~SignalForwarding() {
    g_child.store(0);
    restore();
  }
  // In the parent, once g_child is set.
  void unblock() const { ::sigprocmask(SIG_SETMASK, &old_mask_, nullptr); }
  // The tracer's own dispositions and mask as it was started with (in the child before exec).
  void restore() const {
    for (std::size_t k = 0; k < kForwardedCount; ++k) ::sigaction(kForwarded[k], &old_[k], nullptr);
    unblock();
  }

 private:
  struct sigaction old_[kForwardedCount] {};
  sigset_t old_mask_{};
};

}  // namespace

std::string library_dir(const std::string& override_dir) {
  if (!override_dir.empty()) return override_dir;
  const std::string here = self_dir();
  if (exists(here + "/lib/libcuda.so.1")) return here + "/lib";
  return here + "/../" + DRVSHIM_TRACE_INSTALL_LIBDIR;
}

std::string find_real_driver(const std::string& explicit_path, const std::string& interposer, std::string& why) {
  const char* llp = drvshim::detail::env::value("LD_LIBRARY_PATH");
  const auto candidates = driver_candidates(explicit_path, llp != nullptr ? llp : "", ldconfig_paths(), interposer);
  if (!explicit_path.empty()) {
    if (candidates.empty() || candidates.front().source != std::string("DRVSHIM_LIBCUDA")) {
      why = fmt::format("the driver \"{}\" does not exist (or is the interposer itself)", explicit_path);
      return {};
    }
    return candidates.front().path;
  }
  if (candidates.empty()) {
    why =
        "no libcuda.so.1 found (LD_LIBRARY_PATH, ld.so.cache, /usr/lib/x86_64-linux-gnu, /usr/lib64, "
        "/usr/local/nvidia/lib64, ...): is the NVIDIA driver installed? Name it with --libcuda or DRVSHIM_LIBCUDA";
    return {};
  }
  return candidates.front().path;
}

int run_traced(const LaunchOptions& o, std::string& error) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) env.emplace_back(*e);
  const std::string libdir = o.interposer.substr(0, o.interposer.rfind('/'));
  const std::string old_llp = get(env, "LD_LIBRARY_PATH");
  put(env, "LD_LIBRARY_PATH", old_llp.empty() ? libdir : libdir + ":" + old_llp);
  put(env, "DRVSHIM_TRACE_REAL_LIBCUDA", o.real_driver);
  // drvshim's own programs load the driver named here: the interposer.
  put(env, "DRVSHIM_LIBCUDA", o.interposer);
  put(env, "DRVSHIM_TRACE_INTERPOSER", o.interposer);
  put(env, "DRVSHIM_TRACE_OUT", o.trace_path);
  put(env, "DRVSHIM_TRACE_MODE", o.mode);
  put(env, "DRVSHIM_TRACE_CHILDREN", o.children ? "1" : "0");
  put(env, "DRVSHIM_TRACE_MAX_BYTES", std::to_string(o.max_bytes));
  put(env, "DRVSHIM_TRACE_CUPTI", o.cupti ? "1" : "0");
  timespec ts{};
  ::clock_gettime(CLOCK_MONOTONIC, &ts);
  put(env, "DRVSHIM_TRACE_EPOCH_NS", std::to_string(static_cast<long long>(ts.tv_sec) * 1000000000LL + ts.tv_nsec));
  if (!o.preload_lib.empty()) {
    // The exec family and _exit reach the preload library before libc in every traced process.
    const std::string old_preload = get(env, "LD_PRELOAD");
    put(env, "LD_PRELOAD", old_preload.empty() ? o.preload_lib : o.preload_lib + ":" + old_preload);
  }
  if (o.audit) {
    const std::string old_audit = get(env, "LD_AUDIT");
    put(env, "LD_AUDIT", old_audit.empty() ? o.audit_lib : o.audit_lib + ":" + old_audit);
  }

  // Orphaned descendants come back to the tracer, which waits for them before reading the trace.
  (void)::prctl(PR_SET_CHILD_SUBREAPER, 1);
  SignalForwarding forwarding;

  int ready[2];
  if (::pipe2(ready, O_CLOEXEC) != 0) {
    error = std::string("pipe: ") + std::strerror(errno);
    return 127;
  }
  const pid_t parent = ::getpid();
  const pid_t pid = ::fork();
  if (pid < 0) {
    error = std::string("fork: ") + std::strerror(errno);
    ::close(ready[0]);
    ::close(ready[1]);
    return 127;
  }
  if (pid == 0) {
    ::close(ready[0]);
    // The program does not outlive a tracer that is killed outright (SIGKILL, a crash).
    (void)::prctl(PR_SET_PDEATHSIG, SIGTERM);
    if (::getppid() != parent) ::_exit(128 + SIGTERM);  // the tracer died before the line above
    forwarding.restore();
    put(env, "DRVSHIM_TRACE_ROOT_PID", std::to_string(::getpid()));
    std::vector<char*> envp;
    for (auto& e : env) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::vector<char*> argv;
    std::vector<std::string> args = o.command;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execvpe(argv[0], argv.data(), envp.data());
    const int err = errno;
    (void)!::write(ready[1], &err, sizeof(err));
    ::_exit(127);
  }
  g_child.store(pid);
  forwarding.unblock();
  ::close(ready[1]);
  int exec_errno = 0;
  ssize_t got = 0;
  while ((got = ::read(ready[0], &exec_errno, sizeof(exec_errno))) < 0 && errno == EINTR) {
  }
  const bool failed = got == static_cast<ssize_t>(sizeof(exec_errno));
  ::close(ready[0]);
  // Wait for the program without reaping it, so that its pid cannot be reused while a
  // signal may still be forwarded to it; then stop forwarding and reap it.
  siginfo_t info{};
  while (::waitid(P_PID, static_cast<id_t>(pid), &info, WEXITED | WNOWAIT) != 0 && errno == EINTR) {
  }
  g_child.store(0);
  g_signal.store(0);
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (failed) {
    error = fmt::format("cannot run \"{}\": {}", o.command.front(), std::strerror(exec_errno));
    return 127;
  }
  // Descendants still running (daemons, workers that outlive the program) get a grace period,
  // cut short by a signal to the tracer.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(o.grace_seconds);
  for (;;) {
    int s = 0;
    const pid_t r = ::waitpid(-1, &s, WNOHANG);
    if (r < 0 && errno == ECHILD) break;
    if (r > 0) continue;
    if (const int sig = g_signal.load(); sig != 0) {
      std::fprintf(stderr, "drvshim-trace: %s while descendants of the program still run; reading the trace now\n",
                   ::strsignal(sig));
      break;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      std::fprintf(stderr, "drvshim-trace: descendants of the program still run after %d s; reading the trace now\n",
                   o.grace_seconds);
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return decode(status);
}

}  // namespace drvshim::trace_tool
