// The NVRTC compile cache (the toolkit's real NVRTC; no GPU needed): hits and
// misses with their reasons, what changes the key, every corruption kind, the
// directory's permission refusals, read-only and disabled modes, LRU eviction,
// one compile per key across threads and processes, the lock timeout, and the
// PTX -> SASS link path against the fake driver.
#include <drvshim/compile_cache.hpp>

#include <fcntl.h>
#include <spawn.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <numeric>
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
  const auto b = cache.compile(p);
  EXPECT_EQ(b.outcome, CacheOutcome::compiled) << "the nested header changed";
  EXPECT_NE(b.key, a.key);
  EXPECT_NE(b.result.image, a.result.image);
  write_all(dir / "inc/sub/inner.h", "constexpr int kValue = 1;\n");
  const auto c = cache.compile(p);
  EXPECT_EQ(c.outcome, CacheOutcome::memory_hit) << "back to the first content: the first key";
  EXPECT_EQ(c.key, a.key);
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
