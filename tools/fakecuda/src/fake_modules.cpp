// SPDX-License-Identifier: Apache-2.0
// Modules (cuModuleLoadDataEx: PTX only, bound to the current context) and
// the queries on their functions, which library kernels share.
#include <algorithm>
#include <cstdlib>

#include "fake_engine.hpp"

namespace drvshim::fake {

FakeFunction* live_function(Engine& e, CUfunction f) {
  auto* p = reinterpret_cast<FakeFunction*>(f);
  for (const auto* set : {&e.modules, &e.libraries}) {
    for (FakeModule* m : *set) {
      if (std::find(m->functions.begin(), m->functions.end(), p) != m->functions.end()) return p;
    }
  }
  return nullptr;
}

namespace {

FakeModule* live_module(Engine& e, CUmodule m) {
  auto* p = reinterpret_cast<FakeModule*>(m);
  return e.modules.count(p) != 0 ? p : nullptr;
}

CUresult load_module(Engine& e, CUmodule* pm, const void* image, unsigned n, CUjit_option* opts, void** values) {
  if (pm == nullptr || image == nullptr) return CUDA_ERROR_INVALID_VALUE;
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;
  const auto* bytes = static_cast<const unsigned char*>(image);
  if (bytes[0] == 0x7f) return refuse_image(e, "a module from a CUBIN (ELF)", n, opts, values);
  if (bytes[0] == 0x50 && bytes[1] == 0xed) return refuse_image(e, "a module from a fatbin", n, opts, values);
  // nvcc's fatbin wrapper (magic 0x466243b1, then a pointer to the fatbin).
  if (bytes[0] == 0xb1 && bytes[1] == 0x43 && bytes[2] == 0x62 && bytes[3] == 0x46) {
    return refuse_image(e, "a module from a fatbin wrapper", n, opts, values);
  }
  const std::string ptx(static_cast<const char*>(image));
  auto* m = new FakeModule;
  m->ctx = ctx;
  const std::string error = parse_ptx(ptx, *m);
  write_wall_time(n, opts, values, 0.25f);
  if (!error.empty()) {
    for (FakeFunction* f : m->functions) delete f;
    for (auto& [name, g] : m->globals) std::free(reinterpret_cast<void*>(g.first));
    delete m;
    write_log(n, opts, values, CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, error);
    return CUDA_ERROR_INVALID_PTX;
  }
  write_log(n, opts, values, CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, info_log(*m, n, opts, values));
  // Globals are device memory of the module: copies and memsets may target them.
  for (const auto& [name, g] : m->globals) e.allocs[g.first] = Alloc{g.second, AllocKind::module_global, ctx, 0};
  e.modules.insert(m);
  *pm = reinterpret_cast<CUmodule>(m);
  return CUDA_SUCCESS;
}

CUresult fake_cuModuleLoadDataEx(CUmodule* pm, const void* image, unsigned n, CUjit_option* opts, void** values) {
  FAKE_ENTER("cuModuleLoadDataEx");
  return load_module(e, pm, image, n, opts, values);
}

CUresult fake_cuModuleLoadData(CUmodule* pm, const void* image) {
  FAKE_ENTER("cuModuleLoadData");
  return load_module(e, pm, image, 0, nullptr, nullptr);
}

CUresult fake_cuModuleUnload(CUmodule hm) {
  FAKE_ENTER("cuModuleUnload");
  FakeModule* m = live_module(e, hm);
  if (m == nullptr) {
    misuse(e, "cuModuleUnload of an unloaded or unknown module");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  for (FakeFunction* f : m->functions) delete f;
  for (auto& [name, g] : m->globals) {
    e.allocs.erase(g.first);
    std::free(reinterpret_cast<void*>(g.first));
  }
  e.modules.erase(m);
  delete m;
  return CUDA_SUCCESS;
}

CUresult fake_cuModuleGetFunction(CUfunction* pf, CUmodule hm, const char* name) {
  FAKE_ENTER("cuModuleGetFunction");
  FakeModule* m = live_module(e, hm);
  if (pf == nullptr || name == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  for (FakeFunction* f : m->functions) {
    if (f->name == name) {
      *pf = reinterpret_cast<CUfunction>(f);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult fake_cuModuleGetGlobal(CUdeviceptr* dptr, size_t* bytes, CUmodule hm, const char* name) {
  FAKE_ENTER("cuModuleGetGlobal");
  FakeModule* m = live_module(e, hm);
  if (m == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  auto it = m->globals.find(name != nullptr ? name : "");
  if (it == m->globals.end()) return CUDA_ERROR_NOT_FOUND;
  if (dptr != nullptr) *dptr = it->second.first;
  if (bytes != nullptr) *bytes = it->second.second;
  return CUDA_SUCCESS;
}

CUresult fake_cuModuleGetFunctionCount(unsigned* count, CUmodule hm) {
  FAKE_ENTER("cuModuleGetFunctionCount");
  FakeModule* m = live_module(e, hm);
  if (m == nullptr || count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<unsigned>(m->functions.size());
  return CUDA_SUCCESS;
}

CUresult fake_cuModuleEnumerateFunctions(CUfunction* fs, unsigned n, CUmodule hm) {
  FAKE_ENTER("cuModuleEnumerateFunctions");
  FakeModule* m = live_module(e, hm);
  if (m == nullptr || fs == nullptr) return CUDA_ERROR_INVALID_VALUE;
  for (unsigned i = 0; i < n && i < m->functions.size(); ++i) fs[i] = reinterpret_cast<CUfunction>(m->functions[i]);
  return CUDA_SUCCESS;
}

CUresult fake_cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  FAKE_ENTER("cuModuleGetLoadingMode");
  if (mode == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *mode = CU_MODULE_LAZY_LOADING;
  return CUDA_SUCCESS;
}

CUresult fake_cuFuncGetName(const char** name, CUfunction hf) {
  FAKE_ENTER("cuFuncGetName");
  FakeFunction* f = live_function(e, hf);
  if (f == nullptr || name == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  *name = f->name.c_str();
  return CUDA_SUCCESS;
}

CUresult fake_cuFuncGetParamInfo(CUfunction hf, size_t index, size_t* offset, size_t* size) {
  FAKE_ENTER("cuFuncGetParamInfo");
  FakeFunction* f = live_function(e, hf);
  if (f == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (e.endless_param_info) {
    if (offset != nullptr) *offset = index * 8;
    if (size != nullptr) *size = 8;
    return CUDA_SUCCESS;
  }
  if (index >= f->params.size()) return CUDA_ERROR_INVALID_VALUE;
  if (offset != nullptr) *offset = f->params[index].first;
  if (size != nullptr) *size = f->params[index].second;
  return CUDA_SUCCESS;
}

CUresult fake_cuFuncGetAttribute(int* value, CUfunction_attribute attribute, CUfunction hf) {
  FAKE_ENTER("cuFuncGetAttribute");
  FakeFunction* f = live_function(e, hf);
  if (f == nullptr || value == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (auto it = f->attributes.find(attribute); it != f->attributes.end()) {
    *value = it->second;
    return CUDA_SUCCESS;
  }
  switch (attribute) {
    case CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK: *value = 1024; break;
    case CU_FUNC_ATTRIBUTE_NUM_REGS: *value = 32; break;
    case CU_FUNC_ATTRIBUTE_PTX_VERSION:
    case CU_FUNC_ATTRIBUTE_BINARY_VERSION: *value = 90; break;
    case CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES: *value = 49152; break;
    case CU_FUNC_ATTRIBUTE_PREFERRED_SHARED_MEMORY_CARVEOUT: *value = -1; break;
    default: *value = 0;
  }
  return CUDA_SUCCESS;
}

CUresult fake_cuOccupancyMaxActiveBlocksPerMultiprocessor(int* blocks, CUfunction hf, int block_size, size_t shared) {
  FAKE_ENTER("cuOccupancyMaxActiveBlocksPerMultiprocessor");
  const FakeFunction* f = live_function(e, hf);
  if (f == nullptr || blocks == nullptr || block_size <= 0) return CUDA_ERROR_INVALID_VALUE;
  *blocks = resident_blocks_per_sm(e, function_device(e, hf), f, static_cast<unsigned>(block_size), shared);
  return CUDA_SUCCESS;
}

}  // namespace

std::vector<ProcEntry> module_procs() {
  return {
      {"cuModuleLoadDataEx", 2010, erase_fn(&fake_cuModuleLoadDataEx)},
      {"cuModuleLoadData", 2000, erase_fn(&fake_cuModuleLoadData)},
      {"cuModuleUnload", 2000, erase_fn(&fake_cuModuleUnload)},
      {"cuModuleGetFunction", 2000, erase_fn(&fake_cuModuleGetFunction)},
      {"cuModuleGetGlobal", 3020, erase_fn(&fake_cuModuleGetGlobal)},
      {"cuModuleGetFunctionCount", 12040, erase_fn(&fake_cuModuleGetFunctionCount)},
      {"cuModuleEnumerateFunctions", 12040, erase_fn(&fake_cuModuleEnumerateFunctions)},
      {"cuModuleGetLoadingMode", 11070, erase_fn(&fake_cuModuleGetLoadingMode)},
      {"cuFuncGetName", 12030, erase_fn(&fake_cuFuncGetName)},
      {"cuFuncGetParamInfo", 12040, erase_fn(&fake_cuFuncGetParamInfo)},
      {"cuFuncGetAttribute", 2020, erase_fn(&fake_cuFuncGetAttribute)},
      {"cuOccupancyMaxActiveBlocksPerMultiprocessor", 6050,
       erase_fn(&fake_cuOccupancyMaxActiveBlocksPerMultiprocessor)},
  };
}

}  // namespace drvshim::fake
