// SPDX-License-Identifier: Apache-2.0
// Copies and memsets: synchronous ones on the legacy stream, complete on
// return; queued ones on their stream, with the driver's staging of pageable
// memory; and the unified-address copy.
#include <memory>

#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

// A memset, synchronous (`async` false: on the legacy stream, complete on
// return) or queued on stream `s`.
CUresult fake_memset(Engine& e, std::unique_lock<std::mutex>& lock, CUdeviceptr dst, unsigned value, size_t n,
                     size_t width, bool async, CUstream s) {
  FakeCtx* ctx = nullptr;
  if (const CUresult r = async ? stream_ctx(e, s, &ctx) : current(e, &ctx); r != CUDA_SUCCESS) return r;
  const auto p = static_cast<uintptr_t>(dst);
  if (p % width != 0 || !device_accessible(e, p, n * width)) return CUDA_ERROR_INVALID_VALUE;
  auto fill = [p, value, n, width] {
    auto* bytes = reinterpret_cast<unsigned char*>(p);
    for (size_t i = 0; i < n; ++i) std::memcpy(bytes + i * width, &value, width);
  };
  return async ? submit_work(e, lock, queue_of(e, s, ctx), fill) : run_synchronously(e, lock, ctx, fill);
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

// A copy. dst_dev/src_dev: whether each side must be device-accessible
// memory. Synchronous (`async` false) copies run on the legacy stream and are
// complete on return. Queued ones read and write when the stream reaches them,
// except that, as with the driver, a pageable source is read at once (the
// driver stages it before returning) and a copy into pageable memory returns
// only when done.
CUresult fake_copy(Engine& e, std::unique_lock<std::mutex>& lock, uintptr_t dst, bool dst_dev, uintptr_t src,
                   bool src_dev, size_t n, bool async, CUstream s) {
  FakeCtx* ctx = nullptr;
  if (const CUresult r = async ? stream_ctx(e, s, &ctx) : current(e, &ctx); r != CUDA_SUCCESS) return r;
  if (n == 0) return CUDA_SUCCESS;
  if ((dst_dev && !device_accessible(e, dst, n)) || (src_dev && !device_accessible(e, src, n))) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  if (dst == 0 || src == 0) return CUDA_ERROR_INVALID_VALUE;
  if (!async) {
    return run_synchronously(
        e, lock, ctx, [=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n); });
  }
  FakeStream* st = queue_of(e, s, ctx);
  const bool waits = queued(st) || must_wait_implicitly(e, st);
  // A captured copy reads its source when the graph runs (the driver takes
  // pageable memory into a graph too), so it is not staged now.
  const bool captured = st != nullptr && st->capture != nullptr;
  if (!src_dev && !page_locked(e, src, n) && waits && !captured) {
    auto staged = std::make_shared<std::vector<unsigned char>>(reinterpret_cast<const unsigned char*>(src),
                                                               reinterpret_cast<const unsigned char*>(src) + n);
    return submit_work(e, lock, st, [=] { std::memcpy(reinterpret_cast<void*>(dst), staged->data(), n); });
  }
  if (const CUresult r = submit_work(
          e, lock, st, [=] { std::memmove(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), n); });
      r != CUDA_SUCCESS) {
    return r;
  }
  if (!dst_dev && !page_locked(e, dst, n) && waits && !captured) drain(e, lock, st);
  return CUDA_SUCCESS;
}

CUresult fake_cuMemcpyHtoD(CUdeviceptr dst, const void* src, size_t n) {
  FAKE_ENTER("cuMemcpyHtoD");
  return fake_copy(e, lock, static_cast<uintptr_t>(dst), true, reinterpret_cast<uintptr_t>(src), false, n, false,
                   nullptr);
}
CUresult fake_cuMemcpyDtoH(void* dst, CUdeviceptr src, size_t n) {
  FAKE_ENTER("cuMemcpyDtoH");
  return fake_copy(e, lock, reinterpret_cast<uintptr_t>(dst), false, static_cast<uintptr_t>(src), true, n, false,
                   nullptr);
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

// cuMemcpyAsync, the unified-address copy (drvshim does not call it; tools/bench/bench_peer's
// raw baseline does, the way nvbandwidth copies): the kind of each side is read from the address.
CUresult fake_cuMemcpyAsync(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  FAKE_ENTER("cuMemcpyAsync");
  const auto d = static_cast<uintptr_t>(dst);
  const auto s = static_cast<uintptr_t>(src);
  return fake_copy(e, lock, d, device_accessible(e, d, n), s, device_accessible(e, s, n), n, true, stream);
}

}  // namespace

std::vector<ProcEntry> copy_procs() {
  return {
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
      {"cuMemcpyAsync", 4000, erase_fn(&fake_cuMemcpyAsync)},
  };
}

}  // namespace drvshim::fake
