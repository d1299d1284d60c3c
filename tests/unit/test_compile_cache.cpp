// SPDX-License-Identifier: Apache-2.0
// The NVRTC compile cache (the toolkit's real NVRTC; no GPU needed): the key
// hash, hits and misses with their reasons, what changes the key (headers
// found by NVRTC's own lookups, options, the toolchain), and the programs
// whose inputs cannot be known, which are compiled and never stored.
#include "compile_cache_test_support.hpp"

using namespace cache_test;

namespace {

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
    // The same in-memory header by name, with other contents: another program.
    auto p = program();
    p.source = "#include \"value.h\"\n__global__ void k(int* p) { p[0] = VALUE; }\n";
    p.headers = {{"value.h", "#define VALUE 1\n"}};
    const auto one = cache.compile(p);
    p.headers = {{"value.h", "#define VALUE 2\n"}};
    const auto two = cache.compile(p);
    EXPECT_EQ(two.outcome, CacheOutcome::compiled) << "an in-memory header's contents";
    EXPECT_NE(two.key, one.key) << "an in-memory header's contents";
    EXPECT_NE(two.result.image, one.result.image);
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
  {
    // A variable NVRTC or NVVM reads changes the output without changing any option.
    ::setenv("NV_NVVM_VERSION", "test", 1);
    differs(program(), "NV_NVVM_VERSION");
    ::unsetenv("NV_NVVM_VERSION");
  }
  {
    // With line information the output names the working directory.
    auto p = program();
    p.options.line_info = true;
    const auto here = cache.compile(p);
    TempDir elsewhere;
    const auto old = std::filesystem::current_path();
    std::filesystem::current_path(elsewhere.path);
    const auto there = cache.compile(p);
    std::filesystem::current_path(old);
    EXPECT_NE(here.key, there.key) << "the working directory with -lineinfo";
    EXPECT_EQ(there.outcome, CacheOutcome::compiled);
    EXPECT_EQ(cache.compile(program()).key, base) << "without line information it is not keyed";
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

TEST(CompileCache, AnIncludeOptionWithABlankBeforeItsDirectoryIsKeyedByWhatNvrtcReads) {
  // "-I inc" as one option: NVRTC trims the blank and reads inc/; the key must see the header.
  TempDir dir;
  fs::create_directories(dir / "inc");
  write_all(dir / "inc/v.h", "constexpr int kValue = 1;\n");
  settle();
  KernelSource p;
  p.source = "#include \"v.h\"\n__global__ void k(int* p) { p[0] = kValue; }\n";
  p.name = "blank.cu";
  p.options.arch = "compute_90";
  p.options.extra = {"-I " + (dir / "inc")};
  CompileCache cache(load_nvrtc(), in(dir / "c"));
  const auto a = cache.compile(p);
  ASSERT_EQ(a.outcome, CacheOutcome::compiled) << a.miss_reason;
  EXPECT_EQ(a.miss_reason.rfind("uncached", 0), std::string::npos) << a.miss_reason;
  write_all(dir / "inc/v.h", "constexpr int kValue = 2;\n");
  settle();
  const auto b = cache.compile(p);
  EXPECT_EQ(b.outcome, CacheOutcome::compiled) << "the header NVRTC reads changed";
  EXPECT_NE(b.result.image, a.result.image);
}

// Every way NVRTC finds a header (checked against NVRTC
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
  // With names of the user's own that look like pieces of __has_include (these headers paste).
  for (const char* header :
       {"cuda_fp16.h", "cooperative_groups.h", "cuda/std/type_traits", "mma.h", "cuda/std/complex"}) {
    SCOPED_TRACE(header);
    KernelSource p;
    p.source = std::string("#include <") + header +
               ">\nstruct Flags { int has, has_, _has, as_include; };\n"
               "extern \"C\" __global__ void k(int* p) { *p = 1; }\n";
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
         p.source = "#define HEADER \"v.h\"\n#if __has_include(HEADER)\n#include \"v.h\"\n#endif\n" +
                    std::string(kValueKernel);
       },
       "uncached: prog.cu: `__has_include(HEADER)` on line 2 names a file"},
      {"an alias of __has_include",
       [](KernelSource& p) {
         p.source =
             "#define HAS __has_include\n#if HAS(\"v.h\")\n#include \"v.h\"\n#endif\n" + std::string(kValueKernel);
       },
       "uncached: prog.cu: `__has_include` on line 1 names a file"},
      {"a wrapper of __has_include given a macro",
       [](KernelSource& p) {
         p.source =
             "#define HAS(x) __has_include(x)\n#define HEADER \"v.h\"\n#if HAS(HEADER)\n#include \"v.h\"\n"
             "#endif\n" +
             std::string(kValueKernel);
       },
       "uncached: prog.cu: `HAS(HEADER)` on line 3 asks __has_include (through HAS)"},
      {"an alias of a wrapper of __has_include",
       [](KernelSource& p) {
         p.source =
             "#define HAS(x) __has_include(x)\n#define ALIAS HAS\n#if ALIAS(\"v.h\")\n#include \"v.h\"\n"
             "#endif\n" +
             std::string(kValueKernel);
       },
       "uncached: prog.cu uses HAS, which asks __has_include, where only the preprocessor can follow it"},
      {"a wrapper passed to another macro",
       [](KernelSource& p) {
         p.source =
             "#define HAS(x) __has_include(x)\n#define APPLY(f, x) f(x)\n#if APPLY(HAS, \"v.h\")\n"
             "#include \"v.h\"\n#endif\n" +
             std::string(kValueKernel);
       },
       "uncached: prog.cu uses HAS, which asks __has_include, where only the preprocessor can follow it"},
      {"a wrapper that builds the name from its argument",
       [](KernelSource& p) {
         p.source =
             "#define HAS(x) __has_include(<x.h>)\n#if HAS(v)\n#include \"v.h\"\n#endif\n" + std::string(kValueKernel);
       },
       "uncached: prog.cu: `HAS(v)` on line 2 asks __has_include (through HAS)"},
      {"a forwarder that builds the name for a wrapper",
       [](KernelSource& p) {
         p.source =
             "#define HAS(x) __has_include(x)\n#define MY(x) HAS(<x.h>)\n#if MY(v)\n#include \"v.h\"\n"
             "#endif\n" +
             std::string(kValueKernel);
       },
       "uncached: prog.cu: `MY(v)` on line 3 asks __has_include (through MY)"},
      {"__has_include pasted together",
       [](KernelSource& p) {
         p.source = "#define CAT(a, b) a##b\n#if CAT(__has_, include)(\"v.h\")\n#include \"v.h\"\n#endif\n" +
                    std::string(kValueKernel);
       },
       "uncached: prog.cu has names that pasted (##) together could make __has_include"},
      {"__has_include of a macro in ordinary code",
       [](KernelSource& p) {
         p.source = "#define NAME \"v.h\"\nconstexpr bool kHas = __has_include(NAME);\n#include \"v.h\"\n" +
                    std::string(kValueKernel);
       },
       "uncached: prog.cu: `__has_include` in code on line 2 names a file the cache cannot know"},
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

TEST(CompileCache, AHeaderAskedForThroughAMacroForwardingToAWrapperIsKeyed) {
  // H2(y) -> H1(y) -> __has_include(y): once w.h (asked about, never included) appears, the
  // program includes v.h instead of its own value.
  TempDir dir;
  fs::create_directories(dir / "inc");
  write_all(dir / "inc/v.h", value_header(5));
  KernelSource p;
  p.source =
      "#define H1(x) __has_include(x)\n#define H2(y) H1(y)\n#if H2(\"w.h\")\n#include \"v.h\"\n#else\n"
      "constexpr int kValue = 731007;\n#endif\n" +
      std::string(kValueKernel);
  p.name = "prog.cu";
  p.options.arch = "compute_90";
  p.options.include_paths = {dir / "inc"};
  settle();
  CompileCache cache(load_nvrtc(), in(dir / "c"));
  const auto a = cache.compile(p);
  ASSERT_EQ(a.outcome, CacheOutcome::compiled) << a.miss_reason;
  EXPECT_EQ(value_in(a.result.image), 7);
  write_all(dir / "inc/w.h", "\n");
  settle();
  const auto b = cache.compile(p);
  EXPECT_EQ(b.outcome, CacheOutcome::compiled) << "the header the wrapper asks about appeared";
  EXPECT_EQ(value_in(b.result.image), 5);
}

// Each way a header can be read that a lexer of the wrong language version
// misses: the header is edited and the next compile must see the new value,
// from memory and from disk.
TEST(CompileCache, HeadersReadPastTrigraphsCommentsLiteralsAndRawStringsAreKeyed) {
  TempDir dir;
  fs::create_directories(dir / "inc");
  const auto nv = load_nvrtc();
  struct Case {
    const char* name;
    std::string source;
    std::vector<std::string> options;
    std::string (*header)(int);
  };
  const std::vector<Case> cases = {
      // C++17 has no trigraphs: the comment ends at its line, and the include is read.
      {"a comment ending in the trigraph for a backslash",
       "// a comment ending ?\?/\n#include \"v.h\"\n",
       {},
       value_header},
      {"a directive after a comment over lines",
       "constexpr int kBefore = 1; /* a comment\n  over lines */ #include \"v.h\"\n",
       {},
       value_header},
      // 1 is a number and '/*' a character literal: no comment begins.
      {"a character literal right after a digit",
       "#define DROP(x) 0\nconstexpr int kDropped = DROP(1'/*');\n#include \"v.h\"\n// */\n",
       {},
       value_header},
      // C++03 has no raw strings: R is a macro, then two ordinary strings around the include.
      {"R\"( under C++03",
       "#define R \"a\"\n__device__ const char r[] = R\"(\";\n#include \"v.h\"\n__device__ const char q[] = \")\";\n",
       {"-std=c++03"},
       +[](int v) { return "static const int kValue = 7310" + std::to_string(10 + v) + ";\n"; }},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.name);
    const std::string header = dir / "inc/v.h";
    write_all(header, c.header(1));
    settle();
    KernelSource p;
    p.name = "prog.cu";
    p.source = c.source + kValueKernel;
    p.options.arch = "compute_90";
    p.options.include_paths = {dir / "inc"};
    p.options.extra = c.options;
    const std::string root = dir / ("c" + std::to_string(&c - cases.data()));
    CompileCache cache(nv, in(root));
    const auto first = cache.compile(p);
    ASSERT_EQ(first.outcome, CacheOutcome::compiled) << first.miss_reason << first.result.log;
    const int before = value_in(first.result.image);
    ASSERT_EQ(cache.compile(p).outcome, CacheOutcome::memory_hit);
    edit_in_place(header, c.header(2));
    settle();
    const auto second = cache.compile(p);
    EXPECT_EQ(second.outcome, CacheOutcome::compiled) << "not the old image from memory";
    EXPECT_NE(value_in(second.result.image), before);
    CompileCache fresh(nv, in(root));
    EXPECT_EQ(value_in(fresh.compile(p).result.image), value_in(second.result.image)) << "not the old image from disk";
  }
}

// __has_include in ordinary code (NVRTC evaluates it there too): the header appearing changes the code.
TEST(CompileCache, HasIncludeInOrdinaryCodeIsKeyed) {
  TempDir dir;
  fs::create_directories(dir / "inc");
  KernelSource p;
  p.source =
      "constexpr bool kHas = __has_include(\"w.h\");\n"
      "extern \"C\" __global__ void k(int* p) { *p = kHas ? 731002 : 731001; }\n";
  p.name = "prog.cu";
  p.options.arch = "compute_90";
  p.options.include_paths = {dir / "inc"};
  settle();
  CompileCache cache(load_nvrtc(), in(dir / "c"));
  const auto a = cache.compile(p);
  ASSERT_EQ(a.outcome, CacheOutcome::compiled) << a.miss_reason;
  EXPECT_EQ(value_in(a.result.image), 1);
  write_all(dir / "inc/w.h", "\n");
  settle();
  const auto b = cache.compile(p);
  EXPECT_EQ(b.outcome, CacheOutcome::compiled) << "the header asked about appeared";
  EXPECT_EQ(value_in(b.result.image), 2);
}

// __has_include where NVRTC expands it: a wrapper given as an option, a quoted
// name in a header's macro looked up from the file that expands it, a wrapper
// of __has_include_next. Each time the header asked about appears, the code changes.
TEST(CompileCache, HasIncludeWhereNvrtcExpandsItIsKeyed) {
  TempDir dir;
  const auto nv = load_nvrtc();
  fs::create_directories(dir / "inc/x");
  fs::create_directories(dir / "inc2");
  fs::create_directories(dir / "work");
  write_all(dir / "inc/x/check.h", "#define CHECK __has_include(\"q.h\")\n");
  write_all(dir / "inc/next.h", "#define WN(x) __has_include_next(x)\n#if WN(<n.h>)\n#define NEXT 1\n#endif\n");
  write_all(dir / "inc/n.h", "\n");
  const char* value =
      "\nconstexpr int kValue = 731001 + kFound;\nextern \"C\" __global__ void k(int* p) { *p = kValue; }\n";
  struct Case {
    const char* name;
    std::string source;
    std::vector<std::string> extra;
    std::string appears;
  };
  const std::vector<Case> cases = {
      {"a wrapper given as -D",
       "#if W(\"w.h\")\nconstexpr int kFound = 1;\n#else\nconstexpr int kFound = 0;\n#endif",
       {"-DW(x)=__has_include(x)"},
       dir / "inc/w.h"},
      {"a quoted name in a header's macro",
       "#include <x/check.h>\n#if CHECK\nconstexpr int kFound = 1;\n#else\n"
       "constexpr int kFound = 0;\n#endif",
       {},
       dir / "work/q.h"},
      {"a wrapper of __has_include_next",
       "#include <next.h>\n#ifdef NEXT\nconstexpr int kFound = 1;\n#else\n"
       "constexpr int kFound = 0;\n#endif",
       {"-I" + (dir / "inc2")},
       dir / "inc2/n.h"},
  };
  in_directory(dir / "work", [&] {
    for (const auto& c : cases) {
      SCOPED_TRACE(c.name);
      settle();
      KernelSource p;
      p.name = "prog.cu";
      p.source = c.source + value;
      p.options.arch = "compute_90";
      p.options.include_paths = {dir / "inc"};
      p.options.extra = c.extra;
      const std::string root = dir / ("c" + std::to_string(&c - cases.data()));
      const auto first = CompileCache(nv, in(root)).compile(p);
      ASSERT_EQ(first.outcome, CacheOutcome::compiled) << first.miss_reason << first.result.log;
      EXPECT_EQ(value_in(first.result.image), 1);
      write_all(c.appears, "\n");
      settle();
      const auto second = CompileCache(nv, in(root)).compile(p);
      EXPECT_EQ(second.outcome, CacheOutcome::compiled) << "not the old image from disk";
      EXPECT_EQ(value_in(second.result.image), 2);
    }
  });
}

// A second review's forms: NVRTC's fallback to <name>.stdh for a name without
// an extension, and pragma text reaching _Pragma through an alias.
TEST(CompileCache, StdhFallbacksAndPragmaTextThroughAnAliasAreKeyed) {
  TempDir dir;
  const auto nv = load_nvrtc();
  fs::create_directories(dir / "inc");
  {
    SCOPED_TRACE("#include <value> reads inc/value.stdh");
    write_all(dir / "inc/value.stdh", value_header(1));
    settle();
    KernelSource p;
    p.name = "prog.cu";
    p.source = "#include <value>\n" + std::string(kValueKernel);
    p.options.arch = "compute_90";
    p.options.include_paths = {dir / "inc"};
    const auto first = CompileCache(nv, in(dir / "c1")).compile(p);
    ASSERT_EQ(first.outcome, CacheOutcome::compiled) << first.miss_reason << first.result.log;
    EXPECT_EQ(value_in(first.result.image), 1);
    edit_in_place(dir / "inc/value.stdh", value_header(2));
    settle();
    const auto second = CompileCache(nv, in(dir / "c1")).compile(p);
    EXPECT_EQ(second.outcome, CacheOutcome::compiled) << "not the old image from disk";
    EXPECT_EQ(value_in(second.result.image), 2);
  }
  {
    SCOPED_TRACE("an alias of _Pragma whose text asks __has_include");
    KernelSource p;
    p.name = "prog.cu";
    p.source =
        "#define PR _Pragma\nextern \"C\" __global__ void k(int* p) {\n"
        "  PR(\"unroll (__has_include(<pa.h>) ? 1 : 4)\")\n  for (int i = 0; i < 8; ++i) p[i] = i;\n}\n";
    p.options.arch = "compute_90";
    p.options.include_paths = {dir / "inc"};
    const auto first = CompileCache(nv, in(dir / "c2")).compile(p);
    ASSERT_EQ(first.outcome, CacheOutcome::compiled) << first.miss_reason << first.result.log;
    write_all(dir / "inc/pa.h", "\n");
    settle();
    const auto second = CompileCache(nv, in(dir / "c2")).compile(p);
    EXPECT_EQ(second.outcome, CacheOutcome::compiled) << "the header the pragma asks about appeared";
    EXPECT_NE(second.result.image, first.result.image) << "NVRTC unrolls differently now";
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
  const auto l1 = memo.find('\n');
  ASSERT_NE(memo.substr(0, l1).find(" in "), std::string::npos) << "the memo names its NVRTC's place: " << memo;
  {
    CompileCache lazy(NvrtcLoadOptions{}, in(root));
    EXPECT_EQ(lazy.compile(program(5)).outcome, CacheOutcome::disk_hit);
  }
  std::string stale = memo;
  stale.insert(l1, "7");  // NVRTC's fingerprint no longer matches the file
  write_all(memos[0], stale);
  CompileCache lazy(NvrtcLoadOptions{}, in(root));
  const auto again = lazy.compile(program(5));
  EXPECT_EQ(again.key, first.key) << "the identity found by looking at the files is the memo's";
  EXPECT_EQ(again.outcome, CacheOutcome::disk_hit);
  EXPECT_FALSE(lazy.nvrtc_loaded());
}

// Two toolkits whose libnvrtc have the same size and time (here: one file,
// linked into a second toolkit) keep a toolchain memo each: the second does
// not key its programs by the first one's include directory.
TEST(CompileCache, ToolkitsWithLookAlikeNvrtcKeepTheirOwnIncludeDirectory) {
  TempDir dir;
  const std::string nvrtc = load_nvrtc().loaded_path();
  const std::string linked = fs::path(dir / "tk/lib") / fs::path(nvrtc).filename();
  fs::create_directories(dir / "tk/lib");
  fs::create_directories(dir / "tk/include");
  std::error_code ec;
  fs::create_hard_link(nvrtc, linked, ec);
  if (ec) fs::copy_file(nvrtc, linked);
  if (ec) fs::last_write_time(linked, fs::last_write_time(nvrtc));
  write_all(dir / "tk/include/cuda_fp16.h", "\n");
  write_all(dir / "tk/include/tk_value.h", value_header(6));
  settle();
  const std::string root = dir / "c";
  KernelSource p;
  p.source = "#if __has_include(<tk_value.h>)\n#include <tk_value.h>\n#else\nconstexpr int kValue = 731001;\n#endif\n" +
             std::string(kValueKernel);
  p.name = "tk.cu";
  p.options.arch = "compute_90";
  const auto system = CompileCache(NvrtcLoadOptions{}, in(root)).compile(p);
  ASSERT_EQ(system.outcome, CacheOutcome::compiled) << system.miss_reason;
  EXPECT_EQ(value_in(system.result.image), 1);
  NvrtcLoadOptions other;
  other.path = linked;
  other.use_environment = false;
  const auto second = CompileCache(other, in(root)).compile(p);
  EXPECT_NE(second.key, system.key) << "keyed by the first toolkit's include directory";
  EXPECT_EQ(value_in(second.result.image), 6);
}

namespace {

// Runs a program with `env` added to this process's environment; its standard output.
std::string run_program(const std::vector<std::string>& args, const std::vector<std::string>& env, int& status) {
  TempDir out_dir;
  const std::string out = out_dir / "out";
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_addopen(&actions, 1, out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
  std::vector<std::string> vars = env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string v = *e;
    const bool replaced = std::any_of(env.begin(), env.end(), [&](const std::string& mine) {
      return v.compare(0, mine.find('=') + 1, mine, 0, mine.find('=') + 1) == 0;
    });
    if (!replaced) vars.push_back(v);
  }
  std::vector<char*> argv, envp;
  std::vector<std::string> a = args;
  for (auto& x : a) argv.push_back(x.data());
  argv.push_back(nullptr);
  for (auto& x : vars) envp.push_back(x.data());
  envp.push_back(nullptr);
  pid_t pid = 0;
  status = -1;
  if (posix_spawn(&pid, argv[0], &actions, nullptr, argv.data(), envp.data()) != 0) return "spawn failed";
  posix_spawn_file_actions_destroy(&actions);
  waitpid(pid, &status, 0);
  return read_all(out);
}

}  // namespace

// The keys name the NVRTC and builtins the dynamic linker maps: a builtins
// library found first through LD_LIBRARY_PATH, and a libnvrtc found through
// the program's own RPATH, are another compiler, so a program that brings them
// gets no entry another NVRTC compiled.
TEST(CompileCache, KeysNameTheNvrtcAndBuiltinsTheDynamicLinkerMaps) {
  TempDir dir;
  const auto nv = load_nvrtc();
  const std::string root = dir / "c";
  auto identity = [&](const std::string& worker, const std::vector<std::string>& env) {
    int status = 0;
    std::string out = run_program({worker, "--identity", root}, env, status);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  };
  auto outcome = [](const std::string& line) { return line.substr(0, line.find('|')); };
  auto key = [](const std::string& line) {
    const auto a = line.find('|');
    return line.substr(a + 1, line.find('|', a + 1) - a - 1);
  };
  const std::string plain = identity(DRVSHIM_TEST_CACHE_WORKER, {});
  ASSERT_EQ(outcome(plain), "compiled") << plain;
  EXPECT_EQ(outcome(identity(DRVSHIM_TEST_CACHE_WORKER, {})), "disk hit");

  // A copy of the builtins library, with another time, first on LD_LIBRARY_PATH.
  fs::create_directories(dir / "lib");
  const fs::path builtins = fs::path(dir / "lib") / fs::path(nv.builtins_path()).filename();
  fs::copy_file(nv.builtins_path(), builtins);
  fs::last_write_time(builtins, fs::last_write_time(nv.builtins_path()) - std::chrono::hours(24));
  const std::string ld = "LD_LIBRARY_PATH=" + (dir / "lib");
  const std::string other_builtins = identity(DRVSHIM_TEST_CACHE_WORKER, {ld});
  EXPECT_EQ(outcome(other_builtins), "compiled") << other_builtins;
  EXPECT_NE(key(other_builtins), key(plain));
  EXPECT_EQ(identity(DRVSHIM_TEST_CACHE_WORKER, {ld}), "disk hit|" + key(other_builtins) + "|");

  // A program whose RPATH ($ORIGIN/nvrtc) holds its own libnvrtc.
  fs::create_directories(dir / "bin/nvrtc");
  const std::string worker = dir / "bin/worker";
  fs::copy_file(DRVSHIM_TEST_CACHE_WORKER_RPATH, worker);
  const fs::path own = fs::path(dir / "bin/nvrtc") / fs::path(nv.loaded_path()).filename();
  fs::copy_file(nv.loaded_path(), own);
  fs::last_write_time(own, fs::last_write_time(nv.loaded_path()) - std::chrono::hours(24));
  const std::string own_nvrtc = identity(worker, {});
  EXPECT_EQ(outcome(own_nvrtc), "compiled") << own_nvrtc;
  EXPECT_NE(key(own_nvrtc), key(plain));
  EXPECT_NE(key(own_nvrtc), key(other_builtins));
  EXPECT_EQ(outcome(identity(worker, {})), "disk hit");
}

// What the keys cannot foresee (here: the program mapped a builtins library of
// its own before the cache looked) is found once NVRTC is loaded: that process
// compiles without the cache, stores nothing and serves nothing, and says why.
TEST(CompileCache, AnNvrtcOtherThanTheKeysNameKeepsTheProcessOutOfTheCache) {
  TempDir dir;
  const auto nv = load_nvrtc();
  fs::create_directories(dir / "own");
  const fs::path builtins = fs::path(dir / "own") / fs::path(nv.builtins_path()).filename();
  fs::copy_file(nv.builtins_path(), builtins);
  fs::last_write_time(builtins, fs::last_write_time(nv.builtins_path()) - std::chrono::hours(24));
  const std::string root = dir / "c";
  int status = 0;
  const std::string out = run_program({DRVSHIM_TEST_CACHE_WORKER, "--identity", root, builtins.string()}, {}, status);
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << out;
  const std::string reason =
      "uncached: NVRTC's builtins were loaded from " + builtins.string() + ", which the keys do not name";
  const auto lines = [&] {
    std::vector<std::string> v;
    std::istringstream in(out);
    for (std::string l; std::getline(in, l);) v.push_back(l.substr(0, l.find('|')) + " " + l.substr(l.rfind('|') + 1));
    return v;
  }();
  EXPECT_EQ(lines, (std::vector<std::string>{"uncached " + reason, "uncached " + reason})) << out;
  const std::string plain = run_program({DRVSHIM_TEST_CACHE_WORKER, "--identity", root}, {}, status);
  EXPECT_EQ(plain.substr(0, plain.find('|')), "compiled") << "nothing was stored: " << plain;
}

}  // namespace
