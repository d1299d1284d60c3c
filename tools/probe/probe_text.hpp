// SPDX-License-Identifier: Apache-2.0
#pragma once
// drvshim-probe's text output, rendered from the JSON report (so both always agree).
#include "probe_json.hpp"

namespace drvshim_probe {

// Prints the report `j` as text on stdout.
void print_text(const ordered_json& j);

}  // namespace drvshim_probe
