// SPDX-License-Identifier: Apache-2.0
#pragma once
// The compile cache's trust in a directory: this user's (or root's, for a
// read-only cache), not writable by group or others, not a symbolic link,
// opened from its already checked parent.
#include <sys/stat.h>

#include <string>

#include "cache/cache_files.hpp"

namespace drvshim::detail {

// The answer to "may this directory hold our entries?": empty when yes.
std::string directory_problem(const struct stat& st, const std::string& path, bool allow_root_owner);

// Opens (creating with 0700 when `create`) `name` under `parent` without
// following a symbolic link, and checks it. Returns the fd or sets `problem`
// (and `missing`, when given, to whether it simply does not exist).
Fd open_subdir(int parent, const std::string& name, const std::string& shown, bool create, bool allow_root_owner,
               std::string& problem, bool* missing = nullptr);

// The same checks without opening it (one fstatat): for a directory only
// passed through on the way to one below it, under a parent already checked,
// so nobody else can replace it in between. Empty when it may be used.
std::string check_subdir(int parent, const std::string& name, const std::string& shown, bool allow_root_owner,
                         bool* missing = nullptr);

// Opens `path` (components below `parent`, all but the last checked already)
// in one call with no symbolic link on the way, and checks it like
// open_subdir. No fd and no problem when it is missing or the kernel lacks
// openat2: the caller then goes step by step with open_subdir.
Fd open_checked_beneath(int parent, const char* path, const std::string& shown, bool allow_root_owner,
                        std::string& problem);

// Creates the missing parents of `path` (0700, as mkdir -p would). Only the
// cache's own directory and those below it are checked, like any per-user cache.
void create_parents(const std::string& path);

}  // namespace drvshim::detail
