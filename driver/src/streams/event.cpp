// SPDX-License-Identifier: Apache-2.0
#include <drvshim/event.hpp>

#include <atomic>
#include <utility>

#include "devices/context_scope.hpp"
#include "log_internal.hpp"
#include "seam/core.hpp"
#include "seam/core_of.hpp"
#include "support/view_checks.hpp"

namespace drvshim {
namespace detail {

struct EventState {
  std::uintptr_t handle = 0;
  EventFlags flags = EventFlags::none;
  std::atomic<bool> recorded{false};
  bool foreign = false;  // not created by drvshim: flags and context unknown, checks left to the driver
};

}  // namespace detail

namespace {

CUevent native_event(std::uintptr_t h) noexcept { return reinterpret_cast<CUevent>(h); }
using detail::core_of;

}  // namespace

std::uintptr_t EventRef::native() const noexcept { return state_->handle; }
EventFlags EventRef::flags() const noexcept { return state_->flags; }
bool EventRef::recorded() const noexcept { return state_->recorded.load(); }
std::string EventRef::name() const { return fmt::format("event 0x{:x}", state_->handle); }

void EventRef::record(const StreamRef& stream) const {
  const auto handle = detail::live_event_handle(*this, "EventRef::record");
  detail::check_stream_view(stream, "EventRef::record");
  if (!state_->foreign && stream.context().address() != context_.address()) {
    throw InvalidArgumentError(
        "EventRef::record",
        fmt::format("{} belongs to context 0x{:x} (device {}), {} to context 0x{:x} (device {})", name(),
                    context_.address(), context_.device().ordinal(), stream.name(), stream.context().address(),
                    stream.context().device().ordinal()),
        "record an event on a stream of its own context (the driver would answer CUDA_ERROR_INVALID_HANDLE); to "
        "order work across contexts, record in the producer's context and StreamRef::wait for it in the consumer's");
  }
  const auto& core = core_of(context_);
  detail::ContextScope scope(core, context_.address(), "EventRef::record");
  DRVSHIM_TRY(core, cuEventRecord, fmt::format("{} on {}", name(), stream.name()), native_event(handle),
              reinterpret_cast<CUstream>(stream.native()));
  state_->recorded.store(true);
  detail::after_submit(core, reinterpret_cast<CUstream>(stream.native()), "cuEventRecord", [this] { return name(); });
}

bool EventRef::query() const {
  const auto handle = detail::live_event_handle(*this, "EventRef::query");
  const auto& core = core_of(context_);
  detail::ContextScope scope(core, context_.address(), "EventRef::query");
  const CUresult r = DRVSHIM_CU(core, cuEventQuery, native_event(handle));
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_NOT_READY) return false;
  detail::raise(core, static_cast<int>(r), "cuEventQuery", name());
}

void EventRef::synchronize() const {
  const auto handle = detail::live_event_handle(*this, "EventRef::synchronize");
  const auto& core = core_of(context_);
  detail::ContextScope scope(core, context_.address(), "EventRef::synchronize");
  DRVSHIM_TRY(core, cuEventSynchronize, name(), native_event(handle));
}

Milliseconds elapsed(const EventRef& start, const EventRef& end) {
  const auto start_handle = detail::live_event_handle(start, "elapsed");
  const auto end_handle = detail::live_event_handle(end, "elapsed");
  for (const EventRef* e : {&start, &end}) {
    if (e->state_->foreign) continue;
    if (has(e->flags(), EventFlags::disable_timing)) {
      throw InvalidArgumentError("elapsed",
                                 fmt::format("{} was created with disable_timing: it has no timestamp", e->name()),
                                 "create both events with EventFlags::none (or blocking_sync) to time with them");
    }
    if (!e->recorded()) {
      throw InvalidArgumentError(
          "elapsed", fmt::format("{} was never recorded", e->name()),
          "record both events on a stream (EventRef::record) before asking for the time between them");
    }
  }
  if (!start.state_->foreign && !end.state_->foreign && start.context().address() != end.context().address()) {
    throw InvalidArgumentError(
        "elapsed",
        fmt::format("{} belongs to context 0x{:x} (device {}), {} to context 0x{:x} (device {})", start.name(),
                    start.context().address(), start.context().device().ordinal(), end.name(), end.context().address(),
                    end.context().device().ordinal()),
        "time with two events of the same context (the driver would answer CUDA_ERROR_INVALID_HANDLE); clocks of "
        "different contexts are not comparable");
  }
  const auto& core = core_of(start.context());
  detail::ContextScope scope(core, start.context().address(), "elapsed");
  float ms = 0.0f;
  const std::string objects = fmt::format("from {} to {}", start.name(), end.name());
  if (core.has(detail::Api::k_cuEventElapsedTime)) {
    DRVSHIM_TRY(core, cuEventElapsedTime, objects, &ms, native_event(start_handle), native_event(end_handle));
  } else {
    core.require_function(detail::Api::k_cuEventElapsedTimeLegacy, "elapsed");
    DRVSHIM_TRY(core, cuEventElapsedTimeLegacy, objects, &ms, native_event(start_handle), native_event(end_handle));
  }
  return Milliseconds(static_cast<double>(ms));
}

namespace detail {

std::uintptr_t live_event_handle(const EventRef& event, const char* api) {
  const std::uintptr_t handle = event.native();
  if (handle == 0) {
    throw InvalidArgumentError(api, "an event view (EventRef) was used after its Event was destroyed",
                               "keep the Event alive while its EventRefs are in use; the driver was not called");
  }
  return handle;
}

}  // namespace detail

Event::Event(ContextRef context, std::shared_ptr<detail::EventState> state) noexcept
    : handle_({std::move(context), std::move(state)}) {}

Event Event::create(const ContextRef& context, EventFlags flags) {
  if (has(flags, EventFlags::interprocess) && !has(flags, EventFlags::disable_timing)) {
    throw InvalidArgumentError("Event::create", "an interprocess event must also disable timing",
                               "use EventFlags::interprocess | EventFlags::disable_timing");
  }
  if ((static_cast<unsigned>(flags) & ~known_flag_bits<EventFlags>()) != 0) {
    throw InvalidArgumentError("Event::create", fmt::format("unknown flag bits 0x{:x}", static_cast<unsigned>(flags)));
  }
  const auto& core = core_of(context);
  detail::ContextScope scope(core, context.address(), "Event::create");
  CUevent ev = nullptr;
  DRVSHIM_TRY(core, cuEventCreate, fmt::format("flags {}, device {}", to_string(flags), context.device().ordinal()),
              &ev, static_cast<unsigned>(flags));
  auto state = std::make_shared<detail::EventState>();
  state->handle = reinterpret_cast<std::uintptr_t>(ev);
  state->flags = flags;
  return Event(context, std::move(state));
}

namespace {

// The state of an event drvshim did not create: flags unknown, assumed recorded.
std::shared_ptr<detail::EventState> foreign_state(std::uintptr_t handle, const char* api) {
  if (handle == 0) throw InvalidArgumentError(api, "the event handle is null", "pass a CUevent");
  auto state = std::make_shared<detail::EventState>();
  state->handle = handle;
  state->recorded.store(true);
  state->foreign = true;
  return state;
}

}  // namespace

Event Event::adopt(const ContextRef& context, std::uintptr_t handle) {
  return Event(context, foreign_state(handle, "Event::adopt"));
}

EventRef EventRef::wrap(const ContextRef& context, std::uintptr_t handle) {
  return EventRef(context, foreign_state(handle, "EventRef::wrap"));
}

Event::Event(Event&&) noexcept = default;
Event& Event::operator=(Event&&) noexcept = default;
Event::~Event() = default;

Event::operator bool() const noexcept { return handle_.held(); }

EventRef Event::ref() const& {
  if (!*this) {
    throw InvalidArgumentError("Event::ref", "this Event is empty (moved from or destroyed)",
                               "create one with Event::create()");
  }
  return EventRef(handle_.get().context, handle_.get().state);
}

std::uintptr_t Event::detach() noexcept {
  const auto v = handle_.forget();
  return v.state != nullptr ? v.state->handle : 0;
}

void Event::destroy() { handle_.release(); }

Status Event::destroy(std::nothrow_t) noexcept { return handle_.release(std::nothrow); }

namespace detail {

bool EventTraits::held(const value_type& v) noexcept { return v.state != nullptr && v.state->handle != 0; }

void EventTraits::release_or_throw(value_type& v) {
  const Status s = release(v);
  if (!s.ok()) raise(core_of(v.context), s.code(), s.api(), "event");
}

Status EventTraits::release(value_type& v) noexcept {
  const auto handle = std::exchange(v.state->handle, 0);
  v.state.reset();
  const auto& core = core_of(v.context);
  if (!core.cleanup_allowed_in(v.context.address())) return {};
  // cuEventDestroy does not wait for the recorded work; the driver frees the event when it completes.
  const CUresult r = DRVSHIM_CU(core, cuEventDestroy, native_event(handle));
  core.note_result(r);
  if (r != CUDA_SUCCESS) {
    logf(log::Level::warn, "cuEventDestroy(0x{:x}) failed with {} ({})", handle, result_name(static_cast<int>(r)),
         static_cast<int>(r));
  }
  return Status("cuEventDestroy", static_cast<int>(r));
}

}  // namespace detail

EventTimer::EventTimer(const StreamRef& stream)
    : stream_(stream), start_(Event::create(stream.context())), end_(Event::create(stream.context())) {
  start_.ref().record(stream_);
}

Milliseconds EventTimer::stop() {
  end_.ref().record(stream_);
  end_.ref().synchronize();
  return elapsed(start_.ref(), end_.ref());
}

}  // namespace drvshim
