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
#include <iterator>
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
  int dir = 0;          // 0: the first -I directory, 1: the second, 2: beside the program
  std::string content;  // what the header holds (a line end when nothing else)
};

// One generated program: its text, its standard, and the headers it names.
struct Program {
  std::string source;
  std::string standard;  // empty: NVRTC's default
  std::vector<Placed> headers;
};

// Fragments: `@` is a header's name, `$` the fragment's number (unique macro
// names), a backquote a literal `$`. `!` marks a header that must exist (an
// include, which NVRTC would stop at when missing), `?` one that may or may
// not. A fragment with `content` gives the header @ that text, in which `&`
// names a second header that may or may not exist, anywhere.
struct Fragment {
  const char* text;
  char existence;
  bool angle;                     // looked up with <>: never beside the program
  const char* content = nullptr;  // of header @
  bool bare = false;              // @ without an extension: NVRTC also tries @.stdh
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
    // Header names as the preprocessor rebuilds them from tokens.
    {"#define W$(x) __has_include(x)\n#if W$(<@ >) || W$(<@/**/>)\n#endif\n", '?', true},
    // A call a macro leaves open.
    {"#define W$(x) __has_include(x)\n#define X$ W$(\n#if X$ <@>)\n#endif\n", '?', true},
    // _Pragma's text.
    {"void f$() {\n  _Pragma(\"unroll (__has_include(<@>) ? 1 : 4)\") for (int i = 0; i < 4; ++i) {}\n}\n", '?', true},
    // Features spelt across a splice; other trigraphs; a stray `$`.
    {"#define DROP$(x) 0\nint d$ = DROP$(R\\\n\"(\n#include \"@\"\n)\" );\n", '!', false},
    {"#define DROP$(x) 0\nint d$ = DROP$(1\\\n'2/*');\n#include \"@\"\n// */);\n", '!', false},
    {"#define DROP$(x) 0\nint d$ = DROP$('a?\?' /* ');\n#include \"@\"\n// */\n", '!', false},
    {"#define DROP$(x) 0\nint d$ = DROP$(`R\"(\" /*)\");\n#include \"@\"\n// */\n", '!', false},
    // A wrapper given as an option (every program has -DDWQ(x)=__has_include(x)).
    {"#if DWQ(\"@\")\n#endif\n", '?', false},
    // Macros in headers, expanded elsewhere; __has_include_next from a header.
    {"#include <@>\n", '!', true, "#define W$(x) __has_include_next(x)\n#if W$(<&>)\n#endif\n"},
    {"#include <@>\n#if C$\n#endif\n", '!', true, "#define C$ __has_include(\"&\")\n"},
    {"#include \"@\"\n#if W$(\"&\")\n#endif\n", '!', false, "#define W$(x) __has_include(x)\n"},
    // Names without an extension (NVRTC tries <name>.stdh after each).
    {"#include <@>\n", '!', true, nullptr, true},
    {"#if __has_include(\"@\")\n#endif\n", '?', false, nullptr, true},
    // _Pragma through an alias; __has_include pasted together in code.
    {"#define PR$ _Pragma\nvoid f$() {\n  PR$(\"unroll (__has_include(<@>) ? 1 : 4)\") for (int i = 0; i < 4; ++i) "
     "{}\n}\n",
     '?', true},
    {"#define CAT$(a, b, c) a##b##c\n__device__ bool v$ = CAT$(__h, as_inc, lude)(<@>);\n", '?', true},
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

// The text of `f` with its placeholders filled in.
std::string fill(const char* f, const std::string& at, const std::string& second, const std::string& tag) {
  std::string out;
  for (const char* c = f; *c != '\0'; ++c) {
    if (*c == '@') {
      out += at;
    } else if (*c == '&') {
      out += second;
    } else if (*c == '$') {
      out += tag;
    } else if (*c == '`') {
      out += '$';
    } else {
      out += *c;
    }
  }
  return out;
}

Program generate(std::mt19937& rng, int index) {
  Program p;
  p.standard = kStandards[rng() % std::size(kStandards)];
  const int fragments = 2 + static_cast<int>(rng() % 6);
  for (int k = 0; k < fragments; ++k) {
    if (rng() % 4 == 0) p.source += kNoise[rng() % std::size(kNoise)];
    const Fragment& f = kFragments[rng() % std::size(kFragments)];
    const std::string tag = std::to_string(index) + "_" + std::to_string(k);
    Placed h;
    h.name = std::string(kMark) + tag + (f.bare ? "" : ".h");
    h.exists = f.existence == '!' || rng() % 2 == 0;
    h.dir = f.angle || rng() % 3 != 0 ? static_cast<int>(rng() % 2) : 2;
    if (f.content != nullptr) h.dir = 0;  // found first, so what it asks with include_next is past it
    Placed second;
    second.name = std::string(kMark) + tag + "_b.h";
    second.exists = rng() % 2 == 0;
    second.dir = static_cast<int>(rng() % 3);
    h.content = f.content != nullptr ? fill(f.content, h.name, second.name, tag) : "\n";
    p.source += fill(f.text, h.name, second.name, tag);
    p.headers.push_back(std::move(h));
    if (f.content != nullptr) p.headers.push_back(std::move(second));
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
  const fs::path inc2 = root / "inc2";
  const fs::path work = root / "work";
  const fs::path dirs[] = {inc, inc2, work};
  fs::create_directories(inc);
  fs::create_directories(inc2);
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
      // A name without an extension is found as itself or as <name>.stdh, by turns.
      const std::string file = h.name.find('.') == std::string::npos && i % 2 == 0 ? h.name + ".stdh" : h.name;
      if (h.exists) write_file(dirs[h.dir] / file, h.content.empty() ? "\n" : h.content);
    }
    drvshim::CompileOptions options;
    options.arch = "compute_90";
    options.include_paths = {inc.string(), inc2.string()};
    options.extra = {"-DDWQ(x)=__has_include(x)"};
    if (!prog.standard.empty()) options.extra.push_back(prog.standard);
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
    // Every path NVRTC asked about (a relative one is from the working directory).
    std::set<fs::path> asked;
    {
      std::lock_guard<std::mutex> lock(g_mutex);
      g_recording = false;
      for (const auto& path : g_seen) {
        const fs::path at = fs::path(path).is_absolute() ? fs::path(path) : work / path;
        if (at.lexically_normal().string().rfind(root.string(), 0) == 0) asked.insert(at.lexically_normal());
      }
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
      for (const auto& at : asked) {
        if (!fs::is_directory(at.parent_path())) continue;  // a name with a slash in it: nothing to make there
        ++checked;
        // Make the file NVRTC asked about vanish or appear: the key must change.
        const bool existed = fs::exists(at);
        std::string content;
        if (existed) {
          std::ifstream in(at, std::ios::binary);
          content.assign(std::istreambuf_iterator<char>(in), {});
          fs::remove(at);
        } else {
          write_file(at, "\n");
        }
        const auto after = drvshim::detail::key_of(memo, "differential", program, effective, "none");
        if (existed) {
          write_file(at, content);
        } else {
          fs::remove(at);
        }
        const std::string name = at.filename().string();
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
      for (const auto& d : dirs) {
        fs::remove(d / h.name);
        fs::remove(d / (h.name + ".stdh"));
      }
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
