// SPDX-License-Identifier: Apache-2.0
// The exported wrappers, one per entry point of the toolkit's libcuda
// (generated at build time by tools/trace/gen/gen_driver_api.py).
#include <cuda.h>
#include <cudaProfiler.h>

#include "traced_call.hpp"

#define DRVSHIM_TRACE_EXPORT __attribute__((visibility("default")))

namespace drvshim::trace_interposer {

const recorder::CallDesc kDescs[kFnCount] = {
#define DRVSHIM_TRACE_FN(id, sym, base, ver, flags, interesting, n, names, hex) {#sym, #base, names, hex, n},
#include "driver_api_table.inc"
#undef DRVSHIM_TRACE_FN
};

}  // namespace drvshim::trace_interposer

using drvshim::trace_interposer::hooked;
using drvshim::trace_interposer::traced;

#include "driver_api_wrappers.inc"
