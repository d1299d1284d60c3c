// SPDX-License-Identifier: Apache-2.0
#pragma once
/// @file compile_cache.hpp
/// A compile cache for NVRTC programs that cannot go stale: the key covers
/// everything that changes the output (source, name, in-memory headers, the
/// content of every file NVRTC can read or look up through #include,
/// __has_include and --pre-include, found by NVRTC's own rules, the effective
/// options, name expressions, NVRTC's identity, the target, and for SASS the
/// driver made from PTX the driver version and device), so a hit behaves
/// exactly like the compile it replaces: same image, log, options and lowered
/// names. Where the key cannot cover the inputs (a computed #include, options
/// that read files), or they changed while NVRTC compiled, the result is
/// returned and stored nowhere (CacheOutcome::uncached, with the reason).
/// Tiers: an in-process map, then a per-user directory on disk.
///
/// Disk layout (root = CacheOptions::directory):
///   <root>/v1/objects/ab/<hex>   entries, written once (temporary file, fsync, rename)
///   <root>/v1/locks/ab/<hex>     per-key advisory locks (one compile per key across processes)
///   <root>/v1/tmp/               temporary files on the same filesystem
/// An entry echoes its key and ends with a checksum of its contents; a corrupt,
/// truncated or foreign entry is removed and recompiled, never an error.
#include <drvshim/export.hpp>
#include <drvshim/nvrtc.hpp>

#include <chrono>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace drvshim {

class ContextRef;

namespace detail {
struct CacheCore;
}  // namespace detail

/// How the cache behaves. from_environment() reads the DRVSHIM_CACHE_* variables.
struct DRVSHIM_API CacheOptions {
  /// The root directory. Empty: DRVSHIM_CACHE_DIR, else $XDG_CACHE_HOME/drvshim,
  /// else $HOME/.cache/drvshim.
  std::string directory;
  /// false: no caching at all, every request compiles (DRVSHIM_CACHE_DISABLE=1).
  bool enabled = true;
  /// Read entries, never write or lock (DRVSHIM_CACHE_READONLY=1): for a cache
  /// shipped with an application or shared read-only by CI.
  bool read_only = false;
  /// The in-process tier (a hit costs a key computation and a map lookup).
  bool in_memory = true;
  /// Size cap of the disk tier (entries and temporary files); when a write
  /// takes it over, the least recently used entries are evicted down to 90 %
  /// of it, never the one just written. An entry larger than the cap is not
  /// written at all (DRVSHIM_CACHE_MAXSIZE, bytes).
  std::uint64_t max_bytes = std::uint64_t{1} << 30;
  /// How long a process waits for another process compiling the same key
  /// before compiling it itself (never a deadlock).
  std::chrono::milliseconds lock_timeout{60000};

  /// The defaults, overridden by DRVSHIM_CACHE_DIR, DRVSHIM_CACHE_DISABLE,
  /// DRVSHIM_CACHE_READONLY and DRVSHIM_CACHE_MAXSIZE.
  static CacheOptions from_environment();
};

/// Where a result came from.
enum class CacheOutcome {
  compiled,    ///< a miss: NVRTC compiled it (and the disk tier stored it when writable)
  memory_hit,  ///< the in-process tier
  disk_hit,    ///< an entry on disk, verified
  /// Compiled and stored nowhere: the cache is disabled or refused its
  /// directory, or the program's inputs cannot be keyed or changed while it
  /// was compiled (miss_reason starts "uncached: " and says which).
  uncached,
};
DRVSHIM_API const char* to_string(CacheOutcome outcome) noexcept;

/// A program to compile: what NVRTC receives.
struct KernelSource {
  std::string source{};
  std::string name = "program.cu";  ///< appears in diagnostics and __FILE__
  CompileOptions options{};
  std::vector<Header> headers{};                ///< in-memory headers
  std::vector<std::string> name_expressions{};  ///< e.g. "scale<float>"; their lowered names come back
};

/// A compile through the cache.
struct CachedCompile {
  CompileResult result;  ///< identical on a hit and on a compile
  CacheOutcome outcome = CacheOutcome::compiled;
  /// Why it was not a hit: "no entry", "corrupt entry (checksum mismatch)",
  /// "uncached: <why it cannot be cached>", ...; empty on a hit.
  std::string miss_reason;
  std::string key;  ///< the key, 64 hex digits
  /// The image is SASS the driver produced from PTX (compile_for on a device
  /// newer than NVRTC's newest architecture).
  bool linked = false;
  /// Time spent in this call, end to end.
  double wall_ms = 0.0;
};

/// Counters of one cache (all processes' work is not summed: this process only).
struct CacheStats {
  std::uint64_t memory_hits = 0;
  std::uint64_t disk_hits = 0;
  std::uint64_t misses = 0;
  std::uint64_t compiles = 0;  ///< NVRTC compiles this cache ran
  std::uint64_t links = 0;     ///< driver PTX -> SASS links this cache ran
  std::uint64_t writes = 0;
  std::uint64_t write_failures = 0;
  std::uint64_t corrupt_removed = 0;  ///< entries found corrupt, truncated or foreign and removed
  std::uint64_t evictions = 0;
  std::uint64_t lock_waits = 0;  ///< waited for another process compiling the same key
  std::uint64_t lock_timeouts = 0;
  std::uint64_t uncached = 0;            ///< compiles stored nowhere: inputs unknowable or changed meanwhile
  std::uint64_t oversized = 0;           ///< entries not written: larger than the whole cache's cap
  std::uint64_t housekeeping_scans = 0;  ///< full scans of the disk tier (a write updates a size ledger instead)
  std::uint64_t stale_removed = 0;       ///< temporary files of dead writers and unheld lock files removed
  std::map<std::string, std::uint64_t> miss_reasons;
};

/// The compile cache: a shared handle (copies share one cache). Thread-safe;
/// many threads (or processes) asking for one missing key cause one compile.
class DRVSHIM_API CompileCache {
 public:
  /// Opens (creating it 0700 when missing) the cache directory. It refuses, and
  /// the cache then compiles without storing (outcome `uncached`, a warning
  /// logged, disabled_reason() says why), a directory that is a symbolic link,
  /// owned by another user or writable by group or others. Never throws for
  /// the directory: the cache is an optimisation, a compile never fails because of it.
  explicit CompileCache(Nvrtc nvrtc, CacheOptions options = CacheOptions::from_environment());
  /// The same, with NVRTC loaded only when a compile is needed: mapping
  /// libnvrtc costs about 13 ms, more than a disk hit. The key names the
  /// library file (path, size, time) found as the dynamic linker would find
  /// it; when it cannot be found that way NVRTC is loaded at once, and this
  /// constructor throws NvrtcNotFoundError if that fails too. A load failure
  /// on a later miss throws NvrtcNotFoundError from that compile.
  explicit CompileCache(const NvrtcLoadOptions& load, CacheOptions options = CacheOptions::from_environment());

  /// Compiles `program` for options.arch (no device needed), or returns the
  /// cached result. Throws what Nvrtc::compile throws (a failed compile is
  /// never cached).
  CachedCompile compile(const KernelSource& program) const;

  /// Compiles for `context`'s device: options.arch is replaced by
  /// Nvrtc::target_for(device). For "sm_XY" that is a CUBIN; for "compute_XY"
  /// (a device newer than NVRTC) the PTX is linked to SASS by the driver
  /// (link_ptx) and that SASS is cached, under a key that adds the driver
  /// version and the device's compute capability. Throws what Nvrtc::compile
  /// and link_ptx throw.
  CachedCompile compile_for(const ContextRef& context, KernelSource program) const;

  /// Whether NVRTC has been loaded (always after a miss; never for hits alone
  /// with the NvrtcLoadOptions constructor).
  bool nvrtc_loaded() const;
  /// The root directory in use (empty when disabled).
  const std::string& directory() const noexcept;
  /// Whether entries are read from and written to disk.
  bool disk_enabled() const noexcept;
  bool read_only() const noexcept;
  /// Why the disk tier is off ("disabled by DRVSHIM_CACHE_DISABLE", "... is
  /// writable by others ..."); empty when it is on.
  const std::string& disabled_reason() const noexcept;
  CacheStats stats() const;
  /// Total bytes of the entries and temporary files on disk.
  std::uint64_t disk_bytes() const;
  /// Forgets the in-process tier (the disk tier stays).
  void clear_memory() const;
  /// Removes every entry on disk (and the in-process tier). Throws
  /// InvalidArgumentError in read-only mode.
  void clear() const;

 private:
  void open(CacheOptions options);
  std::shared_ptr<detail::CacheCore> core_;
};

}  // namespace drvshim
