#pragma once
// The compile cache's trust in a directory: this user's (or root's, for a
// read-only cache), not writable by group or others, not a symbolic link,
// opened from its already checked parent.
#include <sys/stat.h>

#include <string>

#include "cache_files.hpp"

namespace drvshim::detail {

// The answer to "may this directory hold our entries?": empty when yes.
std::string directory_problem(const struct stat& st, const std::string& path, bool allow_root_owner);

// Opens (creating with 0700 when `create`) `name` under `parent` without
// following a symbolic link, and checks it. Returns the fd or sets `problem`
// (and `missing`, when given, to whether it simply does not exist).
Fd open_subdir(int parent, const std::string& name, const std::string& shown, bool create, bool allow_root_owner,
               std::string& problem, bool* missing = nullptr);

// Creates the missing parents of `path` (0700, as mkdir -p would). Only the
// cache's own directory and those below it are checked, like any per-user cache.
void create_parents(const std::string& path);

}  // namespace drvshim::detail
