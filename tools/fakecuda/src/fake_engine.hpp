// SPDX-License-Identifier: Apache-2.0
// libdrvshim_fakecuda.so: a fake CUDA driver on host memory. See drvshim/fakecuda.h.
//
// The fake driver's engine: the state every area of libdrvshim_fakecuda.so
// shares, its one lock, the entry every fake driver function takes, and the
// helpers the areas share (each declared here with the file that defines it).
// Internal to the fake: the library is built with hidden visibility and
// exports only what fake_proc_table.cpp and fake_control.cpp define.
//
// Entry points are named fake_<api> and reached through cuGetProcAddress, as
// drvshim reaches the real driver, or through the exported names, which
// forward to them (fake_proc_table.cpp); the library also exports the control API. All state sits behind one mutex,
// except each thread's context stack, which is thread-local like the driver's.
#pragma once

#include <cuda.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include <drvshim/fakecuda.h>
#include "env_table.hpp"

namespace drvshim::fake {

struct FakeDevice {
  std::string name;
  int cc_major = 9;
  int cc_minor = 0;
  size_t total_mem = 0;
  unsigned char uuid[16] = {};
  std::string pci_bus_id;
  std::map<int, int> attributes;
  std::map<int, int> attribute_errors;
};

struct FakeCtx {
  int device = 0;
  unsigned flags = 0;
  bool primary = false;
  unsigned long long id = 0;
  int sticky = 0;                // a poisoning error: every later call in this context returns it
  std::map<int, size_t> limits;  // cuCtxSetLimit values (unset: the defaults in fake_runtime_support.cpp)
  std::set<FakeCtx*> peers;      // contexts this one enabled peer access to
  std::map<int, CUstreamAttrValue> default_stream_attrs;  // attributes set on the default streams
};

struct Primary {
  int refcount = 0;
  bool active = false;
  unsigned flags = 0;
  FakeCtx* ctx = nullptr;
  // As the H200's driver (580.159.04) does, a primary context activated again
  // after its last release or a reset gets the handle it had before.
  FakeCtx* previous = nullptr;
};

enum class AllocKind { device, managed, async_pool, pinned, module_global };

struct Alloc {
  size_t size = 0;
  AllocKind kind = AllocKind::device;
  FakeCtx* ctx = nullptr;
  unsigned flags = 0;
};

struct Registration {
  size_t size = 0;
  unsigned flags = 0;
  FakeCtx* ctx = nullptr;
};

struct FakeEvent;

struct HostFn {
  CUhostFn fn;
  void* data;
};

// One record of an event (or an internal marker): done once the stream
// reached it. Waits keep the record they wait for, so a later re-record of
// the event does not change what an earlier wait waits for.
struct FakeCapture;
struct FakeStream;

struct RecordState {
  bool done = false;
  std::chrono::steady_clock::time_point at;
  // Recorded on a capturing stream: a stream that waits for it joins that
  // capture (weak: the capture holds its records). Done when the capture
  // ends; the event it belongs to stays "captured" (queries refuse it).
  std::weak_ptr<FakeCapture> capture;
  bool captured = false;
  const FakeStream* recorder = nullptr;  // compared, never followed
};

// Work queued on a stream, run in order once the stream may run (not held,
// not waiting for a record). Copies, memsets and kernels run under the
// engine lock; host functions run without it.
struct FakeOp {
  enum Kind { work, kernel, record, wait, host_fn } kind = work;
  std::function<void()> run;           // work (under the engine lock), kernel (without it)
  std::shared_ptr<RecordState> state;  // record, wait
  HostFn fn{};                         // host_fn
};

struct FakeStream {
  FakeCtx* ctx = nullptr;
  std::shared_ptr<FakeCapture> capture;  // capturing: its work goes into the capture's graph
  unsigned flags = 0;
  int priority = 0;
  bool legacy = false;       // the context's legacy default stream (handle 0 or CU_STREAM_LEGACY)
  bool held = false;         // queued work does not run until released (or synchronised)
  std::deque<FakeOp> queue;  // work not yet run, in order
  int running = 0;           // a host function or kernel of this stream runs now (without the engine lock)
  int fail_with = 0;         // the next query/synchronize reports this asynchronous error
  std::map<int, CUstreamAttrValue> attrs;  // cuStreamSetAttribute
  unsigned long long id = 0;               // cuStreamGetId: given at the first question, unique in the process
};

// A graph: the work captured from streams, in the order it was submitted (a
// valid order of the captured dependencies, which the fake runs serially).
// A user object (cuUserObjectCreate): its destructor runs when the last
// reference goes, whoever held it (the program, a graph, an executable graph,
// a launch still queued). It must not call the driver, as under CUDA.
struct FakeUserObject {
  void* ptr = nullptr;
  CUhostFn destroy = nullptr;
  FakeUserObject() = default;
  FakeUserObject(const FakeUserObject&) = delete;
  FakeUserObject& operator=(const FakeUserObject&) = delete;
  ~FakeUserObject() {
    if (destroy != nullptr) destroy(ptr);
  }
};
using UserObjectRefs = std::vector<std::shared_ptr<FakeUserObject>>;  // one entry per reference

struct FakeGraph {
  FakeCtx* ctx = nullptr;
  std::vector<std::unique_ptr<FakeOp>> nodes;  // a node's handle is its op's address
  UserObjectRefs user_objects;                 // cuGraphRetainUserObject
};

struct FakeGraphExec {
  FakeCtx* ctx = nullptr;
  std::vector<FakeOp> ops;
  UserObjectRefs user_objects;  // the graph's, at instantiation
};

// A stream capture: begun on one stream, joined by streams that wait for its
// events, ended on the stream that began it.
struct FakeCapture {
  unsigned long long id = 0;
  int mode = 0;  // CUstreamCaptureMode
  std::thread::id thread;
  FakeStream* origin = nullptr;
  std::unique_ptr<FakeGraph> graph;
  bool invalidated = false;
  std::vector<FakeStream*> members;      // the origin and the streams that joined
  std::set<const FakeStream*> unjoined;  // joined streams with work the origin has not waited for
  std::vector<std::shared_ptr<RecordState>> records;
  CUgraphNode last_node = nullptr;  // the dependency array cuStreamGetCaptureInfo hands out
};

struct FakeEvent {
  FakeCtx* ctx = nullptr;
  unsigned flags = 0;
  bool recorded = false;
  std::shared_ptr<RecordState> latest;  // the last record (null: never recorded)
  bool pending() const { return latest != nullptr && !latest->done; }
};

struct FakeFunction;

struct FakeModule {
  FakeCtx* ctx = nullptr;
  std::vector<FakeFunction*> functions;
  std::map<std::string, std::pair<uintptr_t, size_t>> globals;
  // Libraries under lazy loading: a JIT error met when a kernel is first bound
  // to a context (cuKernelGetFunction), which returns it without a log, as
  // the H200's driver does.
  std::string lazy_jit_error;
  // Libraries from fatbins: the architectures of the images inside (SASS
  // runs only on its own architecture, PTX on its own or newer ones).
  bool fatbin = false;
  std::vector<int> sass_archs;
  std::vector<int> ptx_archs;
};

struct FakeFunction {
  FakeModule* module = nullptr;
  std::string name;
  std::vector<std::pair<size_t, size_t>> params;  // offset, size
  std::map<int, int> attributes;                  // set with cuFuncSetAttribute / cuKernelSetAttribute
};

struct Injection {
  std::string api;
  int remaining;  // calls of `api` still to pass before the failing one
  int code;
};

struct Engine {
  std::mutex mutex;
  std::condition_variable idle;  // a stream's host function or kernel finished
  std::string profile = "discrete";
  int driver_version = 13000;
  bool stub = false;
  bool no_device = false;
  bool initialized = false;
  std::vector<FakeDevice> devices;
  std::vector<Primary> primaries;
  std::set<FakeCtx*> live;
  std::vector<std::unique_ptr<FakeCtx>> all_contexts;  // never freed: handles stay unique (no ABA)
  unsigned long long next_ctx_id = 1;
  std::vector<Injection> injections;
  std::map<uintptr_t, Alloc> allocs;  // device, managed, stream-ordered and pinned memory, by base
  // Freed device memory, kept mapped for a while as a real driver keeps freed
  // pages (a copy into memory freed a moment ago succeeds on the GPU, and must
  // not corrupt this process's heap here); the oldest goes past kQuarantine bytes.
  std::deque<std::pair<uintptr_t, size_t>> quarantine;
  size_t quarantined = 0;
  std::map<uintptr_t, Registration> registered;  // host registrations, by base
  std::set<FakeStream*> streams;
  std::map<FakeCtx*, std::unique_ptr<FakeStream>> legacy_streams;  // each context's legacy default stream
  bool recycle_handles = false;     // reuse the last destroyed stream's handle (ABA tests)
  bool hold_new_streams = false;    // streams created now are held (FakeStream::held)
  bool endless_param_info = false;  // cuFuncGetParamInfo never reports the end (a broken driver)
  std::vector<FakeStream*> free_streams;
  std::set<FakeEvent*> events;
  std::set<FakeGraph*> graphs;
  std::set<FakeGraphExec*> graph_execs;
  std::map<FakeUserObject*, UserObjectRefs> user_objects;  // the references the program holds
  unsigned long long next_capture_id = 1;
  unsigned long long next_stream_id = 1;
  std::set<FakeModule*> modules;
  std::set<FakeModule*> libraries;  // context-independent modules (cuLibraryLoadData)
  // cuLink states: the "SASS" the fake links is the PTX text itself, which its loaders parse.
  struct LinkState {
    std::string image;
    char* error_log = nullptr;
    size_t error_cap = 0;
    // The option arrays cuLinkCreate got: outputs are written at cuLinkComplete.
    unsigned option_count = 0;
    CUjit_option* options = nullptr;
    void** values = nullptr;
  };
  std::set<LinkState*> links;
  std::map<std::string, drvshim_fake_kernel_fn> kernels;  // CPU implementations, by entry name
  std::set<std::string> unregistered_reported;            // kernels launched without one, said once each
  std::set<std::string> refusals_reported;                // images refused, said once per kind
  unsigned long long launches = 0;
  std::vector<size_t> device_used;
  // Several GPUs (the peer-access section): pairs (device, peer) without a
  // peer-to-peer path, link attribute overrides and errors by (src, dst,
  // attribute), and the enabled directions (from context, to context).
  std::set<std::pair<int, int>> peer_unsupported;
  std::map<std::tuple<int, int, int>, int> p2p_attributes;
  std::map<std::tuple<int, int, int>, int> p2p_attribute_errors;
  std::set<std::pair<FakeCtx*, FakeCtx*>> peer_enabled;
  std::map<std::string, int> proc_status;
  std::map<std::string, unsigned long long> counts;
  std::vector<std::string> log;
  unsigned long long misuse = 0;
  std::string last_misuse;
  std::atomic<bool> deinitialized{false};
  // In a child forked after cuInit: every call that needs initialisation, and
  // cuInit itself, answers CUDA_ERROR_NOT_INITIALIZED (the real driver's answer).
  bool forked_after_init = false;
  unsigned long long calls_while_deinit = 0;
  unsigned long long generation = 0;  // bumped by reset; thread stacks from older generations are dropped
};

// ---- the engine and the common entry (fake_engine.cpp) --------------------------

Engine& engine();
// Applies DRVSHIM_FAKE_PROFILE and DRVSHIM_FAKE_FAIL once, at the first call into the fake.
void ensure_profile_from_env();

// A number from the fake's variable `name` (decimal digits, in [lo, hi]), or 0
// when unset. Anything else stops the program with a message naming the
// variable, the value and what is accepted: a test must not quietly run
// against another machine than the one it asked for.
unsigned env_number(drvshim::detail::env::Name name, unsigned lo, unsigned hi);
// Drops every object of the fake and every counter, keeping the profile's devices.
void reset_state(Engine& e);
void misuse(Engine& e, const std::string& what);
// Common entry of every fake driver function: log and count the call, then
// apply the stub profile, the deinitialised switch and injected failures.
CUresult enter(Engine& e, const char* api, bool needs_init = true);

// A test's one-shot hook at the start of a named call (drvshim_fake_before_call),
// run on the calling thread before the engine's lock is taken.
extern std::atomic<bool> g_before_call_armed;
void run_before_call(const char* name);
void set_before_call(const char* name, void (*fn)(void*), void* data);

#define FAKE_ENTER_AS(name, needs_init)                  \
  ensure_profile_from_env();                             \
  if (g_before_call_armed.load()) run_before_call(name); \
  Engine& e = engine();                                  \
  std::unique_lock<std::mutex> lock(e.mutex);            \
  if (const CUresult r_ = enter(e, name, needs_init); r_ != CUDA_SUCCESS) return r_

#define FAKE_ENTER(name) FAKE_ENTER_AS(name, true)

inline bool valid_device(const Engine& e, CUdevice dev) {
  return dev >= 0 && static_cast<size_t>(dev) < e.devices.size();
}

// A device attribute of the profile (0 when the profile lacks it).
inline int attr(const Engine& e, int device, CUdevice_attribute a) {
  const auto& attrs = e.devices[static_cast<size_t>(device)].attributes;
  auto it = attrs.find(a);
  return it == attrs.end() ? 0 : it->second;
}

inline FakeCtx* as_ctx(CUcontext c) { return reinterpret_cast<FakeCtx*>(c); }
inline CUcontext as_cu(FakeCtx* c) { return reinterpret_cast<CUcontext>(c); }

inline bool is_live(const Engine& e, FakeCtx* c) { return c != nullptr && e.live.count(c) != 0; }

// ---- profiles (fake_profiles.cpp) ----------------------------------------------------

// Sets the devices and driver version of a profile; false for an unknown name.
bool apply_profile(Engine& e, const std::string& name);

// ---- contexts (fake_contexts.cpp) ----------------------------------------------------

// This thread's context stack (emptied when the engine was reset since its last use).
std::vector<FakeCtx*>& ctx_stack(Engine& e);
FakeCtx* new_ctx(Engine& e, int device, unsigned flags, bool primary);
// The current context, or the error the driver gives without a usable one.
CUresult current(Engine& e, FakeCtx** out);

// ---- streams: the queue model (fake_streams.cpp) ----------------------------------

// The stream's context, or the error for an unusable handle.
CUresult stream_ctx(Engine& e, CUstream s, FakeCtx** out);
FakeStream* legacy_of(Engine& e, FakeCtx* ctx);
// The queue a handle's work goes to: a user stream, the context's legacy
// stream (0 or CU_STREAM_LEGACY), or none (the per-thread default stream:
// its work runs at once). Call after stream_ctx() succeeded.
FakeStream* queue_of(Engine& e, CUstream s, FakeCtx* ctx);
std::vector<FakeStream*> all_queues(Engine& e);
// Runs what may run, on every stream, until nothing moves (see fake_streams.cpp).
void pump(Engine& e, std::unique_lock<std::mutex>& lock, const std::set<FakeStream*>& forced = {});
// Runs `st`'s queue to its end, held or not, with everything it waits for.
void drain(Engine& e, std::unique_lock<std::mutex>& lock, FakeStream* st);
// Queues `op` on `st` with the legacy default stream's implicit ordering, then
// runs what may run. `st` null: the per-thread default stream (runs at once).
[[nodiscard]] CUresult submit(Engine& e, std::unique_lock<std::mutex>& lock, FakeStream* st, FakeOp op);
[[nodiscard]] CUresult submit_work(Engine& e, std::unique_lock<std::mutex>& lock, FakeStream* st,
                                   std::function<void()> run);
// Whether work on `st` would have to wait (held, or work already queued).
bool queued(const FakeStream* st);
// Whether work on `st` must wait for another stream's queued work through
// the legacy stream's implicit ordering (see submit()).
bool must_wait_implicitly(Engine& e, const FakeStream* st);
// Runs every queue (of `ctx`, or of every context) to its end.
void drain_everything(Engine& e, std::unique_lock<std::mutex>& lock, FakeCtx* ctx = nullptr);
// A synchronous operation: ordered after the legacy stream's work (and through
// it every blocking stream's), and complete on return.
[[nodiscard]] CUresult run_synchronously(Engine& e, std::unique_lock<std::mutex>& lock, FakeCtx* ctx,
                                         std::function<void()> run);
// CUDA_ERROR_STREAM_CAPTURE_IMPLICIT when the legacy stream's work would wait
// for a capturing blocking stream of its context; `invalidate`: and that
// capture is over (fake_streams.cpp).
CUresult implicit_capture_dependency(Engine& e, FakeStream* legacy, bool invalidate);
// Whether this thread may make a call a capture prohibits (an allocation, a
// free): not while a capture of its own in global or thread-local mode runs,
// nor, in global mode, while another thread's global capture runs. Returns
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED when it may not (fake_graphs.cpp).
CUresult capture_permits_unsafe_call(Engine& e);
// A stream going away (destroyed, its context destroyed) leaves its capture:
// the capture it began ends invalidated, one it joined is invalidated.
void leave_capture(Engine& e, FakeStream* st);
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED when a stream of `ctx` captures (a
// context synchronisation would wait for it), which invalidates those captures.
CUresult refuse_context_wait_during_capture(Engine& e, FakeCtx* ctx);
// Submits a graph's work to `st` as one unit: nothing queued meanwhile by
// another thread runs between its nodes.
[[nodiscard]] CUresult submit_all(Engine& e, std::unique_lock<std::mutex>& lock, FakeStream* st,
                                  const std::vector<FakeOp>& ops);
// A live user stream (not a default stream), or null.
FakeStream* user_stream(Engine& e, CUstream s);
// The asynchronous error injected on a stream, reported once; sticky ones poison its context.
CUresult take_failure(FakeStream* st);
// Whether this thread runs a host function now (CUDA calls are refused there).
bool in_host_function();

// ---- memory (fake_memory.cpp) --------------------------------------------------------

// The allocation containing [p, p+n), if any.
const std::pair<const uintptr_t, Alloc>* find_alloc(const Engine& e, uintptr_t p, size_t n);
// Whether the device can address [p, p+n): device-side allocations, mapped
// pinned memory, registered ranges (this fake always has unified addressing).
bool device_accessible(const Engine& e, uintptr_t p, size_t n);
CUresult new_alloc(Engine& e, FakeCtx* ctx, size_t size, AllocKind kind, unsigned flags, uintptr_t* out);
// Whether [p, p+n) is page-locked host memory (pinned or registered).
bool page_locked(const Engine& e, uintptr_t p, size_t n);

// ---- PTX and the JIT's outputs (fake_ptx.cpp) --------------------------------------

// Parses entries and globals; returns an error text for unreadable PTX.
std::string parse_ptx(const std::string& ptx, FakeModule& m);
// Refuses an image the fake cannot read (a CUBIN, a fatbin given to
// cuModuleLoadData, a compressed fatbin) with CUDA_ERROR_INVALID_IMAGE, the
// reason in the JIT error log and, the first time, on stderr: the error code
// alone suggests an image built for another architecture. (fake_ptx.cpp)
CUresult refuse_image(Engine& e, const char* what, unsigned n, CUjit_option* opts, void** values);
void write_log(unsigned n, CUjit_option* opts, void** values, CUjit_option buffer, CUjit_option size_opt,
               const std::string& text);
// CU_JIT_WALL_TIME "overwrites the option value" with a float (see fake_ptx.cpp).
void write_wall_time(unsigned n, CUjit_option* opts, void** values, float ms);
// The info log: a summary line, and with CU_JIT_LOG_VERBOSE ptxas's lines per entry.
std::string info_log(const FakeModule& m, unsigned n, CUjit_option* opts, void** values);

// ---- modules and libraries (fake_modules.cpp, fake_libraries.cpp) --------------------

// A function of a loaded module or library, or null.
FakeFunction* live_function(Engine& e, CUfunction f);
// Whether a library can run on `device`: PTX for it or an older architecture,
// or SASS for exactly its architecture.
bool library_runs_on(const Engine& e, const FakeModule& l, int device);

// ---- launches (fake_launch.cpp, fake_cpu_kernels.cpp) --------------------------------

// The fake's occupancy model, one for every call that depends on it (the
// occupancy queries, the block-size suggestion, the cooperative launch's
// check), from the device's attributes: resident blocks, warps (threads are
// placed in whole warps) and shared memory per multiprocessor, with the
// driver's reserve per block. 0 for a block the model cannot place: larger
// than the device's or the function's limit, or, given a function, more
// dynamic shared memory than it may use (48 KiB without its opt-in).
struct FakeFunction;
int resident_blocks_per_sm(const Engine& e, int device, const FakeFunction* f, unsigned block_threads,
                           size_t shared_bytes);
// The device a live function's occupancy is asked about: its module's
// context's (a library's function, bound to no context: the current one's, else 0).
int function_device(Engine& e, CUfunction f);

// The built-in CPU version of a kernel of this name with this many parameters, or null.
drvshim_fake_kernel_fn builtin_kernel(const std::string& name, size_t parameters);

// ---- several GPUs (fake_peer.cpp) ----------------------------------------------------

// Ends every peer access from and to a context that is going away.
void forget_peer_access(Engine& e, FakeCtx* ctx);
bool peer_path(const Engine& e, int dev, int peer);

// ---- the proc table (fake_proc_table.cpp) ---------------------------------------------

struct ProcEntry {
  const char* name;
  int since;  // the ABI version this variant was introduced in
  void* fn;
};

template <class F>
void* erase_fn(F f) {
  void* p = nullptr;
  static_assert(sizeof(f) == sizeof(p));
  std::memcpy(&p, &f, sizeof(p));
  return p;
}

// Each area's entry points for cuGetProcAddress; fake_proc_table.cpp joins them.
std::vector<ProcEntry> error_procs();
std::vector<ProcEntry> device_procs();
std::vector<ProcEntry> context_procs();
std::vector<ProcEntry> stream_procs();
std::vector<ProcEntry> event_procs();
std::vector<ProcEntry> memory_procs();
std::vector<ProcEntry> copy_procs();
std::vector<ProcEntry> module_procs();
std::vector<ProcEntry> link_procs();
std::vector<ProcEntry> library_procs();
std::vector<ProcEntry> launch_procs();
std::vector<ProcEntry> runtime_support_procs();
std::vector<ProcEntry> peer_procs();
std::vector<ProcEntry> graph_procs();
// Destroys every graph and executable graph (drvshim_fake_reset).
void reset_graphs(Engine& e);
// Why `api` cannot name an injected failure (empty: it can).
std::string injection_problem(const std::string& api);
// The exported names whose base the fake implements at another ABI only, comma-separated.
std::string export_gaps();

// Entry points called directly from another file: the exported
// cuDriverGetVersion, and cuGetProcAddress's per-version shim of cuDeviceGetCount.
CUresult fake_cuDriverGetVersion_impl(int* version);
CUresult fake_cuDeviceGetCount(int* count);

}  // namespace drvshim::fake
