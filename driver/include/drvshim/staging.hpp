// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file staging.hpp
/// Pageable copies at pinned speed, and pinned memory that is cheap to reuse:
/// PinnedPool (pinned_pool.hpp) and StagingEngine (staging_engine.hpp).
#include <drvshim/pinned_pool.hpp>
#include <drvshim/staging_engine.hpp>
