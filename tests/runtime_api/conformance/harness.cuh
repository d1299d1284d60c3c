// SPDX-License-Identifier: Apache-2.0
// The differential conformance harness: what every generated case runs in.
//
// One program, built against the real cudart and against libdrvshim_cudart,
// runs the cases of one function in one scenario and prints, per case, the
// return code, every output argument (values where they are the same on every
// run, "set"/"unchanged"/"null" where they are addresses or times), the last
// error seen by cudaPeekAtLastError, cudaGetLastError and cudaGetLastError
// again, and the driver state afterwards (which context is current, whether
// device 0's primary context is active). The two outputs are then diffed
// line by line (tests/runtime_api/conformance/compare.py).
//
// Scenarios:
//   main     the calling thread, objects made by the runtime
//   thread   each case on a new thread (its own last error and device)
//   sticky   after a kernel wrote to an illegal address (the context is dead;
//            each case's fixture made before the fault, a batch per process)
//   hostfn   each case inside a host function queued with cudaLaunchHostFunc
//   drvctx   a context from cuCtxCreate current while the fixture is made and the case runs
//   fresh    the case is the program's first Runtime call
//   capture  while the calling thread captures a stream in global mode (the
//            output adds whether the capture survived the case)
//
// Every case makes its own fixture (memory, streams, events) and releases it
// afterwards, so one case cannot change the next one's arguments. Before each
// case the program prints "begin <case>" and flushes: the runner (run.py)
// restarts the program after the case that crashed or hung, and records that.
#pragma once
#include <cuda.h>
#include <cuda_runtime_api.h>
#include <dlfcn.h>

#include <algorithm>
#include <condition_variable>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace conf {

// ---- the driver, loaded beside the runtime (the same one it uses) --------------------------------

struct Driver {
  void* lib = nullptr;
  CUresult (*init)(unsigned) = nullptr;
  CUresult (*get_proc)(const char*, void**, int, cuuint64_t, CUdriverProcAddressQueryResult*) = nullptr;
  CUresult (*ctx_create)(CUcontext*, unsigned, CUdevice) = nullptr;
  CUresult (*ctx_destroy)(CUcontext) = nullptr;
  CUresult (*ctx_get_current)(CUcontext*) = nullptr;
  CUresult (*ctx_set_current)(CUcontext) = nullptr;
  CUresult (*primary_state)(CUdevice, unsigned*, int*) = nullptr;
  CUresult (*mem_alloc)(CUdeviceptr*, size_t) = nullptr;
  CUresult (*mem_free)(CUdeviceptr) = nullptr;
  CUresult (*mem_host_alloc)(void**, size_t, unsigned) = nullptr;
  CUresult (*mem_free_host)(void*) = nullptr;
  CUresult (*stream_create)(CUstream*, unsigned, int) = nullptr;
  CUresult (*stream_destroy)(CUstream) = nullptr;
  CUresult (*event_create)(CUevent*, unsigned) = nullptr;
  CUresult (*event_destroy)(CUevent) = nullptr;
  CUresult (*event_record)(CUevent, CUstream) = nullptr;
  // The fake driver's way to make a context fail as a device fault does (it runs no kernels).
  void (*fake_stream_fail)(void*, int) = nullptr;
  bool ok = false;
};

template <class F>
void proc(Driver& d, const char* name, F& out) {
  void* p = nullptr;
  CUdriverProcAddressQueryResult q{};
  // cuCtxCreate at 12.0 is cuCtxCreate_v3 (execution affinity): the plain
  // three-argument form is 3.2's, which every later driver still offers.
  const int version = std::strcmp(name, "cuCtxCreate") == 0 ? 3020 : 12000;
  if (d.get_proc(name, &p, version, CU_GET_PROC_ADDRESS_DEFAULT, &q) == CUDA_SUCCESS && p != nullptr) {
    out = reinterpret_cast<F>(p);
  } else {
    std::printf("harness: driver has no %s\n", name);
    std::exit(3);
  }
}

inline Driver& driver() {
  static Driver d = [] {
    Driver r;
    const char* path = std::getenv("DRVSHIM_LIBCUDA");
    r.lib = dlopen(path != nullptr ? path : "libcuda.so.1", RTLD_NOW | RTLD_GLOBAL);
    if (r.lib == nullptr) return r;
    // Everything through cuGetProcAddress, which needs no cuInit (the fake
    // driver exports nothing else).
    r.get_proc = reinterpret_cast<decltype(r.get_proc)>(dlsym(r.lib, "cuGetProcAddress_v2"));
    if (r.get_proc == nullptr) return r;
    proc(r, "cuInit", r.init);
    proc(r, "cuCtxCreate", r.ctx_create);
    proc(r, "cuCtxDestroy", r.ctx_destroy);
    proc(r, "cuCtxGetCurrent", r.ctx_get_current);
    proc(r, "cuCtxSetCurrent", r.ctx_set_current);
    proc(r, "cuDevicePrimaryCtxGetState", r.primary_state);
    proc(r, "cuMemAlloc", r.mem_alloc);
    proc(r, "cuMemFree", r.mem_free);
    proc(r, "cuMemHostAlloc", r.mem_host_alloc);
    proc(r, "cuMemFreeHost", r.mem_free_host);
    proc(r, "cuStreamCreateWithPriority", r.stream_create);
    proc(r, "cuStreamDestroy", r.stream_destroy);
    proc(r, "cuEventCreate", r.event_create);
    proc(r, "cuEventDestroy", r.event_destroy);
    proc(r, "cuEventRecord", r.event_record);
    r.fake_stream_fail = reinterpret_cast<decltype(r.fake_stream_fail)>(dlsym(r.lib, "drvshim_fake_stream_fail"));
    r.ok = true;
    return r;
  }();
  return d;
}

// ---- printing ---------------------------------------------------------------------------------------

inline std::string& line() {
  static thread_local std::string s;
  return s;
}
inline void put(const std::string& s) {
  line() += ' ';
  line() += s;
}
inline std::string err(cudaError_t e) { return std::to_string(static_cast<int>(e)); }

constexpr unsigned char kSentinel = 0x5a;
template <class T>
void prefill(T& v) {
  std::memset(static_cast<void*>(&v), kSentinel, sizeof(T));
}
template <class T>
bool unchanged(const T& v) {
  const auto* b = reinterpret_cast<const unsigned char*>(&v);
  for (std::size_t i = 0; i < sizeof(T); ++i)
    if (b[i] != kSentinel) return false;
  return true;
}
inline std::uint64_t fnv(const void* p, std::size_t n) {
  std::uint64_t h = 1469598103934665603ull;
  for (std::size_t i = 0; i < n; ++i) h = (h ^ static_cast<const unsigned char*>(p)[i]) * 1099511628211ull;
  return h;
}
inline std::string hex(std::uint64_t v) {
  char b[32];
  std::snprintf(b, sizeof b, "%llx", static_cast<unsigned long long>(v));
  return b;
}

// An output argument by its kind: a value that is the same on every run, or
// only whether it was written.
template <class T>
void out_value(const char* name, const T& v) {
  if (unchanged(v)) return put(std::string(name) + "=unchanged");
  if constexpr (std::is_floating_point_v<T>) {
    put(std::string(name) + "=set");
  } else {
    put(std::string(name) + "=" + std::to_string(static_cast<long long>(v)));
  }
}
template <class T>
void out_set(const char* name, const T& v) {
  if (unchanged(v)) return put(std::string(name) + "=unchanged");
  bool zero = true;
  const auto* b = reinterpret_cast<const unsigned char*>(&v);
  for (std::size_t i = 0; i < sizeof(T); ++i) zero = zero && b[i] == 0;
  put(std::string(name) + (zero ? "=zero" : "=set"));
}
inline void out_string(const char* name, const char* const& v) {
  if (unchanged(v)) return put(std::string(name) + "=unchanged");
  put(std::string(name) + "=" + (v == nullptr ? "null" : "\"" + std::string(v) + "\""));
}
inline void out_text(const char* name, const char* v) {
  put(std::string(name) + "=" + (v == nullptr ? "null" : "\"" + std::string(v) + "\""));
}
inline void out_bytes(const char* name, const void* p, std::size_t n) {
  bool all = true;
  for (std::size_t i = 0; i < n; ++i) all = all && static_cast<const unsigned char*>(p)[i] == kSentinel;
  put(std::string(name) + "=" + (all ? std::string("unchanged") : hex(fnv(p, n))));
}
inline void out_props(const char* name, const cudaDeviceProp& p) {
  if (unchanged(p)) return put(std::string(name) + "=unchanged");
  // The whole struct except what changes between runs (nothing does) as a hash,
  // and the fields people read as values.
  put(std::string(name) + "={" + std::string(p.name) + " cc=" + std::to_string(p.major) + "." +
      std::to_string(p.minor) + " sm=" + std::to_string(p.multiProcessorCount) +
      " mem=" + std::to_string(p.totalGlobalMem) + " hash=" + hex(fnv(&p, sizeof p)) + "}");
}
inline void out_func_attrs(const char* name, const cudaFuncAttributes& a) {
  if (unchanged(a)) return put(std::string(name) + "=unchanged");
  put(std::string(name) + "={shared=" + std::to_string(a.sharedSizeBytes) +
      " const=" + std::to_string(a.constSizeBytes) + " local=" + std::to_string(a.localSizeBytes) +
      " maxthr=" + std::to_string(a.maxThreadsPerBlock) + " regs=" + std::to_string(a.numRegs) +
      " ptx=" + std::to_string(a.ptxVersion) + " bin=" + std::to_string(a.binaryVersion) +
      " cachemode=" + std::to_string(a.cacheModeCA) + " maxdyn=" + std::to_string(a.maxDynamicSharedSizeBytes) +
      " carveout=" + std::to_string(a.preferredShmemCarveout) + " cluster=" + std::to_string(a.clusterDimMustBeSet) +
      "," + std::to_string(a.requiredClusterWidth) + "," + std::to_string(a.nonPortableClusterSizeAllowed) + "}");
}
// Where an address points, relative to the fixture's objects (filled in by the fixture).
inline std::string where(const void* p);
inline void out_pointer_attrs(const char* name, const cudaPointerAttributes& a) {
  if (unchanged(a)) return put(std::string(name) + "=unchanged");
  put(std::string(name) + "={type=" + std::to_string(static_cast<int>(a.type)) + " device=" + std::to_string(a.device) +
      " dev=" + where(a.devicePointer) + " host=" + where(a.hostPointer) + "}");
}
inline void out_channel(const char* name, const cudaChannelFormatDesc& d) {
  put(std::string(name) + "={" + std::to_string(d.x) + "," + std::to_string(d.y) + "," + std::to_string(d.z) + "," +
      std::to_string(d.w) + "," + std::to_string(static_cast<int>(d.f)) + "}");
}

// ---- the fixture --------------------------------------------------------------------------------------

__device__ int g_symbol[64];
__global__ void conf_noop(int* p) {
  if (p != nullptr && threadIdx.x == 0) p[0] += 1;
}
__global__ void conf_fault(int* p) { *reinterpret_cast<volatile int*>(p) = 1; }
inline void host_function(void*) {}
inline void CUDART_CB stream_callback(cudaStream_t, cudaError_t, void*) {}
inline int g_host_variable = 0;

constexpr std::size_t kBytes = 1 << 20;
// Cases a sticky-scenario process runs, each with a fixture of its own (about 9 MiB).
constexpr std::size_t kStickyBatch = 32;

// The context the drvctx scenario made with cuCtxCreate (null in the others).
inline CUcontext g_user_context = nullptr;

struct Fixture {
  int count = 0;
  void* dev = nullptr;         // cudaMalloc
  void* dev_async = nullptr;   // cudaMallocAsync
  void* managed = nullptr;     // cudaMallocManaged
  void* pinned = nullptr;      // cudaMallocHost
  void* mapped = nullptr;      // cudaHostAlloc(Mapped)
  void* registered = nullptr;  // malloc + cudaHostRegister
  void* pageable = nullptr;    // malloc, not registered
  void* freed = nullptr;       // cudaMalloc then cudaFree
  CUdeviceptr drv_dev = 0;     // cuMemAlloc
  void* drv_host = nullptr;    // cuMemHostAlloc
  cudaStream_t stream = nullptr;
  cudaStream_t stream_nb = nullptr;   // cudaStreamNonBlocking
  cudaStream_t drv_stream = nullptr;  // cuStreamCreate
  cudaEvent_t event = nullptr;        // recorded on `stream`
  cudaEvent_t event_end = nullptr;    // recorded after `event`
  cudaEvent_t event_notiming = nullptr;
  cudaEvent_t event_unrecorded = nullptr;
  cudaEvent_t drv_event = nullptr;  // cuEventCreate, recorded
  char busid[64] = {};
  int* arg0 = nullptr;
  void* args[1] = {&arg0};
  cudaLaunchConfig_t cfg{};
  cudaLaunchAttribute attr{};
  cudaLaunchAttributeValue attr_value{};
  cudaDeviceProp prop{};
  char buf[128] = {};
  bool made = false;
  cudaStream_t capture_stream = nullptr;    // non-blocking; captures only when a case asks (capturing())
  cudaStream_t blocking_capture = nullptr;  // `stream` while capturing_blocking() made it capture
  cudaGraph_t graph = nullptr;              // captured: one memset node
  cudaGraphExec_t graph_exec = nullptr;     // `graph` instantiated
  std::vector<cudaGraph_t> graphs;          // handed out by the cases, destroyed by release()
  std::vector<cudaGraphExec_t> execs;
  cudaGraphNode_t nodes[4] = {};  // filled with the sentinel by node_array()
  size_t num_nodes = 0;
  cudaStreamCaptureMode mode = cudaStreamCaptureModeGlobal;
  void* spare = nullptr;
  // A capture another thread began (and ends when release() asks).
  std::thread capture_thread;
  std::mutex capture_mutex;
  std::condition_variable capture_cv;
  int capture_phase = 0;  // 1: began, 2: asked to end

  void make() {
    cudaGetDeviceCount(&count);
    cudaMalloc(&dev, kBytes);
    cudaMalloc(&freed, 4096);
    cudaFree(freed);
    cudaStreamCreate(&stream);
    cudaStreamCreateWithFlags(&stream_nb, cudaStreamNonBlocking);
    cudaMallocAsync(&dev_async, kBytes, stream);
    cudaMallocManaged(&managed, kBytes, cudaMemAttachGlobal);
    cudaMallocHost(&pinned, kBytes);
    cudaHostAlloc(&mapped, kBytes, cudaHostAllocMapped);
    registered = std::aligned_alloc(65536, kBytes);
    cudaHostRegister(registered, kBytes, cudaHostRegisterDefault);
    pageable = std::aligned_alloc(65536, kBytes);
    std::memset(pageable, 1, kBytes);
    cudaEventCreate(&event);
    cudaEventCreate(&event_end);
    cudaEventCreateWithFlags(&event_notiming, cudaEventDisableTiming);
    cudaEventCreate(&event_unrecorded);
    cudaEventRecord(event, stream);
    cudaEventRecord(event_end, stream);
    cudaEventRecord(event_notiming, stream);
    cudaStreamSynchronize(stream);
    Driver& d = driver();
    if (d.ok) {
      CUstream s = nullptr;
      CUevent e = nullptr;
      d.mem_alloc(&drv_dev, kBytes);
      d.mem_host_alloc(&drv_host, kBytes, 0);
      d.stream_create(&s, 0, 0);
      d.event_create(&e, 0);
      d.event_record(e, s);
      drv_stream = s;
      drv_event = e;
    }
    cudaDeviceGetPCIBusId(busid, sizeof busid, 0);
    cudaStreamCreateWithFlags(&capture_stream, cudaStreamNonBlocking);
    cudaStreamBeginCapture(capture_stream, cudaStreamCaptureModeGlobal);
    cudaMemsetAsync(dev, 0, 256, capture_stream);
    cudaStreamEndCapture(capture_stream, &graph);
    if (graph != nullptr) cudaGraphInstantiate(&graph_exec, graph, 0);
    made = true;
    arg0 = static_cast<int*>(dev);
    cfg.gridDim = dim3(1);
    cfg.blockDim = dim3(32);
    cfg.stream = stream;
    cfg.attrs = nullptr;
    cfg.numAttrs = 0;
    prop.major = 9;
    std::memset(buf, kSentinel, sizeof buf);
    cudaStreamSynchronize(stream);
    cudaGetLastError();
  }
  // One launch attribute in `cfg`.
  void with_attribute(cudaLaunchAttributeID id, const cudaLaunchAttributeValue& v) {
    attr.id = id;
    attr.val = v;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
  }
  // capture_stream, capturing in global mode on this thread (nullptr in a
  // fixture that was not made).
  cudaStream_t capturing() {
    if (!made) return nullptr;
    cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
    if (cudaStreamIsCapturing(capture_stream, &st) == cudaSuccess && st == cudaStreamCaptureStatusNone) {
      cudaStreamBeginCapture(capture_stream, cudaStreamCaptureModeGlobal);
    }
    return capture_stream;
  }
  // `stream` (blocking), capturing in global mode on this thread.
  cudaStream_t capturing_blocking() {
    if (!made) return nullptr;
    if (cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal) == cudaSuccess) blocking_capture = stream;
    return stream;
  }
  // capture_stream, capturing in global mode on another thread that lives until release().
  void capturing_on_other_thread() {
    if (!made || capture_thread.joinable()) return;
    capture_thread = std::thread([this] {
      cudaStreamBeginCapture(capture_stream, cudaStreamCaptureModeGlobal);
      std::unique_lock<std::mutex> lock(capture_mutex);
      capture_phase = 1;
      capture_cv.notify_all();
      capture_cv.wait(lock, [this] { return capture_phase == 2; });
      cudaGraph_t g = nullptr;
      if (cudaStreamEndCapture(capture_stream, &g) == cudaSuccess && g != nullptr) cudaGraphDestroy(g);
      cudaGetLastError();
    });
    std::unique_lock<std::mutex> lock(capture_mutex);
    capture_cv.wait(lock, [this] { return capture_phase == 1; });
  }
  void keep_graph(cudaGraph_t g) {
    if (g != nullptr) graphs.push_back(g);
  }
  void keep_exec(cudaGraphExec_t x) {
    if (x != nullptr) execs.push_back(x);
  }
  // The node array and its capacity, each filled with the sentinel when
  // taken (a case that passes only one still shows what was written to it).
  cudaGraphNode_t* node_array() {
    std::memset(static_cast<void*>(nodes), kSentinel, sizeof nodes);
    return nodes;
  }
  size_t* node_capacity(size_t n) {
    num_nodes = n;
    return &num_nodes;
  }
  // `cfg` with a cluster of `size` blocks in x (none for 0).
  cudaLaunchConfig_t* cluster_config(unsigned size) {
    cfg.attrs = nullptr;
    cfg.numAttrs = 0;
    if (size != 0) {
      cudaLaunchAttributeValue v{};
      v.clusterDim.x = size;
      v.clusterDim.y = 1;
      v.clusterDim.z = 1;
      with_attribute(cudaLaunchAttributeClusterDimension, v);
    }
    return &cfg;
  }
  cudaStreamCaptureMode* mode_in(cudaStreamCaptureMode m) {
    mode = m;
    return &mode;
  }
  // Ends every capture a case left on this thread's fixture streams, and the
  // thread's capture mode back to global.
  void end_captures() {
    if (capture_thread.joinable()) {
      {
        std::lock_guard<std::mutex> lock(capture_mutex);
        capture_phase = 2;
      }
      capture_cv.notify_all();
      capture_thread.join();
    }
    for (cudaStream_t s : {capture_stream, stream, stream_nb, drv_stream, cudaStreamPerThread}) {
      cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
      if (!made || cudaStreamIsCapturing(s, &st) != cudaSuccess || st == cudaStreamCaptureStatusNone) continue;
      cudaGraph_t g = nullptr;
      if (cudaStreamEndCapture(s, &g) == cudaSuccess && g != nullptr) cudaGraphDestroy(g);
    }
    blocking_capture = nullptr;
    cudaStreamCaptureMode global = cudaStreamCaptureModeGlobal;
    cudaThreadExchangeStreamCaptureMode(&global);
    cudaGetLastError();
  }
  ~Fixture() {
    if (capture_thread.joinable()) {  // a fixture not released (the sticky scenario's)
      {
        std::lock_guard<std::mutex> lock(capture_mutex);
        capture_phase = 2;
      }
      capture_cv.notify_all();
      capture_thread.join();
    }
  }
  void release() {
    end_captures();
    Driver& d = driver();
    // cudaSetDevice would replace a context the scenario made current.
    if (g_user_context == nullptr) cudaSetDevice(0);
    cudaDeviceSynchronize();
    cudaFree(dev);
    cudaFreeAsync(dev_async, stream);
    cudaStreamSynchronize(stream);
    cudaFree(managed);
    cudaFreeHost(pinned);
    cudaFreeHost(mapped);
    cudaHostUnregister(registered);
    std::free(registered);
    cudaHostUnregister(pageable);  // a case may have registered it: the next fixture's memory may reuse it
    std::free(pageable);
    cudaStreamDestroy(stream);
    cudaStreamDestroy(stream_nb);
    cudaEventDestroy(event);
    cudaEventDestroy(event_end);
    cudaEventDestroy(event_notiming);
    cudaEventDestroy(event_unrecorded);
    for (cudaGraphExec_t x : execs) cudaGraphExecDestroy(x);
    for (cudaGraph_t g : graphs) cudaGraphDestroy(g);
    if (graph_exec != nullptr) cudaGraphExecDestroy(graph_exec);
    if (graph != nullptr) cudaGraphDestroy(graph);
    if (capture_stream != nullptr) cudaStreamDestroy(capture_stream);
    if (spare != nullptr) cudaFree(spare);
    if (d.ok) {
      if (drv_dev != 0) d.mem_free(drv_dev);
      if (drv_host != nullptr) d.mem_free_host(drv_host);
      if (drv_stream != nullptr) d.stream_destroy(reinterpret_cast<CUstream>(drv_stream));
      if (drv_event != nullptr) d.event_destroy(reinterpret_cast<CUevent>(drv_event));
    }
    cudaGetLastError();
  }
};

inline Fixture* g_fixture = nullptr;

inline std::string where(const void* p) {
  const Fixture* f = g_fixture;
  if (p == nullptr) return "null";
  if (f == nullptr) return "other";
  const auto in = [p](const void* base) {
    const auto a = reinterpret_cast<std::uintptr_t>(p);
    const auto b = reinterpret_cast<std::uintptr_t>(base);
    return base != nullptr && a >= b && a < b + kBytes;
  };
  if (in(f->dev)) return "dev";
  if (in(f->dev_async)) return "dev_async";
  if (in(f->managed)) return "managed";
  if (in(f->pinned)) return "pinned";
  if (in(f->mapped)) return "mapped";
  if (in(f->registered)) return "registered";
  if (in(f->pageable)) return "pageable";
  if (in(reinterpret_cast<void*>(f->drv_dev))) return "drv_dev";
  if (in(f->drv_host)) return "drv_host";
  return "other";
}

// ---- cases and scenarios ------------------------------------------------------------------------------

struct Case {
  const char* function;
  const char* name;
  void (*run)(Fixture& f);
};

// The driver state after a case: the current context (none, the program's
// own one from cuCtxCreate, or another: the runtime's) and whether device 0's
// primary context is active.
inline std::string driver_state() {
  Driver& d = driver();
  if (!d.ok) return "drv=none";
  d.init(0);
  CUcontext c = nullptr;
  d.ctx_get_current(&c);
  unsigned flags = 0;
  int active = 0;
  d.primary_state(0, &flags, &active);
  const char* cur = c == nullptr ? "none" : c == g_user_context ? "user" : "ctx";
  return std::string("cur=") + cur + " primary=" + (active != 0 ? "active" : "inactive");
}

inline void finish(const Case& c) {
  const cudaError_t peek = cudaPeekAtLastError();
  const cudaError_t get = cudaGetLastError();
  const cudaError_t get2 = cudaGetLastError();
  std::string s = std::string(c.function) + " " + c.name + " |" + line() + " | peek=" + err(peek) + " get=" + err(get) +
                  " get2=" + err(get2);
  line().clear();
  std::printf("%s | %s\n", s.c_str(), driver_state().c_str());
  std::fflush(stdout);
}

inline int run_cases(const std::vector<Case>& all, const char* scenario, const char* function, int from) {
  const std::string sc = scenario;
  std::vector<const Case*> mine;
  for (const Case& c : all)
    if (std::strcmp(c.function, function) == 0) mine.push_back(&c);
  if (mine.empty()) {
    std::printf("harness: no cases for %s\n", function);
    return 2;
  }
  Driver& d = driver();
  if (sc == "drvctx") {
    if (!d.ok) return 3;
    d.init(0);
    CUcontext ctx = nullptr;
    if (d.ctx_create(&ctx, 0, 0) != CUDA_SUCCESS) {
      std::printf("harness: cuCtxCreate failed\n");
      return 3;
    }
    g_user_context = ctx;
  }
  if (sc == "sticky") {
    // Each case gets a fixture made before the fault (made after it, a
    // fixture would be what failed creates leave behind); a batch of cases
    // per process, as the fault cannot be undone.
    const std::size_t end = std::min(mine.size(), static_cast<std::size_t>(from) + kStickyBatch);
    std::vector<std::unique_ptr<Fixture>> fixtures;
    for (std::size_t i = static_cast<std::size_t>(from); i < end; ++i) {
      fixtures.push_back(std::make_unique<Fixture>());
      fixtures.back()->make();
    }
    if (d.fake_stream_fail != nullptr) {
      // The fake: the stream's next synchronisation reports an illegal
      // address, which poisons the context as the fault does on a GPU.
      cudaStream_t s = nullptr;
      cudaStreamCreate(&s);
      d.fake_stream_fail(s, 700);
      cudaStreamSynchronize(s);
    } else {
      conf_fault<<<1, 1>>>(nullptr);
    }
    cudaDeviceSynchronize();
    cudaGetLastError();
    for (std::size_t i = static_cast<std::size_t>(from); i < end; ++i) {
      std::printf("begin %zu %s\n", i, mine[i]->name);
      std::fflush(stdout);
      g_fixture = fixtures[i - static_cast<std::size_t>(from)].get();
      mine[i]->run(*g_fixture);
      finish(*mine[i]);
    }
    g_fixture = nullptr;
    return 0;  // run.py starts the next batch
  }
  for (std::size_t i = static_cast<std::size_t>(from); i < mine.size(); ++i) {
    const Case& c = *mine[i];
    std::printf("begin %zu %s\n", i, c.name);
    std::fflush(stdout);
    if (sc == "fresh") {
      // The case is the first Runtime call; no fixture (it would be the first).
      static Fixture empty;
      c.run(empty);
      finish(c);
      return 0;  // one case per process: the next is not fresh any more
    }
    Fixture f;
    g_fixture = &f;
    if (g_user_context != nullptr) d.ctx_set_current(g_user_context);
    f.make();
    if (sc == "thread") {
      std::thread t([&] {
        c.run(f);
        finish(c);
        f.end_captures();  // a global-mode capture ends on the thread that began it
      });
      t.join();
    } else if (sc == "hostfn") {
      cudaStream_t s = nullptr;
      cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking);
      struct Call {
        const Case* c;
        Fixture* f;
      } call{&c, &f};
      cudaLaunchHostFunc(
          s,
          [](void* p) {
            auto* k = static_cast<Call*>(p);
            k->c->run(*k->f);
            finish(*k->c);
          },
          &call);
      cudaStreamSynchronize(s);
      cudaStreamDestroy(s);
      cudaGetLastError();
    } else if (sc == "capture") {
      // The case runs while this thread captures capture_stream in global
      // mode; afterwards, whether the capture survived it.
      f.capturing();
      c.run(f);
      cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
      const cudaError_t q = cudaStreamIsCapturing(f.capture_stream, &st);
      put("capture=" + (q == cudaSuccess ? std::to_string(static_cast<int>(st)) : "err" + err(q)));
      finish(c);
    } else {
      c.run(f);
      finish(c);
    }
    f.release();
    g_fixture = nullptr;
  }
  return 0;
}

inline int main_of(const std::vector<Case>& all, int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--list") == 0) {
    std::string last;
    for (const Case& c : all) {
      if (last != c.function) std::printf("%s\n", c.function);
      last = c.function;
    }
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--count") == 0) {
    std::printf("%zu\n", all.size());
    return 0;
  }
  if (argc == 2 && std::strcmp(argv[1], "--count-each") == 0) {
    for (std::size_t i = 0; i < all.size();) {
      std::size_t j = i;
      while (j < all.size() && std::strcmp(all[j].function, all[i].function) == 0) ++j;
      std::printf("%s %zu\n", all[i].function, j - i);
      i = j;
    }
    return 0;
  }
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: %s --list | --count | --count-each | SCENARIO FUNCTION [FIRST]\n"
                 "  SCENARIO: main, thread, sticky, hostfn, drvctx, fresh or capture\n",
                 argv[0]);
    return 2;
  }
  const char* scenarios[] = {"main", "thread", "sticky", "hostfn", "drvctx", "fresh", "capture"};
  bool known = false;
  for (const char* s : scenarios) known = known || std::strcmp(s, argv[1]) == 0;
  if (!known) {
    std::fprintf(stderr, "unknown scenario \"%s\"; accepted: main, thread, sticky, hostfn, drvctx, fresh, capture\n",
                 argv[1]);
    return 2;
  }
  return run_cases(all, argv[1], argv[2], argc > 3 ? std::atoi(argv[3]) : 0);
}

}  // namespace conf
