// SPDX-License-Identifier: Apache-2.0
// Contexts: primary contexts (retain, release, flags, reset), created
// contexts, each thread's context stack, and the purge of everything made in
// a context that goes away.
#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

struct ThreadStack {
  unsigned long long generation = 0;
  std::vector<FakeCtx*> stack;
};
// initial-exec: the fake is dlopen'ed, so its thread_locals would otherwise be
// dynamic TLS, malloc'ed on first use through __tls_get_addr. GCC 12's
// LeakSanitizer guesses the size of such a block from the bytes before it
// ("glibc >=2.19 suspected") and, when the neighbouring heap chunk happens to
// look like a glibc header, scans a garbage range at exit and crashes its own
// tracer ("Tracer caught signal 11": example_init_order_dual, every run, in CI
// and here). Static TLS is never guessed at, and the fake's few bytes fit the
// surplus glibc keeps for libraries loaded with dlopen.
[[gnu::tls_model("initial-exec")]] thread_local ThreadStack t_stack;

constexpr unsigned kValidCtxFlags = 0xFF;

}  // namespace

std::vector<FakeCtx*>& ctx_stack(Engine& e) {
  if (t_stack.generation != e.generation) {
    t_stack.stack.clear();
    t_stack.generation = e.generation;
  }
  return t_stack.stack;
}

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

namespace {

// A context is gone (destroyed, or a primary context deactivated or reset):
// as with the driver, everything made in it goes with it: streams (their
// queued work dropped), events, modules, its allocations (but for portable
// pinned memory) and host registrations. The records in the dropped work
// count as reached: the driver ends a context's work before destroying it,
// so another context's stream waiting for one of them goes on (a contract
// case checks this on the GPU).
void purge_context(Engine& e, FakeCtx* ctx) {
  const auto reach_records = [](FakeStream& st) {
    for (FakeOp& op : st.queue) {
      if (op.kind == FakeOp::record && op.state != nullptr && !op.state->done) {
        op.state->done = true;
        op.state->at = std::chrono::steady_clock::now();
      }
    }
  };
  for (auto& [owner, legacy] : e.legacy_streams) {
    if (owner == ctx) reach_records(*legacy);
  }
  for (FakeStream* st : e.streams) {
    if (st->ctx == ctx) leave_capture(e, st);
  }
  for (auto it = e.streams.begin(); it != e.streams.end();) {
    if ((*it)->ctx == ctx) {
      reach_records(**it);
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
  if ((flags & ~kValidCtxFlags) != 0 || (flags & 0x07) == 0x03 || (flags & 0x07) == 0x05 || (flags & 0x07) == 0x06 ||
      (flags & 0x07) == 0x07) {
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

// cuCtxCreate_v3 (11.4, execution affinity): what cuGetProcAddress gives a
// caller asking for "cuCtxCreate" at versions 11040 to 12049, as the real driver does.
CUresult fake_cuCtxCreate_v3(CUcontext* pctx, CUexecAffinityParam* /*params*/, int /*count*/, unsigned flags,
                             CUdevice dev) {
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

}  // namespace

// The current context, or the error the driver gives without a usable one.
CUresult current(Engine& e, FakeCtx** out) {
  auto& stack = ctx_stack(e);
  if (stack.empty()) return CUDA_ERROR_INVALID_CONTEXT;
  if (!is_live(e, stack.back())) return CUDA_ERROR_CONTEXT_IS_DESTROYED;
  if (stack.back()->sticky != 0) return static_cast<CUresult>(stack.back()->sticky);
  *out = stack.back();
  return CUDA_SUCCESS;
}

namespace {

// The current context's device.
CUresult device_of_current(Engine& e, CUdevice* dev) {
  // A primary context released or reset under this thread stays its current
  // context, and the H200's driver still names its device (context_state).
  auto& stack = ctx_stack(e);
  if (!stack.empty() && !is_live(e, stack.back())) {
    for (std::size_t d = 0; d < e.primaries.size(); ++d) {
      if (e.primaries[d].previous == stack.back()) {
        *dev = static_cast<CUdevice>(d);
        return CUDA_SUCCESS;
      }
    }
  }
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  *dev = ctx->device;
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxGetDevice(CUdevice* dev) {
  FAKE_ENTER("cuCtxGetDevice");
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  return device_of_current(e, dev);
}

// The 13.0 form names a context; null means the current one.
CUresult fake_cuCtxGetDevice_v2(CUdevice* dev, CUcontext c) {
  FAKE_ENTER("cuCtxGetDevice");
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (c == nullptr) return device_of_current(e, dev);
  FakeCtx* ctx = as_ctx(c);
  if (!is_live(e, ctx)) return CUDA_ERROR_INVALID_CONTEXT;
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

// Every stream of the context, its legacy stream included, runs to its end,
// and an error of any of them is reported.
CUresult synchronize_context(Engine& e, std::unique_lock<std::mutex>& lock, FakeCtx* ctx) {
  drain_everything(e, lock, ctx);
  for (FakeStream* st : e.streams) {
    if (st->ctx == ctx && st->fail_with != 0) return take_failure(st);
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuCtxSynchronize() {
  FAKE_ENTER("cuCtxSynchronize");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  if (const CUresult r = refuse_context_wait_during_capture(e, ctx); r != CUDA_SUCCESS) return r;
  return synchronize_context(e, lock, ctx);
}

// The 13.0 form names a context; null means the current one.
CUresult fake_cuCtxSynchronize_v2(CUcontext c) {
  FAKE_ENTER("cuCtxSynchronize");
  FakeCtx* ctx = as_ctx(c);
  if (ctx == nullptr) {
    if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  } else if (!is_live(e, ctx)) {
    return CUDA_ERROR_INVALID_CONTEXT;
  } else if (ctx->sticky != 0) {
    return static_cast<CUresult>(ctx->sticky);
  }
  if (const CUresult r = refuse_context_wait_during_capture(e, ctx); r != CUDA_SUCCESS) return r;
  return synchronize_context(e, lock, ctx);
}

}  // namespace

std::vector<ProcEntry> context_procs() {
  return {
      {"cuDevicePrimaryCtxRetain", 7000, erase_fn(&fake_cuDevicePrimaryCtxRetain)},
      {"cuDevicePrimaryCtxRelease", 11000, erase_fn(&fake_cuDevicePrimaryCtxRelease)},
      {"cuDevicePrimaryCtxSetFlags", 11000, erase_fn(&fake_cuDevicePrimaryCtxSetFlags)},
      {"cuDevicePrimaryCtxGetState", 7000, erase_fn(&fake_cuDevicePrimaryCtxGetState)},
      {"cuDevicePrimaryCtxReset", 11000, erase_fn(&fake_cuDevicePrimaryCtxReset)},
      {"cuCtxCreate", 3020, erase_fn(&fake_cuCtxCreate_v2)},
      {"cuCtxCreate", 11040, erase_fn(&fake_cuCtxCreate_v3)},
      {"cuCtxCreate", 12050, erase_fn(&fake_cuCtxCreate_v4)},
      {"cuCtxDestroy", 4000, erase_fn(&fake_cuCtxDestroy)},
      {"cuCtxPushCurrent", 4000, erase_fn(&fake_cuCtxPushCurrent)},
      {"cuCtxPopCurrent", 4000, erase_fn(&fake_cuCtxPopCurrent)},
      {"cuCtxSetCurrent", 4000, erase_fn(&fake_cuCtxSetCurrent)},
      {"cuCtxGetCurrent", 4000, erase_fn(&fake_cuCtxGetCurrent)},
      {"cuCtxGetDevice", 2000, erase_fn(&fake_cuCtxGetDevice)},
      {"cuCtxGetDevice", 13000, erase_fn(&fake_cuCtxGetDevice_v2)},
      {"cuCtxGetFlags", 7000, erase_fn(&fake_cuCtxGetFlags)},
      {"cuCtxGetApiVersion", 3020, erase_fn(&fake_cuCtxGetApiVersion)},
      {"cuCtxGetId", 12000, erase_fn(&fake_cuCtxGetId)},
      {"cuCtxSynchronize", 2000, erase_fn(&fake_cuCtxSynchronize)},
      {"cuCtxSynchronize", 13000, erase_fn(&fake_cuCtxSynchronize_v2)},
  };
}

}  // namespace drvshim::fake
