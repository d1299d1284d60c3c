// SPDX-License-Identifier: Apache-2.0
// Libraries (cuLibraryLoadData): context-independent code from PTX or
// fatbins, loaded lazily as the driver does, with the architecture check at
// load and at binding; their kernels and the binding to a context.
#include <cstdlib>
#include <cstring>

#include "fake_engine.hpp"
#include "fake_images.hpp"

namespace drvshim::fake {

// Whether a library can run on `device`: PTX for it or an older architecture,
// or SASS for exactly its architecture.
bool library_runs_on(const Engine& e, const FakeModule& l, int device) {
  if (!l.fatbin) return true;
  const int cc = attr(e, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR) * 10 +
                 attr(e, device, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
  for (int a : l.sass_archs) {
    if (a == cc) return true;
  }
  for (int a : l.ptx_archs) {
    if (a <= cc) return true;
  }
  return false;
}

namespace {

// cuLibraryLoadData: the same PTX parsing, no context. Globals (__device__,
// __constant__, __managed__) get one allocation shared by every context.
CUresult fake_cuLibraryLoadData(CUlibrary* pl, const void* code, CUjit_option* opts, void** values, unsigned n,
                                CUlibraryOption*, void**, unsigned) {
  FAKE_ENTER("cuLibraryLoadData");
  if (pl == nullptr || code == nullptr) return CUDA_ERROR_INVALID_VALUE;
  const auto* bytes = static_cast<const unsigned char*>(code);
  std::string ptx;
  auto* l = new FakeModule;
  ElfContents elf;
  if (bytes[0] == 0x50 && bytes[1] == 0xed) {
    FatbinContents contents = read_fatbin(bytes);
    l->fatbin = true;
    l->ptx_archs = contents.ptx_archs;
    l->sass_archs = contents.sass_archs;
    ptx = std::move(contents.ptx);
    elf = std::move(contents.elf);
    if (ptx.empty() && elf.kernels.empty()) {  // compressed: nothing the fake can read
      delete l;
      return refuse_image(e, "a library from a compressed fatbin", n, opts, values);
    }
    // No image any device can run: the driver refuses the library outright.
    bool runs_somewhere = false;
    for (size_t d = 0; d < e.devices.size(); ++d)
      runs_somewhere = runs_somewhere || library_runs_on(e, *l, static_cast<int>(d));
    if (!runs_somewhere) {
      delete l;
      return CUDA_ERROR_NO_BINARY_FOR_GPU;
    }
  } else if (bytes[0] == 0x7f) {
    delete l;
    return refuse_image(e, "a library from a CUBIN (ELF)", n, opts, values);
  } else {
    ptx = static_cast<const char*>(code);
  }
  if (!ptx.empty()) {
    std::string error = parse_ptx(ptx, *l);
    if (error.find("syntax error") != std::string::npos) {
      // Lazy loading: the load reads the entries; the JIT and its error come at
      // the first cuKernelGetFunction.
      std::string readable = ptx;
      for (auto at = readable.find("syntax_error"); at != std::string::npos; at = readable.find("syntax_error", at)) {
        readable.replace(at, 12, "lazy_jitted_");
      }
      for (FakeFunction* f : l->functions) delete f;
      l->functions.clear();
      for (auto& [name, g] : l->globals) std::free(reinterpret_cast<void*>(g.first));
      l->globals.clear();
      (void)parse_ptx(readable, *l);
      l->lazy_jit_error = error;
      error.clear();
    }
    if (!error.empty()) {
      for (FakeFunction* f : l->functions) delete f;
      for (auto& [name, g] : l->globals) std::free(reinterpret_cast<void*>(g.first));
      delete l;
      write_log(n, opts, values, CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, error);
      return CUDA_ERROR_INVALID_PTX;
    }
    if (l->lazy_jit_error.empty()) {
      write_wall_time(n, opts, values, 0.25f);
      write_log(n, opts, values, CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES,
                info_log(*l, n, opts, values));
    }
  } else {
    for (const auto& name : elf.kernels) {  // SASS only: names, no parameter layout
      auto* f = new FakeFunction;
      f->module = l;
      f->name = name;
      l->functions.push_back(f);
    }
    for (const auto& [name, init] : elf.globals) {
      void* mem = std::calloc(1, init.size());
      std::memcpy(mem, init.data(), init.size());
      l->globals[name] = {reinterpret_cast<uintptr_t>(mem), init.size()};
    }
  }
  for (const auto& [name, g] : l->globals) e.allocs[g.first] = Alloc{g.second, AllocKind::module_global, nullptr, 0};
  e.libraries.insert(l);
  *pl = reinterpret_cast<CUlibrary>(l);
  return CUDA_SUCCESS;
}

CUresult fake_cuLibraryUnload(CUlibrary hl) {
  FAKE_ENTER("cuLibraryUnload");
  auto* l = reinterpret_cast<FakeModule*>(hl);
  if (e.libraries.count(l) == 0) {
    misuse(e, "cuLibraryUnload of an unloaded or unknown library");
    return CUDA_ERROR_INVALID_HANDLE;
  }
  for (FakeFunction* f : l->functions) delete f;
  for (auto& [name, g] : l->globals) {
    e.allocs.erase(g.first);
    std::free(reinterpret_cast<void*>(g.first));
  }
  e.libraries.erase(l);
  delete l;
  return CUDA_SUCCESS;
}

CUresult fake_cuLibraryGetKernel(CUkernel* pk, CUlibrary hl, const char* name) {
  FAKE_ENTER("cuLibraryGetKernel");
  auto* l = reinterpret_cast<FakeModule*>(hl);
  if (e.libraries.count(l) == 0 || pk == nullptr || name == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  for (FakeFunction* f : l->functions) {
    if (f->name == name) {
      *pk = reinterpret_cast<CUkernel>(f);
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_NOT_FOUND;
}

CUresult fake_cuKernelGetFunction(CUfunction* pf, CUkernel k) {
  FAKE_ENTER("cuKernelGetFunction");
  FakeCtx* ctx = nullptr;
  if (const CUresult r = current(e, &ctx); r != CUDA_SUCCESS) return r;  // the function of the current context
  FakeFunction* f = live_function(e, reinterpret_cast<CUfunction>(k));
  if (f == nullptr || pf == nullptr) return CUDA_ERROR_INVALID_HANDLE;
  if (!f->module->lazy_jit_error.empty()) return CUDA_ERROR_INVALID_PTX;  // and no log anywhere
  // Binding to a context loads the code for its device: none that runs there is the driver's error.
  if (!library_runs_on(e, *f->module, ctx->device)) return CUDA_ERROR_NO_BINARY_FOR_GPU;
  *pf = reinterpret_cast<CUfunction>(f);
  return CUDA_SUCCESS;
}

}  // namespace

std::vector<ProcEntry> library_procs() {
  return {
      {"cuLibraryLoadData", 12000, erase_fn(&fake_cuLibraryLoadData)},
      {"cuLibraryUnload", 12000, erase_fn(&fake_cuLibraryUnload)},
      {"cuLibraryGetKernel", 12000, erase_fn(&fake_cuLibraryGetKernel)},
      {"cuKernelGetFunction", 12000, erase_fn(&fake_cuKernelGetFunction)},
  };
}

}  // namespace drvshim::fake
