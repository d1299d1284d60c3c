// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file export.hpp
/// The symbol-visibility macro. libdrvshim is built with hidden visibility;
/// only declarations marked DRVSHIM_API are exported from the shared library.
#if defined(__GNUC__) || defined(__clang__)
#define DRVSHIM_API __attribute__((visibility("default")))
#else
#define DRVSHIM_API
#endif
