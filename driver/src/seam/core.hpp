// SPDX-License-Identifier: Apache-2.0
#pragma once
// The driver seam, in three parts: the function table's types (api_table.hpp),
// the state of one loaded driver (driver_core.hpp), and the call path every
// driver call takes (call.hpp). Library code includes this header.
#include "seam/api_table.hpp"
#include "seam/call.hpp"
#include "seam/driver_core.hpp"
