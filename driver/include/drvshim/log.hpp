// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file log.hpp
/// drvshim's logging. The library owns an spdlog logger named "drvshim"; it
/// never touches spdlog's global default logger or registry, so hosts that use
/// spdlog themselves are unaffected (and spdlog does not appear in this header).
///
/// The level comes from the environment variable DRVSHIM_LOG (off, error,
/// warn, info, debug, trace; default warn) when the logger is first used, and
/// can be changed at any time with set_level(). At trace level every driver
/// call is logged with its arguments, result and duration.
#include <drvshim/export.hpp>

#include <functional>
#include <optional>
#include <string_view>

namespace drvshim::log {

/// Severity, from most to least verbose.
enum class Level { trace, debug, info, warn, error, off };

/// Parses a level name as DRVSHIM_LOG accepts it: off, error, warn (or
/// warning), info, debug, trace; case-insensitive, surrounding blanks ignored.
/// Returns std::nullopt for anything else.
DRVSHIM_API std::optional<Level> parse_level(std::string_view text) noexcept;

/// The lower-case name of a level ("warn").
DRVSHIM_API const char* level_name(Level level) noexcept;

/// Sets the level of the "drvshim" logger. Thread-safe.
DRVSHIM_API void set_level(Level level);

/// The current level of the "drvshim" logger.
DRVSHIM_API Level level() noexcept;

/// A destination for log lines: the level and the formatted message.
using Sink = std::function<void(Level, std::string_view)>;

/// Routes drvshim's log lines to `sink` instead of stderr; an empty function
/// restores stderr. The sink is called from whichever thread logs, one line at
/// a time, and must not call back into drvshim.
DRVSHIM_API void set_sink(Sink sink);

/// Whether a message at `level` would be written now (the level of set_level()
/// or DRVSHIM_LOG); always false for Level::off. Lets a caller skip formatting
/// a message nobody will see.
DRVSHIM_API bool enabled(Level level) noexcept;

/// Writes `message` at `level` through the "drvshim" logger: to the sink of
/// set_sink(), else to stderr, when the level is enabled (never at
/// Level::off). For code above libdrvshim that wants its messages beside
/// drvshim's (libdrvshim_cudart logs this way). Never throws: a sink that
/// throws loses the line, and spdlog reports the failure on stderr.
DRVSHIM_API void write(Level level, std::string_view message) noexcept;

}  // namespace drvshim::log
