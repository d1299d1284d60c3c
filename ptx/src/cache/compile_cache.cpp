// SPDX-License-Identifier: Apache-2.0
// The compile cache's tiers and public API: the key, the in-process map (one
// compile per key across threads), the disk tier (one per key across
// processes), and storing only what was verifiably compiled from the inputs
// the key describes. The parts: cache_key.cpp, entry_store.cpp,
// cache_housekeeping.cpp, key_lock.cpp, toolchain_memo.cpp, directory_trust.cpp.
#include <drvshim/compile_cache.hpp>
#include <drvshim/context.hpp>
#include <drvshim/module.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <functional>
#include <future>
#include <mutex>

#include "cache/cache_core.hpp"
#include "cache/cache_environment.hpp"
#include "cache/cache_log.hpp"
#include "cache/directory_trust.hpp"
#include "cache/key_lock.hpp"
#include "nvrtc/nvrtc_internal.hpp"

namespace drvshim {

const char* to_string(CacheOutcome outcome) noexcept {
  switch (outcome) {
    case CacheOutcome::compiled: return "compiled";
    case CacheOutcome::memory_hit: return "memory hit";
    case CacheOutcome::disk_hit: return "disk hit";
    case CacheOutcome::uncached: return "uncached";
  }
  return "unknown";
}

CompileCache::CompileCache(Nvrtc nvrtc, CacheOptions options) : core_(std::make_shared<detail::CacheCore>()) {
  core_->nvrtc_path = nvrtc.loaded_path();
  core_->cuda_include = nvrtc.cuda_include_dir();
  core_->archs = nvrtc.supported_architectures();
  core_->nvrtc.emplace(std::move(nvrtc));
  open(std::move(options));
}

CompileCache::CompileCache(const NvrtcLoadOptions& load, CacheOptions options)
    : core_(std::make_shared<detail::CacheCore>()) {
  core_->load_options = load;
  core_->nvrtc_path = detail::locate_nvrtc(load);
  if (core_->nvrtc_path.empty()) {
    // Not findable without the dynamic linker: load it now, so the key names the real library.
    const auto& n = core_->compiler();
    core_->nvrtc_path = n.loaded_path();
    core_->cuda_include = n.cuda_include_dir();
  }
  open(std::move(options));
}

bool CompileCache::nvrtc_loaded() const {
  std::lock_guard<std::mutex> lock(core_->nvrtc_mutex);
  return core_->nvrtc.has_value();
}

void CompileCache::open(CacheOptions options) {
  auto& c = *core_;
  c.options = std::move(options);
  if (!c.options.enabled) {
    c.disabled_reason = "disabled (CacheOptions::enabled is false or DRVSHIM_CACHE_DISABLE is set)";
  } else {
    std::string dir = c.options.directory.empty() ? detail::default_directory() : c.options.directory;
    if (dir.empty() || dir[0] != '/') {
      c.disabled_reason = dir.empty() ? std::string("no cache directory: set DRVSHIM_CACHE_DIR or HOME")
                                      : fmt::format("cache directory \"{}\" is not an absolute path", dir);
    } else {
      while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
      const auto slash = dir.rfind('/');
      const std::string parent = slash == 0 ? std::string("/") : dir.substr(0, slash);
      detail::Fd parent_fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      // Parents are created only when missing: an existing cache opens with no extra system call.
      if (!parent_fd && errno == ENOENT && !c.options.read_only) {
        detail::create_parents(dir);
        parent_fd = detail::Fd(::open(parent.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC));
      }
      std::string problem =
          parent_fd ? std::string() : fmt::format("cannot open {}: {}", parent, detail::errno_text(errno));
      const bool create = !c.options.read_only;
      if (problem.empty()) {
        c.root = detail::open_subdir(parent_fd.fd, dir.substr(slash + 1), dir, create, c.options.read_only, problem);
      }
      // Every directory below the root gets the root's checks (this user's, not
      // writable by group or others, not a link). An existing cache: v1/ checked
      // where it stands (the checked root lets nobody else replace it), then
      // objects/ and toolchain/ each opened in one call, no link on the way, and checked.
      constexpr const char* kToolchain = "v1/toolchain";
      std::string refused;  // toolchain/ is optional: without it compile_for() loads NVRTC to learn its targets
      bool toolchain_missing = false;
      if (problem.empty()) {
        bool v1_missing = false;
        problem = detail::check_subdir(c.root.fd, "v1", dir + "/v1", c.options.read_only, &v1_missing);
        if (v1_missing) problem.clear();
        if (problem.empty() && !v1_missing) {
          c.objects =
              detail::open_checked_beneath(c.root.fd, "v1/objects", dir + "/v1/objects", c.options.read_only, problem);
        }
        if (problem.empty() && c.objects) {
          c.toolchain =
              detail::open_checked_beneath(c.root.fd, kToolchain, dir + "/" + kToolchain, c.options.read_only, refused);
        }
      }
      // Missing (to be created) or a kernel without openat2: step by step, each opened from its checked parent.
      if (problem.empty() && !c.objects) {
        c.v1 = detail::open_subdir(c.root.fd, "v1", dir + "/v1", create, c.options.read_only, problem);
        if (problem.empty()) {
          c.objects =
              detail::open_subdir(c.v1.fd, "objects", dir + "/v1/objects", create, c.options.read_only, problem);
        }
      }
      if (problem.empty() && !c.toolchain && refused.empty()) {
        c.disk = true;  // for v1_dir()
        c.directory = dir;
        if (const detail::Fd& v1 = c.v1_dir()) {
          c.toolchain = detail::open_subdir(v1.fd, "toolchain", dir + "/" + kToolchain, create, c.options.read_only,
                                            refused, &toolchain_missing);
        }
      }
      if (!refused.empty() && !toolchain_missing) {
        detail::cache_log(log::Level::warn, "compile cache: {}; the toolchain memo is not used", refused);
      }
      if (problem.empty()) {
        c.directory = dir;
        c.disk = true;
      } else {
        c.disabled_reason = "refused: " + problem;
        detail::cache_log(log::Level::warn, "compile cache {}: {}; compiling without a disk cache", dir, problem);
      }
    }
  }
  c.learn_toolchain();
  detail::cache_log(log::Level::debug, "compile cache: {}",
                    c.disk ? "at " + c.directory + (c.options.read_only ? " (read-only)" : "") : c.disabled_reason);
}

namespace {

// What a miss needs to verify its compile: the inputs the key was built from.
struct KeyedProgram {
  const KernelSource& program;
  const std::vector<std::string>& effective;
  const std::string& link_identity;
  const detail::KeyResult& key;
};

// The work of one miss for one key: the disk tier (with the cross-process
// lock) and, failing that, `produce`. The result is stored only when the
// inputs the key describes did not change while it was produced. Returns it
// and sets the outcome and reason.
detail::CacheCore::Produced fetch_or_produce(const detail::CacheCore& c, const std::string& hex, const KeyedProgram& k,
                                             const std::function<detail::Stored()>& produce, CacheOutcome& outcome,
                                             std::string& reason, bool disk_read) {
  if (c.disk && disk_read) {
    // Looked at already (and `reason` says why it missed).
  } else if (c.disk) {
    if (auto hit = c.read_entry(hex, k.key.key, reason)) {
      outcome = CacheOutcome::disk_hit;
      return {hit, true};
    }
  } else {
    reason = c.options.enabled ? c.disabled_reason : "disabled";
  }
  detail::KeyLock lock;
  if (c.disk && !c.options.read_only) {
    if (auto hit = detail::lock_key(c, hex, k.key.key, lock)) {
      outcome = CacheOutcome::disk_hit;
      reason.clear();
      return {hit, true};
    }
  }
  auto stored = std::make_shared<detail::Stored>(produce());
  if (std::string mismatch = c.toolchain_mismatch(); !mismatch.empty()) {
    outcome = CacheOutcome::uncached;
    reason = "uncached: " + mismatch;
    return {stored, false};
  }
  // NVRTC read the headers while it compiled: if any of them changed since the
  // key was computed (or too recently to tell), the image may be another
  // version's, so it is returned but stored nowhere.
  if (std::string changed = c.inputs_changed(k.key, k.program, k.effective, k.link_identity); !changed.empty()) {
    outcome = CacheOutcome::uncached;
    reason = "uncached: " + changed;
    return {stored, false};
  }
  outcome = c.disk ? CacheOutcome::compiled : CacheOutcome::uncached;
  if (c.disk && !c.options.read_only && c.write_entry(hex, k.key.key, *stored)) lock.remove();
  return {stored, true};
}

CachedCompile run(const detail::CacheCore& c, const KernelSource& program, const std::string& link_identity,
                  const std::function<detail::Stored()>& produce) {
  const auto t0 = std::chrono::steady_clock::now();
  CachedCompile out;
  auto finish = [&](const detail::Stored& s) {
    out.result = s.result;
    out.linked = s.linked;
    out.wall_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    detail::cache_log(log::Level::debug, "compile cache: {} {} ({}){}", to_string(out.outcome), program.name,
                      out.key.substr(0, 16),
                      out.miss_reason.empty() ? std::string() : ": miss because " + out.miss_reason);
    return out;
  };
  // Compiled and returned, stored nowhere: the caller reads why in miss_reason.
  auto uncached = [&](std::string reason) {
    out.outcome = CacheOutcome::uncached;
    out.miss_reason = std::move(reason);
    c.count_miss(out.miss_reason, true);
    detail::cache_log(log::Level::info, "compile cache: not caching {}: {}", program.name, out.miss_reason);
    return finish(produce());
  };
  if (!c.options.enabled) {
    out.outcome = CacheOutcome::uncached;
    out.miss_reason = "disabled";
    c.count_miss(out.miss_reason);
    return finish(produce());
  }
  if (std::string mismatch = c.toolchain_mismatch(); !mismatch.empty()) return uncached("uncached: " + mismatch);
  const std::vector<std::string> effective = detail::effective_options(program.options, c.cuda_include);
  const detail::KeyResult key = c.key_of(program, effective, link_identity);
  if (!key.unknowable.empty()) return uncached("uncached: " + key.unknowable);
  out.key = detail::Sha256::hex(key.key);

  // The in-process tier; the caller holds c.mutex.
  auto in_memory = [&]() -> std::shared_ptr<const detail::Stored> {
    const auto it = c.memory.find(out.key);
    if (it == c.memory.end()) return nullptr;
    ++c.stats.memory_hits;
    out.outcome = CacheOutcome::memory_hit;
    return it->second;
  };
  if (std::unique_lock<std::mutex> lock(c.mutex); auto hit = in_memory()) {
    lock.unlock();
    return finish(*hit);
  }
  // A disk hit needs no coordination (two threads reading one entry both
  // hit), so it is tried before the in-flight bookkeeping only a miss needs.
  bool disk_read = false;
  if (c.disk) {
    if (auto hit = c.read_entry(out.key, key.key, out.miss_reason)) {
      std::lock_guard<std::mutex> lock(c.mutex);
      ++c.stats.disk_hits;
      if (c.options.in_memory) c.memory.emplace(out.key, hit);
      out.outcome = CacheOutcome::disk_hit;
      return finish(*hit);
    }
    disk_read = true;
  }

  std::promise<detail::CacheCore::Produced> promise;
  std::shared_future<detail::CacheCore::Produced> waiting;
  {
    // Again: another thread may have produced it meanwhile.
    std::unique_lock<std::mutex> lock(c.mutex);
    if (auto hit = in_memory()) {
      lock.unlock();
      return finish(*hit);
    }
    if (auto it = c.inflight.find(out.key); it != c.inflight.end()) {
      waiting = it->second;
    } else {
      c.inflight.emplace(out.key, promise.get_future().share());
    }
  }
  if (waiting.valid()) {
    // Another thread of this process is producing this key: one compile, shared.
    const auto& got = waiting.get();
    if (!got.kept) return uncached("uncached: the headers changed while another thread compiled this key");
    c.bump([](CacheStats& s) { ++s.memory_hits; });
    out.outcome = CacheOutcome::memory_hit;
    return finish(*got.stored);
  }
  detail::CacheCore::Produced produced;
  try {
    produced = fetch_or_produce(c, out.key, KeyedProgram{program, effective, link_identity, key}, produce, out.outcome,
                                out.miss_reason, disk_read);
  } catch (...) {
    promise.set_exception(std::current_exception());
    std::lock_guard<std::mutex> lock(c.mutex);
    c.inflight.erase(out.key);
    ++c.stats.misses;
    ++c.stats.miss_reasons["compile failed"];
    throw;
  }
  promise.set_value(produced);
  {
    std::lock_guard<std::mutex> lock(c.mutex);
    c.inflight.erase(out.key);
    if (c.options.in_memory && produced.kept) c.memory[out.key] = produced.stored;
    if (out.outcome == CacheOutcome::disk_hit) {
      ++c.stats.disk_hits;
    } else {
      ++c.stats.misses;
      ++c.stats.miss_reasons[out.miss_reason];
      if (!produced.kept) ++c.stats.uncached;
    }
  }
  if (!produced.kept)
    detail::cache_log(log::Level::info, "compile cache: not caching {}: {}", program.name, out.miss_reason);
  return finish(*produced.stored);
}

// The options NVRTC is given: the toolkit include directory the key names
// (found from where the cache found NVRTC), not the one the loaded NVRTC
// would add, so that what is compiled is what is keyed.
CompileOptions as_keyed(const detail::CacheCore& c, CompileOptions options) {
  if (options.cuda_includes && !c.cuda_include.empty()) options.extra.push_back("-I" + c.cuda_include);
  options.cuda_includes = false;
  return options;
}

}  // namespace

CachedCompile CompileCache::compile(const KernelSource& program) const {
  const auto& c = *core_;
  return run(c, program, "none", [&] {
    c.bump([](CacheStats& s) { ++s.compiles; });
    detail::Stored s;
    s.result = c.compiler().compile(program.source, program.name, as_keyed(c, program.options), program.headers,
                                    program.name_expressions);
    return s;
  });
}

CachedCompile CompileCache::compile_for(const ContextRef& context, KernelSource program) const {
  const auto& c = *core_;
  const auto cc = context.device().compute_capability();
  program.options.arch = detail::choose_target(c.targets(), cc.major * 10 + cc.minor);
  // Nothing NVRTC can target is old enough: its own check throws the error that says so.
  if (program.options.arch.empty()) program.options.arch = c.compiler().target_for(context.device());
  if (program.options.arch.rfind("sm_", 0) == 0) return compile(program);
  // PTX for a device newer than NVRTC: the driver's SASS is what is kept, so
  // the key names the driver and the device it was made for.
  const std::string link = fmt::format("driver {} sm_{}{}", context.device().driver_version(), cc.major, cc.minor);
  return run(c, program, link, [&] {
    c.bump([](CacheStats& s) { ++s.compiles; });
    detail::Stored s;
    s.result = c.compiler().compile(program.source, program.name, as_keyed(c, program.options), program.headers,
                                    program.name_expressions);
    LinkedImage linked = link_ptx(context, s.result.image, program.name);
    c.bump([](CacheStats& st) { ++st.links; });
    s.result.image = std::move(linked.cubin);
    s.result.cubin = true;
    if (!linked.log.info.empty()) s.result.log += (s.result.log.empty() ? "" : "\n") + linked.log.info;
    s.linked = true;
    return s;
  });
}

const std::string& CompileCache::directory() const noexcept { return core_->directory; }
bool CompileCache::disk_enabled() const noexcept { return core_->disk; }
bool CompileCache::read_only() const noexcept { return core_->options.read_only; }
const std::string& CompileCache::disabled_reason() const noexcept { return core_->disabled_reason; }

CacheStats CompileCache::stats() const {
  std::lock_guard<std::mutex> lock(core_->mutex);
  return core_->stats;
}

std::uint64_t CompileCache::disk_bytes() const { return core_->disk_bytes(); }

void CompileCache::clear_memory() const {
  std::lock_guard<std::mutex> lock(core_->mutex);
  core_->memory.clear();
}

void CompileCache::clear() const {
  if (core_->options.read_only) {
    throw InvalidArgumentError("CompileCache::clear", "the cache is read-only",
                               "open it without read_only to clear it");
  }
  clear_memory();
  if (!core_->disk) return;
  detail::for_each_entry(core_->objects.fd, [](int dirfd, const std::string&, const std::string& name,
                                               const struct stat&) { (void)::unlinkat(dirfd, name.c_str(), 0); });
  // The ledger no longer describes the directory: the next write rebuilds it.
  (void)::unlinkat(core_->v1_dir().fd, "ledger", 0);
}

}  // namespace drvshim
