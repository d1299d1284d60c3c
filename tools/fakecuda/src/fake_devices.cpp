// SPDX-License-Identifier: Apache-2.0
// Initialisation, the driver version and the device queries, answered from the profile.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <thread>

#include "env.hpp"
#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

CUresult fake_cuInit(unsigned flags) {
  FAKE_ENTER_AS("cuInit", false);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  // DRVSHIM_FAKE_INIT_DELAY_MS: a slow first initialisation, as a real driver's, so
  // callers on several threads overlap (drvshim-trace's init-race test).
  if (const unsigned delay = env_number("DRVSHIM_FAKE_INIT_DELAY_MS", 0, 600000); delay != 0 && !e.initialized) {
    lock.unlock();
    std::this_thread::sleep_for(std::chrono::milliseconds(delay));
    lock.lock();
  }
  if (e.no_device) return CUDA_ERROR_NO_DEVICE;
  e.initialized = true;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult fake_cuDriverGetVersion_impl(int* version) {
  FAKE_ENTER_AS("cuDriverGetVersion", false);
  if (version == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *version = e.driver_version;
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetCount(int* count) {
  FAKE_ENTER("cuDeviceGetCount");
  if (count == nullptr) return CUDA_ERROR_INVALID_VALUE;
  *count = static_cast<int>(e.devices.size());
  return CUDA_SUCCESS;
}

namespace {

CUresult fake_cuDeviceGet(CUdevice* dev, int ordinal) {
  FAKE_ENTER("cuDeviceGet");
  if (dev == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, ordinal)) return CUDA_ERROR_INVALID_DEVICE;
  *dev = ordinal;
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetName(char* name, int len, CUdevice dev) {
  FAKE_ENTER("cuDeviceGetName");
  if (name == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<size_t>(len), "%s", e.devices[static_cast<size_t>(dev)].name.c_str());
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetUuid(CUuuid* uuid, CUdevice dev) {
  FAKE_ENTER("cuDeviceGetUuid");
  if (uuid == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::memcpy(uuid->bytes, e.devices[static_cast<size_t>(dev)].uuid, 16);
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceTotalMem(size_t* bytes, CUdevice dev) {
  FAKE_ENTER("cuDeviceTotalMem");
  if (bytes == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = e.devices[static_cast<size_t>(dev)].total_mem;
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetAttribute(int* value, CUdevice_attribute attribute, CUdevice dev) {
  FAKE_ENTER("cuDeviceGetAttribute");
  if (value == nullptr) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  const FakeDevice& d = e.devices[static_cast<size_t>(dev)];
  if (auto it = d.attribute_errors.find(attribute); it != d.attribute_errors.end()) {
    return static_cast<CUresult>(it->second);
  }
  auto it = d.attributes.find(attribute);
  if (it == d.attributes.end()) return CUDA_ERROR_INVALID_VALUE;
  *value = it->second;
  return CUDA_SUCCESS;
}

CUresult fake_cuDeviceGetPCIBusId(char* bus, int len, CUdevice dev) {
  FAKE_ENTER("cuDeviceGetPCIBusId");
  if (bus == nullptr || len <= 0) return CUDA_ERROR_INVALID_VALUE;
  if (!valid_device(e, dev)) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(bus, static_cast<size_t>(len), "%s", e.devices[static_cast<size_t>(dev)].pci_bus_id.c_str());
  return CUDA_SUCCESS;
}

}  // namespace

std::vector<ProcEntry> device_procs() {
  return {
      {"cuInit", 2000, erase_fn(&fake_cuInit)},
      {"cuDriverGetVersion", 2020, erase_fn(&fake_cuDriverGetVersion_impl)},
      {"cuDeviceGet", 2000, erase_fn(&fake_cuDeviceGet)},
      {"cuDeviceGetCount", 2000, erase_fn(&fake_cuDeviceGetCount)},
      {"cuDeviceGetName", 2000, erase_fn(&fake_cuDeviceGetName)},
      {"cuDeviceGetUuid", 11040, erase_fn(&fake_cuDeviceGetUuid)},
      {"cuDeviceTotalMem", 3020, erase_fn(&fake_cuDeviceTotalMem)},
      {"cuDeviceGetAttribute", 2000, erase_fn(&fake_cuDeviceGetAttribute)},
      {"cuDeviceGetPCIBusId", 4010, erase_fn(&fake_cuDeviceGetPCIBusId)},
  };
}

}  // namespace drvshim::fake
