// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file memory.hpp
/// Memory, each kind explicit (an umbrella over one header per concept):
///   device_span.hpp          DeviceSpan, the typed non-owning view of device memory
///   copy.hpp                 copies and fills, synchronous and on a stream; 2D copies
///   memory_flags.hpp         HostAllocFlags, HostRegisterFlags
///   device_buffer.hpp        DeviceBuffer (cuMemAlloc), pitched allocations
///   pinned_buffer.hpp        PinnedBuffer (cuMemHostAlloc), MappedBuffer (DEVICEMAP, zero-copy)
///   registered_range.hpp     RegisteredRange (cuMemHostRegister, capability checked first)
///   managed_buffer.hpp       ManagedBuffer (cuMemAllocManaged), advise, prefetch
///   async_device_buffer.hpp  AsyncDeviceBuffer (cuMemAllocAsync, stream-ordered)
///   pointer_info.hpp         inspect_pointer (cuPointerGetAttributes)
///
/// Every operation makes the owning context current for the call and restores
/// the caller's stack (the context policy, context.hpp). Sizes are checked
/// before the driver is called. A context must outlive the memory allocated in
/// it; views must not outlive their owner (checked in debug builds of
/// libdrvshim, see view_checks_enabled(); undefined otherwise).
#include <drvshim/async_device_buffer.hpp>
#include <drvshim/copy.hpp>
#include <drvshim/device_buffer.hpp>
#include <drvshim/device_span.hpp>
#include <drvshim/managed_buffer.hpp>
#include <drvshim/memory_flags.hpp>
#include <drvshim/pinned_buffer.hpp>
#include <drvshim/pointer_info.hpp>
#include <drvshim/registered_range.hpp>
