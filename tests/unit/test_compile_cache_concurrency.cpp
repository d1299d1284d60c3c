// SPDX-License-Identifier: Apache-2.0
// The NVRTC compile cache under concurrency: one compile per key across
// threads and processes, the lock timeout, failed compiles seen by every
// waiter, and the stress test with headers changing under the compiles.
#include "compile_cache_test_support.hpp"

using namespace cache_test;

namespace {

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
    std::vector<std::string> args = {DRVSHIM_TEST_CACHE_WORKER, "--stress", root, dir / "inc", start,
                                     std::to_string(kMillis)};
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
      std::this_thread::sleep_for(
          std::chrono::milliseconds(round % 4 == 3 ? kQuietMillis + rng() % 100 : 1 + rng() % 5));
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

}  // namespace
