// SPDX-License-Identifier: Apache-2.0
#include "cache/include_scanner.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <set>
#include <string>
#include <unordered_set>

namespace drvshim::detail {

std::uint64_t identifier_hash(std::string_view identifier) noexcept {
  std::uint64_t h = 14695981039346656037ull;
  for (const char c : identifier) {
    h ^= static_cast<unsigned char>(c);
    h *= 1099511628211ull;
  }
  return h;
}

namespace {

// NVRTC takes no `$` in identifiers (GCC does): `$R"(` is a stray `$`, then a raw string.
constexpr bool ident_start(char c) noexcept { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
constexpr bool ident_char(char c) noexcept { return ident_start(c) || (c >= '0' && c <= '9'); }
constexpr bool digit(char c) noexcept { return c >= '0' && c <= '9'; }
constexpr bool blank(char c) noexcept { return c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v'; }

// One way a compiler may read the text (see the header): each feature on or off.
struct Dialect {
  bool trigraphs = false;
  bool raw_strings = true;
  bool digit_separators = true;
  bool lenient_splice = false;  // "\ <newline>" joins lines (GCC does, with a warning)
  friend bool operator==(const Dialect&, const Dialect&) = default;
};

// The character a trigraph ??x stands for, or 0.
constexpr char trigraph(char x) noexcept {
  switch (x) {
    case '=': return '#';
    case '/': return '\\';
    case '\'': return '^';
    case '(': return '[';
    case ')': return ']';
    case '!': return '|';
    case '<': return '{';
    case '>': return '}';
    case '-': return '~';
    default: return 0;
  }
}

// Phases 1-2 of translation: trigraphs (the dialect's), then backslash-newline
// splices. `splices` gets the output offsets where lines were joined, for line
// numbers in messages.
std::string splice(std::string_view in, const Dialect& d, std::vector<std::size_t>& splices) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (d.trigraphs && c == '?' && i + 2 < in.size() && in[i + 1] == '?' && trigraph(in[i + 2]) != 0) {
      c = trigraph(in[i + 2]);
      i += 2;
    }
    if (c == '\\') {
      std::size_t j = i + 1;
      if (d.lenient_splice) {
        while (j < in.size() && (in[j] == ' ' || in[j] == '\t')) ++j;
      }
      if (j < in.size() && in[j] == '\r' && j + 1 < in.size() && in[j + 1] == '\n') ++j;
      if (j < in.size() && in[j] == '\n') {
        splices.push_back(out.size());
        i = j;
        continue;
      }
    }
    out.push_back(c);
  }
  return out;
}

struct Token {
  enum class Kind { ident, string, header, punct, other };
  Kind kind = Kind::other;
  std::size_t begin = 0;  // the token's text in the spliced source
  std::size_t end = 0;
  std::size_t inner_begin = 0;  // strings and header names: the text between the delimiters
  std::size_t inner_end = 0;
  char punct = 0;  // '#' also for the digraph %:
  bool quoted = false;
  bool space_before = false;
};

bool string_prefix(std::string_view id) noexcept {
  return id == "u8" || id == "u" || id == "U" || id == "L" || id == "R" || id == "u8R" || id == "uR" || id == "UR" ||
         id == "LR";
}
bool char_prefix(std::string_view id) noexcept { return id == "u8" || id == "u" || id == "U" || id == "L"; }

// Directives whose operands are not macro-expanded: nothing in them is a call or a use.
bool unexpanded_directive(std::string_view d) noexcept {
  return d == "ifdef" || d == "ifndef" || d == "elifdef" || d == "elifndef" || d == "undef" || d == "error" ||
         d == "warning" || d == "ident" || d == "sccs";
}

class Scanner {
 public:
  // Directives longer than this are not read (nested calls would take quadratic time).
  static constexpr std::size_t kMaxDirectiveTokens = 4096;

  // `s` is the spliced text (`owned` holds it when splicing changed anything).
  Scanner(std::string owned, std::string_view s, std::vector<std::size_t> splices, const Dialect& dialect)
      : owned_(std::move(owned)),
        s_(owned_.empty() ? s : std::string_view(owned_)),
        splices_(std::move(splices)),
        dialect_(dialect) {}

  IncludeScan run() {
    bool space = false;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == '\n') {
        end_line();
        ++pos_;
        space = false;
        continue;
      }
      if (blank(c)) {
        ++pos_;
        space = true;
        continue;
      }
      if (c == '/' && at(1) == '/') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
        space = true;
        continue;
      }
      if (c == '/' && at(1) == '*') {
        const bool lines = skip_block_comment();
        space = true;
        // A comment over lines inside a directive, then `#`: that may be a directive of its own.
        if (lines && !line_.empty() && next_is_hash()) end_line();
        continue;
      }
      // A line that does not start with # is ordinary code: passed over, its
      // comments and literals honoured, with only the identifiers noted.
      if (line_.empty() && c != '#' && !(c == '%' && at(1) == ':')) {
        code_line();
        continue;
      }
      Token t = header_name_expected() ? lex_header_name() : lex();
      t.space_before = space;
      space = false;
      // A directive longer than the scanner reads is only counted (end_line() refuses it).
      if (line_.size() <= kMaxDirectiveTokens) {
        line_.push_back(t);
      } else {
        ++dropped_tokens_;
      }
    }
    end_line();
    out_.mentions.assign(mentions_.begin(), mentions_.end());
    std::sort(out_.mentions.begin(), out_.mentions.end());
    dedupe(out_.wrappers);
    dedupe(out_.next_wrappers);
    dedupe(out_.builders);
    return std::move(out_);
  }

  // Another scan's findings (a _Pragma's text), merged into this one's.
  void merge(IncludeScan&& sub) {
    for (auto& r : sub.refs) out_.refs.push_back(std::move(r));
    for (auto& w : sub.wrappers) add_unique(out_.wrappers, std::move(w));
    for (auto& w : sub.next_wrappers) add_unique(out_.next_wrappers, std::move(w));
    for (auto& w : sub.builders) add_unique(out_.builders, std::move(w));
    for (auto& m : sub.macro_lookups) out_.macro_lookups.push_back(std::move(m));
    for (auto& f : sub.forwards) out_.forwards.push_back(std::move(f));
    for (auto& b : sub.builds) out_.builds.push_back(std::move(b));
    for (auto& o : sub.opaque_calls) out_.opaque_calls.push_back(std::move(o));
    mentions_.insert(sub.mentions.begin(), sub.mentions.end());
    out_.pastes = out_.pastes || sub.pastes;
    if (out_.unknowable.empty()) out_.unknowable = std::move(sub.unknowable);
  }

  // A string literal that mentions __has_include may be the text of a pragma
  // (`_Pragma("unroll (__has_include(<a.h>) ? 1 : 4)")`, also through a macro
  // that aliases or forwards _Pragma): read as one. Only too strict for others.
  void string_text(std::size_t inner_begin, std::size_t inner_end, bool in_macro) {
    const std::string_view literal = text(inner_begin, inner_end);
    if (literal.find("__has_include") != std::string_view::npos) pragma_text(literal, in_macro);
  }

  // The text of `_Pragma("...")` (escapes undone), read as the #pragma it is.
  void pragma_text(std::string_view literal, bool in_macro) {
    std::string text = "#pragma ";
    for (std::size_t i = 0; i < literal.size(); ++i) {
      if (literal[i] == '\\' && i + 1 < literal.size() && (literal[i + 1] == '"' || literal[i + 1] == '\\')) ++i;
      text.push_back(literal[i]);
    }
    text.push_back('\n');
    IncludeScan sub = Scanner({}, text, {}, dialect_).run();
    if (in_macro) {
      for (auto& r : sub.refs) r.in_macro = true;
      for (auto& m : sub.macro_lookups) m.in_macro = true;
    }
    merge(std::move(sub));
  }

  // Kept once each when the scan ends (dedupe()): a check per insertion would be quadratic.
  static void add_unique(std::vector<std::string>& to, std::string name) { to.push_back(std::move(name)); }

  static void dedupe(std::vector<std::string>& names) {
    std::unordered_set<std::string> seen;
    names.erase(
        std::remove_if(names.begin(), names.end(), [&](const std::string& n) { return !seen.insert(n).second; }),
        names.end());
  }

 private:
  char at(std::size_t ahead) const noexcept { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  std::string_view text(std::size_t b, std::size_t e) const { return std::string_view(s_).substr(b, e - b); }
  std::string_view text(const Token& t) const { return text(t.begin, t.end); }
  std::string inner(const Token& t) const { return std::string(text(t.inner_begin, t.inner_end)); }
  bool is_ident(const Token& t, std::string_view name) const { return t.kind == Token::Kind::ident && text(t) == name; }
  bool is_punct(const Token& t, char p) const { return t.kind == Token::Kind::punct && t.punct == p; }

  // From pos_ at "/*": past the comment; whether it ran over a line's end.
  bool skip_block_comment() {
    const auto close = s_.find("*/", pos_ + 2);
    const std::size_t end = close == std::string::npos ? s_.size() : close + 2;
    const bool lines = std::memchr(s_.data() + pos_, '\n', end - pos_) != nullptr;
    pos_ = end;
    return lines;
  }

  // Whether the next thing on this line, after blanks, is # or %:.
  bool next_is_hash() const {
    std::size_t i = pos_;
    while (i < s_.size() && blank(s_[i])) ++i;
    return i < s_.size() && (s_[i] == '#' || (s_[i] == '%' && i + 1 < s_.size() && s_[i + 1] == ':'));
  }

  void mention(std::string_view id) { mentions_.insert(identifier_hash(id)); }

  // After `#include` (and its kin) at the start of a line comes a header name,
  // lexed raw: `<a//b.h>` is a name there, not a comment.
  // So is what follows `__has_include (` in a directive that is evaluated
  // (`#if __has_include(<a/*b.h>)` names "a/*b.h"); a #define's body is kept as
  // tokens, as it is when the macro is expanded.
  bool header_name_expected() const {
    if (line_.size() < 2 || !is_punct(line_[0], '#') || line_[1].kind != Token::Kind::ident) return false;
    const std::string_view d = text(line_[1]);
    if (line_.size() == 2) return d == "include" || d == "include_next" || d == "import" || d == "embed";
    if (d == "define" || line_.size() < 4 || !is_punct(line_.back(), '(')) return false;
    const Token& callee = line_[line_.size() - 2];
    return is_ident(callee, "__has_include") || is_ident(callee, "__has_include_next");
  }

  Token lex_header_name() {
    Token t;
    t.begin = pos_;
    const char open = s_[pos_];
    if (open != '<' && open != '"') return lex();
    const char close = open == '<' ? '>' : '"';
    std::size_t i = pos_ + 1;
    while (i < s_.size() && s_[i] != close && s_[i] != '\n') ++i;
    if (i >= s_.size() || s_[i] != close) return lex();  // not a header name: reported as computed
    t.kind = Token::Kind::header;
    t.quoted = open == '"';
    t.inner_begin = pos_ + 1;
    t.inner_end = i;
    t.end = pos_ = i + 1;
    return t;
  }

  // A pp-number from pos_: digits, identifier characters, dots, exponent
  // signs and (where the dialect has them) digit separators: `'` followed by
  // a digit or letter. `1'/*'` is the number 1 and a character literal.
  void pp_number() {
    ++pos_;
    while (pos_ < s_.size()) {
      const char d = s_[pos_];
      const char prev = s_[pos_ - 1];
      if ((d == '+' || d == '-') && (prev == 'e' || prev == 'E' || prev == 'p' || prev == 'P')) {
        ++pos_;
      } else if (d == '\'' && dialect_.digit_separators && ident_char(at(1))) {
        pos_ += 2;
      } else if (ident_char(d) || d == '.') {
        ++pos_;
      } else {
        break;
      }
    }
  }

  // An identifier from pos_, or the literal it prefixes: its end, and whether it was an identifier.
  bool identifier(std::size_t& begin, Token* literal) {
    begin = pos_;
    while (pos_ < s_.size() && ident_char(s_[pos_])) ++pos_;
    const std::string_view id = text(begin, pos_);
    if (at(0) == '"' && string_prefix(id) && (id.back() != 'R' || dialect_.raw_strings)) {
      Token t;
      t.begin = begin;
      const Token lit = id.back() == 'R' ? raw_string(t) : string_literal(t, pos_);
      if (literal != nullptr) *literal = lit;
      return false;
    }
    if (at(0) == '\'' && char_prefix(id)) {
      skip_quoted('\'');
      if (literal != nullptr) {
        literal->begin = begin;
        literal->end = pos_;
      }
      return false;
    }
    return true;
  }

  // Passes over the rest of a line that is not a directive, up to its newline
  // (or the end of a comment that ran over lines: a directive may follow it).
  // Block comments, string and character literals and raw strings are skipped
  // whole; identifiers are noted as uses; `__has_include` is a lookup.
  void code_line() {
    static constexpr auto kSpecial = [] {
      std::array<bool, 256> t{};
      for (const char c : {'\n', '/', '"', '\'', '.'}) t[static_cast<unsigned char>(c)] = true;
      for (int c = 0; c < 256; ++c) {
        if (ident_char(static_cast<char>(c))) t[static_cast<std::size_t>(c)] = true;
      }
      return t;
    }();
    while (pos_ < s_.size()) {
      while (pos_ < s_.size() && !kSpecial[static_cast<unsigned char>(s_[pos_])]) ++pos_;
      if (pos_ >= s_.size()) return;
      const char c = s_[pos_];
      if (c == '\n') return;
      if (c == '/' && at(1) == '/') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
        return;
      }
      if (c == '/' && at(1) == '*') {
        if (skip_block_comment()) return;
        continue;
      }
      if (c == '"') {
        const std::size_t open = pos_;
        skip_quoted('"');
        string_text(open + 1, pos_ > open + 1 && s_[pos_ - 1] == '"' ? pos_ - 1 : pos_, false);
        continue;
      }
      if (c == '\'') {
        skip_quoted('\'');
        continue;
      }
      if (digit(c) || (c == '.' && digit(at(1)))) {
        pp_number();
        continue;
      }
      if (ident_start(c)) {
        std::size_t begin = 0;
        Token literal;
        if (!identifier(begin, &literal)) {
          if (literal.kind == Token::Kind::string) string_text(literal.inner_begin, literal.inner_end, false);
          continue;
        }
        const std::string_view id = text(begin, pos_);
        if (id == "__has_include" || id == "__has_include_next") {
          code_has_include(id, begin);
        } else {
          mention(id);
        }
        continue;
      }
      ++pos_;
    }
  }

  // Blanks, comments and line ends from pos_; false when a line starting with # comes first.
  bool skip_space_in_code() {
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (blank(c)) {
        ++pos_;
      } else if (c == '\n') {
        ++pos_;
        if (next_is_hash()) return false;
      } else if (c == '/' && at(1) == '*') {
        (void)skip_block_comment();
      } else if (c == '/' && at(1) == '/') {
        while (pos_ < s_.size() && s_[pos_] != '\n') ++pos_;
      } else {
        return true;
      }
    }
    return true;
  }

  // `__has_include ( "name" )` or `( <name> )` in ordinary code (NVRTC evaluates it
  // there too); anything else is a name only the preprocessor knows.
  void code_has_include(std::string_view id, std::size_t begin) {
    const std::size_t after = pos_;
    bool ok = skip_space_in_code() && at(0) == '(';
    IncludeRef r;
    r.kind = id == "__has_include" ? IncludeRef::Kind::has_include : IncludeRef::Kind::has_include_next;
    if (ok) {
      ++pos_;
      ok = skip_space_in_code() && (at(0) == '"' || at(0) == '<');
    }
    if (ok) {
      const char close = at(0) == '"' ? '"' : '>';
      const std::size_t name = pos_ + 1;
      const auto end = s_.find_first_of(std::string{close, '\n'}, name);
      ok = end != std::string::npos && s_[end] == close;
      if (ok) {
        r.name = std::string(text(name, end));
        r.quoted = close == '"';
        pos_ = end + 1;
        ok = skip_space_in_code() && at(0) == ')';
      }
    }
    if (ok) {
      ++pos_;
      out_.refs.push_back(std::move(r));
      return;
    }
    pos_ = after;
    if (out_.unknowable.empty()) {
      out_.unknowable = "`" + std::string(id) + "` in code on line " + std::to_string(line_number(begin));
    }
  }

  // A string or character literal from pos_ (at its opening quote), escapes
  // honoured; an unterminated one ends at the line's end, as the compiler's does.
  void skip_quoted(char quote) {
    ++pos_;
    while (pos_ < s_.size()) {
      const char d = s_[pos_];
      if (d == '\n') return;
      if (d == quote) {
        ++pos_;
        return;
      }
      pos_ += d == '\\' && pos_ + 1 < s_.size() && s_[pos_ + 1] != '\n' ? 2u : 1u;
    }
  }

  // A string literal whose opening quote is at `open`: lexed, with its contents marked.
  Token string_literal(Token t, std::size_t open) {
    pos_ = open;
    skip_quoted('"');
    t.kind = Token::Kind::string;
    t.inner_begin = open + 1;
    t.inner_end = pos_ > open + 1 && s_[pos_ - 1] == '"' ? pos_ - 1 : pos_;
    t.end = pos_;
    return t;
  }

  Token lex() {
    Token t;
    t.begin = pos_;
    const char c = s_[pos_];
    if (ident_start(c)) {
      std::size_t begin = 0;
      Token literal;
      if (!identifier(begin, &literal)) {
        literal.begin = begin;
        literal.end = pos_;
        return literal;
      }
      t.kind = Token::Kind::ident;
      t.end = pos_;
      return t;
    }
    if (digit(c) || (c == '.' && digit(at(1)))) {
      pp_number();
      t.end = pos_;
      return t;
    }
    if (c == '"') return string_literal(t, pos_);
    if (c == '\'') {
      skip_quoted('\'');
      t.end = pos_;
      return t;
    }
    t.kind = Token::Kind::punct;
    if (c == '%' && at(1) == ':') {
      t.punct = '#';
      pos_ += 2;
    } else {
      t.punct = c;
      ++pos_;
    }
    t.end = pos_;
    return t;
  }

  // R"delim( ... )delim" from the quote at pos_: anything inside, newlines and what looks like comments included.
  Token raw_string(Token t) {
    const std::size_t open = pos_;  // at the quote
    std::size_t paren = open + 1;
    while (paren < s_.size() && paren - open <= 17 && s_[paren] != '(' && s_[paren] != ' ' && s_[paren] != '\n' &&
           s_[paren] != ')' && s_[paren] != '\\') {
      ++paren;
    }
    // Not a valid raw string: lexed as an ordinary one.
    if (paren >= s_.size() || s_[paren] != '(') return string_literal(t, open);
    t.kind = Token::Kind::string;
    // Built by appending: GCC 12's -Wrestrict misfires on `")" + std::string(...) + "\""` (bug 105329).
    std::string terminator(1, ')');
    terminator.append(s_.substr(open + 1, paren - open - 1));
    terminator.push_back('"');
    const auto close = s_.find(terminator, paren + 1);
    t.inner_begin = paren + 1;
    t.inner_end = close == std::string::npos ? s_.size() : close;
    pos_ = close == std::string::npos ? s_.size() : close + terminator.size();
    t.end = pos_;
    return t;
  }

  std::size_t line_number(std::size_t offset) const {
    // Asked in increasing order while scanning: counted on from the last answer, not from the start.
    if (offset < counted_to_) {
      counted_to_ = 0;
      newlines_ = 0;
    }
    newlines_ += static_cast<std::size_t>(std::count(s_.begin() + static_cast<std::ptrdiff_t>(counted_to_),
                                                     s_.begin() + static_cast<std::ptrdiff_t>(offset), '\n'));
    counted_to_ = offset;
    const std::size_t newlines = newlines_;
    const auto joined =
        static_cast<std::size_t>(std::upper_bound(splices_.begin(), splices_.end(), offset) - splices_.begin());
    return 1 + newlines + joined;
  }

  void unknowable(const Token& from, std::size_t end) {
    if (!out_.unknowable.empty()) return;
    std::string shown(text(from.begin, std::min(end, from.begin + 80)));
    out_.unknowable = "`" + shown + "` on line " + std::to_string(line_number(from.begin));
  }

  // Whether `pattern` ('*' for any text) matches all of `text`.
  static bool glob(std::string_view pattern, std::string_view text) {
    if (pattern.empty()) return text.empty();
    if (pattern[0] == '*') {
      for (std::size_t n = 0; n <= text.size(); ++n) {
        if (glob(pattern.substr(1), text.substr(n))) return true;
      }
      return false;
    }
    return !text.empty() && text[0] == pattern[0] && glob(pattern.substr(1), text.substr(1));
  }

  // The paste chains (`a ## b ## c`) of a #define's body from `body`: their
  // operands are marked in `pasted` (consumed, never used as names themselves).
  // A chain whose result could be part of __has_include or __has_include_next
  // (a parameter in it, or literal pieces that fit) sets `pastes`; one that
  // spells __has_include outright is an alias, unknowable.
  void pastes(std::size_t body, const std::vector<std::string_view>& params, std::vector<bool>& pasted) {
    static constexpr std::string_view kTarget = "__has_include_next";
    auto hash_hash = [&](std::size_t i) {
      return i + 1 < line_.size() && is_punct(line_[i], '#') && is_punct(line_[i + 1], '#');
    };
    for (std::size_t i = body; i < line_.size(); ++i) {
      if (!(i + 2 < line_.size() && hash_hash(i + 1))) continue;
      // A chain starts at i: operand (## operand)+.
      std::string pattern;
      std::size_t j = i;
      for (;;) {
        const Token& op = line_[j];
        const bool param =
            op.kind == Token::Kind::ident && std::find(params.begin(), params.end(), text(op)) != params.end();
        pattern += param || text(op) == "__VA_ARGS__" ? std::string_view("*") : text(op);
        pasted[j] = true;
        if (!(j + 3 < line_.size() && hash_hash(j + 1))) break;
        j += 3;
      }
      // Runs of '*' match what one does (and keep glob() linear in them).
      pattern.erase(std::unique(pattern.begin(), pattern.end(), [](char a, char b) { return a == '*' && b == '*'; }),
                    pattern.end());
      if (pattern == "__has_include" || pattern == "__has_include_next") unknowable(line_[i], line_[j].end);
      bool fits = false;
      for (std::size_t b = 0; b < kTarget.size() && !fits; ++b) {
        for (std::size_t n = 2; b + n <= kTarget.size() && !fits; ++n) fits = glob(pattern, kTarget.substr(b, n));
      }
      if (fits) out_.pastes = true;
      // Literal pieces make one known name: a use like any other.
      if (pattern.find('*') == std::string::npos) mention(pattern);
      i = j;
    }
  }

  // What one argument of a call in a directive is.
  enum class Arg { empty, inert, header, parameter, built, opaque };

  // The argument line_[from, to): a header name (a string, or `<` ... `>` with
  // no parameter inside), one parameter of the macro being defined (counted in
  // params_before_), something built from a parameter, or anything else.
  // `<` ... `>` as tokens is the name the preprocessor builds from them: their
  // spellings, one blank where white space (or a comment) came between, none
  // before the `>` (`<a.h >` is "a.h", `< b/**/.h>` is " b .h"). The text as
  // written is `alt` when it differs: both are looked up.
  Arg classify(std::size_t from, std::size_t to, bool in_body, std::string& name, bool& quoted,
               std::string& alt) const {
    alt.clear();
    if (from >= to) return Arg::empty;
    const bool has_param = in_body && params_before_[to] > params_before_[from];
    if (has_param) {
      return to == from + 1 && line_[from].kind == Token::Kind::ident ? Arg::parameter : Arg::built;
    }
    if (to == from + 1 && (line_[from].kind == Token::Kind::string || line_[from].kind == Token::Kind::header)) {
      name = inner(line_[from]);
      quoted = line_[from].kind == Token::Kind::string || line_[from].quoted;
      return Arg::header;
    }
    if (to >= from + 2 && is_punct(line_[from], '<') && is_punct(line_[to - 1], '>')) {
      name.clear();
      for (std::size_t j = from + 1; j + 1 < to; ++j) {
        if (line_[j].space_before) name.push_back(' ');
        name.append(text(line_[j]));
      }
      const std::string written(text(line_[from].end, line_[to - 1].begin));
      if (written != name) alt = written;
      quoted = false;
      return Arg::header;
    }
    // Numbers, literals and punctuation alone expand to nothing else: no name can come of them.
    return idents_before_[to] > idents_before_[from] ? Arg::opaque : Arg::inert;
  }

  void end_line() {
    if (line_.empty()) return;
    const bool directive = is_punct(line_[0], '#') && line_.size() >= 2 && line_[1].kind == Token::Kind::ident;
    const std::string_view name = directive ? text(line_[1]) : std::string_view();
    if (name == "include" || name == "include_next" || name == "import" || name == "embed") {
      if (line_.size() >= 3 && line_[2].kind == Token::Kind::header) {
        IncludeRef r;
        r.name = inner(line_[2]);
        r.quoted = line_[2].quoted;
        r.kind = name == "include_next" ? IncludeRef::Kind::include_next
                 : name == "embed"      ? IncludeRef::Kind::embed
                                        : IncludeRef::Kind::include;
        out_.refs.push_back(std::move(r));
      } else {
        unknowable(line_[0], line_.back().end);
      }
      dropped_tokens_ = 0;
      line_.clear();
      return;
    }
    if (!directive || unexpanded_directive(name)) {
      dropped_tokens_ = 0;
      line_.clear();
      return;
    }
    // A function-like macro: its parameters may be what __has_include is applied to.
    std::vector<std::string_view> params;
    std::string_view defined;
    std::size_t body = 0;
    if (name == "define" && line_.size() >= 3 && line_[2].kind == Token::Kind::ident) {
      defined = text(line_[2]);
      body = 3;
      if (line_.size() >= 4 && is_punct(line_[3], '(') && !line_[3].space_before) {
        std::size_t i = 4;
        for (; i < line_.size() && !is_punct(line_[i], ')'); ++i) {
          if (line_[i].kind == Token::Kind::ident) params.push_back(text(line_[i]));
        }
        body = i + 1;
      }
    }
    // Each call's arguments are read to their end: a directive of thousands of tokens (nested
    // calls) would take quadratic time. Such a line is left uncached rather than read slowly.
    if (dropped_tokens_ > 0) {
      if (out_.unknowable.empty()) {
        out_.unknowable = "a directive of " + std::to_string(line_.size() + dropped_tokens_) + " tokens on line " +
                          std::to_string(line_number(line_[0].begin)) + " (longer than the scanner reads)";
      }
      dropped_tokens_ = 0;
      line_.clear();
      return;
    }
    const bool in_define = name == "define";
    for (const Token& t : line_) {
      if (t.kind == Token::Kind::string) string_text(t.inner_begin, t.inner_end, in_define);
    }
    std::vector<bool> pasted(line_.size(), false);
    if (in_define) pastes(body, params, pasted);
    // Each '(' with its ')' (the line's end when unclosed), and running counts of parameters
    // and identifiers: every call's arguments are then read in time linear in them.
    {
      const std::unordered_set<std::string_view> param_set(params.begin(), params.end());
      match_.assign(line_.size(), line_.size() - 1);
      params_before_.assign(line_.size() + 1, 0);
      idents_before_.assign(line_.size() + 1, 0);
      std::vector<std::size_t> open;
      for (std::size_t j = 0; j < line_.size(); ++j) {
        const Token& t = line_[j];
        const bool ident = t.kind == Token::Kind::ident;
        idents_before_[j + 1] = idents_before_[j] + (ident ? 1 : 0);
        params_before_[j + 1] = params_before_[j] + (ident && j >= body && param_set.count(text(t)) != 0 ? 1 : 0);
        if (is_punct(t, '(')) open.push_back(j);
        if (is_punct(t, ')') && !open.empty()) {
          match_[open.back()] = j;
          open.pop_back();
        }
      }
    }
    for (std::size_t i = 2; i < line_.size(); ++i) {
      const Token& t = line_[i];
      if (t.kind != Token::Kind::ident || pasted[i]) continue;
      // The name a #define defines, and its parameter list, are no uses.
      if (in_define && i < body) continue;
      const bool in_body = in_define && !params.empty();
      const std::string_view id = text(t);
      const bool has_include = id == "__has_include" || id == "__has_include_next";
      if (i + 1 >= line_.size() || !is_punct(line_[i + 1], '(')) {
        // `defined(X)`, `defined X` only ask whether X exists.
        const bool asks = (is_ident(line_[i - 1], "defined")) ||
                          (i >= 3 && is_punct(line_[i - 1], '(') && is_ident(line_[i - 2], "defined"));
        if (asks) continue;
        // `#define HAS __has_include`: an alias the scanner cannot follow.
        if (has_include) unknowable(t, t.end);
        mention(id);
        continue;
      }
      const bool in_macro = in_define && i >= body;
      // A call: each argument is read. A header name is a lookup should `id` wrap __has_include;
      // a parameter of the macro being defined makes that macro forward to `id`; a name built
      // from a parameter makes it a builder for `id`; anything else cannot be known.
      bool forwards = false;
      bool builds = false;
      bool opaque = false;
      bool closed = false;
      for (std::size_t k = i + 2;;) {
        // To the argument's end, nested parentheses jumped over whole.
        std::size_t arg_end = k;
        while (arg_end < line_.size() && !is_punct(line_[arg_end], ',') && !is_punct(line_[arg_end], ')')) {
          arg_end = is_punct(line_[arg_end], '(') ? match_[arg_end] + 1 : arg_end + 1;
        }
        std::string header;
        std::string alt;
        bool quoted = false;
        const Arg arg = classify(k, arg_end, in_body, header, quoted, alt);
        if (arg == Arg::header) {
          for (const std::string* n : {&header, &alt}) {
            if (n == &alt && alt.empty()) continue;
            if (has_include) {
              out_.refs.push_back(
                  {*n, quoted,
                   id == "__has_include" ? IncludeRef::Kind::has_include : IncludeRef::Kind::has_include_next,
                   in_macro});
            } else {
              out_.macro_lookups.push_back({std::string(id), *n, quoted, in_macro});
            }
          }
        } else if (arg == Arg::parameter) {
          forwards = true;
        } else if (arg == Arg::built) {
          builds = true;
        } else if (arg == Arg::opaque || (has_include && (arg == Arg::empty || arg == Arg::inert))) {
          opaque = true;
        }
        if (arg_end < line_.size() && is_punct(line_[arg_end], ')')) {
          closed = true;
          break;
        }
        if (arg_end >= line_.size()) break;
        k = arg_end + 1;
      }
      // A call the directive does not close (`#define X W(`, then `X <a.h>)`): its arguments
      // come from elsewhere.
      if (!closed) opaque = true;
      if (has_include) {
        if (opaque) {
          unknowable(t, i + 3 < line_.size() ? line_[i + 3].end : line_.back().end);
        } else if (builds) {
          add_unique(out_.builders, std::string(defined));
        } else if (forwards) {
          add_unique(id == "__has_include" ? out_.wrappers : out_.next_wrappers, std::string(defined));
        }
        continue;
      }
      if (forwards) out_.forwards.push_back({std::string(defined), std::string(id)});
      if (builds) out_.builds.push_back({std::string(defined), std::string(id)});
      if (opaque && opaque_seen_.insert(std::string(id)).second) {
        const std::string_view shown = text(t.begin, line_.back().end).substr(0, 80);
        out_.opaque_calls.push_back(
            {std::string(id), "`" + std::string(shown) + "` on line " + std::to_string(line_number(t.begin))});
      }
    }
    line_.clear();
  }

  std::string owned_;
  std::string_view s_;
  std::vector<std::size_t> splices_;
  Dialect dialect_;
  mutable std::size_t counted_to_ = 0;  // line_number()'s memo
  mutable std::size_t newlines_ = 0;
  std::set<std::string, std::less<>> opaque_seen_;
  std::unordered_set<std::uint64_t> mentions_;
  std::size_t dropped_tokens_ = 0;  // of the current line, past kMaxDirectiveTokens
  std::vector<std::size_t> match_;  // end_line()'s per-line tables
  std::vector<std::size_t> params_before_;
  std::vector<std::size_t> idents_before_;
  std::size_t pos_ = 0;
  std::vector<Token> line_;
  IncludeScan out_;
};

IncludeScan scan_as(std::string_view text, const Dialect& d) {
  std::vector<std::size_t> splices;
  // Most texts have nothing to splice: they are read in place.
  if (text.find('\\') == std::string_view::npos && (!d.trigraphs || text.find("??") == std::string_view::npos)) {
    return Scanner({}, text, {}, d).run();
  }
  std::string s = splice(text, d, splices);
  const std::string_view view(s);
  return Scanner(std::move(s), view, std::move(splices), d).run();
}

// Whether a backslash is followed by blanks and then a newline somewhere.
bool has_lenient_splice(std::string_view text) {
  for (std::size_t i = text.find('\\'); i != std::string_view::npos; i = text.find('\\', i + 1)) {
    std::size_t j = i + 1;
    while (j < text.size() && (text[j] == ' ' || text[j] == '\t')) ++j;
    if (j > i + 1 && j < text.size() && (text[j] == '\n' || text[j] == '\r')) return true;
  }
  return false;
}

bool has_trigraph(std::string_view text) {
  for (std::size_t i = text.find("??"); i != std::string_view::npos; i = text.find("??", i + 1)) {
    if (i + 2 < text.size() && trigraph(text[i + 2]) != 0) return true;
  }
  return false;
}

// A quote right after a letter, digit or underscore: a digit separator, or not, by standard.
bool has_quote_after_word(std::string_view text) {
  for (std::size_t i = text.find('\''); i != std::string_view::npos; i = text.find('\'', i + 1)) {
    if (i > 0 && ident_char(text[i - 1])) return true;
  }
  return false;
}

// What one element is, as a string: for a set of those already there.
std::string identity_of(const IncludeRef& r) {
  return r.name + '\0' + static_cast<char>('0' + static_cast<int>(r.kind)) + (r.quoted ? 'q' : 'a') +
         (r.in_macro ? 'm' : '-');
}
std::string identity_of(const MacroLookup& m) {
  return m.macro + '\0' + m.name + '\0' + (m.quoted ? 'q' : 'a') + (m.in_macro ? 'm' : '-');
}
std::string identity_of(const std::string& s) { return s; }
std::string identity_of(const std::pair<std::string, std::string>& p) { return p.first + '\0' + p.second; }

// Appends what `from` has that `to` lacks, in linear time.
template <class T>
void append_new(std::vector<T>& to, const std::vector<T>& from) {
  std::unordered_set<std::string> there;
  for (const auto& x : to) there.insert(identity_of(x));
  for (const auto& x : from) {
    if (there.insert(identity_of(x)).second) to.push_back(x);
  }
}

// Whether names among `mentions` (sorted hashes) join, one after another, into
// __has_include or __has_include_next.
bool joins_into_has_include(const std::vector<std::uint64_t>& mentions) {
  static constexpr std::string_view kFull = "__has_include_next";
  std::array<bool, kFull.size() + 1> reached{};
  reached[0] = true;
  for (std::size_t from = 0; from < kFull.size(); ++from) {
    if (!reached[from]) continue;
    for (std::size_t to = from + 1; to <= kFull.size(); ++to) {
      if (!reached[to] &&
          std::binary_search(mentions.begin(), mentions.end(), identifier_hash(kFull.substr(from, to - from)))) {
        reached[to] = true;
      }
    }
  }
  return reached[std::string_view("__has_include").size()] || reached[kFull.size()];
}

}  // namespace

IncludeScan scan_includes(std::string_view text) {
  // The dialects NVRTC's standards give (C++03: neither raw strings nor digit separators;
  // C++11: raw strings; C++14 on: both), each with and without trigraphs and GCC's lenient
  // splice; a feature the text never uses cannot change the reading, so it is left at one value.
  const bool trigraphs = has_trigraph(text);
  const bool lenient = has_lenient_splice(text);
  // A feature may be spelt across a splice (`R\<newline>"`): looked for in the joined text too.
  std::string joined;
  if (text.find('\\') != std::string_view::npos || trigraphs) {
    std::vector<std::size_t> ignored;
    joined = splice(text, Dialect{true, true, true, true}, ignored);
  }
  const bool raw = text.find("R\"") != std::string_view::npos || joined.find("R\"") != std::string::npos;
  const bool separators = has_quote_after_word(text) || has_quote_after_word(joined);
  std::vector<Dialect> dialects;
  for (const auto& [r, sep] : {std::pair{true, true}, std::pair{true, false}, std::pair{false, false}}) {
    for (const bool tri : {false, true}) {
      for (const bool len : {false, true}) {
        Dialect d;
        d.raw_strings = raw ? r : true;
        d.digit_separators = separators ? sep : true;
        d.trigraphs = trigraphs ? tri : false;
        d.lenient_splice = lenient ? len : false;
        if (std::find(dialects.begin(), dialects.end(), d) == dialects.end()) dialects.push_back(d);
      }
    }
  }
  IncludeScan out = scan_as(text, dialects.front());
  for (std::size_t i = 1; i < dialects.size(); ++i) {
    IncludeScan other = scan_as(text, dialects[i]);
    append_new(out.refs, other.refs);
    append_new(out.wrappers, other.wrappers);
    append_new(out.next_wrappers, other.next_wrappers);
    append_new(out.macro_lookups, other.macro_lookups);
    append_new(out.forwards, other.forwards);
    append_new(out.opaque_calls, other.opaque_calls);
    append_new(out.builds, other.builds);
    append_new(out.builders, other.builders);
    std::vector<std::uint64_t> merged;
    std::set_union(out.mentions.begin(), out.mentions.end(), other.mentions.begin(), other.mentions.end(),
                   std::back_inserter(merged));
    out.mentions = std::move(merged);
    out.pastes = out.pastes || other.pastes;
    if (out.unknowable.empty()) out.unknowable = std::move(other.unknowable);
  }
  out.has_include_pieces = joins_into_has_include(out.mentions);
  return out;
}

}  // namespace drvshim::detail
