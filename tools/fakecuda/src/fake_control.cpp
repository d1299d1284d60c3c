// SPDX-License-Identifier: Apache-2.0
// The control API (drvshim/fakecuda.h): profiles, injected failures, attribute
// overrides, the call log and counters, the live-object counts tests check
// for leaks, and switches that model other components and broken drivers.
#include <algorithm>
#include <cstdio>

#include "fake_engine.hpp"

using namespace drvshim::fake;

namespace {

int count_allocs(bool pinned) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(std::count_if(e.allocs.begin(), e.allocs.end(), [&](const auto& kv) {
    return (kv.second.kind == AllocKind::pinned) == pinned;
  }));
}

}  // namespace

extern "C" {

int drvshim_fake_set_profile(const char* name) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (name == nullptr || !apply_profile(e, name)) return -1;
  reset_state(e);
  return 0;
}

const char* drvshim_fake_profile(void) {
  ensure_profile_from_env();
  return engine().profile.c_str();
}

void drvshim_fake_reset(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  apply_profile(e, std::string(e.profile));
  reset_state(e);
  drvshim::fake::set_before_call(nullptr, nullptr, nullptr);
}

void drvshim_fake_before_call(const char* api, void (*fn)(void*), void* data) {
  drvshim::fake::set_before_call(api, fn, data);
}

void drvshim_fake_fail_call(const char* api, int nth, int code) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  // A misspelt or versioned name would never match a call: the test would pass without its failure.
  std::string problem = injection_problem(api != nullptr ? api : "");
  if (problem.empty() && nth < 1) problem = "nth " + std::to_string(nth) + ": the call to fail, counted from 1";
  if (!problem.empty()) {
    std::fprintf(stderr, "drvshim fake driver: drvshim_fake_fail_call: %s; nothing injected\n", problem.c_str());
    misuse(e, "drvshim_fake_fail_call: " + problem);
    return;
  }
  e.injections.push_back(Injection{api, nth - 1, code});
}

void drvshim_fake_clear_injections(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.injections.clear();
}

int drvshim_fake_pending_injections(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(e.injections.size());
}

void drvshim_fake_set_proc_status(const char* symbol, int status) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.proc_status[symbol] = status;
}

void drvshim_fake_set_attribute(int device, int attribute, int value) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (!valid_device(e, device)) return;
  auto& d = e.devices[static_cast<size_t>(device)];
  d.attribute_errors.erase(attribute);
  d.attributes[attribute] = value;
}

void drvshim_fake_set_attribute_error(int device, int attribute, int code) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (!valid_device(e, device)) return;
  e.devices[static_cast<size_t>(device)].attribute_errors[attribute] = code;
}

unsigned long long drvshim_fake_call_count(const char* api) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto it = e.counts.find(api);
  return it == e.counts.end() ? 0 : it->second;
}

size_t drvshim_fake_call_log_size(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.log.size();
}

const char* drvshim_fake_call_log_entry(size_t index) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return index < e.log.size() ? e.log[index].c_str() : nullptr;
}

void drvshim_fake_clear_call_log(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.log.clear();
}

unsigned long long drvshim_fake_misuse_count(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.misuse;
}

unsigned long long drvshim_fake_take_misuse(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  const unsigned long long n = e.misuse;
  e.misuse = 0;
  return n;
}

const char* drvshim_fake_last_misuse(void) {
  ensure_profile_from_env();
  return engine().last_misuse.c_str();
}
int drvshim_fake_live_device_allocations(void) { return count_allocs(false); }
int drvshim_fake_live_pinned_allocations(void) { return count_allocs(true); }

int drvshim_fake_drop_allocations(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  int n = 0;
  for (auto it = e.allocs.begin(); it != e.allocs.end();) {
    if (it->second.kind == AllocKind::module_global) {  // belongs to a loaded module
      ++it;
      continue;
    }
    std::free(reinterpret_cast<void*>(it->first));
    it = e.allocs.erase(it);
    ++n;
  }
  e.device_used.assign(e.devices.size(), 0);
  return n;
}

void drvshim_fake_stream_hold(void* stream, int on) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::unique_lock<std::mutex> lock(e.mutex);
  FakeStream* st = user_stream(e, reinterpret_cast<CUstream>(stream));
  if (st == nullptr) return;
  st->held = on != 0;
  if (on == 0) pump(e, lock);
}

void drvshim_fake_hold_new_streams(int on) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::unique_lock<std::mutex> lock(e.mutex);
  e.hold_new_streams = on != 0;
}

void drvshim_fake_release_streams(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::unique_lock<std::mutex> lock(e.mutex);
  for (FakeStream* st : all_queues(e)) st->held = false;
  pump(e, lock);
}

void drvshim_fake_set_driver_version(int version) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::unique_lock<std::mutex> lock(e.mutex);
  e.driver_version = version;
}

void drvshim_fake_legacy_stream_hold(void* context, int on) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::unique_lock<std::mutex> lock(e.mutex);
  auto* ctx = reinterpret_cast<FakeCtx*>(context);
  if (!is_live(e, ctx)) return;
  legacy_of(e, ctx)->held = on != 0;
  if (on == 0) pump(e, lock);
}

void drvshim_fake_stream_fail(void* stream, int code) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (FakeStream* st = user_stream(e, reinterpret_cast<CUstream>(stream))) st->fail_with = code;
}

void drvshim_fake_recycle_handles(int on) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.recycle_handles = on != 0;
}

void drvshim_fake_endless_param_info(int on) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.endless_param_info = on != 0;
}

int drvshim_fake_live_events(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(e.events.size());
}

int drvshim_fake_live_graphs(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(e.graphs.size() + e.graph_execs.size() + e.user_objects.size());
}

void drvshim_fake_register_kernel(const char* name, drvshim_fake_kernel_fn fn) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.kernels[name] = fn;
}

void* drvshim_fake_find_global(const char* name) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  for (const auto* set : {&e.libraries, &e.modules}) {
    for (FakeModule* m : *set) {
      if (auto it = m->globals.find(name); it != m->globals.end()) return reinterpret_cast<void*>(it->second.first);
    }
  }
  return nullptr;
}

int drvshim_fake_live_modules(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(e.modules.size() + e.libraries.size() + e.links.size());
}

unsigned long long drvshim_fake_launch_count(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.launches;
}

int drvshim_fake_live_registrations(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(e.registered.size());
}

int drvshim_fake_live_streams(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(e.streams.size());
}

int drvshim_fake_live_contexts(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(std::count_if(e.live.begin(), e.live.end(), [](FakeCtx* c) { return !c->primary; }));
}

int drvshim_fake_primary_refcount(int device) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return valid_device(e, device) ? e.primaries[static_cast<size_t>(device)].refcount : -1;
}

int drvshim_fake_primary_active(int device) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return valid_device(e, device) ? (e.primaries[static_cast<size_t>(device)].active ? 1 : 0) : -1;
}

int drvshim_fake_primary_flags(int device) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return valid_device(e, device) ? static_cast<int>(e.primaries[static_cast<size_t>(device)].flags) : -1;
}

void drvshim_fake_activate_primary_externally(int device, unsigned flags) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (!valid_device(e, device)) return;
  Primary& p = e.primaries[static_cast<size_t>(device)];
  p.flags = flags;
  if (!p.active) {
    p.ctx = new_ctx(e, device, flags, true);
    p.active = true;
  }
  ++p.refcount;
}

int drvshim_fake_ctx_stack_depth(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(ctx_stack(e).size());
}

void* drvshim_fake_ctx_stack_top(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto& stack = ctx_stack(e);
  return stack.empty() ? nullptr : stack.back();
}

void drvshim_fake_set_deinitialized(int on) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.deinitialized = on != 0;
}

unsigned long long drvshim_fake_calls_while_deinitialized(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.calls_while_deinit;
}

// ---- several GPUs (fake_peer.cpp) ----

void drvshim_fake_set_peer_supported(int device, int peer, int supported) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  if (supported != 0) {
    e.peer_unsupported.erase({device, peer});
  } else {
    e.peer_unsupported.insert({device, peer});
  }
}

void drvshim_fake_set_p2p_attribute(int src, int dst, int attribute, int value) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.p2p_attribute_errors.erase({src, dst, attribute});
  e.p2p_attributes[{src, dst, attribute}] = value;
}

void drvshim_fake_set_p2p_attribute_error(int src, int dst, int attribute, int code) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  e.p2p_attribute_errors[{src, dst, attribute}] = code;
}

int drvshim_fake_peer_access_enabled(void* from_context, void* to_context) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.peer_enabled.count({reinterpret_cast<FakeCtx*>(from_context), reinterpret_cast<FakeCtx*>(to_context)}) != 0
             ? 1
             : 0;
}

int drvshim_fake_peer_access_count(void) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return static_cast<int>(e.peer_enabled.size());
}

int drvshim_fake_disable_peer_access_externally(void* from_context, void* to_context) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  return e.peer_enabled.erase({reinterpret_cast<FakeCtx*>(from_context), reinterpret_cast<FakeCtx*>(to_context)}) != 0
             ? CUDA_SUCCESS
             : CUDA_ERROR_PEER_ACCESS_NOT_ENABLED;
}

int drvshim_fake_enable_peer_access_externally(void* from_context, void* to_context) {
  ensure_profile_from_env();
  Engine& e = engine();
  std::lock_guard<std::mutex> lock(e.mutex);
  auto* from = reinterpret_cast<FakeCtx*>(from_context);
  auto* to = reinterpret_cast<FakeCtx*>(to_context);
  if (!is_live(e, from) || !is_live(e, to) || from == to) return CUDA_ERROR_INVALID_CONTEXT;
  if (!peer_path(e, from->device, to->device)) return CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  return e.peer_enabled.insert({from, to}).second ? CUDA_SUCCESS : CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
}

const char* drvshim_fake_export_gaps(void) {
  static const std::string gaps = export_gaps();
  return gaps.c_str();
}

}  // extern "C"
