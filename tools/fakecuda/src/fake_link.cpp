// SPDX-License-Identifier: Apache-2.0
// The linker (cuLinkCreate, cuLinkAddData, cuLinkComplete, cuLinkDestroy):
// the "SASS" the fake links is the PTX text itself, which its loaders parse.
#include <cstdio>
#include <cstdlib>

#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

CUresult fake_cuLinkCreate(unsigned n, CUjit_option* opts, void** values, CUlinkState* out) {
  FAKE_ENTER("cuLinkCreate");
  if (out == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  auto* l = new Engine::LinkState;
  for (unsigned i = 0; i < n; ++i) {
    if (opts[i] == CU_JIT_ERROR_LOG_BUFFER) l->error_log = static_cast<char*>(values[i]);
    if (opts[i] == CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES) l->error_cap = reinterpret_cast<uintptr_t>(values[i]);
  }
  l->option_count = n;
  l->options = opts;
  l->values = values;
  e.links.insert(l);
  *out = reinterpret_cast<CUlinkState>(l);
  return CUDA_SUCCESS;
}

CUresult fake_cuLinkAddData(CUlinkState state, CUjitInputType type, void* data, size_t size, const char*, unsigned,
                            CUjit_option*, void**) {
  FAKE_ENTER("cuLinkAddData");
  auto* l = reinterpret_cast<Engine::LinkState*>(state);
  if (e.links.count(l) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (type != CU_JIT_INPUT_PTX || data == nullptr || size == 0) return CUDA_ERROR_INVALID_VALUE;
  const std::string ptx(static_cast<const char*>(data), strnlen(static_cast<const char*>(data), size));
  FakeModule scratch;
  const std::string error = parse_ptx(ptx, scratch);
  for (FakeFunction* f : scratch.functions) delete f;
  for (auto& [name, g] : scratch.globals) std::free(reinterpret_cast<void*>(g.first));
  if (!error.empty()) {
    if (l->error_log != nullptr && l->error_cap > 0) std::snprintf(l->error_log, l->error_cap, "%s", error.c_str());
    return CUDA_ERROR_INVALID_PTX;
  }
  l->image += ptx;
  return CUDA_SUCCESS;
}

CUresult fake_cuLinkComplete(CUlinkState state, void** cubin, size_t* size) {
  FAKE_ENTER("cuLinkComplete");
  auto* l = reinterpret_cast<Engine::LinkState*>(state);
  if (e.links.count(l) == 0) return CUDA_ERROR_INVALID_HANDLE;
  if (cubin == nullptr || size == nullptr || l->image.empty()) return CUDA_ERROR_INVALID_VALUE;
  write_wall_time(l->option_count, l->options, l->values, 0.5f);
  *cubin = l->image.data();
  *size = l->image.size() + 1;
  return CUDA_SUCCESS;
}

CUresult fake_cuLinkDestroy(CUlinkState state) {
  FAKE_ENTER("cuLinkDestroy");
  auto* l = reinterpret_cast<Engine::LinkState*>(state);
  if (e.links.erase(l) == 0) {
    misuse(e, "cuLinkDestroy of an unknown link state");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  delete l;
  return CUDA_SUCCESS;
}

}  // namespace

std::vector<ProcEntry> link_procs() {
  return {
      {"cuLinkCreate", 6050, erase_fn(&fake_cuLinkCreate)},
      {"cuLinkAddData", 6050, erase_fn(&fake_cuLinkAddData)},
      {"cuLinkComplete", 5050, erase_fn(&fake_cuLinkComplete)},
      {"cuLinkDestroy", 5050, erase_fn(&fake_cuLinkDestroy)},
  };
}

}  // namespace drvshim::fake
