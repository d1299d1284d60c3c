// SPDX-License-Identifier: Apache-2.0
// Events: records queued on streams (each record its own state, so a later
// re-record does not change what an earlier wait waits for), waits, queries,
// synchronisation and elapsed time.
#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

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
    return submit(e, lock, st, std::move(op));
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
  return submit(e, lock, queue_of(e, s, ctx), std::move(op));
}

CUresult fake_cuEventQuery(CUevent ev) {
  FAKE_ENTER("cuEventQuery");
  FakeEvent* p = live_event(e, ev);
  if (p == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (p->ctx->sticky != 0) return static_cast<CUresult>(p->ctx->sticky);
  // cuda.h: not permitted on an event last recorded in a capturing stream.
  if (p->latest != nullptr && p->latest->captured) return CUDA_ERROR_CAPTURED_EVENT;
  if (const CUresult r = capture_permits_unsafe_call(e); r != CUDA_SUCCESS) return r;
  pump(e, lock);
  return p->pending() ? CUDA_ERROR_NOT_READY : CUDA_SUCCESS;
}

CUresult fake_cuEventSynchronize(CUevent ev) {
  FAKE_ENTER("cuEventSynchronize");
  FakeEvent* p = live_event(e, ev);
  if (p == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (p->ctx->sticky != 0) return static_cast<CUresult>(p->ctx->sticky);
  if (p->latest != nullptr && p->latest->captured) return CUDA_ERROR_CAPTURED_EVENT;
  if (const CUresult r = capture_permits_unsafe_call(e); r != CUDA_SUCCESS) return r;
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

}  // namespace

std::vector<ProcEntry> event_procs() {
  return {
      {"cuStreamWaitEvent", 3020, erase_fn(&fake_cuStreamWaitEvent)},
      {"cuEventCreate", 2000, erase_fn(&fake_cuEventCreate)},
      {"cuEventDestroy", 4000, erase_fn(&fake_cuEventDestroy)},
      {"cuEventRecord", 2000, erase_fn(&fake_cuEventRecord)},
      {"cuEventQuery", 2000, erase_fn(&fake_cuEventQuery)},
      {"cuEventSynchronize", 2000, erase_fn(&fake_cuEventSynchronize)},
      {"cuEventElapsedTime", 2000, erase_fn(&fake_cuEventElapsedTime)},
      // The 12.8 form has the same parameters; the fake answers both alike.
      {"cuEventElapsedTime", 12080, erase_fn(&fake_cuEventElapsedTime)},
  };
}

}  // namespace drvshim::fake
