// SPDX-License-Identifier: Apache-2.0
// The NVRTC compile cache on disk: directory trust (every directory checked
// like the root, FIFOs, other users' and writable-by-others directories), the
// size ledger and housekeeping, every corruption kind, read-only and disabled
// modes, LRU eviction and the cap, clear, unwritable entries.
#include "compile_cache_test_support.hpp"

using namespace cache_test;

namespace {

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
      {"empty file", [](const std::string& path, const std::string&) { write_all(path, ""); },
       "corrupt entry (truncated)"},
      {"truncated", [](const std::string& path, const std::string& b) { write_all(path, b.substr(0, b.size() / 2)); },
       "corrupt entry (checksum mismatch"},
      {"one byte flipped",
       [](const std::string& path, const std::string& b) {
         std::string c = b;
         c[c.size() / 2] = static_cast<char>(c[c.size() / 2] ^ 0x20);
         write_all(path, c);
       },
       "corrupt entry (checksum mismatch"},
      {"not an entry",
       [](const std::string& path, const std::string& b) { write_all(path, std::string(b.size(), 'x')); },
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
       [](const std::string& path, const std::string&) {
         fs::permissions(path, fs::perms::others_write, fs::perm_options::add);
       },
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

// Something that keeps the collector out (here a directory named gc.lock)
// would let the cache grow past its cap: it is said, once per cache.
TEST(CompileCache, AGcLockThatCannotBeTakenIsSaidOnce) {
  TempDir dir;
  const auto nv = load_nvrtc();
  const std::string root = dir / "c";
  fs::create_directories(root + "/gc.lock");
  CacheOptions o = in(root);
  o.max_bytes = 2048;
  LogCapture log;
  CompileCache cache(nv, o);
  for (int i = 0; i < 4; ++i) (void)cache.compile(program(10 + i));
  const std::string warning = root + "/gc.lock cannot be opened as this user's lock file";
  EXPECT_EQ(log.count(warning), 1u) << log.all();
  EXPECT_TRUE(log.has("the cache is not kept under its size cap of 2048 bytes")) << log.all();
  EXPECT_EQ(cache.stats().housekeeping_scans, 0u);
}

// A compile that fails, or is not stored, leaves no lock file behind.
TEST(CompileCache, NoLockFileOutlivesItsCompile) {
  TempDir dir;
  const auto nv = load_nvrtc();
  const std::string root = dir / "c";
  CompileCache cache(nv, in(root));
  (void)cache.compile(program(1));
  KernelSource bad = program(2);
  bad.source += "this does not compile;\n";
  expect_throw<NvrtcCompileError>([&] { (void)cache.compile(bad); });
  std::size_t files = 0;
  for (const auto& e : fs::recursive_directory_iterator(root + "/v1/locks")) files += e.is_regular_file() ? 1u : 0u;
  EXPECT_EQ(files, 0u);
}

// A directory where an entry belongs (left by hand or a stray tool) is
// removed like any bad entry, so the key is stored again.
TEST(CompileCache, ADirectoryInPlaceOfAnEntryIsRemovedAndTheKeyStoredAgain) {
  TempDir dir;
  const auto nv = load_nvrtc();
  const std::string root = dir / "c";
  const auto first = CompileCache(nv, in(root)).compile(program(3));
  const std::string entry = entry_path(root, first.key);
  fs::remove(entry);
  fs::create_directories(entry + "/inner/deeper");
  write_all(entry + "/inner/file", "x");
  CompileCache cache(nv, in(root));
  const auto again = cache.compile(program(3));
  EXPECT_EQ(again.outcome, CacheOutcome::compiled);
  EXPECT_EQ(again.miss_reason, "unsafe entry (not a regular file)");
  EXPECT_EQ(cache.stats().corrupt_removed, 1u);
  EXPECT_EQ(cache.stats().writes, 1u);
  EXPECT_TRUE(fs::is_regular_file(entry));
  EXPECT_EQ(CompileCache(nv, in(root)).compile(program(3)).outcome, CacheOutcome::disk_hit);
}

}  // namespace
