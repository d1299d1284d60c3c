// SPDX-License-Identifier: Apache-2.0
#pragma once
// What the compile cache's tests share (test_compile_cache*.cpp): a private
// temporary directory, programs whose output shows which header version they
// saw, file helpers, a log capture.
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

#include "cache/sha256.hpp"
#include "fixture.hpp"

extern char** environ;

using namespace drvshim;
using namespace drvshim_test;
namespace fs = std::filesystem;

namespace cache_test {

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

inline CacheOptions in(const std::string& dir) {
  CacheOptions o;
  o.directory = dir;
  return o;
}

inline KernelSource program(int value = 1) {
  KernelSource p;
  p.source = "extern \"C\" __global__ void add(int* p) { p[threadIdx.x] += " + std::to_string(value) + "; }\n";
  p.name = "add.cu";
  p.options.arch = "compute_90";
  return p;
}

inline std::string entry_path(const std::string& dir, const std::string& key) {
  return dir + "/v1/objects/" + key.substr(0, 2) + "/" + key.substr(2);
}

inline std::string read_all(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void write_all(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
}

// A file changed this moment is "too recent" for the cache to store what is
// compiled from it (a second change within the file system's time-stamp
// granularity would not show): tests that edit headers wait that out.
inline void settle() { std::this_thread::sleep_for(std::chrono::milliseconds(30)); }

// Rewrites a file in place (same inode, same size) and puts its modification
// time back: only its content (and its change time, which nobody can set) differs.
inline void edit_in_place(const std::string& path, const std::string& bytes) {
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
inline int value_in(const std::vector<std::byte>& image) {
  const std::string text(reinterpret_cast<const char*>(image.data()), image.size());
  for (auto pos = text.find("7310"); pos != std::string::npos; pos = text.find("7310", pos + 1)) {
    if (pos + 6 < text.size() && std::isdigit(static_cast<unsigned char>(text[pos + 4])) &&
        std::isdigit(static_cast<unsigned char>(text[pos + 5])) &&
        !std::isdigit(static_cast<unsigned char>(text[pos + 6]))) {
      return (text[pos + 4] - '0') * 10 + (text[pos + 5] - '0');
    }
  }
  return -1;
}

inline std::string value_header(int v) {
  char text[64];
  std::snprintf(text, sizeof text, "constexpr int kValue = 7310%02d;\n", v);
  return text;
}

inline const char* const kValueKernel = "extern \"C\" __global__ void k(int* p) { *p = kValue; }\n";

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
    return std::any_of(lines.begin(), lines.end(),
                       [&](const std::string& l) { return l.find(part) != std::string::npos; });
  }
  std::size_t count(const std::string& part) {
    std::lock_guard<std::mutex> lock(mutex);
    return static_cast<std::size_t>(std::count_if(
        lines.begin(), lines.end(), [&](const std::string& l) { return l.find(part) != std::string::npos; }));
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

}  // namespace cache_test
