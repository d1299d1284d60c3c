// SPDX-License-Identifier: Apache-2.0
// Device management: selection, properties and attributes, flags, limits,
// synchronisation and reset, the profiler switches.
#include <cuda_profiler_api.h>

#include <cstddef>
#include <cstdio>
#include <cstring>

#include "runtime.hpp"

using namespace drvshim;
using namespace drvshim::rt::impl;

namespace {

// An attribute as cudaGetDeviceProperties reads it: 0 where the driver has no value.
int attr(const Device& d, cudaDeviceAttr a) {
  const AttributeValue v = d.attribute_number(static_cast<int>(a));
  return v.has_value() ? v.value() : 0;
}

// Every field the driver can give, from its attributes (as cudart fills them).
cudaDeviceProp read_properties(const Device& d) {
  cudaDeviceProp p;
  std::memset(&p, 0, sizeof p);
  std::snprintf(p.name, sizeof p.name, "%s", d.name().c_str());
  try {
    const auto uuid = d.uuid();
    std::memcpy(p.uuid.bytes, uuid.data(), sizeof p.uuid.bytes);
  } catch (const DriverTooOldError&) {
    // Left zero: the driver predates cuDeviceGetUuid.
  }
  p.totalGlobalMem = d.total_memory();
  p.sharedMemPerBlock = static_cast<size_t>(attr(d, cudaDevAttrMaxSharedMemoryPerBlock));
  p.regsPerBlock = attr(d, cudaDevAttrMaxRegistersPerBlock);
  p.warpSize = attr(d, cudaDevAttrWarpSize);
  p.memPitch = static_cast<size_t>(attr(d, cudaDevAttrMaxPitch));
  p.maxThreadsPerBlock = attr(d, cudaDevAttrMaxThreadsPerBlock);
  p.maxThreadsDim[0] = attr(d, cudaDevAttrMaxBlockDimX);
  p.maxThreadsDim[1] = attr(d, cudaDevAttrMaxBlockDimY);
  p.maxThreadsDim[2] = attr(d, cudaDevAttrMaxBlockDimZ);
  p.maxGridSize[0] = attr(d, cudaDevAttrMaxGridDimX);
  p.maxGridSize[1] = attr(d, cudaDevAttrMaxGridDimY);
  p.maxGridSize[2] = attr(d, cudaDevAttrMaxGridDimZ);
  p.totalConstMem = static_cast<size_t>(attr(d, cudaDevAttrTotalConstantMemory));
  p.major = attr(d, cudaDevAttrComputeCapabilityMajor);
  p.minor = attr(d, cudaDevAttrComputeCapabilityMinor);
  p.textureAlignment = static_cast<size_t>(attr(d, cudaDevAttrTextureAlignment));
  p.texturePitchAlignment = static_cast<size_t>(attr(d, cudaDevAttrTexturePitchAlignment));
  p.multiProcessorCount = attr(d, cudaDevAttrMultiProcessorCount);
  p.integrated = attr(d, cudaDevAttrIntegrated);
  p.canMapHostMemory = attr(d, cudaDevAttrCanMapHostMemory);
  p.maxTexture1D = attr(d, cudaDevAttrMaxTexture1DWidth);
  p.maxTexture1DMipmap = attr(d, cudaDevAttrMaxTexture1DMipmappedWidth);
  p.maxTexture2D[0] = attr(d, cudaDevAttrMaxTexture2DWidth);
  p.maxTexture2D[1] = attr(d, cudaDevAttrMaxTexture2DHeight);
  p.maxTexture2DMipmap[0] = attr(d, cudaDevAttrMaxTexture2DMipmappedWidth);
  p.maxTexture2DMipmap[1] = attr(d, cudaDevAttrMaxTexture2DMipmappedHeight);
  p.maxTexture2DLinear[0] = attr(d, cudaDevAttrMaxTexture2DLinearWidth);
  p.maxTexture2DLinear[1] = attr(d, cudaDevAttrMaxTexture2DLinearHeight);
  p.maxTexture2DLinear[2] = attr(d, cudaDevAttrMaxTexture2DLinearPitch);
  p.maxTexture2DGather[0] = attr(d, cudaDevAttrMaxTexture2DGatherWidth);
  p.maxTexture2DGather[1] = attr(d, cudaDevAttrMaxTexture2DGatherHeight);
  p.maxTexture3D[0] = attr(d, cudaDevAttrMaxTexture3DWidth);
  p.maxTexture3D[1] = attr(d, cudaDevAttrMaxTexture3DHeight);
  p.maxTexture3D[2] = attr(d, cudaDevAttrMaxTexture3DDepth);
  p.maxTexture3DAlt[0] = attr(d, cudaDevAttrMaxTexture3DWidthAlt);
  p.maxTexture3DAlt[1] = attr(d, cudaDevAttrMaxTexture3DHeightAlt);
  p.maxTexture3DAlt[2] = attr(d, cudaDevAttrMaxTexture3DDepthAlt);
  p.maxTextureCubemap = attr(d, cudaDevAttrMaxTextureCubemapWidth);
  p.maxTexture1DLayered[0] = attr(d, cudaDevAttrMaxTexture1DLayeredWidth);
  p.maxTexture1DLayered[1] = attr(d, cudaDevAttrMaxTexture1DLayeredLayers);
  p.maxTexture2DLayered[0] = attr(d, cudaDevAttrMaxTexture2DLayeredWidth);
  p.maxTexture2DLayered[1] = attr(d, cudaDevAttrMaxTexture2DLayeredHeight);
  p.maxTexture2DLayered[2] = attr(d, cudaDevAttrMaxTexture2DLayeredLayers);
  p.maxTextureCubemapLayered[0] = attr(d, cudaDevAttrMaxTextureCubemapLayeredWidth);
  p.maxTextureCubemapLayered[1] = attr(d, cudaDevAttrMaxTextureCubemapLayeredLayers);
  p.maxSurface1D = attr(d, cudaDevAttrMaxSurface1DWidth);
  p.maxSurface2D[0] = attr(d, cudaDevAttrMaxSurface2DWidth);
  p.maxSurface2D[1] = attr(d, cudaDevAttrMaxSurface2DHeight);
  p.maxSurface3D[0] = attr(d, cudaDevAttrMaxSurface3DWidth);
  p.maxSurface3D[1] = attr(d, cudaDevAttrMaxSurface3DHeight);
  p.maxSurface3D[2] = attr(d, cudaDevAttrMaxSurface3DDepth);
  p.maxSurface1DLayered[0] = attr(d, cudaDevAttrMaxSurface1DLayeredWidth);
  p.maxSurface1DLayered[1] = attr(d, cudaDevAttrMaxSurface1DLayeredLayers);
  p.maxSurface2DLayered[0] = attr(d, cudaDevAttrMaxSurface2DLayeredWidth);
  p.maxSurface2DLayered[1] = attr(d, cudaDevAttrMaxSurface2DLayeredHeight);
  p.maxSurface2DLayered[2] = attr(d, cudaDevAttrMaxSurface2DLayeredLayers);
  p.maxSurfaceCubemap = attr(d, cudaDevAttrMaxSurfaceCubemapWidth);
  p.maxSurfaceCubemapLayered[0] = attr(d, cudaDevAttrMaxSurfaceCubemapLayeredWidth);
  p.maxSurfaceCubemapLayered[1] = attr(d, cudaDevAttrMaxSurfaceCubemapLayeredLayers);
  p.surfaceAlignment = static_cast<size_t>(attr(d, cudaDevAttrSurfaceAlignment));
  p.concurrentKernels = attr(d, cudaDevAttrConcurrentKernels);
  p.ECCEnabled = attr(d, cudaDevAttrEccEnabled);
  p.pciBusID = attr(d, cudaDevAttrPciBusId);
  p.pciDeviceID = attr(d, cudaDevAttrPciDeviceId);
  p.pciDomainID = attr(d, cudaDevAttrPciDomainId);
  p.tccDriver = attr(d, cudaDevAttrTccDriver);
  p.asyncEngineCount = attr(d, cudaDevAttrAsyncEngineCount);
  p.unifiedAddressing = attr(d, cudaDevAttrUnifiedAddressing);
  p.memoryBusWidth = attr(d, cudaDevAttrGlobalMemoryBusWidth);
  p.l2CacheSize = attr(d, cudaDevAttrL2CacheSize);
  p.persistingL2CacheMaxSize = attr(d, cudaDevAttrMaxPersistingL2CacheSize);
  p.maxThreadsPerMultiProcessor = attr(d, cudaDevAttrMaxThreadsPerMultiProcessor);
  p.streamPrioritiesSupported = attr(d, cudaDevAttrStreamPrioritiesSupported);
  p.globalL1CacheSupported = attr(d, cudaDevAttrGlobalL1CacheSupported);
  p.localL1CacheSupported = attr(d, cudaDevAttrLocalL1CacheSupported);
  p.sharedMemPerMultiprocessor = static_cast<size_t>(attr(d, cudaDevAttrMaxSharedMemoryPerMultiprocessor));
  p.regsPerMultiprocessor = attr(d, cudaDevAttrMaxRegistersPerMultiprocessor);
  p.managedMemory = attr(d, cudaDevAttrManagedMemory);
  p.isMultiGpuBoard = attr(d, cudaDevAttrIsMultiGpuBoard);
  p.multiGpuBoardGroupID = attr(d, cudaDevAttrMultiGpuBoardGroupID);
  p.hostNativeAtomicSupported = attr(d, cudaDevAttrHostNativeAtomicSupported);
  p.pageableMemoryAccess = attr(d, cudaDevAttrPageableMemoryAccess);
  p.concurrentManagedAccess = attr(d, cudaDevAttrConcurrentManagedAccess);
  p.computePreemptionSupported = attr(d, cudaDevAttrComputePreemptionSupported);
  p.canUseHostPointerForRegisteredMem = attr(d, cudaDevAttrCanUseHostPointerForRegisteredMem);
  p.cooperativeLaunch = attr(d, cudaDevAttrCooperativeLaunch);
  p.sharedMemPerBlockOptin = static_cast<size_t>(attr(d, cudaDevAttrMaxSharedMemoryPerBlockOptin));
  p.pageableMemoryAccessUsesHostPageTables = attr(d, cudaDevAttrPageableMemoryAccessUsesHostPageTables);
  p.directManagedMemAccessFromHost = attr(d, cudaDevAttrDirectManagedMemAccessFromHost);
  p.maxBlocksPerMultiProcessor = attr(d, cudaDevAttrMaxBlocksPerMultiprocessor);
  p.accessPolicyMaxWindowSize = attr(d, cudaDevAttrMaxAccessPolicyWindowSize);
  p.reservedSharedMemPerBlock = static_cast<size_t>(attr(d, cudaDevAttrReservedSharedMemoryPerBlock));
  p.hostRegisterSupported = attr(d, cudaDevAttrHostRegisterSupported);
  p.sparseCudaArraySupported = attr(d, cudaDevAttrSparseCudaArraySupported);
  p.hostRegisterReadOnlySupported = attr(d, cudaDevAttrHostRegisterReadOnlySupported);
  p.timelineSemaphoreInteropSupported = attr(d, cudaDevAttrTimelineSemaphoreInteropSupported);
  p.memoryPoolsSupported = attr(d, cudaDevAttrMemoryPoolsSupported);
  p.gpuDirectRDMASupported = attr(d, cudaDevAttrGPUDirectRDMASupported);
  p.gpuDirectRDMAFlushWritesOptions = static_cast<unsigned>(attr(d, cudaDevAttrGPUDirectRDMAFlushWritesOptions));
  p.gpuDirectRDMAWritesOrdering = attr(d, cudaDevAttrGPUDirectRDMAWritesOrdering);
  p.memoryPoolSupportedHandleTypes = static_cast<unsigned>(attr(d, cudaDevAttrMemoryPoolSupportedHandleTypes));
  p.deferredMappingCudaArraySupported = attr(d, cudaDevAttrDeferredMappingCudaArraySupported);
  p.ipcEventSupported = attr(d, cudaDevAttrIpcEventSupport);
  p.clusterLaunch = attr(d, cudaDevAttrClusterLaunch);
  p.unifiedFunctionPointers =
      attr(d, static_cast<cudaDeviceAttr>(129));  // CU_DEVICE_ATTRIBUTE_UNIFIED_FUNCTION_POINTERS
  p.deviceNumaConfig = attr(d, cudaDevAttrNumaConfig);
  p.deviceNumaId = attr(d, cudaDevAttrNumaId);
  p.mpsEnabled = attr(d, cudaDevAttrMpsEnabled);
  p.hostNumaId = attr(d, cudaDevAttrHostNumaId);
  p.gpuPciDeviceID = static_cast<unsigned>(attr(d, cudaDevAttrGpuPciDeviceId));
  p.gpuPciSubsystemID = static_cast<unsigned>(attr(d, cudaDevAttrGpuPciSubsystemId));
  p.hostNumaMultinodeIpcSupported = attr(d, cudaDevAttrHostNumaMultinodeIpcSupported);
  return p;
}

// Properties do not change while the process runs: read once per device.
struct PropertyCache {
  std::mutex mutex;
  std::map<int, cudaDeviceProp> by_device;
};
PropertyCache& property_cache() {
  static auto* c = new PropertyCache;
  return *c;
}

// cudart writes every field but the trailing reserved words, which keep what
// the caller's structure held (H100, cudart 13.0, 2026-12-07).
void copy_properties(cudaDeviceProp* out, const cudaDeviceProp& p) {
  std::memcpy(out, &p, offsetof(cudaDeviceProp, reserved));
}

// The bits cudaSetDeviceFlags accepts.
constexpr unsigned kDeviceFlags =
    cudaDeviceScheduleMask | cudaDeviceMapHost | cudaDeviceLmemResizeToMax | cudaDeviceSyncMemops;

}  // namespace

// ---- selection ------------------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaGetDeviceCount(int* count) {
  // In a child forked after the runtime initialised, cudart answers the
  // count it found (H100, cudart 13.0, 2026-12-07), where other calls fail.
  if (const int known = devices_known_before_fork(); known >= 0) {
    if (count == nullptr) return null_argument("cudaGetDeviceCount", "count");
    *count = known;
    return cudaSuccess;
  }
  if (const cudaError_t failed = initialise("cudaGetDeviceCount")) return failed;
  if (count == nullptr) return null_argument("cudaGetDeviceCount", "count");
  *count = 0;
  return guarded("cudaGetDeviceCount", [&] {
    *count = device_count("cudaGetDeviceCount");
    return *count == 0 ? fail(cudaErrorNoDevice, "cudaGetDeviceCount: no CUDA device") : cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaSetDevice(int device) {
  if (const cudaError_t failed = initialise("cudaSetDevice")) return failed;
  return guarded("cudaSetDevice", [&] {
    if (const cudaError_t e = check_device("cudaSetDevice", device); e != cudaSuccess) return e;
    thread().device = device;
    // Since CUDA 12 cudaSetDevice initialises the device's primary context at once.
    (void)make_current(device, "cudaSetDevice");
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaGetDevice(int* device) {
  if (const cudaError_t failed = initialise("cudaGetDevice")) return failed;
  if (device == nullptr) return null_argument("cudaGetDevice", "device");
  // A context the program made current itself names the device, as under cudart.
  return guarded("cudaGetDevice", [&] {
    // cudart's prologue (Prologue::driver) without a second question to the
    // driver: current_device() asks it for the current context.
    (void)driver("cudaGetDevice");
    *device = current_device();
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaInitDevice(int device, unsigned device_flags, unsigned flags) {
  if (const cudaError_t failed = initialise("cudaInitDevice")) return failed;
  return guarded("cudaInitDevice", [&] {
    if (const cudaError_t e = check_device("cudaInitDevice", device); e != cudaSuccess) return e;
    if (const cudaError_t e = enter("cudaInitDevice", Prologue::driver); e != cudaSuccess) return e;
    // Bits cudart does not know are ignored, not refused (H100, cudart 13.0,
    // tests/runtime_api/conformance, 2026-12-07).
    if ((flags & cudaInitDeviceFlagsAreValid) != 0) {
      // As cudaSetDeviceFlags: the flags change even on an active context; mapping host memory is implicit.
      initialised_driver("cudaInitDevice")
          .device(device)
          .change_primary_context_flags(
              static_cast<ContextFlags>(device_flags & kDeviceFlags & ~static_cast<unsigned>(cudaDeviceMapHost)));
    }
    (void)primary(device, "cudaInitDevice");
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaChooseDevice(int* device, const cudaDeviceProp* prop) {
  if (const cudaError_t failed = initialise("cudaChooseDevice")) return failed;
  if (device == nullptr || prop == nullptr) return null_argument("cudaChooseDevice", "device or prop");
  return guarded("cudaChooseDevice", [&] {
    const Driver& drv = driver("cudaChooseDevice");
    const int n = device_count("cudaChooseDevice");
    if (n == 0) return fail(cudaErrorNoDevice, "cudaChooseDevice: no CUDA device");
    // The closest compute capability at or above the one asked for; else device 0.
    int best = 0;
    int best_distance = -1;
    for (int i = 0; i < n; ++i) {
      const ComputeCapability cc = drv.device(i).compute_capability();
      const int distance = (cc.major * 10 + cc.minor) - (prop->major * 10 + prop->minor);
      if (distance >= 0 && (best_distance < 0 || distance < best_distance)) {
        best = i;
        best_distance = distance;
      }
    }
    *device = best;
    return cudaSuccess;
  });
}

// ---- properties and attributes ---------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaGetDeviceProperties(cudaDeviceProp* prop, int device) {
  if (const cudaError_t failed = initialise("cudaGetDeviceProperties")) return failed;
  if (prop == nullptr) return null_argument("cudaGetDeviceProperties", "prop");
  return guarded("cudaGetDeviceProperties", [&] {
    if (const cudaError_t e = check_device("cudaGetDeviceProperties", device); e != cudaSuccess) return e;
    auto& cache = property_cache();
    {
      std::lock_guard<std::mutex> lock(cache.mutex);
      if (auto it = cache.by_device.find(device); it != cache.by_device.end()) {
        copy_properties(prop, it->second);
        return cudaSuccess;
      }
    }
    const cudaDeviceProp p = read_properties(driver("cudaGetDeviceProperties").device(device));
    {
      std::lock_guard<std::mutex> lock(cache.mutex);
      cache.by_device[device] = p;
    }
    copy_properties(prop, p);
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaDeviceGetAttribute(int* value, cudaDeviceAttr attribute, int device) {
  if (const cudaError_t failed = initialise("cudaDeviceGetAttribute")) return failed;
  if (value == nullptr) return null_argument("cudaDeviceGetAttribute", "value");
  if (const cudaError_t e = enter("cudaDeviceGetAttribute", Prologue::driver); e != cudaSuccess) return e;
  return guarded("cudaDeviceGetAttribute", [&] {
    if (const cudaError_t e = check_device("cudaDeviceGetAttribute", device); e != cudaSuccess) return e;
    // The numbering matches the driver's (cudaDeviceAttr == CUdevice_attribute).
    const AttributeValue v =
        driver("cudaDeviceGetAttribute").device(device).attribute_number(static_cast<int>(attribute));
    if (v.has_value()) {
      *value = v.value();
      return cudaSuccess;
    }
    return fail(v.state() == AttributeValue::State::unsupported ? cudaErrorNotSupported : cudaErrorInvalidValue,
                fmt::format("cudaDeviceGetAttribute: attribute {} of device {} is {}", static_cast<int>(attribute),
                            device, v.to_string()));
  });
}

DRVSHIM_CUDART cudaError_t cudaDeviceGetPCIBusId(char* bus_id, int len, int device) {
  if (const cudaError_t failed = initialise("cudaDeviceGetPCIBusId")) return failed;
  if (const cudaError_t e = enter("cudaDeviceGetPCIBusId", Prologue::driver); e != cudaSuccess) return e;
  if (bus_id == nullptr || len <= 0) return null_argument("cudaDeviceGetPCIBusId", "pciBusId");
  return guarded("cudaDeviceGetPCIBusId", [&] {
    if (const cudaError_t e = check_device("cudaDeviceGetPCIBusId", device); e != cudaSuccess) return e;
    const std::string id = driver("cudaDeviceGetPCIBusId").device(device).pci_bus_id();
    std::snprintf(bus_id, static_cast<size_t>(len), "%s", id.c_str());
    // As cudart: a buffer too short gets what fits, and cudaErrorInvalidValue.
    if (id.size() + 1 > static_cast<size_t>(len)) {
      return fail(cudaErrorInvalidValue,
                  fmt::format("cudaDeviceGetPCIBusId: {} bytes do not hold \"{}\" and its terminator", len, id));
    }
    return cudaSuccess;
  });
}

namespace {
// "[domain]:[bus]:[device].[function]" (hex, domain optional) as numbers.
bool parse_bus_id(const char* text, unsigned (&out)[4]) {
  unsigned a = 0, b = 0, c = 0, d = 0;
  char tail = 0;
  if (std::sscanf(text, "%x:%x:%x.%x%c", &a, &b, &c, &d, &tail) == 4) {
    out[0] = a, out[1] = b, out[2] = c, out[3] = d;
    return true;
  }
  if (std::sscanf(text, "%x:%x.%x%c", &b, &c, &d, &tail) == 3) {
    out[0] = 0, out[1] = b, out[2] = c, out[3] = d;
    return true;
  }
  return false;
}
}  // namespace

DRVSHIM_CUDART cudaError_t cudaDeviceGetByPCIBusId(int* device, const char* bus_id) {
  if (const cudaError_t failed = initialise("cudaDeviceGetByPCIBusId")) return failed;
  if (const cudaError_t e = enter("cudaDeviceGetByPCIBusId", Prologue::driver); e != cudaSuccess) return e;
  if (device == nullptr || bus_id == nullptr) return null_argument("cudaDeviceGetByPCIBusId", "device or pciBusId");
  return guarded("cudaDeviceGetByPCIBusId", [&] {
    unsigned wanted[4];
    if (!parse_bus_id(bus_id, wanted)) {
      return fail(cudaErrorInvalidValue, fmt::format("cudaDeviceGetByPCIBusId: \"{}\" is not a PCI bus id "
                                                     "([domain]:bus:device.function, hexadecimal)",
                                                     bus_id));
    }
    const Driver& drv = driver("cudaDeviceGetByPCIBusId");
    for (int i = 0; i < device_count("cudaDeviceGetByPCIBusId"); ++i) {
      unsigned have[4];
      if (parse_bus_id(drv.device(i).pci_bus_id().c_str(), have) && std::equal(have, have + 4, wanted)) {
        *device = i;
        return cudaSuccess;
      }
    }
    return fail(cudaErrorInvalidDevice, fmt::format("cudaDeviceGetByPCIBusId: no device at \"{}\"", bus_id));
  });
}

DRVSHIM_CUDART cudaError_t cudaDriverGetVersion(int* version) {
  if (version == nullptr) return null_argument("cudaDriverGetVersion", "driverVersion");
  *version = 0;
  return guarded("cudaDriverGetVersion", [&] {
    try {
      *version = loaded_driver("cudaDriverGetVersion").version();
    } catch (const DriverTooOldError& e) {
      // A driver too old for drvshim still has a version, which cudart reports.
      *version = e.driver_version();
    } catch (const Error& e) {
      // No driver installed, or the toolkit's stub in its place: version 0, as
      // cudart's documentation and cudart say.
      if (e.kind() != ErrorKind::driver_not_found && e.kind() != ErrorKind::stub_library) throw;
      logf(log::Level::info, "runtime_compat: cudaDriverGetVersion: no CUDA driver ({}); answering 0", e.what());
    }
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaRuntimeGetVersion(int* version) {
  if (version == nullptr) return null_argument("cudaRuntimeGetVersion", "runtimeVersion");
  *version = CUDART_VERSION;  // the toolkit headers this library was built with
  return cudaSuccess;
}

// ---- flags and limits ----------------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaSetDeviceFlags(unsigned flags) {
  if (const cudaError_t failed = initialise("cudaSetDeviceFlags")) return failed;
  return guarded("cudaSetDeviceFlags", [&] {
    if ((flags & ~kDeviceFlags) != 0 || (flags & cudaDeviceScheduleMask) == 0x3 ||
        (flags & cudaDeviceScheduleMask) > cudaDeviceScheduleBlockingSync) {
      return fail(cudaErrorInvalidValue, fmt::format("cudaSetDeviceFlags: flags 0x{:x}: one scheduling policy (0-2, "
                                                     "4), cudaDeviceMapHost (8), cudaDeviceLmemResizeToMax (0x10), "
                                                     "cudaDeviceSyncMemops (0x80)",
                                                     flags));
    }
    // As cudart 13.0 on the H200 (tests/runtime_api/context_state.cu): the
    // primary context's flags change even when it is active, and the device is
    // then initialised, its primary context current on this thread. Mapping
    // host memory is implicit (cudaGetDeviceFlags adds it): the driver is not
    // asked for it, and cuDevicePrimaryCtxGetState shows no 0x8 under cudart.
    if (foreign_context_current("cudaSetDeviceFlags")) {
      // cudart 13.0's answer with a cuCtxCreate context current (H100, tests/runtime_api/conformance, 2026-12-07).
      return fail(cudaErrorIncompatibleDriverContext,
                  "cudaSetDeviceFlags: a context the program created (cuCtxCreate) is current; device flags are the "
                  "primary context's");
    }
    // A sticky error does not stop it: cudart 13.0 changes the flags of a
    // device that faulted and succeeds (H100, tests/runtime_api/conformance, 2026-12-07).
    const int device = current_device();
    initialised_driver("cudaSetDeviceFlags")
        .device(device)
        .change_primary_context_flags(static_cast<ContextFlags>(flags & ~static_cast<unsigned>(cudaDeviceMapHost)));
    (void)make_current(device, "cudaSetDeviceFlags");
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaGetDeviceFlags(unsigned* flags) {
  if (const cudaError_t failed = initialise("cudaGetDeviceFlags")) return failed;
  if (flags == nullptr) return null_argument("cudaGetDeviceFlags", "flags");
  return guarded("cudaGetDeviceFlags", [&] {
    // With a context the program created current, its flags, as cudart 13.0
    // answers (H100, tests/runtime_api/conformance, drvctx scenario, 2026-12-07).
    if (foreign_context_current("cudaGetDeviceFlags")) {
      *flags = static_cast<unsigned>(context("cudaGetDeviceFlags").flags());
      return cudaSuccess;
    }
    const PrimaryContextState s =
        initialised_driver("cudaGetDeviceFlags").device(current_device()).primary_context_state();
    // Mapping host memory is implicit for the runtime.
    *flags = static_cast<unsigned>(s.flags) | cudaDeviceMapHost;
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaDeviceSetLimit(cudaLimit limit, size_t value) {
  if (const cudaError_t failed = initialise("cudaDeviceSetLimit")) return failed;
  if (const cudaError_t e = enter("cudaDeviceSetLimit", Prologue::sticky); e != cudaSuccess) return e;
  return guarded("cudaDeviceSetLimit", [&] {
    context("cudaDeviceSetLimit").set_limit(static_cast<Limit>(limit), value);
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaDeviceGetLimit(size_t* value, cudaLimit limit) {
  if (const cudaError_t failed = initialise("cudaDeviceGetLimit")) return failed;
  if (const cudaError_t e = enter("cudaDeviceGetLimit", Prologue::sticky); e != cudaSuccess) return e;
  if (value == nullptr) return null_argument("cudaDeviceGetLimit", "pValue");
  return guarded("cudaDeviceGetLimit", [&] {
    *value = context("cudaDeviceGetLimit").limit(static_cast<Limit>(limit));
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaDeviceGetStreamPriorityRange(int* least, int* greatest) {
  if (const cudaError_t failed = initialise("cudaDeviceGetStreamPriorityRange")) return failed;
  if (const cudaError_t e = enter("cudaDeviceGetStreamPriorityRange", Prologue::sticky); e != cudaSuccess) return e;
  return guarded("cudaDeviceGetStreamPriorityRange", [&] {
    const StreamPriorityRange r = stream_priority_range(context("cudaDeviceGetStreamPriorityRange"));
    if (least != nullptr) *least = r.least;
    if (greatest != nullptr) *greatest = r.greatest;
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaDeviceSetCacheConfig(cudaFuncCache config) {
  if (const cudaError_t failed = initialise("cudaDeviceSetCacheConfig")) return failed;
  if (const cudaError_t e = enter("cudaDeviceSetCacheConfig", Prologue::sticky); e != cudaSuccess) return e;
  // A preference the driver may ignore: checked and accepted, as on the H200.
  if (static_cast<int>(config) < 0 || static_cast<int>(config) > 3) {
    return fail(cudaErrorInvalidValue, fmt::format("cudaDeviceSetCacheConfig: {}", static_cast<int>(config)));
  }
  return guarded("cudaDeviceSetCacheConfig", [&] {
    (void)context("cudaDeviceSetCacheConfig");
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaDeviceGetCacheConfig(cudaFuncCache* config) {
  if (const cudaError_t failed = initialise("cudaDeviceGetCacheConfig")) return failed;
  if (const cudaError_t e = enter("cudaDeviceGetCacheConfig", Prologue::sticky); e != cudaSuccess) return e;
  if (config == nullptr) return null_argument("cudaDeviceGetCacheConfig", "pCacheConfig");
  *config = cudaFuncCachePreferNone;
  return cudaSuccess;
}

// Deprecated: the bank size is fixed on every supported architecture; the
// calls are checked and accepted, as cudart 13 does.
DRVSHIM_CUDART cudaError_t cudaDeviceSetSharedMemConfig(cudaSharedMemConfig config) {
  if (const cudaError_t failed = initialise("cudaDeviceSetSharedMemConfig")) return failed;
  if (const cudaError_t e = enter("cudaDeviceSetSharedMemConfig", Prologue::sticky); e != cudaSuccess) return e;
  if (static_cast<int>(config) < 0 || static_cast<int>(config) > 2) {
    return fail(cudaErrorInvalidValue, fmt::format("cudaDeviceSetSharedMemConfig: {}", static_cast<int>(config)));
  }
  return guarded("cudaDeviceSetSharedMemConfig", [&] {
    (void)context("cudaDeviceSetSharedMemConfig");
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaDeviceGetSharedMemConfig(cudaSharedMemConfig* config) {
  if (const cudaError_t failed = initialise("cudaDeviceGetSharedMemConfig")) return failed;
  if (const cudaError_t e = enter("cudaDeviceGetSharedMemConfig", Prologue::sticky); e != cudaSuccess) return e;
  if (config == nullptr) return null_argument("cudaDeviceGetSharedMemConfig", "pConfig");
  *config = cudaSharedMemBankSizeFourByte;
  return cudaSuccess;
}

DRVSHIM_CUDART cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes) {
  if (const cudaError_t failed = initialise("cudaMemGetInfo")) return failed;
  if (const cudaError_t e = enter("cudaMemGetInfo", Prologue::context); e != cudaSuccess) return e;
  // As cudart: the answers are cleared, also when the call then fails.
  if (free_bytes != nullptr) *free_bytes = 0;
  if (total_bytes != nullptr) *total_bytes = 0;
  if (const cudaError_t e = enter("cudaMemGetInfo", Prologue::sticky); e != cudaSuccess) return e;
  return guarded("cudaMemGetInfo", [&] {
    const MemoryInfo info = context("cudaMemGetInfo").memory_info();
    if (free_bytes != nullptr) *free_bytes = info.free;
    if (total_bytes != nullptr) *total_bytes = info.total;
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaCtxResetPersistingL2Cache() {
  if (const cudaError_t failed = initialise("cudaCtxResetPersistingL2Cache")) return failed;
  return guarded("cudaCtxResetPersistingL2Cache", [&] {
    // Unlike the other calls it works on the thread's current context only:
    // with none current cudart 13.0 answers cudaErrorDeviceUninitialized and
    // makes none current (H100, tests/runtime_api/conformance, 2026-12-07).
    if (driver("cudaCtxResetPersistingL2Cache").current_context() == 0) {
      return fail(cudaErrorDeviceUninitialized,
                  "cudaCtxResetPersistingL2Cache: no context is current on this thread (cudaSetDevice makes one)");
    }
    context("cudaCtxResetPersistingL2Cache").reset_persisting_l2_cache();
    return cudaSuccess;
  });
}

// ---- synchronisation and reset ------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaDeviceSynchronize() {
  if (const cudaError_t failed = initialise("cudaDeviceSynchronize")) return failed;
  return guarded("cudaDeviceSynchronize", [] {
    context("cudaDeviceSynchronize").synchronize();  // blocks with no runtime lock held
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaDeviceReset() {
  if (const cudaError_t failed = initialise("cudaDeviceReset")) return failed;
  return guarded("cudaDeviceReset", [] {
    if (device_count("cudaDeviceReset") == 0) return cudaSuccess;
    // With a context the program made current itself, the primary context is
    // not the current device's state: cudart leaves it, and that context, alone.
    if (foreign_context_current("cudaDeviceReset")) return cudaSuccess;
    // Nor does it reset anything from a thread with no context current: a
    // device another thread works on keeps its primary context (H100,
    // cudart 13.0, tests/runtime_api/conformance, thread scenario, 2026-12-07).
    if (driver("cudaDeviceReset").current_context() == 0) {
      logf(log::Level::info, "runtime_compat: cudaDeviceReset on a thread with no current context resets nothing");
      // But a retain nobody used goes, as under the other policies (the primary context stays inactive).
      release_background_retain(thread().device);
      return cudaSuccess;
    }
    reset_device(current_device());
    return cudaSuccess;
  });
}

// ---- profiler --------------------------------------------------------------------------------------

DRVSHIM_CUDART cudaError_t cudaProfilerStart() {
  if (const cudaError_t failed = initialise("cudaProfilerStart")) return failed;
  return guarded("cudaProfilerStart", [] {
    context("cudaProfilerStart").profiler_start();
    return cudaSuccess;
  });
}

DRVSHIM_CUDART cudaError_t cudaProfilerStop() {
  if (const cudaError_t failed = initialise("cudaProfilerStop")) return failed;
  return guarded("cudaProfilerStop", [] {
    context("cudaProfilerStop").profiler_stop();
    return cudaSuccess;
  });
}
