// SPDX-License-Identifier: Apache-2.0
// The recorder itself (linked statically, as drvshim-trace's interposer links
// it): what it writes when records are lost (per thread and reason), when the
// file reaches its cap or cannot be written, when a signal handler records or
// drains while its thread is inside the recorder, and a drain asked for from a
// signal handler.
#include <dlfcn.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include <drvshim_recorder/json_line.hpp>
#include <drvshim_recorder/recorder.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace recorder = drvshim::recorder;
namespace fs = std::filesystem;

namespace {

class RecorderEndings : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/drvshim_recorder_endings_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
  }
  void TearDown() override {
    (void)recorder::set_file("", 0);
    std::error_code ec;
    fs::remove_all(dir_, ec);
  }
  std::string path(const char* name) const { return (fs::path(dir_) / name).string(); }
  std::string dir_;
};

std::vector<std::string> lines_with(const std::string& file, const std::string& what) {
  std::ifstream in(file);
  std::vector<std::string> out;
  for (std::string line; std::getline(in, line);) {
    if (line.find(what) != std::string::npos) out.push_back(line);
  }
  return out;
}

long count_in(const std::string& line) {
  const auto at = line.find("count=");
  return at == std::string::npos ? -1 : std::atol(line.c_str() + at + 6);
}

TEST_F(RecorderEndings, RecordsLostOverTheCapAreSaidPerThreadWithTheReason) {
  const std::string file = path("behind.jsonl");
  ASSERT_EQ(recorder::set_file(file, 0), "");
  const auto budget = static_cast<std::int64_t>(recorder::max_records());
  recorder::testing::take_budget(budget - 10);  // as if the writer were far behind
  for (int i = 0; i < 100; ++i) recorder::event(recorder::Kind::event, "step", "");
  recorder::flush();
  recorder::testing::take_budget(-(budget - 10));
  recorder::flush();
  const auto kept = lines_with(file, "\"api\":\"step\"").size();
  const auto notes = lines_with(file, "\"api\":\"records-dropped\"");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("reason=writer-behind"), std::string::npos) << notes[0];
  EXPECT_NE(notes[0].find("\"tid\":" + std::to_string(recorder::thread_id())), std::string::npos) << notes[0];
  EXPECT_EQ(static_cast<long>(kept) + count_in(notes[0]), 100);
  EXPECT_EQ(kept, 10u);
}

TEST_F(RecorderEndings, RecordsWrittenToTheFileGiveTheirRoomBackSoALongTraceKeepsRecording) {
  // The cap bounds records waiting to be written, not the length of the trace: a program
  // traced to a file for hours writes far more records than the cap.
  const std::string file = path("long.jsonl");
  ASSERT_EQ(recorder::set_file(file, 0), "");
  const auto budget = static_cast<std::int64_t>(recorder::max_records());
  recorder::testing::take_budget(budget - 300);  // as if the cap were 300 records
  for (int batch = 0; batch < 10; ++batch) {
    for (int i = 0; i < 100; ++i) recorder::event(recorder::Kind::event, "step", "");
    recorder::flush();
  }
  recorder::testing::take_budget(-(budget - 300));
  recorder::flush();
  EXPECT_EQ(lines_with(file, "\"api\":\"step\"").size(), 1000u);
  EXPECT_TRUE(lines_with(file, "\"api\":\"records-dropped\"").empty());
}

TEST_F(RecorderEndings, ABatchThatPartlyFitsUnderTheCapIsWrittenUpToIt) {
  const std::string file = path("cap.jsonl");
  ASSERT_EQ(recorder::set_file(file, 4096 + 2000), "");  // 4096 stay for the notice
  const std::string detail(100, 'x');
  for (int i = 0; i < 100; ++i) recorder::event(recorder::Kind::event, "step", detail);
  recorder::flush();
  const auto kept = lines_with(file, "\"api\":\"step\"").size();
  EXPECT_GT(kept, 0u) << "the records that fit are written";
  const auto notice = lines_with(file, "trace-truncated");
  ASSERT_EQ(notice.size(), 1u);
  const auto at = notice[0].find("bytes; ");
  ASSERT_NE(at, std::string::npos) << notice[0];
  EXPECT_EQ(std::atol(notice[0].c_str() + at + 7) + static_cast<long>(kept), 100) << notice[0];
}

TEST_F(RecorderEndings, ATraceFileReplacedByAnotherFileIsNeverWrittenTo) {
  const std::string file = path("replaced.jsonl");
  ASSERT_EQ(recorder::set_file(file, 0), "");
  recorder::event(recorder::Kind::event, "before", "");
  recorder::flush();
  fs::rename(file, path("moved.jsonl"));
  { std::ofstream(file) << "someone else's\n"; }
  recorder::event(recorder::Kind::event, "after", "");
  recorder::flush();
  std::ifstream in(file);
  std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "someone else's\n");
  EXPECT_EQ(lines_with(path("moved.jsonl"), "\"api\":\"before\"").size(), 1u);
  // The trace goes on in the file it was (renamed), never in the file that took its name.
  EXPECT_EQ(lines_with(path("moved.jsonl"), "\"api\":\"after\"").size(), 1u);
}

TEST_F(RecorderEndings, ATraceDescriptorTheProgramReusedForItsOwnFileIsNeverWrittenTo) {
  // Programs close descriptors they did not open (daemons, sandboxes) and get the same
  // numbers back for their own files: a trace line there would corrupt the program's data.
  const std::string file = path("trace.jsonl");
  ASSERT_EQ(recorder::set_file(file, 0), "");
  recorder::event(recorder::Kind::event, "before", "");
  recorder::flush();  // the trace file is open on a descriptor of the recorder's now
  struct stat trace_st {};
  ASSERT_EQ(::stat(file.c_str(), &trace_st), 0);
  int trace_fd = -1;
  for (const auto& entry : fs::directory_iterator("/proc/self/fd")) {
    const int fd = std::atoi(entry.path().filename().c_str());
    struct stat st {};
    if (::fstat(fd, &st) == 0 && st.st_dev == trace_st.st_dev && st.st_ino == trace_st.st_ino) trace_fd = fd;
  }
  ASSERT_GE(trace_fd, 0) << "the recorder's descriptor of the trace file";
  // The program's own regular file, on the same file system, at the trace's number.
  const std::string own = path("own.txt");
  const int own_fd = ::open(own.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  ASSERT_GE(own_fd, 0);
  ASSERT_EQ(::dup2(own_fd, trace_fd), trace_fd);
  ::close(own_fd);
  recorder::event(recorder::Kind::event, "after", "");
  recorder::flush();
  ::close(trace_fd);
  std::ifstream in(own);
  const std::string all((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  EXPECT_EQ(all, "");
  // The trace goes on in the trace file, opened again.
  EXPECT_EQ(lines_with(file, "\"api\":\"before\"").size(), 1u);
  EXPECT_EQ(lines_with(file, "\"api\":\"after\"").size(), 1u);
}

TEST_F(RecorderEndings, AWriteThatFailsLeavesOnlyWholeRecordsAndANotice) {
  const std::string file = path("full.jsonl");
  ASSERT_EQ(recorder::set_file(file, 0), "");
  recorder::event(recorder::Kind::event, "first", "");
  recorder::flush();
  const auto size = fs::file_size(file);
  struct sigaction ignore {
  }, old{};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGXFSZ, &ignore, &old);
  rlimit saved{};
  ::getrlimit(RLIMIT_FSIZE, &saved);
  // A first write of about 64 KiB fits, the next one is cut short after a few bytes.
  const rlimit lim{static_cast<rlim_t>(size + 65536 + 100), saved.rlim_max};
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &lim), 0);
  const std::string detail(200, 'y');
  for (int i = 0; i < 1000; ++i) recorder::event(recorder::Kind::event, "step", detail);
  recorder::flush();
  ::setrlimit(RLIMIT_FSIZE, &saved);
  ::sigaction(SIGXFSZ, &old, nullptr);
  std::ifstream in(file);
  std::string line, last;
  while (std::getline(in, line)) {
    EXPECT_EQ(line.front(), '{');
    EXPECT_EQ(line.back(), '}') << "a torn record";
    last = line;
  }
  EXPECT_NE(last.find("trace-truncated"), std::string::npos) << last;
  EXPECT_NE(last.find("File too large"), std::string::npos) << last;
}

std::string g_file;
void record_in_handler(int) {
  recorder::event(recorder::Kind::event, "from-handler", "");
  recorder::flush();  // must neither deadlock nor throw: the thread holds the consumer lock
}

TEST_F(RecorderEndings, ASignalHandlerRecordingInsideTheRecorderIsCountedNotCorrupting) {
  const std::string file = path("reentrant.jsonl");
  ASSERT_EQ(recorder::set_file(file, 0), "");
  ASSERT_TRUE(recorder::set_file(file, 0).empty());
  recorder::set_memory(true);
  recorder::event(recorder::Kind::event, "outside", "");
  struct sigaction sa {
  }, old{};
  sa.sa_handler = &record_in_handler;
  ::sigaction(SIGUSR1, &sa, &old);
  int visited = 0;
  recorder::for_each_record([&](const recorder::Record&) {
    if (visited++ == 0) ::raise(SIGUSR1);  // inside the recorder, under its consumer lock
  });
  ::sigaction(SIGUSR1, &old, nullptr);
  recorder::set_memory(false);
  recorder::clear();
  recorder::flush();
  EXPECT_EQ(lines_with(file, "from-handler").size(), 0u);
  const auto notes = lines_with(file, "records-dropped");
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("reason=reentrant"), std::string::npos) << notes[0];
  EXPECT_EQ(count_in(notes[0]), 1);
}

bool g_flushed = false;
void flush_in_handler(int) { g_flushed = recorder::flush_now(5000, true); }

TEST_F(RecorderEndings, ASignalHandlerHasTheWriterDrainEverythingCommitted) {
  const std::string file = path("signal.jsonl");
  ASSERT_EQ(recorder::set_file(file, 0), "");
  recorder::event(recorder::Kind::event, "start", "");  // starts the writer
  recorder::flush();
  for (int i = 0; i < 50; ++i) recorder::event(recorder::Kind::event, "step", "");
  struct sigaction sa {
  }, old{};
  sa.sa_handler = &flush_in_handler;
  ::sigaction(SIGUSR2, &sa, &old);
  ::raise(SIGUSR2);
  ::sigaction(SIGUSR2, &old, nullptr);
  EXPECT_TRUE(g_flushed);
  EXPECT_EQ(lines_with(file, "\"api\":\"step\"").size(), 50u) << "written before the handler returned";
}

// The calling library of a record made from `caller` (a zero-parameter call).
std::string library_of(std::uintptr_t caller) {
  static const recorder::CallDesc desc{"cuFake", "cuFake", "", "", 0};
  static const recorder::ArgKind kinds[] = {recorder::ArgKind::aggregate};
  const std::uint64_t valid = 0;
  recorder::clear();
  recorder::call_words(&desc, kinds, recorder::now_ns(), 0, 0, 0, caller, 0, &valid, 1, {});
  const auto records = recorder::records();
  return records.empty() ? "?" : records.back().lib;
}

TEST(RecorderCallers, ALibraryUnloadedAfterItsCallsIsNotNamedForAddressesItNoLongerHas) {
  recorder::set_memory(true);
  void* lib = ::dlopen(DRVSHIM_TEST_UNLOADABLE_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << ::dlerror();
  const auto address = reinterpret_cast<std::uintptr_t>(::dlsym(lib, "drvshim_unloadable_function")) + 1;
  const std::string name = fs::path(DRVSHIM_TEST_UNLOADABLE_PATH).filename().string();
  EXPECT_EQ(library_of(address), name);
  ASSERT_EQ(::dlclose(lib), 0);
  if (::dlopen(DRVSHIM_TEST_UNLOADABLE_PATH, RTLD_NOW | RTLD_NOLOAD) != nullptr)
    GTEST_SKIP() << "the library stayed loaded";
  EXPECT_EQ(library_of(address), "") << "the name of an unloaded library was kept for its old addresses";
  recorder::set_memory(false);
  recorder::clear();
}

TEST(RecorderCallers, AnInputArrayBehindANonConstPointerIsShownAsItsAddressNotAsAnOutValue) {
  recorder::set_memory(true);
  recorder::clear();
  static const recorder::CallDesc desc{"cuLaunchLike", "cuLaunchLike", "pdev,kernelParams", "1a", 2};
  static const recorder::ArgKind kinds[] = {recorder::ArgKind::out_sint, recorder::ArgKind::out_ptr,
                                            recorder::ArgKind::aggregate};
  // Parameters, then the out values, then the mask of valid out values (both valid).
  const std::uint64_t words[] = {0x1000, 0x2000, 7, 0x3000, 3};
  recorder::call_words(&desc, kinds, recorder::now_ns(), 0, 0, 0, 0, 0, words, 5, {});
  const auto records = recorder::records();
  ASSERT_FALSE(records.empty());
  EXPECT_EQ(records.back().args, "->7, 0x2000");
  recorder::set_memory(false);
  recorder::clear();
}

TEST(RecorderJson, BytesOfIllFormedUtf8AreEscapedOneByOneAndWellFormedTextIsKept) {
  recorder::Record r;
  r.kind = recorder::Kind::event;
  r.api = "bytes";
  // Overlong, a surrogate, past U+10FFFF, a lone continuation byte; then U+1F600 and U+00E9.
  r.args = std::string("\xE0\x80\x80|\xED\xA0\x80|\xF4\x90\x80\x80|\x80|\xF0\x9F\x98\x80|\xC3\xA9");
  const std::string json = recorder::to_json(r);
  EXPECT_NE(json.find("\\u00e0\\u0080\\u0080|\\u00ed\\u00a0\\u0080|\\u00f4\\u0090\\u0080\\u0080|\\u0080|"
                      "\xF0\x9F\x98\x80|\xC3\xA9"),
            std::string::npos)
      << json;
}

}  // namespace
