// SPDX-License-Identifier: Apache-2.0
// Programs for drvshim-trace's tests: each mode reaches the driver one way
// (linked with -lcuda against the toolkit's stub; at run time the interposer
// is found first) or makes one of the mistakes the tracer diagnoses. Run only
// under drvshim-trace with the fake driver behind it. Exit code 0 = the
// scenario ran as planned (not that the driver calls succeeded).
#include <cuda.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <link.h>
#include <pthread.h>
#include <signal.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

extern "C" CUresult helper_push(CUcontext ctx);
extern "C" CUresult helper_reset(CUdevice dev);
extern char** environ;

namespace {

int fail(const char* what, int code) {
  std::fprintf(stderr, "scenario: %s (%d)\n", what, code);
  return 1;
}

#define CHECK(call)                                 \
  do {                                              \
    const CUresult r_ = (call);                     \
    if (r_ != CUDA_SUCCESS) return fail(#call, r_); \
  } while (0)

// The fake's control API, from the fake the interposer loaded.
template <class F>
F fake_fn(const char* name) {
  const char* path = std::getenv("DRVSHIM_TRACE_REAL_LIBCUDA");
  void* h = path != nullptr ? dlopen(path, RTLD_NOW | RTLD_NOLOAD) : nullptr;
  return h != nullptr ? reinterpret_cast<F>(dlsym(h, name)) : nullptr;
}

int basic(bool leak) {
  CHECK(cuInit(0));
  CUdevice dev = 0;
  CHECK(cuDeviceGet(&dev, 0));
  CUcontext ctx = nullptr;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, dev));
  CHECK(cuCtxSetCurrent(ctx));
  CUdeviceptr p = 0;
  CHECK(cuMemAlloc(&p, 1 << 20));
  if (!leak) CHECK(cuMemFree(p));
  CHECK(cuCtxSetCurrent(nullptr));
  if (!leak) CHECK(cuDevicePrimaryCtxRelease(dev));
  return 0;
}

using Gpa2 = CUresult (*)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*);
using Gpa1 = CUresult (*)(const char*, void**, int, cuuint64_t);

// Entry points through cuGetProcAddress, as the CUDA Runtime gets them: the pointer
// handed back must be the interposer's export of exactly the variant asked for.
int proc_address() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  if (lib == nullptr) return fail("dlopen libcuda.so.1", 0);
  auto gpa = reinterpret_cast<Gpa2>(dlsym(lib, "cuGetProcAddress_v2"));
  auto gpa1 = reinterpret_cast<Gpa1>(dlsym(lib, "cuGetProcAddress"));
  if (gpa == nullptr || gpa1 == nullptr) return fail("dlsym cuGetProcAddress", 0);
  CUdriverProcAddressQueryResult status{};
  void* fn = nullptr;
  // The Runtime's first probe: an empty symbol.
  (void)gpa("", &fn, 0, 0, &status);
  struct Ask {
    const char* name;
    int version;
    cuuint64_t flags;
    const char* expect;
  };
  const Ask asks[] = {
      {"cuInit", 2000, 0, "cuInit"},
      {"cuMemAlloc", 3020, 0, "cuMemAlloc_v2"},
      {"cuMemFree", 13000, 0, "cuMemFree_v2"},
      {"cuCtxCreate", 12050, 0, "cuCtxCreate_v4"},
      {"cuCtxCreate", 3020, 0, "cuCtxCreate_v2"},
      {"cuDevicePrimaryCtxRetain", 7000, 0, "cuDevicePrimaryCtxRetain"},
      {"cuDevicePrimaryCtxRelease", 11000, 0, "cuDevicePrimaryCtxRelease_v2"},
      {"cuCtxSetCurrent", 4000, 1, "cuCtxSetCurrent"},
      {"cuGetProcAddress", 12000, 0, "cuGetProcAddress_v2"},
  };
  for (const auto& a : asks) {
    fn = nullptr;
    if (gpa(a.name, &fn, a.version, a.flags, &status) != CUDA_SUCCESS || fn == nullptr) return fail(a.name, 1);
    if (fn != dlsym(lib, a.expect)) {
      std::fprintf(stderr, "scenario: %s@%d is not the interposer's %s\n", a.name, a.version, a.expect);
      return 1;
    }
  }
  // The legacy 4-argument lookup gives the same wrappers.
  if (gpa1("cuMemAlloc", &fn, 3020, 0) != CUDA_SUCCESS || fn != dlsym(lib, "cuMemAlloc_v2")) return fail("v1", 2);
  // An unknown name: no pointer, status "not found".
  fn = reinterpret_cast<void*>(1);
  if (gpa("cuNoSuchFunction", &fn, 13000, 0, &status) != CUDA_SUCCESS || fn != nullptr ||
      status != CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND) {
    return fail("unknown symbol", 3);
  }
  // Calls through the looked-up pointers.
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*retain)(CUcontext*, CUdevice) = nullptr;
  CUresult (*set_current)(CUcontext) = nullptr;
  CUresult (*alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*free_fn)(CUdeviceptr) = nullptr;
  CUresult (*release)(CUdevice) = nullptr;
  gpa("cuInit", reinterpret_cast<void**>(&init), 2000, 0, &status);
  gpa("cuDevicePrimaryCtxRetain", reinterpret_cast<void**>(&retain), 7000, 0, &status);
  gpa("cuCtxSetCurrent", reinterpret_cast<void**>(&set_current), 4000, 0, &status);
  gpa("cuMemAlloc", reinterpret_cast<void**>(&alloc), 3020, 0, &status);
  gpa("cuMemFree", reinterpret_cast<void**>(&free_fn), 3020, 0, &status);
  gpa("cuDevicePrimaryCtxRelease", reinterpret_cast<void**>(&release), 11000, 0, &status);
  CHECK(init(0));
  CUcontext ctx = nullptr;
  CHECK(retain(&ctx, 0));
  CHECK(set_current(ctx));
  CUdeviceptr p = 0;
  CHECK(alloc(&p, 4096));
  CHECK(free_fn(p));
  CHECK(set_current(nullptr));
  CHECK(release(0));
  return 0;
}

int init_race() {
  std::vector<std::thread> threads;
  std::vector<CUresult> results(4, CUDA_ERROR_UNKNOWN);
  for (int t = 0; t < 4; ++t) threads.emplace_back([&, t] { results[static_cast<size_t>(t)] = cuInit(0); });
  for (auto& t : threads) t.join();
  for (auto r : results) {
    if (r != CUDA_SUCCESS) return fail("cuInit", r);
  }
  return 0;
}

int no_context() {
  CHECK(cuInit(0));
  CUresult r = CUDA_SUCCESS;
  std::thread worker([&] {
    CUdeviceptr p = 0;
    r = cuMemAlloc(&p, 64);
  });
  worker.join();
  return r == CUDA_ERROR_INVALID_CONTEXT ? 0 : fail("cuMemAlloc without a context", r);
}

int flags_after() {
  CHECK(cuInit(0));
  CUcontext ctx = nullptr;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
  (void)cuDevicePrimaryCtxSetFlags(0, CU_CTX_SCHED_BLOCKING_SYNC);
  CHECK(cuDevicePrimaryCtxRelease(0));
  return 0;
}

int beside_primary() {
  CHECK(cuInit(0));
  CUcontext primary = nullptr;
  CHECK(cuDevicePrimaryCtxRetain(&primary, 0));
  CUcontext own = nullptr;
  CHECK(cuCtxCreate(&own, nullptr, 0, 0));
  CHECK(cuCtxDestroy(own));
  CHECK(cuDevicePrimaryCtxRelease(0));
  return 0;
}

int unbalanced() {
  CHECK(cuInit(0));
  CUcontext ctx = nullptr;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
  CHECK(helper_push(ctx));  // the helper library never pops it
  CHECK(cuDevicePrimaryCtxRelease(0));
  return 0;
}

int forked() {
  CHECK(cuInit(0));
  CUcontext ctx = nullptr;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
  const pid_t pid = fork();
  if (pid == 0) {
    int count = 0;
    (void)cuDeviceGetCount(&count);  // CUDA in the child of an initialised parent
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CHECK(cuDevicePrimaryCtxRelease(0));
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : fail("child", status);
}

int reset_while_used() {
  CHECK(cuInit(0));
  CUcontext ctx = nullptr;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
  CHECK(helper_reset(0));  // the helper resets the context the program retained
  return 0;
}

int ignored_error() {
  CHECK(cuInit(0));
  CUcontext ctx = nullptr;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
  CHECK(cuCtxSetCurrent(ctx));
  CUstream stream = nullptr;
  CHECK(cuStreamCreateWithPriority(&stream, 0, 0));
  CUdeviceptr p = 0;
  CHECK(cuMemAlloc(&p, 64));
  auto fail_call = fake_fn<void (*)(const char*, int, int)>("drvshim_fake_fail_call");
  if (fail_call == nullptr) return fail("the fake's control API", 0);
  fail_call("cuStreamSynchronize", 1, CUDA_ERROR_LAUNCH_FAILED);
  (void)cuStreamSynchronize(stream);        // fails ...
  (void)cuMemsetD8Async(p, 0, 64, stream);  // ... and the program goes on with the stream
  CHECK(cuMemFree(p));
  CHECK(cuStreamDestroy(stream));
  CHECK(cuCtxSetCurrent(nullptr));
  CHECK(cuDevicePrimaryCtxRelease(0));
  return 0;
}

// Five driver calls (cuInit, cuDriverGetVersion x3, cuDeviceGet): what must reach the trace
// before the image ends some way other than exit().
int five_calls() {
  CHECK(cuInit(0));
  int version = 0;
  for (int i = 0; i < 3; ++i) CHECK(cuDriverGetVersion(&version));
  CUdevice dev = 0;
  CHECK(cuDeviceGet(&dev, 0));
  return 0;
}

// Ready for a signal from the test: two calls, then waits (at most 60 s).
int sleep_mode() {
  CHECK(cuInit(0));
  CUdevice dev = 0;
  CHECK(cuDeviceGet(&dev, 0));
  std::printf("ready\n");
  std::fflush(stdout);
  for (int i = 0; i < 600; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return 0;
}

// Two copies of SIGINT, the second while the first one's handler waits for the records to
// be written, with a thread that leaves SIGINT unblocked: a group kill's copy and the
// tracer's forwarded one can arrive so. The writer cannot finish meanwhile: this thread holds
// the loader lock its drain needs until the second copy was sent.
pid_t g_interrupted_thread = 0;
bool interrupted_thread_in_handler() {
  std::ifstream status("/proc/self/task/" + std::to_string(g_interrupted_thread) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("SigBlk:", 0) == 0) return (std::stoull(line.substr(7), nullptr, 16) & (1ull << (SIGINT - 1))) != 0;
  }
  return false;
}

int interrupt_twice() {
  CHECK(cuInit(0));
  g_interrupted_thread = static_cast<pid_t>(::syscall(SYS_gettid));
  std::printf("ready\n");
  std::fflush(stdout);
  std::thread([] {
    for (;;) ::pause();
  }).detach();
  std::thread([] {
    sigset_t blocked;
    sigemptyset(&blocked);
    sigaddset(&blocked, SIGINT);
    ::pthread_sigmask(SIG_BLOCK, &blocked, nullptr);
    ::dl_iterate_phdr(
        [](dl_phdr_info*, size_t, void*) -> int {
          ::syscall(SYS_tgkill, ::getpid(), g_interrupted_thread, SIGINT);
          for (int i = 0; i < 50000 && !interrupted_thread_in_handler(); ++i) ::usleep(100);
          ::kill(::getpid(), SIGINT);
          ::usleep(50'000);
          return 1;
        },
        nullptr);
  }).detach();
  for (int i = 0; i < 600; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return fail("interrupt-twice: still running 60 s after the interrupts", 0);
}

// Five calls, then the image ends by `how`: exec (into "basic"), exec-clean (into "basic"
// with an environment without tracing), _exit, or a fatal signal by name.
int end_by(const char* self, const std::string& how) {
  if (five_calls() != 0) return 1;
  char basic_mode[] = "basic";
  char* argv[] = {const_cast<char*>(self), basic_mode, nullptr};
  if (how == "exec") {
    execv(self, argv);
    return fail("execv", errno);
  }
  if (how == "exec-clean") {
    char path[] = "PATH=/usr/bin:/bin";
    char* env[] = {path, nullptr};
    execve(self, argv, env);
    return fail("execve", errno);
  }
  if (how == "exec-missing") {
    char missing[] = "/nonexistent/program";
    char* margv[] = {missing, nullptr};
    execv(missing, margv);
    return basic(false);  // the failed exec leaves this image running
  }
  if (how == "_exit") _exit(3);
  if (how == "exec-slash") {
    // The interposer's directory written differently ("dir/"): still the same directory.
    const char* interposer = std::getenv("DRVSHIM_TRACE_INTERPOSER");
    const char* llp = std::getenv("LD_LIBRARY_PATH");
    if (interposer == nullptr || llp == nullptr) return fail("not under drvshim-trace", 0);
    std::string dir = interposer;
    dir = dir.substr(0, dir.rfind('/'));
    std::string rest = llp;
    rest = rest.find(':') == std::string::npos ? "" : rest.substr(rest.find(':'));
    setenv("LD_LIBRARY_PATH", (dir + "/" + rest).c_str(), 1);
    execv(self, argv);
    return fail("execv", errno);
  }
  if (how == "heap-crash") {
    // A thread that never called the driver corrupts the heap; malloc aborts holding its
    // arena's lock, so the abort's handler must not allocate.
    std::thread t([] {
      // The thread's own arena: the block is followed by the top chunk, whose size the
      // overrun breaks ("malloc(): corrupted top size" at the next malloc from the top).
      char* volatile p = static_cast<char*>(std::malloc(100));
      std::memset(p, 0xff, 100 + 16);
      asm volatile("" : : "r"(p) : "memory");  // the overrun must happen, not be optimised away
      void* volatile q = std::malloc(5000);
      std::printf("malloc survived: %p\n", q);
    });
    t.join();
    return fail("the heap corruption was not detected", 0);
  }
  if (how == "SIGSEGV") {
    volatile int* volatile nowhere = nullptr;
    *nowhere = 1;
  }
  if (how == "SIGABRT") std::abort();
  if (how == "SIGTERM") raise(SIGTERM);
  if (how == "SIGBUS") raise(SIGBUS);
  if (how == "SIGFPE") raise(SIGFPE);
  if (how == "SIGILL") __builtin_trap();
  return fail("unknown ending", 0);
}

// A parent that loaded the driver but never initialised it forks a worker that makes calls
// and leaves with _exit (as multiprocessing's fork workers do).
int fork_worker() {
  const pid_t pid = fork();
  if (pid == 0) {
    if (five_calls() != 0) _exit(1);
    _exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : fail("worker", status);
}

// A program that closes every inherited descriptor and opens its own file: the trace must not
// land in it. argv[2]: the file.
int close_fds(const char* file) {
  CHECK(cuInit(0));
  for (int fd = 3; fd < 1024; ++fd) (void)close(fd);
  const int own = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0600);
  if (own < 0) return fail("open", errno);
  int version = 0;
  for (int i = 0; i < 200; ++i) CHECK(cuDriverGetVersion(&version));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // several of the writer's periods
  for (int i = 0; i < 200; ++i) CHECK(cuDriverGetVersion(&version));
  const char text[] = "the program's own line\n";
  if (write(own, text, sizeof text - 1) != static_cast<ssize_t>(sizeof text - 1)) return fail("write", errno);
  close(own);
  return 0;
}

// A second copy of the driver in a link-map namespace of its own (dlmopen), as plugin hosts
// and some Python environments load one: its calls are its own process in the analysis.
int dlmopen_copy() {
  CHECK(cuInit(0));
  void* copy = dlmopen(LM_ID_NEWLM, "libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (copy == nullptr) {
    std::fprintf(stderr, "scenario: dlmopen: %s\n", dlerror());
    return 1;
  }
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(copy, "cuInit"));
  auto version = reinterpret_cast<CUresult (*)(int*)>(dlsym(copy, "cuDriverGetVersion"));
  if (init == nullptr || version == nullptr) return fail("dlsym in the copy", 0);
  CHECK(init(0));
  int v = 0;
  CHECK(version(&v));
  return 0;
}

// A thread closes every descriptor above 2 in a loop (as daemons and sandboxes do) while the
// main thread calls the driver. Prints how many calls it made.
int close_range_loop() {
  CHECK(cuInit(0));
  std::atomic<bool> stop{false};
  std::thread closer([&] {
    while (!stop.load()) {
      for (int fd = 3; fd < 2048; ++fd) (void)close(fd);
    }
  });
  long calls = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  int version = 0;
  while (std::chrono::steady_clock::now() < end && calls < 100000) {
    CHECK(cuDriverGetVersion(&version));
    ++calls;
  }
  stop.store(true);
  closer.join();
  std::printf("calls=%ld\n", calls);
  return 0;
}

// A signal handler that calls the driver, interrupting a thread that records calls as fast as
// it can. Prints how many calls each made. Both use entry points the fake does not model, and the
// driver is never initialised: the fake's forwarders answer without taking a lock (the
// interrupted call could hold it), and the interposer records each as a failed call without
// reading the current context.
std::atomic<long> g_handler_calls{0};
void driver_in_handler(int) {
  std::size_t size = sizeof(int);
  int value = 0;
  (void)cuCoredumpGetAttributeGlobal(CU_COREDUMP_ENABLE_ON_EXCEPTION, &value, &size);
  g_handler_calls.fetch_add(1);
}
int signal_reentry() {
  struct sigaction sa {};
  sa.sa_handler = &driver_in_handler;
  sa.sa_flags = SA_RESTART;
  sigaction(SIGPROF, &sa, nullptr);
  // One call of each first: the interposer's one-time note about an entry point the driver
  // lacks is then made outside the handler, and only calls can be lost in it.
  long calls = 1;
  {
    std::size_t size = sizeof(int);
    int value = 0;
    (void)cuCoredumpGetAttribute(CU_COREDUMP_ENABLE_ON_EXCEPTION, &value, &size);
  }
  driver_in_handler(0);
  itimerval every{{0, 200}, {0, 200}};
  setitimer(ITIMER_PROF, &every, nullptr);
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(300);
  while (std::chrono::steady_clock::now() < end && calls < 200000) {
    std::size_t size = sizeof(int);
    int value = 0;
    (void)cuCoredumpGetAttribute(CU_COREDUMP_ENABLE_ON_EXCEPTION, &value, &size);
    ++calls;
  }
  itimerval off{};
  setitimer(ITIMER_PROF, &off, nullptr);
  signal(SIGPROF, SIG_IGN);
  std::printf("main=%ld handler=%ld\n", calls, g_handler_calls.load());
  return 0;
}

// The trace file may grow by only `room` more bytes (RLIMIT_FSIZE, as a full disk does), then
// thousands of calls.
int disk_full(long room) {
  CHECK(cuInit(0));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const char* out = std::getenv("DRVSHIM_TRACE_OUT");
  struct stat st {};
  if (out == nullptr || stat(out, &st) != 0) return fail("stat trace", errno);
  signal(SIGXFSZ, SIG_IGN);
  const rlimit lim{static_cast<rlim_t>(st.st_size + room), RLIM_INFINITY};
  if (setrlimit(RLIMIT_FSIZE, &lim) != 0) return fail("setrlimit", errno);
  int version = 0;
  for (int i = 0; i < 5000; ++i) CHECK(cuDriverGetVersion(&version));
  return 0;
}

// A stream polled until it is done: the fake answers NOT_READY 1000 times first.
int poll_stream() {
  CHECK(cuInit(0));
  CUcontext ctx = nullptr;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
  CHECK(cuCtxSetCurrent(ctx));
  CUstream stream = nullptr;
  CHECK(cuStreamCreateWithPriority(&stream, 0, 0));
  auto fail_call = fake_fn<void (*)(const char*, int, int)>("drvshim_fake_fail_call");
  if (fail_call == nullptr) return fail("the fake's control API", 0);
  for (int i = 0; i < 1000; ++i) fail_call("cuStreamQuery", 1, CUDA_ERROR_NOT_READY);
  int polls = 0;
  while (cuStreamQuery(stream) == CUDA_ERROR_NOT_READY) ++polls;
  CHECK(cuStreamDestroy(stream));
  CHECK(cuCtxSetCurrent(nullptr));
  CHECK(cuDevicePrimaryCtxRelease(0));
  std::printf("polls=%d\n", polls);
  return 0;
}

int spawn_child(const char* self) {
  char mode[] = "basic";
  char* argv[] = {const_cast<char*>(self), mode, nullptr};
  pid_t pid = 0;
  if (posix_spawn(&pid, self, nullptr, nullptr, argv, environ) != 0) return fail("posix_spawn", 0);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return fail("child", status);
  return basic(false);
}

// A driver opened by an absolute path named libcuda.so.1 (the way some frameworks
// load it): with the audit module, the handle is the interposer's.
int absolute_path() {
  const char* real = std::getenv("DRVSHIM_TRACE_REAL_LIBCUDA");
  if (real == nullptr) return fail("DRVSHIM_TRACE_REAL_LIBCUDA unset", 0);
  char dir[] = "/tmp/drvshim_abs_XXXXXX";
  if (mkdtemp(dir) == nullptr) return fail("mkdtemp", 0);
  const std::string link = std::string(dir) + "/libcuda.so.1";
  std::filesystem::create_symlink(real, link);
  void* h = dlopen(link.c_str(), RTLD_NOW);
  std::filesystem::remove_all(dir);
  if (h == nullptr) return fail("dlopen by path", 0);
  // The interposer exports a control of its own, which no driver has.
  std::printf("redirected=%d\n", dlsym(h, "drvshim_trace_set_mode") != nullptr ? 1 : 0);
  auto init = reinterpret_cast<CUresult (*)(unsigned)>(dlsym(h, "cuInit"));
  if (init == nullptr) return fail("no cuInit in the driver", 0);
  CHECK(init(0));
  return 0;
}

// A copy of the driver under another path: a second library, not the one the interposer uses.
int copied_driver() {
  const char* real = std::getenv("DRVSHIM_TRACE_REAL_LIBCUDA");
  if (real == nullptr) return fail("DRVSHIM_TRACE_REAL_LIBCUDA unset", 0);
  char dir[] = "/tmp/drvshim_copy_XXXXXX";
  if (mkdtemp(dir) == nullptr) return fail("mkdtemp", 0);
  const std::string copy = std::string(dir) + "/libcuda.so.1";
  std::filesystem::copy_file(real, copy);
  void* h = dlopen(copy.c_str(), RTLD_NOW | RTLD_LOCAL);
  std::filesystem::remove_all(dir);
  if (h == nullptr) return fail("dlopen of the copy", 0);
  auto version = reinterpret_cast<CUresult (*)(int*)>(dlsym(h, "cuDriverGetVersion"));
  int v = 0;
  if (version == nullptr || version(&v) != CUDA_SUCCESS) return fail("cuDriverGetVersion of the copy", 0);
  return 0;
}

// A lookup answered with a per-version shim (the fake, DRVSHIM_FAKE_PROC_SHIMS=1).
int proc_shim() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  auto gpa = lib != nullptr ? reinterpret_cast<Gpa2>(dlsym(lib, "cuGetProcAddress_v2")) : nullptr;
  if (gpa == nullptr) return fail("cuGetProcAddress_v2", 0);
  CUdriverProcAddressQueryResult status{};
  void* fn = nullptr;
  if (gpa("cuDeviceGetCount", &fn, 12000, 0, &status) != CUDA_SUCCESS || fn == nullptr) return fail("lookup", 0);
  if (fn != dlsym(lib, "cuDeviceGetCount")) return fail("the shim was handed out unwrapped", 0);
  CHECK(cuInit(0));
  int count = 0;
  CHECK(reinterpret_cast<CUresult (*)(int*)>(fn)(&count));
  return count == 1 ? 0 : fail("count", count);
}

// Summary mode's counters: four threads count 1000 calls each and end before the
// process does; each also makes one failing call (recorded one by one). The main
// thread counts 500 calls and one host function that sleeps 50 ms (the fake runs it
// inside cuLaunchHostFunc), so the folded time of that call is known.
int counted() {
  CHECK(cuInit(0));
  CUcontext ctx = nullptr;
  CHECK(cuDevicePrimaryCtxRetain(&ctx, 0));
  CHECK(cuCtxSetCurrent(ctx));
  std::vector<std::thread> threads;
  std::vector<int> bad(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&bad, t] {
      CUdevice d = 0;
      for (int i = 0; i < 1000; ++i) bad[static_cast<std::size_t>(t)] |= cuDeviceGet(&d, 0) != CUDA_SUCCESS;
      bad[static_cast<std::size_t>(t)] |= cuDeviceGet(&d, 99) != CUDA_ERROR_INVALID_DEVICE;
    });
  }
  for (auto& t : threads) t.join();
  for (int b : bad) {
    if (b != 0) return fail("a worker's calls", b);
  }
  CHECK(cuLaunchHostFunc(
      nullptr, [](void*) { std::this_thread::sleep_for(std::chrono::milliseconds(50)); }, nullptr));
  CUdevice d = 0;
  for (int i = 0; i < 500; ++i) CHECK(cuDeviceGet(&d, 0));
  CHECK(cuCtxSynchronize());
  CHECK(cuCtxSetCurrent(nullptr));
  CHECK(cuDevicePrimaryCtxRelease(0));
  return 0;
}

// The benchmarks' switch (drvshim_trace_set_mode): run in full mode, 3 calls in summary
// mode, 1 in full, 1 forwarded unrecorded; the answers printed.
int set_mode() {
  auto set = reinterpret_cast<int (*)(int)>(dlsym(RTLD_DEFAULT, "drvshim_trace_set_mode"));
  if (set == nullptr) return fail("drvshim_trace_set_mode not exported", 0);
  CHECK(cuInit(0));
  CUdevice d = 0;
  const int to_summary = set(1);
  for (int i = 0; i < 3; ++i) CHECK(cuDeviceGet(&d, 0));
  const int to_full = set(2);
  CHECK(cuDeviceGet(&d, 0));
  const int to_off = set(0);
  CHECK(cuDeviceGet(&d, 0));
  const int bad = set(7);
  const int back = set(2);
  std::printf("set_mode: %d %d %d %d %d\n", to_summary, to_full, to_off, bad, back);
  return 0;
}

// Entry points the driver resolves but does not export (run with the test driver
// trace_gl_driver): cuGLInit looked up twice and called four times through the pointer,
// the others looked up and never called.
int untraced(bool end_by_exit_call) {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW);
  auto gpa = lib != nullptr ? reinterpret_cast<Gpa2>(dlsym(lib, "cuGetProcAddress_v2")) : nullptr;
  if (gpa == nullptr) return fail("cuGetProcAddress_v2", 0);
  CHECK(cuInit(0));
  CUdriverProcAddressQueryResult status{};
  void* init = nullptr;
  void* init_again = nullptr;
  void* devices = nullptr;
  void* vdpau = nullptr;
  void* map = nullptr;
  CHECK(gpa("cuGLInit", &init, 2000, 0, &status));
  CHECK(gpa("cuGLInit", &init_again, 2000, 0, &status));
  CHECK(gpa("cuGLGetDevices", &devices, 4010, 0, &status));
  CHECK(gpa("cuVDPAUGetDevice", &vdpau, 3010, 0, &status));
  CHECK(gpa("cuGLMapBufferObject", &map, 7000, 2, &status));
  if (init == nullptr || devices == nullptr || vdpau == nullptr || map == nullptr) return fail("a lookup", 0);
  if (init != init_again) return fail("one entry point handed out as two pointers", 0);
  auto gl_init = reinterpret_cast<CUresult (*)(unsigned)>(init);
  for (int i = 0; i < 3; ++i) CHECK(gl_init(0));
  // The argument reaches the driver's function as passed, and its answer comes back.
  if (gl_init(1) != CUDA_ERROR_INVALID_VALUE) return fail("cuGLInit(1) through the pointer", 0);
  auto calls = fake_fn<int (*)()>("trace_gl_driver_init_calls");
  if (calls == nullptr) return fail("trace_gl_driver_init_calls", 0);
  std::printf("gl_init_calls=%d\n", calls());
  if (end_by_exit_call) {
    std::fflush(stdout);
    _exit(0);  // as a fork worker or os._exit: no exit handlers
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  if (mode == "basic") return basic(false);
  if (mode == "sleep") return sleep_mode();
  if (mode == "interrupt-twice") return interrupt_twice();
  if (mode == "poll") return poll_stream();
  if (mode == "end") return argc > 2 ? end_by(argv[0], argv[2]) : fail("end: how?", 0);
  if (mode == "fork-worker") return fork_worker();
  if (mode == "close-fds") return argc > 2 ? close_fds(argv[2]) : fail("close-fds: file?", 0);
  if (mode == "signal-reentry") return signal_reentry();
  if (mode == "close-range-loop") return close_range_loop();
  if (mode == "dlmopen") return dlmopen_copy();
  if (mode == "disk-full") return disk_full(argc > 2 ? std::atol(argv[2]) : 65536);
  if (mode == "leak") return basic(true);
  if (mode == "proc-address") return proc_address();
  if (mode == "init-race") return init_race();
  if (mode == "no-context") return no_context();
  if (mode == "flags-after") return flags_after();
  if (mode == "beside-primary") return beside_primary();
  if (mode == "unbalanced") return unbalanced();
  if (mode == "fork") return forked();
  if (mode == "reset-while-used") return reset_while_used();
  if (mode == "ignored-error") return ignored_error();
  if (mode == "spawn") return spawn_child(argv[0]);
  if (mode == "absolute-path") return absolute_path();
  if (mode == "copied-driver") return copied_driver();
  if (mode == "proc-shim") return proc_shim();
  if (mode == "counted") return counted();
  if (mode == "set-mode") return set_mode();
  if (mode == "untraced") return untraced(argc > 2 && std::string(argv[2]) == "_exit");
  std::fprintf(stderr, "scenario: unknown mode \"%s\"\n", mode.c_str());
  return 2;
}
