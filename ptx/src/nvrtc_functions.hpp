#pragma once
// The one list of NVRTC functions drvshim calls (resolved with dlsym: NVRTC
// has no cuGetProcAddress). X(name, Required|Optional).
#define DRVSHIM_NVRTC_FUNCTIONS(X)   \
  X(nvrtcVersion, Required)          \
  X(nvrtcGetErrorString, Required)   \
  X(nvrtcGetNumSupportedArchs, Optional) \
  X(nvrtcGetSupportedArchs, Optional)
