// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file export.hpp
/// The symbol-visibility macro. libdrvshim is built with hidden visibility;
/// only declarations marked DRVSHIM_API are exported from the shared library.
/// Every public header includes it, so it also says, first, which C++ is needed.
#if __cplusplus < 202002L
#error "drvshim needs C++20 or later: compile with -std=c++20 (or a later standard)"
#endif
#if defined(__GNUC__) || defined(__clang__)
#define DRVSHIM_API __attribute__((visibility("default")))
#else
#define DRVSHIM_API
#endif
