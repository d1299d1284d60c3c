// libdrvshim_fakecuda.so: a fake CUDA driver on host memory. See fake_control.h.
//
// Entry points are named fake_<api> and reached only through cuGetProcAddress,
// as drvshim reaches the real driver; the library exports cuDriverGetVersion,
// cuGetProcAddress(_v2) and the control API. All state sits behind one mutex,
// except each thread's context stack, which is thread-local like the driver's.
#include <cuda.h>
#include <pthread.h>

#include <algorithm>
#include <chrono>
#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <thread>
#include <utility>
#include <vector>

#include "fake_control.h"

namespace {

struct ErrorEntry {
  int code;
  const char* name;
  const char* description;
};
constexpr ErrorEntry kErrors[] = {
#define DRVSHIM_CU_ERROR(code, name, description) {code, name, description},
#include "cu_errors.inc"
#undef DRVSHIM_CU_ERROR
};

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
  int sticky = 0;  // a poisoning error: every later call in this context returns it
  std::map<int, size_t> limits;      // cuCtxSetLimit values (unset: the defaults in fake_cuda_rt.inc)
  std::set<FakeCtx*> peers;          // contexts this one enabled peer access to
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
struct RecordState {
  bool done = false;
  std::chrono::steady_clock::time_point at;
};

// Work queued on a stream, run in order once the stream may run (not held,
// not waiting for a record). Copies, memsets and kernels run under the
// engine lock; host functions run without it.
struct FakeOp {
  enum Kind { work, kernel, record, wait, host_fn } kind = work;
  std::function<void()> run;             // work (under the engine lock), kernel (without it)
  std::shared_ptr<RecordState> state;    // record, wait
  HostFn fn{};                           // host_fn
};

struct FakeStream {
  FakeCtx* ctx = nullptr;
  unsigned flags = 0;
  int priority = 0;
  bool legacy = false;             // the context's legacy default stream (handle 0 or CU_STREAM_LEGACY)
  bool held = false;               // queued work does not run until released (or synchronised)
  std::deque<FakeOp> queue;        // work not yet run, in order
  int running = 0;                 // a host function or kernel of this stream runs now (without the engine lock)
  int fail_with = 0;               // the next query/synchronize reports this asynchronous error
  std::map<int, CUstreamAttrValue> attrs;  // cuStreamSetAttribute
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
  std::map<uintptr_t, Alloc> allocs;             // device, managed, stream-ordered and pinned memory, by base
  std::map<uintptr_t, Registration> registered;  // host registrations, by base
  std::set<FakeStream*> streams;
  std::map<FakeCtx*, std::unique_ptr<FakeStream>> legacy_streams;  // each context's legacy default stream
  bool recycle_handles = false;          // reuse the last destroyed stream's handle (ABA tests)
  bool endless_param_info = false;       // cuFuncGetParamInfo never reports the end (a broken driver)
  std::vector<FakeStream*> free_streams;
  std::set<FakeEvent*> events;
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

Engine* g_engine = nullptr;

Engine& engine() {
  static Engine* e = [] {
    g_engine = new Engine;  // never destroyed: drvshim may call during exit
    // The engine's lock is held across fork(), so a child never inherits it
    // locked by a thread that does not exist there.
    pthread_atfork([] { g_engine->mutex.lock(); }, [] { g_engine->mutex.unlock(); },
                   [] {
                     if (g_engine->initialized) g_engine->forked_after_init = true;
                     g_engine->mutex.unlock();
                   });
    return g_engine;
  }();
  return *e;
}

struct ThreadStack {
  unsigned long long generation = 0;
  std::vector<FakeCtx*> stack;
};
thread_local ThreadStack t_stack;

// Set while this thread runs a host function: the driver forbids CUDA calls
// there ("may result in CUDA_ERROR_NOT_PERMITTED"); the fake always refuses them.
thread_local int t_in_host_fn = 0;
struct InHostFn {
  InHostFn() { ++t_in_host_fn; }
  ~InHostFn() { --t_in_host_fn; }
  InHostFn(const InHostFn&) = delete;
  InHostFn& operator=(const InHostFn&) = delete;
};

std::vector<FakeCtx*>& ctx_stack(Engine& e) {
  if (t_stack.generation != e.generation) {
    t_stack.stack.clear();
    t_stack.generation = e.generation;
  }
  return t_stack.stack;
}

void misuse(Engine& e, const std::string& what) {
  ++e.misuse;
  e.last_misuse = what;
}

FakeDevice h200(int index) {
  FakeDevice d;
  d.name = "NVIDIA H200";
  d.cc_major = 9;
  d.cc_minor = 0;
  d.total_mem = 150754820096ull;  // 143771 MiB
  for (int i = 0; i < 16; ++i) d.uuid[i] = static_cast<unsigned char>(0x10 * (index + 1) + i);
  char bus[32];
  std::snprintf(bus, sizeof bus, "00000000:%02X:00.0", 0x18 + index);
  d.pci_bus_id = bus;
  d.attributes = {
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
      {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
      {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 65536},
      {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 1980000},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 132},
      {CU_DEVICE_ATTRIBUTE_INTEGRATED, 0},
      {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, 0},
      {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
      {CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 1},
      {CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0x18 + index},
      {CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0},
      {CU_DEVICE_ATTRIBUTE_TCC_DRIVER, 0},
      {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 3201000},
      {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 6144},
      {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 62914560},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048},
      {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 3},
      {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
      {CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 9},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 0},
      {CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 233472},
      {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1},
      {CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD, 0},
      {CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 0},
      {CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0},
      {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 1},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 1},
      {CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1},
      {CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, 0},
      {CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, 0},
      {CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 1},
      // The rest of what cudaGetDeviceProperties reads, as an H200 reports it.
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X, 1024},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y, 1024},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z, 64},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X, 2147483647},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y, 65535},
      {CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z, 65535},
      {CU_DEVICE_ATTRIBUTE_TOTAL_CONSTANT_MEMORY, 65536},
      {CU_DEVICE_ATTRIBUTE_MAX_PITCH, 2147483647},
      {CU_DEVICE_ATTRIBUTE_TEXTURE_ALIGNMENT, 512},
      {CU_DEVICE_ATTRIBUTE_TEXTURE_PITCH_ALIGNMENT, 32},
      {CU_DEVICE_ATTRIBUTE_SURFACE_ALIGNMENT, 512},
      {CU_DEVICE_ATTRIBUTE_GPU_OVERLAP, 1},
      {CU_DEVICE_ATTRIBUTE_KERNEL_EXEC_TIMEOUT, 0},
      {CU_DEVICE_ATTRIBUTE_GLOBAL_L1_CACHE_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_LOCAL_L1_CACHE_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR, 65536},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_PREEMPTION_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN, 232448},
      {CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR, 32},
      {CU_DEVICE_ATTRIBUTE_MAX_PERSISTING_L2_CACHE_SIZE, 47185920},
      {CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE, 134213632},
      {CU_DEVICE_ATTRIBUTE_RESERVED_SHARED_MEMORY_PER_BLOCK, 1024},
      {CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD_GROUP_ID, index},
      {CU_DEVICE_ATTRIBUTE_IPC_EVENT_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_GPU_DIRECT_RDMA_SUPPORTED, 1},
  };
  return d;
}

FakeDevice tx1() {
  FakeDevice d;
  d.name = "NVIDIA Tegra X1";
  d.cc_major = 5;
  d.cc_minor = 3;
  d.total_mem = 4052041728ull;
  for (int i = 0; i < 16; ++i) d.uuid[i] = static_cast<unsigned char>(0xa0 + i);
  d.pci_bus_id = "00000000:00:00.0";
  d.attributes = {
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK, 1024},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK, 49152},
      {CU_DEVICE_ATTRIBUTE_WARP_SIZE, 32},
      {CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK, 32768},
      {CU_DEVICE_ATTRIBUTE_CLOCK_RATE, 998400},
      {CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 2},
      {CU_DEVICE_ATTRIBUTE_INTEGRATED, 1},
      {CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 1},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_MODE, 0},
      {CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS, 1},
      {CU_DEVICE_ATTRIBUTE_ECC_ENABLED, 0},
      {CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, 0},
      {CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID, 0},
      {CU_DEVICE_ATTRIBUTE_TCC_DRIVER, 0},
      {CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, 13000},
      {CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, 64},
      {CU_DEVICE_ATTRIBUTE_L2_CACHE_SIZE, 262144},
      {CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR, 2048},
      {CU_DEVICE_ATTRIBUTE_ASYNC_ENGINE_COUNT, 1},
      {CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING, 1},
      {CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, 0},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 5},
      {CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 3},
      {CU_DEVICE_ATTRIBUTE_STREAM_PRIORITIES_SUPPORTED, 1},
      {CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR, 65536},
      {CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY, 1},
      {CU_DEVICE_ATTRIBUTE_MULTI_GPU_BOARD, 0},
      {CU_DEVICE_ATTRIBUTE_HOST_NATIVE_ATOMIC_SUPPORTED, 0},
      {CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS, 0},
      {CU_DEVICE_ATTRIBUTE_CONCURRENT_MANAGED_ACCESS, 0},
      {CU_DEVICE_ATTRIBUTE_CAN_USE_HOST_POINTER_FOR_REGISTERED_MEM, 0},
      {CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH, 1},
      {CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED, 0},
      {CU_DEVICE_ATTRIBUTE_PAGEABLE_MEMORY_ACCESS_USES_HOST_PAGE_TABLES, 0},
      {CU_DEVICE_ATTRIBUTE_DIRECT_MANAGED_MEM_ACCESS_FROM_HOST, 0},
      {CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED, 0},
      {CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED, 0},
      {CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH, 0},
  };
  return d;
}

FakeDevice a100_old() {
  FakeDevice d = h200(0);
  d.name = "NVIDIA A100-SXM4-40GB";
  d.cc_major = 8;
  d.cc_minor = 0;
  d.total_mem = 42505273344ull;
  d.attributes[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] = 8;
  d.attributes[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR] = 0;
  d.attributes[CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT] = 108;
  // Attributes newer than this driver are unknown to it (CUDA_ERROR_INVALID_VALUE).
  d.attributes.erase(CU_DEVICE_ATTRIBUTE_CLUSTER_LAUNCH);
  return d;
}

bool apply_profile(Engine& e, const std::string& name) {
  std::vector<FakeDevice> devices;
  int version = 13000;
  bool stub = false;
  bool no_device = false;
  if (name == "discrete") {
    devices = {h200(0)};
  } else if (name == "tx1") {
    devices = {tx1()};
  } else if (name == "dual") {
    devices = {h200(0), h200(1)};
  } else if (name == "trio") {
    devices = {h200(0), h200(1), h200(2)};  // device 2 has no peer-to-peer path to the others (see reset_state)
  } else if (name == "none") {
    no_device = true;
  } else if (name == "stub") {
    stub = true;
  } else if (name == "old") {
    version = 11080;
    devices = {a100_old()};
  } else {
    return false;
  }
  // DRVSHIM_FAKE_CC=101: every device reports compute capability 10.1 (newer
  // than NVRTC's targets, so runtime compilation takes the PTX + link path).
  if (const char* cc = std::getenv("DRVSHIM_FAKE_CC"); cc != nullptr && std::atoi(cc) > 0) {
    for (auto& d : devices) {
      d.attributes[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR] = std::atoi(cc) / 10;
      d.attributes[CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR] = std::atoi(cc) % 10;
    }
  }
  e.profile = name;
  e.driver_version = version;
  e.stub = stub;
  e.no_device = no_device;
  e.devices = std::move(devices);
  return true;
}

void reset_state(Engine& e) {
  for (auto& [base, a] : e.allocs) std::free(reinterpret_cast<void*>(base));
  e.allocs.clear();
  e.registered.clear();
  for (FakeStream* st : e.streams) delete st;
  e.streams.clear();
  for (FakeStream* st : e.free_streams) delete st;
  e.free_streams.clear();
  e.legacy_streams.clear();
  e.recycle_handles = false;
  e.endless_param_info = false;
  for (FakeEvent* ev : e.events) delete ev;
  e.events.clear();
  for (FakeModule* m : e.modules) {
    for (FakeFunction* f : m->functions) delete f;
    delete m;  // its globals were freed with the allocations above
  }
  e.modules.clear();
  for (FakeModule* l : e.libraries) {
    for (FakeFunction* f : l->functions) delete f;
    delete l;
  }
  e.libraries.clear();
  for (auto* l : e.links) delete l;
  e.links.clear();
  e.launches = 0;
  e.device_used.assign(e.devices.size(), 0);
  e.peer_enabled.clear();
  e.p2p_attributes.clear();
  e.p2p_attribute_errors.clear();
  e.peer_unsupported.clear();
  if (e.profile == "trio") e.peer_unsupported = {{0, 2}, {2, 0}, {1, 2}, {2, 1}};
  e.initialized = false;
  e.primaries.assign(e.devices.size(), Primary{});
  e.live.clear();
  e.injections.clear();
  e.proc_status.clear();
  e.counts.clear();
  e.log.clear();
  e.misuse = 0;
  e.last_misuse.clear();
  e.deinitialized = false;
  e.forked_after_init = false;
  e.calls_while_deinit = 0;
  ++e.generation;
}

void ensure_profile_from_env() {
  static std::once_flag once;
  std::call_once(once, [] {
    Engine& e = engine();
    std::lock_guard<std::mutex> lock(e.mutex);
    const char* env = std::getenv("DRVSHIM_FAKE_PROFILE");
    if (env == nullptr || !apply_profile(e, env)) apply_profile(e, "discrete");
    reset_state(e);
    // DRVSHIM_FAKE_FAIL=api:nth:code[,api:nth:code...]: failures injected from the
    // start (as drvshim_fake_fail_call), for testing whole programs such as the probe.
    if (const char* fail = std::getenv("DRVSHIM_FAKE_FAIL"); fail != nullptr) {
      std::string spec(fail);
      for (size_t start = 0; start < spec.size();) {
        const size_t end = std::min(spec.find(',', start), spec.size());
        const std::string item = spec.substr(start, end - start);
        const size_t c1 = item.find(':');
        const size_t c2 = c1 == std::string::npos ? std::string::npos : item.find(':', c1 + 1);
        if (c2 != std::string::npos) {
          const int nth = std::atoi(item.c_str() + c1 + 1);
          e.injections.push_back(Injection{item.substr(0, c1), nth > 0 ? nth - 1 : 0, std::atoi(item.c_str() + c2 + 1)});
        } else {
          std::fprintf(stderr, "fake driver: DRVSHIM_FAKE_FAIL item '%s' is not api:nth:code; ignored\n", item.c_str());
        }
        start = end + 1;
      }
    }
  });
}

// Common entry of every fake driver function: log and count the call, then
// apply the stub profile, the deinitialised switch and injected failures.
CUresult enter(Engine& e, const char* api, bool needs_init = true) {
  e.log.emplace_back(api);
  ++e.counts[api];
  if (t_in_host_fn != 0) {
    misuse(e, std::string(api) + " called inside a host function");
    return CUDA_ERROR_NOT_PERMITTED;
  }
  if (e.stub) return CUDA_ERROR_STUB_LIBRARY;
  if (e.deinitialized) {
    ++e.calls_while_deinit;
    return CUDA_ERROR_DEINITIALIZED;
  }
  for (auto it = e.injections.begin(); it != e.injections.end(); ++it) {
    if (it->api == api || it->api == "*") {
      if (it->remaining == 0) {
        const CUresult code = static_cast<CUresult>(it->code);
        e.injections.erase(it);
        return code;
      }
      --it->remaining;
    }
  }
  if (e.forked_after_init && (needs_init || std::strcmp(api, "cuInit") == 0)) return CUDA_ERROR_NOT_INITIALIZED;
  if (needs_init && !e.initialized) return CUDA_ERROR_NOT_INITIALIZED;
  return CUDA_SUCCESS;
}

#define FAKE_ENTER_AS(name, needs_init)                       \
  ensure_profile_from_env();                                  \
  Engine& e = engine();                                       \
  std::unique_lock<std::mutex> lock(e.mutex);                 \
  if (const CUresult r_ = enter(e, name, needs_init); r_ != CUDA_SUCCESS) return r_

#define FAKE_ENTER(name) FAKE_ENTER_AS(name, true)

bool valid_device(const Engine& e, CUdevice dev) { return dev >= 0 && static_cast<size_t>(dev) < e.devices.size(); }

FakeCtx* new_ctx(Engine& e, int device, unsigned flags, bool primary) {
  auto ctx = std::make_unique<FakeCtx>();
  ctx->device = device;
  ctx->flags = flags;
  ctx->primary = primary;
  ctx->id = e.next_ctx_id++;
  FakeCtx* raw = ctx.get();
  e.all_contexts.push_back(std::move(ctx));
  e.live.insert(raw);
  return raw;
}

FakeCtx* as_ctx(CUcontext c) { return reinterpret_cast<FakeCtx*>(c); }
CUcontext as_cu(FakeCtx* c) { return reinterpret_cast<CUcontext>(c); }

bool is_live(const Engine& e, FakeCtx* c) { return c != nullptr && e.live.count(c) != 0; }

// Ends every peer access from and to a context that is going away (the peer-access section).
void forget_peer_access(Engine& e, FakeCtx* ctx);

constexpr unsigned kValidCtxFlags = 0xFF;

// ---- the fake driver functions ---------------------------------------------------

CUresult fake_cuGetErrorName(CUresult error, const char** str) {
  FAKE_ENTER_AS("cuGetErrorName", false);
  for (const auto& entry : kErrors) {
    if (entry.code == static_cast<int>(error)) {
      *str = entry.name;
      return CUDA_SUCCESS;
    }
  }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuGetErrorString(CUresult error, const char** str) {
  FAKE_ENTER_AS("cuGetErrorString", false);
  for (const auto& entry : kErrors) {
    if (entry.code == static_cast<int>(error)) {
      *str = entry.description;
      return CUDA_SUCCESS;
    }
  }
  *str = nullptr;
  return CUDA_ERROR_INVALID_VALUE;
}

CUresult fake_cuInit(unsigned flags) {
  FAKE_ENTER_AS("cuInit", false);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  // DRVSHIM_FAKE_INIT_DELAY_MS: a slow first initialisation, as a real driver's, so
  // callers on several threads overlap (drvshim-trace's init-race test).
  if (const char* delay = std::getenv("DRVSHIM_FAKE_INIT_DELAY_MS"); delay != nullptr && !e.initialized) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(delay)));
    lock.lock();
  }
  if (e.no_device) return CUDA_ERROR_NO_DEVICE;
  e.initialized = true;
  return CUDA_SUCCESS;
}

CUresult fake_cuDriverGetVersion_impl(int* version) {
  FAKE_ENTER_AS("cuDriverGetVersion", false);
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = e.driver_version;
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetCount(int* count) {
  FAKE_ENTER("cuDeviceGetCount");
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(e.devices.size());
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGet(CUdevice* dev, int ordinal) {
  FAKE_ENTER("cuDeviceGet");
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetName(char* name, int len, CUdevice dev) {
  FAKE_ENTER("cuDeviceGetName");
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "%s", e.devices[static_cast<size_t>(dev)].name.c_str());
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  FAKE_ENTER("cuDeviceGetUuid");
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::memcpy(uuid->bytes, e.devices[static_cast<size_t>(dev)].uuid, 16);
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  FAKE_ENTER("cuDeviceTotalMem");
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = e.devices[static_cast<size_t>(dev)].total_mem;
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice dev) {
  FAKE_ENTER("cuDeviceGetAttribute");
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  const FakeDevice& d = e.devices[static_cast<size_t>(dev)];
  if (auto it = d.attribute_errors.find(attribute); it != d.attribute_errors.end()) {
    return static_cast<CUresult>(it->second);
  }
  auto it = d.attributes.find(attribute);
  if (it == d.attributes.end()) return CUDA_ERROR_INVALID_VALUE;
  *value = it->second;
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetPCIBusId(char* bus, int len, CUdevice dev) {
  FAKE_ENTER("cuDeviceGetPCIBusId");
  if (bus == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(bus, static_cast<size_t>(len), "%s", e.devices[static_cast<size_t>(dev)].pci_bus_id.c_str());
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceCanAccessPeer(int* can, CUdevice dev, CUdevice peer) {
  FAKE_ENTER("cuDeviceCanAccessPeer");
  if (can == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev) || !valid_device(e, peer)) return CUDA_ERROR_INVALID_DEVICE;
  // The dual profile's two H200s are peers; a device is not its own peer; see the peer-access section.
  *can = dev != peer && e.peer_unsupported.count({dev, peer}) == 0 ? 1 : 0;
  return CUDA_SUCCESS;
}

// A context is gone (destroyed, or a primary context deactivated or reset):
// as with the driver, everything made in it goes with it: streams (their
// queued work dropped), events, modules, its allocations (but for portable
// pinned memory) and host registrations.
void purge_context(Engine& e, FakeCtx* ctx) {
  for (auto it = e.streams.begin(); it != e.streams.end();) {
    if ((*it)->ctx == ctx) {
      delete *it;
      it = e.streams.erase(it);
    } else {
      ++it;
    }
  }
  e.legacy_streams.erase(ctx);
  for (auto it = e.events.begin(); it != e.events.end();) {
    if ((*it)->ctx == ctx) {
      delete *it;
      it = e.events.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = e.modules.begin(); it != e.modules.end();) {
    if ((*it)->ctx == ctx) {
      for (FakeFunction* f : (*it)->functions) delete f;
      delete *it;  // its globals are allocations of the context, freed below
      it = e.modules.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = e.allocs.begin(); it != e.allocs.end();) {
    const Alloc& a = it->second;
    const bool survives = a.kind == AllocKind::pinned && (a.flags & CU_MEMHOSTALLOC_PORTABLE) != 0;
    if (a.ctx == ctx && !survives) {
      if (a.kind != AllocKind::pinned && a.kind != AllocKind::module_global) {
        e.device_used[static_cast<size_t>(ctx->device)] -= a.size;
      }
      std::free(reinterpret_cast<void*>(it->first));
      it = e.allocs.erase(it);
    } else {
      ++it;
    }
  }
  for (auto it = e.registered.begin(); it != e.registered.end();) {
    it = it->second.ctx == ctx ? e.registered.erase(it) : std::next(it);
  }
}

CUresult fake_cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
  FAKE_ENTER("cuDevicePrimaryCtxRetain");
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  Primary& p = e.primaries[static_cast<size_t>(dev)];
  if (!p.active) {
    if (p.previous != nullptr) {
      p.ctx = p.previous;  // the same address, a fresh context
      *p.ctx = FakeCtx{};
      p.ctx->device = dev;
      p.ctx->flags = p.flags;
      p.ctx->primary = true;
      p.ctx->id = e.next_ctx_id++;
      e.live.insert(p.ctx);
    } else {
      p.ctx = new_ctx(e, dev, p.flags, true);
    }
    p.previous = p.ctx;
    p.active = true;
  }
  ++p.refcount;
  *pctx = as_cu(p.ctx);
  return CUDA_SUCCESS;
}

CUresult fake_cuDevicePrimaryCtxRelease(CUdevice dev) {
  FAKE_ENTER("cuDevicePrimaryCtxRelease");
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  Primary& p = e.primaries[static_cast<size_t>(dev)];
  if (p.refcount == 0) {
    misuse(e, "cuDevicePrimaryCtxRelease of a primary context with no retain");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (--p.refcount == 0 && p.active) {
    purge_context(e, p.ctx);
    forget_peer_access(e, p.ctx);
    e.live.erase(p.ctx);
    p.active = false;
    p.ctx = nullptr;
    // Seen on the H200 (driver 580.159.04): flags set before activation do not
    // survive the deactivation by the last release (docs/contract-cases.md).
    p.flags = 0;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuDevicePrimaryCtxSetFlags(CUdevice dev, unsigned flags) {
  FAKE_ENTER("cuDevicePrimaryCtxSetFlags");
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  if ((flags & ~kValidCtxFlags) != 0 || (flags & 0x07) == 0x03 || (flags & 0x07) == 0x05 ||
      (flags & 0x07) == 0x06 || (flags & 0x07) == 0x07) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  Primary& p = e.primaries[static_cast<size_t>(dev)];
  p.flags = flags;
  if (p.ctx != nullptr) p.ctx->flags = flags;
  return CUDA_SUCCESS;
}

CUresult fake_cuDevicePrimaryCtxGetState(CUdevice dev, unsigned* flags, int* active) {
  FAKE_ENTER("cuDevicePrimaryCtxGetState");
  if (flags == nullptr || active == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  const Primary& p = e.primaries[static_cast<size_t>(dev)];
  *flags = p.flags;
  *active = p.active ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult fake_cuDevicePrimaryCtxReset(CUdevice dev) {
  FAKE_ENTER("cuDevicePrimaryCtxReset");
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  Primary& p = e.primaries[static_cast<size_t>(dev)];
  if (p.active) {
    purge_context(e, p.ctx);
    forget_peer_access(e, p.ctx);
    e.live.erase(p.ctx);
    p.active = false;
    p.ctx = nullptr;
  }
  p.flags = 0;
  return CUDA_SUCCESS;
}

CUresult create_ctx(Engine& e, CUcontext* pctx, unsigned flags, CUdevice dev) {
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  if ((flags & ~kValidCtxFlags) != 0) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = new_ctx(e, dev, flags, false);
  ctx_stack(e).push_back(ctx);
  *pctx = as_cu(ctx);
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxCreate_v4(CUcontext* pctx, CUctxCreateParams* /*params*/, unsigned flags, CUdevice dev) {
  FAKE_ENTER("cuCtxCreate");
  return create_ctx(e, pctx, flags, dev);
}

CUresult fake_cuCtxCreate_v2(CUcontext* pctx, unsigned flags, CUdevice dev) {
  FAKE_ENTER("cuCtxCreate");
  return create_ctx(e, pctx, flags, dev);
}

CUresult fake_cuCtxDestroy(CUcontext c) {
  FAKE_ENTER("cuCtxDestroy");
  FakeCtx* ctx = as_ctx(c);
  if (!is_live(e, ctx)) {
    misuse(e, "cuCtxDestroy of a destroyed or unknown context");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (ctx->primary) {
    misuse(e, "cuCtxDestroy of a primary context");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  purge_context(e, ctx);
  forget_peer_access(e, ctx);
  e.live.erase(ctx);
  auto& stack = ctx_stack(e);
  if (!stack.empty() && stack.back() == ctx) stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxPushCurrent(CUcontext c) {
  FAKE_ENTER("cuCtxPushCurrent");
  FakeCtx* ctx = as_ctx(c);
  if (!is_live(e, ctx)) {
    misuse(e, "cuCtxPushCurrent of a destroyed or unknown context");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  ctx_stack(e).push_back(ctx);
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxPopCurrent(CUcontext* pctx) {
  FAKE_ENTER("cuCtxPopCurrent");
  auto& stack = ctx_stack(e);
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (pctx != nullptr) *pctx = as_cu(stack.back());
  stack.pop_back();
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxSetCurrent(CUcontext c) {
  FAKE_ENTER("cuCtxSetCurrent");
  FakeCtx* ctx = as_ctx(c);
  auto& stack = ctx_stack(e);
  if (ctx == nullptr) {
    if (!stack.empty()) stack.pop_back();
    return CUDA_SUCCESS;
  }
  if (!is_live(e, ctx)) {
    misuse(e, "cuCtxSetCurrent of a destroyed or unknown context");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (stack.empty()) {
    stack.push_back(ctx);
  } else {
    stack.back() = ctx;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxGetCurrent(CUcontext* pctx) {
  FAKE_ENTER("cuCtxGetCurrent");
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  auto& stack = ctx_stack(e);
  *pctx = stack.empty() ? nullptr : as_cu(stack.back());
  return CUDA_SUCCESS;
}

// The current context, or the error the driver gives without a usable one.
CUresult current(Engine& e, FakeCtx** out) {
  auto& stack = ctx_stack(e);
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (!is_live(e, stack.back())) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (stack.back()->sticky != 0) return static_cast<CUresult>(stack.back()->sticky);
  *out = stack.back();
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxGetDevice(CUdevice* dev) {
  FAKE_ENTER("cuCtxGetDevice");
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  *dev = ctx->device;
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxGetFlags(unsigned* flags) {
  FAKE_ENTER("cuCtxGetFlags");
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  *flags = ctx->flags;
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxGetApiVersion(CUcontext c, unsigned* version) {
  FAKE_ENTER("cuCtxGetApiVersion");
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = as_ctx(c);
  if (ctx == nullptr) {
    if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  } else if (!is_live(e, ctx)) {
    misuse(e, "cuCtxGetApiVersion on a destroyed or unknown context");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *version = 12080;  // what the real driver reports for contexts it creates today (3020-era numbering differs)
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxGetId(CUcontext c, unsigned long long* id) {
  FAKE_ENTER("cuCtxGetId");
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = as_ctx(c);
  if (ctx == nullptr) {
    if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  } else if (!is_live(e, ctx)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  *id = ctx->id;
  return CUDA_SUCCESS;
}

void drain_everything(Engine& e, std::unique_lock<std::mutex>& lock, FakeCtx* ctx = nullptr);
CUresult take_failure(FakeStream* st);

CUresult fake_cuCtxSynchronize() {
  FAKE_ENTER("cuCtxSynchronize");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  // Every stream of the context, its legacy stream included, runs to its end,
  // and an error of any of them is reported.
  drain_everything(e, lock, ctx);
  for (FakeStream* st : e.streams) {
    if (st->ctx == ctx && st->fail_with != 0) return take_failure(st);
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  FAKE_ENTER("cuMemGetInfo");
  if (free_bytes == nullptr || total_bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  const size_t total = e.devices[static_cast<size_t>(ctx->device)].total_mem;
  *total_bytes = total;
  *free_bytes = total - (total / 64);  // the driver's own reservation
  return CUDA_SUCCESS;
}


// ---- streams ------------------------------------------------------------------------------

constexpr uintptr_t kLegacyStream = 0x1;
constexpr uintptr_t kPerThreadStream = 0x2;

// The stream's context, or the error for an unusable handle.
CUresult stream_ctx(Engine& e, CUstream s, FakeCtx** out) {
  const auto h = reinterpret_cast<uintptr_t>(s);
  if (h == 0 || h == kLegacyStream || h == kPerThreadStream) return current(e, out);
  auto* st = reinterpret_cast<FakeStream*>(s);
  if (e.streams.count(st) == 0) {
    misuse(e, "use of a destroyed or unknown stream");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  *out = st->ctx;
  return CUDA_SUCCESS;
}

FakeStream* legacy_of(Engine& e, FakeCtx* ctx) {
  auto& slot = e.legacy_streams[ctx];
  if (!slot) {
    slot = std::make_unique<FakeStream>();
    slot->ctx = ctx;
    slot->legacy = true;
  }
  return slot.get();
}

// The queue a handle's work goes to: a user stream, the context's legacy
// stream (0 or CU_STREAM_LEGACY), or none (the per-thread default stream:
// its work runs at once). Call after stream_ctx() succeeded.
FakeStream* queue_of(Engine& e, CUstream s, FakeCtx* ctx) {
  const auto h = reinterpret_cast<uintptr_t>(s);
  if (h == kPerThreadStream) return nullptr;
  if (h == 0 || h == kLegacyStream) return legacy_of(e, ctx);
  return reinterpret_cast<FakeStream*>(s);
}

std::vector<FakeStream*> all_queues(Engine& e) {
  std::vector<FakeStream*> out(e.streams.begin(), e.streams.end());
  for (auto& [ctx, st] : e.legacy_streams) out.push_back(st.get());
  return out;
}

// A marker at the end of `st`'s queue: a record the caller can wait for.
std::shared_ptr<RecordState> tail_marker(FakeStream* st) {
  auto state = std::make_shared<RecordState>();
  FakeOp op;
  op.kind = FakeOp::record;
  op.state = state;
  st->queue.push_back(std::move(op));
  return state;
}

void add_wait(FakeStream* st, std::shared_ptr<RecordState> state) {
  FakeOp op;
  op.kind = FakeOp::wait;
  op.state = std::move(state);
  st->queue.push_back(std::move(op));
}

// Runs what may run, on every stream, until nothing moves. Streams in
// `forced` run even when held (a synchronize waits for held work: the test
// that holds a stream decides when its work "finishes" by synchronising or
// releasing it). Host functions run without the engine lock.
void pump(Engine& e, std::unique_lock<std::mutex>& lock, const std::set<FakeStream*>& forced = {}) {
  for (;;) {
    bool moved = false, restart = false;
    for (FakeStream* st : all_queues(e)) {
      if ((st->held && forced.count(st) == 0) || st->running != 0) continue;  // running: its next op waits for it
      while (!st->queue.empty() && !restart) {
        FakeOp& op = st->queue.front();
        if (op.kind == FakeOp::wait) {
          if (!op.state->done) break;
          st->queue.pop_front();
        } else if (op.kind == FakeOp::record) {
          op.state->done = true;
          op.state->at = std::chrono::steady_clock::now();
          st->queue.pop_front();
        } else if (op.kind == FakeOp::work) {
          auto run = std::move(op.run);
          st->queue.pop_front();
          run();
        } else {
          const HostFn fn = op.fn;
          auto run = std::move(op.run);
          st->queue.pop_front();
          ++st->running;
          lock.unlock();
          if (run) {
            run();
          } else {
            InHostFn inside;
            fn.fn(fn.data);
          }
          lock.lock();
          --st->running;  // the stream object outlives this: destroying it waits for `running`
          e.idle.notify_all();
          restart = true;  // streams may have come and gone meanwhile: look again
        }
        moved = true;
      }
      if (restart) break;
    }
    if (!moved) return;
  }
}

// Runs `st`'s queue to its end, held or not, with everything it waits for
// (a synchronize, or a synchronous operation on the legacy stream).
void drain(Engine& e, std::unique_lock<std::mutex>& lock, FakeStream* st) {
  std::set<FakeStream*> forced{st};
  for (;;) {
    pump(e, lock, forced);
    const auto queues = all_queues(e);
    if (std::find(queues.begin(), queues.end(), st) == queues.end()) return;
    if (st->running != 0) {
      // Another thread runs this stream's host function: synchronising waits for it.
      e.idle.wait(lock);
      continue;
    }
    if (st->queue.empty()) return;
    // Blocked on a record queued elsewhere: that stream runs too.
    const auto state = st->queue.front().state;
    FakeStream* owner = nullptr;
    for (FakeStream* other : queues) {
      for (const FakeOp& op : other->queue) {
        if (op.kind == FakeOp::record && op.state == state) owner = other;
      }
    }
    if (owner == nullptr || forced.count(owner) != 0) return;  // nothing can complete it
    forced.insert(owner);
  }
}

// Queues `op` on `st` with the legacy default stream's implicit ordering (a
// blocking stream waits for the legacy stream's earlier work, the legacy
// stream for every blocking stream's), then runs what may run. `st` null:
// the per-thread default stream, whose work runs at once.
void submit(Engine& e, std::unique_lock<std::mutex>& lock, FakeStream* st, FakeOp op) {
  if (st == nullptr) {
    if (op.kind == FakeOp::work) {
      op.run();
    } else if (op.kind == FakeOp::kernel) {
      lock.unlock();
      op.run();
      lock.lock();
    } else if (op.kind == FakeOp::record) {
      op.state->done = true;
      op.state->at = std::chrono::steady_clock::now();
    } else if (op.kind == FakeOp::host_fn) {
      lock.unlock();
      {
        InHostFn inside;
        op.fn.fn(op.fn.data);
      }
      lock.lock();
    }
    return;
  }
  if (st->legacy) {
    for (FakeStream* other : e.streams) {
      if (other->ctx == st->ctx && (other->flags & CU_STREAM_NON_BLOCKING) == 0 && !other->queue.empty()) {
        add_wait(st, tail_marker(other));
      }
    }
  } else if ((st->flags & CU_STREAM_NON_BLOCKING) == 0) {
    auto it = e.legacy_streams.find(st->ctx);
    if (it != e.legacy_streams.end() && !it->second->queue.empty()) add_wait(st, tail_marker(it->second.get()));
  }
  st->queue.push_back(std::move(op));
  pump(e, lock);
}

void submit_work(Engine& e, std::unique_lock<std::mutex>& lock, FakeStream* st, std::function<void()> run) {
  FakeOp op;
  op.kind = FakeOp::work;
  op.run = std::move(run);
  submit(e, lock, st, std::move(op));
}

// Whether work on `st` would have to wait (held, or work already queued).
bool queued(const FakeStream* st) { return st != nullptr && (st->held || !st->queue.empty() || st->running != 0); }

// Whether work on `st` must wait for another stream's queued work through
// the legacy stream's implicit ordering (see submit()).
bool must_wait_implicitly(Engine& e, const FakeStream* st) {
  if (st == nullptr) return false;
  if (st->legacy) {
    for (FakeStream* other : e.streams) {
      if (other->ctx == st->ctx && (other->flags & CU_STREAM_NON_BLOCKING) == 0 && !other->queue.empty()) return true;
    }
    return false;
  }
  if ((st->flags & CU_STREAM_NON_BLOCKING) != 0) return false;
  auto it = e.legacy_streams.find(st->ctx);
  return it != e.legacy_streams.end() && !it->second->queue.empty();
}

// Runs every queue (of `ctx`, or of every context) to its end.
void drain_everything(Engine& e, std::unique_lock<std::mutex>& lock, FakeCtx* ctx) {
  std::set<FakeStream*> drained;
  for (bool more = true; more;) {
    more = false;
    for (FakeStream* st : all_queues(e)) {
      if ((ctx == nullptr || st->ctx == ctx) && !st->queue.empty() && drained.insert(st).second) {
        drain(e, lock, st);  // host functions may destroy streams: look again
        more = true;
        break;
      }
    }
  }
}

// A synchronous operation: ordered after the legacy stream's work (and through
// it every blocking stream's), and complete on return.
void run_synchronously(Engine& e, std::unique_lock<std::mutex>& lock, FakeCtx* ctx, std::function<void()> run) {
  FakeStream* legacy = legacy_of(e, ctx);
  submit_work(e, lock, legacy, std::move(run));
  drain(e, lock, legacy);
}

CUresult fake_cuCtxGetStreamPriorityRange(int* least, int* greatest) {
  FAKE_ENTER("cuCtxGetStreamPriorityRange");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  if (least != nullptr) *least = 0;
  if (greatest != nullptr) *greatest = -5;
  return CUDA_SUCCESS;
}

CUresult fake_cuStreamCreateWithPriority(CUstream* ps, unsigned flags, int priority) {
  FAKE_ENTER("cuStreamCreateWithPriority");
  if (ps == nullptr || flags > 1) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  FakeStream* st = nullptr;
  if (e.recycle_handles && !e.free_streams.empty()) {
    st = e.free_streams.back();
    e.free_streams.pop_back();
    *st = FakeStream{};
  } else {
    st = new FakeStream;
  }
  st->ctx = ctx;
  st->flags = flags;
  st->priority = std::clamp(priority, -5, 0);
  e.streams.insert(st);
  *ps = reinterpret_cast<CUstream>(st);
  return CUDA_SUCCESS;
}

FakeStream* user_stream(Engine& e, CUstream s) {
  auto* st = reinterpret_cast<FakeStream*>(s);
  return e.streams.count(st) != 0 ? st : nullptr;
}

// The asynchronous error injected on a stream, reported once; sticky ones poison its context.
CUresult take_failure(FakeStream* st) {
  if (st == nullptr || st->fail_with == 0) return CUDA_SUCCESS;
  const int code = std::exchange(st->fail_with, 0);
  if (code == 700 || code == 719 || (code >= 714 && code <= 718) || code == 710) st->ctx->sticky = code;
  return static_cast<CUresult>(code);
}

CUresult fake_cuStreamDestroy(CUstream s) {
  FAKE_ENTER("cuStreamDestroy");
  auto* st = reinterpret_cast<FakeStream*>(s);
  if (e.streams.count(st) == 0) {
    misuse(e, "cuStreamDestroy of a destroyed or unknown stream");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  // As the driver: destroying a stream with pending work returns at once; the
  // work still completes (here: right away, before the stream is gone).
  st->held = false;
  drain(e, lock, st);
  if (e.streams.count(st) == 0) return CUDA_SUCCESS;  // a host function destroyed it meanwhile
  e.streams.erase(st);
  if (e.recycle_handles) {
    e.free_streams.push_back(st);
  } else {
    delete st;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuStreamSynchronize(CUstream s) {
  FAKE_ENTER("cuStreamSynchronize");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  if (FakeStream* st = queue_of(e, s, ctx)) drain(e, lock, st);  // synchronising waits for the queued work
  return take_failure(user_stream(e, s));
}

CUresult fake_cuStreamQuery(CUstream s) {
  FAKE_ENTER("cuStreamQuery");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  if (const CUresult failure = take_failure(user_stream(e, s)); failure != CUDA_SUCCESS) return failure;
  pump(e, lock);
  // A held stream stands for work still running, queued work or not.
  return queued(queue_of(e, s, ctx)) ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult fake_cuLaunchHostFunc(CUstream s, CUhostFn fn, void* data) {
  FAKE_ENTER("cuLaunchHostFunc");
  if (fn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  FakeOp op;
  op.kind = FakeOp::host_fn;
  op.fn = HostFn{fn, data};
  submit(e, lock, queue_of(e, s, ctx), std::move(op));  // runs now, outside the engine lock, when the stream is idle
  return CUDA_SUCCESS;
}

// ---- events ----------------------------------------------------------------------------------

FakeEvent* live_event(Engine& e, CUevent ev) {
  auto* p = reinterpret_cast<FakeEvent*>(ev);
  return e.events.count(p) != 0 ? p : nullptr;
}

CUresult fake_cuStreamWaitEvent(CUstream s, CUevent ev, unsigned flags) {
  FAKE_ENTER("cuStreamWaitEvent");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  FakeEvent* p = live_event(e, ev);
  if (p == nullptr) {
    misuse(e, "cuStreamWaitEvent on a destroyed or unknown event");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (flags > 1) return CUDA_ERROR_INVALID_VALUE;
  // Later work on the stream waits for the event's last record (none: no wait).
  FakeStream* st = queue_of(e, s, ctx);
  if (p->pending() && st != nullptr) {
    FakeOp op;
    op.kind = FakeOp::wait;
    op.state = p->latest;
    submit(e, lock, st, std::move(op));
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuEventCreate(CUevent* pe, unsigned flags) {
  FAKE_ENTER("cuEventCreate");
  if (pe == nullptr || (flags & ~0x7u) != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_EVENT_INTERPROCESS) != 0 && (flags & CU_EVENT_DISABLE_TIMING) == 0) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  auto* ev = new FakeEvent;
  ev->ctx = ctx;
  ev->flags = flags;
  e.events.insert(ev);
  *pe = reinterpret_cast<CUevent>(ev);
  return CUDA_SUCCESS;
}

CUresult fake_cuEventDestroy(CUevent ev) {
  FAKE_ENTER("cuEventDestroy");
  FakeEvent* p = live_event(e, ev);
  if (p == nullptr) {
    misuse(e, "cuEventDestroy of a destroyed or unknown event");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  // Queued records and waits keep their own record state.
  e.events.erase(p);
  delete p;
  return CUDA_SUCCESS;
}

CUresult fake_cuEventRecord(CUevent ev, CUstream s) {
  FAKE_ENTER("cuEventRecord");
  FakeEvent* p = live_event(e, ev);
  if (p == nullptr) {
    misuse(e, "cuEventRecord of a destroyed or unknown event");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  // cuda.h: "hEvent and hStream must be from the same context otherwise CUDA_ERROR_INVALID_HANDLE".
  if (p->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
  p->recorded = true;
  p->latest = std::make_shared<RecordState>();
  FakeOp op;
  op.kind = FakeOp::record;
  op.state = p->latest;
  submit(e, lock, queue_of(e, s, ctx), std::move(op));
  return CUDA_SUCCESS;
}

CUresult fake_cuEventQuery(CUevent ev) {
  FAKE_ENTER("cuEventQuery");
  FakeEvent* p = live_event(e, ev);
  if (p == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (p->ctx->sticky != 0) return static_cast<CUresult>(p->ctx->sticky);
  pump(e, lock);
  return p->pending() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult fake_cuEventSynchronize(CUevent ev) {
  FAKE_ENTER("cuEventSynchronize");
  FakeEvent* p = live_event(e, ev);
  if (p == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (p->ctx->sticky != 0) return static_cast<CUresult>(p->ctx->sticky);
  if (!p->pending()) return CUDA_SUCCESS;
  // Waiting for the event waits for its stream's work up to the record.
  const auto state = p->latest;
  for (FakeStream* st : all_queues(e)) {
    for (const FakeOp& op : st->queue) {
      if (op.kind == FakeOp::record && op.state == state) {
        drain(e, lock, st);
        return CUDA_SUCCESS;
      }
    }
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuEventElapsedTime(float* ms, CUevent a, CUevent b) {
  FAKE_ENTER("cuEventElapsedTime");
  FakeEvent* s0 = live_event(e, a);
  FakeEvent* s1 = live_event(e, b);
  if (ms == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (s0 == nullptr || s1 == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (((s0->flags | s1->flags) & CU_EVENT_DISABLE_TIMING) != 0 || !s0->recorded || !s1->recorded) {
    return CUDA_ERROR_INVALID_HANDLE;
  }
  if (s0->pending() || s1->pending()) return CUDA_ERROR_NOT_READY;
  *ms = std::chrono::duration<float, std::milli>(s1->latest->at - s0->latest->at).count();
  return CUDA_SUCCESS;
}

// ---- memory ---------------------------------------------------------------------------------

int attr(const Engine& e, int device, CUdevice_attribute a) {
  const auto& attrs = e.devices[static_cast<size_t>(device)].attributes;
  auto it = attrs.find(a);
  return it == attrs.end() ? 0 : it->second;
}

// The allocation containing [p, p+n), if any.
const std::pair<const uintptr_t, Alloc>* find_alloc(const Engine& e, uintptr_t p, size_t n) {
  auto it = e.allocs.upper_bound(p);
  if (it == e.allocs.begin()) return nullptr;
  --it;
  if (p >= it->first && p - it->first <= it->second.size && n <= it->second.size - (p - it->first)) return &*it;
  return nullptr;
}

const std::pair<const uintptr_t, Registration>* find_registration(const Engine& e, uintptr_t p, size_t n) {
  auto it = e.registered.upper_bound(p);
  if (it == e.registered.begin()) return nullptr;
  --it;
  if (p >= it->first && p - it->first <= it->second.size && n <= it->second.size - (p - it->first)) return &*it;
  return nullptr;
}

// Whether the device can address [p, p+n): device-side allocations, mapped
// pinned memory, registered ranges (this fake always has unified addressing).
bool device_accessible(const Engine& e, uintptr_t p, size_t n) {
  if (const auto* a = find_alloc(e, p, n)) {
    return a->second.kind != AllocKind::pinned || (a->second.flags & CU_MEMHOSTALLOC_DEVICEMAP) != 0 ||
           attr(e, a->second.ctx->device, CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING) != 0;
  }
  return find_registration(e, p, n) != nullptr;
}

CUresult new_alloc(Engine& e, FakeCtx* ctx, size_t size, AllocKind kind, unsigned flags, uintptr_t* out) {
  const size_t device = static_cast<size_t>(ctx->device);
  if (kind != AllocKind::pinned) {
    const size_t total = e.devices[device].total_mem;
    if (size > total - total / 64 - e.device_used[device]) return CUDA_ERROR_OUT_OF_MEMORY;
  }
  void* p = std::malloc(size);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  if (kind != AllocKind::pinned) e.device_used[device] += size;
  e.allocs[reinterpret_cast<uintptr_t>(p)] = Alloc{size, kind, ctx, flags};
  *out = reinterpret_cast<uintptr_t>(p);
  return CUDA_SUCCESS;
}


CUresult free_alloc(Engine& e, std::unique_lock<std::mutex>& lock, uintptr_t p, bool pinned, const char* api) {
  // Freeing waits for queued work (as the driver's free synchronises), so
  // none of it touches freed memory.
  drain_everything(e, lock);
  auto it = e.allocs.find(p);
  if (it == e.allocs.end() || (it->second.kind == AllocKind::pinned) != pinned ||
      it->second.kind == AllocKind::module_global) {
    misuse(e, std::string(api) + " of a pointer that is not a live allocation of that kind");
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!pinned) e.device_used[static_cast<size_t>(it->second.ctx->device)] -= it->second.size;
  std::free(reinterpret_cast<void*>(it->first));
  e.allocs.erase(it);
  return CUDA_SUCCESS;
}

CUresult fake_cuMemAlloc(CUdeviceptr* dptr, size_t size) {
  FAKE_ENTER("cuMemAlloc");
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  uintptr_t p = 0;
  if (const CUresult r = new_alloc(e, ctx, size, AllocKind::device, 0, &p); r != CUDA_SUCCESS) return r;
  *dptr = p;
  return CUDA_SUCCESS;
}

CUresult fake_cuMemFree(CUdeviceptr p) {
  FAKE_ENTER("cuMemFree");
  if (p == 0) return CUDA_SUCCESS;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  return free_alloc(e, lock, static_cast<uintptr_t>(p), false, "cuMemFree");
}

// A memset, synchronous (`async` false: on the legacy stream, complete on
// return) or queued on stream `s`.
CUresult fake_memset(Engine& e, std::unique_lock<std::mutex>& lock, CUdeviceptr dst, unsigned value, size_t n, size_t width,
                     bool async, CUstream s) {
  FakeCtx* ctx = nullptr;
  if (const CUresult r = async ? stream_ctx(e, s, &ctx) : current(e, &ctx); r != CUDA_SUCCESS) return r;
  const auto p = static_cast<uintptr_t>(dst);
  if (p % width != 0 || !device_accessible(e, p, n * width)) return CUDA_ERROR_INVALID_VALUE;
  auto fill = [p, value, n, width] {
    auto* bytes = reinterpret_cast<unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) std::memcpy(bytes + i * width, &value, width);
  };
  if (async) {
    submit_work(e, lock, queue_of(e, s, ctx), fill);
  } else {
    run_synchronously(e, lock, ctx, fill);
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuMemsetD8(CUdeviceptr d, unsigned char v, size_t n) {
  FAKE_ENTER("cuMemsetD8");
  return fake_memset(e, lock, d, v, n, 1, false, nullptr);
}
CUresult fake_cuMemsetD16(CUdeviceptr d, unsigned short v, size_t n) {
  FAKE_ENTER("cuMemsetD16");
  return fake_memset(e, lock, d, v, n, 2, false, nullptr);
}
CUresult fake_cuMemsetD32(CUdeviceptr d, unsigned v, size_t n) {
  FAKE_ENTER("cuMemsetD32");
  return fake_memset(e, lock, d, v, n, 4, false, nullptr);
}
CUresult fake_cuMemsetD8Async(CUdeviceptr d, unsigned char v, size_t n, CUstream s) {
  FAKE_ENTER("cuMemsetD8Async");
  return fake_memset(e, lock, d, v, n, 1, true, s);
}
CUresult fake_cuMemsetD16Async(CUdeviceptr d, unsigned short v, size_t n, CUstream s) {
  FAKE_ENTER("cuMemsetD16Async");
  return fake_memset(e, lock, d, v, n, 2, true, s);
}
CUresult fake_cuMemsetD32Async(CUdeviceptr d, unsigned v, size_t n, CUstream s) {
  FAKE_ENTER("cuMemsetD32Async");
  return fake_memset(e, lock, d, v, n, 4, true, s);
}

// Whether [p, p+n) is page-locked host memory (pinned or registered).
bool page_locked(const Engine& e, uintptr_t p, size_t n) {
  if (const auto* a = find_alloc(e, p, n)) return a->second.kind == AllocKind::pinned;
  return find_registration(e, p, n) != nullptr;
}

// A copy. dst_dev/src_dev: whether each side must be device-accessible
// memory. Synchronous (`async` false) copies run on the legacy stream and are
// complete on return. Queued ones read and write when the stream reaches them,
// except that, as with the driver, a pageable source is read at once (the
// driver stages it before returning) and a copy into pageable memory returns
// only when done.
CUresult fake_copy(Engine& e, std::unique_lock<std::mutex>& lock, uintptr_t dst, bool dst_dev, uintptr_t src, bool src_dev,
                   size_t n, bool async, CUstream s) {
  FakeCtx* ctx = nullptr;
  if (const CUresult r = async ? stream_ctx(e, s, &ctx) : current(e, &ctx); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if ((dst_dev && !device_accessible(e, dst, n)) || (src_dev && !device_accessible(e, src, n))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dst == 0 || src == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!async) {
    run_synchronously(e, lock, ctx, [=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n); });
    return CUDA_SUCCESS;
  }
  FakeStream* st = queue_of(e, s, ctx);
  const bool waits = queued(st) || must_wait_implicitly(e, st);
  if (!src_dev && !page_locked(e, src, n) && waits) {
    auto staged = std::make_shared<std::vector<unsigned char>>(reinterpret_cast<const unsigned char*>(src),
                                                               reinterpret_cast<const unsigned char*>(src) + n);
    submit_work(e, lock, st, [=] { std::memcpy(reinterpret_cast<void*>(dst), staged->data(), n); });
    return CUDA_SUCCESS;
  }
  submit_work(e, lock, st, [=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n); });
  if (!dst_dev && !page_locked(e, dst, n) && waits) drain(e, lock, st);
  return CUDA_SUCCESS;
}

CUresult fake_cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t n) {
  FAKE_ENTER("cuMemcpyHtoD");
  return fake_copy(e, lock, static_cast<uintptr_t>(dst), true, reinterpret_cast<uintptr_t>(src), false, n, false, nullptr);
}
CUresult fake_cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t n) {
  FAKE_ENTER("cuMemcpyDtoH");
  return fake_copy(e, lock, reinterpret_cast<uintptr_t>(dst), false, static_cast<uintptr_t>(src), true, n, false, nullptr);
}
CUresult fake_cuMemcpyDtoD(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  FAKE_ENTER("cuMemcpyDtoD");
  return fake_copy(e, lock, static_cast<uintptr_t>(dst), true, static_cast<uintptr_t>(src), true, n, false, nullptr);
}
CUresult fake_cuMemcpyHtoDAsync(CUdeviceptr dst, const void* src, size_t n, CUstream s) {
  FAKE_ENTER("cuMemcpyHtoDAsync");
  return fake_copy(e, lock, static_cast<uintptr_t>(dst), true, reinterpret_cast<uintptr_t>(src), false, n, true, s);
}
CUresult fake_cuMemcpyDtoHAsync(void* dst, CUdeviceptr src, size_t n, CUstream s) {
  FAKE_ENTER("cuMemcpyDtoHAsync");
  return fake_copy(e, lock, reinterpret_cast<uintptr_t>(dst), false, static_cast<uintptr_t>(src), true, n, true, s);
}
CUresult fake_cuMemcpyDtoDAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream s) {
  FAKE_ENTER("cuMemcpyDtoDAsync");
  return fake_copy(e, lock, static_cast<uintptr_t>(dst), true, static_cast<uintptr_t>(src), true, n, true, s);
}

CUresult fake_cuMemHostAlloc(void** pp, size_t size, unsigned flags) {
  FAKE_ENTER("cuMemHostAlloc");
  if (pp == nullptr || size == 0 || (flags & ~0x7u) != 0) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  if ((flags & CU_MEMHOSTALLOC_DEVICEMAP) != 0 && attr(e, ctx->device, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY) == 0) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  uintptr_t p = 0;
  if (const CUresult r = new_alloc(e, ctx, size, AllocKind::pinned, flags, &p); r != CUDA_SUCCESS) return r;
  *pp = reinterpret_cast<void*>(p);
  return CUDA_SUCCESS;
}

CUresult fake_cuMemFreeHost(void* p) {
  FAKE_ENTER("cuMemFreeHost");
  return free_alloc(e, lock, reinterpret_cast<uintptr_t>(p), true, "cuMemFreeHost");
}

CUresult fake_cuMemHostGetDevicePointer(CUdeviceptr* pd, void* p, unsigned flags) {
  FAKE_ENTER("cuMemHostGetDevicePointer");
  if (pd == nullptr || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  const auto h = reinterpret_cast<uintptr_t>(p);
  const auto* a = find_alloc(e, h, 1);
  const bool mapped_pinned = a != nullptr && a->second.kind == AllocKind::pinned && device_accessible(e, h, 1);
  if (!mapped_pinned && find_registration(e, h, 1) == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *pd = h;  // unified addressing: the device sees the host address
  return CUDA_SUCCESS;
}

CUresult fake_cuMemHostRegister(void* p, size_t size, unsigned flags) {
  FAKE_ENTER("cuMemHostRegister");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  // The seed's failure: devices without host-register support refuse here.
  if (attr(e, ctx->device, CU_DEVICE_ATTRIBUTE_HOST_REGISTER_SUPPORTED) == 0) return CUDA_ERROR_NOT_SUPPORTED;
  if (p == nullptr || size == 0 || (flags & ~0xFu) != 0) return CUDA_ERROR_INVALID_VALUE;
  if ((flags & CU_MEMHOSTREGISTER_READ_ONLY) != 0 &&
      attr(e, ctx->device, CU_DEVICE_ATTRIBUTE_READ_ONLY_HOST_REGISTER_SUPPORTED) == 0) {
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  const auto h = reinterpret_cast<uintptr_t>(p);
  // Any overlap with a registration or a pinned allocation is refused, as the driver does.
  for (const auto& [base, reg] : e.registered) {
    if (h < base + reg.size && base < h + size) return CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED;
  }
  // Memory from cuMemHostAlloc is refused with INVALID_VALUE (seen on the H200,
  // driver 580.159.04; docs/contract-cases.md), not ALREADY_REGISTERED.
  for (const auto& [base, a] : e.allocs) {
    if (a.kind == AllocKind::pinned && h < base + a.size && base < h + size) return CUDA_ERROR_INVALID_VALUE;
  }
  e.registered[h] = Registration{size, flags, ctx};
  return CUDA_SUCCESS;
}

CUresult fake_cuMemHostUnregister(void* p) {
  FAKE_ENTER("cuMemHostUnregister");
  auto it = e.registered.find(reinterpret_cast<uintptr_t>(p));
  if (it == e.registered.end()) return CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED;
  e.registered.erase(it);
  return CUDA_SUCCESS;
}

CUresult fake_cuMemAllocManaged(CUdeviceptr* dptr, size_t size, unsigned flags) {
  FAKE_ENTER("cuMemAllocManaged");
  if (dptr == nullptr || size == 0 || (flags != CU_MEM_ATTACH_GLOBAL && flags != CU_MEM_ATTACH_HOST)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  if (attr(e, ctx->device, CU_DEVICE_ATTRIBUTE_MANAGED_MEMORY) == 0) return CUDA_ERROR_NOT_SUPPORTED;
  uintptr_t p = 0;
  if (const CUresult r = new_alloc(e, ctx, size, AllocKind::managed, flags, &p); r != CUDA_SUCCESS) return r;
  *dptr = p;
  return CUDA_SUCCESS;
}

CUresult fake_cuMemAllocAsync(CUdeviceptr* dptr, size_t size, CUstream s) {
  FAKE_ENTER("cuMemAllocAsync");
  if (dptr == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  if (attr(e, ctx->device, CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) == 0) return CUDA_ERROR_NOT_SUPPORTED;
  uintptr_t p = 0;
  if (const CUresult r = new_alloc(e, ctx, size, AllocKind::async_pool, 0, &p); r != CUDA_SUCCESS) return r;
  *dptr = p;
  return CUDA_SUCCESS;
}

CUresult fake_cuMemFreeAsync(CUdeviceptr p, CUstream s) {
  FAKE_ENTER("cuMemFreeAsync");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  return free_alloc(e, lock, static_cast<uintptr_t>(p), false, "cuMemFreeAsync");
}

template <class T>
void put(void* dst, T v) {
  if (dst != nullptr) std::memcpy(dst, &v, sizeof v);
}

CUresult fake_cuPointerGetAttributes(unsigned n, CUpointer_attribute* attrs, void** data, CUdeviceptr ptr) {
  FAKE_ENTER("cuPointerGetAttributes");
  if (attrs == nullptr || data == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto p = static_cast<uintptr_t>(ptr);
  const auto* a = find_alloc(e, p, 1);
  const auto* reg = a == nullptr ? find_registration(e, p, 1) : nullptr;
  for (unsigned i = 0; i < n; ++i) {
    void* d = data[i];
    const bool known = a != nullptr || reg != nullptr;
    FakeCtx* ctx = a != nullptr ? a->second.ctx : (reg != nullptr ? reg->second.ctx : nullptr);
    const uintptr_t base = a != nullptr ? a->first : (reg != nullptr ? reg->first : 0);
    const size_t size = a != nullptr ? a->second.size : (reg != nullptr ? reg->second.size : 0);
    const bool host_side = reg != nullptr || (a != nullptr && a->second.kind == AllocKind::pinned);
    switch (attrs[i]) {
      case CU_POINTER_ATTRIBUTE_CONTEXT: put(d, as_cu(ctx)); break;
      case CU_POINTER_ATTRIBUTE_MEMORY_TYPE:
        put(d, static_cast<unsigned>(!known ? 0 : host_side ? CU_MEMORYTYPE_HOST : CU_MEMORYTYPE_DEVICE));
        break;
      case CU_POINTER_ATTRIBUTE_DEVICE_POINTER: {
        // As the driver: the address "in the current context", so 0 without one.
        FakeCtx* cur = nullptr;
        put(d, static_cast<CUdeviceptr>(known && current(e, &cur) == CUDA_SUCCESS ? p : 0));
        break;
      }
      case CU_POINTER_ATTRIBUTE_HOST_POINTER:
        put(d, (known && (host_side || a->second.kind == AllocKind::managed)) ? reinterpret_cast<void*>(p) : nullptr);
        break;
      case CU_POINTER_ATTRIBUTE_IS_MANAGED: put(d, a != nullptr && a->second.kind == AllocKind::managed); break;
      case CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL: put(d, ctx != nullptr ? ctx->device : -2); break;
      case CU_POINTER_ATTRIBUTE_RANGE_START_ADDR: put(d, static_cast<CUdeviceptr>(base)); break;
      case CU_POINTER_ATTRIBUTE_RANGE_SIZE: put(d, size); break;
      default: return CUDA_ERROR_INVALID_VALUE;
    }
  }
  return CUDA_SUCCESS;
}


// ---- modules and launches ------------------------------------------------------------------------

size_t ptx_type_size(const std::string& t) {
  if (t == ".u64" || t == ".s64" || t == ".b64" || t == ".f64") return 8;
  if (t == ".u32" || t == ".s32" || t == ".b32" || t == ".f32") return 4;
  if (t == ".u16" || t == ".s16" || t == ".b16" || t == ".f16") return 2;
  if (t == ".u8" || t == ".s8" || t == ".b8") return 1;
  return 0;
}

// One declaration such as ".param .align 8 .b8 p[24]" or ".global .u32 counter":
// returns (size, alignment), or (0, 0) when it cannot be read.
std::pair<size_t, size_t> ptx_decl(const std::string& decl) {
  std::vector<std::string> words;
  std::string w;
  for (char c : decl) {
    if (c == ' ' || c == '\t' || c == ',' || c == ';') {
      if (!w.empty()) words.push_back(w);
      w.clear();
    } else {
      w += c;
    }
  }
  if (!w.empty()) words.push_back(w);
  size_t align = 0;
  size_t elem = 0;
  size_t count = 1;
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == ".align" && i + 1 < words.size()) align = std::strtoul(words[i + 1].c_str(), nullptr, 10);
    if (const size_t sz = ptx_type_size(words[i]); sz != 0) elem = sz;
    const auto lb = words[i].find('[');
    if (lb != std::string::npos && elem != 0) count = std::strtoul(words[i].c_str() + lb + 1, nullptr, 10);
  }
  if (elem == 0) return {0, 0};
  return {elem * count, align != 0 ? align : elem};
}

std::string ptx_name(const std::string& decl) {
  // The last word, without an array suffix.
  auto end = decl.find_last_not_of(" \t;,)");
  if (end == std::string::npos) return {};
  auto start = decl.find_last_of(" \t", end);
  std::string name = decl.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
  if (auto lb = name.find('['); lb != std::string::npos) name.resize(lb);
  return name;
}

// Writes a variable's initializer ("5", "0f3F800000", "{1, 2, 3}") into its memory.
void ptx_initialize(const std::string& decl, std::string values, unsigned char* mem, size_t size) {
  size_t elem = 0;
  for (const char* t : {".u64", ".s64", ".b64", ".f64", ".u32", ".s32", ".b32", ".f32", ".u16", ".s16", ".b16", ".u8",
                        ".s8", ".b8"}) {
    if (decl.find(t) != std::string::npos) {
      elem = ptx_type_size(t);
      break;
    }
  }
  if (elem == 0) return;
  for (char& c : values) {
    if (c == '{' || c == '}' || c == ',') c = ' ';
  }
  size_t offset = 0;
  const char* p = values.c_str();
  while (offset + elem <= size) {
    while (*p == ' ' || *p == '\t' || *p == '\n') ++p;
    if (*p == '\0') break;
    unsigned long long bits = 0;
    char* next = nullptr;
    if (p[0] == '0' && (p[1] == 'f' || p[1] == 'd' || p[1] == 'F' || p[1] == 'D')) {
      bits = std::strtoull(p + 2, &next, 16);
    } else {
      bits = static_cast<unsigned long long>(std::strtoll(p, &next, 0));
    }
    if (next == p) break;
    std::memcpy(mem + offset, &bits, elem);
    offset += elem;
    p = next;
  }
}

// Parses entries and globals; returns an error text for unreadable PTX.
std::string parse_ptx(const std::string& ptx, FakeModule& m) {
  if (ptx.find(".version") == std::string::npos) return "ptxas fatal : Parsing error: missing .version directive";
  if (const auto bad = ptx.find("syntax_error"); bad != std::string::npos) {
    const auto line = 1 + std::count(ptx.begin(), ptx.begin() + static_cast<long>(bad), '\n');
    return "ptxas application ptx input, line " + std::to_string(line) + "; fatal   : Parsing error near 'syntax_error': syntax error";
  }
  size_t pos = 0;
  while ((pos = ptx.find(".entry", pos)) != std::string::npos) {
    const auto open = ptx.find('(', pos);
    const auto close = ptx.find(')', open);
    if (open == std::string::npos || close == std::string::npos) return "ptxas fatal : unterminated .entry";
    auto* f = new FakeFunction;
    f->module = &m;
    std::string head = ptx.substr(pos + 6, open - pos - 6);
    head.erase(0, head.find_first_not_of(" \t\n"));
    head.erase(head.find_last_not_of(" \t\n") + 1);
    f->name = head;
    size_t offset = 0;
    std::string params = ptx.substr(open + 1, close - open - 1);
    size_t p = 0;
    while ((p = params.find(".param", p)) != std::string::npos) {
      const auto end = params.find_first_of(",", p);
      const auto decl = params.substr(p + 6, (end == std::string::npos ? params.size() : end) - p - 6);
      const auto [size, align] = ptx_decl(decl);
      if (size == 0) {
        delete f;
        return "ptxas fatal : unreadable parameter '" + decl + "'";
      }
      offset = (offset + align - 1) / align * align;
      f->params.emplace_back(offset, size);
      offset += size;
      p += 6;
    }
    m.functions.push_back(f);
    pos = close;
  }
  // Module-scope variables: __device__ (.global) and __constant__ (.const), with
  // simple initializers ("= 5", "= 0f3F800000", "= {1, 2}") applied.
  for (const char* space : {".global", ".const"}) {
    const size_t space_len = std::strlen(space);
    pos = 0;
    while ((pos = ptx.find(space, pos)) != std::string::npos) {
      const auto end = ptx.find(';', pos);
      const std::string whole = ptx.substr(pos + space_len, end - pos - space_len);
      pos = end;
      const auto eq = whole.find('=');
      const std::string decl = whole.substr(0, eq);
      const auto [size, align] = ptx_decl(decl);
      if (size == 0) continue;
      // The space also matches instructions (ld.global...): a name seen twice is not a second variable.
      const std::string name = ptx_name(decl);
      if (name.empty() || m.globals.count(name) != 0) continue;
      void* mem = std::calloc(1, size);
      if (eq != std::string::npos) ptx_initialize(decl, whole.substr(eq + 1), static_cast<unsigned char*>(mem), size);
      m.globals[name] = {reinterpret_cast<uintptr_t>(mem), size};
    }
  }
  return {};
}

void write_log(unsigned n, CUjit_option* opts, void** values, CUjit_option buffer, CUjit_option size_opt,
               const std::string& text) {
  char* buf = nullptr;
  size_t cap = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (opts[i] == buffer) buf = static_cast<char*>(values[i]);
    if (opts[i] == size_opt) cap = reinterpret_cast<uintptr_t>(values[i]);
  }
  if (buf != nullptr && cap > 0) std::snprintf(buf, cap, "%s", text.c_str());
}

// CU_JIT_WALL_TIME "overwrites the option value" with a float: the slot
// itself, as the driver does (contract case "JIT wall time reported").
void write_wall_time(unsigned n, CUjit_option* opts, void** values, float ms) {
  for (unsigned i = 0; i < n; ++i) {
    if (opts[i] == CU_JIT_WALL_TIME) std::memcpy(&values[i], &ms, sizeof ms);
  }
}

// The info log: a summary line, and with CU_JIT_LOG_VERBOSE ptxas's lines for
// every entry function (about 300 bytes each, as on the H200).
std::string info_log(const FakeModule& m, unsigned n, CUjit_option* opts, void** values) {
  std::string log = "ptxas info    : fake JIT: " + std::to_string(m.functions.size()) + " entry function(s)\n";
  bool verbose = false;
  for (unsigned i = 0; i < n; ++i) {
    if (opts[i] == CU_JIT_LOG_VERBOSE) verbose = reinterpret_cast<uintptr_t>(values[i]) != 0;
  }
  if (!verbose) return log;
  log += "ptxas info    : 0 bytes gmem\n";
  for (const FakeFunction* f : m.functions) {
    log += "ptxas info    : Compiling entry function '" + f->name + "' for 'sm_90'\n";
    log += "ptxas info    : Function properties for " + f->name + "\n";
    log += "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
    log += "ptxas info    : Used 32 registers, used 0 barriers, " + std::to_string(380 + 8 * f->params.size()) +
           " bytes cmem[0]\n";
  }
  return log;
}

CUresult fake_cuModuleLoadDataEx(CUmodule* pm, const void* image, unsigned n, CUjit_option* opts, void** values) {
  FAKE_ENTER("cuModuleLoadDataEx");
  if (pm == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  const auto* bytes = static_cast<const unsigned char*>(image);
  if (bytes[0] == 0x7f || (bytes[0] == 0x50 && bytes[1] == 0xed)) return CUDA_ERROR_INVALID_IMAGE;
  const std::string ptx(static_cast<const char*>(image));
  auto* m = new FakeModule;
  m->ctx = ctx;
  const std::string error = parse_ptx(ptx, *m);
  write_wall_time(n, opts, values, 0.25f);
  if (!error.empty()) {
    for (FakeFunction* f : m->functions) delete f;
    for (auto& [name, g] : m->globals) std::free(reinterpret_cast<void*>(g.first));
    delete m;
    write_log(n, opts, values, CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, error);
    return CUDA_ERROR_INVALID_PTX;
  }
  write_log(n, opts, values, CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, info_log(*m, n, opts, values));
  // Globals are device memory of the module: copies and memsets may target them.
  for (const auto& [name, g] : m->globals) e.allocs[g.first] = Alloc{g.second, AllocKind::module_global, ctx, 0};
  e.modules.insert(m);
  *pm = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

drvshim_fake_kernel_fn builtin_kernel(const std::string& name);

FakeModule* live_module(Engine& e, CUmodule m) {
  auto* p = reinterpret_cast<FakeModule*>(m);
  return e.modules.count(p) != 0 ? p : nullptr;
}

FakeFunction* live_function(Engine& e, CUfunction f) {
  auto* p = reinterpret_cast<FakeFunction*>(f);
  for (const auto* set : {&e.modules, &e.libraries}) {
    for (FakeModule* m : *set) {
      if (std::find(m->functions.begin(), m->functions.end(), p) != m->functions.end()) return p;
    }
  }
  return nullptr;
}

CUresult fake_cuLinkCreate(unsigned n, CUjit_option* opts, void** values, CUlinkState* out) {
  FAKE_ENTER("cuLinkCreate");
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  auto* l = new Engine::LinkState;
  for (unsigned i = 0; i < n; ++i) {
    if (opts[i] == CU_JIT_ERROR_LOG_BUFFER) l->error_log = static_cast<char*>(values[i]);
    if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) l->error_cap = reinterpret_cast<uintptr_t>(values[i]);
  }
  l->option_count = n;
  l->options = opts;
  l->values = values;
  e.links.insert(l);
  *out = reinterpret_cast<CUlinkState>(l);
  return CUDA_SUCCESS;
}

CUresult fake_cuLinkAddData(CUlinkState state, CUjitInputType type, void* data, size_t size, const char*, unsigned,
                            CUjit_option*, void**) {
  FAKE_ENTER("cuLinkAddData");
  auto* l = reinterpret_cast<Engine::LinkState*>(state);
  if (e.links.count(l) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (type != CU_JIT_INPUT_PTX || data == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  const std::string ptx(static_cast<const char*>(data), strnlen(static_cast<const char*>(data), size));
  FakeModule scratch;
  const std::string error = parse_ptx(ptx, scratch);
  for (FakeFunction* f : scratch.functions) delete f;
  for (auto& [name, g] : scratch.globals) std::free(reinterpret_cast<void*>(g.first));
  if (!error.empty()) {
    if (l->error_log != nullptr && l->error_cap > 0) std::snprintf(l->error_log, l->error_cap, "%s", error.c_str());
    return CUDA_ERROR_INVALID_PTX;
  }
  l->image += ptx;
  return CUDA_SUCCESS;
}

CUresult fake_cuLinkComplete(CUlinkState state, void** cubin, size_t* size) {
  FAKE_ENTER("cuLinkComplete");
  auto* l = reinterpret_cast<Engine::LinkState*>(state);
  if (e.links.count(l) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (cubin == nullptr || size == nullptr || l->image.empty()) return CUDA_ERROR_INVALID_VALUE;
  write_wall_time(l->option_count, l->options, l->values, 0.5f);
  *cubin = l->image.data();
  *size = l->image.size() + 1;
  return CUDA_SUCCESS;
}

CUresult fake_cuLinkDestroy(CUlinkState state) {
  FAKE_ENTER("cuLinkDestroy");
  auto* l = reinterpret_cast<Engine::LinkState*>(state);
  if (e.links.erase(l) == 0) {
    misuse(e, "cuLinkDestroy of an unknown link state");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  delete l;
  return CUDA_SUCCESS;
}

// What a fatbin holds (header: u32 magic, u16 version, u16 header size, u64
// payload size; then entries, each with its own header: u16 kind (1 PTX,
// 2 ELF), u16, u32 header size, u64 payload size, u32 compressed size, u32,
// u16 minor, u16 major, u32 architecture, ...). PTX text is read when the
// entry is uncompressed (nvcc --no-compress); without PTX (a device-linked
// -rdc image) the first CUBIN's kernels and variables are read.

// What the fake reads from a CUBIN: its kernels (".text.<kernel>" sections)
// and its variables (object symbols, with their initial bytes).
struct ElfContents {
  std::vector<std::string> kernels;
  std::vector<std::pair<std::string, std::vector<unsigned char>>> globals;
};

ElfContents read_elf(const unsigned char* elf, size_t size) {
  ElfContents out;
  if (size < 64 || elf[0] != 0x7f || elf[4] != 2) return out;  // ELF64 only
  std::uint64_t shoff = 0;
  std::uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  std::memcpy(&shoff, elf + 0x28, 8);
  std::memcpy(&shentsize, elf + 0x3A, 2);
  std::memcpy(&shnum, elf + 0x3C, 2);
  std::memcpy(&shstrndx, elf + 0x3E, 2);
  if (shentsize < 64 || shoff + std::uint64_t{shnum} * shentsize > size || shstrndx >= shnum) return out;
  struct Section {
    std::uint32_t name, type, link;
    std::uint64_t offset, size;
  };
  std::vector<Section> sections(shnum);
  for (std::uint16_t i = 0; i < shnum; ++i) {
    const unsigned char* h = elf + shoff + std::uint64_t{i} * shentsize;
    std::memcpy(&sections[i].name, h, 4);
    std::memcpy(&sections[i].type, h + 4, 4);
    std::memcpy(&sections[i].offset, h + 0x18, 8);
    std::memcpy(&sections[i].size, h + 0x20, 8);
    std::memcpy(&sections[i].link, h + 0x28, 4);
  }
  const auto text = [&](std::uint64_t table, std::uint32_t at) -> std::string {
    if (table + at >= size) return {};
    const char* p = reinterpret_cast<const char*>(elf + table + at);
    return std::string(p, strnlen(p, size - table - at));
  };
  for (const auto& sec : sections) {
    const std::string name = text(sections[shstrndx].offset, sec.name);
    if (name.rfind(".text.", 0) == 0) out.kernels.push_back(name.substr(6));
    if (sec.type != 2 || sec.link >= shnum || sec.offset + sec.size > size) continue;  // SHT_SYMTAB
    for (std::uint64_t at = 0; at + 24 <= sec.size; at += 24) {
      const unsigned char* sym = elf + sec.offset + at;
      std::uint32_t sym_name = 0;
      std::uint16_t shndx = 0;
      std::uint64_t value = 0, sym_size = 0;
      std::memcpy(&sym_name, sym, 4);
      std::memcpy(&shndx, sym + 6, 2);
      std::memcpy(&value, sym + 8, 8);
      std::memcpy(&sym_size, sym + 16, 8);
      const std::string var = text(sections[sec.link].offset, sym_name);
      if ((sym[4] & 0xf) != 1 || sym_size == 0 || shndx == 0 || shndx >= shnum || var.empty() || var[0] == '$' ||
          var[0] == '.' || var.rfind("__U", 0) == 0) {
        continue;  // not a program variable (STT_OBJECT in a section)
      }
      std::vector<unsigned char> init(sym_size, 0);
      const Section& home = sections[shndx];
      if (home.type != 8 && value + sym_size <= home.size && home.offset + value + sym_size <= size) {  // not NOBITS
        std::memcpy(init.data(), elf + home.offset + value, sym_size);
      }
      out.globals.emplace_back(var, std::move(init));
    }
  }
  return out;
}

struct FatbinContents {
  std::string ptx;
  std::vector<int> ptx_archs;
  std::vector<int> sass_archs;
  ElfContents elf;
};

FatbinContents read_fatbin(const unsigned char* fatbin) {
  FatbinContents out;
  std::uint16_t header = 0;
  std::uint64_t payload = 0;
  std::memcpy(&header, fatbin + 6, 2);
  std::memcpy(&payload, fatbin + 8, 8);
  size_t off = header;
  while (off + 64 <= header + payload) {
    const unsigned char* entry = fatbin + off;
    std::uint16_t kind = 0;
    std::uint32_t entry_header = 0, compressed = 0, arch = 0;
    std::uint64_t entry_size = 0;
    std::memcpy(&kind, entry, 2);
    std::memcpy(&entry_header, entry + 4, 4);
    std::memcpy(&entry_size, entry + 8, 8);
    std::memcpy(&compressed, entry + 16, 4);
    std::memcpy(&arch, entry + 28, 4);
    if (entry_header == 0) break;
    const unsigned char* data = entry + entry_header;
    if (kind == 1) {
      out.ptx_archs.push_back(static_cast<int>(arch));
      if (compressed == 0 && out.ptx.empty()) {
        out.ptx.assign(reinterpret_cast<const char*>(data), strnlen(reinterpret_cast<const char*>(data), entry_size));
      }
    } else if (kind == 2) {
      out.sass_archs.push_back(static_cast<int>(arch));
      if (compressed == 0 && out.elf.kernels.empty()) out.elf = read_elf(data, entry_size);
    }
    off += entry_header + entry_size;
  }
  return out;
}

// Whether a library can run on `device`: PTX for it or an older architecture,
// or SASS for exactly its architecture.
bool library_runs_on(const Engine& e, const FakeModule& l, int device) {
  if (!l.fatbin) return true;
  const int cc = attr(e, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
                 attr(e, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  for (int a : l.sass_archs) {
    if (a == cc) return true;
  }
  for (int a : l.ptx_archs) {
    if (a <= cc) return true;
  }
  return false;
}

// cuLibraryLoadData: the same PTX parsing, no context. Globals (__device__,
// __constant__, __managed__) get one allocation shared by every context.
CUresult fake_cuLibraryLoadData(CUlibrary* pl, const void* code, CUjit_option* opts, void** values, unsigned n,
                                CUlibraryOption*, void**, unsigned) {
  FAKE_ENTER("cuLibraryLoadData");
  if (pl == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* bytes = static_cast<const unsigned char*>(code);
  std::string ptx;
  auto* l = new FakeModule;
  ElfContents elf;
  if (bytes[0] == 0x50 && bytes[1] == 0xed) {
    FatbinContents contents = read_fatbin(bytes);
    l->fatbin = true;
    l->ptx_archs = contents.ptx_archs;
    l->sass_archs = contents.sass_archs;
    ptx = std::move(contents.ptx);
    elf = std::move(contents.elf);
    if (ptx.empty() && elf.kernels.empty()) {  // compressed: nothing the fake can read
      delete l;
      return CUDA_ERROR_INVALID_IMAGE;
    }
    // No image any device can run: the driver refuses the library outright.
    bool runs_somewhere = false;
    for (size_t d = 0; d < e.devices.size(); ++d) runs_somewhere = runs_somewhere || library_runs_on(e, *l, static_cast<int>(d));
    if (!runs_somewhere) {
      delete l;
      return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
  } else if (bytes[0] == 0x7f) {
    delete l;
    return CUDA_ERROR_INVALID_IMAGE;
  } else {
    ptx = static_cast<const char*>(code);
  }
  if (!ptx.empty()) {
    std::string error = parse_ptx(ptx, *l);
    if (error.find("syntax error") != std::string::npos) {
      // Lazy loading: the load reads the entries; the JIT and its error come at
      // the first cuKernelGetFunction.
      std::string readable = ptx;
      for (auto at = readable.find("syntax_error"); at != std::string::npos; at = readable.find("syntax_error", at)) {
        readable.replace(at, 12, "lazy_jitted_");
      }
      for (FakeFunction* f : l->functions) delete f;
      l->functions.clear();
      for (auto& [name, g] : l->globals) std::free(reinterpret_cast<void*>(g.first));
      l->globals.clear();
      (void)parse_ptx(readable, *l);
      l->lazy_jit_error = error;
      error.clear();
    }
    if (!error.empty()) {
      for (FakeFunction* f : l->functions) delete f;
      for (auto& [name, g] : l->globals) std::free(reinterpret_cast<void*>(g.first));
      delete l;
      write_log(n, opts, values, CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, error);
      return CUDA_ERROR_INVALID_PTX;
    }
    if (l->lazy_jit_error.empty()) {
      write_wall_time(n, opts, values, 0.25f);
      write_log(n, opts, values, CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, info_log(*l, n, opts, values));
    }
  } else {
    for (const auto& name : elf.kernels) {  // SASS only: names, no parameter layout
      auto* f = new FakeFunction;
      f->module = l;
      f->name = name;
      l->functions.push_back(f);
    }
    for (const auto& [name, init] : elf.globals) {
      void* mem = std::calloc(1, init.size());
      std::memcpy(mem, init.data(), init.size());
      l->globals[name] = {reinterpret_cast<uintptr_t>(mem), init.size()};
    }
  }
  for (const auto& [name, g] : l->globals) e.allocs[g.first] = Alloc{g.second, AllocKind::module_global, nullptr, 0};
  e.libraries.insert(l);
  *pl = reinterpret_cast<CUlibrary>(l);
  return CUDA_SUCCESS;
}

CUresult fake_cuLibraryUnload(CUlibrary hl) {
  FAKE_ENTER("cuLibraryUnload");
  auto* l = reinterpret_cast<FakeModule*>(hl);
  if (e.libraries.count(l) == 0) {
    misuse(e, "cuLibraryUnload of an unloaded or unknown library");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  for (FakeFunction* f : l->functions) delete f;
  for (auto& [name, g] : l->globals) {
    e.allocs.erase(g.first);
    std::free(reinterpret_cast<void*>(g.first));
  }
  e.libraries.erase(l);
  delete l;
  return CUDA_SUCCESS;
}

CUresult fake_cuLibraryGetKernel(CUkernel* pk, CUlibrary hl, const char* name) {
  FAKE_ENTER("cuLibraryGetKernel");
  auto* l = reinterpret_cast<FakeModule*>(hl);
  if (e.libraries.count(l) == 0 || pk == nullptr || name == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  for (FakeFunction* f : l->functions) {
    if (f->name == name) {
      *pk = reinterpret_cast<CUkernel>(f);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult fake_cuKernelGetFunction(CUfunction* pf, CUkernel k) {
  FAKE_ENTER("cuKernelGetFunction");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;  // the function of the current context
  FakeFunction* f = live_function(e, reinterpret_cast<CUfunction>(k));
  if (f == nullptr || pf == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!f->module->lazy_jit_error.empty()) return CUDA_ERROR_INVALID_PTX;  // and no log anywhere
  // Binding to a context loads the code for its device: none that runs there is the driver's error.
  if (!library_runs_on(e, *f->module, ctx->device)) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  *pf = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}

CUresult fake_cuModuleUnload(CUmodule hm) {
  FAKE_ENTER("cuModuleUnload");
  FakeModule* m = live_module(e, hm);
  if (m == nullptr) {
    misuse(e, "cuModuleUnload of an unloaded or unknown module");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  for (FakeFunction* f : m->functions) delete f;
  for (auto& [name, g] : m->globals) {
    e.allocs.erase(g.first);
    std::free(reinterpret_cast<void*>(g.first));
  }
  e.modules.erase(m);
  delete m;
  return CUDA_SUCCESS;
}

CUresult fake_cuModuleGetFunction(CUfunction* pf, CUmodule hm, const char* name) {
  FAKE_ENTER("cuModuleGetFunction");
  FakeModule* m = live_module(e, hm);
  if (pf == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  for (FakeFunction* f : m->functions) {
    if (f->name == name) {
      *pf = reinterpret_cast<CUfunction>(f);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult fake_cuModuleGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUmodule hm, const char* name) {
  FAKE_ENTER("cuModuleGetGlobal");
  FakeModule* m = live_module(e, hm);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto it = m->globals.find(name != nullptr ? name : "");
  if (it == m->globals.end()) return CUDA_ERROR_NOT_FOUND;
  if (dptr != nullptr) *dptr = it->second.first;
  if (bytes != nullptr) *bytes = it->second.second;
  return CUDA_SUCCESS;
}

CUresult fake_cuModuleGetFunctionCount(unsigned* count, CUmodule hm) {
  FAKE_ENTER("cuModuleGetFunctionCount");
  FakeModule* m = live_module(e, hm);
  if (m == nullptr || count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<unsigned>(m->functions.size());
  return CUDA_SUCCESS;
}

CUresult fake_cuModuleEnumerateFunctions(CUfunction* fs, unsigned n, CUmodule hm) {
  FAKE_ENTER("cuModuleEnumerateFunctions");
  FakeModule* m = live_module(e, hm);
  if (m == nullptr || fs == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n && i < m->functions.size(); ++i) fs[i] = reinterpret_cast<CUfunction>(m->functions[i]);
  return CUDA_SUCCESS;
}

CUresult fake_cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  FAKE_ENTER("cuModuleGetLoadingMode");
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

CUresult fake_cuFuncGetName(const char** name, CUfunction hf) {
  FAKE_ENTER("cuFuncGetName");
  FakeFunction* f = live_function(e, hf);
  if (f == nullptr || name == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *name = f->name.c_str();
  return CUDA_SUCCESS;
}

CUresult fake_cuFuncGetParamInfo(CUfunction hf, size_t index, size_t* offset, size_t* size) {
  FAKE_ENTER("cuFuncGetParamInfo");
  FakeFunction* f = live_function(e, hf);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (e.endless_param_info) {
    if (offset != nullptr) *offset = index * 8;
    if (size != nullptr) *size = 8;
    return CUDA_SUCCESS;
  }
  if (index >= f->params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = f->params[index].first;
  if (size != nullptr) *size = f->params[index].second;
  return CUDA_SUCCESS;
}

CUresult fake_cuFuncGetAttribute(int* value, CUfunction_attribute attribute, CUfunction hf) {
  FAKE_ENTER("cuFuncGetAttribute");
  FakeFunction* f = live_function(e, hf);
  if (f == nullptr || value == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (auto it = f->attributes.find(attribute); it != f->attributes.end()) {
    *value = it->second;
    return CUDA_SUCCESS;
  }
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *value = 49152; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *value = -1; break;
    default: *value = 0;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction hf, int block_size, size_t) {
  FAKE_ENTER("cuOccupancyMaxActiveBlocksPerMultiprocessor");
  if (live_function(e, hf) == nullptr || blocks == nullptr || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  *blocks = std::min(32, 2048 / block_size);
  return CUDA_SUCCESS;
}

CUresult do_launch(Engine& e, std::unique_lock<std::mutex>& lock, CUfunction hf, const unsigned grid[3],
                   const unsigned block[3], unsigned shared, CUstream s, void** args,
                   const unsigned cluster[3] = nullptr) {
  FakeFunction* f = live_function(e, hf);
  if (f == nullptr) {
    misuse(e, "launch of a function whose module is unloaded or unknown");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  // A module's function belongs to the module's context (library kernels have none of their own here).
  if (f->module->ctx != nullptr && f->module->ctx != ctx) return CUDA_ERROR_INVALID_HANDLE;
  if (block[0] * block[1] * block[2] > 1024 || grid[0] * grid[1] * grid[2] == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!f->params.empty() && args == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Dynamic shared memory beyond 48 KiB needs the kernel's opt-in
  // (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), as on the real driver.
  const auto dyn = f->attributes.find(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  if (shared > (dyn != f->attributes.end() ? static_cast<unsigned>(dyn->second) : 49152u)) return CUDA_ERROR_INVALID_VALUE;
  ++e.launches;
  auto it = e.kernels.find(f->name);
  const drvshim_fake_kernel_fn impl = it != e.kernels.end() ? it->second : builtin_kernel(f->name);
  if (impl == nullptr) return CUDA_SUCCESS;
  drvshim_fake_launch launch{{grid[0], grid[1], grid[2]},
                             {block[0], block[1], block[2]},
                             shared,
                             {cluster != nullptr ? cluster[0] : 1u, cluster != nullptr ? cluster[1] : 1u,
                              cluster != nullptr ? cluster[2] : 1u}};
  FakeStream* st = queue_of(e, s, ctx);
  if (!queued(st) && !must_wait_implicitly(e, st)) {
    lock.unlock();
    impl(&launch, args);
    return CUDA_SUCCESS;
  }
  // Queued behind other work: the arguments are copied now, as the driver does.
  auto values = std::make_shared<std::vector<std::vector<unsigned char>>>();
  for (size_t i = 0; i < f->params.size(); ++i) {
    const auto* v = static_cast<const unsigned char*>(args[i]);
    values->emplace_back(v, v + f->params[i].second);
  }
  FakeOp op;
  op.kind = FakeOp::kernel;
  op.run = [impl, launch, values] {
    std::vector<void*> pointers;
    for (auto& v : *values) pointers.push_back(v.data());
    impl(&launch, pointers.data());
  };
  submit(e, lock, st, std::move(op));
  return CUDA_SUCCESS;
}

// CPU versions of the examples' kernels (examples/), so they run in CI
// against the fake with drvshim's public API only. Device pointers of the
// fake are host addresses.
unsigned thread_count(const drvshim_fake_launch* l) { return l->grid[0] * l->block[0]; }
template <class T>
T arg(void** args, int i) {
  T v;
  std::memcpy(&v, args[i], sizeof(T));
  return v;
}
void cpu_vadd(const drvshim_fake_launch* l, void** args) {
  const auto* a = arg<const float*>(args, 0);
  const auto* b = arg<const float*>(args, 1);
  auto* c = arg<float*>(args, 2);
  const unsigned n = arg<unsigned>(args, 3);
  for (unsigned i = 0; i < std::min(n, thread_count(l)); ++i) c[i] = a[i] + b[i];
}
void cpu_vadd_stride3(const drvshim_fake_launch* l, void** args) {
  const auto* a = arg<const float*>(args, 0);
  const auto* b = arg<const float*>(args, 1);
  auto* c = arg<float*>(args, 2);
  const unsigned n = arg<unsigned>(args, 3);
  const unsigned far = 3 * l->block[0];
  for (unsigned i = 0; i < std::min(n, thread_count(l)); ++i) {
    const unsigned j = static_cast<unsigned>((static_cast<unsigned long long>(i) + far) % n);
    c[i] = a[j] + b[j];
  }
}
void cpu_stencil3(const drvshim_fake_launch* l, void** args) {
  const auto* a = arg<const float*>(args, 0);
  const auto* b = arg<const float*>(args, 1);
  auto* c = arg<float*>(args, 2);
  const unsigned n = arg<unsigned>(args, 3);
  for (unsigned i = 0; i < std::min(n, thread_count(l)); ++i) {
    c[i] = (i > 0 ? a[i - 1] : 0.0f) + a[i] + (i + 1 < n ? a[i + 1] : 0.0f) + b[i];
  }
}
void cpu_scale(const drvshim_fake_launch* l, void** args) {
  auto* p = arg<float*>(args, 0);
  const float f = arg<float>(args, 1);
  const unsigned n = arg<unsigned>(args, 2);
  const unsigned repeat = arg<unsigned>(args, 3);
  for (unsigned i = 0; i < std::min(n, thread_count(l)); ++i) {
    for (unsigned r = 0; r < repeat; ++r) p[i] = p[i] * f;
  }
}
void cpu_saxpy(const drvshim_fake_launch* l, void** args) {
  const float a = arg<float>(args, 0);
  const auto* x = arg<const float*>(args, 1);
  auto* y = arg<float*>(args, 2);
  const unsigned n = arg<unsigned>(args, 3);
  for (unsigned i = 0; i < std::min(n, thread_count(l)); ++i) y[i] = a * x[i] + y[i];
}

drvshim_fake_kernel_fn builtin_kernel(const std::string& name) {
  static const std::pair<const char*, drvshim_fake_kernel_fn> table[] = {
      {"vadd", &cpu_vadd}, {"vadd_stride3", &cpu_vadd_stride3}, {"stencil3", &cpu_stencil3}, {"scale", &cpu_scale}};
  for (const auto& [n, fn] : table) {
    if (name == n) return fn;
  }
  // saxpy<float> by its mangled name (a name expression of examples/nvrtc_kernel).
  if (name.rfind("_Z5saxpyIfE", 0) == 0) return &cpu_saxpy;
  return nullptr;
}

CUresult fake_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                             unsigned bz, unsigned shared, CUstream s, void** args, void** extra) {
  FAKE_ENTER("cuLaunchKernel");
  if (extra != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const unsigned grid[3] = {gx, gy, gz};
  const unsigned block[3] = {bx, by, bz};
  return do_launch(e, lock, f, grid, block, shared, s, args);
}

CUresult fake_cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** args, void** extra) {
  FAKE_ENTER("cuLaunchKernelEx");
  if (c == nullptr || extra != nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Clusters above the portable size (8 blocks) need the kernel's opt-in.
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    if (c->attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
    const auto& d = c->attrs[i].value.clusterDim;
    FakeFunction* fn = live_function(e, f);
    const bool opted_in = fn != nullptr && fn->attributes.count(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED) != 0 &&
                          fn->attributes[CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED] == 1;
    if (d.x * d.y * d.z > (opted_in ? 16u : 8u)) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  const unsigned grid[3] = {c->gridDimX, c->gridDimY, c->gridDimZ};
  const unsigned block[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
  unsigned cluster[3] = {1, 1, 1};
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    if (c->attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
    cluster[0] = c->attrs[i].value.clusterDim.x;
    cluster[1] = c->attrs[i].value.clusterDim.y;
    cluster[2] = c->attrs[i].value.clusterDim.z;
  }
  return do_launch(e, lock, f, grid, block, c->sharedMemBytes, c->hStream, args, cluster);
}

#include "fake_cuda_rt.inc"
// ---- several GPUs: peer access, link attributes, peer copies ----------------------------
//
// Peer access is per direction (from context, to context), as in the driver:
// enabling it twice answers PEER_ACCESS_ALREADY_ENABLED, disabling what is not
// enabled PEER_ACCESS_NOT_ENABLED, a pair without a peer-to-peer path
// (drvshim_fake_set_peer_supported, the trio profile's device 2)
// PEER_ACCESS_UNSUPPORTED; a context going away ends every access from and to
// it. Peer copies run like the other copies; the fake is stricter than the
// driver in one way: each address must lie in an allocation of the device of
// the context it is paired with, so a swapped argument shows up in CI.

void forget_peer_access(Engine& e, FakeCtx* ctx) {
  for (auto it = e.peer_enabled.begin(); it != e.peer_enabled.end();) {
    it = (it->first == ctx || it->second == ctx) ? e.peer_enabled.erase(it) : std::next(it);
  }
}

bool peer_path(const Engine& e, int dev, int peer) { return dev != peer && e.peer_unsupported.count({dev, peer}) == 0; }

CUresult fake_cuDeviceGetP2PAttribute(int* value, CUdevice_P2PAttribute attrib, CUdevice src, CUdevice dst) {
  FAKE_ENTER("cuDeviceGetP2PAttribute");
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, src) || !valid_device(e, dst) || src == dst) return CUDA_ERROR_INVALID_DEVICE;
  const auto key = std::make_tuple(static_cast<int>(src), static_cast<int>(dst), static_cast<int>(attrib));
  if (auto it = e.p2p_attribute_errors.find(key); it != e.p2p_attribute_errors.end()) {
    return static_cast<CUresult>(it->second);
  }
  if (auto it = e.p2p_attributes.find(key); it != e.p2p_attributes.end()) {
    *value = it->second;
    return CUDA_SUCCESS;
  }
  const bool path = peer_path(e, src, dst);
  switch (attrib) {
    case CU_DEVICE_P2P_ATTRIBUTE_PERFORMANCE_RANK: *value = 0; break;  // one NVLink hop (what the H200 pair is assumed to report)
    case CU_DEVICE_P2P_ATTRIBUTE_ACCESS_SUPPORTED: *value = path ? 1 : 0; break;
    case CU_DEVICE_P2P_ATTRIBUTE_NATIVE_ATOMIC_SUPPORTED: *value = path ? 1 : 0; break;
    case CU_DEVICE_P2P_ATTRIBUTE_CUDA_ARRAY_ACCESS_SUPPORTED: *value = path ? 1 : 0; break;
    case CU_DEVICE_P2P_ATTRIBUTE_ONLY_PARTIAL_NATIVE_ATOMIC_SUPPORTED:
      if (e.driver_version < 13000) return CUDA_ERROR_INVALID_VALUE;  // unknown to older drivers
      *value = 0;  // full native atomics where there is a path
      break;
    default: return CUDA_ERROR_INVALID_VALUE;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxEnablePeerAccess(CUcontext peer_ctx, unsigned flags) {
  FAKE_ENTER("cuCtxEnablePeerAccess");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  FakeCtx* peer = as_ctx(peer_ctx);
  if (!is_live(e, peer)) {
    misuse(e, "cuCtxEnablePeerAccess to a destroyed or unknown context");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (peer == ctx) return CUDA_ERROR_INVALID_CONTEXT;
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!peer_path(e, ctx->device, peer->device)) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  if (!e.peer_enabled.insert({ctx, peer}).second) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxDisablePeerAccess(CUcontext peer_ctx) {
  FAKE_ENTER("cuCtxDisablePeerAccess");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  FakeCtx* peer = as_ctx(peer_ctx);
  if (!is_live(e, peer)) {
    misuse(e, "cuCtxDisablePeerAccess to a destroyed or unknown context");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (e.peer_enabled.erase({ctx, peer}) == 0) return CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
  return CUDA_SUCCESS;
}

// Whether [p, p+n) is memory that device `device` holds (device, managed or
// stream-ordered allocations, module globals); host memory is refused.
bool on_device(const Engine& e, uintptr_t p, size_t n, int device) {
  const auto* a = find_alloc(e, p, n);
  return a != nullptr && a->second.kind != AllocKind::pinned && a->second.ctx->device == device;
}

// The two contexts of a peer copy, checked: live, usable, and each address on its context's device.
CUresult peer_copy_contexts(Engine& e, CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                            FakeCtx** out_dst, FakeCtx** out_src) {
  FakeCtx* d = as_ctx(dst_ctx);
  FakeCtx* s = as_ctx(src_ctx);
  if (!is_live(e, d) || !is_live(e, s)) {
    misuse(e, "peer copy with a destroyed or unknown context");
    return CUDA_ERROR_INVALID_CONTEXT;
  }
  if (d->sticky != 0) return static_cast<CUresult>(d->sticky);
  if (s->sticky != 0) return static_cast<CUresult>(s->sticky);
  if (n != 0 && (!on_device(e, static_cast<uintptr_t>(dst), n, d->device) ||
                 !on_device(e, static_cast<uintptr_t>(src), n, s->device))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *out_dst = d;
  *out_src = s;
  return CUDA_SUCCESS;
}

CUresult fake_cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n) {
  FAKE_ENTER("cuMemcpyPeer");
  FakeCtx* d = nullptr;
  FakeCtx* s = nullptr;
  if (const CUresult r = peer_copy_contexts(e, dst, dst_ctx, src, src_ctx, n, &d, &s); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  // Serialised with all work queued in both contexts (and the current one), complete on return here.
  FakeCtx* cur = nullptr;
  if (current(e, &cur) == CUDA_SUCCESS && cur != d && cur != s) drain_everything(e, lock, cur);
  drain_everything(e, lock, s);
  drain_everything(e, lock, d);
  std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n);
  return CUDA_SUCCESS;
}

CUresult fake_cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                                CUstream stream) {
  FAKE_ENTER("cuMemcpyPeerAsync");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, stream, &ctx); r != CUDA_SUCCESS) return r;
  FakeCtx* d = nullptr;
  FakeCtx* s = nullptr;
  if (const CUresult r = peer_copy_contexts(e, dst, dst_ctx, src, src_ctx, n, &d, &s); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  submit_work(e, lock, queue_of(e, stream, ctx),
              [=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n); });
  return CUDA_SUCCESS;
}

// cuMemcpyAsync, the unified-address copy (drvshim does not call it; tools/bench/bench_peer's
// raw baseline does, the way nvbandwidth copies): the kind of each side is read from the address.
CUresult fake_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  FAKE_ENTER("cuMemcpyAsync");
  const auto d = static_cast<uintptr_t>(dst);
  const auto s = static_cast<uintptr_t>(src);
  return fake_copy(e, lock, d, device_accessible(e, d, n), s, device_accessible(e, s, n), n, true, stream);
}

// ---- cuGetProcAddress ----------------------------------------------------------------

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

#ifndef DRVSHIM_FAKE_NO_PROC_V2
CUresult fake_cuGetProcAddress_v2_entry(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* status);
#endif
CUresult fake_cuGetProcAddress_v1_entry(const char* symbol, void** pfn, int version, cuuint64_t flags);

// Several entries with one name are ABI variants; the newest one at or below
// the requested version wins, as in the real driver.
const std::vector<ProcEntry>& proc_table() {
  static const std::vector<ProcEntry> table = {
      {"cuGetErrorName", 6000, erase_fn(&fake_cuGetErrorName)},
      {"cuGetErrorString", 6000, erase_fn(&fake_cuGetErrorString)},
      {"cuInit", 2000, erase_fn(&fake_cuInit)},
      {"cuDriverGetVersion", 2020, erase_fn(&fake_cuDriverGetVersion_impl)},
      {"cuDeviceGet", 2000, erase_fn(&fake_cuDeviceGet)},
      {"cuDeviceGetCount", 2000, erase_fn(&fake_cuDeviceGetCount)},
      {"cuDeviceGetName", 2000, erase_fn(&fake_cuDeviceGetName)},
      {"cuDeviceGetUuid", 11040, erase_fn(&fake_cuDeviceGetUuid)},
      {"cuDeviceTotalMem", 3020, erase_fn(&fake_cuDeviceTotalMem)},
      {"cuDeviceGetAttribute", 2000, erase_fn(&fake_cuDeviceGetAttribute)},
      {"cuDeviceGetPCIBusId", 4010, erase_fn(&fake_cuDeviceGetPCIBusId)},
      {"cuDeviceCanAccessPeer", 4000, erase_fn(&fake_cuDeviceCanAccessPeer)},
      {"cuDevicePrimaryCtxRetain", 7000, erase_fn(&fake_cuDevicePrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease", 11000, erase_fn(&fake_cuDevicePrimaryCtxRelease)},
      {"cuDevicePrimaryCtxSetFlags", 11000, erase_fn(&fake_cuDevicePrimaryCtxSetFlags)},
      {"cuDevicePrimaryCtxGetState", 7000, erase_fn(&fake_cuDevicePrimaryCtxGetState)},
      {"cuDevicePrimaryCtxReset", 11000, erase_fn(&fake_cuDevicePrimaryCtxReset)},
      {"cuCtxCreate", 3020, erase_fn(&fake_cuCtxCreate_v2)},
      {"cuCtxCreate", 12050, erase_fn(&fake_cuCtxCreate_v4)},
      {"cuCtxDestroy", 4000, erase_fn(&fake_cuCtxDestroy)},
      {"cuCtxPushCurrent", 4000, erase_fn(&fake_cuCtxPushCurrent)},
      {"cuCtxPopCurrent", 4000, erase_fn(&fake_cuCtxPopCurrent)},
      {"cuCtxSetCurrent", 4000, erase_fn(&fake_cuCtxSetCurrent)},
      {"cuCtxGetCurrent", 4000, erase_fn(&fake_cuCtxGetCurrent)},
      {"cuCtxGetDevice", 2000, erase_fn(&fake_cuCtxGetDevice)},
      {"cuCtxGetFlags", 7000, erase_fn(&fake_cuCtxGetFlags)},
      {"cuCtxGetApiVersion", 3020, erase_fn(&fake_cuCtxGetApiVersion)},
      {"cuCtxGetId", 12000, erase_fn(&fake_cuCtxGetId)},
      {"cuCtxSynchronize", 2000, erase_fn(&fake_cuCtxSynchronize)},
      {"cuMemGetInfo", 3020, erase_fn(&fake_cuMemGetInfo)},
      {"cuCtxGetStreamPriorityRange", 5050, erase_fn(&fake_cuCtxGetStreamPriorityRange)},
      {"cuStreamCreateWithPriority", 5050, erase_fn(&fake_cuStreamCreateWithPriority)},
      {"cuStreamDestroy", 4000, erase_fn(&fake_cuStreamDestroy)},
      {"cuStreamSynchronize", 2000, erase_fn(&fake_cuStreamSynchronize)},
      {"cuStreamQuery", 2000, erase_fn(&fake_cuStreamQuery)},
      {"cuStreamWaitEvent", 3020, erase_fn(&fake_cuStreamWaitEvent)},
      {"cuLaunchHostFunc", 10000, erase_fn(&fake_cuLaunchHostFunc)},
      {"cuEventCreate", 2000, erase_fn(&fake_cuEventCreate)},
      {"cuEventDestroy", 4000, erase_fn(&fake_cuEventDestroy)},
      {"cuEventRecord", 2000, erase_fn(&fake_cuEventRecord)},
      {"cuEventQuery", 2000, erase_fn(&fake_cuEventQuery)},
      {"cuEventSynchronize", 2000, erase_fn(&fake_cuEventSynchronize)},
      {"cuEventElapsedTime", 2000, erase_fn(&fake_cuEventElapsedTime)},
      {"cuMemAlloc", 3020, erase_fn(&fake_cuMemAlloc)},
      {"cuMemFree", 3020, erase_fn(&fake_cuMemFree)},
      {"cuMemsetD8", 3020, erase_fn(&fake_cuMemsetD8)},
      {"cuMemsetD16", 3020, erase_fn(&fake_cuMemsetD16)},
      {"cuMemsetD32", 3020, erase_fn(&fake_cuMemsetD32)},
      {"cuMemsetD8Async", 3020, erase_fn(&fake_cuMemsetD8Async)},
      {"cuMemsetD16Async", 3020, erase_fn(&fake_cuMemsetD16Async)},
      {"cuMemsetD32Async", 3020, erase_fn(&fake_cuMemsetD32Async)},
      {"cuMemcpyHtoD", 3020, erase_fn(&fake_cuMemcpyHtoD)},
      {"cuMemcpyDtoH", 3020, erase_fn(&fake_cuMemcpyDtoH)},
      {"cuMemcpyDtoD", 3020, erase_fn(&fake_cuMemcpyDtoD)},
      {"cuMemcpyHtoDAsync", 3020, erase_fn(&fake_cuMemcpyHtoDAsync)},
      {"cuMemcpyDtoHAsync", 3020, erase_fn(&fake_cuMemcpyDtoHAsync)},
      {"cuMemcpyDtoDAsync", 3020, erase_fn(&fake_cuMemcpyDtoDAsync)},
      {"cuMemHostAlloc", 2020, erase_fn(&fake_cuMemHostAlloc)},
      {"cuMemFreeHost", 2000, erase_fn(&fake_cuMemFreeHost)},
      {"cuMemHostGetDevicePointer", 3020, erase_fn(&fake_cuMemHostGetDevicePointer)},
      {"cuMemHostRegister", 6050, erase_fn(&fake_cuMemHostRegister)},
      {"cuMemHostUnregister", 4000, erase_fn(&fake_cuMemHostUnregister)},
      {"cuMemAllocManaged", 6000, erase_fn(&fake_cuMemAllocManaged)},
      {"cuMemAllocAsync", 11020, erase_fn(&fake_cuMemAllocAsync)},
      {"cuMemFreeAsync", 11020, erase_fn(&fake_cuMemFreeAsync)},
      {"cuPointerGetAttributes", 7000, erase_fn(&fake_cuPointerGetAttributes)},
      {"cuModuleLoadDataEx", 2010, erase_fn(&fake_cuModuleLoadDataEx)},
      {"cuModuleUnload", 2000, erase_fn(&fake_cuModuleUnload)},
      {"cuModuleGetFunction", 2000, erase_fn(&fake_cuModuleGetFunction)},
      {"cuModuleGetGlobal", 3020, erase_fn(&fake_cuModuleGetGlobal)},
      {"cuModuleGetFunctionCount", 12040, erase_fn(&fake_cuModuleGetFunctionCount)},
      {"cuModuleEnumerateFunctions", 12040, erase_fn(&fake_cuModuleEnumerateFunctions)},
      {"cuModuleGetLoadingMode", 11070, erase_fn(&fake_cuModuleGetLoadingMode)},
      {"cuFuncGetName", 12030, erase_fn(&fake_cuFuncGetName)},
      {"cuFuncGetParamInfo", 12040, erase_fn(&fake_cuFuncGetParamInfo)},
      {"cuFuncGetAttribute", 2020, erase_fn(&fake_cuFuncGetAttribute)},
      {"cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050, erase_fn(&fake_cuOccupancyMaxActiveBlocksPerMultiprocessor)},
      {"cuLaunchKernel", 4000, erase_fn(&fake_cuLaunchKernel)},
      {"cuLaunchKernelEx", 11060, erase_fn(&fake_cuLaunchKernelEx)},
      {"cuLibraryLoadData", 12000, erase_fn(&fake_cuLibraryLoadData)},
      {"cuLibraryUnload", 12000, erase_fn(&fake_cuLibraryUnload)},
      {"cuLibraryGetKernel", 12000, erase_fn(&fake_cuLibraryGetKernel)},
      {"cuKernelGetFunction", 12000, erase_fn(&fake_cuKernelGetFunction)},
      {"cuLinkCreate", 6050, erase_fn(&fake_cuLinkCreate)},
      {"cuLinkAddData", 6050, erase_fn(&fake_cuLinkAddData)},
      {"cuLinkComplete", 5050, erase_fn(&fake_cuLinkComplete)},
      {"cuLinkDestroy", 5050, erase_fn(&fake_cuLinkDestroy)},
      FAKE_RT_PROCS
      // several GPUs
      {"cuCtxEnablePeerAccess", 4000, erase_fn(&fake_cuCtxEnablePeerAccess)},
      {"cuCtxDisablePeerAccess", 4000, erase_fn(&fake_cuCtxDisablePeerAccess)},
      {"cuDeviceGetP2PAttribute", 8000, erase_fn(&fake_cuDeviceGetP2PAttribute)},
      {"cuMemcpyPeer", 4000, erase_fn(&fake_cuMemcpyPeer)},
      {"cuMemcpyPeerAsync", 4000, erase_fn(&fake_cuMemcpyPeerAsync)},
      {"cuMemcpyAsync", 4000, erase_fn(&fake_cuMemcpyAsync)},
      // The driver hands out its own lookup too (the CUDA Runtime asks for it).
      {"cuGetProcAddress", 11030, erase_fn(&fake_cuGetProcAddress_v1_entry)},
#ifndef DRVSHIM_FAKE_NO_PROC_V2
      {"cuGetProcAddress", 12000, erase_fn(&fake_cuGetProcAddress_v2_entry)},
#endif
  };
  return table;
}

// DRVSHIM_FAKE_PROC_SHIMS=1: cuDeviceGetCount asked at version 12000 or later comes back
// as another address than at older versions (a driver may hand out per-version shims;
// drvshim-trace then maps the lookup by name and version).
CUresult fake_cuDeviceGetCount_shim(int* count) { return fake_cuDeviceGetCount(count); }

CUresult get_proc(const char* symbol, void** pfn, int version, cuuint64_t flags,
                  CUdriverProcAddressQueryResult* status, const char* api) {
  FAKE_ENTER_AS(api, false);
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags > 2) return CUDA_ERROR_INVALID_VALUE;
  if (version > e.driver_version) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  auto set_status = [&](CUdriverProcAddressQueryResult s) {
    if (status != nullptr) *status = s;
  };
  if (auto it = e.proc_status.find(symbol); it != e.proc_status.end() && it->second != 0) {
    set_status(static_cast<CUdriverProcAddressQueryResult>(it->second));
    return CUDA_SUCCESS;
  }
  const ProcEntry* best = nullptr;
  bool known = false;
  for (const auto& entry : proc_table()) {
    if (std::strcmp(entry.name, symbol) != 0) continue;
    if (entry.since > e.driver_version) continue;  // newer than this (simulated) driver
    known = true;
    if (entry.since <= version && (best == nullptr || entry.since > best->since)) best = &entry;
  }
  if (best == nullptr) {
    set_status(known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    return CUDA_SUCCESS;
  }
  *pfn = best->fn;
  if (best->fn == erase_fn(&fake_cuDeviceGetCount) && version >= 12000) {
    if (const char* shims = std::getenv("DRVSHIM_FAKE_PROC_SHIMS"); shims != nullptr && std::strcmp(shims, "1") == 0) {
      *pfn = erase_fn(&fake_cuDeviceGetCount_shim);
    }
  }
  set_status(CU_GET_PROC_ADDRESS_SUCCESS);
  return CUDA_SUCCESS;
}

#ifndef DRVSHIM_FAKE_NO_PROC_V2
CUresult fake_cuGetProcAddress_v2_entry(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* status) {
  return get_proc(symbol, pfn, version, flags, status, "cuGetProcAddress");
}
#endif

CUresult fake_cuGetProcAddress_v1_entry(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return get_proc(symbol, pfn, version, flags, nullptr, "cuGetProcAddress");
}

struct ExitReport {
  ~ExitReport() {
    const char* path = std::getenv("DRVSHIM_FAKE_REPORT");
    if (path == nullptr || *path == '\0') return;
    Engine& e = engine();
    std::FILE* f = std::fopen(path, "w");
    if (f == nullptr) return;
    std::fprintf(f, "calls_while_deinitialized %llu\nmisuse %llu\nlive_contexts %zu\n", e.calls_while_deinit,
                 e.misuse, e.live.size());
    std::fclose(f);
  }
} g_exit_report;

}  // namespace

// ---- exported entry points, as libcuda exports them ---------------------------------

extern "C" {

DRVSHIM_FAKE_API CUresult cuDriverGetVersion(int* version) { return fake_cuDriverGetVersion_impl(version); }

#ifndef DRVSHIM_FAKE_NO_PROC_V2
DRVSHIM_FAKE_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                              CUdriverProcAddressQueryResult* status) {
  return get_proc(symbol, pfn, version, flags, status, "cuGetProcAddress");
}
#endif

// The 11.3-11.8 form (no status). cuda.h maps the name to _v2, so declare it by hand.
DRVSHIM_FAKE_API CUresult drvshim_fake_cuGetProcAddress_v1(const char* symbol, void** pfn, int version,
                                                          cuuint64_t flags) __asm__("cuGetProcAddress");
DRVSHIM_FAKE_API CUresult drvshim_fake_cuGetProcAddress_v1(const char* symbol, void** pfn, int version,
                                                          cuuint64_t flags) {
  return get_proc(symbol, pfn, version, flags, nullptr, "cuGetProcAddress");
}

// ---- control API ----------------------------------------------------------------------

int drvshim_fake_set_profile(const char* name) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (name == nullptr || !apply_profile(e, name)) return -1;
  reset_state(e);
  return 0;
}

const char* drvshim_fake_profile(void) {
  ensure_profile_from_env();
  return engine().profile.c_str();
}

void drvshim_fake_reset(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  apply_profile(e, std::string(e.profile));
  reset_state(e);
}

void drvshim_fake_fail_call(const char* api, int nth, int code) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.injections.push_back(Injection{api, nth > 0 ? nth - 1 : 0, code});
}

int drvshim_fake_pending_injections(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(e.injections.size());
}

void drvshim_fake_set_proc_status(const char* symbol, int status) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.proc_status[symbol] = status;
}

void drvshim_fake_set_attribute(int device, int attribute, int value) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (!valid_device(e, device)) return;
  auto& d = e.devices[static_cast<size_t>(device)];
  d.attribute_errors.erase(attribute);
  d.attributes[attribute] = value;
}

void drvshim_fake_set_attribute_error(int device, int attribute, int code) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (!valid_device(e, device)) return;
  e.devices[static_cast<size_t>(device)].attribute_errors[attribute] = code;
}

unsigned long long drvshim_fake_call_count(const char* api) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto it = e.counts.find(api);
  return it == e.counts.end() ? 0 : it->second;
}

size_t drvshim_fake_call_log_size(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.log.size();
}

const char* drvshim_fake_call_log_entry(size_t index) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return index < e.log.size() ? e.log[index].c_str() : nullptr;
}

void drvshim_fake_clear_call_log(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.log.clear();
}

unsigned long long drvshim_fake_misuse_count(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.misuse;
}

const char* drvshim_fake_last_misuse(void) {
  ensure_profile_from_env();
  return engine().last_misuse.c_str();
}

static int count_allocs(bool pinned) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(std::count_if(e.allocs.begin(), e.allocs.end(), [&](const auto& kv) {
    return (kv.second.kind == AllocKind::pinned) == pinned;
  }));
}

int drvshim_fake_live_device_allocations(void) { return count_allocs(false); }
int drvshim_fake_live_pinned_allocations(void) { return count_allocs(true); }

int drvshim_fake_drop_allocations(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  int n = 0;
  for (auto it = e.allocs.begin(); it != e.allocs.end();) {
    if (it->second.kind == AllocKind::module_global) {  // belongs to a loaded module
      ++it;
      continue;
    }
    std::free(reinterpret_cast<void*>(it->first));
    it = e.allocs.erase(it);
    ++n;
  }
  e.device_used.assign(e.devices.size(), 0);
  return n;
}

void drvshim_fake_stream_hold(void* stream, int on) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::unique_lock<std::mutex> lock(e.mutex);
  FakeStream* st = user_stream(e, reinterpret_cast<CUstream>(stream));
  if (st == nullptr) return;
  st->held = on != 0;
  if (on == 0) pump(e, lock);
}

void drvshim_fake_legacy_stream_hold(void* context, int on) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::unique_lock<std::mutex> lock(e.mutex);
  auto* ctx = reinterpret_cast<FakeCtx*>(context);
  if (!is_live(e, ctx)) return;
  legacy_of(e, ctx)->held = on != 0;
  if (on == 0) pump(e, lock);
}

void drvshim_fake_stream_fail(void* stream, int code) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (FakeStream* st = user_stream(e, reinterpret_cast<CUstream>(stream))) st->fail_with = code;
}

void drvshim_fake_recycle_handles(int on) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.recycle_handles = on != 0;
}

void drvshim_fake_endless_param_info(int on) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.endless_param_info = on != 0;
}

int drvshim_fake_live_events(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(e.events.size());
}

void drvshim_fake_register_kernel(const char* name, drvshim_fake_kernel_fn fn) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.kernels[name] = fn;
}

void* drvshim_fake_find_global(const char* name) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  for (const auto* set : {&e.libraries, &e.modules}) {
    for (FakeModule* m : *set) {
      if (auto it = m->globals.find(name); it != m->globals.end()) return reinterpret_cast<void*>(it->second.first);
    }
  }
  return nullptr;
}

int drvshim_fake_live_modules(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(e.modules.size() + e.libraries.size() + e.links.size());
}

unsigned long long drvshim_fake_launch_count(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.launches;
}

int drvshim_fake_live_registrations(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(e.registered.size());
}

int drvshim_fake_live_streams(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(e.streams.size());
}

int drvshim_fake_live_contexts(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(std::count_if(e.live.begin(), e.live.end(), [](FakeCtx* c) { return !c->primary; }));
}

int drvshim_fake_primary_refcount(int device) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return valid_device(e, device) ? e.primaries[static_cast<size_t>(device)].refcount : -1;
}

int drvshim_fake_primary_active(int device) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return valid_device(e, device) ? (e.primaries[static_cast<size_t>(device)].active ? 1 : 0) : -1;
}

void drvshim_fake_activate_primary_externally(int device, unsigned flags) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (!valid_device(e, device)) return;
  Primary& p = e.primaries[static_cast<size_t>(device)];
  p.flags = flags;
  if (!p.active) {
    p.ctx = new_ctx(e, device, flags, true);
    p.active = true;
  }
  ++p.refcount;
}

int drvshim_fake_ctx_stack_depth(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(ctx_stack(e).size());
}

void* drvshim_fake_ctx_stack_top(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto& stack = ctx_stack(e);
  return stack.empty() ? nullptr : stack.back();
}

void drvshim_fake_set_deinitialized(int on) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.deinitialized = on != 0;
}

unsigned long long drvshim_fake_calls_while_deinitialized(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.calls_while_deinit;
}

// ---- several GPUs (the peer-access section) ----

void drvshim_fake_set_peer_supported(int device, int peer, int supported) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (supported != 0) {
    e.peer_unsupported.erase({device, peer});
  } else {
    e.peer_unsupported.insert({device, peer});
  }
}

void drvshim_fake_set_p2p_attribute(int src, int dst, int attribute, int value) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.p2p_attribute_errors.erase({src, dst, attribute});
  e.p2p_attributes[{src, dst, attribute}] = value;
}

void drvshim_fake_set_p2p_attribute_error(int src, int dst, int attribute, int code) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.p2p_attribute_errors[{src, dst, attribute}] = code;
}

int drvshim_fake_peer_access_enabled(void* from_context, void* to_context) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.peer_enabled.count({reinterpret_cast<FakeCtx*>(from_context), reinterpret_cast<FakeCtx*>(to_context)}) != 0
             ? 1
             : 0;
}

int drvshim_fake_peer_access_count(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(e.peer_enabled.size());
}

int drvshim_fake_disable_peer_access_externally(void* from_context, void* to_context) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.peer_enabled.erase({reinterpret_cast<FakeCtx*>(from_context), reinterpret_cast<FakeCtx*>(to_context)}) != 0
             ? CUDA_SUCCESS
             : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
}

int drvshim_fake_enable_peer_access_externally(void* from_context, void* to_context) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto* from = reinterpret_cast<FakeCtx*>(from_context);
  auto* to = reinterpret_cast<FakeCtx*>(to_context);
  if (!is_live(e, from) || !is_live(e, to) || from == to) return CUDA_ERROR_INVALID_CONTEXT;
  if (!peer_path(e, from->device, to->device)) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  return e.peer_enabled.insert({from, to}).second ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
}

}  // extern "C"
