#pragma once
// The one list of driver functions drvshim calls. Each entry names, once:
//   X(alias, base name, ABI version, Required|Optional)
// The ABI version is the suffix of the cudaTypedefs.h PFN typedef drvshim
// calls through (PFN_cuMemAlloc_v3020 -> 3020); cuGetProcAddress is asked for
// exactly that version, so the driver hands back the matching ABI and never a
// newer, incompatible one. `alias` differs from the base name only where two
// ABI versions of one function are both used.
//
// Required: load() fails without it. Optional: the feature that needs it
// reports "unsupported".
#define DRVSHIM_DRIVER_FUNCTIONS(X)                                      \
  X(cuGetErrorName, cuGetErrorName, 6000, Required)                      \
  X(cuGetErrorString, cuGetErrorString, 6000, Required)                  \
  X(cuInit, cuInit, 2000, Required)                                      \
  X(cuDriverGetVersion, cuDriverGetVersion, 2020, Required)              \
  X(cuDeviceGet, cuDeviceGet, 2000, Required)                            \
  X(cuDeviceGetCount, cuDeviceGetCount, 2000, Required)                  \
  X(cuDeviceGetName, cuDeviceGetName, 2000, Required)                    \
  X(cuDeviceGetUuid, cuDeviceGetUuid, 11040, Optional)                   \
  X(cuDeviceTotalMem, cuDeviceTotalMem, 3020, Required)                  \
  X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, Required)          \
  X(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId, 4010, Required)            \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, Required)  \
  X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 11000, Required) \
  X(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags, 11000, Required) \
  X(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000, Required) \
  X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 11000, Required)   \
  X(cuCtxCreate, cuCtxCreate, 12050, Optional)                           \
  X(cuCtxCreateLegacy, cuCtxCreate, 3020, Required)                      \
  X(cuCtxDestroy, cuCtxDestroy, 4000, Required)                          \
  X(cuCtxPushCurrent, cuCtxPushCurrent, 4000, Required)                  \
  X(cuCtxPopCurrent, cuCtxPopCurrent, 4000, Required)                    \
  X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, Required)                    \
  X(cuCtxGetCurrent, cuCtxGetCurrent, 4000, Required)                    \
  X(cuCtxGetDevice, cuCtxGetDevice, 2000, Required)                      \
  X(cuCtxGetFlags, cuCtxGetFlags, 7000, Required)                        \
  X(cuCtxGetApiVersion, cuCtxGetApiVersion, 3020, Required)              \
  X(cuCtxGetId, cuCtxGetId, 12000, Optional)                             \
  X(cuCtxSynchronize, cuCtxSynchronize, 2000, Required)                  \
  X(cuMemGetInfo, cuMemGetInfo, 3020, Required)
