// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file context.hpp
/// Contexts: the primary context (retained explicitly, RAII release),
/// non-primary contexts, non-owning views, and a scoped "make current" guard.
///
/// Context policy: every drvshim call on an object bound to a context makes
/// that context current for the duration of the call (cuCtxPushCurrent only
/// when it is not already current) and restores the caller's context stack
/// before returning, also when it throws. So objects work from any thread and
/// next to other CUDA users, and no drvshim call ever leaves the calling
/// thread's context stack changed.
#include <drvshim/device.hpp>
#include <drvshim/error.hpp>
#include <drvshim/export.hpp>
#include <drvshim/owning_handle.hpp>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>

namespace drvshim {

class Driver;

/// Free and total device memory, as cuMemGetInfo reports them.
struct MemoryInfo {
  std::size_t free = 0;
  std::size_t total = 0;
};

/// Per-context limits (cuCtxSetLimit), numbered as cuda.h's CUlimit (the
/// CUDA Runtime's cudaLimit uses the same numbers).
enum class Limit : int {
  stack_size = 0,
  printf_fifo_size = 1,
  malloc_heap_size = 2,
  dev_runtime_sync_depth = 3,
  dev_runtime_pending_launch_count = 4,
  max_l2_fetch_granularity = 5,
  persisting_l2_cache_size = 6,
};

/// A non-owning view of a context: cheap to copy; valid while the owning
/// PrimaryContext or Context (or another component's retain) keeps the context alive.
class DRVSHIM_API ContextRef {
 public:
  /// The CUcontext, as an opaque address.
  std::uintptr_t address() const noexcept { return address_; }
  /// The device the context belongs to.
  const Device& device() const noexcept { return device_; }
  /// Whether this is the device's primary context.
  bool is_primary() const noexcept { return primary_; }
  /// cuCtxGetId: an identifier no other context of the process ever has, even
  /// one created later at the same address. DriverTooOldError before CUDA 12.0.
  std::uint64_t unique_id() const;

  /// Whether this context is the calling thread's current context (cuCtxGetCurrent).
  bool is_current() const;
  /// The sticky error (a CUresult: illegal address and kin) a drvshim call
  /// saw on this context, after which drvshim refuses further calls on it
  /// (ContextPoisonedError); 0 when none did. Asks no driver function.
  int sticky_error() const noexcept;
  /// Makes this context the calling thread's current one, replacing the top
  /// of its context stack (cuCtxSetCurrent), as the CUDA Runtime does.
  /// drvshim's own calls never need it (they push and pop the context they
  /// use); it is for code that relies on a current context, such as
  /// runtime_compat. Throws ContextPoisonedError for a poisoned context.
  void make_current() const;
  /// How make_current treats a context with a sticky error.
  enum class IfPoisoned {
    refuse,  ///< ContextPoisonedError, as make_current()
    allow,   ///< made current all the same, as cudaSetDevice does (the calls after it answer the error)
  };
  void make_current(IfPoisoned if_poisoned) const;
  /// Waits for all work in the context (cuCtxSynchronize, with the context made current).
  void synchronize() const;
  /// cuMemGetInfo for the context's device (with the context made current).
  MemoryInfo memory_info() const;
  /// cuCtxGetApiVersion.
  unsigned api_version() const;
  /// cuCtxGetFlags (with the context made current).
  ContextFlags flags() const;
  /// cuCtxSetLimit / cuCtxGetLimit (with the context made current). Throws
  /// CudaError (CUDA_ERROR_UNSUPPORTED_LIMIT, CUDA_ERROR_INVALID_VALUE) for what the device refuses.
  void set_limit(Limit limit, std::size_t value) const;
  std::size_t limit(Limit limit) const;
  /// cuCtxResetPersistingL2Cache: returns every persisting L2 line to normal.
  void reset_persisting_l2_cache() const;
  /// cuProfilerStart / cuProfilerStop: profiling (Nsight, CUPTI) of this
  /// context's work starts and stops here.
  void profiler_start() const;
  void profiler_stop() const;

  /// The same context (of the same Driver).
  friend bool operator==(const ContextRef&, const ContextRef&) = default;

 private:
  friend class PrimaryContext;
  friend class Context;
  friend DRVSHIM_API std::optional<ContextRef> current_context(const Driver& driver);
  friend DRVSHIM_API ContextRef context_of_stream(const Driver& driver, std::uintptr_t stream);
  ContextRef(Device device, std::uintptr_t address, bool primary) noexcept
      : device_(std::move(device)), address_(address), primary_(primary) {}
  Device device_;
  std::uintptr_t address_;
  bool primary_;
};

/// A view of the calling thread's current context, whoever made it current:
/// drvshim, the CUDA Runtime, or the program itself (cuCtxCreate,
/// cuCtxSetCurrent, cuCtxPushCurrent). Wraps cuCtxGetCurrent, then
/// cuCtxGetDevice for its device; nullopt when no context is current. The view
/// owns nothing (the context must outlive its use) and is_primary() is false
/// even for a primary context (the driver cannot say). Throws MissingStepError
/// before Driver::init(), CudaError when the driver refuses.
DRVSHIM_API std::optional<ContextRef> current_context(const Driver& driver);

/// A view of the context a stream belongs to, for streams drvshim did not
/// create (cuStreamCreate, the CUDA Runtime, another library): wraps
/// cuStreamGetCtx, then cuCtxGetDevice with that context pushed for the call.
/// Throws CudaError (CUDA_ERROR_INVALID_HANDLE, CUDA_ERROR_CONTEXT_IS_DESTROYED)
/// for a handle the driver refuses, DriverTooOldError without cuStreamGetCtx
/// (CUDA 9.2), InvalidArgumentError for the default streams (0, 0x1, 0x2),
/// which belong to whatever context is current.
DRVSHIM_API ContextRef context_of_stream(const Driver& driver, std::uintptr_t stream);

/// Makes a context current for a scope: cuCtxPushCurrent on construction,
/// cuCtxPopCurrent on destruction (also during stack unwinding). Not copyable
/// or movable. Throws from the constructor like any failed driver call, and
/// ContextPoisonedError for a poisoned context (as make_current() does),
/// without pushing it; the destructor never throws (a failed or mismatched
/// pop is logged as an error).
class DRVSHIM_API ScopedCurrentContext {
 public:
  explicit ScopedCurrentContext(const ContextRef& context);
  ~ScopedCurrentContext();
  ScopedCurrentContext(const ScopedCurrentContext&) = delete;
  ScopedCurrentContext& operator=(const ScopedCurrentContext&) = delete;

 private:
  std::shared_ptr<detail::DriverCore> core_;
  std::uintptr_t pushed_;
};

namespace detail {
/// PrimaryContext's ownership traits (owning_handle.hpp).
struct PrimaryContextTraits {
  struct value_type {
    Device device;
    std::uintptr_t address;
    bool adopted;
  };
  static bool held(const value_type& v) noexcept { return v.address != 0; }
  static void clear(value_type& v) noexcept { v.address = 0; }
  [[nodiscard]] static Status release(value_type& v) noexcept;
  static void release_or_throw(value_type& v);
};

/// Context's ownership traits (owning_handle.hpp).
struct ContextTraits {
  struct value_type {
    Device device;
    std::uintptr_t address;
  };
  static bool held(const value_type& v) noexcept { return v.address != 0; }
  static void clear(value_type& v) noexcept { v.address = 0; }
  [[nodiscard]] static Status release(value_type& v) noexcept;
  static void release_or_throw(value_type& v);
};
}  // namespace detail

/// A retained primary context (move-only owner). The destructor releases it
/// with the no-throw twin; after process exit started, in a forked child, or
/// once the driver reports it is deinitialised, it makes no driver call.
class DRVSHIM_API PrimaryContext {
 public:
  PrimaryContext(PrimaryContext&& other) noexcept;
  PrimaryContext& operator=(PrimaryContext&& other) noexcept;
  PrimaryContext(const PrimaryContext&) = delete;
  PrimaryContext& operator=(const PrimaryContext&) = delete;
  ~PrimaryContext();

  /// Whether this object still holds a retain.
  explicit operator bool() const noexcept { return handle_.held(); }
  /// A view of the context. Throws InvalidArgumentError on an empty (moved-from or released) object.
  /// Not of a temporary owner, whose view would outlive it.
  ContextRef ref() const&;
  ContextRef ref() const&& = delete;
  /// The owner is usable where a view is (Stream::create, DeviceBuffer::allocate,
  /// ...), as ref(); not a temporary owner, whose view would outlive it.
  operator ContextRef() const& { return ref(); }
  operator ContextRef() const&& = delete;
  /// The device.
  const Device& device() const noexcept { return handle_.get().device; }
  /// Whether another component (such as the CUDA Runtime) activated the
  /// primary context before drvshim retained it. A second retain by drvshim
  /// of a context drvshim itself activated is not adopted (the device's
  /// ledger of drvshim's own retains tells the two apart); one made while
  /// drvshim holds an adopted context is adopted too.
  bool adopted() const noexcept { return handle_.get().adopted; }

  /// Releases the retain (cuDevicePrimaryCtxRelease_v2); the object becomes
  /// empty. Throws CudaError on failure (the object is empty either way).
  void release();
  /// The no-throw twin, for cleanup paths.
  [[nodiscard]] Status release(std::nothrow_t) noexcept;

 private:
  friend class Device;
  PrimaryContext(Device device, std::uintptr_t address, bool adopted) noexcept;
  detail::OwningHandle<detail::PrimaryContextTraits> handle_;
};

/// A non-primary context created by drvshim (move-only owner), for users who
/// need isolation. Destroyed with cuCtxDestroy_v2 by destroy() or the destructor.
class DRVSHIM_API Context {
 public:
  Context(Context&& other) noexcept;
  Context& operator=(Context&& other) noexcept;
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;
  ~Context();

  explicit operator bool() const noexcept { return handle_.held(); }
  /// A view. Throws InvalidArgumentError on an empty object. Not of a temporary owner.
  ContextRef ref() const&;
  ContextRef ref() const&& = delete;
  /// Usable where a view is, as ref(); not a temporary owner.
  operator ContextRef() const& { return ref(); }
  operator ContextRef() const&& = delete;
  const Device& device() const noexcept { return handle_.get().device; }

  /// cuCtxDestroy_v2; the object becomes empty. Throws CudaError on failure.
  void destroy();
  /// The no-throw twin.
  [[nodiscard]] Status destroy(std::nothrow_t) noexcept;

 private:
  friend class Device;
  Context(Device device, std::uintptr_t address) noexcept;
  detail::OwningHandle<detail::ContextTraits> handle_;
};

}  // namespace drvshim
