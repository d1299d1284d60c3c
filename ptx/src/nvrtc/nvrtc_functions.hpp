// SPDX-License-Identifier: Apache-2.0
#pragma once
// The one list of NVRTC functions drvshim calls (resolved with dlsym: NVRTC
// has no cuGetProcAddress). X(name, Required|Optional).
#define DRVSHIM_NVRTC_FUNCTIONS(X)       \
  X(nvrtcVersion, Required)              \
  X(nvrtcGetErrorString, Required)       \
  X(nvrtcGetNumSupportedArchs, Optional) \
  X(nvrtcGetSupportedArchs, Optional)    \
  X(nvrtcCreateProgram, Required)        \
  X(nvrtcDestroyProgram, Required)       \
  X(nvrtcCompileProgram, Required)       \
  X(nvrtcGetProgramLogSize, Required)    \
  X(nvrtcGetProgramLog, Required)        \
  X(nvrtcGetPTXSize, Required)           \
  X(nvrtcGetPTX, Required)               \
  X(nvrtcGetCUBINSize, Optional)         \
  X(nvrtcGetCUBIN, Optional)             \
  X(nvrtcAddNameExpression, Required)    \
  X(nvrtcGetLoweredName, Required)
