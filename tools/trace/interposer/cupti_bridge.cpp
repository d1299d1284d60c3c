// SPDX-License-Identifier: Apache-2.0
// Optional CUPTI (DRVSHIM_TRACE_CUPTI=1): libcupti.so.13 is opened at run
// time, at the first cuInit, and subscribed to the Runtime-API domain, so
// every driver call made inside a Runtime-API call carries that call's
// correlation id and the Runtime-API call itself is recorded (kind
// "runtime"). Without CUPTI, or when another tool holds CUPTI's single
// subscriber slot (Nsight, another profiler), or against a driver CUPTI
// cannot work with (drvshim's fake), one event says why and tracing goes on.
#include <cupti_callbacks.h>
#include <dlfcn.h>
#include <stdlib.h>

#include <fmt/format.h>

#include <mutex>
#include <string>

#include "env.hpp"
#include "interposer.hpp"

namespace drvshim::trace_interposer {
namespace {

using SubscribeFn = CUptiResult (*)(CUpti_SubscriberHandle*, CUpti_CallbackFunc, void*);
using EnableDomainFn = CUptiResult (*)(uint32_t, CUpti_SubscriberHandle, CUpti_CallbackDomain);
using ResultStringFn = CUptiResult (*)(CUptiResult, const char**);

std::atomic<bool> g_cupti_on{false};

struct Frame {
  std::uint64_t correlation;
  std::int64_t start;
  const char* name;
};
constexpr int kMaxDepth = 16;
thread_local Frame tl_frames[kMaxDepth];
thread_local int tl_depth = 0;

void CUPTIAPI on_callback(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) noexcept {
  if (data == nullptr) return;  // CU_INIT_FINISHED comes without data
  if (domain == CUPTI_CB_DOMAIN_RUNTIME_API) {
    const auto* cb = static_cast<const CUpti_CallbackData*>(data);
    if (cb->callbackSite == CUPTI_API_ENTER) {
      if (tl_depth < kMaxDepth) tl_frames[tl_depth] = {cb->correlationId, recorder::now_ns(), cb->functionName};
      ++tl_depth;
    } else if (tl_depth > 0) {
      --tl_depth;
      if (tl_depth < kMaxDepth && g_mode.load(std::memory_order_relaxed) != kOff) {
        const Frame& f = tl_frames[tl_depth];
        int result = 0;
        if (cb->functionReturnValue != nullptr) result = *static_cast<const int*>(cb->functionReturnValue);
        recorder::event(recorder::Kind::runtime, f.name != nullptr ? f.name : "cuda?", "", f.start,
                        recorder::now_ns() - f.start, f.correlation, result);
      }
    }
  } else if (domain == CUPTI_CB_DOMAIN_RESOURCE && g_mode.load(std::memory_order_relaxed) != kOff) {
    const auto* rd = static_cast<const CUpti_ResourceData*>(data);
    const char* what = nullptr;
    switch (cbid) {
      case CUPTI_CBID_RESOURCE_CONTEXT_CREATED: what = "cupti-context-created"; break;
      case CUPTI_CBID_RESOURCE_CONTEXT_DESTROY_STARTING: what = "cupti-context-destroy"; break;
      case CUPTI_CBID_RESOURCE_MODULE_LOADED: what = "cupti-module-loaded"; break;
      case CUPTI_CBID_RESOURCE_MODULE_UNLOAD_STARTING: what = "cupti-module-unload"; break;
      default: return;
    }
    recorder::event(recorder::Kind::event, what, fmt::format("context {}", static_cast<const void*>(rd->context)));
  }
}

void* open_cupti(std::string& tried) {
  const char* named = drvshim::detail::env::value("DRVSHIM_TRACE_CUPTI_LIB");
  const char* candidates[] = {named, "libcupti.so.13", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so.13",
                              "/usr/local/cuda/lib64/libcupti.so.13", "/usr/local/cuda/lib/libcupti.so.13"};
  for (const char* c : candidates) {
    if (c == nullptr || *c == '\0') continue;
    if (void* h = ::dlopen(c, RTLD_NOW | RTLD_LOCAL); h != nullptr) return h;
    const char* err = ::dlerror();
    tried += fmt::format(" {} ({});", c, err != nullptr ? err : "?");
  }
  return nullptr;
}

void start_once() noexcept {
  std::string why;
  std::string tried;
  void* lib = open_cupti(tried);
  if (lib == nullptr) {
    why = "libcupti.so.13 not found:" + tried + " set DRVSHIM_TRACE_CUPTI_LIB to its path";
  } else {
    const auto subscribe = reinterpret_cast<SubscribeFn>(::dlsym(lib, "cuptiSubscribe"));
    const auto enable = reinterpret_cast<EnableDomainFn>(::dlsym(lib, "cuptiEnableDomain"));
    const auto text = reinterpret_cast<ResultStringFn>(::dlsym(lib, "cuptiGetResultString"));
    auto name = [&](CUptiResult r) {
      const char* s = nullptr;
      if (text != nullptr) text(r, &s);
      return fmt::format("{} ({})", s != nullptr ? s : "?", static_cast<int>(r));
    };
    CUpti_SubscriberHandle handle{};
    if (subscribe == nullptr || enable == nullptr) {
      why = "libcupti lacks cuptiSubscribe/cuptiEnableDomain";
    } else if (const CUptiResult r = subscribe(&handle, reinterpret_cast<CUpti_CallbackFunc>(&on_callback), nullptr);
               r != CUPTI_SUCCESS) {
      why = "cuptiSubscribe failed: " + name(r) +
            (r == CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED
                 ? "; another tool (Nsight, a profiler, PyTorch's kineto) holds CUPTI"
                 : "");
    } else if (const CUptiResult e = enable(1, handle, CUPTI_CB_DOMAIN_RUNTIME_API); e != CUPTI_SUCCESS) {
      why = "cuptiEnableDomain(RUNTIME_API) failed: " + name(e);
    } else {
      (void)enable(1, handle, CUPTI_CB_DOMAIN_RESOURCE);
      g_cupti_on.store(true);
    }
  }
  if (!why.empty()) {
    recorder::event(recorder::Kind::event, "cupti-unavailable",
                    why + "; driver calls are traced without their Runtime-API callers");
  } else {
    recorder::event(recorder::Kind::event, "cupti", "Runtime-API calls recorded; driver calls carry their caller's id");
  }
}

}  // namespace

void cupti_start() noexcept {
  if (!drvshim::detail::env::switch_value("DRVSHIM_TRACE_CUPTI", false) || g_mode.load() == kOff) return;
  static std::once_flag once;
  // CUPTI may call cuInit itself while subscribing: that nested call finds the flag taken and goes on.
  static std::atomic<bool> started{false};
  if (started.exchange(true)) return;
  std::call_once(once, &start_once);
}

std::uint64_t current_runtime_call() noexcept {
  if (!g_cupti_on.load(std::memory_order_relaxed)) return 0;
  return tl_depth > 0 && tl_depth <= kMaxDepth ? tl_frames[tl_depth - 1].correlation : 0;
}

}  // namespace drvshim::trace_interposer
