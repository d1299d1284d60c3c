// The NVRTC compile cache (the toolkit's real NVRTC; no GPU needed): hits and
// misses with their reasons, what changes the key, every corruption kind, the
// directory's permission refusals, read-only and disabled modes, LRU eviction,
// one compile per key across threads and processes, the lock timeout, and the
// PTX -> SASS link path against the fake driver.
#include <drvshim/compile_cache.hpp>

#include <drvshim/log.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <future>
#include <mutex>
#include <numeric>
#include <random>
#include <set>
#include <sstream>
#include <thread>

#include "fixture.hpp"
#include "sha256.hpp"

extern char** environ;

using namespace drvshim;
using namespace drvshim_test;
namespace fs = std::filesystem;

namespace {

struct TempDir {
  fs::path path;
  TempDir() {
    std::string tmpl = (fs::temp_directory_path() / "drvshim-cache-test-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) throw std::runtime_error("mkdtemp failed");
    path = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    fs::permissions(path, fs::perms::owner_all, fs::perm_options::add, ec);
    fs::remove_all(path, ec);
  }
  std::string operator/(const std::string& sub) const { return (path / sub).string(); }
};

CacheOptions in(const std::string& dir) {
  CacheOptions o;
  o.directory = dir;
  return o;
}

KernelSource program(int value = 1) {
  KernelSource p;
  p.source = "extern \"C\" __global__ void add(int* p) { p[threadIdx.x] += " + std::to_string(value) + "; }\n";
  p.name = "add.cu";
  p.options.arch = "compute_90";
  return p;
}

std::string entry_path(const std::string& dir, const std::string& key) {
  return dir + "/v1/objects/" + key.substr(0, 2) + "/" + key.substr(2);
}

std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A file changed this moment is "too recent" for the cache to store what is
// compiled from it (a second change within the file system's time-stamp
// granularity would not show): tests that edit headers wait that out.
void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

// Rewrites a file in place (same inode, same size) and puts its modification
// time back: only its content (and its change time, which nobody can set) differs.
void edit_in_place(const std::string& path, const std::string& bytes) {
  struct stat before {};
  ASSERT_EQ(::stat(path.c_str(), &before), 0) << path;
  ASSERT_EQ(static_cast<std::size_t>(before.st_size), bytes.size()) << "an edit that keeps the size";
  write_all(path, bytes);
  const timespec times[2] = {before.st_atim, before.st_mtim};
  ASSERT_EQ(::utimensat(AT_FDCWD, path.c_str(), times, 0), 0);
  struct stat after {};
  ASSERT_EQ(::stat(path.c_str(), &after), 0);
  ASSERT_EQ(after.st_ino, before.st_ino);
  ASSERT_EQ(after.st_size, before.st_size);
  ASSERT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  ASSERT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
}

// The value a kernel `*p = kValue;` stores, from its PTX: header versions are
// "constexpr int kValue = 7310NN;" (one size for every NN); -1 when absent.
int value_in(const std::vector<std::byte>& image) {
  const std::string text(reinterpret_cast<const char*>(image.data()), image.size());
  for (auto pos = text.find("7310"); pos != std::string::npos; pos = text.find("7310", pos + 1)) {
    if (pos + 6 < text.size() && std::isdigit(static_cast<unsigned char>(text[pos + 4])) &&
        std::isdigit(static_cast<unsigned char>(text[pos + 5])) && !std::isdigit(static_cast<unsigned char>(text[pos + 6]))) {
      return (text[pos + 4] - '0') * 10 + (text[pos + 5] - '0');
    }
  }
  return -1;
}

std::string value_header(int v) {
  char text[64];
  std::snprintf(text, sizeof text, "constexpr int kValue = 7310%02d;\n", v);
  return text;
}

const char* const kValueKernel = "extern \"C\" __global__ void k(int* p) { *p = kValue; }\n";

// drvshim's log lines while it lives (info and above).
struct LogCapture {
  std::mutex mutex;
  std::vector<std::string> lines;
  LogCapture() {
    log::set_level(log::Level::info);
    log::set_sink([this](log::Level, std::string_view m) {
      std::lock_guard<std::mutex> lock(mutex);
      lines.emplace_back(m);
    });
  }
  ~LogCapture() {
    log::set_sink({});
    log::set_level(log::Level::warn);
  }
  bool has(const std::string& part) {
    std::lock_guard<std::mutex> lock(mutex);
    return std::any_of(lines.begin(), lines.end(), [&](const std::string& l) { return l.find(part) != std::string::npos; });
  }
  std::string all() {
    std::lock_guard<std::mutex> lock(mutex);
    std::string out;
    for (const auto& l : lines) out += l + "\n";
    return out;
  }
};

// Runs `f` in the working directory `dir`, then goes back.
template <class F>
void in_directory(const std::string& dir, F&& f) {
  const fs::path back = fs::current_path();
  fs::current_path(dir);
  try {
    f();
  } catch (...) {
    fs::current_path(back);
    throw;
  }
  fs::current_path(back);
}

// Both block functions: the CPU's SHA instructions (where it has them) and the portable code.
TEST(Sha256, KnownAnswersWithAndWithoutTheCpuInstructions) {
  using detail::Sha256;
  for (const bool cpu : {true, false}) {
    SCOPED_TRACE(cpu ? "CPU instructions where available" : "portable");
    Sha256::use_cpu_instructions(cpu);
    if (!cpu) {
      EXPECT_FALSE(Sha256::uses_cpu_instructions());
    }
    Sha256 empty;
    EXPECT_EQ(Sha256::hex(empty.finish()), "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
    Sha256 abc;
    abc.update("abc");
    EXPECT_EQ(Sha256::hex(abc.finish()), "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
    Sha256 two_blocks;
    two_blocks.update("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq");
    EXPECT_EQ(Sha256::hex(two_blocks.finish()), "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
    Sha256 million;
    million.update(std::string(1000000, 'a'));
    EXPECT_EQ(Sha256::hex(million.finish()), "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  }
  Sha256::use_cpu_instructions(true);
}

TEST(CompileCache, MissThenMemoryHitThenDiskHitInAFreshCacheBehaveLikeTheCompile) {
  TempDir dir;
  const auto nv = load_nvrtc();
  KernelSource p;
  p.source = "template <typename T> __global__ void scale(T* p) { int unused = 0; p[threadIdx.x] *= T(2); }\n";
  p.name = "scale.cu";
  p.options.arch = "compute_90";
  p.name_expressions = {"scale<float>", "scale<double>"};
  CompileCache cache(nv, in(dir / "c"));
  ASSERT_TRUE(cache.disk_enabled()) << cache.disabled_reason();
  const auto first = cache.compile(p);
  EXPECT_EQ(first.outcome, CacheOutcome::compiled);
  EXPECT_EQ(first.miss_reason, "no entry");
  EXPECT_EQ(first.key.size(), 64u);
  EXPECT_NE(first.result.log.find("warning"), std::string::npos) << "the warning is part of the result";
  EXPECT_EQ(first.result.lowered_names.size(), 2u);
  EXPECT_TRUE(fs::is_regular_file(entry_path(dir / "c", first.key)));
  EXPECT_EQ(fs::status(dir / "c").permissions() & fs::perms::all, fs::perms::owner_all);

  const auto second = cache.compile(p);
  EXPECT_EQ(second.outcome, CacheOutcome::memory_hit);
  EXPECT_TRUE(second.miss_reason.empty());

  CompileCache fresh(nv, in(dir / "c"));
  const auto third = fresh.compile(p);
  EXPECT_EQ(third.outcome, CacheOutcome::disk_hit);
  EXPECT_EQ(third.key, first.key);
  EXPECT_EQ(third.result.image, first.result.image);
  EXPECT_EQ(third.result.log, first.result.log);
  EXPECT_EQ(third.result.options, first.result.options);
  EXPECT_EQ(third.result.lowered_names, first.result.lowered_names);
  EXPECT_EQ(third.result.cubin, first.result.cubin);
  EXPECT_DOUBLE_EQ(third.result.compile_ms, first.result.compile_ms);

  const auto s = cache.stats();
  EXPECT_EQ(s.compiles, 1u);
  EXPECT_EQ(s.memory_hits, 1u);
  EXPECT_EQ(s.misses, 1u);
  EXPECT_EQ(s.miss_reasons.at("no entry"), 1u);
  EXPECT_EQ(s.writes, 1u);
  EXPECT_EQ(fresh.stats().disk_hits, 1u);
  EXPECT_EQ(fresh.stats().compiles, 0u);
}

TEST(CompileCache, HitsNeverLoadNvrtcAMissDoesAndBothConstructorsShareEntries) {
  TempDir dir;
  const std::string root = dir / "c";
  CompileCache lazy(NvrtcLoadOptions{}, in(root));
  EXPECT_FALSE(lazy.nvrtc_loaded());
  const auto miss = lazy.compile(program(4));
  EXPECT_EQ(miss.outcome, CacheOutcome::compiled);
  EXPECT_TRUE(lazy.nvrtc_loaded());

  CompileCache eager(load_nvrtc(), in(root));
  EXPECT_EQ(eager.compile(program(4)).key, miss.key) << "NVRTC's identity is the same whether it is loaded or found";
  EXPECT_EQ(eager.compile(program(4)).outcome, CacheOutcome::memory_hit);

  CompileCache second(NvrtcLoadOptions{}, in(root));
  const auto hit = second.compile(program(4));
  EXPECT_EQ(hit.outcome, CacheOutcome::disk_hit);
  EXPECT_FALSE(second.nvrtc_loaded()) << "a hit needs no compiler";
  EXPECT_EQ(hit.result.options, miss.result.options);

  NvrtcLoadOptions nowhere;
  nowhere.path = dir / "no/libnvrtc.so.13";
  expect_throw<NvrtcNotFoundError>([&] { CompileCache broken(nowhere, in(root)); });
}

TEST(CompileCache, EveryInputThatChangesTheOutputChangesTheKey) {
  TempDir dir;
  CompileCache cache(load_nvrtc(), in(dir / "c"));
  const std::string base = cache.compile(program()).key;
  auto differs = [&](KernelSource p, const char* what) {
    const auto r = cache.compile(p);
    EXPECT_EQ(r.outcome, CacheOutcome::compiled) << what;
    EXPECT_NE(r.key, base) << what;
  };
  differs(program(2), "source");
  {
    auto p = program();
    p.name = "other.cu";
    differs(p, "program name");
  }
  {
    auto p = program();
    p.options.defines = {{"X", "1"}};
    differs(p, "a define");
  }
  {
    auto p = program();
    p.options.fast_math = true;
    differs(p, "an option");
  }
  {
    auto p = program();
    p.options.arch = "compute_80";
    differs(p, "the architecture");
  }
  {
    auto p = program();
    p.headers = {{"unused.h", "int x;"}};
    differs(p, "an in-memory header");
  }
  {
    auto p = program();
    p.source = "template <int N> __global__ void k(int* p) { p[0] = N; }\n";
    p.name_expressions = {"k<1>"};
    const auto a = cache.compile(p);
    p.name_expressions = {"k<2>"};
    const auto b = cache.compile(p);
    EXPECT_NE(a.key, b.key) << "name expressions";
    EXPECT_EQ(b.outcome, CacheOutcome::compiled);
  }
  EXPECT_EQ(cache.compile(program()).outcome, CacheOutcome::memory_hit) << "the same input is still a hit";
}

TEST(CompileCache, EditingAHeaderUnderAnIncludePathMissesEvenWhenNested) {
  TempDir dir;
  fs::create_directories(dir / "inc/sub");
  write_all(dir / "inc/outer.h", "#include \"sub/inner.h\"\n");
  write_all(dir / "inc/sub/inner.h", "constexpr int kValue = 1;\n");
  settle();
  KernelSource p;
  p.source = "#include \"outer.h\"\n__global__ void k(int* p) { p[0] = kValue; }\n";
  p.name = "inc.cu";
  p.options.arch = "compute_90";
  p.options.include_paths = {dir / "inc"};
  CompileCache cache(load_nvrtc(), in(dir / "c"));
  const auto a = cache.compile(p);
  EXPECT_EQ(a.outcome, CacheOutcome::compiled);
  EXPECT_EQ(cache.compile(p).outcome, CacheOutcome::memory_hit);
  write_all(dir / "inc/sub/inner.h", "constexpr int kValue = 2;\n");
  settle();
  const auto b = cache.compile(p);
  EXPECT_EQ(b.outcome, CacheOutcome::compiled) << "the nested header changed";
  EXPECT_NE(b.key, a.key);
  EXPECT_NE(b.result.image, a.result.image);
  write_all(dir / "inc/sub/inner.h", "constexpr int kValue = 1;\n");
  settle();
  const auto c = cache.compile(p);
  EXPECT_EQ(c.outcome, CacheOutcome::memory_hit) << "back to the first content: the first key";
  EXPECT_EQ(c.key, a.key);
}

// Issue 18, defect 5: every way NVRTC finds a header (checked against NVRTC
// 13.0) is keyed by the header's content. Each header is edited in place,
// same size, modification time put back: the next compile must see it.
TEST(CompileCache, AHeaderFoundThroughAnyOfNvrtcsLookupsIsKeyedByItsContent) {
  TempDir dir;
  fs::create_directories(dir / "work/src");
  fs::create_directories(dir / "inc");
  const auto nv = load_nvrtc();
  struct Case {
    const char* name;
    std::string header;  // the file edited
    std::function<void(KernelSource&)> setup;
  };
  const std::string inc = dir / "inc";
  const std::vector<Case> cases = {
      {"-I<dir> in include_paths", inc + "/a.h",
       [&](KernelSource& p) {
         p.source = "#include \"a.h\"\n" + std::string(kValueKernel);
         p.options.include_paths = {inc};
       }},
      {"-I <dir> (two arguments) in extra", inc + "/b.h",
       [&](KernelSource& p) {
         p.source = "#include <b.h>\n" + std::string(kValueKernel);
         p.options.extra = {"-I", inc};
       }},
      {"--include-path=<dir> in extra", inc + "/c.h",
       [&](KernelSource& p) {
         p.source = "#include <c.h>\n" + std::string(kValueKernel);
         p.options.extra = {"--include-path=" + inc};
       }},
      {"--pre-include=<header>", inc + "/d.h",
       [&](KernelSource& p) {
         p.source = kValueKernel;
         p.options.extra = {"-I" + inc, "--pre-include=d.h"};
       }},
      {"-include <header>, found in the working directory", dir / "work/e.h",
       [&](KernelSource& p) {
         p.source = kValueKernel;
         p.options.extra = {"-include", "e.h"};
       }},
      {"a quoted include found in the working directory", dir / "work/f.h",
       [&](KernelSource& p) { p.source = "#include \"f.h\"\n" + std::string(kValueKernel); }},
      {"a quoted include found beside the program's name", dir / "work/src/g.h",
       [&](KernelSource& p) {
         p.name = "src/prog.cu";
         p.source = "#include \"g.h\"\n" + std::string(kValueKernel);
       }},
      {"a quoted include of an in-memory header, found in the working directory", dir / "work/h.h",
       [&](KernelSource& p) {
         p.headers = {{"mem.h", "#include \"h.h\"\n"}};
         p.source = "#include \"mem.h\"\n" + std::string(kValueKernel);
       }},
      {"__has_include deciding what is read", dir / "work/i.h",
       [&](KernelSource& p) {
         p.source = "#if __has_include(\"i.h\")\n#include \"i.h\"\n#else\nconstexpr int kValue = 731099;\n#endif\n" +
                    std::string(kValueKernel);
       }},
  };
  in_directory(dir / "work", [&] {
    for (const auto& c : cases) {
      SCOPED_TRACE(c.name);
      write_all(c.header, value_header(1));
      settle();
      KernelSource p;
      p.name = "prog.cu";
      p.options.arch = "compute_90";
      c.setup(p);
      const std::string root = dir / ("cache-" + std::to_string(&c - cases.data()));
      CompileCache cache(nv, in(root));
      const auto first = cache.compile(p);
      ASSERT_EQ(first.outcome, CacheOutcome::compiled) << first.miss_reason;
      ASSERT_EQ(value_in(first.result.image), 1);
      ASSERT_EQ(cache.compile(p).outcome, CacheOutcome::memory_hit);

      edit_in_place(c.header, value_header(2));
      settle();
      const auto second = cache.compile(p);
      EXPECT_EQ(second.outcome, CacheOutcome::compiled) << "not the old image from memory";
      EXPECT_EQ(value_in(second.result.image), 2);
      EXPECT_NE(second.key, first.key);
      CompileCache fresh(nv, in(root));
      const auto from_disk = fresh.compile(p);
      EXPECT_EQ(value_in(from_disk.result.image), 2) << to_string(from_disk.outcome) << ": not the old image from disk";
      // Back to the first content: the first key, and its entry.
      edit_in_place(c.header, value_header(1));
      settle();
      CompileCache again(nv, in(root));
      const auto back = again.compile(p);
      EXPECT_EQ(back.outcome, CacheOutcome::disk_hit);
      EXPECT_EQ(back.key, first.key);
      EXPECT_EQ(value_in(back.result.image), 1);
    }
  });
}

// The toolkit's own headers (found through the toolkit -I) are keyed, not
// refused: the scanner follows their wrapper macros and __has_include.
TEST(CompileCache, ProgramsIncludingTheToolkitsHeadersAreCached) {
  TempDir dir;
  CompileCache cache(load_nvrtc(), in(dir / "c"));
  for (const char* header : {"cuda_fp16.h", "cooperative_groups.h", "cuda/std/type_traits"}) {
    SCOPED_TRACE(header);
    KernelSource p;
    p.source = std::string("#include <") + header + ">\nextern \"C\" __global__ void k(int* p) { *p = 1; }\n";
    p.name = "toolkit.cu";
    p.options.arch = "compute_90";
    // CCCL (cuda/std/...) lives in include/cccl, which is not the toolkit -I.
    if (fs::exists("/usr/local/cuda/include/cccl")) p.options.include_paths = {"/usr/local/cuda/include/cccl"};
    const auto r = cache.compile(p);
    EXPECT_EQ(r.outcome, CacheOutcome::compiled) << r.miss_reason;
    EXPECT_EQ(cache.compile(p).outcome, CacheOutcome::memory_hit);
  }
}

// Defect 5: where the key cannot cover what NVRTC reads, the compile is
// returned, stored nowhere, and the result and the log say why.
TEST(CompileCache, ProgramsWhoseInputsCannotBeKnownAreCompiledAndNeverStored) {
  TempDir dir;
  fs::create_directories(dir / "inc");
  write_all(dir / "inc/v.h", value_header(3));
  settle();
  const auto nv = load_nvrtc();
  struct Case {
    const char* name;
    std::function<void(KernelSource&)> setup;
    const char* reason;
  };
  const std::vector<Case> cases = {
      {"a computed #include",
       [](KernelSource& p) { p.source = "#define HEADER \"v.h\"\n#include HEADER\n" + std::string(kValueKernel); },
       "uncached: prog.cu: `#include HEADER` on line 2 names a file the cache cannot know without preprocessing"},
      {"__has_include of a macro",
       [](KernelSource& p) {
         p.source = "#define HEADER \"v.h\"\n#if __has_include(HEADER)\n#include \"v.h\"\n#endif\n" + std::string(kValueKernel);
       },
       "uncached: prog.cu: `__has_include(HEADER)` on line 2 names a file"},
      {"a precompiled header",
       [](KernelSource& p) {
         p.source = "#include \"v.h\"\n" + std::string(kValueKernel);
         p.options.extra = {"-pch"};
       },
       "uncached: option \"-pch\" makes NVRTC read a file"},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    KernelSource p;
    p.name = "prog.cu";
    p.options.arch = "compute_90";
    p.options.include_paths = {dir / "inc"};
    c.setup(p);
    LogCapture log;
    CompileCache cache(nv, in(dir / "c"));
    const auto r = cache.compile(p);
    EXPECT_EQ(r.outcome, CacheOutcome::uncached);
    EXPECT_EQ(r.miss_reason.rfind(c.reason, 0), 0u) << r.miss_reason;
    EXPECT_EQ(value_in(r.result.image), 3) << "the compile itself is the real one";
    EXPECT_EQ(cache.compile(p).outcome, CacheOutcome::uncached) << "not in memory either";
    EXPECT_EQ(cache.stats().uncached, 2u);
    EXPECT_EQ(cache.stats().writes, 0u);
    EXPECT_EQ(cache.disk_bytes(), 0u);
    EXPECT_TRUE(log.has(std::string("compile cache: not caching prog.cu: ") + c.reason)) << log.all();
  }
}

// Defect 5 (and 9's stress test): a header that changed moments before a
// compile may change again without its time stamps showing it, so what NVRTC
// read is not known: returned, not stored; once settled, stored.
TEST(CompileCache, AHeaderChangedMomentsBeforeTheCompileKeepsItOutOfTheCache) {
  TempDir dir;
  fs::create_directories(dir / "inc");
  KernelSource p;
  p.source = "#include \"v.h\"\n" + std::string(kValueKernel);
  p.name = "prog.cu";
  p.options.arch = "compute_90";
  p.options.include_paths = {dir / "inc"};
  CompileCache cache(load_nvrtc(), in(dir / "c"));
  write_all(dir / "inc/v.h", value_header(4));
  const auto r = cache.compile(p);
  EXPECT_EQ(r.outcome, CacheOutcome::uncached);
  EXPECT_NE(r.miss_reason.find("v.h changed moments before the compile"), std::string::npos) << r.miss_reason;
  EXPECT_EQ(value_in(r.result.image), 4);
  EXPECT_EQ(cache.disk_bytes(), 0u);
  settle();
  EXPECT_EQ(cache.compile(p).outcome, CacheOutcome::compiled);
  EXPECT_EQ(cache.compile(p).outcome, CacheOutcome::memory_hit);
}

// Defect 6: every directory below the root gets the root's checks.
TEST(CompileCache, EveryDirectoryBelowTheRootIsCheckedLikeTheRoot) {
  TempDir dir;
  const auto nv = load_nvrtc();
  for (const std::string sub : {"v1", "v1/objects"}) {
    SCOPED_TRACE(sub);
    const std::string root = dir / ("c-" + sub.substr(sub.size() - 2));
    (void)CompileCache(nv, in(root)).compile(program(1));
    fs::permissions(root + "/" + sub, fs::perms::all);
    LogCapture log;
    CompileCache cache(nv, in(root));
    EXPECT_FALSE(cache.disk_enabled());
    EXPECT_NE(cache.disabled_reason().find(root + "/" + sub + " is writable by group or others (mode 0777)"),
              std::string::npos)
        << cache.disabled_reason();
    EXPECT_TRUE(log.has(root + "/" + sub + " is writable by group or others")) << log.all();
    EXPECT_EQ(cache.compile(program(1)).outcome, CacheOutcome::uncached);
  }
  {
    SCOPED_TRACE("a fan-out directory under v1/objects");
    const std::string root = dir / "c-fan";
    const auto first = CompileCache(nv, in(root)).compile(program(1));
    const std::string fan = root + "/v1/objects/" + first.key.substr(0, 2);
    fs::permissions(fan, fs::perms::all);
    LogCapture log;
    CompileCache cache(nv, in(root));
    ASSERT_TRUE(cache.disk_enabled());
    const auto r = cache.compile(program(1));
    EXPECT_EQ(r.outcome, CacheOutcome::compiled) << "the entry in it is not used";
    EXPECT_EQ(r.miss_reason, "unsafe directory (" + fan + " is writable by group or others (mode 0777); chmod 700 it)");
    EXPECT_TRUE(log.has(fan + " is writable by group or others")) << log.all();
    EXPECT_EQ(cache.stats().write_failures, 1u) << "nor written into";
  }
  {
    SCOPED_TRACE("v1/toolchain, v1/locks, v1/tmp");
    const std::string root = dir / "c-rest";
    (void)CompileCache(nv, in(root)).compile(program(1));
    for (const char* sub : {"/v1/toolchain", "/v1/locks", "/v1/tmp"}) fs::permissions(root + sub, fs::perms::all);
    LogCapture log;
    CompileCache cache(nv, in(root));
    const auto r = cache.compile(program(2));
    EXPECT_EQ(r.outcome, CacheOutcome::compiled);
    for (const char* sub : {"/v1/toolchain", "/v1/locks", "/v1/tmp"}) {
      EXPECT_TRUE(log.has(root + sub + " is writable by group or others")) << sub << "\n" << log.all();
    }
    EXPECT_EQ(cache.stats().writes, 0u) << "no temporary file in a refused v1/tmp";
  }
}

// Defect 6: a FIFO where an entry (or the toolchain memo) should be never blocks.
TEST(CompileCache, AFifoInPlaceOfAnEntryOrMemoNeverBlocks) {
  TempDir dir;
  const auto nv = load_nvrtc();
  const std::string root = dir / "c";
  const std::string key = CompileCache(nv, in(root)).compile(program(1)).key;
  const std::string entry = entry_path(root, key);
  std::vector<std::string> fifos = {entry};
  for (const auto& e : fs::directory_iterator(root + "/v1/toolchain")) fifos.push_back(e.path().string());
  for (const auto& f : fifos) {
    fs::remove(f);
    ASSERT_EQ(::mkfifo(f.c_str(), 0600), 0) << f;
  }
  auto attempt = std::async(std::launch::async, [&] {
    CompileCache cache(NvrtcLoadOptions{}, in(root));
    return cache.compile(program(1));
  });
  if (attempt.wait_for(std::chrono::seconds(20)) != std::future_status::ready) {
    // Blocked in open(): a writer releases each FIFO it waits on, so the test fails instead of hanging.
    while (attempt.wait_for(std::chrono::milliseconds(50)) != std::future_status::ready) {
      for (const auto& f : fifos) {
        const int fd = ::open(f.c_str(), O_WRONLY | O_NONBLOCK);
        if (fd >= 0) ::close(fd);
      }
    }
    (void)attempt.get();
    FAIL() << "compile() blocked on a FIFO";
  }
  const auto r = attempt.get();
  EXPECT_EQ(r.outcome, CacheOutcome::compiled);
  EXPECT_EQ(r.miss_reason, "unsafe entry (not a regular file)");
  EXPECT_TRUE(fs::is_regular_file(entry)) << "replaced by the real entry";
}

// Defect 10: a write updates a size ledger; the full scan (listing every
// entry) runs when the ledger is missing, every 256 writes, or over the cap.
TEST(CompileCache, AWriteUpdatesTheSizeLedgerInsteadOfListingEveryEntry) {
  TempDir dir;
  const std::string root = dir / "c";
  CompileCache cache(load_nvrtc(), in(root));
  for (int i = 0; i < 6; ++i) EXPECT_EQ(cache.compile(program(100 + i)).outcome, CacheOutcome::compiled);
  EXPECT_EQ(cache.stats().writes, 6u);
  EXPECT_EQ(cache.stats().housekeeping_scans, 1u) << "the first write found no ledger; the others updated it";
  std::istringstream ledger(read_all(root + "/v1/ledger"));
  std::uint64_t bytes = 0, writes = 0;
  ledger >> bytes >> writes;
  EXPECT_EQ(bytes, cache.disk_bytes());
  EXPECT_EQ(writes, 5u);
  fs::remove(root + "/v1/ledger");
  (void)cache.compile(program(200));
  EXPECT_EQ(cache.stats().housekeeping_scans, 2u) << "a missing ledger is rebuilt by a scan";
}

// Defect 10: what crashed writers leave (temporary files) is removed once
// stale and counted until then; lock files nobody holds are removed, held ones kept.
TEST(CompileCache, HousekeepingRemovesWhatCrashedProcessesLeftAndCountsTemporaryFiles) {
  TempDir dir;
  const auto nv = load_nvrtc();
  const std::string root = dir / "c";
  (void)CompileCache(nv, in(root)).compile(program(1));
  write_all(root + "/v1/tmp/stale.tmp", std::string(5000, 's'));
  write_all(root + "/v1/tmp/live.tmp", std::string(3000, 'l'));
  fs::last_write_time(root + "/v1/tmp/stale.tmp", fs::file_time_type::clock::now() - std::chrono::hours(2));
  fs::create_directories(root + "/v1/locks/ab");
  write_all(root + "/v1/locks/ab/unheld", "");
  write_all(root + "/v1/locks/ab/held", "");
  const int held = ::open((root + "/v1/locks/ab/held").c_str(), O_RDWR);
  ASSERT_EQ(::flock(held, LOCK_EX), 0);
  fs::remove(root + "/v1/ledger");  // the next write scans
  CompileCache cache(nv, in(root));
  const std::uint64_t entries_before = cache.disk_bytes() - 8000;
  (void)cache.compile(program(2));
  ::close(held);
  EXPECT_FALSE(fs::exists(root + "/v1/tmp/stale.tmp"));
  EXPECT_TRUE(fs::exists(root + "/v1/tmp/live.tmp")) << "a writer may still be writing it";
  EXPECT_FALSE(fs::exists(root + "/v1/locks/ab/unheld"));
  EXPECT_TRUE(fs::exists(root + "/v1/locks/ab/held"));
  EXPECT_EQ(cache.stats().stale_removed, 2u);
  const std::uint64_t entries_after = cache.disk_bytes() - 3000;
  EXPECT_GT(entries_after, entries_before) << "disk_bytes counts the live temporary file";
  std::istringstream ledger(read_all(root + "/v1/ledger"));
  std::uint64_t bytes = 0;
  ledger >> bytes;
  EXPECT_EQ(bytes, cache.disk_bytes()) << "the scan's total includes the live temporary file";
  EXPECT_TRUE(fs::is_empty(root + "/v1/locks/" + cache.compile(program(2)).key.substr(0, 2)))
      << "the writer removed its own lock file";
}

// Defect 10: a cap smaller than an entry stores nothing (instead of writing and
// evicting every entry); eviction never removes the entry just written.
TEST(CompileCache, ACapSmallerThanAnEntryStoresNothingAndTheNewestEntryIsKept) {
  TempDir dir;
  const auto nv = load_nvrtc();
  const std::uint64_t one = [&] {
    CompileCache probe(nv, in(dir / "size"));
    (void)probe.compile(program(1));
    return probe.disk_bytes();
  }();
  {
    auto o = in(dir / "tiny");
    o.max_bytes = one - 1;
    CompileCache cache(nv, o);
    const auto r = cache.compile(program(1));
    EXPECT_EQ(r.outcome, CacheOutcome::compiled);
    EXPECT_EQ(cache.stats().oversized, 1u);
    EXPECT_EQ(cache.stats().writes, 0u);
    EXPECT_EQ(cache.stats().evictions, 0u);
    EXPECT_FALSE(fs::exists(entry_path(dir / "tiny", r.key)));
  }
  {
    // Room for one small entry and not quite one large one: the large one,
    // written last, stays; the small one goes.
    auto o = in(dir / "tight");
    KernelSource large = program(2);
    large.source += "__device__ char blob[] = \"" + std::string(one, 'x') + "\";\n";
    CompileCache cache(nv, o);
    const auto small = cache.compile(program(3));
    const auto big = cache.compile(large);
    const std::uint64_t big_size = fs::file_size(entry_path(dir / "tight", big.key));
    auto tight = in(dir / "tight");
    tight.max_bytes = big_size + big_size / 20;  // the big entry alone is above 90 % of it
    fs::remove(entry_path(dir / "tight", big.key));
    fs::remove(dir / "tight/v1/ledger");
    CompileCache capped(nv, tight);
    EXPECT_EQ(capped.compile(large).outcome, CacheOutcome::compiled);
    EXPECT_TRUE(fs::exists(entry_path(dir / "tight", big.key))) << "the entry just written is kept";
    EXPECT_FALSE(fs::exists(entry_path(dir / "tight", small.key))) << "the older one is evicted";
    EXPECT_EQ(capped.stats().evictions, 1u);
  }
}

std::vector<std::string> split_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) out.push_back(line);
  return out;
}

// Defects 5 and 9, and the stress test: compiles from several threads
// and processes while a header changes under them (in place and by rename,
// same size). Whatever the interleaving: every image is one of the header's
// versions, one key never gives two images, and afterwards every version
// compiles to its own value (no entry was stored under another version's key).
// An in-place rewrite can show NVRTC a truncated header: such a compile fails
// (and is cached nowhere), which is counted, not an error of the cache.
// Short (about two seconds; five under ThreadSanitizer, where CI runs it too).
TEST(CompileCache, StressThreadsAndProcessesCompileWhileHeadersChange) {
  TempDir dir;
  fs::create_directories(dir / "inc");
  const std::string header = dir / "inc/value.h";
  write_all(header, value_header(0));
  settle();
  const std::string root = dir / "c";
  constexpr int kVersions = 6;
  constexpr int kThreads = 3;
  constexpr int kProcesses = 2;
  // Under ThreadSanitizer a compile takes ten times longer: more time, so that
  // compiles are also stored and hit between the header's changes there.
#if defined(__SANITIZE_THREAD__)
  constexpr int kMillis = 4000;
  constexpr unsigned kQuietMillis = 700;
#else
  constexpr int kMillis = 1500;
  constexpr unsigned kQuietMillis = 250;
#endif
  KernelSource p;
  p.source = "#include \"value.h\"\n" + std::string(kValueKernel);
  p.name = "stress.cu";
  p.options.arch = "compute_90";
  p.options.include_paths = {dir / "inc"};

  const std::string start = dir / "start";
  std::vector<pid_t> pids;
  for (int i = 0; i < kProcesses; ++i) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string out = dir / ("out" + std::to_string(i));
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    std::vector<std::string> args = {DRVSHIM_TEST_CACHE_WORKER, "--stress", root, dir / "inc", start, std::to_string(kMillis)};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    pids.push_back(pid);
  }

  struct Seen {
    std::string outcome;
    std::string key;
    int value;
  };
  std::mutex seen_mutex;
  std::vector<Seen> seen;
  std::atomic<bool> stop{false};
  CompileCache cache(NvrtcLoadOptions{}, in(root));
  write_all(start, "go");
  std::thread writer([&] {
    std::mt19937 rng(18);
    for (int round = 0; !stop.load(); ++round) {
      const std::string text = value_header(static_cast<int>(rng() % kVersions));
      if (round % 2 == 0) {
        write_all(header, text);  // in place
      } else {
        write_all(header + ".new", text);  // a new inode
        fs::rename(header + ".new", header);
      }
      // Bursts of changes, then quiet spells in which compiles are stored and hit.
      std::this_thread::sleep_for(std::chrono::milliseconds(round % 4 == 3 ? kQuietMillis + rng() % 100 : 1 + rng() % 5));
    }
  });
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(kMillis);
      while (std::chrono::steady_clock::now() < deadline) {
        try {
          const auto r = cache.compile(p);
          std::lock_guard<std::mutex> lock(seen_mutex);
          seen.push_back({to_string(r.outcome), r.key, value_in(r.result.image)});
        } catch (const NvrtcCompileError&) {
          // NVRTC read the header while the writer had it truncated: a failed compile, cached nowhere.
          std::lock_guard<std::mutex> lock(seen_mutex);
          seen.push_back({"failed", "", 0});
        }
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "worker status " << status;
  }
  stop = true;
  writer.join();
  for (int i = 0; i < kProcesses; ++i) {
    for (const auto& line : split_lines(read_all(dir / ("out" + std::to_string(i))))) {
      // "<outcome>|<key>|<value>"
      const auto a = line.find('|'), b = line.rfind('|');
      ASSERT_TRUE(a != std::string::npos && b > a) << line;
      seen.push_back({line.substr(0, a), line.substr(a + 1, b - a - 1), std::stoi(line.substr(b + 1))});
    }
  }
  std::map<std::string, int> value_of_key;
  std::map<std::string, int> outcomes;
  for (const auto& s : seen) {
    ++outcomes[s.outcome];
    EXPECT_GE(s.value, 0) << s.outcome;
    EXPECT_LT(s.value, kVersions) << s.outcome;
    if (s.outcome == "uncached" || s.outcome == "failed") continue;  // compiled from whatever was there, stored nowhere
    const auto [it, first] = value_of_key.emplace(s.key, s.value);
    EXPECT_EQ(it->second, s.value) << "key " << s.key.substr(0, 16) << " gave two images (" << s.outcome << ")";
  }
  EXPECT_GT(seen.size(), static_cast<std::size_t>(kThreads + kProcesses));
  std::string summary;
  for (const auto& [o, n] : outcomes) summary += o + " " + std::to_string(n) + "; ";
  std::cout << "[ stress   ] " << seen.size() << " compiles: " << summary << "\n";
  // Afterwards, settled: each version compiles (or hits) to its own value.
  for (int v = 0; v < kVersions; ++v) {
    write_all(header, value_header(v));
    settle();
    CompileCache fresh(NvrtcLoadOptions{}, in(root));
    const auto r = fresh.compile(p);
    EXPECT_EQ(value_in(r.result.image), v) << to_string(r.outcome) << " " << r.miss_reason;
    EXPECT_NE(r.outcome, CacheOutcome::uncached) << r.miss_reason;
  }
}

// Each way an entry can be damaged: removed, counted, recompiled, rewritten; never an error.
TEST(CompileCache, CorruptTruncatedForeignAndUnsafeEntriesAreRemovedAndRecompiled) {
  TempDir dir;
  const auto nv = load_nvrtc();
  const std::string root = dir / "c";
  std::string other_key;
  std::string other_bytes;
  {
    CompileCache cache(nv, in(root));
    other_key = cache.compile(program(7)).key;
    other_bytes = read_all(entry_path(root, other_key));
  }
  struct Damage {
    const char* name;
    std::function<void(const std::string& path, const std::string& bytes)> apply;
    const char* reason;
  };
  const std::vector<Damage> damages = {
      {"empty file", [](const std::string& path, const std::string&) { write_all(path, ""); }, "corrupt entry (truncated)"},
      {"truncated", [](const std::string& path, const std::string& b) { write_all(path, b.substr(0, b.size() / 2)); },
       "corrupt entry (checksum mismatch"},
      {"one byte flipped",
       [](const std::string& path, const std::string& b) {
         std::string c = b;
         c[c.size() / 2] = static_cast<char>(c[c.size() / 2] ^ 0x20);
         write_all(path, c);
       },
       "corrupt entry (checksum mismatch"},
      {"not an entry", [](const std::string& path, const std::string& b) { write_all(path, std::string(b.size(), 'x')); },
       "corrupt entry (not a drvshim entry"},
      {"an older format",
       [](const std::string& path, const std::string& b) {
         std::string c = b;
         c[8] = 1;  // the format number after the 8-byte magic: 1 had a SHA-256 trailer
         write_all(path, c);
       },
       "corrupt entry (unknown format 1)"},
      {"another key's entry", [&](const std::string& path, const std::string&) { write_all(path, other_bytes); },
       "corrupt entry (foreign entry"},
      {"writable by others",
       [](const std::string& path, const std::string&) { fs::permissions(path, fs::perms::others_write, fs::perm_options::add); },
       "unsafe entry (writable by group or others)"},
      {"a symbolic link",
       [&](const std::string& path, const std::string&) {
         fs::remove(path);
         fs::create_symlink(entry_path(root, other_key), path);
       },
       "unsafe entry (a symbolic link)"},
  };
  for (const auto& d : damages) {
    SCOPED_TRACE(d.name);
    CompileCache cache(nv, in(root));
    const auto good = cache.compile(program());
    const std::string path = entry_path(root, good.key);
    const std::string bytes = read_all(path);
    ASSERT_FALSE(bytes.empty());
    d.apply(path, bytes);
    CompileCache fresh(nv, in(root));
    const auto r = fresh.compile(program());
    EXPECT_EQ(r.outcome, CacheOutcome::compiled);
    EXPECT_EQ(r.miss_reason.rfind(d.reason, 0), 0u) << r.miss_reason;
    EXPECT_EQ(r.result.image, good.result.image);
    EXPECT_EQ(fresh.stats().corrupt_removed, 1u);
    EXPECT_EQ(read_all(path).size(), bytes.size()) << "rewritten whole (only its time stamps differ)";
    EXPECT_FALSE(fs::is_symlink(path));
    CompileCache again(nv, in(root));
    EXPECT_EQ(again.compile(program()).outcome, CacheOutcome::disk_hit);
  }
  EXPECT_EQ(read_all(entry_path(root, other_key)), other_bytes) << "the other entry was never touched";
}

TEST(CompileCache, RefusesADirectoryWritableByOthersASymlinkOrAnotherUsersAndStillCompiles) {
  TempDir dir;
  const auto nv = load_nvrtc();
  fs::create_directories(dir / "open");
  fs::permissions(dir / "open", fs::perms::all);
  CompileCache open(nv, in(dir / "open"));
  EXPECT_FALSE(open.disk_enabled());
  EXPECT_NE(open.disabled_reason().find("writable by group or others (mode 0777)"), std::string::npos)
      << open.disabled_reason();
  const auto r = open.compile(program());
  EXPECT_EQ(r.outcome, CacheOutcome::uncached);
  EXPECT_FALSE(r.result.image.empty());
  EXPECT_FALSE(fs::exists(dir / "open/v1")) << "nothing written into a refused directory";

  fs::create_directories(dir / "real");
  fs::create_directory_symlink(dir / "real", dir / "link");
  CompileCache link(nv, in(dir / "link"));
  EXPECT_FALSE(link.disk_enabled());
  EXPECT_NE(link.disabled_reason().find("symbolic link"), std::string::npos) << link.disabled_reason();

  std::string foreign = "/usr";  // owned by root: another user's unless the tests run as root
  if (geteuid() == 0) {
    fs::create_directories(dir / "theirs");
    ASSERT_EQ(chown((dir / "theirs").c_str(), 12345, 12345), 0);
    fs::permissions(dir / "theirs", fs::perms::owner_all, fs::perm_options::replace);
    foreign = dir / "theirs";
  }
  CompileCache theirs(nv, in(foreign));
  EXPECT_FALSE(theirs.disk_enabled());
  EXPECT_NE(theirs.disabled_reason().find("is owned by uid"), std::string::npos) << theirs.disabled_reason();

  CompileCache relative(nv, in("relative/dir"));
  EXPECT_FALSE(relative.disk_enabled());
  EXPECT_NE(relative.disabled_reason().find("not an absolute path"), std::string::npos);
}

TEST(CompileCache, DisabledCompilesEveryTimeAndWritesNothing) {
  TempDir dir;
  auto o = in(dir / "c");
  o.enabled = false;
  CompileCache cache(load_nvrtc(), o);
  EXPECT_EQ(cache.compile(program()).outcome, CacheOutcome::uncached);
  EXPECT_EQ(cache.compile(program()).outcome, CacheOutcome::uncached);
  EXPECT_EQ(cache.stats().compiles, 2u);
  EXPECT_FALSE(fs::exists(dir / "c"));

  ::setenv("DRVSHIM_CACHE_DISABLE", "1", 1);
  ::setenv("DRVSHIM_CACHE_DIR", (dir / "env").c_str(), 1);
  const auto env = CacheOptions::from_environment();
  ::unsetenv("DRVSHIM_CACHE_DISABLE");
  ::unsetenv("DRVSHIM_CACHE_DIR");
  EXPECT_FALSE(env.enabled);
  EXPECT_EQ(env.directory, dir / "env");
}

TEST(CompileCache, ReadOnlyReadsButNeverWritesOrClears) {
  TempDir dir;
  const auto nv = load_nvrtc();
  const std::string root = dir / "c";
  {
    CompileCache writer(nv, in(root));
    (void)writer.compile(program(1));
  }
  const auto before = CompileCache(nv, in(root)).disk_bytes();
  auto o = in(root);
  o.read_only = true;
  CompileCache ro(nv, o);
  ASSERT_TRUE(ro.disk_enabled()) << ro.disabled_reason();
  EXPECT_EQ(ro.compile(program(1)).outcome, CacheOutcome::disk_hit);
  EXPECT_EQ(ro.compile(program(2)).outcome, CacheOutcome::compiled);
  EXPECT_EQ(ro.stats().writes, 0u);
  EXPECT_EQ(ro.disk_bytes(), before);
  expect_throw<InvalidArgumentError>([&] { ro.clear(); });

  auto missing = in(dir / "missing");
  missing.read_only = true;
  CompileCache none(nv, missing);
  EXPECT_FALSE(none.disk_enabled());
  EXPECT_FALSE(fs::exists(dir / "missing")) << "read-only never creates the directory";
}

TEST(CompileCache, EvictsTheLeastRecentlyUsedEntriesAboveTheCap) {
  TempDir dir;
  const auto nv = load_nvrtc();
  const std::string root = dir / "c";
  std::string a, b;
  std::uint64_t two = 0;
  {
    CompileCache cache(nv, in(root));
    a = cache.compile(program(10)).key;
    b = cache.compile(program(11)).key;
    two = cache.disk_bytes();
  }
  // A used long ago, B less long ago; a hit on A makes it the most recent.
  const auto now = fs::file_time_type::clock::now();
  fs::last_write_time(entry_path(root, a), now - std::chrono::hours(2));
  fs::last_write_time(entry_path(root, b), now - std::chrono::hours(1));
  auto o = in(root);
  o.max_bytes = two * 13 / 10;  // room for 2.6 entries of this size
  CompileCache cache(nv, o);
  EXPECT_EQ(cache.compile(program(10)).outcome, CacheOutcome::disk_hit);
  EXPECT_EQ(cache.compile(program(12)).outcome, CacheOutcome::compiled);
  EXPECT_EQ(cache.stats().evictions, 1u);
  EXPECT_TRUE(fs::exists(entry_path(root, a))) << "A was used recently";
  EXPECT_FALSE(fs::exists(entry_path(root, b))) << "B was the least recently used";
  EXPECT_LE(cache.disk_bytes(), o.max_bytes);
}

TEST(CompileCache, ManyThreadsAskingForOneMissingKeyCauseOneCompile) {
  TempDir dir;
  CompileCache cache(load_nvrtc(), in(dir / "c"));
  std::vector<std::thread> threads;
  std::vector<CacheOutcome> outcomes(8);
  std::vector<std::string> keys(8);
  for (std::size_t i = 0; i < outcomes.size(); ++i) {
    threads.emplace_back([&, i] {
      const auto r = cache.compile(program(42));
      outcomes[i] = r.outcome;
      keys[i] = r.key;
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(cache.stats().compiles, 1u);
  EXPECT_EQ(std::count(outcomes.begin(), outcomes.end(), CacheOutcome::compiled), 1);
  EXPECT_EQ(std::count(outcomes.begin(), outcomes.end(), CacheOutcome::memory_hit), 7);
  EXPECT_EQ(std::count(keys.begin(), keys.end(), keys[0]), 8);
}

TEST(CompileCache, ManyProcessesAskingForOneMissingKeyCauseOneCompile) {
  TempDir dir;
  const std::string start = dir / "start";
  constexpr int kWorkers = 6;
  std::vector<pid_t> pids;
  for (int i = 0; i < kWorkers; ++i) {
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    const std::string out = dir / ("out" + std::to_string(i));
    posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    const std::string cache_dir = dir / "c";
    std::vector<std::string> args = {DRVSHIM_TEST_CACHE_WORKER, cache_dir, start, "5"};
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_t pid = 0;
    ASSERT_EQ(posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), environ), 0);
    posix_spawn_file_actions_destroy(&actions);
    pids.push_back(pid);
  }
  write_all(start, "go");
  for (const pid_t pid : pids) {
    int status = 0;
    ASSERT_EQ(waitpid(pid, &status, 0), pid);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "status " << status;
  }
  int compiled = 0, hits = 0;
  for (int i = 0; i < kWorkers; ++i) {
    const std::string out = read_all(dir / ("out" + std::to_string(i)));
    compiled += out == "compiled\n" ? 1 : 0;
    hits += out == "disk hit\n" ? 1 : 0;
  }
  EXPECT_EQ(compiled, 1);
  EXPECT_EQ(hits, kWorkers - 1);
}

TEST(CompileCache, ALockHeldTooLongIsWaitedOutThenCompiledAnywayNeverADeadlock) {
  TempDir dir;
  const auto nv = load_nvrtc();
  const std::string key = CompileCache(nv, in(dir / "first")).compile(program(3)).key;
  auto o = in(dir / "c");
  o.lock_timeout = std::chrono::milliseconds(150);
  CompileCache cache(nv, o);
  const std::string lock_dir = dir / ("c/v1/locks/" + key.substr(0, 2));
  fs::create_directories(lock_dir);
  const int fd = ::open((lock_dir + "/" + key.substr(2)).c_str(), O_RDWR | O_CREAT, 0600);
  ASSERT_GE(fd, 0);
  // A separate open file description, so the cache's flock conflicts with this one.
  ASSERT_EQ(::flock(fd, LOCK_EX), 0);
  const auto r = cache.compile(program(3));
  ::close(fd);
  EXPECT_EQ(r.outcome, CacheOutcome::compiled);
  EXPECT_GE(r.wall_ms, 150.0);
  EXPECT_EQ(cache.stats().lock_timeouts, 1u);
  EXPECT_EQ(cache.stats().lock_waits, 1u);
}

TEST(CompileCache, AFailedCompileIsNeverCachedAndEveryWaiterSeesTheError) {
  TempDir dir;
  CompileCache cache(load_nvrtc(), in(dir / "c"));
  KernelSource p = program();
  p.source = "__global__ void k() { this is wrong; }\n";
  expect_throw<NvrtcCompileError>([&] { (void)cache.compile(p); });
  expect_throw<NvrtcCompileError>([&] { (void)cache.compile(p); });
  EXPECT_EQ(cache.stats().compiles, 2u);
  EXPECT_EQ(cache.stats().miss_reasons.at("compile failed"), 2u);
  EXPECT_EQ(cache.disk_bytes(), 0u);
}

TEST(CompileCache, ClearRemovesEveryEntry) {
  TempDir dir;
  CompileCache cache(load_nvrtc(), in(dir / "c"));
  (void)cache.compile(program(1));
  (void)cache.compile(program(2));
  EXPECT_GT(cache.disk_bytes(), 0u);
  cache.clear();
  EXPECT_EQ(cache.disk_bytes(), 0u);
  EXPECT_EQ(cache.compile(program(1)).outcome, CacheOutcome::compiled);
}

// The toolchain memo (NVRTC's builtins with their fingerprints, the include
// directory, the targets) spares a fresh process the search for them; one
// that no longer matches the files is ignored, and the keys do not change.
TEST(CompileCache, AStaleToolchainMemoIsIgnoredAndKeysStayTheSame) {
  TempDir dir;
  const std::string root = dir / "c";
  const auto first = CompileCache(load_nvrtc(), in(root)).compile(program(5));
  std::vector<fs::path> memos;
  for (const auto& e : fs::directory_iterator(root + "/v1/toolchain")) memos.push_back(e.path());
  ASSERT_EQ(memos.size(), 1u);
  const std::string memo = read_all(memos[0]);
  const auto l1 = memo.find('\n'), l2 = memo.find('\n', l1 + 1);
  ASSERT_NE(memo.substr(l1 + 1, l2 - l1 - 1).find("libnvrtc-builtins"), std::string::npos) << memo;
  {
    CompileCache lazy(NvrtcLoadOptions{}, in(root));
    EXPECT_EQ(lazy.compile(program(5)).outcome, CacheOutcome::disk_hit);
  }
  std::string stale = memo;
  stale.insert(l2, "7");  // the last builtins fingerprint's time no longer matches the file
  write_all(memos[0], stale);
  CompileCache lazy(NvrtcLoadOptions{}, in(root));
  const auto again = lazy.compile(program(5));
  EXPECT_EQ(again.key, first.key) << "the identity found by looking at the files is the memo's";
  EXPECT_EQ(again.outcome, CacheOutcome::disk_hit);
  EXPECT_FALSE(lazy.nvrtc_loaded());
}

TEST(CompileCache, AnEntryThatCannotBeWrittenIsCountedAndTheResultStillReturned) {
  TempDir dir;
  CompileCache cache(load_nvrtc(), in(dir / "c"));
  // Its temporary directory (opened at the first write) is not a directory: no entry can be written.
  fs::remove_all(dir / "c/v1/tmp");
  write_all(dir / "c/v1/tmp", "");
  const auto r = cache.compile(program(9));
  EXPECT_EQ(r.outcome, CacheOutcome::compiled);
  EXPECT_FALSE(r.result.image.empty());
  EXPECT_EQ(cache.stats().write_failures, 1u);
  EXPECT_EQ(cache.stats().writes, 0u);
  EXPECT_FALSE(fs::exists(entry_path(dir / "c", r.key)));
}

void adds_cpu(const drvshim_fake_launch* l, void** args) {
  auto* p = *static_cast<int* const*>(args[0]);
  for (unsigned i = 0; i < l->block[0]; ++i) p[i] += 1;
}

class CompileCacheLink : public PrimaryContextTest {};

// A device newer than NVRTC's newest target: PTX, linked to SASS by the
// driver, and that SASS is what the cache keeps (keyed by driver and device).
TEST_F(CompileCacheLink, PtxForANewerDeviceIsLinkedOnceAndTheLinkedImageCached) {
  drvshim_fake_register_kernel("add", &adds_cpu);
  drvshim_fake_set_attribute(0, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, 10);
  drvshim_fake_set_attribute(0, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, 1);
  TempDir dir;
  const auto nv = load_nvrtc();
  KernelSource p = program(1);
  p.options.arch.clear();  // chosen from the device
  const auto links_before = drvshim_fake_call_count("cuLinkComplete");
  CachedCompile first = CompileCache(nv, in(dir / "c")).compile_for(ctx(), p);
  EXPECT_EQ(first.outcome, CacheOutcome::compiled);
  EXPECT_TRUE(first.linked);
  EXPECT_TRUE(first.result.cubin);
  EXPECT_NE(std::find(first.result.options.begin(), first.result.options.end(), "--gpu-architecture=compute_100"),
            first.result.options.end());
  EXPECT_EQ(drvshim_fake_call_count("cuLinkComplete"), links_before + 1);
  EXPECT_EQ(drvshim_fake_call_count("cuLinkDestroy"), drvshim_fake_call_count("cuLinkCreate"));

  CompileCache fresh(NvrtcLoadOptions{}, in(dir / "c"));
  const auto second = fresh.compile_for(ctx(), p);
  EXPECT_FALSE(fresh.nvrtc_loaded()) << "the toolchain memo names NVRTC's targets; a hit needs no compiler";
  EXPECT_EQ(second.outcome, CacheOutcome::disk_hit);
  EXPECT_TRUE(second.linked);
  EXPECT_EQ(drvshim_fake_call_count("cuLinkComplete"), links_before + 1) << "a hit does not link again";
  EXPECT_NE(second.key, fresh.compile(program(1)).key) << "the linked entry is keyed apart from the plain PTX";

  auto m = Module::load(ctx(), second.result.image);
  std::vector<int> v(32);
  std::iota(v.begin(), v.end(), 0);
  auto buf = DeviceBuffer::allocate(ctx(), v.size() * sizeof(int));
  copy(buf.as<int>(), std::span<const int>(v));
  launch(m.kernel("add"), LaunchConfig{{1}, {32}, 0, {}, {}}, buf.address());
  copy(std::span<int>(v), DeviceSpan<const int>(buf.as<int>()));
  EXPECT_EQ(v[31], 32);
}

TEST_F(CompileCacheLink, ALinkFailureCarriesTheJitLogAndLeavesNoLinkState) {
  const std::string bad = ".version 8.0\n.target sm_90\n.visible .entry broken( {\n";
  const auto e = expect_throw<CudaError>(
      [&] { (void)link_ptx(ctx(), std::as_bytes(std::span<const char>(bad.data(), bad.size())), "broken.ptx"); });
  EXPECT_NE(std::string(e.what()).find("cuLinkAddData"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("broken.ptx"), std::string::npos) << e.what();
  EXPECT_EQ(drvshim_fake_call_count("cuLinkDestroy"), drvshim_fake_call_count("cuLinkCreate"));
  const std::string not_ptx = "\x7f" "ELF....";
  expect_throw<InvalidArgumentError>(
      [&] { (void)link_ptx(ctx(), std::as_bytes(std::span<const char>(not_ptx.data(), not_ptx.size())), "x"); });
}

}  // namespace
