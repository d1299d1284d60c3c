#pragma once
/// @file memory.hpp
/// Memory, each kind explicit: device buffers (cuMemAlloc), pinned host
/// buffers (cuMemHostAlloc), mapped zero-copy buffers (DEVICEMAP, with host and
/// device views), registered host ranges (cuMemHostRegister, capability checked
/// first), managed and stream-ordered allocations; typed non-owning device
/// views; copies and memsets, synchronous and on a stream; pointer inspection.
///
/// Every operation makes the owning context current for the call and restores
/// the caller's stack (docs/DESIGN.md, "context policy"). Sizes are checked
/// before the driver is called. A context must outlive the memory allocated in
/// it; views must not outlive their owner (checked in debug builds of
/// libdrvshim, see view_checks_enabled(); undefined otherwise).
#include <drvshim/context.hpp>
#include <drvshim/export.hpp>
#include <drvshim/stream.hpp>

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <type_traits>

namespace drvshim {

/// A device address (CUdeviceptr).
using DevicePtr = std::uint64_t;

class Driver;

/// Whether this build of libdrvshim checks views against their owners
/// (debug builds: CMAKE_BUILD_TYPE=Debug or DRVSHIM_CHECK_VIEWS).
DRVSHIM_API bool view_checks_enabled() noexcept;

namespace detail {
// The untyped operations behind the typed templates below. `stream` is null
// for the synchronous forms.
DRVSHIM_API void copy_to_device(const ContextRef& ctx, DevicePtr dst, std::size_t dst_bytes, std::uint64_t dst_id,
                                const void* src, std::size_t bytes, const StreamRef* stream);
DRVSHIM_API void copy_to_host(const ContextRef& ctx, void* dst, std::size_t dst_bytes, DevicePtr src,
                              std::size_t bytes, std::uint64_t src_id, const StreamRef* stream);
DRVSHIM_API void copy_device_to_device(const ContextRef& ctx, DevicePtr dst, std::size_t dst_bytes,
                                       std::uint64_t dst_id, DevicePtr src, std::size_t bytes, std::uint64_t src_id,
                                       const StreamRef* stream);
// Device to device between two contexts (usually two devices) through
// unified addressing; defined with the peer copies (peer.cpp).
DRVSHIM_API void copy_across_contexts(const ContextRef& dst_ctx, DevicePtr dst, std::size_t dst_bytes,
                                      std::uint64_t dst_id, const ContextRef& src_ctx, DevicePtr src,
                                      std::size_t bytes, std::uint64_t src_id, const StreamRef* stream);
DRVSHIM_API void fill_device(const ContextRef& ctx, DevicePtr dst, std::size_t count, std::size_t element_size,
                             std::uint32_t pattern, std::uint64_t id, const StreamRef* stream);
DRVSHIM_API void check_view(std::uint64_t id, const char* api);
}  // namespace detail

/// A typed, non-owning view of device memory: context, address, element
/// count. Cheap to copy; valid while the owner lives.
template <class T>
class DeviceSpan {
  static_assert(std::is_trivially_copyable_v<T>, "device memory holds trivially copyable types");

 public:
  DeviceSpan(ContextRef context, DevicePtr address, std::size_t count, std::uint64_t owner_id) noexcept
      : context_(std::move(context)), address_(address), count_(count), owner_id_(owner_id) {}
  /// A view of const elements.
  operator DeviceSpan<const T>() const noexcept { return {context_, address_, count_, owner_id_}; }

  DevicePtr address() const noexcept { return address_; }
  std::size_t size() const noexcept { return count_; }
  std::size_t size_bytes() const noexcept { return count_ * sizeof(T); }
  bool empty() const noexcept { return count_ == 0; }
  const ContextRef& context() const noexcept { return context_; }
  std::uint64_t owner_id() const noexcept { return owner_id_; }

  /// Elements [offset, offset + count). Throws InvalidArgumentError when the
  /// range is not inside this view.
  DeviceSpan subspan(std::size_t offset, std::size_t count) const {
    if (offset > count_ || count > count_ - offset) throw_out_of_range(offset, count);
    return DeviceSpan(context_, address_ + offset * sizeof(T), count, owner_id_);
  }

 private:
  [[noreturn]] void throw_out_of_range(std::size_t offset, std::size_t count) const;
  ContextRef context_;
  DevicePtr address_;
  std::size_t count_;
  std::uint64_t owner_id_;
};

namespace detail {
[[noreturn]] DRVSHIM_API void throw_subspan(std::size_t offset, std::size_t count, std::size_t size);
}
template <class T>
void DeviceSpan<T>::throw_out_of_range(std::size_t offset, std::size_t count) const {
  detail::throw_subspan(offset, count, count_);
}

// ---- copies and fills ----------------------------------------------------------------
// Synchronous forms return when the copy is complete (cuMemcpy*). Asynchronous
// forms queue it on `stream` (cuMemcpy*Async): the host memory must stay valid
// and unchanged until the stream reaches the copy; it is truly asynchronous
// only for page-locked host memory. Each copies src.size() elements and
// throws InvalidArgumentError, before calling the driver, when dst is smaller.

/// Host to device, synchronous.
template <class T>
void copy(DeviceSpan<T> dst, std::span<const T> src) {
  detail::copy_to_device(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id(), src.data(), src.size_bytes(),
                         nullptr);
}
/// Device to host, synchronous.
template <class T>
void copy(std::span<T> dst, DeviceSpan<const T> src) {
  detail::copy_to_host(src.context(), dst.data(), dst.size_bytes(), src.address(), src.size_bytes(), src.owner_id(),
                       nullptr);
}
/// Device to device, synchronous (with respect to the host for the copy's completion).
/// Between two contexts (two devices: a unified-address copy) both devices
/// must have unified addressing (InvalidArgumentError otherwise, naming
/// copy_peer, which needs none); dst's context is made current.
template <class T>
void copy(DeviceSpan<T> dst, DeviceSpan<const T> src) {
  if (dst.context().address() != src.context().address()) {
    return detail::copy_across_contexts(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id(), src.context(),
                                        src.address(), src.size_bytes(), src.owner_id(), nullptr);
  }
  detail::copy_device_to_device(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id(), src.address(),
                                src.size_bytes(), src.owner_id(), nullptr);
}
/// Host to device on a stream.
template <class T>
void copy_async(const StreamRef& stream, DeviceSpan<T> dst, std::span<const T> src) {
  detail::copy_to_device(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id(), src.data(), src.size_bytes(),
                         &stream);
}
/// Device to host on a stream.
template <class T>
void copy_async(const StreamRef& stream, std::span<T> dst, DeviceSpan<const T> src) {
  detail::copy_to_host(src.context(), dst.data(), dst.size_bytes(), src.address(), src.size_bytes(), src.owner_id(),
                       &stream);
}
/// Device to device on a stream. Between two contexts (see copy() above) the
/// stream must belong to one of them (InvalidArgumentError otherwise).
template <class T>
void copy_async(const StreamRef& stream, DeviceSpan<T> dst, DeviceSpan<const T> src) {
  if (dst.context().address() != src.context().address()) {
    return detail::copy_across_contexts(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id(), src.context(),
                                        src.address(), src.size_bytes(), src.owner_id(), &stream);
  }
  detail::copy_device_to_device(dst.context(), dst.address(), dst.size_bytes(), dst.owner_id(), src.address(),
                                src.size_bytes(), src.owner_id(), &stream);
}

/// Sets every element to `value` with cuMemsetD8/D16/D32 (by sizeof(T): 1, 2 or 4).
template <class T>
void fill(DeviceSpan<T> dst, T value) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4, "fill works on 8-, 16- and 32-bit elements");
  std::uint32_t pattern = 0;
  __builtin_memcpy(&pattern, &value, sizeof(T));
  detail::fill_device(dst.context(), dst.address(), dst.size(), sizeof(T), pattern, dst.owner_id(), nullptr);
}
/// fill() on a stream (cuMemsetD*Async).
template <class T>
void fill_async(const StreamRef& stream, DeviceSpan<T> dst, T value) {
  static_assert(sizeof(T) == 1 || sizeof(T) == 2 || sizeof(T) == 4, "fill works on 8-, 16- and 32-bit elements");
  std::uint32_t pattern = 0;
  __builtin_memcpy(&pattern, &value, sizeof(T));
  detail::fill_device(dst.context(), dst.address(), dst.size(), sizeof(T), pattern, dst.owner_id(), &stream);
}

// ---- owners -------------------------------------------------------------------------------

struct PitchedAllocation;

/// Device memory from cuMemAlloc (move-only owner).
class DRVSHIM_API DeviceBuffer {
 public:
  /// cuMemAlloc_v2 in `context`. Throws InvalidArgumentError for 0 bytes,
  /// OutOfMemoryError (with the device's free and total memory) when it does not fit.
  static DeviceBuffer allocate(const ContextRef& context, std::size_t bytes);

  DeviceBuffer(DeviceBuffer&& other) noexcept;
  DeviceBuffer& operator=(DeviceBuffer&& other) noexcept;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer();

  explicit operator bool() const noexcept { return address_ != 0; }
  DevicePtr address() const noexcept { return address_; }
  std::size_t size() const noexcept { return bytes_; }
  const ContextRef& context() const noexcept { return context_; }
  /// A typed view of the whole buffer. Throws InvalidArgumentError when the
  /// size is not a multiple of sizeof(T) or the owner is empty.
  template <class T>
  DeviceSpan<T> as() const {
    check_view_of(sizeof(T));
    return DeviceSpan<T>(context_, address_, bytes_ / sizeof(T), id_);
  }

  /// cuMemFree_v2; the owner becomes empty.
  void free();
  /// The no-throw twin.
  Status free(std::nothrow_t) noexcept;

 private:
  DeviceBuffer(ContextRef context, DevicePtr address, std::size_t bytes) noexcept;
  friend DRVSHIM_API PitchedAllocation allocate_pitched(const ContextRef&, std::size_t, std::size_t, unsigned);
  void check_view_of(std::size_t element_size) const;
  ContextRef context_;
  DevicePtr address_;
  std::size_t bytes_;
  std::uint64_t id_;
};

/// Flags of cuMemHostAlloc (CU_MEMHOSTALLOC_*).
enum class HostAllocFlags : unsigned {
  none = 0x0,
  portable = 0x1,        ///< page-locked for every context, not only the allocating one
  device_map = 0x2,      ///< mapped into the device address space (zero-copy)
  write_combined = 0x4,  ///< write-combined: fast for the device to read, very slow for the host to read
};
constexpr HostAllocFlags operator|(HostAllocFlags a, HostAllocFlags b) noexcept {
  return static_cast<HostAllocFlags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
constexpr bool has(HostAllocFlags set, HostAllocFlags flag) noexcept {
  return (static_cast<unsigned>(set) & static_cast<unsigned>(flag)) != 0;
}
/// "portable|device_map", or "none".
DRVSHIM_API std::string to_string(HostAllocFlags flags);

/// Page-locked host memory from cuMemHostAlloc (move-only owner).
class DRVSHIM_API PinnedBuffer {
 public:
  /// cuMemHostAlloc. Throws InvalidArgumentError for 0 bytes or unknown flag
  /// bits, OutOfMemoryError when the host cannot pin that much.
  static PinnedBuffer allocate(const ContextRef& context, std::size_t bytes, HostAllocFlags flags = HostAllocFlags::none);

  PinnedBuffer(PinnedBuffer&& other) noexcept;
  PinnedBuffer& operator=(PinnedBuffer&& other) noexcept;
  PinnedBuffer(const PinnedBuffer&) = delete;
  PinnedBuffer& operator=(const PinnedBuffer&) = delete;
  ~PinnedBuffer();

  explicit operator bool() const noexcept { return data_ != nullptr; }
  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return bytes_; }
  HostAllocFlags flags() const noexcept { return flags_; }
  const ContextRef& context() const noexcept { return context_; }
  /// The memory as a typed host span (size must be a multiple of sizeof(T)).
  template <class T>
  std::span<T> as() const {
    check_view_of(sizeof(T));
    return std::span<T>(static_cast<T*>(data_), bytes_ / sizeof(T));
  }

  /// cuMemFreeHost; the owner becomes empty.
  void free();
  Status free(std::nothrow_t) noexcept;

 protected:
  PinnedBuffer(ContextRef context, void* data, std::size_t bytes, HostAllocFlags flags) noexcept;
  void check_view_of(std::size_t element_size) const;

 private:
  ContextRef context_;
  void* data_;
  std::size_t bytes_;
  HostAllocFlags flags_;
};

/// Mapped (zero-copy) host memory: a pinned allocation made with DEVICEMAP,
/// readable by kernels through its device address (move-only owner).
class DRVSHIM_API MappedBuffer : public PinnedBuffer {
 public:
  /// cuMemHostAlloc with DEVICEMAP (plus `extra` flags), then
  /// cuMemHostGetDevicePointer. Throws UnsupportedError, before allocating,
  /// when the device's can_map_host_memory is not 1.
  static MappedBuffer allocate(const ContextRef& context, std::size_t bytes, HostAllocFlags extra = HostAllocFlags::none);

  /// The device address of the memory.
  DevicePtr device_address() const noexcept { return device_; }
  /// Whether host and device addresses are identical (unified addressing).
  bool pointers_identical() const noexcept { return device_ == reinterpret_cast<std::uintptr_t>(data()); }
  /// A typed device view, for kernels and copies.
  template <class T>
  DeviceSpan<T> device_as() const {
    check_view_of(sizeof(T));
    return DeviceSpan<T>(context(), device_, size() / sizeof(T), 0);
  }

 private:
  MappedBuffer(PinnedBuffer&& pinned, DevicePtr device) noexcept;
  DevicePtr device_;
};

/// Flags of cuMemHostRegister (CU_MEMHOSTREGISTER_*).
enum class HostRegisterFlags : unsigned {
  none = 0x0,
  portable = 0x1,
  device_map = 0x2,
  io_memory = 0x4,
  read_only = 0x8,
};
constexpr HostRegisterFlags operator|(HostRegisterFlags a, HostRegisterFlags b) noexcept {
  return static_cast<HostRegisterFlags>(static_cast<unsigned>(a) | static_cast<unsigned>(b));
}
constexpr bool has(HostRegisterFlags set, HostRegisterFlags flag) noexcept {
  return (static_cast<unsigned>(set) & static_cast<unsigned>(flag)) != 0;
}
/// "portable|device_map", or "none".
DRVSHIM_API std::string to_string(HostRegisterFlags flags);

/// Existing host memory page-locked with cuMemHostRegister (move-only owner;
/// unregisters on destruction). The memory itself stays the caller's.
class DRVSHIM_API RegisteredRange {
 public:
  /// Checks host_register_supported (and read_only_host_register_supported for
  /// READ_ONLY) on the context's device, then cuMemHostRegister_v2. Where
  /// registration is unsupported (a Jetson TX1, for one) throws
  /// UnsupportedError naming the device, the attribute and the way out (a
  /// mapped pinned allocation, MappedBuffer). Throws InvalidArgumentError for a
  /// null pointer or 0 bytes; CudaError for what the driver refuses
  /// (CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED for overlapping ranges).
  static RegisteredRange register_range(const ContextRef& context, void* data, std::size_t bytes,
                                        HostRegisterFlags flags = HostRegisterFlags::none);

  RegisteredRange(RegisteredRange&& other) noexcept;
  RegisteredRange& operator=(RegisteredRange&& other) noexcept;
  RegisteredRange(const RegisteredRange&) = delete;
  RegisteredRange& operator=(const RegisteredRange&) = delete;
  ~RegisteredRange();

  explicit operator bool() const noexcept { return data_ != nullptr; }
  void* data() const noexcept { return data_; }
  std::size_t size() const noexcept { return bytes_; }
  HostRegisterFlags flags() const noexcept { return flags_; }
  /// The device address (cuMemHostGetDevicePointer). Throws InvalidArgumentError
  /// unless registered with DEVICEMAP or on a device with unified addressing.
  DevicePtr device_address() const;

  /// cuMemHostUnregister; the owner becomes empty.
  void unregister();
  Status unregister(std::nothrow_t) noexcept;

 private:
  RegisteredRange(ContextRef context, void* data, std::size_t bytes, HostRegisterFlags flags) noexcept;
  ContextRef context_;
  void* data_;
  std::size_t bytes_;
  HostRegisterFlags flags_;
};

/// cuMemHostUnregister of memory registered elsewhere (by another library,
/// say). Returns the driver's result: CUDA_ERROR_HOST_MEMORY_NOT_REGISTERED
/// (713) for memory that is not registered.
DRVSHIM_API Status unregister_host_range(const ContextRef& context, void* data) noexcept;

/// Managed (unified) memory from cuMemAllocManaged (move-only owner),
/// accessible from host and device.
class DRVSHIM_API ManagedBuffer {
 public:
  /// cuMemAllocManaged with `attach` (global: every stream and device; host:
  /// not accessible from devices until attached to a stream). Throws
  /// UnsupportedError when the device's managed_memory attribute is not 1,
  /// InvalidArgumentError for MemoryAttach::single (only streams take it).
  static ManagedBuffer allocate(const ContextRef& context, std::size_t bytes,
                                MemoryAttach attach = MemoryAttach::global);

  ManagedBuffer(ManagedBuffer&& other) noexcept;
  ManagedBuffer& operator=(ManagedBuffer&& other) noexcept;
  ManagedBuffer(const ManagedBuffer&) = delete;
  ManagedBuffer& operator=(const ManagedBuffer&) = delete;
  ~ManagedBuffer();

  explicit operator bool() const noexcept { return address_ != 0; }
  DevicePtr address() const noexcept { return address_; }
  void* data() const noexcept { return reinterpret_cast<void*>(address_); }
  std::size_t size() const noexcept { return bytes_; }
  template <class T>
  DeviceSpan<T> as() const {
    return DeviceSpan<T>(context_, address_, bytes_ / sizeof(T), 0);
  }
  void free();
  Status free(std::nothrow_t) noexcept;

 private:
  ManagedBuffer(ContextRef context, DevicePtr address, std::size_t bytes) noexcept;
  ContextRef context_;
  DevicePtr address_;
  std::size_t bytes_;
};

/// Stream-ordered device memory from the device's default pool
/// (cuMemAllocAsync / cuMemFreeAsync; move-only owner). Destruction frees it on
/// the stream it was allocated on, ordered after the work queued there.
class DRVSHIM_API AsyncDeviceBuffer {
 public:
  /// cuMemAllocAsync on `stream`. Throws UnsupportedError when the device's
  /// memory_pools_supported is not 1 or the driver lacks the function.
  static AsyncDeviceBuffer allocate(const StreamRef& stream, std::size_t bytes);

  AsyncDeviceBuffer(AsyncDeviceBuffer&& other) noexcept;
  AsyncDeviceBuffer& operator=(AsyncDeviceBuffer&& other) noexcept;
  AsyncDeviceBuffer(const AsyncDeviceBuffer&) = delete;
  AsyncDeviceBuffer& operator=(const AsyncDeviceBuffer&) = delete;
  ~AsyncDeviceBuffer();

  explicit operator bool() const noexcept { return address_ != 0; }
  DevicePtr address() const noexcept { return address_; }
  std::size_t size() const noexcept { return bytes_; }
  const StreamRef& stream() const noexcept { return stream_; }
  template <class T>
  DeviceSpan<T> as() const {
    return DeviceSpan<T>(stream_.context(), address_, bytes_ / sizeof(T), 0);
  }
  /// cuMemFreeAsync on `on` (by default the allocating stream).
  void free();
  void free(const StreamRef& on);
  Status free(std::nothrow_t) noexcept;

 private:
  AsyncDeviceBuffer(StreamRef stream, DevicePtr address, std::size_t bytes) noexcept;
  StreamRef stream_;
  DevicePtr address_;
  std::size_t bytes_;
};

// ---- pitched and 2D memory ------------------------------------------------------------------

/// A pitched allocation: `height` rows of `pitch` bytes, each row starting
/// aligned for the device's 2D copies and textures.
struct PitchedAllocation {
  DeviceBuffer buffer;
  std::size_t pitch = 0;
};

/// cuMemAllocPitch: rows of at least `width_bytes`, padded to the pitch the
/// device prefers for elements of `element_bytes` (4, 8 or 16). Throws
/// InvalidArgumentError for a zero width or height or another element size,
/// OutOfMemoryError when it does not fit.
DRVSHIM_API PitchedAllocation allocate_pitched(const ContextRef& context, std::size_t width_bytes, std::size_t height,
                                               unsigned element_bytes = 4);

/// Where one side of a 2D copy lives.
enum class MemorySide {
  host,    ///< host memory (pageable or page-locked)
  device,  ///< device memory
  unified, ///< either: the driver decides from the address (unified addressing)
};

/// A 2D copy (cuMemcpy2D): `height` rows of `width_bytes`, rows `src_pitch`
/// and `dst_pitch` bytes apart.
struct Copy2D {
  const void* src = nullptr;
  std::size_t src_pitch = 0;
  MemorySide src_side = MemorySide::unified;
  void* dst = nullptr;
  std::size_t dst_pitch = 0;
  MemorySide dst_side = MemorySide::unified;
  std::size_t width_bytes = 0;
  std::size_t height = 0;
};

/// cuMemCpy2D in `context`, or cuMemcpy2DAsync on `stream`. Throws
/// InvalidArgumentError, before calling the driver, when a pitch is smaller
/// than the width or a pointer is null; CudaError for what the driver refuses.
DRVSHIM_API void copy_2d(const ContextRef& context, const Copy2D& copy, const StreamRef* stream = nullptr);

/// cuMemsetD2D8 (or its Async form on `stream`): sets `height` rows of
/// `width_bytes` bytes, `pitch` bytes apart, to `value`.
DRVSHIM_API void fill_2d(const ContextRef& context, DevicePtr dst, std::size_t pitch, std::uint8_t value,
                         std::size_t width_bytes, std::size_t height, const StreamRef* stream = nullptr);

// ---- managed-memory hints ---------------------------------------------------------------------

/// A place memory can live or be accessed from (CUmemLocation).
struct MemoryLocation {
  enum class Type : int { device = 1, host = 2, host_numa = 3, host_numa_current = 4 };
  Type type = Type::device;
  int id = 0;  ///< the device ordinal (or NUMA node) for device / host_numa
};

/// Advice about managed memory (CUmem_advise).
enum class MemoryAdvice : int {
  set_read_mostly = 1,
  unset_read_mostly = 2,
  set_preferred_location = 3,
  unset_preferred_location = 4,
  set_accessed_by = 5,
  unset_accessed_by = 6,
};

/// cuMemAdvise (the CUDA 12.2 form with a location) on managed memory
/// [address, address + bytes). Throws DriverTooOldError without it.
DRVSHIM_API void advise(const ContextRef& context, DevicePtr address, std::size_t bytes, MemoryAdvice advice,
                        MemoryLocation location);

/// cuMemPrefetchAsync (the CUDA 12.2 form) of managed memory to `location`,
/// ordered on `stream`. Throws DriverTooOldError without it.
DRVSHIM_API void prefetch_async(const StreamRef& stream, DevicePtr address, std::size_t bytes, MemoryLocation location);

/// cuMemHostGetFlags: the flags of page-locked memory from cuMemHostAlloc as
/// the driver reports them (on unified-addressing systems it may add
/// device_map / portable to what was asked for). Throws CudaError
/// (CUDA_ERROR_INVALID_VALUE) for other memory.
DRVSHIM_API unsigned host_allocation_flags(const ContextRef& context, const void* host);

// ---- pointer inspection ----------------------------------------------------------------------

/// What kind of memory an address is.
enum class MemoryKind {
  pageable_host,     ///< ordinary host memory, unknown to the driver
  page_locked_host,  ///< pinned (cuMemHostAlloc) or registered (cuMemHostRegister) host memory
  device,            ///< device memory
  managed,           ///< managed (unified) memory
  array,             ///< a CUDA array
};
DRVSHIM_API const char* to_string(MemoryKind kind) noexcept;

/// cuPointerGetAttributes of one address, for people debugging mixed code.
struct DRVSHIM_API PointerInfo {
  MemoryKind kind = MemoryKind::pageable_host;
  DevicePtr device_address = 0;   ///< where the device accesses it (0 if it cannot)
  void* host_address = nullptr;   ///< where the host accesses it (null if it cannot)
  std::uintptr_t context = 0;     ///< the context it was allocated or registered in
  int device_ordinal = -1;
  DevicePtr range_start = 0;      ///< the allocation containing it
  std::size_t range_size = 0;
  /// One line: "device memory of device 0 in context 0x..., allocation 0x...+1048576".
  std::string to_string() const;
};

/// Inspects an address (host or device). Never throws for addresses unknown
/// to the driver (they are pageable host memory); throws MissingStepError before init.
DRVSHIM_API PointerInfo inspect_pointer(const Driver& driver, const void* address);
DRVSHIM_API PointerInfo inspect_pointer(const Driver& driver, DevicePtr address);

}  // namespace drvshim
