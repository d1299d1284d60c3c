// SPDX-License-Identifier: Apache-2.0
// Kernel launches: checks as the driver makes them (grid, block, dynamic
// shared memory opt-in, cluster sizes, cooperative grids that must fit at
// once), then the kernel's CPU implementation, at once or queued on its
// stream with its arguments copied.
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>

#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

// Whether a kernel in `ctx` may read and write what its pointer arguments
// point at: device memory of another device needs peer access from `ctx`
// to the memory's context (cuCtxEnablePeerAccess), as on a GPU, where the
// kernel otherwise faults with an illegal address. Managed, pinned and
// registered memory are reachable from every device.
bool arguments_reachable(const Engine& e, const FakeFunction& f, FakeCtx* ctx, void** args) {
  for (size_t i = 0; i < f.params.size(); ++i) {
    if (f.params[i].second != sizeof(uintptr_t) || args[i] == nullptr) continue;
    uintptr_t value = 0;
    std::memcpy(&value, args[i], sizeof value);
    const auto* found = find_alloc(e, value, 1);
    if (found == nullptr) continue;
    const Alloc& a = found->second;
    if (a.kind != AllocKind::device && a.kind != AllocKind::async_pool) continue;
    if (a.ctx == nullptr || a.ctx == ctx || a.ctx->device == ctx->device) continue;
    if (e.peer_enabled.count({ctx, a.ctx}) == 0) return false;
  }
  return true;
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
  if (std::uint64_t{block[0]} * block[1] * block[2] > 1024 || std::uint64_t{grid[0]} * grid[1] * grid[2] == 0) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (!f->params.empty() && args == nullptr) return CUDA_ERROR_INVALID_VALUE;
  // Dynamic shared memory beyond 48 KiB needs the kernel's opt-in
  // (CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), as on the real driver.
  const auto dyn = f->attributes.find(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES);
  if (shared > (dyn != f->attributes.end() ? static_cast<unsigned>(dyn->second) : 49152u))
    return CUDA_ERROR_INVALID_VALUE;
  auto it = e.kernels.find(f->name);
  const drvshim_fake_kernel_fn impl = it != e.kernels.end() ? it->second : builtin_kernel(f->name, f->params.size());
  if (impl == nullptr) {
    // Succeeding without running anything would let a test pass on data the
    // kernel never wrote: the launch fails, and the first one of each kernel
    // says why on stderr (the error code alone points at the device).
    if (e.unregistered_reported.insert(f->name).second) {
      std::fprintf(stderr,
                   "drvshim fake driver: kernel '%s' has no CPU version, so the fake cannot run it; register one with "
                   "drvshim_fake_register_kernel (drvshim/fakecuda.h). The launch returns CUDA_ERROR_NOT_SUPPORTED.\n",
                   f->name.c_str());
    }
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  ++e.launches;
  if (!f->params.empty() && !arguments_reachable(e, *f, ctx, args)) {
    // The kernel faults on the device: the launch is accepted, and the
    // stream's next synchronisation reports the illegal address, which
    // poisons the context (on a default stream, the context answers it at once).
    if (FakeStream* user = user_stream(e, s)) {
      user->fail_with = CUDA_ERROR_ILLEGAL_ADDRESS;
    } else {
      ctx->sticky = CUDA_ERROR_ILLEGAL_ADDRESS;
    }
    return CUDA_SUCCESS;
  }
  drvshim_fake_launch launch{{grid[0], grid[1], grid[2]},
                             {block[0], block[1], block[2]},
                             shared,
                             {cluster != nullptr ? cluster[0] : 1u, cluster != nullptr ? cluster[1] : 1u,
                              cluster != nullptr ? cluster[2] : 1u}};
  FakeStream* st = queue_of(e, s, ctx);
  if (st != nullptr && st->legacy) {
    if (const CUresult r = implicit_capture_dependency(e, st, true); r != CUDA_SUCCESS) return r;
  }
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
  return submit(e, lock, st, std::move(op));
}

CUresult fake_cuLaunchKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by, unsigned bz,
                             unsigned shared, CUstream s, void** args, void** extra) {
  FAKE_ENTER("cuLaunchKernel");
  if (extra != nullptr) return CUDA_ERROR_NOT_SUPPORTED;
  const unsigned grid[3] = {gx, gy, gz};
  const unsigned block[3] = {bx, by, bz};
  return do_launch(e, lock, f, grid, block, shared, s, args);
}

// A cooperative launch must fit on the device at once (occupancy x SMs).
CUresult cooperative_fits(Engine& e, CUfunction f, CUstream s, const unsigned grid[3], const unsigned block[3],
                          unsigned shared) {
  FakeCtx* ctx = nullptr;
  if (const CUresult r = stream_ctx(e, s, &ctx); r != CUDA_SUCCESS) return r;
  if (attr(e, ctx->device, CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH) == 0) return CUDA_ERROR_NOT_SUPPORTED;
  const std::uint64_t threads = std::uint64_t{block[0]} * block[1] * block[2];
  const auto per_sm = static_cast<unsigned>(resident_blocks_per_sm(
      e, ctx->device, live_function(e, f), threads > 1024 ? 0u : static_cast<unsigned>(threads), shared));
  if (static_cast<unsigned long long>(grid[0]) * grid[1] * grid[2] >
      static_cast<unsigned long long>(per_sm) *
          static_cast<unsigned long long>(attr(e, ctx->device, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT))) {
    return CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuLaunchKernelEx(const CUlaunchConfig* c, CUfunction f, void** args, void** extra) {
  FAKE_ENTER("cuLaunchKernelEx");
  if (c == nullptr || extra != nullptr || (c->numAttrs != 0 && c->attrs == nullptr)) return CUDA_ERROR_INVALID_VALUE;
  // The numbers cuda.h (13.0) defines; the driver refuses any other.
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    int id = 0;  // read as a number: loading an unnamed value as the enum is undefined
    std::memcpy(&id, &c->attrs[i].id, sizeof id);
    if (id < 0 || id > 16 || id == 15) return CUDA_ERROR_INVALID_VALUE;
  }
  // Clusters above the portable size (8 blocks) need the kernel's opt-in.
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    if (c->attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
    const auto& d = c->attrs[i].value.clusterDim;
    FakeFunction* fn = live_function(e, f);
    const bool opted_in = fn != nullptr &&
                          fn->attributes.count(CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED) != 0 &&
                          fn->attributes[CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED] == 1;
    if (d.x * d.y * d.z > (opted_in ? 16u : 8u)) return CUDA_ERROR_INVALID_CLUSTER_SIZE;
  }
  const unsigned grid[3] = {c->gridDimX, c->gridDimY, c->gridDimZ};
  const unsigned block[3] = {c->blockDimX, c->blockDimY, c->blockDimZ};
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    if (c->attrs[i].id != CU_LAUNCH_ATTRIBUTE_COOPERATIVE || c->attrs[i].value.cooperative == 0) continue;
    if (const CUresult r = cooperative_fits(e, f, c->hStream, grid, block, c->sharedMemBytes); r != CUDA_SUCCESS)
      return r;
  }
  unsigned cluster[3] = {1, 1, 1};
  for (unsigned i = 0; i < c->numAttrs; ++i) {
    if (c->attrs[i].id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
    cluster[0] = c->attrs[i].value.clusterDim.x;
    cluster[1] = c->attrs[i].value.clusterDim.y;
    cluster[2] = c->attrs[i].value.clusterDim.z;
  }
  return do_launch(e, lock, f, grid, block, c->sharedMemBytes, c->hStream, args, cluster);
}

CUresult fake_cuLaunchCooperativeKernel(CUfunction f, unsigned gx, unsigned gy, unsigned gz, unsigned bx, unsigned by,
                                        unsigned bz, unsigned shared, CUstream s, void** args) {
  FAKE_ENTER("cuLaunchCooperativeKernel");
  const unsigned grid[3] = {gx, gy, gz};
  const unsigned block[3] = {bx, by, bz};
  if (const CUresult r = cooperative_fits(e, f, s, grid, block, shared); r != CUDA_SUCCESS) return r;
  return do_launch(e, lock, f, grid, block, shared, s, args);
}

}  // namespace

std::vector<ProcEntry> launch_procs() {
  return {
      {"cuLaunchKernel", 4000, erase_fn(&fake_cuLaunchKernel)},
      {"cuLaunchKernelEx", 11060, erase_fn(&fake_cuLaunchKernelEx)},
      {"cuLaunchCooperativeKernel", 9000, erase_fn(&fake_cuLaunchCooperativeKernel)},
  };
}

}  // namespace drvshim::fake
