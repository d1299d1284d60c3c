// SPDX-License-Identifier: Apache-2.0
#pragma once
// The include scanner: every file name a text can make the preprocessor look
// up, read without preprocessing it. Pure (no file system): the compile
// cache resolves what it returns (include_resolver.hpp).
//
// It is a superset by design: every directive is reported whatever the
// surrounding #if says, so a key built from it can only be too strict, never
// stale. Where a name cannot be known without running the preprocessor
// (`#include MACRO`, `__has_include(MACRO)` outside a wrapper macro's
// definition), `unknowable` says so and the cache refuses to cache.
//
// Handled as the preprocessor does: backslash-newline splices (also
// spelled with a trigraph), comments (as white space, so `/* x */ #include` is
// a directive, also where the comment began on an earlier line), string,
// character and raw string literals (which hide what looks like a directive),
// pp-numbers with digit separators, the digraph %: and the trigraph for #,
// `#include_next`, `#embed`, `__has_include` and `__has_include_next` (in
// directives and in ordinary code), and function-like macros that wrap
// `__has_include` (CCCL's `_CCCL_HAS_INCLUDE(<x>)`).
//
// What the lexer sees depends on the language standard and the compiler:
// trigraphs (gone in C++17), raw strings (from C++11), digit separators (from
// C++14), a backslash before blanks at a line's end (a splice for GCC). Where
// a text uses any of them it is read every way they allow and the answers are
// joined, so the result holds for every standard NVRTC accepts.
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace drvshim::detail {

struct IncludeRef {
  enum class Kind {
    include,           // #include: the file is read (and scanned in turn)
    include_next,      // #include_next: looked up past the including file's directory
    embed,             // #embed: the file is read, not scanned
    has_include,       // __has_include: only whether the file exists
    has_include_next,  // __has_include_next
  };
  std::string name;
  bool quoted = false;  // "name" (searched from the including file's directory first) or <name>
  Kind kind = Kind::include;
  // In a macro's body: looked up where the macro is expanded, which may be any file.
  bool in_macro = false;
  friend bool operator==(const IncludeRef&, const IncludeRef&) = default;
};

// A use of a macro with one header-name argument, `NAME(<x>)` or `NAME("x")`:
// a lookup when NAME turns out to wrap __has_include (in this file or another).
struct MacroLookup {
  std::string macro;
  std::string name;
  bool quoted = false;
  bool in_macro = false;  // in a macro's body: looked up where that macro is expanded
  friend bool operator==(const MacroLookup&, const MacroLookup&) = default;
};

struct IncludeScan {
  std::vector<IncludeRef> refs;
  std::vector<std::string> wrappers;       // function-like macros whose body applies __has_include to a parameter
  std::vector<std::string> next_wrappers;  // the same for __has_include_next
  std::vector<MacroLookup> macro_lookups;
  // `#define F(x) G(x)`: F wraps __has_include when G does (in this file or another).
  std::vector<std::pair<std::string, std::string>> forwards;
  // Calls in directives with an argument that is neither a header name nor a parameter
  // (`W(HEADER_MACRO)`, `W(1, x)`): unknowable should the callee wrap __has_include. Each
  // with where it is, for the message.
  std::vector<std::pair<std::string, std::string>> opaque_calls;
  // `#define F(x) G(<dir/x>)`: F builds a header name from its parameter for G; its uses cannot
  // be known should G wrap __has_include.
  std::vector<std::pair<std::string, std::string>> builds;
  // Macros that apply __has_include to a name built from a parameter (`#define W(x)
  // __has_include(<x.h>)`): their uses cannot be known.
  std::vector<std::string> builders;
  // identifier_hash() of every identifier used where the scanner does not follow calls:
  // ordinary code, and in directives outside a call (`#define ALIAS W`, `APPLY(W, <h>)`).
  // A wrapper named there is used in a way only the preprocessor can know. Sorted.
  std::vector<std::uint64_t> mentions;
  // A directive pastes tokens (##): a name like `__has_` nearby could become __has_include.
  bool pastes = false;
  // The names this text uses could be pasted into __has_include or __has_include_next: pieces
  // that follow on from one another from its start (`__h`, `as`, `_i`, `nclude`).
  bool has_include_pieces = false;
  // The first construct whose file name cannot be known without preprocessing
  // ("#include HEADER_MACRO" on line 12); empty when there is none.
  std::string unknowable;
};

IncludeScan scan_includes(std::string_view text);

// The hash IncludeScan::mentions holds for an identifier (64-bit FNV-1a): a
// collision can only make a compile uncached, never stale.
std::uint64_t identifier_hash(std::string_view identifier) noexcept;

}  // namespace drvshim::detail
