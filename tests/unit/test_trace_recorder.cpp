// SPDX-License-Identifier: Apache-2.0
// The trace recorder behind drvshim::trace (recorder/): the trace file's
// safety (no symbolic link followed, mode 0600, owner check, whole records,
// a cap with a last record), the pid in every record, fork (fresh numbering,
// no deadlock), and many threads recording at once.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <thread>
#include <vector>

#include "fixture.hpp"

using namespace drvshim;
using namespace drvshim_test;
namespace fs = std::filesystem;

namespace {

class TraceRecorder : public FakeDriverTest {
 protected:
  void SetUp() override {
    FakeDriverTest::SetUp();
    char tmpl[] = "/tmp/drvshim_recorder_XXXXXX";
    ASSERT_NE(mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    trace::set_file("");
    ::unsetenv("DRVSHIM_TRACE_MAX_BYTES");
    std::error_code ec;
    fs::remove_all(dir_, ec);
    FakeDriverTest::TearDown();
  }
  std::string path(const char* name) const { return (fs::path(dir_) / name).string(); }
  std::string dir_;
};

// The file's lines, without the "thread" records that name each thread once.
std::vector<std::string> lines_of(const std::string& path) {
  std::ifstream in(path);
  std::vector<std::string> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.find("\"kind\":\"thread\"") == std::string::npos) out.push_back(line);
  }
  return out;
}

// Waits for a child at most `seconds`; kills it when it hangs. Returns its exit code, or -1 when it hung.
int wait_or_kill(pid_t pid, int seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(seconds);
  int status = 0;
  while (std::chrono::steady_clock::now() < deadline) {
    const pid_t r = waitpid(pid, &status, WNOHANG);
    if (r == pid) return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  kill(pid, SIGKILL);
  waitpid(pid, &status, 0);
  return -1;
}

TEST_F(TraceRecorder, TheFileIsNeverOpenedThroughASymbolicLink) {
  const std::string target = path("target");
  { std::ofstream(target) << ""; }
  const std::string link = path("link.jsonl");
  fs::create_symlink(target, link);
  auto e = expect_throw<InvalidArgumentError>([&] { trace::set_file(link); });
  EXPECT_NE(std::string(e.what()).find("symbolic link"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find(link), std::string::npos) << e.what();
  EXPECT_FALSE(trace::enabled());
  trace::mark("after", "the refused file");
  EXPECT_EQ(fs::file_size(target), 0u) << "nothing was written through the link";
}

TEST_F(TraceRecorder, ANewFileIsReadableByItsOwnerOnly) {
  const mode_t old = ::umask(022);
  const std::string file = path("new.jsonl");
  trace::set_file(file);
  ::umask(old);
  struct stat st {};
  ASSERT_EQ(::stat(file.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
}

TEST_F(TraceRecorder, AFileOfAnotherUserIsRefused) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a file to another user";
  const std::string file = path("theirs.jsonl");
  { std::ofstream(file) << ""; }
  ASSERT_EQ(::chown(file.c_str(), 65534, 65534), 0);
  auto e = expect_throw<InvalidArgumentError>([&] { trace::set_file(file); });
  EXPECT_NE(std::string(e.what()).find("belongs to uid 65534"), std::string::npos) << e.what();
  EXPECT_FALSE(trace::enabled());
}

TEST_F(TraceRecorder, AFifoIsRefusedWithoutBlocking) {
  const std::string fifo = path("fifo");
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto e = expect_throw<InvalidArgumentError>([&] { trace::set_file(fifo); });
  EXPECT_NE(std::string(e.what()).find("not a regular file"), std::string::npos) << e.what();
}

TEST_F(TraceRecorder, EveryRecordCarriesThePid) {
  const std::string file = path("pid.jsonl");
  trace::set_file(file);
  for (int i = 0; i < 3; ++i) trace::mark("step", std::to_string(i));
  trace::set_file("");
  const auto lines = lines_of(file);
  ASSERT_EQ(lines.size(), 3u);
  const std::string pid = "\"pid\":" + std::to_string(::getpid()) + ",";
  for (const auto& l : lines) EXPECT_NE(l.find(pid), std::string::npos) << l;
}

TEST_F(TraceRecorder, TheFileStopsAtItsCapWithALastRecordSayingSo) {
  ::setenv("DRVSHIM_TRACE_MAX_BYTES", "16384", 1);
  const std::string file = path("capped.jsonl");
  trace::set_file(file);
  const std::string detail(200, 'x');
  for (int i = 0; i < 500; ++i) {
    trace::mark("step", detail);
    if (i % 50 == 0) (void)trace::records();  // several drains, as the writer makes them
  }
  trace::set_file("");
  const auto lines = lines_of(file);
  ASSERT_FALSE(lines.empty());
  EXPECT_LE(fs::file_size(file), 16384u);
  EXPECT_NE(lines.back().find("\"api\":\"trace-truncated\""), std::string::npos) << lines.back();
  EXPECT_NE(lines.back().find("cap of 16384 bytes"), std::string::npos) << lines.back();
  for (std::size_t i = 0; i + 1 < lines.size(); ++i) EXPECT_NE(lines[i].find("\"api\":\"step\""), std::string::npos);
  EXPECT_GT(trace::dropped(), 0u);
}

TEST_F(TraceRecorder, AnInvalidCapIsNamedAndTheDefaultUsed) {
  ::setenv("DRVSHIM_TRACE_MAX_BYTES", "-5", 1);
  std::vector<std::string> logged;
  log::set_sink([&](log::Level, std::string_view line) { logged.emplace_back(line); });
  trace::set_file(path("default-cap.jsonl"));
  log::set_sink({});
  ASSERT_EQ(logged.size(), 1u);
  EXPECT_NE(logged[0].find("DRVSHIM_TRACE_MAX_BYTES=\"-5\" is not a byte count"), std::string::npos) << logged[0];
}

TEST_F(TraceRecorder, ProcessesSharingTheFileNeverSplitARecord) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer cannot start a thread (the children's writers) after a multi-threaded fork";
#endif
  const std::string file = path("shared.jsonl");
  constexpr int kChildren = 4;
  constexpr int kRecords = 200;
  constexpr std::size_t kBytes = 12000;  // under the recorder's 16 KiB cap on a detail
  std::vector<pid_t> children;
  for (int c = 0; c < kChildren; ++c) {
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        trace::set_file(file);
        // Longer than stdio's buffer, so a buffered writer would need several write()s per record.
        const std::string detail(kBytes, static_cast<char>('a' + c));
        for (int i = 0; i < kRecords; ++i) trace::mark("child", detail);
        trace::set_file("");
      } catch (...) {
        _exit(3);
      }
      _exit(0);
    }
    children.push_back(pid);
  }
  for (pid_t pid : children) ASSERT_EQ(wait_or_kill(pid, 60), 0);
  const auto lines = lines_of(file);
  EXPECT_EQ(lines.size(), static_cast<std::size_t>(kChildren * kRecords));
  std::map<char, int> per_child;
  for (const auto& l : lines) {
    ASSERT_EQ(l.rfind("{\"seq\":", 0), 0u) << l.substr(0, 80);
    ASSERT_EQ(l.back(), '}') << l.substr(l.size() - 80);
    const auto at = l.find("\"args\":\"");
    ASSERT_NE(at, std::string::npos);
    const char c = l[at + 8];
    ASSERT_EQ(l.find(std::string(kBytes, c)), at + 8) << "a record mixes the bytes of two processes";
    ++per_child[c];
  }
  for (int c = 0; c < kChildren; ++c) EXPECT_EQ(per_child[static_cast<char>('a' + c)], kRecords);
}

TEST_F(TraceRecorder, AForkedChildNumbersItsRecordsAfreshUnderItsOwnPid) {
  trace::enable(true);
  for (int i = 0; i < 5; ++i) trace::mark("parent", std::to_string(i));
  const auto parent_records = trace::records();
  ASSERT_EQ(parent_records.size(), 5u);
  const pid_t pid = fork();
  if (pid == 0) {
    trace::clear();
    trace::mark("child", "first");
    const auto r = trace::records();
    if (r.size() != 1) _exit(1);
    if (r[0].seq != 1) _exit(2);
    const std::string own_pid = "\"pid\":" + std::to_string(::getpid()) + ",";
    if (trace::to_json(r[0]).find(own_pid) == std::string::npos) _exit(3);
    _exit(0);
  }
  EXPECT_EQ(wait_or_kill(pid, 20), 0) << "1: records, 2: sequence not fresh, 3: pid not the child's";
  EXPECT_NE(trace::to_json(parent_records.back()).find("\"pid\":" + std::to_string(::getpid()) + ","),
            std::string::npos);
  trace::mark("parent", "after");
  EXPECT_EQ(trace::records().back().seq, parent_records.back().seq + 1) << "the parent's numbering goes on";
}

TEST_F(TraceRecorder, ForkedChildrenNeverDeadlockWhileOtherThreadsRecordAndRead) {
  trace::enable(true);
  trace::set_file(path("busy.jsonl"));
  std::atomic<bool> stop{false};
  std::vector<std::thread> busy;
  for (int t = 0; t < 2; ++t) {
    busy.emplace_back([&, t] {
      while (!stop.load()) {
        trace::mark("busy", std::to_string(t));
        if (t == 1) (void)trace::records();
        if (t == 0) trace::clear();
      }
    });
  }
  int hung = 0;
  int failed = 0;
  for (int i = 0; i < 40; ++i) {
    const pid_t pid = fork();
    if (pid == 0) {
      trace::mark("child", "hello");
      (void)trace::records();
      Driver drv = load_fake();
      trace::set_file("");
      _exit(drv.version() > 0 ? 0 : 1);
    }
    const int code = wait_or_kill(pid, 5);
    if (code == -1) ++hung;
    if (code > 0) ++failed;
    if (hung >= 3) break;  // enough to know
  }
  stop.store(true);
  for (auto& t : busy) t.join();
  EXPECT_EQ(hung, 0) << "children deadlocked";
  EXPECT_EQ(failed, 0);
}

TEST_F(TraceRecorder, ForkedChildrenWriteWhileTheParentsWriterWaits) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer cannot start a thread (the children's writers) after a multi-threaded fork";
#endif
  // The parent's writer thread sleeps on its condition variable between drains; a child that
  // fills a chunk wakes its own writer, which must not wait for the parent's sleeper.
  const std::string file = path("children.jsonl");
  trace::set_file(file);
  int hung = 0;
  for (int i = 0; i < 20 && hung == 0; ++i) {
    trace::mark("parent", std::to_string(i));
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    const pid_t pid = fork();
    if (pid == 0) {
      for (int k = 0; k < 3000; ++k) trace::mark("child", "fills more than one chunk");
      trace::set_file("");
      _exit(0);
    }
    if (wait_or_kill(pid, 10) == -1) ++hung;
  }
  trace::set_file("");
  EXPECT_EQ(hung, 0) << "a child hung";
}

TEST_F(TraceRecorder, ManyThreadsKeepEveryRecordInTheirOwnOrder) {
  trace::enable(true);
  constexpr int kThreads = 8;
  constexpr int kRecords = 5000;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      for (int i = 0; i < kRecords; ++i) trace::mark("t" + std::to_string(t), std::to_string(i));
    });
  }
  // A reader drains while they record.
  for (int i = 0; i < 20; ++i) (void)trace::records();
  for (auto& t : threads) t.join();
  const auto records = trace::records();
  ASSERT_EQ(records.size(), static_cast<std::size_t>(kThreads * kRecords));
  std::map<std::string, int> next;
  std::map<std::string, std::uint64_t> tid_of;
  std::uint64_t last_seq = 0;
  for (const auto& r : records) {
    EXPECT_GT(r.seq, last_seq);
    last_seq = r.seq;
    EXPECT_EQ(std::stoi(r.args), next[r.api]++) << "thread " << r.api << " out of order";
    const auto [it, fresh] = tid_of.emplace(r.api, r.thread);
    if (!fresh) {
      EXPECT_EQ(it->second, r.thread);
    }
  }
  EXPECT_EQ(trace::dropped(), 0u);
}

}  // namespace
