// SPDX-License-Identifier: Apache-2.0
// A separate library for drvshim-trace's scenarios, so calls made from it are
// attributed to it (libtrace_helper.so), as a real program's libraries are.
#include <cuda.h>

extern "C" {

__attribute__((visibility("default"))) CUresult helper_push(CUcontext ctx) { return cuCtxPushCurrent(ctx); }

__attribute__((visibility("default"))) CUresult helper_reset(CUdevice dev) { return cuDevicePrimaryCtxReset(dev); }

}  // extern "C"
