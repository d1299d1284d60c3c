#include <drvshim/compile_cache.hpp>
#include <drvshim/context.hpp>
#include <drvshim/module.hpp>

#include <dirent.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <bit>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <thread>
#include <time.h>

#include "core.hpp"
#include "include_scanner.hpp"
#include "log_internal.hpp"
#include "nvrtc_internal.hpp"
#include "option_inputs.hpp"
#include "sha256.hpp"

namespace drvshim {
namespace detail {
namespace {

constexpr char kMagic[8] = {'D', 'R', 'V', 'S', 'H', 'I', 'M', '\0'};
constexpr std::uint32_t kFormat = 2;  // 2: a 64-bit checksum trailer (1 had SHA-256)
constexpr std::uint32_t kFlagCubin = 1;
constexpr std::uint32_t kFlagLinked = 2;
constexpr std::uint64_t kMaxEntryBytes = std::uint64_t{256} << 20;
// Bumped whenever what drvshim feeds NVRTC changes in a way the fields below do not show.
constexpr std::string_view kSchema = "drvshim-compile-cache-2";  // 2: NVRTC's lookup rules, every kind of lookup

// A closed-on-scope file descriptor.
struct Fd {
  int fd = -1;
  Fd() = default;
  explicit Fd(int f) noexcept : fd(f) {}
  Fd(Fd&& o) noexcept : fd(std::exchange(o.fd, -1)) {}
  Fd& operator=(Fd&& o) noexcept {
    if (this != &o) {
      reset();
      fd = std::exchange(o.fd, -1);
    }
    return *this;
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  ~Fd() { reset(); }
  void reset() noexcept {
    if (fd >= 0) ::close(fd);
    fd = -1;
  }
  explicit operator bool() const noexcept { return fd >= 0; }
};

std::string errno_text(int err) { return std::strerror(err); }

// The effective user, asked once (it is checked against every file opened).
uid_t me() noexcept {
  static const uid_t uid = ::geteuid();
  return uid;
}

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr ? std::string(v) : std::string();
}

bool env_true(const char* name) {
  const std::string v = env(name);
  return !v.empty() && v != "0" && v != "false" && v != "no";
}

// The answer to "may this directory hold our entries?": empty when yes.
std::string directory_problem(const struct stat& st, const std::string& path, bool allow_root_owner) {
  if (!S_ISDIR(st.st_mode)) return fmt::format("{} is not a directory", path);
  if (st.st_uid != me() && !(allow_root_owner && st.st_uid == 0)) {
    return fmt::format("{} is owned by uid {}, not by this user (uid {})", path, st.st_uid, me());
  }
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return fmt::format("{} is writable by group or others (mode {:04o}); chmod 700 it", path, st.st_mode & 07777);
  }
  return {};
}

// Opens (creating with 0700 unless read-only) `name` under `parent` without
// following a symbolic link, and checks it. Returns the fd or sets `problem`
// (and `missing`, when given, to whether it simply does not exist).
Fd open_subdir(int parent, const std::string& name, const std::string& shown, bool create, bool allow_root_owner,
               std::string& problem, bool* missing = nullptr) {
  if (missing != nullptr) *missing = false;
  constexpr int kFlags = O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC;
  Fd fd(::openat(parent, name.c_str(), kFlags));
  // Created only when missing: an existing cache opens with no extra system call.
  if (!fd && errno == ENOENT && create) {
    if (::mkdirat(parent, name.c_str(), 0700) != 0 && errno != EEXIST) {
      problem = fmt::format("cannot create {}: {}", shown, errno_text(errno));
      return {};
    }
    fd = Fd(::openat(parent, name.c_str(), kFlags));
  }
  if (!fd) {
    if (missing != nullptr) *missing = errno == ENOENT;
    problem = errno == ELOOP || errno == ENOTDIR ? fmt::format("{} is a symbolic link or not a directory", shown)
                                                  : fmt::format("cannot open {}: {}", shown, errno_text(errno));
    return {};
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0) {
    problem = fmt::format("cannot stat {}: {}", shown, errno_text(errno));
    return {};
  }
  problem = directory_problem(st, shown, allow_root_owner);
  if (!problem.empty()) return {};
  return fd;
}

std::string default_directory() {
  if (std::string d = env("DRVSHIM_CACHE_DIR"); !d.empty()) return d;
  if (std::string x = env("XDG_CACHE_HOME"); !x.empty() && x[0] == '/') return x + "/drvshim";
  if (std::string h = env("HOME"); !h.empty()) return h + "/.cache/drvshim";
  return {};
}

// Creates the missing parents of `path` (0700, as mkdir -p would, never through a symlink check:
// only the cache's own directory and its subdirectories are checked, like any per-user cache).
void create_parents(const std::string& path) {
  for (std::size_t pos = path.find('/', 1); pos != std::string::npos; pos = path.find('/', pos + 1)) {
    const std::string parent = path.substr(0, pos);
    if (::mkdir(parent.c_str(), 0700) != 0 && errno != EEXIST) return;
  }
}

// ---- entry encoding ----------------------------------------------------------------------------

struct Writer {
  std::string out;
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  void str(std::string_view s) {
    u64(s.size());
    out.append(s);
  }
};

struct Reader {
  std::string_view in;
  std::size_t pos = 0;
  bool ok = true;
  bool need(std::size_t n) {
    if (!ok || in.size() - pos < n) ok = false;
    return ok;
  }
  std::uint32_t u32() {
    if (!need(4)) return 0;
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i) v |= std::uint32_t{static_cast<unsigned char>(in[pos + static_cast<std::size_t>(i)])} << (8 * i);
    pos += 4;
    return v;
  }
  std::uint64_t u64() {
    if (!need(8)) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i) v |= std::uint64_t{static_cast<unsigned char>(in[pos + static_cast<std::size_t>(i)])} << (8 * i);
    pos += 8;
    return v;
  }
  std::string str() {
    const std::uint64_t n = u64();
    if (!ok || n > in.size() - pos) {
      ok = false;
      return {};
    }
    std::string s(in.substr(pos, static_cast<std::size_t>(n)));
    pos += static_cast<std::size_t>(n);
    return s;
  }
};

struct Stored {
  CompileResult result;
  bool linked = false;
};

// The entry's trailer: a 64-bit checksum against truncation and damage. Not
// SHA-256: the key (SHA-256) and its echo inside the entry already keep one
// key's entry from being taken for another's, and SHA-256 over a 4 KB image
// costs ~35 µs here, a tenth of a whole disk hit. Every step after a changed
// word is a bijection of the running state, so any one changed word changes
// the result; the length is mixed in first, so truncation does too.
std::uint64_t checksum(const char* data, std::size_t size) noexcept {
  auto mix = [](std::uint64_t x) noexcept {
    x ^= x >> 32;
    x *= 0xd6e8feb86659fd93ull;
    x ^= x >> 32;
    return x;
  };
  std::uint64_t h = 0x9e3779b97f4a7c15ull ^ mix(size);
  std::size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    std::uint64_t w = 0;
    std::memcpy(&w, data + i, 8);
    h = (h ^ mix(w + i)) * 0x9fb21c651e98df25ull;
  }
  std::uint64_t tail = 0;
  std::memcpy(&tail, data + i, size - i);
  h = (h ^ mix(tail + i)) * 0x9fb21c651e98df25ull;
  return mix(h);
}

std::string encode(const Sha256::Digest& key, const Stored& s) {
  Writer w;
  w.out.append(kMagic, sizeof kMagic);
  w.u32(kFormat);
  w.u32((s.result.cubin ? kFlagCubin : 0) | (s.linked ? kFlagLinked : 0));
  w.out.append(reinterpret_cast<const char*>(key.data()), key.size());
  w.u64(static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
  w.str(s.result.log);
  w.u32(static_cast<std::uint32_t>(s.result.options.size()));
  for (const auto& o : s.result.options) w.str(o);
  w.u32(static_cast<std::uint32_t>(s.result.lowered_names.size()));
  for (const auto& [expr, lowered] : s.result.lowered_names) {
    w.str(expr);
    w.str(lowered);
  }
  w.u64(std::bit_cast<std::uint64_t>(s.result.compile_ms));
  w.str(std::string_view(reinterpret_cast<const char*>(s.result.image.data()), s.result.image.size()));
  w.u64(checksum(w.out.data(), w.out.size()));
  return w.out;
}

// Decodes an entry; returns the reason it is unusable, or empty.
std::string decode(std::string_view bytes, const Sha256::Digest& key, Stored& out) {
  if (bytes.size() < sizeof kMagic + 8 + 32 + 8) return "truncated";
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return "not a drvshim entry (bad magic)";
  Reader r{bytes.substr(0, bytes.size() - 8), sizeof kMagic};
  if (const auto format = r.u32(); format != kFormat) return fmt::format("unknown format {}", format);
  std::uint64_t trailer = 0;
  std::memcpy(&trailer, bytes.data() + bytes.size() - 8, 8);
  if (checksum(bytes.data(), bytes.size() - 8) != trailer) return "checksum mismatch (truncated or altered)";
  const std::uint32_t flags = r.u32();
  if (!r.need(32)) return "truncated";
  if (std::memcmp(bytes.data() + r.pos, key.data(), 32) != 0) return "foreign entry (its key is another key's)";
  r.pos += 32;
  (void)r.u64();
  out.result.log = r.str();
  const std::uint32_t options = r.u32();
  for (std::uint32_t i = 0; i < options && r.ok; ++i) out.result.options.push_back(r.str());
  const std::uint32_t lowered = r.u32();
  for (std::uint32_t i = 0; i < lowered && r.ok; ++i) {
    std::string expr = r.str();
    out.result.lowered_names[expr] = r.str();
  }
  out.result.compile_ms = std::bit_cast<double>(r.u64());
  const std::string payload = r.str();
  if (!r.ok || r.pos != r.in.size()) return "malformed";
  const auto* p = reinterpret_cast<const std::byte*>(payload.data());
  out.result.image.assign(p, p + payload.size());
  out.result.cubin = (flags & kFlagCubin) != 0;
  out.linked = (flags & kFlagLinked) != 0;
  return {};
}

std::uint64_t mtime_ns(const struct stat& st) {
  return static_cast<std::uint64_t>(st.st_mtim.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(st.st_mtim.tv_nsec);
}

// ---- headers on disk ------------------------------------------------------------------------------

// The kernel's clock for file time stamps (a coarse clock), read before a stat:
// a file whose change time is not older than this may change again within the
// same tick without its time stamps showing it.
std::uint64_t coarse_now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

std::uint64_t ctime_ns(const struct stat& st) {
  return static_cast<std::uint64_t>(st.st_ctim.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(st.st_ctim.tv_nsec);
}

// Whether a file changed too recently to be trusted: a later change within the
// file system's time-stamp granularity would leave its stat unchanged (git's
// "racily clean" problem). Stamps on whole milliseconds suggest a coarse file
// system (1 s, 10 ms, 2 s): those get a second.
bool changed_recently(std::uint64_t ctime, std::uint64_t now) noexcept {
  const std::uint64_t margin = ctime % 1000000ull == 0 ? 2000000000ull : 10000000ull;
  return ctime + margin >= now;
}

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

// What the key's walk over a program's inputs found besides the digest.
struct KeyResult {
  Sha256::Digest key{};
  // Every file read, with its stat identity, in walk order: compared after a
  // compile to tell whether NVRTC may have read something else.
  std::string witness;
  std::string recent;      // the first file changed too recently to trust; empty when none
  std::string unknowable;  // why no key can cover this program's inputs; empty when one does
};

}  // namespace

struct CacheCore {
  // NVRTC is loaded on the first miss only: mapping it costs more than a disk hit.
  NvrtcLoadOptions load_options;
  mutable std::mutex nvrtc_mutex;
  mutable std::optional<Nvrtc> nvrtc;
  std::string nvrtc_path;     // the library the identity describes, as found
  std::string nvrtc_print;    // its fingerprint (name, size, time)
  std::string cuda_include;   // the toolkit include directory beside it
  std::vector<std::pair<std::string, std::string>> builtins;  // NVRTC's builtins libraries: path, fingerprint
  mutable std::vector<int> archs;  // NVRTC's targets, from the toolchain memo or NVRTC
  CacheOptions options;
  std::string directory;
  std::string disabled_reason;
  bool disk = false;
  Fd root, v1, objects, toolchain;
  // Needed only to write or to wait for another process: opened at the first miss.
  mutable std::mutex dirs_mutex;
  mutable Fd locks, tmp;
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
  mutable std::map<std::string, std::shared_ptr<const FileInfo>> files;  // by path
  mutable std::mutex files_mutex;

  // The loaded NVRTC (loading it now if needed). Throws NvrtcNotFoundError.
  const Nvrtc& compiler() const;
  const std::vector<int>& targets() const;
  // Learns NVRTC's builtins, include directory and targets (from the toolchain
  // memo when it matches the files, else from the files) and sets the identity.
  void learn_toolchain();
  void write_toolchain_memo() const;
  // The memo's file name: the hash of NVRTC's fingerprint.
  std::string memo_name() const {
    Sha256 h;
    h.update(nvrtc_print);
    return Sha256::hex(h.finish()).substr(0, 32);
  }
  struct Memo {
    std::vector<std::pair<std::string, std::string>> builtins;
    std::string cuda_include;
    std::vector<int> archs;
  };
  // The memo for this NVRTC, if there is a readable one whose builtins still match their files.
  std::optional<Memo> read_toolchain_memo() const;
  // The directories opened at the first miss (no fd when they cannot be opened).
  const Fd& locks_dir() const { return lazy_dirs(), locks; }
  const Fd& tmp_dir() const { return lazy_dirs(), tmp; }
  void lazy_dirs() const;
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

  Probe probe(const std::string& path) const;
  void hash_headers(Sha256& key, const KernelSource& program, const std::vector<std::string>& effective,
                    KeyResult& out) const;
  KeyResult key_of(const KernelSource& program, const std::vector<std::string>& effective,
                   const std::string& link_identity) const;
  // Empty when the inputs `before` described are still there, unchanged; else what changed.
  std::string inputs_changed(const KeyResult& before, const KernelSource& program,
                             const std::vector<std::string>& effective, const std::string& link_identity) const;

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

namespace {

// A library's fingerprint: size and modification time of the file (a patch
// update changes them; a version number alone would not). Not its path or
// name: the same file reached through a link (libnvrtc.so.13 or
// libnvrtc.so.13.0.88), or a toolkit mounted elsewhere in a container, is the
// same compiler.
std::string fingerprint(const std::string& path) {
  struct stat st {};
  if (path.empty() || ::stat(path.c_str(), &st) != 0) return "missing";
  return fmt::format("{}:{}", st.st_size, mtime_ns(st));
}

// The toolkit include directory as NVRTC::load() finds it: beside the
// library's real path (a readlink per component: done only without a memo).
std::string include_beside(const std::string& nvrtc_path, bool use_environment) {
  char resolved[PATH_MAX];
  const bool ok = ::realpath(nvrtc_path.c_str(), resolved) != nullptr;
  return find_cuda_include(ok ? std::string(resolved) : nvrtc_path, use_environment);
}

// The builtins libraries NVRTC loads from beside itself
// (libnvrtc-builtins.so.<major>.<minor>). The minor is not known without
// loading NVRTC, so the few possible names are asked for; the toolchain memo
// spares later processes even that.
std::vector<std::pair<std::string, std::string>> probe_builtins(const std::string& nvrtc_path) {
  std::vector<std::pair<std::string, std::string>> found;
  const std::string dir = nvrtc_path.substr(0, nvrtc_path.rfind('/'));
  const std::string file = nvrtc_path.substr(nvrtc_path.rfind('/') + 1);
  const auto so = file.find(".so.");
  const std::string major = so == std::string::npos ? std::string() : file.substr(so + 4, file.find('.', so + 4) - so - 4);
  for (int minor = 0; minor < 10 && !major.empty(); ++minor) {
    std::string builtins = fmt::format("{}/libnvrtc-builtins.so.{}.{}", dir, major, minor);
    if (::access(builtins.c_str(), F_OK) == 0) {
      std::string print = fingerprint(builtins);
      found.emplace_back(std::move(builtins), std::move(print));
    }
  }
  return found;
}

// Memo fields are lines and ';' / '|' separated lists.
bool memo_safe(std::string_view text) { return text.find_first_of("\n;|") == std::string_view::npos; }

}  // namespace

const Nvrtc& CacheCore::compiler() const {
  std::lock_guard<std::mutex> lock(nvrtc_mutex);
  if (!nvrtc) {
    const auto t0 = std::chrono::steady_clock::now();
    nvrtc.emplace(Nvrtc::load(load_options));
    logf(log::Level::debug, "compile cache: loaded NVRTC {}.{} from {} for a miss ({:.1f} ms)", nvrtc->version_major(),
         nvrtc->version_minor(), nvrtc->loaded_path(),
         std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
    if (fingerprint(nvrtc->loaded_path()) != nvrtc_print) {
      logf(log::Level::warn, "compile cache: NVRTC was expected at {} but loaded from {}; entries are keyed by the former",
           nvrtc_path.empty() ? std::string("(not found without loading)") : nvrtc_path, nvrtc->loaded_path());
    }
    if (archs.empty()) {
      archs = nvrtc->supported_architectures();
      write_toolchain_memo();
    }
  }
  return *nvrtc;
}

const std::vector<int>& CacheCore::targets() const {
  {
    std::lock_guard<std::mutex> lock(nvrtc_mutex);
    if (!archs.empty()) return archs;
  }
  (void)compiler();
  return archs;
}

// The toolchain memo, named by NVRTC's fingerprint: its builtins libraries
// (with their fingerprints, checked against the files on every read), the
// toolkit include directory and NVRTC's architectures, so that a disk hit
// neither loads NVRTC nor searches for what surrounds it. Four lines:
// "<nvrtc fingerprint>\n<path>|<fingerprint>;...\n<include dir>\n<arch> <arch> ...\n".
std::optional<CacheCore::Memo> CacheCore::read_toolchain_memo() const {
  if (!disk || !toolchain) return std::nullopt;
  const std::string name = memo_name();
  // Non-blocking: a FIFO put where the memo belongs must not hang the cache's opening.
  Fd fd(::openat(toolchain.fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (!fd || ::fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_size > 16384 || st.st_uid != me() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return std::nullopt;
  }
  std::string text(static_cast<std::size_t>(st.st_size), '\0');
  if (::pread(fd.fd, text.data(), text.size(), 0) != static_cast<ssize_t>(text.size())) return std::nullopt;
  std::vector<std::string_view> lines;
  for (std::size_t pos = 0; pos < text.size();) {
    const auto nl = text.find('\n', pos);
    if (nl == std::string::npos) return std::nullopt;
    lines.emplace_back(text.data() + pos, nl - pos);
    pos = nl + 1;
  }
  if (lines.size() != 4 || lines[0] != nvrtc_print) return std::nullopt;
  Memo m;
  for (std::size_t pos = 0; pos < lines[1].size();) {
    const auto end = std::min(lines[1].find(';', pos), lines[1].size());
    const std::string_view item = lines[1].substr(pos, end - pos);
    const auto bar = item.find('|');
    if (bar == std::string_view::npos) return std::nullopt;
    m.builtins.emplace_back(std::string(item.substr(0, bar)), std::string(item.substr(bar + 1)));
    // A builtins library replaced since the memo was written: the memo is stale.
    if (fingerprint(m.builtins.back().first) != m.builtins.back().second) return std::nullopt;
    pos = end + 1;
  }
  m.cuda_include = std::string(lines[2]);
  const std::string archs_text(lines[3]);
  const char* p = archs_text.c_str();
  while (*p != '\0') {
    char* end = nullptr;
    const long v = std::strtol(p, &end, 10);
    if (end == p || v <= 0 || v > 1000) return std::nullopt;
    m.archs.push_back(static_cast<int>(v));
    p = end;
    while (*p == ' ') ++p;
  }
  if (m.archs.empty()) return std::nullopt;
  return m;
}

void CacheCore::write_toolchain_memo() const {
  if (!disk || !toolchain || options.read_only || archs.empty()) return;
  // The include directory as found from NVRTC's place, whatever DRVSHIM_CUDA_INCLUDE says in this process.
  const std::string include = include_beside(nvrtc_path, false);
  std::string text = nvrtc_print + "\n";
  for (std::size_t i = 0; i < builtins.size(); ++i) {
    if (!memo_safe(builtins[i].first) || !memo_safe(builtins[i].second)) return;
    text += (i == 0 ? "" : ";") + builtins[i].first + "|" + builtins[i].second;
  }
  if (!memo_safe(include)) return;
  text += "\n" + include + "\n";
  for (const int a : archs) text += std::to_string(a) + " ";
  text.back() = '\n';
  const Fd& staging = tmp_dir();
  if (!staging) return;
  std::random_device rd;
  const std::string tmp_name = fmt::format("{:08x}{:08x}.memo", rd(), rd());
  Fd fd(::openat(staging.fd, tmp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600));
  if (!fd) return;
  const bool ok = ::write(fd.fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  fd.reset();
  if (!ok || ::renameat(staging.fd, tmp_name.c_str(), toolchain.fd, memo_name().c_str()) != 0) {
    (void)::unlinkat(staging.fd, tmp_name.c_str(), 0);
  }
}

void CacheCore::learn_toolchain() {
  nvrtc_print = fingerprint(nvrtc_path);
  const bool include_known = !cuda_include.empty();
  const bool env_include = !env("DRVSHIM_CUDA_INCLUDE").empty();
  std::optional<Memo> memo = read_toolchain_memo();
  if (memo) {
    builtins = memo->builtins;
    if (!include_known) cuda_include = env_include ? include_beside(nvrtc_path, true) : memo->cuda_include;
    if (archs.empty()) archs = memo->archs;
  } else {
    builtins = probe_builtins(nvrtc_path);
    if (!include_known) cuda_include = include_beside(nvrtc_path, true);
  }
  identity = "nvrtc " + nvrtc_print;
  for (const auto& [path, print] : builtins) identity += "; builtins " + print;
  // Written once per NVRTC, by whichever process knows the targets first.
  if (!archs.empty() && (!memo || memo->archs != archs)) write_toolchain_memo();
}

void CacheCore::lazy_dirs() const {
  std::lock_guard<std::mutex> lock(dirs_mutex);
  if (dirs_tried || !disk || options.read_only) return;
  dirs_tried = true;
  std::string problem;
  locks = open_subdir(v1.fd, "locks", directory + "/v1/locks", true, false, problem);
  if (!problem.empty()) logf(log::Level::warn, "compile cache: {}; compiles here will not wait for other processes", problem);
  problem.clear();
  tmp = open_subdir(v1.fd, "tmp", directory + "/v1/tmp", true, false, problem);
  if (!problem.empty()) logf(log::Level::warn, "compile cache: {}; no entry can be written", problem);
}

void CacheCore::warn_once(const std::string& path, const std::string& text) const {
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (!warned.insert(path).second) return;
  }
  logf(log::Level::warn, "compile cache: {}", text);
}

// ---- the key ---------------------------------------------------------------------------------------

// What `path` holds, from the memo when its stat identity is unchanged. Opened
// without blocking (a FIFO named like a header must not hang the key), and
// only regular files count: anything else there is something NVRTC would
// try to read and the key cannot describe.
Probe CacheCore::probe(const std::string& path) const {
  Probe out;
  const std::uint64_t now = coarse_now_ns();
  Fd fd(::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (!fd) {
    if (errno == ENOENT || errno == ENOTDIR) return out;
    out.state = Probe::State::unusable;
    out.problem = fmt::format("{} cannot be opened ({})", path, errno_text(errno));
    return out;
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    out.state = Probe::State::unusable;
    out.problem = fmt::format("{} is not a regular file", path);
    return out;
  }
  out.state = Probe::State::file;
  {
    std::lock_guard<std::mutex> lock(files_mutex);
    if (const auto it = files.find(path); it != files.end() && !it->second->recent && it->second->same_file(st)) {
      out.info = it->second;
      return out;
    }
  }
  std::string content(static_cast<std::size_t>(st.st_size), '\0');
  std::size_t done = 0;
  while (done < content.size()) {
    const ssize_t n = ::pread(fd.fd, content.data() + done, content.size() - done, static_cast<off_t>(done));
    if (n <= 0) break;
    done += static_cast<std::size_t>(n);
  }
  content.resize(done);
  Sha256 h;
  h.update(content);
  auto info = std::make_shared<FileInfo>();
  info->dev = st.st_dev;
  info->ino = st.st_ino;
  info->size = st.st_size;
  info->mtime = mtime_ns(st);
  info->ctime = ctime_ns(st);
  info->recent = changed_recently(info->ctime, now);
  info->digest = Sha256::hex(h.finish());
  info->scan = scan_includes(content);
  out.info = info;
  std::lock_guard<std::mutex> lock(files_mutex);
  files[path] = std::move(info);
  return out;
}

namespace {

std::string dirname_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? std::string("/") : path.substr(0, slash);
}

std::string join(const std::string& dir, const std::string& name) {
  return dir == "/" ? "/" + name : dir + "/" + name;
}

const char* kind_label(IncludeRef::Kind kind) {
  switch (kind) {
    case IncludeRef::Kind::include: return "include";
    case IncludeRef::Kind::include_next: return "include_next";
    case IncludeRef::Kind::embed: return "embed";
    case IncludeRef::Kind::has_include: return "has_include";
    case IncludeRef::Kind::has_include_next: return "has_include_next";
  }
  return "?";
}

}  // namespace

// Every file the program can make NVRTC read, or ask about, by content. The
// lookup follows NVRTC's (checked against NVRTC 13.0): an in-memory header of
// that name first; for "quoted" names the including file's directory (for the
// program and in-memory headers: the directory of their name, relative to
// the working directory), unless --no-source-include; then the -I directories
// in order (those in the options, then the toolkit's). --pre-include headers
// are looked up from the working directory. Names that resolve nowhere are
// keyed as "unresolved" (creating such a file later changes the key);
// #include_next is keyed by every candidate, so its starting point need not be
// known. What the cache cannot know (a computed #include, an option that reads
// files, something other than a regular file on the way) sets `unknowable`.
void CacheCore::hash_headers(Sha256& key, const KernelSource& program, const std::vector<std::string>& effective,
                             KeyResult& out) const {
  const OptionInputs opts = option_inputs(effective);
  if (!opts.unknowable.empty()) {
    out.unknowable = opts.unknowable;
    return;
  }
  if (const char* append = std::getenv("NVRTC_APPEND_FLAGS"); append != nullptr && *append != '\0') {
    out.unknowable = "NVRTC_APPEND_FLAGS is set: NVRTC adds flags the cache cannot see";
    return;
  }
  const std::vector<std::string>& dirs = opts.include_dirs;
  std::map<std::string, const Header*> in_memory;
  for (const auto& h : program.headers) in_memory[h.name] = &h;

  struct Pending {
    const IncludeScan* scan;
    std::shared_ptr<const FileInfo> keep;  // keeps `scan` alive
    std::optional<std::string> dir;        // the including file's directory for "quoted" names
    std::string where;                     // for messages
  };
  auto own_dir = [&](const std::string& name) { return opts.source_include ? std::optional(dirname_of(name)) : std::nullopt; };
  std::vector<Pending> work;
  std::vector<IncludeScan> memory_scans;
  memory_scans.reserve(program.headers.size() + 2);
  memory_scans.push_back(scan_includes(program.source));
  work.push_back({&memory_scans.back(), nullptr, own_dir(program.name), program.name});
  for (const auto& h : program.headers) {
    memory_scans.push_back(scan_includes(h.source));
    work.push_back({&memory_scans.back(), nullptr, own_dir(h.name), h.name});
  }
  IncludeScan pre;
  for (const auto& p : opts.pre_includes) pre.refs.push_back({p, true, IncludeRef::Kind::include});
  memory_scans.push_back(std::move(pre));
  work.push_back({&memory_scans.back(), nullptr, std::string("."), "--pre-include"});

  std::set<std::string> seen;
  std::map<std::string, std::string> resolved;  // what each lookup contributed, sorted for the key
  std::set<std::string> wrappers;
  std::vector<std::pair<MacroLookup, std::optional<std::string>>> macro_lookups;

  // One lookup; returns the files found that the preprocessor would read.
  auto lookup = [&](const std::string& name, bool quoted, IncludeRef::Kind kind, const std::optional<std::string>& dir) {
    std::vector<std::pair<std::string, std::shared_ptr<const FileInfo>>> found;
    const bool every = kind == IncludeRef::Kind::include_next || kind == IncludeRef::Kind::has_include_next;
    const bool exists_only = kind == IncludeRef::Kind::has_include || kind == IncludeRef::Kind::has_include_next;
    const std::string id = std::string(kind_label(kind)) + "|" + (quoted && dir ? *dir : std::string()) + "|" + name;
    if (!seen.insert(id).second) return found;
    if (in_memory.count(name) != 0) {
      resolved[id] = "memory";
      return found;
    }
    std::vector<std::string> candidates;
    if (!name.empty() && name[0] == '/') {
      candidates.push_back(name);
    } else {
      if (quoted && dir) candidates.push_back(join(*dir, name));
      for (const auto& d : dirs) candidates.push_back(join(d, name));
    }
    std::string contribution;
    for (const auto& c : candidates) {
      const Probe p = probe(c);
      if (p.state == Probe::State::unusable) {
        if (out.unknowable.empty()) out.unknowable = p.problem + " (a header candidate NVRTC would try to read)";
        return found;
      }
      if (p.state == Probe::State::absent) {
        if (every) contribution += c + "=absent;";
        continue;
      }
      contribution += exists_only ? c + "=exists;" : c + "=" + p.info->digest + ";";
      if (!exists_only) {
        out.witness += fmt::format("{}\n{} {} {} {} {}\n", c, p.info->dev, p.info->ino, p.info->size, p.info->mtime,
                                   p.info->ctime);
        if (p.info->recent && out.recent.empty()) out.recent = c;
        found.emplace_back(c, p.info);
      }
      if (!every) break;
    }
    resolved[id] = contribution.empty() ? "unresolved" : contribution;
    return found;
  };

  while (!work.empty() && out.unknowable.empty()) {
    Pending p = std::move(work.back());
    work.pop_back();
    if (!p.scan->unknowable.empty()) {
      out.unknowable = fmt::format("{}: {} names a file the cache cannot know without preprocessing", p.where,
                                   p.scan->unknowable);
      return;
    }
    wrappers.insert(p.scan->wrappers.begin(), p.scan->wrappers.end());
    for (const auto& m : p.scan->macro_lookups) macro_lookups.emplace_back(m, p.dir);
    for (const auto& ref : p.scan->refs) {
      for (auto& [path, info] : lookup(ref.name, ref.quoted, ref.kind, p.dir)) {
        if (ref.kind == IncludeRef::Kind::embed) continue;  // read, not preprocessed
        const IncludeScan* scan = &info->scan;
        work.push_back({scan, info, opts.source_include ? std::optional(dirname_of(path)) : std::nullopt, path});
      }
    }
  }
  // Macros that wrap __has_include (CCCL's _CCCL_HAS_INCLUDE) are known only
  // once every file was read: their uses anywhere are lookups.
  for (const auto& [m, dir] : macro_lookups) {
    if (wrappers.count(m.macro) != 0) (void)lookup(m.name, m.quoted, IncludeRef::Kind::has_include, dir);
  }
  for (const auto& [id, what] : resolved) key.field("include", id + "->" + what);
}

KeyResult CacheCore::key_of(const KernelSource& program, const std::vector<std::string>& effective,
                            const std::string& link_identity) const {
  KeyResult out;
  Sha256 key;
  key.field("schema", kSchema);
  key.field("source", program.source);
  key.field("name", program.name);
  std::vector<const Header*> headers;
  for (const auto& h : program.headers) headers.push_back(&h);
  std::sort(headers.begin(), headers.end(), [](const Header* a, const Header* b) { return a->name < b->name; });
  for (const Header* h : headers) {
    key.field("header-name", h->name);
    key.field("header-source", h->source);
  }
  hash_headers(key, program, effective, out);
  for (const auto& o : effective) key.field("option", o);
  std::vector<std::string> names = program.name_expressions;
  std::sort(names.begin(), names.end());
  for (const auto& n : names) key.field("name-expression", n);
  key.field("nvrtc", identity);
  key.field("link", link_identity);
  out.key = key.finish();
  return out;
}

std::string CacheCore::inputs_changed(const KeyResult& before, const KernelSource& program,
                                      const std::vector<std::string>& effective, const std::string& link_identity) const {
  if (!before.recent.empty()) {
    return before.recent + " changed moments before the compile (too recently to tell a later change from it)";
  }
  const KeyResult after = key_of(program, effective, link_identity);
  if (!after.unknowable.empty()) return after.unknowable;
  if (after.key == before.key && after.witness == before.witness) return {};
  // The first file whose identity differs: witness lines come in pairs (path, identity).
  auto lines = [](const std::string& w) {
    std::vector<std::string_view> out;
    for (std::size_t pos = 0; pos < w.size();) {
      const auto nl = w.find('\n', pos);
      out.push_back(std::string_view(w).substr(pos, nl - pos));
      pos = nl + 1;
    }
    return out;
  };
  const auto a = lines(before.witness), b = lines(after.witness);
  for (std::size_t i = 0; i + 1 < std::max(a.size(), b.size()); i += 2) {
    if (i + 1 >= a.size() || i + 1 >= b.size() || a[i] != b[i] || a[i + 1] != b[i + 1]) {
      return std::string(i < a.size() ? a[i] : b[i]) + " changed while it was compiled";
    }
  }
  return "a header lookup changed while it was compiled (a file appeared or vanished)";
}

// ---- entries on disk -------------------------------------------------------------------------------

Fd CacheCore::fanout(int parent, const std::string& shown, const std::string& hex, bool create, std::string& problem,
                     bool& missing) const {
  const std::string path = shown + "/" + hex.substr(0, 2);
  Fd dir = open_subdir(parent, hex.substr(0, 2), path, create, options.read_only, problem, &missing);
  if (!dir && !missing) warn_once(path, problem + "; the files under it are not used");
  return dir;
}

std::shared_ptr<const Stored> CacheCore::read_entry(const std::string& hex, const Sha256::Digest& key,
                                                    std::string& reason) const {
  const std::string name = hex.substr(2);
  std::string problem;
  bool missing = false;
  Fd dir = fanout(objects.fd, directory + "/v1/objects", hex, false, problem, missing);
  if (!dir) {
    reason = missing ? "no entry" : "unsafe directory (" + problem + ")";
    return nullptr;
  }
  // Non-blocking: a FIFO planted as an entry must not hang the compile; its type is checked next.
  Fd fd(::openat(dir.fd, name.c_str(), O_RDONLY | O_NONBLOCK | O_NOFOLLOW | O_NOCTTY | O_CLOEXEC));
  if (!fd) {
    const bool link = errno == ELOOP;
    reason = link ? "unsafe entry (a symbolic link)" : "no entry";
    if (link) {
      bump([](CacheStats& s) { ++s.corrupt_removed; });
      if (!options.read_only) (void)::unlinkat(dir.fd, name.c_str(), 0);
    }
    return nullptr;
  }
  struct stat st {};
  if (::fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    problem = "unsafe entry (not a regular file)";
  } else if (st.st_uid != me() && !(options.read_only && st.st_uid == 0)) {
    problem = fmt::format("unsafe entry (owned by uid {})", st.st_uid);
  } else if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    problem = "unsafe entry (writable by group or others)";
  } else if (static_cast<std::uint64_t>(st.st_size) > kMaxEntryBytes) {
    problem = "corrupt entry (larger than any entry)";
  }
  auto stored = std::make_shared<Stored>();
  if (problem.empty()) {
    std::string bytes(static_cast<std::size_t>(st.st_size), '\0');
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::pread(fd.fd, bytes.data() + done, bytes.size() - done, static_cast<off_t>(done));
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    bytes.resize(done);
    if (std::string why = decode(bytes, key, *stored); !why.empty()) problem = "corrupt entry (" + why + ")";
  }
  if (!problem.empty()) {
    reason = problem;
    bump([](CacheStats& s) { ++s.corrupt_removed; });
    logf(log::Level::info, "compile cache: removing entry {}: {}; it will be recompiled", hex.substr(0, 16), problem);
    // Removed only if it is still the file just judged (another process may have replaced it).
    struct stat now {};
    if (!options.read_only && ::fstatat(dir.fd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 && now.st_ino == st.st_ino &&
        now.st_dev == st.st_dev) {
      (void)::unlinkat(dir.fd, name.c_str(), 0);
    }
    return nullptr;
  }
  // LRU: a hit refreshes the entry's time, at most once a minute, so reads stay reads.
  const auto now = std::chrono::system_clock::now().time_since_epoch();
  if (!options.read_only && std::chrono::nanoseconds(now).count() - static_cast<std::int64_t>(mtime_ns(st)) > 60'000'000'000ll) {
    (void)::futimens(fd.fd, nullptr);
  }
  return stored;
}

bool CacheCore::write_entry(const std::string& hex, const Sha256::Digest& key, const Stored& s) const {
  const std::string bytes = encode(key, s);
  // An entry larger than the whole cache is not written: storing it would evict
  // everything, itself included, on every write.
  if (bytes.size() > options.max_bytes) {
    bump([](CacheStats& st) { ++st.oversized; });
    logf(log::Level::info, "compile cache: entry {} not stored: its {} bytes exceed the cache's cap of {} bytes",
         hex.substr(0, 16), bytes.size(), options.max_bytes);
    return false;
  }
  std::random_device rd;
  const std::string tmp_name = fmt::format("{:08x}{:08x}{:08x}{:08x}.tmp", rd(), rd(), rd(), rd());
  const Fd& staging = tmp_dir();
  Fd fd(staging ? ::openat(staging.fd, tmp_name.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600) : -1);
  std::string problem;
  if (!staging) {
    problem = "its temporary directory v1/tmp cannot be opened";
  } else if (!fd) {
    problem = "create: " + errno_text(errno);
  } else {
    std::size_t done = 0;
    while (done < bytes.size()) {
      const ssize_t n = ::write(fd.fd, bytes.data() + done, bytes.size() - done);
      if (n <= 0) break;
      done += static_cast<std::size_t>(n);
    }
    if (done != bytes.size()) {
      problem = "write: " + errno_text(errno);
    } else if (::fsync(fd.fd) != 0) {
      problem = "fsync: " + errno_text(errno);
    }
    // Closed before the rename, so no reader ever sees a file still being written.
    fd.reset();
    std::string dir_problem;
    bool missing = false;
    Fd dir = problem.empty() ? fanout(objects.fd, directory + "/v1/objects", hex, true, dir_problem, missing) : Fd();
    if (problem.empty() && !dir) problem = "its directory: " + dir_problem;
    if (problem.empty() && ::renameat(staging.fd, tmp_name.c_str(), dir.fd, hex.substr(2).c_str()) != 0) {
      problem = "rename: " + errno_text(errno);
    }
    if (!problem.empty()) (void)::unlinkat(staging.fd, tmp_name.c_str(), 0);
  }
  if (!problem.empty()) {
    bump([](CacheStats& st) { ++st.write_failures; });
    logf(log::Level::warn, "compile cache: could not store entry {} in {}: {}", hex.substr(0, 16), directory, problem);
    return false;
  }
  bump([](CacheStats& st) { ++st.writes; });
  after_write(hex, bytes.size());
  return true;
}

namespace {

// Every regular file in each subdirectory of `parent` (objects/ or locks/):
// f(subdirectory fd, its name, file name, stat).
template <class F>
void for_each_entry(int parent, F&& f) {
  Fd scan(::openat(parent, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC));
  DIR* top = scan ? ::fdopendir(scan.fd) : nullptr;
  if (top == nullptr) return;
  scan.fd = -1;  // owned by `top` now
  while (const dirent* d = ::readdir(top)) {
    if (d->d_name[0] == '.') continue;
    Fd sub(::openat(parent, d->d_name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    if (!sub) continue;
    const int subfd = ::dup(sub.fd);
    DIR* inner = subfd >= 0 ? ::fdopendir(subfd) : nullptr;
    if (inner == nullptr) continue;
    while (const dirent* e = ::readdir(inner)) {
      if (e->d_name[0] == '.') continue;
      struct stat st {};
      if (::fstatat(sub.fd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
      f(sub.fd, std::string(d->d_name), std::string(e->d_name), st);
    }
    ::closedir(inner);
  }
  ::closedir(top);
}

// Every regular file directly in `dirfd`: f(name, stat).
template <class F>
void for_each_file(int dirfd, F&& f) {
  const int copy = ::openat(dirfd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  DIR* d = copy >= 0 ? ::fdopendir(copy) : nullptr;
  if (d == nullptr) {
    if (copy >= 0) ::close(copy);
    return;
  }
  while (const dirent* e = ::readdir(d)) {
    if (e->d_name[0] == '.') continue;
    struct stat st {};
    if (::fstatat(dirfd, e->d_name, &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
    f(std::string(e->d_name), st);
  }
  ::closedir(d);
}

// The size ledger (v1/ledger): "<bytes> <writes since the last scan>\n",
// changed under flock by every writer, so a write costs one small read and
// write instead of a listing of the whole cache.
constexpr std::uint64_t kScanEveryWrites = 256;
// A temporary file this old belongs to a writer that died (a write takes
// seconds at most).
constexpr std::uint64_t kStaleTemporaryNs = 3600ull * 1000000000ull;

struct Ledger {
  std::uint64_t bytes = 0;
  std::uint64_t writes = 0;
};

std::optional<Ledger> read_ledger(int fd) {
  char text[64] = {};
  const ssize_t n = ::pread(fd, text, sizeof text - 1, 0);
  if (n <= 0) return std::nullopt;
  Ledger l;
  char* end = nullptr;
  l.bytes = std::strtoull(text, &end, 10);
  if (end == text || *end != ' ') return std::nullopt;
  char* end2 = nullptr;
  l.writes = std::strtoull(end + 1, &end2, 10);
  if (end2 == end + 1 || *end2 != '\n') return std::nullopt;
  return l;
}

void write_ledger(int fd, const Ledger& l) {
  const std::string text = fmt::format("{} {}\n", l.bytes, l.writes);
  if (::pwrite(fd, text.data(), text.size(), 0) == static_cast<ssize_t>(text.size())) {
    (void)::ftruncate(fd, static_cast<off_t>(text.size()));
  }
}

// A regular file of this user's under `dirfd`, opened without following a
// link or blocking (a FIFO there is refused, never waited on).
Fd open_own_file(int dirfd, const char* name, int flags) {
  Fd fd(::openat(dirfd, name, flags | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY | O_CLOEXEC, 0600));
  struct stat st {};
  if (!fd || ::fstat(fd.fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != me() ||
      (st.st_mode & (S_IWGRP | S_IWOTH)) != 0) {
    return {};
  }
  return fd;
}

}  // namespace

std::uint64_t CacheCore::disk_bytes() const {
  std::uint64_t total = 0;
  if (!disk) return 0;
  for_each_entry(objects.fd, [&](int, const std::string&, const std::string&, const struct stat& st) {
    total += static_cast<std::uint64_t>(st.st_size);
  });
  Fd t(::openat(v1.fd, "tmp", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
  if (t) for_each_file(t.fd, [&](const std::string&, const struct stat& st) { total += static_cast<std::uint64_t>(st.st_size); });
  return total;
}

void CacheCore::after_write(const std::string& hex, std::uint64_t size) const {
  bool scan = true;
  if (Fd fd = open_own_file(v1.fd, "ledger", O_RDWR | O_CREAT); fd && ::flock(fd.fd, LOCK_EX) == 0) {
    if (auto l = read_ledger(fd.fd)) {
      l->bytes += size;
      l->writes += 1;
      scan = l->bytes > options.max_bytes || l->writes >= kScanEveryWrites;
      write_ledger(fd.fd, *l);
    }
    // Missing or unreadable: a scan rebuilds it.
  }
  if (scan) housekeeping(hex);
}

// The occasional full scan, by one process at a time (gc.lock, never waited
// for: a busy collector is as good as this one): the true size (entries and
// live temporary files), temporary files of writers that died, lock files
// nobody holds, and eviction of the least recently used entries down to 90 %
// of the cap, never the entry `keep_hex` just written. Ends by resetting the ledger.
void CacheCore::housekeeping(const std::string& keep_hex) const {
  Fd gc = open_own_file(root.fd, "gc.lock", O_RDWR | O_CREAT);
  if (!gc || ::flock(gc.fd, LOCK_EX | LOCK_NB) != 0) return;
  bump([](CacheStats& s) { ++s.housekeeping_scans; });
  struct Item {
    std::uint64_t mtime;
    std::uint64_t size;
    std::string sub;
    std::string name;
    dev_t dev;
    ino_t ino;
  };
  std::vector<Item> items;
  std::uint64_t total = 0;
  for_each_entry(objects.fd, [&](int, const std::string& sub, const std::string& name, const struct stat& st) {
    total += static_cast<std::uint64_t>(st.st_size);
    if (sub + name == keep_hex) return;
    items.push_back({mtime_ns(st), static_cast<std::uint64_t>(st.st_size), sub, name, st.st_dev, st.st_ino});
  });
  std::uint64_t removed = 0;
  const std::uint64_t now = static_cast<std::uint64_t>(
      std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::system_clock::now().time_since_epoch()).count());
  if (const Fd& t = tmp_dir()) {
    for_each_file(t.fd, [&](const std::string& name, const struct stat& st) {
      if (mtime_ns(st) + kStaleTemporaryNs < now && ::unlinkat(t.fd, name.c_str(), 0) == 0) {
        ++removed;
        logf(log::Level::info, "compile cache: removed {}/v1/tmp/{}, left by a writer that stopped", directory, name);
      } else {
        total += static_cast<std::uint64_t>(st.st_size);
      }
    });
  }
  if (const Fd& l = locks_dir()) {
    // A lock file nobody holds is removed while held here; a process that
    // opened it before sees, once it holds the lock, that the path is gone and
    // takes a new one (fetch_or_produce), so one compile per key still holds.
    for_each_entry(l.fd, [&](int dirfd, const std::string&, const std::string& name, const struct stat&) {
      Fd lock = open_own_file(dirfd, name.c_str(), O_RDWR);
      if (lock && ::flock(lock.fd, LOCK_EX | LOCK_NB) == 0 && ::unlinkat(dirfd, name.c_str(), 0) == 0) ++removed;
    });
  }
  if (removed != 0) bump([&](CacheStats& s) { s.stale_removed += removed; });
  if (total > options.max_bytes) {
    std::sort(items.begin(), items.end(), [](const Item& a, const Item& b) { return a.mtime < b.mtime; });
    const std::uint64_t target = options.max_bytes / 10 * 9;
    for (const auto& item : items) {
      if (total <= target) break;
      // Removed only if it is still the file listed, unused since: same
      // device, inode, size and time (a hit since refreshed its time).
      Fd dir(::openat(objects.fd, item.sub.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
      struct stat st {};
      const bool same = dir && ::fstatat(dir.fd, item.name.c_str(), &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                        st.st_dev == item.dev && st.st_ino == item.ino &&
                        static_cast<std::uint64_t>(st.st_size) == item.size && mtime_ns(st) == item.mtime;
      if (same && ::unlinkat(dir.fd, item.name.c_str(), 0) == 0) {
        total -= item.size;
        bump([](CacheStats& s) { ++s.evictions; });
        logf(log::Level::debug, "compile cache: evicted {} ({} bytes, least recently used)", (item.sub + item.name).substr(0, 14),
             item.size);
      }
    }
  }
  if (Fd fd = open_own_file(v1.fd, "ledger", O_RDWR | O_CREAT); fd && ::flock(fd.fd, LOCK_EX) == 0) {
    write_ledger(fd.fd, Ledger{total, 0});
  }
}

namespace {

// Whether the lock `fd` holds is still the file at `name` (not one removed by
// its writer or the housekeeping since it was opened).
bool still_linked(int dirfd, const std::string& name, int fd) {
  struct stat mine {}, now {};
  return ::fstat(fd, &mine) == 0 && ::fstatat(dirfd, name.c_str(), &now, AT_SYMLINK_NOFOLLOW) == 0 &&
         mine.st_dev == now.st_dev && mine.st_ino == now.st_ino;
}

// Holds the per-key lock file; the lock goes with the descriptor.
struct KeyLock {
  Fd dir;
  Fd fd;
  std::string name;
  bool held = false;
  // The writer removes its lock file once the entry is there (while holding
  // it): later processes find the entry, and waiters that opened the file see
  // that its path is gone once they hold it.
  void remove() const {
    if (held && still_linked(dir.fd, name, fd.fd)) (void)::unlinkat(dir.fd, name.c_str(), 0);
  }
};

}  // namespace
}  // namespace detail

// ---- public API -------------------------------------------------------------------------------------

const char* to_string(CacheOutcome outcome) noexcept {
  switch (outcome) {
    case CacheOutcome::compiled: return "compiled";
    case CacheOutcome::memory_hit: return "memory hit";
    case CacheOutcome::disk_hit: return "disk hit";
    case CacheOutcome::uncached: return "uncached";
  }
  return "unknown";
}

CacheOptions CacheOptions::from_environment() {
  CacheOptions o;
  o.directory = detail::default_directory();
  if (detail::env_true("DRVSHIM_CACHE_DISABLE")) o.enabled = false;
  if (detail::env_true("DRVSHIM_CACHE_READONLY")) o.read_only = true;
  if (const std::string m = detail::env("DRVSHIM_CACHE_MAXSIZE"); !m.empty()) {
    char* end = nullptr;
    const unsigned long long v = std::strtoull(m.c_str(), &end, 10);
    if (end != nullptr && *end == '\0' && v > 0) o.max_bytes = v;
    else detail::logf(log::Level::warn, "DRVSHIM_CACHE_MAXSIZE=\"{}\" is not a byte count; keeping {}", m, o.max_bytes);
  }
  return o;
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
      std::string problem = parent_fd ? std::string() : fmt::format("cannot open {}: {}", parent, detail::errno_text(errno));
      const bool create = !c.options.read_only;
      if (problem.empty()) {
        c.root = detail::open_subdir(parent_fd.fd, dir.substr(slash + 1), dir, create, c.options.read_only, problem);
      }
      // Every directory below the root gets the root's checks (this user's, not
      // writable by group or others, not a link), each opened from its checked parent.
      if (problem.empty()) c.v1 = detail::open_subdir(c.root.fd, "v1", dir + "/v1", create, c.options.read_only, problem);
      if (problem.empty()) {
        c.objects = detail::open_subdir(c.v1.fd, "objects", dir + "/v1/objects", create, c.options.read_only, problem);
      }
      if (problem.empty()) {
        // Optional: without it compile_for() loads NVRTC to learn its targets.
        std::string refused;
        bool missing = false;
        c.toolchain =
            detail::open_subdir(c.v1.fd, "toolchain", dir + "/v1/toolchain", create, c.options.read_only, refused, &missing);
        if (!c.toolchain && !missing) {
          detail::logf(log::Level::warn, "compile cache: {}; the toolchain memo is not used", refused);
        }
      }
      if (problem.empty()) {
        c.directory = dir;
        c.disk = true;
      } else {
        c.disabled_reason = "refused: " + problem;
        detail::logf(log::Level::warn, "compile cache {}: {}; compiling without a disk cache", dir, problem);
      }
    }
  }
  c.learn_toolchain();
  detail::logf(log::Level::debug, "compile cache: {}", c.disk ? "at " + c.directory + (c.options.read_only ? " (read-only)" : "")
                                                              : c.disabled_reason);
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
    const detail::Fd& locks = c.locks_dir();
    std::string problem;
    bool missing = false;
    lock.dir = locks ? c.fanout(locks.fd, c.directory + "/v1/locks", hex, true, problem, missing) : detail::Fd();
    lock.name = hex.substr(2);
    const auto deadline = std::chrono::steady_clock::now() + c.options.lock_timeout;
    auto pause = std::chrono::milliseconds(2);
    bool waited = false;
    while (lock.dir) {
      lock.fd = detail::open_own_file(lock.dir.fd, lock.name.c_str(), O_RDWR | O_CREAT);
      if (!lock.fd) {
        c.warn_once(c.directory + "/v1/locks/" + hex,
                    fmt::format("{}/v1/locks/{}/{} is not a lock file of this user's; compiling without waiting for "
                                "other processes",
                                c.directory, hex.substr(0, 2), lock.name));
        break;
      }
      while (!(lock.held = ::flock(lock.fd.fd, LOCK_EX | LOCK_NB) == 0)) {
        if (errno != EWOULDBLOCK && errno != EINTR) break;
        if (std::chrono::steady_clock::now() >= deadline) {
          c.bump([](CacheStats& s) { ++s.lock_timeouts; });
          detail::logf(log::Level::warn,
                       "compile cache: waited {} ms for another process compiling {}; compiling it here too",
                       c.options.lock_timeout.count(), hex.substr(0, 16));
          break;
        }
        waited = true;
        std::this_thread::sleep_for(pause);
        pause = std::min(pause * 2, std::chrono::milliseconds(100));
      }
      // Another process may have produced it while this one waited.
      std::string again;
      if (auto hit = c.read_entry(hex, k.key.key, again)) {
        if (waited) c.bump([](CacheStats& s) { ++s.lock_waits; });
        outcome = CacheOutcome::disk_hit;
        reason.clear();
        return {hit, true};
      }
      // A lock on a file its writer (or the housekeeping) removed meanwhile: take the new one.
      if (lock.held && !detail::still_linked(lock.dir.fd, lock.name, lock.fd.fd)) {
        lock.held = false;
        lock.fd.reset();
        continue;
      }
      break;
    }
    if (waited) c.bump([](CacheStats& s) { ++s.lock_waits; });
  }
  auto stored = std::make_shared<detail::Stored>(produce());
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
    detail::logf(log::Level::debug, "compile cache: {} {} ({}){}", to_string(out.outcome), program.name,
                 out.key.substr(0, 16), out.miss_reason.empty() ? std::string() : ": miss because " + out.miss_reason);
    return out;
  };
  // Compiled and returned, stored nowhere: the caller reads why in miss_reason.
  auto uncached = [&](std::string reason) {
    out.outcome = CacheOutcome::uncached;
    out.miss_reason = std::move(reason);
    c.count_miss(out.miss_reason, true);
    detail::logf(log::Level::info, "compile cache: not caching {}: {}", program.name, out.miss_reason);
    return finish(produce());
  };
  if (!c.options.enabled) {
    out.outcome = CacheOutcome::uncached;
    out.miss_reason = "disabled";
    c.count_miss(out.miss_reason);
    return finish(produce());
  }
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
    const auto got = waiting.get();
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
  if (!produced.kept) detail::logf(log::Level::info, "compile cache: not caching {}: {}", program.name, out.miss_reason);
  return finish(*produced.stored);
}

}  // namespace

CachedCompile CompileCache::compile(const KernelSource& program) const {
  const auto& c = *core_;
  return run(c, program, "none", [&] {
    c.bump([](CacheStats& s) { ++s.compiles; });
    detail::Stored s;
    s.result = c.compiler().compile(program.source, program.name, program.options, program.headers, program.name_expressions);
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
  const std::string link = fmt::format("driver {} sm_{}{}", context.device().core()->version, cc.major, cc.minor);
  return run(c, program, link, [&] {
    c.bump([](CacheStats& s) { ++s.compiles; });
    detail::Stored s;
    s.result = c.compiler().compile(program.source, program.name, program.options, program.headers, program.name_expressions);
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
    throw InvalidArgumentError("CompileCache::clear", "the cache is read-only", "open it without read_only to clear it");
  }
  clear_memory();
  if (!core_->disk) return;
  detail::for_each_entry(core_->objects.fd, [](int dirfd, const std::string&, const std::string& name, const struct stat&) {
    (void)::unlinkat(dirfd, name.c_str(), 0);
  });
  // The ledger no longer describes the directory: the next write rebuilds it.
  (void)::unlinkat(core_->v1.fd, "ledger", 0);
}

}  // namespace drvshim
