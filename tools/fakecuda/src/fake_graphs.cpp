// SPDX-License-Identifier: Apache-2.0
// Stream capture and graphs: work submitted to a capturing stream becomes the
// nodes of a graph (in submission order), instantiated into an executable
// graph whose launch submits the nodes' work to a stream again. The capture
// modes' rule on calls a capture prohibits (allocations, frees), and the
// implicit dependency of the legacy stream on capturing blocking streams
// (fake_streams.cpp).
#include <algorithm>

#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

// Each thread's capture mode (cuThreadExchangeStreamCaptureMode), global at first.
[[gnu::tls_model("initial-exec")]] thread_local int t_capture_mode = CU_STREAM_CAPTURE_MODE_GLOBAL;

std::vector<FakeCapture*> live_captures(Engine& e) {
  std::vector<FakeCapture*> out;
  for (FakeStream* st : e.streams) {
    if (st->capture != nullptr && std::find(out.begin(), out.end(), st->capture.get()) == out.end()) {
      out.push_back(st->capture.get());
    }
  }
  return out;
}

FakeGraph* live_graph(Engine& e, CUgraph g) {
  auto* p = reinterpret_cast<FakeGraph*>(g);
  return e.graphs.count(p) != 0 ? p : nullptr;
}

// A graph the program owns, or the one a capture in progress is building
// (which may be read, not destroyed).
FakeGraph* readable_graph(Engine& e, CUgraph g) {
  if (FakeGraph* p = live_graph(e, g)) return p;
  for (FakeCapture* c : live_captures(e)) {
    if (reinterpret_cast<CUgraph>(c->graph.get()) == g) return c->graph.get();
  }
  return nullptr;
}

FakeGraphExec* live_exec(Engine& e, CUgraphExec g) {
  auto* p = reinterpret_cast<FakeGraphExec*>(g);
  return e.graph_execs.count(p) != 0 ? p : nullptr;
}

CUresult fake_cuStreamBeginCapture_v2(CUstream s, CUstreamCaptureMode mode) {
  FAKE_ENTER("cuStreamBeginCapture");
  if (mode < CU_STREAM_CAPTURE_MODE_GLOBAL || mode > CU_STREAM_CAPTURE_MODE_RELAXED) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  FakeStream* st = queue_of(e, s, ctx);
  // The legacy stream cannot be captured; the fake does not model capturing
  // the per-thread default stream (its work runs at once here).
  if (st == nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  if (st->legacy) return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  if (st->capture != nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  auto c = std::make_shared<FakeCapture>();
  c->id = e.next_capture_id++;
  c->mode = mode;
  c->thread = std::this_thread::get_id();
  c->origin = st;
  c->graph = std::make_unique<FakeGraph>();
  c->graph->ctx = ctx;
  c->members.push_back(st);
  st->capture = std::move(c);
  return CUDA_SUCCESS;
}

// A capture's end: every member stops capturing, and its records count as
// reached (nothing will run them).
void finish(Engine& e, FakeCapture& c) {
  for (FakeStream* st : e.streams) {
    if (st->capture.get() == &c) st->capture.reset();
  }
  for (const auto& record : c.records) {
    record->done = true;
    record->at = std::chrono::steady_clock::now();
    record->capture.reset();
  }
}

CUresult fake_cuStreamEndCapture(CUstream s, CUgraph* out) {
  FAKE_ENTER("cuStreamEndCapture");
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  FakeStream* st = queue_of(e, s, ctx);
  if (st == nullptr || st->capture == nullptr) return CUDA_ERROR_ILLEGAL_STATE;
  const std::shared_ptr<FakeCapture> c = st->capture;
  // Only the stream that began it ends a capture (another member: a join to undo first).
  if (c->origin != st) return CUDA_ERROR_STREAM_CAPTURE_UNMATCHED;
  // A thread-local or global capture ends on the thread that began it.
  if (c->mode != CU_STREAM_CAPTURE_MODE_RELAXED && c->thread != std::this_thread::get_id()) {
    return CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD;
  }
  finish(e, *c);
  *out = nullptr;
  if (c->invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  // A stream that joined and did work the origin never waited for.
  if (!c->unjoined.empty()) return CUDA_ERROR_STREAM_CAPTURE_UNJOINED;
  FakeGraph* g = c->graph.release();
  e.graphs.insert(g);
  *out = reinterpret_cast<CUgraph>(g);
  return CUDA_SUCCESS;
}

CUresult capture_status(Engine& e, CUstream s, CUstreamCaptureStatus* status, FakeStream** out) {
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  FakeStream* st = queue_of(e, s, ctx);
  *out = st;
  if (st != nullptr && st->legacy) {
    // Asking about the legacy stream while a blocking stream captures: its
    // work would depend on the capture; the driver says so without ending it.
    if (const CUresult r = implicit_capture_dependency(e, st, false); r != CUDA_SUCCESS) return r;
  }
  if (st == nullptr || st->capture == nullptr) {
    *status = CU_STREAM_CAPTURE_STATUS_NONE;
  } else {
    *status = st->capture->invalidated ? CU_STREAM_CAPTURE_STATUS_INVALIDATED : CU_STREAM_CAPTURE_STATUS_ACTIVE;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuStreamIsCapturing(CUstream s, CUstreamCaptureStatus* status) {
  FAKE_ENTER("cuStreamIsCapturing");
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeStream* st = nullptr;
  return capture_status(e, s, status, &st);
}

// The 12.3 form: status, id, the graph being built and the current
// dependencies (the fake's graph is a sequence: the last node, if any).
CUresult fake_cuStreamGetCaptureInfo_v3(CUstream s, CUstreamCaptureStatus* status, cuuint64_t* id, CUgraph* graph,
                                        const CUgraphNode** deps, const CUgraphEdgeData** edges, size_t* count) {
  FAKE_ENTER("cuStreamGetCaptureInfo");
  if (status == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeStream* st = nullptr;
  if (const CUresult r = capture_status(e, s, status, &st); r != CUDA_SUCCESS) return r;
  // An invalidated capture no longer names its id or graph (the driver answers 0 and null).
  if (id != nullptr) *id = 0;
  if (graph != nullptr) *graph = nullptr;
  if (deps != nullptr) *deps = nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (count != nullptr) *count = 0;
  if (*status != CU_STREAM_CAPTURE_STATUS_ACTIVE) return CUDA_SUCCESS;
  FakeCapture& c = *st->capture;
  if (id != nullptr) *id = c.id;
  if (graph != nullptr) *graph = reinterpret_cast<CUgraph>(c.graph.get());
  // The array belongs to the capture, as the driver's does: asking about
  // another stream does not change it.
  c.last_node = c.graph->nodes.empty() ? nullptr : reinterpret_cast<CUgraphNode>(c.graph->nodes.back().get());
  const CUgraphNode last = c.last_node;
  if (deps != nullptr) *deps = last != nullptr ? &c.last_node : nullptr;
  if (edges != nullptr) *edges = nullptr;
  if (count != nullptr) *count = last != nullptr ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult fake_cuThreadExchangeStreamCaptureMode(CUstreamCaptureMode* mode) {
  FAKE_ENTER("cuThreadExchangeStreamCaptureMode");
  if (mode == nullptr || *mode < CU_STREAM_CAPTURE_MODE_GLOBAL || *mode > CU_STREAM_CAPTURE_MODE_RELAXED) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const int previous = std::exchange(t_capture_mode, static_cast<int>(*mode));
  *mode = static_cast<CUstreamCaptureMode>(previous);
  return CUDA_SUCCESS;
}

CUresult fake_cuGraphDestroy(CUgraph g) {
  FAKE_ENTER("cuGraphDestroy");
  FakeGraph* p = live_graph(e, g);
  if (p == nullptr) {
    misuse(e, "cuGraphDestroy of a destroyed or unknown graph");
    return CUDA_ERROR_INVALID_VALUE;
  }
  e.graphs.erase(p);
  delete p;
  return CUDA_SUCCESS;
}

CUresult fake_cuGraphGetNodes(CUgraph g, CUgraphNode* nodes, size_t* count) {
  FAKE_ENTER("cuGraphGetNodes");
  FakeGraph* p = readable_graph(e, g);
  if (p == nullptr || count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (nodes != nullptr) {
    // As cuda.h: at most *count handles; the rest of a longer array is set to null.
    for (size_t i = 0; i < *count; ++i) {
      nodes[i] = i < p->nodes.size() ? reinterpret_cast<CUgraphNode>(p->nodes[i].get()) : nullptr;
    }
  }
  *count = p->nodes.size();
  return CUDA_SUCCESS;
}

CUresult fake_cuGraphInstantiateWithFlags(CUgraphExec* out, CUgraph g, unsigned long long flags) {
  FAKE_ENTER("cuGraphInstantiateWithFlags");
  FakeGraph* p = live_graph(e, g);
  if (out == nullptr || p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // CUDA_GRAPH_INSTANTIATE_FLAG_UPLOAD needs a stream: cuGraphInstantiateWithParams only.
  constexpr unsigned long long known = CUDA_GRAPH_INSTANTIATE_FLAG_AUTO_FREE_ON_LAUNCH |
                                       CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH |
                                       CUDA_GRAPH_INSTANTIATE_FLAG_USE_NODE_PRIORITY;
  if ((flags & ~known) != 0) return CUDA_ERROR_INVALID_VALUE;
  auto* x = new FakeGraphExec;
  x->ctx = p->ctx;
  for (const auto& node : p->nodes) x->ops.push_back(*node);
  x->user_objects = p->user_objects;
  e.graph_execs.insert(x);
  *out = reinterpret_cast<CUgraphExec>(x);
  return CUDA_SUCCESS;
}

CUresult fake_cuGraphExecDestroy(CUgraphExec g) {
  FAKE_ENTER("cuGraphExecDestroy");
  FakeGraphExec* p = live_exec(e, g);
  if (p == nullptr) {
    misuse(e, "cuGraphExecDestroy of a destroyed or unknown executable graph");
    return CUDA_ERROR_INVALID_VALUE;
  }
  e.graph_execs.erase(p);
  delete p;
  return CUDA_SUCCESS;
}

CUresult fake_cuGraphLaunch(CUgraphExec g, CUstream s) {
  FAKE_ENTER("cuGraphLaunch");
  FakeGraphExec* p = live_exec(e, g);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  if (ctx != p->ctx) return CUDA_ERROR_INVALID_VALUE;
  FakeStream* st = queue_of(e, s, ctx);
  std::vector<FakeOp> ops = p->ops;  // the graph may be destroyed by a host function it runs
  if (!p->user_objects.empty()) {
    // The launch keeps the user objects alive until its last operation ran,
    // also when the executable graph is destroyed before that.
    FakeOp keep;
    keep.kind = FakeOp::work;
    keep.run = [refs = p->user_objects] {};
    ops.push_back(std::move(keep));
  }
  return submit_all(e, lock, st, ops);
}

CUresult fake_cuUserObjectCreate(CUuserObject* out, void* ptr, CUhostFn destroy, unsigned initial, unsigned flags) {
  FAKE_ENTER("cuUserObjectCreate");
  // CUDA requires the flag: the destructor is never waited for.
  if (out == nullptr || destroy == nullptr || initial == 0 || flags != CU_USER_OBJECT_NO_DESTRUCTOR_SYNC) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  auto object = std::make_shared<FakeUserObject>();
  object->ptr = ptr;
  object->destroy = destroy;
  e.user_objects[object.get()].assign(initial, object);
  *out = reinterpret_cast<CUuserObject>(object.get());
  return CUDA_SUCCESS;
}

CUresult fake_cuUserObjectRelease(CUuserObject o, unsigned count) {
  FAKE_ENTER("cuUserObjectRelease");
  const auto it = e.user_objects.find(reinterpret_cast<FakeUserObject*>(o));
  if (it == e.user_objects.end() || count == 0 || count > it->second.size()) {
    misuse(e, "cuUserObjectRelease of more references than the program holds");
    return CUDA_ERROR_INVALID_VALUE;
  }
  it->second.resize(it->second.size() - count);
  if (it->second.empty()) e.user_objects.erase(it);  // the destructor runs if nothing else holds it
  return CUDA_SUCCESS;
}

// A graph takes `count` references: copies of the program's, or (MOVE) the
// program's own. The graph a capture is building may take them too.
CUresult fake_cuGraphRetainUserObject(CUgraph g, CUuserObject o, unsigned count, unsigned flags) {
  FAKE_ENTER("cuGraphRetainUserObject");
  FakeGraph* graph = readable_graph(e, g);
  const auto it = e.user_objects.find(reinterpret_cast<FakeUserObject*>(o));
  if (graph == nullptr || it == e.user_objects.end() || count == 0 || flags > CU_GRAPH_USER_OBJECT_MOVE) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (flags == CU_GRAPH_USER_OBJECT_MOVE) {
    if (count > it->second.size()) return CUDA_ERROR_INVALID_VALUE;
    for (unsigned i = 0; i < count; ++i) {
      graph->user_objects.push_back(std::move(it->second.back()));
      it->second.pop_back();
    }
    if (it->second.empty()) e.user_objects.erase(it);
  } else {
    for (unsigned i = 0; i < count; ++i) graph->user_objects.push_back(it->second.front());
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuGraphUpload(CUgraphExec g, CUstream s) {
  FAKE_ENTER("cuGraphUpload");
  FakeGraphExec* p = live_exec(e, g);
  if (p == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  return stream_ctx(e, s, &ctx);
}

}  // namespace

// The refusal also invalidates the captures that forbade the call, as the
// driver does (an H100 with driver 580: a cuMemAlloc refused in a global
// capture leaves it invalidated).
CUresult capture_permits_unsafe_call(Engine& e) {
  const auto me = std::this_thread::get_id();
  CUresult r = CUDA_SUCCESS;
  for (FakeCapture* c : live_captures(e)) {
    if (c->mode == CU_STREAM_CAPTURE_MODE_RELAXED || t_capture_mode == CU_STREAM_CAPTURE_MODE_RELAXED) continue;
    const bool own = c->thread == me;
    if (own || (c->mode == CU_STREAM_CAPTURE_MODE_GLOBAL && t_capture_mode == CU_STREAM_CAPTURE_MODE_GLOBAL)) {
      c->invalidated = true;
      r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
  }
  return r;
}

void leave_capture(Engine& e, FakeStream* st) {
  if (st->capture == nullptr) return;
  const std::shared_ptr<FakeCapture> c = std::move(st->capture);
  c->invalidated = true;
  c->unjoined.erase(st);
  c->members.erase(std::remove(c->members.begin(), c->members.end(), st), c->members.end());
  if (c->origin == st) finish(e, *c);
}

CUresult refuse_context_wait_during_capture(Engine& e, FakeCtx* ctx) {
  CUresult r = CUDA_SUCCESS;
  for (FakeStream* st : e.streams) {
    if (st->ctx != ctx || st->capture == nullptr) continue;
    st->capture->invalidated = true;
    r = CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
  return r;
}

void reset_graphs(Engine& e) {
  for (FakeGraph* g : e.graphs) delete g;
  e.graphs.clear();
  for (FakeGraphExec* x : e.graph_execs) delete x;
  e.graph_execs.clear();
  e.user_objects.clear();
  e.next_capture_id = 1;
}

std::vector<ProcEntry> graph_procs() {
  return {
      {"cuStreamBeginCapture", 10010, erase_fn(&fake_cuStreamBeginCapture_v2)},
      {"cuStreamEndCapture", 10000, erase_fn(&fake_cuStreamEndCapture)},
      {"cuStreamIsCapturing", 10000, erase_fn(&fake_cuStreamIsCapturing)},
      {"cuStreamGetCaptureInfo", 12030, erase_fn(&fake_cuStreamGetCaptureInfo_v3)},
      {"cuThreadExchangeStreamCaptureMode", 10010, erase_fn(&fake_cuThreadExchangeStreamCaptureMode)},
      {"cuGraphDestroy", 10000, erase_fn(&fake_cuGraphDestroy)},
      {"cuGraphGetNodes", 10000, erase_fn(&fake_cuGraphGetNodes)},
      {"cuGraphInstantiateWithFlags", 11040, erase_fn(&fake_cuGraphInstantiateWithFlags)},
      {"cuGraphExecDestroy", 10000, erase_fn(&fake_cuGraphExecDestroy)},
      {"cuGraphLaunch", 10000, erase_fn(&fake_cuGraphLaunch)},
      {"cuGraphUpload", 11010, erase_fn(&fake_cuGraphUpload)},
      {"cuUserObjectCreate", 11030, erase_fn(&fake_cuUserObjectCreate)},
      {"cuUserObjectRelease", 11030, erase_fn(&fake_cuUserObjectRelease)},
      {"cuGraphRetainUserObject", 11030, erase_fn(&fake_cuGraphRetainUserObject)},
  };
}

}  // namespace drvshim::fake
