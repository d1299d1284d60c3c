// SPDX-License-Identifier: Apache-2.0
// The compile cache's key against what NVRTC really looks up. Generated
// programs (directives, comments, string, character and raw string literals,
// line splices, trigraphs, digit separators, macros around __has_include, in
// every language standard NVRTC accepts) are compiled by the real NVRTC while
// this process records every file name NVRTC asks the file system about
// (its stat, open and fopen calls, interposed here). For each name NVRTC
// asked about, the header is made to appear or vanish and the key computed
// again: a key that does not change is a stale hit waiting to happen, and
// fails the run. A program the cache refuses to key (uncached, with a
// reason) is not a failure; a run that refuses most programs is.
//
// Usage: drvshim_scanner_differential [programs] [seed]
#include <dlfcn.h>
#include <fcntl.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include <drvshim/nvrtc.hpp>

#include "cache/cache_key.hpp"

namespace fs = std::filesystem;

namespace {

std::mutex g_mutex;
bool g_recording = false;
std::vector<std::string> g_seen;

// Header names the generator uses all start with this, so nothing else NVRTC touches is taken.
constexpr const char* kMark = "dsh_";

void note(const char* path) {
  if (path == nullptr || std::strstr(path, kMark) == nullptr) return;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_recording) g_seen.emplace_back(path);
}

template <class F>
F real(const char* name, const char* version = nullptr) {
  void* f = version != nullptr ? dlvsym(RTLD_NEXT, name, version) : dlsym(RTLD_NEXT, name);
  if (f == nullptr) {
    std::fprintf(stderr, "scanner differential: %s not found\n", name);
    std::abort();
  }
  return reinterpret_cast<F>(f);
}

}  // namespace

// NVRTC's file-system calls (its imports: __xstat, __lxstat, open, fopen,
// fopen64, access, opendir, realpath), noted and passed on. Exported from
// the executable, so the libnvrtc that drvshim dlopens binds to them.
#define DIFFERENTIAL_EXPORT extern "C" __attribute__((visibility("default")))

DIFFERENTIAL_EXPORT int __xstat(int ver, const char* path, struct stat* st) {
  note(path);
  static const auto f = real<int (*)(int, const char*, struct stat*)>("__xstat", "GLIBC_2.2.5");
  return f(ver, path, st);
}
DIFFERENTIAL_EXPORT int __lxstat(int ver, const char* path, struct stat* st) {
  note(path);
  static const auto f = real<int (*)(int, const char*, struct stat*)>("__lxstat", "GLIBC_2.2.5");
  return f(ver, path, st);
}
DIFFERENTIAL_EXPORT int open(const char* path, int flags, ...) {
  note(path);
  mode_t mode = 0;
  if ((flags & O_CREAT) != 0 || (flags & O_TMPFILE) == O_TMPFILE) {
    va_list ap;
    va_start(ap, flags);
    mode = static_cast<mode_t>(va_arg(ap, int));
    va_end(ap);
  }
  static const auto f = real<int (*)(const char*, int, ...)>("open");
  return f(path, flags, mode);
}
DIFFERENTIAL_EXPORT FILE* fopen(const char* path, const char* mode) {
  note(path);
  static const auto f = real<FILE* (*)(const char*, const char*)>("fopen");
  return f(path, mode);
}
DIFFERENTIAL_EXPORT FILE* fopen64(const char* path, const char* mode) {
  note(path);
  static const auto f = real<FILE* (*)(const char*, const char*)>("fopen64");
  return f(path, mode);
}
DIFFERENTIAL_EXPORT int access(const char* path, int mode) {
  note(path);
  static const auto f = real<int (*)(const char*, int)>("access");
  return f(path, mode);
}

namespace {

struct Placed {
  std::string name;
  bool exists = false;
  bool in_work = false;  // beside the program (found by "quoted" lookups first) rather than in the -I directory
};

// One generated program: its text, its standard, and the headers it names.
struct Program {
  std::string source;
  std::string standard;  // empty: NVRTC's default
  std::vector<Placed> headers;
};

// Fragments: `@` is a header's name, `$` the fragment's number (unique macro
// names). `!` marks a header that must exist (an include, which NVRTC would
// stop at when missing), `?` one that may or may not.
struct Fragment {
  const char* text;
  char existence;
  bool angle;  // looked up with <>: never beside the program
};

const Fragment kFragments[] = {
    {"#include \"@\"\n", '!', false},
    {"#include <@>\n", '!', true},
    {"  #  include \"@\"\n", '!', false},
    {"%:include \"@\"\n", '!', false},
    {"#inc\\\nlude \"@\"\n", '!', false},
    {"#include \\\n  \"@\"\n", '!', false},
    {"?\?=include \"@\"\n", '!', false},
    {"#if __has_include(\"@\")\n#endif\n", '?', false},
    {"#if __has_include(<@>)\n#endif\n", '?', true},
    {"#if defined(__has_include) && __has_include(\"@\")\n#endif\n", '?', false},
    {"#elif __has_include(\"@\")\n", '?', false},
    {"#define W$(x) __has_include(x)\n#if W$(\"@\")\n#endif\n", '?', false},
    {"#define W$(x) __has_include(x)\n#define F$(y) W$(y)\n#if F$(<@>)\n#endif\n", '?', true},
    {"#define W$(a, x) __has_include(x)\n#if W$(1, \"@\")\n#endif\n", '?', false},
    {"#define W$(x) __has_include(x)\n#define A$ W$\n#if A$(\"@\")\n#endif\n", '?', false},
    {"#define CAT$(a, b) a##b\n#if CAT$(__has_, include)(\"@\")\n#endif\n", '?', false},
    {"constexpr bool b$ = __has_include(\"@\");\n", '?', false},
    {"constexpr bool b$ = __has_include ( <@>\n );\n", '?', true},
    {"#if 0\n#include \"@\"\n#endif\n", '!', false},
    {"int x$; /* a comment\n over lines */ #include \"@\"\n", '!', false},
    {"/* a comment\n */ #include \"@\"\n", '!', false},
    {"#define M$ 1 /* a comment\n */ #include \"@\"\n", '!', false},
    {"// a comment ?\?/\n#include \"@\"\n", '!', false},
    {"// a comment \\\n#include \"@\"\n", '!', false},
    {"#define DROP$(x) 0\nint d$ = DROP$(1'/*');\n#include \"@\"\n// */\n", '!', false},
    {"int s$ = 1'2'/*';\n#include \"@\"\n// */\n", '!', false},
    {"const char* r$ = R\"(\n#include \"@\"\n)\";\n", '!', false},
    {"const char* r$ = R\"x(\n)\"\n#include \"@\"\n)x\";\n", '!', false},
    {"const char* q$ = u8R\"(\n#include \"@\"\n)\";\n", '!', false},
    {"const char* s$ = \"#include \\\"@\\\"\";\n", '!', false},
    {"const char* s$ = \"\\\n#include \\\"@\\\"\";\n", '!', false},
    {"char c$ = '\"'; const char* t$ = \"\n#include \"@\"\n", '!', false},
    {"char c$ = '?\?/''; /*\n#include \"@\"\n// */\n", '!', false},
    {"const char* u$ = L\"x\" \"#include\";\n#include \"@\"\n", '!', false},
};

// Lines that open or close something a later fragment sits inside of.
const char* const kNoise[] = {"/*\n",
                              "*/\n",
                              "\"\n",
                              "'\n",
                              "R\"(\n",
                              ")\"\n",
                              "// \\\n",
                              "// ?\?/\n",
                              "#if 0\n",
                              "#endif\n",
                              "#define R \"a\"\n",
                              "x = 1'2';\n",
                              "#define F(x) x /*\n"};

const char* const kStandards[] = {"", "-std=c++03", "-std=c++11", "-std=c++14", "-std=c++17", "-std=c++20"};

Program generate(std::mt19937& rng, int index) {
  Program p;
  p.standard = kStandards[rng() % std::size(kStandards)];
  const int fragments = 2 + static_cast<int>(rng() % 6);
  for (int k = 0; k < fragments; ++k) {
    if (rng() % 4 == 0) p.source += kNoise[rng() % std::size(kNoise)];
    const Fragment& f = kFragments[rng() % std::size(kFragments)];
    Placed h;
    h.name = std::string(kMark) + std::to_string(index) + "_" + std::to_string(k) + ".h";
    h.exists = f.existence == '!' || rng() % 2 == 0;
    h.in_work = !f.angle && rng() % 3 == 0;
    const std::string tag = std::to_string(index) + "_" + std::to_string(k);
    for (const char* c = f.text; *c != '\0'; ++c) {
      if (*c == '@') {
        p.source += h.name;
      } else if (*c == '$') {
        p.source += tag;
      } else {
        p.source += *c;
      }
    }
    p.headers.push_back(std::move(h));
  }
  p.source += "extern \"C\" __global__ void k(int* p) { *p = 1; }\n";
  return p;
}

void write_file(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
}

}  // namespace

int main(int argc, char** argv) {
  const int programs = argc > 1 ? std::atoi(argv[1]) : 2000;
  const unsigned seed = argc > 2 ? static_cast<unsigned>(std::strtoul(argv[2], nullptr, 10)) : 20261206u;
  char tmpl[] = "/tmp/drvshim-differential-XXXXXX";
  if (::mkdtemp(tmpl) == nullptr) {
    std::perror("mkdtemp");
    return 2;
  }
  const fs::path root = tmpl;
  const fs::path inc = root / "inc";
  const fs::path work = root / "work";
  fs::create_directories(inc);
  fs::create_directories(work);
  fs::current_path(work);

  std::optional<drvshim::Nvrtc> nv;
  try {
    nv.emplace(drvshim::Nvrtc::load());
  } catch (const std::exception& e) {
    std::cerr << "scanner differential: the CUDA toolkit's NVRTC is required: " << e.what() << "\n";
    return 2;
  }
  std::mt19937 rng(seed);
  drvshim::detail::HeaderMemo memo;
  int failures = 0;
  int uncached = 0;
  long checked = 0;
  std::map<std::string, int> reasons;
  for (int i = 0; i < programs; ++i) {
    const Program prog = generate(rng, i);
    for (const auto& h : prog.headers) {
      if (h.exists) write_file((h.in_work ? work : inc) / h.name, "\n");
    }
    drvshim::CompileOptions options;
    options.arch = "compute_90";
    options.include_paths = {inc.string()};
    if (!prog.standard.empty()) options.extra = {prog.standard};
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      g_seen.clear();
      g_recording = true;
    }
    try {
      (void)nv->compile(prog.source, "prog.cu", options);
    } catch (const drvshim::NvrtcCompileError&) {
      // Errors are expected (the fragments are not all valid code); the lookups before them count.
    }
    std::set<std::string> asked;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      g_recording = false;
      for (const auto& path : g_seen) asked.insert(fs::path(path).filename().string());
    }
    drvshim::KernelSource program;
    program.source = prog.source;
    program.name = "prog.cu";
    program.options = options;
    const auto effective = nv->effective_options(options);
    const auto before = drvshim::detail::key_of(memo, "differential", program, effective, "none");
    if (!before.unknowable.empty()) {
      ++uncached;
      // By kind: the words after the first backquoted part, numbers dropped.
      std::string kind;
      for (const char c : before.unknowable.substr(before.unknowable.rfind('`') + 1, 60)) {
        if (c < '0' || c > '9') kind += c;
      }
      ++reasons[kind];
    } else {
      for (const auto& name : asked) {
        ++checked;
        // Make the header vanish (where it is) or appear (in the -I directory): the key must change.
        const fs::path at = fs::exists(work / name) ? work / name : inc / name;
        const bool existed = fs::exists(at);
        if (existed) {
          fs::remove(at);
        } else {
          write_file(at, "\n");
        }
        const auto after = drvshim::detail::key_of(memo, "differential", program, effective, "none");
        if (existed) {
          write_file(at, "\n");
        } else {
          fs::remove(at);
        }
        if (after.unknowable.empty() && after.key == before.key) {
          if (++failures <= 5) {
            std::cout << "STALE: NVRTC looked up " << name << " (" << (existed ? "present" : "absent") << " in "
                      << at.parent_path().filename().string() << "), the key did not change when it "
                      << (existed ? "vanished" : "appeared")
                      << "\n  standard: " << (prog.standard.empty() ? "default" : prog.standard) << "\n  program:\n"
                      << prog.source << "\n";
          }
        }
      }
    }
    for (const auto& h : prog.headers) {
      fs::remove(inc / h.name);
      fs::remove(work / h.name);
    }
  }
  fs::current_path("/");
  fs::remove_all(root);
  std::cout << "scanner differential: " << programs << " programs (seed " << seed << "), " << checked
            << " lookups NVRTC made checked against the key, " << uncached << " programs uncached, " << failures
            << " stale\n";
  for (const auto& [reason, n] : reasons) std::cout << "  uncached " << n << ": " << reason << "...\n";
  if (checked == 0) {
    std::cout << "FAILED: NVRTC's lookups were not seen (the interposed file calls are not NVRTC's)\n";
    return 1;
  }
  if (uncached * 2 > programs) {
    std::cout << "FAILED: more than half the programs were refused a key\n";
    return 1;
  }
  return failures == 0 ? 0 : 1;
}
