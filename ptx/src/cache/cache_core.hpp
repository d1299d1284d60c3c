// SPDX-License-Identifier: Apache-2.0
#pragma once
// The state behind a CompileCache handle, shared by the files that implement
// it: toolchain_memo.cpp (NVRTC and what surrounds it), entry_store.cpp
// (entries on disk), cache_housekeeping.cpp (size, eviction, leftovers),
// key_lock.cpp (one compile per key across processes) and compile_cache.cpp
// (the tiers and the public API).
#include <drvshim/compile_cache.hpp>

#include <cstdint>
#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "cache/cache_entry.hpp"
#include "cache/cache_files.hpp"
#include "cache/cache_key.hpp"
#include "cache/sha256.hpp"

namespace drvshim::detail {

struct CacheCore {
  // NVRTC is loaded on the first miss only: mapping it costs more than a disk hit.
  NvrtcLoadOptions load_options;
  mutable std::mutex nvrtc_mutex;
  mutable std::optional<Nvrtc> nvrtc;
  // Why the NVRTC loaded is not the one the keys name (empty when it is): set once it is loaded.
  mutable std::string mismatch;
  std::string nvrtc_path;                                     // the library the identity describes, as found
  std::string nvrtc_print;                                    // its fingerprint (name, size, time)
  std::string cuda_include;                                   // the toolkit include directory beside it
  std::vector<std::pair<std::string, std::string>> builtins;  // NVRTC's builtins libraries: path, fingerprint
  mutable std::vector<int> archs;                             // NVRTC's targets, from the toolchain memo or NVRTC
  CacheOptions options;
  std::string directory;
  std::string disabled_reason;
  bool disk = false;
  Fd root, objects, toolchain;
  // Needed only to write or to wait for another process: opened at the first miss.
  mutable std::mutex dirs_mutex;
  mutable Fd v1, locks, tmp;
  mutable bool dirs_tried = false;
  std::string identity;  // NVRTC's identity, hashed into every key

  mutable std::mutex mutex;
  mutable CacheStats stats;
  mutable std::map<std::string, std::shared_ptr<const Stored>> memory;
  struct Produced {
    std::shared_ptr<const Stored> stored;
    bool kept = false;  // stored in the cache (its inputs did not change while it was compiled)
  };
  mutable std::map<std::string, std::shared_future<Produced>> inflight;
  mutable std::set<std::string> warned;  // directories already warned about
  HeaderMemo headers;                    // header digests, by path

  // The loaded NVRTC (loading it now if needed). Throws NvrtcNotFoundError.
  const Nvrtc& compiler() const;
  // Why this process must not use the cache: the NVRTC it loaded is not the one the keys name.
  std::string toolchain_mismatch() const {
    std::lock_guard<std::mutex> lock(nvrtc_mutex);
    return mismatch;
  }
  const std::vector<int>& targets() const;
  // Learns NVRTC's builtins, include directory and targets (from the toolchain
  // memo when it matches the files, else from the files) and sets the identity.
  void learn_toolchain();
  void write_toolchain_memo() const;
  // Which file NVRTC is and which directory holds it (device and inode of each, whatever
  // path reached them): two toolkits whose libnvrtc look alike have their own memo.
  std::string nvrtc_place;
  // The memo's first line: the NVRTC it describes, by fingerprint and place.
  std::string memo_identity() const { return nvrtc_print + "|" + nvrtc_place; }
  // The memo's file name: the hash of its first line.
  std::string memo_name() const {
    Sha256 h;
    h.update(memo_identity());
    return Sha256::hex(h.finish()).substr(0, 32);
  }
  struct Memo {
    std::string cuda_include;
    std::vector<std::string> builtins_names;  // libnvrtc-builtins.so.<major>.<minor>: looked for, not trusted
    std::vector<int> archs;
  };
  // The memo for this NVRTC, if there is a readable one whose builtins still match their files.
  std::optional<Memo> read_toolchain_memo() const;
  // The directories opened at the first miss (no fd when they cannot be opened).
  const Fd& locks_dir() const { return lazy_dirs(), locks; }
  const Fd& tmp_dir() const { return lazy_dirs(), tmp; }
  void lazy_dirs() const;
  // v1/, opened at the first need (a hit passes through it without opening it).
  const Fd& v1_dir() const {
    std::lock_guard<std::mutex> lock(dirs_mutex);
    return v1_locked();
  }
  const Fd& v1_locked() const;  // the same, dirs_mutex held
  // Logs a warning about a refused directory, once per directory and cache.
  void warn_once(const std::string& path, const std::string& text) const;

  void count_miss(const std::string& reason, bool uncached = false) const {
    std::lock_guard<std::mutex> lock(mutex);
    ++stats.misses;
    ++stats.miss_reasons[reason];
    if (uncached) ++stats.uncached;
  }
  template <class F>
  void bump(F f) const {
    std::lock_guard<std::mutex> lock(mutex);
    f(stats);
  }

  KeyResult key_of(const KernelSource& program, const std::vector<std::string>& effective,
                   const std::string& link_identity) const {
    return detail::key_of(headers, identity, program, effective, link_identity);
  }
  // Empty when the inputs `before` described are still there, unchanged; else what changed.
  std::string inputs_changed(const KeyResult& before, const KernelSource& program,
                             const std::vector<std::string>& effective, const std::string& link_identity) const {
    return detail::inputs_changed(headers, identity, before, program, effective, link_identity);
  }

  // The fan-out directory of `hex` under `parent` (shown as `shown`), checked
  // like the root; a refused one is warned about (`missing`: it does not exist).
  Fd fanout(int parent, const std::string& shown, const std::string& hex, bool create, std::string& problem,
            bool& missing) const;
  std::shared_ptr<const Stored> read_entry(const std::string& hex, const Sha256::Digest& key,
                                           std::string& reason) const;
  bool write_entry(const std::string& hex, const Sha256::Digest& key, const Stored& s) const;
  // Bookkeeping after a write: the size ledger, and now and then a full scan.
  void after_write(const std::string& hex, std::uint64_t size) const;
  void housekeeping(const std::string& keep_hex) const;
  std::uint64_t disk_bytes() const;
};

}  // namespace drvshim::detail
