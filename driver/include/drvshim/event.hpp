// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file event.hpp
/// Events: mark, wait for and time points in streams. An owner (Event), a
/// view (EventRef), elapsed time as std::chrono durations, and a small timer.
#include <drvshim/context.hpp>
#include <drvshim/export.hpp>
#include <drvshim/flags.hpp>
#include <drvshim/owning_handle.hpp>
#include <drvshim/stream.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

namespace drvshim {

namespace detail {
struct EventState;
}  // namespace detail

/// Flags of cuEventCreate (CU_EVENT_*).
enum class EventFlags : unsigned {
  none = 0x0,
  blocking_sync = 0x1,   ///< synchronize() blocks the thread instead of spinning
  disable_timing = 0x2,  ///< no timestamps: cheaper, but elapsed() refuses it
  interprocess = 0x4,    ///< shareable between processes; needs disable_timing
};
template <>
struct FlagTraits<EventFlags> {
  static constexpr FlagName names[] = {{0x1, "blocking_sync"}, {0x2, "disable_timing"}, {0x4, "interprocess"}};
  static constexpr unsigned zero_mask = ~0u;
  static constexpr const char* zero_name = "none";
};

/// Milliseconds as the driver measures them (about half a microsecond resolution).
using Milliseconds = std::chrono::duration<double, std::milli>;

/// A non-owning view of an event; valid while its owner lives. A view and its
/// Event share state, so every operation on a view whose Event was destroyed
/// throws InvalidArgumentError before the driver is called (in every build).
class DRVSHIM_API EventRef {
 public:
  /// A view of an event drvshim did not create (cuEventCreate, the CUDA
  /// Runtime, another library), used with `context` current. The view owns
  /// nothing and cannot tell when the event is destroyed. Its flags are
  /// unknown (flags() is none, recorded() true): record() and elapsed() leave
  /// the checks drvshim makes for its own events to the driver.
  static EventRef wrap(const ContextRef& context, std::uintptr_t handle);

  std::uintptr_t native() const noexcept;
  const ContextRef& context() const noexcept { return context_; }
  EventFlags flags() const noexcept;
  /// Whether record() was ever called on this event.
  bool recorded() const noexcept;
  /// "event 0x..."
  std::string name() const;

  /// Captures the work queued so far on `stream` (cuEventRecord). Throws
  /// InvalidArgumentError, before the driver, when `stream` belongs to another
  /// context than the event (the driver would answer CUDA_ERROR_INVALID_HANDLE).
  void record(const StreamRef& stream) const;
  /// Whether the captured work is done (cuEventQuery); errors of that work throw.
  bool query() const;
  /// Waits until the captured work is done (cuEventSynchronize).
  void synchronize() const;

  /// The same event.
  friend bool operator==(const EventRef&, const EventRef&) = default;

 private:
  friend class Event;
  friend DRVSHIM_API Milliseconds elapsed(const EventRef& start, const EventRef& end);
  EventRef(ContextRef context, std::shared_ptr<detail::EventState> state) noexcept
      : context_(std::move(context)), state_(std::move(state)) {}
  ContextRef context_;
  std::shared_ptr<detail::EventState> state_;
};

/// The time between two recorded events (cuEventElapsedTime), as a duration.
/// Throws InvalidArgumentError, before calling the driver, when either event
/// was created with disable_timing, was never recorded, was destroyed, or the
/// two belong to different contexts; NOT_READY work throws
/// CudaError(CUDA_ERROR_NOT_READY).
DRVSHIM_API Milliseconds elapsed(const EventRef& start, const EventRef& end);

namespace detail {
/// Event's ownership traits (owning_handle.hpp). The state is shared with the
/// Event's views, which see the handle cleared when the event is destroyed.
struct EventTraits {
  struct value_type {
    ContextRef context;
    std::shared_ptr<EventState> state;
  };
  static bool held(const value_type& v) noexcept;
  static void clear(value_type& v) noexcept { v.state.reset(); }
  [[nodiscard]] static Status release(value_type& v) noexcept;
  static void release_or_throw(value_type& v);
};
}  // namespace detail

/// An event created by drvshim (move-only owner). Destroying it with work
/// still pending neither waits nor fails: the driver releases it later.
class DRVSHIM_API Event {
 public:
  /// cuEventCreate. Throws InvalidArgumentError for interprocess without disable_timing.
  [[nodiscard]] static Event create(const ContextRef& context, EventFlags flags = EventFlags::none);
  /// Takes ownership of an event drvshim did not create, destroyed (cuEventDestroy)
  /// with `context` current; its views are as EventRef::wrap's.
  [[nodiscard]] static Event adopt(const ContextRef& context, std::uintptr_t handle);

  Event(Event&& other) noexcept;
  Event& operator=(Event&& other) noexcept;
  Event(const Event&) = delete;
  Event& operator=(const Event&) = delete;
  ~Event();

  explicit operator bool() const noexcept;
  /// A view. Throws InvalidArgumentError on an empty owner. Not of a
  /// temporary owner, whose view would outlive it.
  EventRef ref() const&;
  EventRef ref() const&& = delete;
  /// The owner is usable where a view is (elapsed(start, end), StreamRef::wait),
  /// as ref(); not a temporary owner, whose view would outlive it.
  operator EventRef() const& { return ref(); }
  operator EventRef() const&& = delete;

  // The view's operations, on the owner (each as ref().operation()).
  std::uintptr_t native() const { return ref().native(); }
  ContextRef context() const { return ref().context(); }
  EventFlags flags() const { return ref().flags(); }
  bool recorded() const { return ref().recorded(); }
  std::string name() const { return ref().name(); }
  void record(const StreamRef& stream) const { ref().record(stream); }
  bool query() const { return ref().query(); }
  void synchronize() const { ref().synchronize(); }
  /// Gives the event up without destroying it and returns its handle: the
  /// owner becomes empty, its views stay usable while the event lives, and it
  /// is the caller's to destroy (Event::adopt, or the driver).
  [[nodiscard]] std::uintptr_t detach() noexcept;
  /// cuEventDestroy_v2; the owner becomes empty.
  void destroy();
  [[nodiscard]] Status destroy(std::nothrow_t) noexcept;

 private:
  Event(ContextRef context, std::shared_ptr<detail::EventState> state) noexcept;
  detail::OwningHandle<detail::EventTraits> handle_;
};

/// Times work on a stream: records a start event at construction and an end
/// event at stop(), which waits for it and returns the elapsed time.
class DRVSHIM_API EventTimer {
 public:
  explicit EventTimer(const StreamRef& stream);
  /// Records the end event, waits for it, returns end - start.
  Milliseconds stop();

 private:
  StreamRef stream_;
  Event start_;
  Event end_;
};

}  // namespace drvshim
