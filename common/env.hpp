// SPDX-License-Identifier: Apache-2.0
#pragma once
// Every environment variable drvshim reads, read in one place with one set of
// rules: the table (env_table.hpp) and value() (env_table.cpp), which every
// component links; tools/dev/check_env.py fails the tests on any other read.
// A value that is not understood is never silently reinterpreted: it gets a
// warning naming the variable, the value and what is accepted, and the
// documented default applies. Variables that choose a library to load or a
// place to write are read with secure_getenv (ignored in set-uid programs).
#include <cstdint>
#include <initializer_list>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "env_table.hpp"

namespace drvshim::detail::env {

// The value of `name` (nullptr when unset or empty), read with secure_getenv
// where the table says so. Allocates nothing and takes no lock, so it may be
// called anywhere getenv may, between fork and exec too.
const char* value(Name name) noexcept;

// A switch read without allocating (for drvshim-trace's parts inside the
// traced program and the fake driver): 1, true, yes, on / 0, false, no, off in
// any case; unset: `fallback`; anything else: a warning on stderr naming the
// variable, the value and what is accepted, and `fallback`.
bool switch_value(Name name, bool fallback) noexcept;

// Calls `visit` with each "NAME=value" entry of the environment whose name
// starts with `prefix` (for variables read by pattern, such as NVRTC's NV*).
void for_each_with_prefix(std::string_view prefix, void (*visit)(std::string_view entry, void* user),
                          void* user) noexcept;

// The value as a string, or nullopt when unset or empty.
std::optional<std::string> raw(Name name);

// A switch: 1, true, yes, on / 0, false, no, off, in any case. Unset: `fallback`.
bool flag(Name name, bool fallback);

// One of `choices` (exact spelling, any case); returns its index. Unset: `fallback`.
std::size_t choice(Name name, std::initializer_list<const char*> choices, std::size_t fallback);

// A byte count: digits, optionally followed by K, M, G or T (powers of 1024,
// an optional "iB"/"B"). Unset: nullopt; not understood: warning and nullopt.
std::optional<std::uint64_t> bytes(Name name);

// An absolute path. Unset: nullopt; relative: warning and nullopt.
std::optional<std::string> absolute_path(Name name);

// `s` in lower case.
std::string lower(std::string_view s);

// The parsers on their own (no warning; nullopt when not understood), for tests.
std::optional<bool> parse_flag(std::string_view text) noexcept;
std::optional<std::uint64_t> parse_bytes(std::string_view text) noexcept;

// Warns, once per process, about DRVSHIM_* variables that drvshim does not
// know (a typo such as DRVSHIM_CACHE_DISABLED), naming the closest known one.
void warn_about_unknown_once() noexcept;

// Writes a warning about `name`'s value (through the log, level warn).
void complain(const char* name, std::string_view value, std::string_view why);

}  // namespace drvshim::detail::env
