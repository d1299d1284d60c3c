// SPDX-License-Identifier: Apache-2.0
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
#define DRVSHIM_DRIVER_FUNCTIONS(X)                                                                                   \
  X(cuGetErrorName, cuGetErrorName, 6000, Required)                                                                   \
  X(cuGetErrorString, cuGetErrorString, 6000, Required)                                                               \
  X(cuInit, cuInit, 2000, Required)                                                                                   \
  X(cuDriverGetVersion, cuDriverGetVersion, 2020, Required)                                                           \
  X(cuDeviceGet, cuDeviceGet, 2000, Required)                                                                         \
  X(cuDeviceGetCount, cuDeviceGetCount, 2000, Required)                                                               \
  X(cuDeviceGetName, cuDeviceGetName, 2000, Required)                                                                 \
  X(cuDeviceGetUuid, cuDeviceGetUuid, 11040, Optional)                                                                \
  X(cuDeviceTotalMem, cuDeviceTotalMem, 3020, Required)                                                               \
  X(cuDeviceGetAttribute, cuDeviceGetAttribute, 2000, Required)                                                       \
  X(cuDeviceGetPCIBusId, cuDeviceGetPCIBusId, 4010, Required)                                                         \
  X(cuDeviceCanAccessPeer, cuDeviceCanAccessPeer, 4000, Required)                                                     \
  X(cuDevicePrimaryCtxRetain, cuDevicePrimaryCtxRetain, 7000, Required)                                               \
  X(cuDevicePrimaryCtxRelease, cuDevicePrimaryCtxRelease, 11000, Required)                                            \
  X(cuDevicePrimaryCtxSetFlags, cuDevicePrimaryCtxSetFlags, 11000, Required)                                          \
  X(cuDevicePrimaryCtxGetState, cuDevicePrimaryCtxGetState, 7000, Required)                                           \
  X(cuDevicePrimaryCtxReset, cuDevicePrimaryCtxReset, 11000, Required)                                                \
  X(cuCtxCreate, cuCtxCreate, 12050, Optional)                                                                        \
  X(cuCtxCreateLegacy, cuCtxCreate, 3020, Required)                                                                   \
  X(cuCtxDestroy, cuCtxDestroy, 4000, Required)                                                                       \
  X(cuCtxPushCurrent, cuCtxPushCurrent, 4000, Required)                                                               \
  X(cuCtxPopCurrent, cuCtxPopCurrent, 4000, Required)                                                                 \
  X(cuCtxSetCurrent, cuCtxSetCurrent, 4000, Required)                                                                 \
  X(cuCtxGetCurrent, cuCtxGetCurrent, 4000, Required)                                                                 \
  X(cuCtxGetDevice, cuCtxGetDevice, 2000, Required)                                                                   \
  X(cuCtxGetFlags, cuCtxGetFlags, 7000, Required)                                                                     \
  X(cuCtxGetApiVersion, cuCtxGetApiVersion, 3020, Required)                                                           \
  X(cuCtxGetId, cuCtxGetId, 12000, Optional)                                                                          \
  X(cuCtxSynchronize, cuCtxSynchronize, 2000, Required)                                                               \
  X(cuMemGetInfo, cuMemGetInfo, 3020, Required)                                                                       \
  X(cuCtxGetStreamPriorityRange, cuCtxGetStreamPriorityRange, 5050, Required)                                         \
  X(cuStreamCreateWithPriority, cuStreamCreateWithPriority, 5050, Required)                                           \
  X(cuStreamDestroy, cuStreamDestroy, 4000, Required)                                                                 \
  X(cuStreamSynchronize, cuStreamSynchronize, 2000, Required)                                                         \
  X(cuStreamQuery, cuStreamQuery, 2000, Required)                                                                     \
  X(cuStreamWaitEvent, cuStreamWaitEvent, 3020, Required)                                                             \
  X(cuLaunchHostFunc, cuLaunchHostFunc, 10000, Required)                                                              \
  X(cuEventCreate, cuEventCreate, 2000, Required)                                                                     \
  X(cuEventDestroy, cuEventDestroy, 4000, Required)                                                                   \
  X(cuEventRecord, cuEventRecord, 2000, Required)                                                                     \
  X(cuEventQuery, cuEventQuery, 2000, Required)                                                                       \
  X(cuEventSynchronize, cuEventSynchronize, 2000, Required)                                                           \
  X(cuEventElapsedTime, cuEventElapsedTime, 12080, Optional)                                                          \
  X(cuEventElapsedTimeLegacy, cuEventElapsedTime, 2000, Optional)                                                     \
  X(cuMemAlloc, cuMemAlloc, 3020, Required)                                                                           \
  X(cuMemFree, cuMemFree, 3020, Required)                                                                             \
  X(cuMemsetD8, cuMemsetD8, 3020, Required)                                                                           \
  X(cuMemsetD16, cuMemsetD16, 3020, Required)                                                                         \
  X(cuMemsetD32, cuMemsetD32, 3020, Required)                                                                         \
  X(cuMemsetD8Async, cuMemsetD8Async, 3020, Required)                                                                 \
  X(cuMemsetD16Async, cuMemsetD16Async, 3020, Required)                                                               \
  X(cuMemsetD32Async, cuMemsetD32Async, 3020, Required)                                                               \
  X(cuMemcpyHtoD, cuMemcpyHtoD, 3020, Required)                                                                       \
  X(cuMemcpyDtoH, cuMemcpyDtoH, 3020, Required)                                                                       \
  X(cuMemcpyDtoD, cuMemcpyDtoD, 3020, Required)                                                                       \
  X(cuMemcpyHtoDAsync, cuMemcpyHtoDAsync, 3020, Required)                                                             \
  X(cuMemcpyDtoHAsync, cuMemcpyDtoHAsync, 3020, Required)                                                             \
  X(cuMemcpyDtoDAsync, cuMemcpyDtoDAsync, 3020, Required)                                                             \
  X(cuMemHostAlloc, cuMemHostAlloc, 2020, Required)                                                                   \
  X(cuMemFreeHost, cuMemFreeHost, 2000, Required)                                                                     \
  X(cuMemHostGetDevicePointer, cuMemHostGetDevicePointer, 3020, Required)                                             \
  X(cuMemHostRegister, cuMemHostRegister, 6050, Required)                                                             \
  X(cuMemHostUnregister, cuMemHostUnregister, 4000, Required)                                                         \
  X(cuMemAllocManaged, cuMemAllocManaged, 6000, Required)                                                             \
  X(cuMemAllocAsync, cuMemAllocAsync, 11020, Optional)                                                                \
  X(cuMemFreeAsync, cuMemFreeAsync, 11020, Optional)                                                                  \
  X(cuPointerGetAttributes, cuPointerGetAttributes, 7000, Required)                                                   \
  X(cuModuleLoadDataEx, cuModuleLoadDataEx, 2010, Required)                                                           \
  X(cuModuleUnload, cuModuleUnload, 2000, Required)                                                                   \
  X(cuModuleGetFunction, cuModuleGetFunction, 2000, Required)                                                         \
  X(cuModuleGetGlobal, cuModuleGetGlobal, 3020, Required)                                                             \
  X(cuModuleGetFunctionCount, cuModuleGetFunctionCount, 12040, Optional)                                              \
  X(cuModuleEnumerateFunctions, cuModuleEnumerateFunctions, 12040, Optional)                                          \
  X(cuModuleGetLoadingMode, cuModuleGetLoadingMode, 11070, Optional)                                                  \
  X(cuFuncGetName, cuFuncGetName, 12030, Optional)                                                                    \
  X(cuFuncGetParamInfo, cuFuncGetParamInfo, 12040, Optional)                                                          \
  X(cuFuncGetAttribute, cuFuncGetAttribute, 2020, Required)                                                           \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessor, cuOccupancyMaxActiveBlocksPerMultiprocessor, 6050, Required)         \
  X(cuLaunchKernel, cuLaunchKernel, 4000, Required)                                                                   \
  X(cuLaunchKernelEx, cuLaunchKernelEx, 11060, Optional)                                                              \
  X(cuLibraryLoadData, cuLibraryLoadData, 12000, Optional)                                                            \
  X(cuLibraryUnload, cuLibraryUnload, 12000, Optional)                                                                \
  X(cuLibraryGetKernel, cuLibraryGetKernel, 12000, Optional)                                                          \
  X(cuKernelGetFunction, cuKernelGetFunction, 12000, Optional)                                                        \
  X(cuLinkCreate, cuLinkCreate, 6050, Required)                                                                       \
  X(cuLinkAddData, cuLinkAddData, 6050, Required)                                                                     \
  X(cuLinkComplete, cuLinkComplete, 5050, Required)                                                                   \
  X(cuLinkDestroy, cuLinkDestroy, 5050, Required)                                                                     \
  /* kernels: settable attributes, cache preference, cooperative launch, occupancy */                                 \
  X(cuFuncSetAttribute, cuFuncSetAttribute, 9000, Optional)                                                           \
  X(cuKernelSetAttribute, cuKernelSetAttribute, 12000, Optional)                                                      \
  X(cuFuncSetCacheConfig, cuFuncSetCacheConfig, 3000, Optional)                                                       \
  X(cuLaunchCooperativeKernel, cuLaunchCooperativeKernel, 9000, Optional)                                             \
  X(cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags, 7000, \
    Optional)                                                                                                         \
  X(cuOccupancyAvailableDynamicSMemPerBlock, cuOccupancyAvailableDynamicSMemPerBlock, 10020, Optional)                \
  X(cuOccupancyMaxPotentialBlockSize, cuOccupancyMaxPotentialBlockSize, 6050, Optional)                               \
  X(cuOccupancyMaxActiveClusters, cuOccupancyMaxActiveClusters, 11070, Optional)                                      \
  /* stream capture and graphs */                                                                                     \
  X(cuStreamBeginCapture, cuStreamBeginCapture, 10010, Optional)                                                      \
  X(cuStreamEndCapture, cuStreamEndCapture, 10000, Optional)                                                          \
  X(cuStreamIsCapturing, cuStreamIsCapturing, 10000, Optional)                                                        \
  X(cuStreamGetCaptureInfo, cuStreamGetCaptureInfo, 12030, Optional)                                                  \
  X(cuThreadExchangeStreamCaptureMode, cuThreadExchangeStreamCaptureMode, 10010, Optional)                            \
  X(cuGraphDestroy, cuGraphDestroy, 10000, Optional)                                                                  \
  X(cuGraphGetNodes, cuGraphGetNodes, 10000, Optional)                                                                \
  X(cuGraphInstantiateWithFlags, cuGraphInstantiateWithFlags, 11040, Optional)                                        \
  X(cuGraphExecDestroy, cuGraphExecDestroy, 10000, Optional)                                                          \
  X(cuGraphLaunch, cuGraphLaunch, 10000, Optional)                                                                    \
  X(cuGraphUpload, cuGraphUpload, 11010, Optional)                                                                    \
  X(cuUserObjectCreate, cuUserObjectCreate, 11030, Optional)                                                          \
  X(cuUserObjectRelease, cuUserObjectRelease, 11030, Optional)                                                        \
  X(cuGraphRetainUserObject, cuGraphRetainUserObject, 11030, Optional)                                                \
  /* libraries: globals and managed variables */                                                                      \
  X(cuLibraryGetGlobal, cuLibraryGetGlobal, 12000, Optional)                                                          \
  X(cuLibraryGetManaged, cuLibraryGetManaged, 12000, Optional)                                                        \
  X(cuLibraryGetModule, cuLibraryGetModule, 12000, Optional)                                                          \
  /* contexts: limits, L2 persistence, profiler */                                                                    \
  X(cuCtxSetLimit, cuCtxSetLimit, 3010, Optional)                                                                     \
  X(cuCtxGetLimit, cuCtxGetLimit, 3010, Optional)                                                                     \
  X(cuCtxResetPersistingL2Cache, cuCtxResetPersistingL2Cache, 11000, Optional)                                        \
  X(cuProfilerStart, cuProfilerStart, 4000, Optional)                                                                 \
  X(cuProfilerStop, cuProfilerStop, 4000, Optional)                                                                   \
  /* streams: attributes, attaching managed memory */                                                                 \
  X(cuStreamSetAttribute, cuStreamSetAttribute, 11000, Optional)                                                      \
  X(cuStreamGetAttribute, cuStreamGetAttribute, 11000, Optional)                                                      \
  X(cuStreamAttachMemAsync, cuStreamAttachMemAsync, 6000, Optional)                                                   \
  X(cuStreamGetCtx, cuStreamGetCtx, 9020, Optional)                                                                   \
  X(cuStreamGetFlags, cuStreamGetFlags, 5050, Optional)                                                               \
  X(cuStreamGetPriority, cuStreamGetPriority, 5050, Optional)                                                         \
  X(cuStreamGetId, cuStreamGetId, 12000, Optional)                                                                    \
  /* memory: pitched and 2D, managed-memory hints */                                                                  \
  X(cuMemAllocPitch, cuMemAllocPitch, 3020, Optional)                                                                 \
  X(cuMemcpy2D, cuMemcpy2D, 3020, Optional)                                                                           \
  X(cuMemcpy2DAsync, cuMemcpy2DAsync, 3020, Optional)                                                                 \
  X(cuMemsetD2D8, cuMemsetD2D8, 3020, Optional)                                                                       \
  X(cuMemsetD2D8Async, cuMemsetD2D8Async, 3020, Optional)                                                             \
  X(cuMemAdvise, cuMemAdvise, 12020, Optional)                                                                        \
  X(cuMemPrefetchAsync, cuMemPrefetchAsync, 12020, Optional)                                                          \
  X(cuMemHostGetFlags, cuMemHostGetFlags, 2030, Optional)                                                             \
  /* several GPUs: peer access, the link's attributes, peer copies */                                                 \
  X(cuCtxEnablePeerAccess, cuCtxEnablePeerAccess, 4000, Required)                                                     \
  X(cuCtxDisablePeerAccess, cuCtxDisablePeerAccess, 4000, Required)                                                   \
  X(cuDeviceGetP2PAttribute, cuDeviceGetP2PAttribute, 8000, Required)                                                 \
  X(cuMemcpyPeer, cuMemcpyPeer, 4000, Required)                                                                       \
  X(cuMemcpyPeerAsync, cuMemcpyPeerAsync, 4000, Required)
