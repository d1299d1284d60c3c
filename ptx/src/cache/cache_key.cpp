// SPDX-License-Identifier: Apache-2.0
#include "cache/cache_key.hpp"
#include "env.hpp"

#include <fcntl.h>
#include <time.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <set>

#include "cache/option_inputs.hpp"

namespace drvshim::detail {
namespace {

// Bumped whenever what drvshim feeds NVRTC changes in a way the fields below do not show.
constexpr std::string_view kSchema = "drvshim-compile-cache-2";  // 2: NVRTC's lookup rules, every kind of lookup

// The kernel's clock for file time stamps (a coarse clock), read before a stat:
// a file whose change time is not older than this may change again within the
// same tick without its time stamps showing it.
std::uint64_t coarse_now_ns() noexcept {
  timespec ts{};
  ::clock_gettime(CLOCK_REALTIME_COARSE, &ts);
  return static_cast<std::uint64_t>(ts.tv_sec) * 1000000000ull + static_cast<std::uint64_t>(ts.tv_nsec);
}

// Whether a file changed too recently to be trusted: a later change within the
// file system's time-stamp granularity would leave its stat unchanged (git's
// "racily clean" problem). Stamps on whole milliseconds suggest a coarse file
// system (1 s, 10 ms, 2 s): those get a second.
bool changed_recently(std::uint64_t ctime, std::uint64_t now) noexcept {
  const std::uint64_t margin = ctime % 1000000ull == 0 ? 2000000000ull : 10000000ull;
  return ctime + margin >= now;
}

std::string dirname_of(const std::string& path) {
  const auto slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? std::string("/") : path.substr(0, slash);
}

std::string join(const std::string& dir, const std::string& name) { return dir == "/" ? "/" + name : dir + "/" + name; }

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

// What `path` holds, from the memo when its stat identity is unchanged. Opened
// without blocking (a FIFO named like a header must not hang the key), and
// only regular files count: anything else there is something NVRTC would
// try to read and the key cannot describe.
Probe HeaderMemo::probe(const std::string& path) const {
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
    std::lock_guard<std::mutex> lock(mutex_);
    if (const auto it = files_.find(path); it != files_.end() && !it->second->recent && it->second->same_file(st)) {
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
  std::lock_guard<std::mutex> lock(mutex_);
  files_[path] = std::move(info);
  return out;
}

namespace {

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
void hash_headers(const HeaderMemo& memo, Sha256& key, const KernelSource& program,
                  const std::vector<std::string>& effective, KeyResult& out) {
  const OptionInputs opts = option_inputs(effective);
  if (!opts.unknowable.empty()) {
    out.unknowable = opts.unknowable;
    return;
  }
  if (env::value("NVRTC_APPEND_FLAGS") != nullptr) {
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
  auto own_dir = [&](const std::string& name) {
    return opts.source_include ? std::optional(dirname_of(name)) : std::nullopt;
  };
  std::vector<Pending> work;
  std::vector<IncludeScan> memory_scans;
  memory_scans.reserve(program.headers.size() + 3);
  memory_scans.push_back(scan_includes(program.source));
  work.push_back({&memory_scans.back(), nullptr, own_dir(program.name), program.name});
  for (const auto& h : program.headers) {
    memory_scans.push_back(scan_includes(h.source));
    work.push_back({&memory_scans.back(), nullptr, own_dir(h.name), h.name});
  }
  // Macros given as options (-DW(x)=__has_include(x)) are read as the #defines they are.
  std::string defines;
  for (std::size_t i = 0; i < effective.size(); ++i) {
    const std::string_view o = effective[i];
    std::string def;
    if ((o == "-D" || o == "--define-macro") && i + 1 < effective.size()) {
      def = effective[++i];
    } else if (o.rfind("--define-macro=", 0) == 0) {
      def = o.substr(15);
    } else if (o.rfind("-D", 0) == 0 && o.size() > 2) {
      def = o.substr(2);
    } else {
      continue;
    }
    const auto eq = def.find('=');
    defines +=
        "#define " + (eq == std::string::npos ? def + " 1" : def.substr(0, eq) + " " + def.substr(eq + 1)) + "\n";
  }
  if (!defines.empty()) {
    memory_scans.push_back(scan_includes(defines));
    work.push_back({&memory_scans.back(), nullptr, own_dir(program.name), "-D options"});
  }
  IncludeScan pre;
  for (const auto& p : opts.pre_includes) pre.refs.push_back({p, true, IncludeRef::Kind::include});
  memory_scans.push_back(std::move(pre));
  work.push_back({&memory_scans.back(), nullptr, std::string("."), "--pre-include"});

  std::set<std::string> seen;
  std::map<std::string, std::string> resolved;  // what each lookup contributed, sorted for the key
  std::set<std::string> wrappers;
  std::vector<std::pair<MacroLookup, std::optional<std::string>>> macro_lookups;
  std::vector<std::pair<std::string, std::string>> forwards;      // F forwards to G
  std::vector<std::pair<std::string, std::string>> builds;        // F builds a name for G
  std::set<std::string> builders;                                 // their uses cannot be known
  std::vector<std::pair<std::string, std::string>> opaque_calls;  // callee, where
  std::set<std::string> next_wrappers;                            // the same for __has_include_next
  std::set<std::string> dirs_seen;                                // every including file's directory
  std::vector<std::pair<std::string, IncludeRef::Kind>> macro_quoted;
  std::vector<std::pair<const IncludeScan*, std::string>> scanned;  // every scan, with where it is
  std::vector<std::shared_ptr<const FileInfo>> keep;                // keeps those scans alive

  // One lookup; returns the files found that the preprocessor would read.
  auto lookup = [&](const std::string& name, bool quoted, IncludeRef::Kind kind,
                    const std::optional<std::string>& dir) {
    std::vector<std::pair<std::string, std::shared_ptr<const FileInfo>>> found;
    const bool every = kind == IncludeRef::Kind::include_next || kind == IncludeRef::Kind::has_include_next;
    const bool exists_only = kind == IncludeRef::Kind::has_include || kind == IncludeRef::Kind::has_include_next;
    const std::string id = std::string(kind_label(kind)) + "|" + (quoted && dir ? *dir : std::string()) + "|" + name;
    if (!seen.insert(id).second) return found;
    if (in_memory.count(name) != 0) {
      resolved[id] = "memory";
      return found;
    }
    // A name without an extension is also tried as <name>.stdh, right after it, in each place.
    const std::size_t base = name.rfind('/') == std::string::npos ? 0 : name.rfind('/') + 1;
    const bool stdh = name.find('.', base) == std::string::npos;
    std::vector<std::string> candidates;
    auto candidate = [&](std::string path) {
      if (stdh) {
        candidates.push_back(path);
        candidates.push_back(std::move(path) + ".stdh");
      } else {
        candidates.push_back(std::move(path));
      }
    };
    if (!name.empty() && name[0] == '/') {
      candidate(name);
    } else {
      if (quoted && dir) candidate(join(*dir, name));
      for (const auto& d : dirs) candidate(join(d, name));
    }
    std::string contribution;
    for (const auto& c : candidates) {
      const Probe p = memo.probe(c);
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
        out.witness.push_back({c, p.info});
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
      out.unknowable =
          fmt::format("{}: {} names a file the cache cannot know without preprocessing", p.where, p.scan->unknowable);
      return;
    }
    wrappers.insert(p.scan->wrappers.begin(), p.scan->wrappers.end());
    next_wrappers.insert(p.scan->next_wrappers.begin(), p.scan->next_wrappers.end());
    builders.insert(p.scan->builders.begin(), p.scan->builders.end());
    if (p.dir) dirs_seen.insert(*p.dir);
    for (const auto& m : p.scan->macro_lookups) macro_lookups.emplace_back(m, p.dir);
    forwards.insert(forwards.end(), p.scan->forwards.begin(), p.scan->forwards.end());
    builds.insert(builds.end(), p.scan->builds.begin(), p.scan->builds.end());
    scanned.emplace_back(p.scan, p.where);
    if (p.keep) keep.push_back(p.keep);
    for (const auto& [callee, where] : p.scan->opaque_calls) opaque_calls.emplace_back(callee, p.where + ": " + where);
    for (const auto& ref : p.scan->refs) {
      // A quoted lookup in a macro's body happens where the macro is expanded: from every
      // file's directory, once all are known.
      if (ref.in_macro && ref.quoted) macro_quoted.push_back({ref.name, ref.kind});
      for (auto& [path, info] : lookup(ref.name, ref.quoted, ref.kind, p.dir)) {
        if (ref.kind == IncludeRef::Kind::embed) continue;  // read, not preprocessed
        const IncludeScan* scan = &info->scan;
        work.push_back({scan, info, opts.source_include ? std::optional(dirname_of(path)) : std::nullopt, path});
      }
    }
  }
  // Macros that wrap __has_include (CCCL's _CCCL_HAS_INCLUDE) are known only
  // once every file was read: their uses anywhere are lookups.
  // A macro that passes its parameter to a wrapper is a wrapper too (H2(x) -> H1(x) ->
  // __has_include(x)), however deep.
  // A macro that builds a name from its parameter for a wrapper or a builder
  // (`#define F(x) W(<dir/x>)`) is a builder: its uses cannot be known.
  // Followed backwards from each wrapper and builder: linear in the forwards and builds.
  {
    std::multimap<std::string, std::pair<std::string, bool>> callers;  // callee -> (caller, builds)
    for (const auto& [from, to] : forwards) callers.emplace(to, std::pair(from, false));
    for (const auto& [from, to] : builds) callers.emplace(to, std::pair(from, true));
    // (name, kind): 0 wrapper, 1 next wrapper, 2 builder.
    std::vector<std::pair<std::string, int>> todo;
    for (const auto& w : wrappers) todo.emplace_back(w, 0);
    for (const auto& w : next_wrappers) todo.emplace_back(w, 1);
    for (const auto& b : builders) todo.emplace_back(b, 2);
    while (!todo.empty()) {
      const auto [callee, kind] = todo.back();
      todo.pop_back();
      const auto range = callers.equal_range(callee);
      for (auto it = range.first; it != range.second; ++it) {
        const auto& [caller, building] = it->second;
        const int as = building ? 2 : kind;
        std::set<std::string>& into = as == 0 ? wrappers : as == 1 ? next_wrappers : builders;
        if (into.insert(caller).second) todo.emplace_back(caller, as);
      }
    }
  }
  auto refuse = [&](const std::string& why) {
    if (out.unknowable.empty()) out.unknowable = why;
  };
  auto asks = [&](const std::string& m) {
    return wrappers.count(m) != 0 || next_wrappers.count(m) != 0 || builders.count(m) != 0;
  };
  for (const auto& [callee, where] : opaque_calls) {
    if (asks(callee)) {
      refuse(where + " asks __has_include (through " + callee + ") about a name only the preprocessor can know");
    }
  }
  for (const auto& [m, dir] : macro_lookups) {
    if (builders.count(m.macro) != 0) {
      refuse(m.macro + " builds the name it asks __has_include about from its argument");
      continue;
    }
    for (const auto kind : {IncludeRef::Kind::has_include, IncludeRef::Kind::has_include_next}) {
      const auto& set = kind == IncludeRef::Kind::has_include ? wrappers : next_wrappers;
      if (set.count(m.macro) == 0) continue;
      (void)lookup(m.name, m.quoted, kind, dir);
      if (m.in_macro && m.quoted) macro_quoted.push_back({m.name, kind});
    }
  }
  for (const auto& [name, kind] : macro_quoted) {
    for (const auto& d : dirs_seen) (void)lookup(name, true, kind, d);
  }
  // A wrapper named anywhere but in a call the scanner reads (ordinary code, an alias, an
  // argument to another macro) asks about a name only the preprocessor can know.
  std::vector<std::pair<std::uint64_t, const std::string*>> asking;
  for (const auto* set : {&wrappers, &next_wrappers, &builders}) {
    for (const auto& w : *set) asking.emplace_back(identifier_hash(w), &w);
  }
  // Pasting (##) can make __has_include from pieces: `CAT(__has_, include)`. Where a macro
  // pastes something that could become part of it, a file whose names join into it
  // (`__h`, `as`, `_i`, `nclude`: IncludeScan::has_include_pieces) is refused, and a name
  // that begins it (`__ha` or longer) anywhere. Pieces spread over several files, shorter
  // beginnings among them, are not followed.
  const bool pastes = std::any_of(scanned.begin(), scanned.end(), [](const auto& s) { return s.first->pastes; });
  std::vector<std::pair<std::uint64_t, std::string>> prefixes;  // a name that begins it
  if (pastes) {
    const std::string_view full = "__has_include_next";
    for (std::size_t n = 4; n < full.size(); ++n) {
      if (n != std::string_view("__has_include").size()) {
        prefixes.emplace_back(identifier_hash(full.substr(0, n)), full.substr(0, n));
      }
    }
  }
  for (const auto& [scan, where] : scanned) {
    const auto& m = scan->mentions;
    for (const auto& [hash, name] : asking) {
      if (std::binary_search(m.begin(), m.end(), hash)) {
        refuse(where + " uses " + *name + ", which asks __has_include, where only the preprocessor can follow it");
      }
    }
    if (!pastes) continue;
    if (scan->has_include_pieces) refuse(where + " has names that pasted (##) together could make __has_include");
    for (const auto& [hash, name] : prefixes) {
      if (std::binary_search(m.begin(), m.end(), hash)) {
        refuse(where + " has `" + name + "`, which pasted (##) could become __has_include");
      }
    }
  }
  for (const auto& [id, what] : resolved) {
    std::string edge = id;
    edge.append("->").append(what);
    key.field("include", edge);
  }
}

// The variables NVRTC and NVVM read for themselves (NV_NVVM_VERSION, NVRTC_*, NVVM_*): every
// NV* variable is keyed, which can only make the key stricter. NVIDIA_* (the container
// runtime's, which differ between otherwise identical jobs) are left out.
std::vector<std::string> nvrtc_environment() {
  std::vector<std::string> out;
  env::for_each_with_prefix(
      "NV",
      [](std::string_view entry, void* user) {
        if (entry.substr(0, 7) != "NVIDIA_") static_cast<std::vector<std::string>*>(user)->emplace_back(entry);
      },
      &out);
  std::sort(out.begin(), out.end());
  return out;
}

// With line information or device debugging NVRTC writes the working directory's absolute
// path into the output, so the directory is part of the key then.
bool output_names_the_working_directory(const std::vector<std::string>& effective) {
  return std::any_of(effective.begin(), effective.end(), [](const std::string& o) {
    return o == "-lineinfo" || o == "--generate-line-info" || o == "-G" || o == "--device-debug";
  });
}

}  // namespace

KeyResult key_of(const HeaderMemo& memo, std::string_view identity, const KernelSource& program,
                 const std::vector<std::string>& effective, const std::string& link_identity) {
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
  hash_headers(memo, key, program, effective, out);
  for (const auto& o : effective) key.field("option", o);
  std::vector<std::string> names = program.name_expressions;
  std::sort(names.begin(), names.end());
  for (const auto& n : names) key.field("name-expression", n);
  key.field("nvrtc", identity);
  key.field("link", link_identity);
  for (const auto& v : nvrtc_environment()) key.field("environment", v);
  if (output_names_the_working_directory(effective)) {
    char cwd[PATH_MAX];
    if (::getcwd(cwd, sizeof cwd) == nullptr) {
      if (out.unknowable.empty()) out.unknowable = "the working directory, which the output names, cannot be read";
    } else {
      key.field("working-directory", cwd);
    }
  }
  out.key = key.finish();
  return out;
}

std::string inputs_changed(const HeaderMemo& memo, std::string_view identity, const KeyResult& before,
                           const KernelSource& program, const std::vector<std::string>& effective,
                           const std::string& link_identity) {
  if (!before.recent.empty()) {
    return before.recent + " changed moments before the compile (too recently to tell a later change from it)";
  }
  const KeyResult after = key_of(memo, identity, program, effective, link_identity);
  if (!after.unknowable.empty()) return after.unknowable;
  if (after.key == before.key && after.witness == before.witness) return {};
  // The first file whose identity differs.
  const auto& a = before.witness;
  const auto& b = after.witness;
  for (std::size_t i = 0; i < std::max(a.size(), b.size()); ++i) {
    if (i >= a.size() || i >= b.size() || !(a[i] == b[i]))
      return (i < a.size() ? a[i] : b[i]).path + " changed while it was compiled";
  }
  return "a header lookup changed while it was compiled (a file appeared or vanished)";
}

}  // namespace drvshim::detail
