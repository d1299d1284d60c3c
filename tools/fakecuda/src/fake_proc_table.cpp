// SPDX-License-Identifier: Apache-2.0
// cuGetProcAddress over the fake driver's functions, as for the real driver
// (each area lists its entry points with the ABI version each variant
// appeared in), and the entry points the library exports as libcuda does:
// cuDriverGetVersion, cuGetProcAddress_v2 (absent from the _nov2 variant,
// DRVSHIM_FAKE_NO_PROC_V2), the 11.3-11.8 cuGetProcAddress, and every other
// name of cuda.h at its current ABI (generated), so that a program linked
// with -lcuda runs on the fake.
#include <unistd.h>

#include <atomic>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <set>
#include <string>

#include <cudaProfiler.h>

#include "env.hpp"
#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

#ifndef DRVSHIM_FAKE_NO_PROC_V2
CUresult fake_cuGetProcAddress_v2_entry(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* status);
#endif
CUresult fake_cuGetProcAddress_v1_entry(const char* symbol, void** pfn, int version, cuuint64_t flags);

// Several entries with one name are ABI variants; the newest one at or below
// the requested version wins, as in the real driver.
const std::vector<ProcEntry>& proc_table() {
  static const std::vector<ProcEntry> table = [] {
    using Area = std::vector<ProcEntry> (*)();
    const Area areas[] = {error_procs,  device_procs, context_procs,         stream_procs, event_procs,
                          memory_procs, copy_procs,   module_procs,          launch_procs, library_procs,
                          link_procs,   peer_procs,   runtime_support_procs, graph_procs};
    std::vector<ProcEntry> all;
    for (Area area : areas) {
      const std::vector<ProcEntry> entries = area();
      all.insert(all.end(), entries.begin(), entries.end());
    }
    // The driver hands out its own lookup too (the CUDA Runtime asks for it).
    all.push_back({"cuGetProcAddress", 11030, erase_fn(&fake_cuGetProcAddress_v1_entry)});
#ifndef DRVSHIM_FAKE_NO_PROC_V2
    all.push_back({"cuGetProcAddress", 12000, erase_fn(&fake_cuGetProcAddress_v2_entry)});
#endif
    return all;
  }();
  return table;
}

// DRVSHIM_FAKE_PROC_SHIMS=1: cuDeviceGetCount asked at version 12000 or later comes back
// as another address than at older versions (a driver may hand out per-version shims;
// drvshim-trace then maps the lookup by name and version).
CUresult fake_cuDeviceGetCount_shim(int* count) { return fake_cuDeviceGetCount(count); }

CUresult get_proc(const char* symbol, void** pfn, int version, cuuint64_t flags, CUdriverProcAddressQueryResult* status,
                  const char* api) {
  FAKE_ENTER_AS(api, false);
  if (symbol == nullptr || pfn == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (flags > 2) return CUDA_ERROR_INVALID_VALUE;
  if (version > e.driver_version) return CUDA_ERROR_INVALID_VALUE;
  *pfn = nullptr;
  auto set_status = [&](CUdriverProcAddressQueryResult s) {
    if (status != nullptr) *status = s;
  };
  if (auto it = e.proc_status.find(symbol); it != e.proc_status.end() && it->second != 0) {
    set_status(static_cast<CUdriverProcAddressQueryResult>(it->second));
    return CUDA_SUCCESS;
  }
  const ProcEntry* best = nullptr;
  bool known = false;
  for (const auto& entry : proc_table()) {
    if (std::strcmp(entry.name, symbol) != 0) continue;
    if (entry.since > e.driver_version) continue;  // newer than this (simulated) driver
    known = true;
    if (entry.since <= version && (best == nullptr || entry.since > best->since)) best = &entry;
  }
  if (best == nullptr) {
    set_status(known ? CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT : CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    return CUDA_SUCCESS;
  }
  *pfn = best->fn;
  if (best->fn == erase_fn(&fake_cuDeviceGetCount) && version >= 12000) {
    if (drvshim::detail::env::switch_value("DRVSHIM_FAKE_PROC_SHIMS", false)) {
      *pfn = erase_fn(&fake_cuDeviceGetCount_shim);
    }
  }
  set_status(CU_GET_PROC_ADDRESS_SUCCESS);
  return CUDA_SUCCESS;
}

#ifndef DRVSHIM_FAKE_NO_PROC_V2
CUresult fake_cuGetProcAddress_v2_entry(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                        CUdriverProcAddressQueryResult* status) {
  return get_proc(symbol, pfn, version, flags, status, "cuGetProcAddress");
}
#endif

CUresult fake_cuGetProcAddress_v1_entry(const char* symbol, void** pfn, int version, cuuint64_t flags) {
  return get_proc(symbol, pfn, version, flags, nullptr, "cuGetProcAddress");
}

// ---- every other exported name (fake_exports.inc, generated from the toolkit) --------
// An exported name is one ABI variant, (base, version): it forwards to the fake's
// implementation of exactly that variant. A name the fake does not model answers
// CUDA_ERROR_NOT_SUPPORTED and says so once on stderr: a program linked with
// -lcuda against the fake then fails at that call, naming it.

struct ExportTarget {
  const char* symbol;
  void* fn;  // null: not modelled
};

ExportTarget export_target(const char* symbol, const char* base, int version) {
  for (const auto& entry : proc_table()) {
    if (entry.since == version && std::strcmp(entry.name, base) == 0) return {symbol, entry.fn};
  }
  return {symbol, nullptr};
}

// Lock-free and without stdio: a program may call the driver from a signal handler.
CUresult not_modelled(const char* symbol, std::atomic_flag& said) {
  if (!said.test_and_set()) {
    static constexpr const char* kParts[] = {"drvshim fake driver: ", nullptr,
                                             " is not modelled by the fake; it returns CUDA_ERROR_NOT_SUPPORTED\n"};
    for (const char* part : kParts) {
      const char* text = part != nullptr ? part : symbol;
      (void)!::write(STDERR_FILENO, text, std::strlen(text));
    }
  }
  return CUDA_ERROR_NOT_SUPPORTED;
}

struct ExportKey {
  const char* symbol;
  const char* base;
  int version;
};

// The exported names, in the generated order (their ids).
const std::vector<ExportKey>& export_keys() {
  static const std::vector<ExportKey> keys = {
#define DRVSHIM_FAKE_EXPORT(id, sym, base, version, params, args) {#sym, base, version},
#include "fake_exports.inc"
#undef DRVSHIM_FAKE_EXPORT
  };
  return keys;
}

}  // namespace

// Each exported name's implementation (null: not modelled), by id. Resolved when
// the library loads, so a forwarder only reads it: a signal handler may call a
// forwarder while its thread is in the same one (a guarded static would abort).
constexpr std::size_t kExportCount = 0
#define DRVSHIM_FAKE_EXPORT(id, sym, base, version, params, args) +1
#include "fake_exports.inc"
#undef DRVSHIM_FAKE_EXPORT
    ;
void* g_export_fn[kExportCount] = {};

namespace {
[[gnu::constructor]] void resolve_exports() {
  const auto& keys = export_keys();
  for (std::size_t id = 0; id < keys.size(); ++id) {
    g_export_fn[id] = export_target(keys[id].symbol, keys[id].base, keys[id].version).fn;
  }
}
}  // namespace

std::string injection_problem(const std::string& api) {
  if (api == "*") return {};
  for (const auto& entry : proc_table()) {
    if (api == entry.name) return {};
  }
  std::string base = api;
  while (!base.empty() && (std::isdigit(static_cast<unsigned char>(base.back())) != 0)) base.pop_back();
  if (base.size() >= 2 && base.compare(base.size() - 2, 2, "_v") == 0 && base.size() < api.size()) {
    base.resize(base.size() - 2);
    for (const auto& entry : proc_table()) {
      if (base == entry.name)
        return "'" + api + "' is a versioned name: failures are injected by base name ('" + base + "')";
    }
  }
  return "'" + api + "' is not a driver function the fake models (give a base name such as cuMemAlloc, or *)";
}

// Exported names (each an ABI variant a program compiled against cuda.h may
// call) of functions the fake implements, but not in that variant.
std::string export_gaps() {
  std::set<std::string> implemented;
  for (const auto& entry : proc_table()) implemented.insert(entry.name);
  std::string gaps;
  for (const auto& key : export_keys()) {
    if (implemented.count(key.base) == 0 || export_target(key.symbol, key.base, key.version).fn != nullptr) continue;
    gaps += (gaps.empty() ? "" : ", ") + std::string(key.symbol);
  }
  return gaps;
}

}  // namespace drvshim::fake

extern "C" {
#define DRVSHIM_FAKE_EXPORT(id, sym, base, version, params, args)      \
  DRVSHIM_FAKE_API CUresult drvshim_fake_x##id params __asm__(#sym);   \
  DRVSHIM_FAKE_API CUresult drvshim_fake_x##id params {                \
    using Fn = CUresult(*) params;                                     \
    static std::atomic_flag said;                                      \
    void* const fn = drvshim::fake::g_export_fn[id];                   \
    if (fn == nullptr) return drvshim::fake::not_modelled(#sym, said); \
    return reinterpret_cast<Fn>(fn) args;                              \
  }
#include "fake_exports.inc"
#undef DRVSHIM_FAKE_EXPORT
}  // extern "C"

// ---- entry points the fake defines itself, as libcuda exports them ---------------------

extern "C" {

DRVSHIM_FAKE_API CUresult cuDriverGetVersion(int* version) {
  return drvshim::fake::fake_cuDriverGetVersion_impl(version);
}

#ifndef DRVSHIM_FAKE_NO_PROC_V2
DRVSHIM_FAKE_API CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version, cuuint64_t flags,
                                              CUdriverProcAddressQueryResult* status) {
  return drvshim::fake::get_proc(symbol, pfn, version, flags, status, "cuGetProcAddress");
}
#endif

// The 11.3-11.8 form (no status). cuda.h maps the name to _v2, so declare it by hand.
DRVSHIM_FAKE_API CUresult drvshim_fake_cuGetProcAddress_v1(const char* symbol, void** pfn, int version,
                                                           cuuint64_t flags) __asm__("cuGetProcAddress");
DRVSHIM_FAKE_API CUresult drvshim_fake_cuGetProcAddress_v1(const char* symbol, void** pfn, int version,
                                                           cuuint64_t flags) {
  return drvshim::fake::get_proc(symbol, pfn, version, flags, nullptr, "cuGetProcAddress");
}

}  // extern "C"
