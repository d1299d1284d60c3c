// SPDX-License-Identifier: Apache-2.0
// The compile cache's pure parts that decide what the key covers: the include
// scanner (every name a text can make the preprocessor look up) and the
// option reader (which NVRTC options make it read files). What each case
// expects was checked against NVRTC 13.0 where NVRTC has a say.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include "cache/include_scanner.hpp"
#include "cache/option_inputs.hpp"

using drvshim::detail::IncludeRef;
using drvshim::detail::MacroLookup;
using drvshim::detail::option_inputs;
using drvshim::detail::scan_includes;
using Kind = IncludeRef::Kind;

namespace {

IncludeRef quoted(const char* name, Kind kind = Kind::include) { return {name, true, kind}; }
IncludeRef angle(const char* name, Kind kind = Kind::include) { return {name, false, kind}; }

TEST(CompileCacheIncludeScanner, FindsEveryDirectiveWhateverTheIfsAroundIt) {
  const auto s = scan_includes(
      "#include \"a.h\"\n"
      "  #  include <b/c.h>\n"
      "#if 0\n"
      "#include\"d.h\"\n"
      "#endif\n"
      "#include_next <e.h>\n"
      "#embed \"blob.bin\"\n"
      "int x = 1;\n");
  EXPECT_EQ(s.refs, (std::vector<IncludeRef>{quoted("a.h"), angle("b/c.h"), quoted("d.h"),
                                             angle("e.h", Kind::include_next), quoted("blob.bin", Kind::embed)}));
  EXPECT_TRUE(s.unknowable.empty()) << s.unknowable;
}

// Each spelling NVRTC accepted for a directive (checked with NVRTC 13.0).
TEST(CompileCacheIncludeScanner, SeesDirectivesBehindSplicesCommentsDigraphsAndTrigraphs) {
  const auto s = scan_includes(
      "#inc\\\nlude \"spliced.h\"\n"
      "#/**/include \"commented.h\"\n"
      "/* a comment\n   over lines */ #include \"after_comment.h\"\n"
      "%:include \"digraph.h\"\n"
      "?\?=include \"trigraph.h\"\n"
      "#include \\\r\n  <crlf.h>\n"
      "#include <a//b.h>\n");
  // The trigraph is a # only where trigraphs are on (before C++17): found by that reading, after the rest.
  EXPECT_EQ(s.refs,
            (std::vector<IncludeRef>{quoted("spliced.h"), quoted("commented.h"), quoted("after_comment.h"),
                                     quoted("digraph.h"), angle("crlf.h"), angle("a//b.h"), quoted("trigraph.h")}));
  EXPECT_TRUE(s.unknowable.empty()) << s.unknowable;
}

TEST(CompileCacheIncludeScanner, IgnoresWhatOnlyLooksLikeADirective) {
  const auto s = scan_includes(
      "// #include \"line_comment.h\"\n"
      "/* #include \"block_comment.h\" */\n"
      "const char* a = \"#include \\\"in_string.h\\\"\";\n"
      "const char* r = R\"x(\n#include \"in_raw_string.h\"\n/* )x\";\n"
      "#include \"after_raw.h\"\n"
      "int n = 1'000; char c = '#';\n"
      "#define STR(x) #x\n"
      "int y; #include \"not_at_line_start.h\"\n");
  // C++03 has no raw strings: there the include inside one is a directive.
  EXPECT_EQ(s.refs, (std::vector<IncludeRef>{quoted("after_raw.h"), quoted("in_raw_string.h")}));
  EXPECT_TRUE(s.unknowable.empty()) << s.unknowable;
}

// What looks like a comment inside a string or character literal is text:
// the directives after it are still directives.
TEST(CompileCacheIncludeScanner, ACommentOpenerInsideALiteralHidesNothing) {
  const auto s = scan_includes(
      "const char* a = \"/*\";\n"
      "#include \"after_string.h\"\n"
      "const char b = '/'; const char* c = \"*\";\n"
      "#include \"after_chars.h\"\n"
      "const char* d = \"//\";\n"
      "#include \"after_slashes.h\"\n"
      "int e; // */\n");
  EXPECT_EQ(s.refs,
            (std::vector<IncludeRef>{quoted("after_string.h"), quoted("after_chars.h"), quoted("after_slashes.h")}));
  EXPECT_TRUE(s.unknowable.empty()) << s.unknowable;
}

// Each reading a language version or compiler gives: what any of them sees is kept.
TEST(CompileCacheIncludeScanner, EveryLanguageVersionsReadingIsKept) {
  // C++17 has no trigraphs: the comment ends at its line and the include is read.
  EXPECT_EQ(scan_includes("// a comment ending ?\?/\n#include \"t.h\"\n").refs,
            (std::vector<IncludeRef>{quoted("t.h")}));
  // A comment that began on an earlier line, then a directive.
  EXPECT_EQ(scan_includes("int x; /* one\n two */ #include \"c.h\"\n").refs, (std::vector<IncludeRef>{quoted("c.h")}));
  EXPECT_EQ(scan_includes("#define X 1 /* one\n two */ #include \"d.h\"\n").refs,
            (std::vector<IncludeRef>{quoted("d.h")}));
  // A digit, then a character literal: `'` is a digit separator only before a digit or letter.
  EXPECT_EQ(scan_includes("int c = F(1'/*');\n#include \"n.h\"\n// */\n").refs,
            (std::vector<IncludeRef>{quoted("n.h")}));
  EXPECT_EQ(scan_includes("int c = L'/*';\n#include \"l.h\"\n// */\n").refs, (std::vector<IncludeRef>{quoted("l.h")}));
  // Before C++14 `1'2'` is a number and a character literal; from C++14 one number.
  EXPECT_EQ(scan_includes("int c = 1'2'/*';\n#include \"s.h\"\n// */\n").refs,
            (std::vector<IncludeRef>{quoted("s.h")}));
}

TEST(CompileCacheIncludeScanner, HasIncludeInOrdinaryCodeIsALookup) {
  const auto s = scan_includes(
      "constexpr bool a = __has_include(\"w.h\");\n"
      "constexpr bool b = __has_include_next ( /* c */ <x.h>\n);\n");
  EXPECT_EQ(s.refs, (std::vector<IncludeRef>{quoted("w.h", Kind::has_include), angle("x.h", Kind::has_include_next)}));
  EXPECT_TRUE(s.unknowable.empty()) << s.unknowable;
  EXPECT_EQ(scan_includes("int a;\nconstexpr bool b = __has_include(NAME);\n").unknowable,
            "`__has_include` in code on line 2");
  // In #error and #undef nothing is expanded: no lookup, nothing unknowable.
  const auto quiet = scan_includes("#error no __has_include here\n#undef __has_include\n");
  EXPECT_TRUE(quiet.refs.empty());
  EXPECT_TRUE(quiet.unknowable.empty()) << quiet.unknowable;
}

TEST(CompileCacheIncludeScanner, WrappersNamedOutsideACallBuildersAndPastesAreReported) {
  using drvshim::detail::identifier_hash;
  auto mentions = [](const drvshim::detail::IncludeScan& s, const char* name) {
    return std::binary_search(s.mentions.begin(), s.mentions.end(), identifier_hash(name));
  };
  // An alias, a macro argument, ordinary code: each names W outside a call the scanner reads.
  const auto alias = scan_includes("#define ALIAS W\n#if APPLY(V, <h>)\n#endif\nint x = U(\"w.h\");\n");
  EXPECT_TRUE(mentions(alias, "W"));
  EXPECT_TRUE(mentions(alias, "V"));
  EXPECT_TRUE(mentions(alias, "U"));
  EXPECT_FALSE(mentions(alias, "APPLY")) << "a call the scanner reads";
  EXPECT_FALSE(mentions(alias, "ALIAS")) << "the name defined";
  EXPECT_FALSE(mentions(scan_includes("#if defined(W) || defined W\n#endif\n#ifdef W\n#endif\n"), "W"));
  // A parameter inside the header name: the macro builds the name.
  const auto built = scan_includes("#define W(x) __has_include(<x.h>)\n#define MY(x) G(<cuda/x>)\n");
  EXPECT_EQ(built.builders, (std::vector<std::string>{"W"}));
  EXPECT_EQ(built.builds, (std::vector<std::pair<std::string, std::string>>{{"MY", "G"}}));
  EXPECT_TRUE(built.macro_lookups.empty()) << "x.h and cuda/x are no names";
  EXPECT_TRUE(built.refs.empty());
  // Names that join into __has_include, pieces of any length; a beginning alone does not.
  EXPECT_TRUE(scan_includes("__device__ bool v = CAT6(__h,as,_i,nc,lu,de)(<pd.h>);\n").has_include_pieces);
  EXPECT_FALSE(scan_includes("int f(int __h, int a) { return __h + a; }\n").has_include_pieces);
  // Pasting that could make part of __has_include, and pasting that cannot.
  EXPECT_TRUE(scan_includes("#define CAT(a, b) a##b\n").pastes);
  EXPECT_TRUE(scan_includes("#define P(a) __has_ %:%: a\n").pastes);
  const auto safe = scan_includes("#define ANNOTATE(a) __##a##__\n#define NS(v) _NS_##v\n");
  EXPECT_FALSE(safe.pastes);
  EXPECT_FALSE(mentions(safe, "__")) << "an operand of ## is no name of its own";
  EXPECT_EQ(scan_includes("#define HI __has_##include\n").unknowable, "`__has_##include` on line 1");
}

// A backslash, blanks, then the line's end: GCC joins the lines, the standard
// does not. The scanner keeps what both readings find.
TEST(CompileCacheIncludeScanner, ABackslashBeforeBlanksCountsBothWays) {
  const auto s = scan_includes("int x; \\  \n#include \"maybe.h\"\n");
  EXPECT_EQ(s.refs, (std::vector<IncludeRef>{quoted("maybe.h")}));
}

TEST(CompileCacheIncludeScanner, AComputedIncludeIsUnknowableWithItsLine) {
  const auto s = scan_includes("#include \"fine.h\"\n\n#define H \"x.h\"\n#include H\n");
  EXPECT_EQ(s.refs, (std::vector<IncludeRef>{quoted("fine.h")}));
  EXPECT_EQ(s.unknowable, "`#include H` on line 4");
  EXPECT_EQ(scan_includes("#inc\\\nlude \\\n MACRO\n").unknowable, "`#include  MACRO` on line 1");
  EXPECT_NE(scan_includes("#include <unterminated.h\n").unknowable, "");
}

TEST(CompileCacheIncludeScanner, HasIncludeIsALookupAndItsWrapperMacrosAreFollowed) {
  const auto s = scan_includes(
      "#if __has_include(<version>) && __has_include_next(\"n.h\")\n#endif\n"
      "#ifdef __has_include\n#endif\n"
      "#if defined(__has_include)\n#endif\n"
      "#  define HAS(_X) __has_include(_X)\n"
      "#if HAS(<cuda_fp8.h>) || HAS(\"local.h\")\n#endif\n"
      "#pragma message(\"not a header\")\n"
      "void f() { printf(\"code: never a lookup\"); }\n");
  EXPECT_EQ(s.refs,
            (std::vector<IncludeRef>{angle("version", Kind::has_include), quoted("n.h", Kind::has_include_next)}));
  EXPECT_EQ(s.wrappers, (std::vector<std::string>{"HAS"}));
  EXPECT_EQ(s.macro_lookups,
            (std::vector<MacroLookup>{
                {"HAS", "cuda_fp8.h", false}, {"HAS", "local.h", true}, {"message", "not a header", true}}));
  EXPECT_TRUE(s.unknowable.empty()) << s.unknowable;
  EXPECT_EQ(scan_includes("#if __has_include(NAME)\n#endif\n").unknowable, "`__has_include(NAME)` on line 1");
}

TEST(CompileCacheIncludeScanner, HasIncludeThroughAliasesForwardersAndOddArgumentsIsNeverMissed) {
  // An alias of __has_include cannot be followed: unknowable.
  EXPECT_EQ(scan_includes("#define HAS __has_include\n#if HAS(\"w.h\")\n#endif\n").unknowable,
            "`__has_include` on line 1");
  // A macro passing its parameter on forwards to the callee (a wrapper once the callee is one).
  const auto nested = scan_includes("#define H1(x) __has_include(x)\n#define H2(y) H1(y)\n#if H2(\"w.h\")\n#endif\n");
  EXPECT_EQ(nested.wrappers, (std::vector<std::string>{"H1"}));
  EXPECT_EQ(nested.forwards, (std::vector<std::pair<std::string, std::string>>{{"H2", "H1"}}));
  EXPECT_EQ(nested.macro_lookups, (std::vector<MacroLookup>{{"H2", "w.h", true}}));
  EXPECT_TRUE(nested.unknowable.empty()) << nested.unknowable;
  // The header as a later argument is a lookup too; a macro as the argument is opaque.
  // A number beside it can name nothing; a macro can.
  const auto args =
      scan_includes("#define W(a, x) __has_include(x)\n#if W(1, <w.h>)\n#endif\n#if W(X, HEADER)\n#endif\n");
  EXPECT_EQ(args.wrappers, (std::vector<std::string>{"W"}));
  EXPECT_EQ(args.macro_lookups, (std::vector<MacroLookup>{{"W", "w.h", false}}));
  ASSERT_EQ(args.opaque_calls.size(), 1u);
  EXPECT_EQ(args.opaque_calls[0].first, "W");
  EXPECT_EQ(args.opaque_calls[0].second, "`W(X, HEADER)` on line 4");
}

TEST(CompileCacheIncludeScanner, AVeryLongDirectiveIsLeftUncachedInsteadOfReadInQuadraticTime) {
  std::string text = "#if ";
  for (int i = 0; i < 3000; ++i) text += "f(";
  text += "x";
  for (int i = 0; i < 3000; ++i) text += ")";
  text += "\n#endif\n";
  const auto start = std::chrono::steady_clock::now();
  const auto s = scan_includes(text);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  EXPECT_EQ(s.unknowable, "a directive of 9003 tokens on line 1 (longer than the scanner reads)");
  EXPECT_LT(seconds, 1.0);
  // Many distinct calls with opaque arguments on many lines: each callee is listed once.
  std::string calls;
  for (int i = 0; i < 5000; ++i) calls += "#if F" + std::to_string(i % 50) + "(X)\n#endif\n";
  const auto many = scan_includes(calls);
  EXPECT_EQ(many.opaque_calls.size(), 50u);
  EXPECT_EQ(many.opaque_calls[49].second, "`F49(X)` on line 99");
}

TEST(CompileCacheOptionInputs, IncludeDirectoriesAndPreIncludesInEverySpelling) {
  const auto o =
      option_inputs({"--gpu-architecture=compute_90", "--std=c++17", "-DX=1", "-D", "Y", "-Ia", "-I", "b",
                     "--include-path=c", "--include-path", "d", "-I=e", "--pre-include=p.h", "-include", "q.h",
                     "-include=r.h", "--use_fast_math", "-use_fast_math", "--relocatable-device-code=true"});
  EXPECT_EQ(o.include_dirs, (std::vector<std::string>{"a", "b", "c", "d", "e"}));
  EXPECT_EQ(o.pre_includes, (std::vector<std::string>{"p.h", "q.h", "r.h"}));
  EXPECT_TRUE(o.source_include);
  EXPECT_TRUE(o.unknowable.empty()) << o.unknowable;
  EXPECT_FALSE(option_inputs({"--no-source-include"}).source_include);
  EXPECT_FALSE(option_inputs({"-no-source-include"}).source_include);
}

TEST(CompileCacheOptionInputs, OptionsWhoseFilesTheCacheCannotKnowAreNamed) {
  EXPECT_EQ(
      option_inputs({"-arch=sm_90", "--use-pch=k.pch"}).unknowable,
      "option \"--use-pch=k.pch\" makes NVRTC read a file (a precompiled header or options) the cache cannot key");
  EXPECT_NE(option_inputs({"-pch"}).unknowable.find("\"-pch\" makes NVRTC read a file"), std::string::npos);
  EXPECT_NE(option_inputs({"--pch-dir", "/tmp"}).unknowable.find("\"--pch-dir\""), std::string::npos);
  EXPECT_NE(option_inputs({"--create-pch=x.pch"}).unknowable.find("write a file"), std::string::npos);
  EXPECT_NE(option_inputs({"--time=t.csv"}).unknowable.find("write a file"), std::string::npos);
  EXPECT_NE(option_inputs({"-optf", "o.txt"}).unknowable.find("read a file"), std::string::npos);
  EXPECT_NE(option_inputs({"-Xptxas=--options-file=x"}).unknowable.find("ptxas"), std::string::npos);
  EXPECT_EQ(
      option_inputs({"--some-future-option"}).unknowable,
      "option \"--some-future-option\" is not one the cache knows (it cannot tell which files it makes NVRTC read)");
  EXPECT_NE(option_inputs({"-I"}).unknowable.find("lacks its value"), std::string::npos);
  EXPECT_TRUE(
      option_inputs({"--dopt", "on", "-G", "-lineinfo", "--fmad=false", "--diag-suppress=177"}).unknowable.empty());
}

// Forms an adversarial review found NVRTC reading while the scanner did not
// (each checked with NVRTC 13.0's own lookups).
TEST(CompileCacheIncludeScanner, NamesAsNvrtcBuildsThemAndTextsItReads) {
  auto has = [](const drvshim::detail::IncludeScan& s, const std::string& name) {
    return std::any_of(s.refs.begin(), s.refs.end(), [&](const IncludeRef& r) { return r.name == name; });
  };
  auto looks_up = [](const drvshim::detail::IncludeScan& s, const std::string& name) {
    return std::any_of(s.macro_lookups.begin(), s.macro_lookups.end(),
                       [&](const MacroLookup& m) { return m.name == name; });
  };
  // A header name passed to a wrapper is rebuilt from its tokens: one blank between, none at the end.
  const auto spaced =
      scan_includes("#define W(x) __has_include(x)\n#if W(<a.h >) || W(< b.h >) || W(<c/**/.h>)\n#endif\n");
  EXPECT_TRUE(looks_up(spaced, "a.h"));
  EXPECT_TRUE(looks_up(spaced, " b.h"));
  EXPECT_TRUE(looks_up(spaced, "c .h"));
  // Directly after __has_include( in #if, a header name is lexed raw: /* is part of it.
  const auto raw = scan_includes("#if !__has_include(<a/*b.h>)\n#include \"c.h\"\n#endif //*/.h>)\n");
  EXPECT_TRUE(has(raw, "a/*b.h"));
  EXPECT_TRUE(has(raw, "c.h"));
  // A wrapper of __has_include_next is one of its own.
  EXPECT_EQ(scan_includes("#define W(x) __has_include_next(x)\n").next_wrappers, (std::vector<std::string>{"W"}));
  // Features spelt across a splice.
  EXPECT_TRUE(has(scan_includes("DROP(R\\\n\"(\n#include \"r.h\"\n)\" )\n"), "r.h"));
  EXPECT_TRUE(has(scan_includes("DROP(1\\\n'2/*');\n#include \"s.h\"\n// */);\n"), "s.h"));
  // A call a macro's body leaves open.
  const auto open_call = scan_includes("#define X W(\n#if X <a.h>)\n#endif\n");
  ASSERT_EQ(open_call.opaque_calls.size(), 1u);
  EXPECT_EQ(open_call.opaque_calls[0].first, "W");
  // _Pragma's text is a #pragma, in code and in a macro.
  EXPECT_TRUE(
      has(scan_includes("void f() { _Pragma(\"unroll (__has_include(<p.h>) ? 1 : 4)\") for (;;) {} }\n"), "p.h"));
  const auto in_define = scan_includes("#define U _Pragma(\"unroll (__has_include(\\\"q.h\\\") ? 1 : 4)\")\n");
  ASSERT_EQ(in_define.refs.size(), 1u);
  EXPECT_EQ(in_define.refs[0].name, "q.h");
  EXPECT_TRUE(in_define.refs[0].in_macro) << "looked up where U is expanded";
  // Every trigraph (before C++17): ??! is |, ??' is ^ (no character literal begins).
  EXPECT_TRUE(has(scan_includes("#if __has_include(\"a?\?!.h\")\n#endif\n"), "a|.h"));
  EXPECT_TRUE(has(scan_includes("DROP('a?\?' /* ')\n#include \"b.h\"\n// */ )\n"), "b.h"));
  // `$` is no identifier character for NVRTC: `$R"(` is `$`, then a raw string.
  EXPECT_TRUE(has(scan_includes("DROP($R\"(\" /*)\")\n#include \"d.h\"\n// */\n"), "d.h"));
}

}  // namespace
