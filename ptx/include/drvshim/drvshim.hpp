// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file drvshim.hpp
/// Umbrella header: the whole public API of libdrvshim.
#include <drvshim/background.hpp>
#include <drvshim/compile_cache.hpp>
#include <drvshim/compiled_module.hpp>
#include <drvshim/context.hpp>
#include <drvshim/device.hpp>
#include <drvshim/driver.hpp>
#include <drvshim/error.hpp>
#include <drvshim/event.hpp>
#include <drvshim/export.hpp>
#include <drvshim/graph.hpp>
#include <drvshim/log.hpp>
#include <drvshim/memory.hpp>
#include <drvshim/module.hpp>
#include <drvshim/nvrtc.hpp>
#include <drvshim/nvrtc_warmup.hpp>
#include <drvshim/peer.hpp>
#include <drvshim/staging.hpp>
#include <drvshim/stream.hpp>
#include <drvshim/trace.hpp>
#include <drvshim/version.hpp>
