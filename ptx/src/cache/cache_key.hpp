// SPDX-License-Identifier: Apache-2.0
#pragma once
// The compile cache's key: SHA-256 over labelled fields (source, name,
// in-memory headers, every file NVRTC can read or look up for the program,
// found by NVRTC's own rules, the options, name expressions, NVRTC's identity,
// the link target), and what the walk over those files saw, so a compile can
// tell afterwards whether they changed under it.
#include <drvshim/compile_cache.hpp>

#include <sys/stat.h>

#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "cache/cache_files.hpp"
#include "cache/include_scanner.hpp"
#include "cache/sha256.hpp"

namespace drvshim::detail {

// What a header file on disk contributes, memoised by its stat identity
// (device, inode, size, modification and change time) so a warm lookup
// re-reads nothing that did not change. Shared and immutable: a lookup keeps
// its own reference, whatever other threads put in the memo meanwhile.
struct FileInfo {
  dev_t dev = 0;
  ino_t ino = 0;
  off_t size = 0;
  std::uint64_t mtime = 0;
  std::uint64_t ctime = 0;
  bool recent = false;  // changed_recently() when read: never reused, never trusted for storing
  std::string digest;
  IncludeScan scan;
  bool same_file(const struct stat& st) const noexcept {
    return dev == st.st_dev && ino == st.st_ino && size == st.st_size && mtime == mtime_ns(st) && ctime == ctime_ns(st);
  }
};

// What a path holds for the preprocessor.
struct Probe {
  enum class State { absent, file, unusable } state = State::absent;
  std::shared_ptr<const FileInfo> info;
  std::string problem;  // unusable: why
};

// A file the key's walk read, as it was then.
struct Witness {
  std::string path;
  std::shared_ptr<const FileInfo> info;  // its stat identity and digest
  bool operator==(const Witness& o) const noexcept {
    return path == o.path &&
           (info == o.info || (info->dev == o.info->dev && info->ino == o.info->ino && info->size == o.info->size &&
                               info->mtime == o.info->mtime && info->ctime == o.info->ctime));
  }
};

// What the key's walk over a program's inputs found besides the digest.
struct KeyResult {
  Sha256::Digest key{};
  // Every file read, in walk order: compared after a compile to tell whether
  // NVRTC may have read something else (kept as references, so a hit pays
  // no formatting for it).
  std::vector<Witness> witness;
  std::string recent;      // the first file changed too recently to trust; empty when none
  std::string unknowable;  // why no key can cover this program's inputs; empty when one does
};

// The header files read so far, by path: the digest memo.
class HeaderMemo {
 public:
  // What `path` holds, from the memo when its stat identity is unchanged.
  Probe probe(const std::string& path) const;

 private:
  mutable std::mutex mutex_;
  mutable std::map<std::string, std::shared_ptr<const FileInfo>> files_;
};

// The key of `program` compiled with `effective` options by the NVRTC `identity`
// names (`link_identity`: "none", or the driver and device SASS is linked for).
KeyResult key_of(const HeaderMemo& memo, std::string_view identity, const KernelSource& program,
                 const std::vector<std::string>& effective, const std::string& link_identity);

// Empty when the inputs `before` described are still there, unchanged; else what changed.
std::string inputs_changed(const HeaderMemo& memo, std::string_view identity, const KeyResult& before,
                           const KernelSource& program, const std::vector<std::string>& effective,
                           const std::string& link_identity);

}  // namespace drvshim::detail
