// SPDX-License-Identifier: Apache-2.0
// Streams and the queue model behind them: work queued per stream and run in
// order (submit, pump, drain), records and waits, held streams, the legacy
// default stream's implicit ordering, host functions run without the engine
// lock, and the stream entry points.
#include <algorithm>

#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

constexpr uintptr_t kLegacyStream = 0x1;
constexpr uintptr_t kPerThreadStream = 0x2;

// Set while this thread runs a host function: the driver forbids CUDA calls
// there ("may result in CUDA_ERROR_NOT_PERMITTED"); the fake always refuses them.
// initial-exec: see t_stack in fake_contexts.cpp (LeakSanitizer and dynamic TLS).
[[gnu::tls_model("initial-exec")]] thread_local int t_in_host_fn = 0;
struct InHostFn {
  InHostFn() { ++t_in_host_fn; }
  ~InHostFn() { --t_in_host_fn; }
  InHostFn(const InHostFn&) = delete;
  InHostFn& operator=(const InHostFn&) = delete;
};

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

// Work submitted to a capturing stream becomes a node of the capture's graph;
// records and waits inside the capture only order it, which the graph's
// submission order already does.
CUresult capture_op(FakeStream* st, FakeOp op) {
  FakeCapture& c = *st->capture;
  if (c.invalidated) return CUDA_ERROR_STREAM_CAPTURE_INVALIDATED;
  if (op.kind == FakeOp::record) {
    op.state->capture = st->capture;
    op.state->captured = true;
    op.state->recorder = st;
    c.records.push_back(op.state);
    return CUDA_SUCCESS;
  }
  if (op.kind == FakeOp::wait) {
    const auto other = op.state->capture.lock();
    // Waiting for another live capture's event would merge two captures.
    if (other != nullptr && other != st->capture) return CUDA_ERROR_STREAM_CAPTURE_MERGE;
    // The waiter now depends on the recorder's work up to the record.
    if (other != nullptr && op.state->recorder != st) c.unjoined.erase(op.state->recorder);
    return CUDA_SUCCESS;
  }
  if (st != c.origin) c.unjoined.insert(st);
  c.graph->nodes.push_back(std::make_unique<FakeOp>(std::move(op)));
  return CUDA_SUCCESS;
}

}  // namespace

// The legacy stream's work would wait for a blocking stream of its context
// that is capturing: CUDA_ERROR_STREAM_CAPTURE_IMPLICIT, and with
// `invalidate` (work submitted, not a question asked) the capture is over.
CUresult implicit_capture_dependency(Engine& e, FakeStream* legacy, bool invalidate) {
  CUresult r = CUDA_SUCCESS;
  for (FakeStream* other : e.streams) {
    if (other->ctx != legacy->ctx || other->capture == nullptr || (other->flags & CU_STREAM_NON_BLOCKING) != 0)
      continue;
    if (invalidate) other->capture->invalidated = true;
    r = CUDA_ERROR_STREAM_CAPTURE_IMPLICIT;
  }
  return r;
}

bool in_host_function() { return t_in_host_fn != 0; }

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

// Runs what may run, on every stream, until nothing moves. Streams in
// `forced` run even when held (a synchronize waits for held work: the test
// that holds a stream decides when its work "finishes" by synchronising or
// releasing it). Host functions run without the engine lock.
void pump(Engine& e, std::unique_lock<std::mutex>& lock, const std::set<FakeStream*>& forced) {
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
CUresult submit(Engine& e, std::unique_lock<std::mutex>& lock, FakeStream* st, FakeOp op) {
  if (st != nullptr && st->capture != nullptr) return capture_op(st, std::move(op));
  if (st != nullptr && op.kind == FakeOp::wait) {
    if (auto joined = op.state->capture.lock()) {
      // Waiting for an event recorded in a capture joins the capture.
      joined->members.push_back(st);
      joined->unjoined.insert(st);
      st->capture = std::move(joined);
      return CUDA_SUCCESS;
    }
  }
  if (st != nullptr && st->legacy) {
    // Work on the legacy stream would wait for a capturing blocking stream:
    // the driver refuses it and invalidates the capture.
    if (const CUresult r = implicit_capture_dependency(e, st, true); r != CUDA_SUCCESS) return r;
  }
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
    return CUDA_SUCCESS;
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
  return CUDA_SUCCESS;
}

CUresult submit_all(Engine& e, std::unique_lock<std::mutex>& lock, FakeStream* st, const std::vector<FakeOp>& ops) {
  if (st == nullptr || st->capture != nullptr) {
    for (const FakeOp& op : ops) {
      if (const CUresult r = submit(e, lock, st, op); r != CUDA_SUCCESS) return r;
    }
    return CUDA_SUCCESS;
  }
  // Held while the nodes are queued, so none runs (and drops the lock for a
  // host node) before the last is in the queue.
  const bool was_held = st->held;
  st->held = true;
  CUresult r = CUDA_SUCCESS;
  for (const FakeOp& op : ops) {
    r = submit(e, lock, st, op);
    if (r != CUDA_SUCCESS) break;
  }
  st->held = was_held;
  pump(e, lock);
  return r;
}

CUresult submit_work(Engine& e, std::unique_lock<std::mutex>& lock, FakeStream* st, std::function<void()> run) {
  FakeOp op;
  op.kind = FakeOp::work;
  op.run = std::move(run);
  return submit(e, lock, st, std::move(op));
}

// Whether work on `st` would have to wait (held, or work already queued), or
// does not run at all now (captured).
bool queued(const FakeStream* st) {
  return st != nullptr && (st->held || !st->queue.empty() || st->running != 0 || st->capture != nullptr);
}

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
CUresult run_synchronously(Engine& e, std::unique_lock<std::mutex>& lock, FakeCtx* ctx, std::function<void()> run) {
  FakeStream* legacy = legacy_of(e, ctx);
  if (const CUresult r = submit_work(e, lock, legacy, std::move(run)); r != CUDA_SUCCESS) return r;
  drain(e, lock, legacy);
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
  if (code == 226 || code == 700 || code == 702 || code == 710 || (code >= 714 && code <= 719) || code == 721 ||
      code == 810 || code == 911) {
    st->ctx->sticky = code;
  }
  return static_cast<CUresult>(code);
}

namespace {

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
  st->held = e.hold_new_streams;
  e.streams.insert(st);
  *ps = reinterpret_cast<CUstream>(st);
  return CUDA_SUCCESS;
}

CUresult fake_cuStreamDestroy(CUstream s) {
  FAKE_ENTER("cuStreamDestroy");
  auto* st = reinterpret_cast<FakeStream*>(s);
  if (e.streams.count(st) == 0) {
    misuse(e, "cuStreamDestroy of a destroyed or unknown stream");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  leave_capture(e, st);
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
  if (FakeStream* st = queue_of(e, s, ctx)) {
    // Waiting for a capture's work cannot be: the driver refuses it and ends the capture.
    if (st->capture != nullptr) {
      st->capture->invalidated = true;
      return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    if (st->legacy) {
      if (const CUresult r = implicit_capture_dependency(e, st, true); r != CUDA_SUCCESS) return r;
    }
    drain(e, lock, st);  // synchronising waits for the queued work
  }
  return take_failure(user_stream(e, s));
}

CUresult fake_cuStreamGetCtx(CUstream s, CUcontext* pctx) {
  FAKE_ENTER("cuStreamGetCtx");
  if (pctx == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  *pctx = as_cu(ctx);
  return CUDA_SUCCESS;
}

// The 12.5 form also names the stream's green context: the fake has none.
CUresult fake_cuStreamGetCtx_v2(CUstream s, CUcontext* pctx, CUgreenCtx* pgreen) {
  FAKE_ENTER("cuStreamGetCtx");
  if (pctx == nullptr && pgreen == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  if (pctx != nullptr) *pctx = as_cu(ctx);
  if (pgreen != nullptr) *pgreen = nullptr;
  return CUDA_SUCCESS;
}

// The default streams are blocking, at priority 0 (the driver's answer).
CUresult fake_cuStreamGetFlags(CUstream s, unsigned* flags) {
  FAKE_ENTER("cuStreamGetFlags");
  if (flags == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  FakeStream* st = user_stream(e, s);
  *flags = st != nullptr ? st->flags : 0;
  return CUDA_SUCCESS;
}

CUresult fake_cuStreamGetPriority(CUstream s, int* priority) {
  FAKE_ENTER("cuStreamGetPriority");
  if (priority == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  FakeStream* st = user_stream(e, s);
  *priority = st != nullptr ? st->priority : 0;
  return CUDA_SUCCESS;
}

// Ids are handed out at the first question; the per-thread default stream
// has one per thread and context.
CUresult fake_cuStreamGetId(CUstream s, unsigned long long* id) {
  FAKE_ENTER("cuStreamGetId");
  if (id == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  FakeStream* st = queue_of(e, s, ctx);
  thread_local std::map<FakeCtx*, unsigned long long> per_thread;
  unsigned long long& slot = st != nullptr ? st->id : per_thread[ctx];
  if (slot == 0) slot = e.next_stream_id++;
  *id = slot;
  return CUDA_SUCCESS;
}

CUresult fake_cuStreamQuery(CUstream s) {
  FAKE_ENTER("cuStreamQuery");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  if (const CUresult failure = take_failure(user_stream(e, s)); failure != CUDA_SUCCESS) return failure;
  if (FakeStream* st = queue_of(e, s, ctx); st != nullptr && st->capture != nullptr) {
    st->capture->invalidated = true;
    return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
  }
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
  return submit(e, lock, queue_of(e, s, ctx), std::move(op));  // runs now, outside the engine lock, when idle
}

}  // namespace

std::vector<ProcEntry> stream_procs() {
  return {
      {"cuCtxGetStreamPriorityRange", 5050, erase_fn(&fake_cuCtxGetStreamPriorityRange)},
      {"cuStreamCreateWithPriority", 5050, erase_fn(&fake_cuStreamCreateWithPriority)},
      {"cuStreamDestroy", 4000, erase_fn(&fake_cuStreamDestroy)},
      {"cuStreamSynchronize", 2000, erase_fn(&fake_cuStreamSynchronize)},
      {"cuStreamQuery", 2000, erase_fn(&fake_cuStreamQuery)},
      {"cuStreamGetCtx", 9020, erase_fn(&fake_cuStreamGetCtx)},
      {"cuStreamGetCtx", 12050, erase_fn(&fake_cuStreamGetCtx_v2)},
      {"cuStreamGetFlags", 5050, erase_fn(&fake_cuStreamGetFlags)},
      {"cuStreamGetPriority", 5050, erase_fn(&fake_cuStreamGetPriority)},
      {"cuStreamGetId", 12000, erase_fn(&fake_cuStreamGetId)},
      {"cuLaunchHostFunc", 10000, erase_fn(&fake_cuLaunchHostFunc)},
  };
}

}  // namespace drvshim::fake
