// SPDX-License-Identifier: Apache-2.0
#pragma once
// drvshim-probe's measurements and live checks, each returning its JSON
// section: the checks on one device's primary context, the host<->device
// bandwidth table, a link's attributes, and the P2P matrices.
#include <drvshim/drvshim.hpp>

#include <utility>
#include <vector>

#include "p2p_measure.hpp"
#include "probe_json.hpp"

namespace drvshim_probe {

ordered_json live_checks(const drvshim::Driver& drv, const drvshim::Device& dev, const drvshim::ContextRef& ctx);
// H2D/D2H copies of pinned, pageable and registered memory (--bandwidth).
ordered_json bandwidth(const drvshim::ContextRef& ctx, bool progress);
ordered_json link_json(const drvshim::PeerLink& l);
// An n x n matrix of nulls.
ordered_json null_matrix(int n);
// The P2P bandwidth and latency matrices (row = source, column = destination)
// over the ordered pairs in `pairs` whose link can do peer access.
ordered_json p2p_bandwidth(const drvshim::Driver& drv, const std::vector<std::pair<int, int>>& pairs,
                           const P2PSettings& settings, bool progress);

}  // namespace drvshim_probe
