// SPDX-License-Identifier: Apache-2.0
#include "cache/include_scanner.hpp"

#include <algorithm>
#include <array>
#include <cstddef>
#include <cstdint>
#include <set>
#include <string>

namespace drvshim::detail {
namespace {

bool ident_start(char c) noexcept { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == '$'; }
bool ident_char(char c) noexcept { return ident_start(c) || (c >= '0' && c <= '9'); }
bool digit(char c) noexcept { return c >= '0' && c <= '9'; }

// Phases 1-2 of translation: the trigraphs for # and backslash (the only two
// that can make or hide a directive), then backslash-newline splices. `lenient` also
// splices a backslash followed by blanks before the newline (GCC does, with a
// warning); the scanner reads the text both ways when that occurs and keeps
// both answers. `splices` gets the output offsets where lines were joined, for
// line numbers in messages.
std::string splice(std::string_view in, bool lenient, std::vector<std::size_t>& splices) {
  std::string out;
  out.reserve(in.size());
  for (std::size_t i = 0; i < in.size(); ++i) {
    char c = in[i];
    if (c == '?' && i + 2 < in.size() && in[i + 1] == '?' && (in[i + 2] == '=' || in[i + 2] == '/')) {
      c = in[i + 2] == '=' ? '#' : '\\';
      i += 2;
    }
    if (c == '\\') {
      std::size_t j = i + 1;
      if (lenient) {
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

class Scanner {
 public:
  // `s` is the spliced text (`owned` holds it when splicing changed anything).
  Scanner(std::string owned, std::string_view s, std::vector<std::size_t> splices)
      : owned_(std::move(owned)), s_(owned_.empty() ? s : std::string_view(owned_)), splices_(std::move(splices)) {}

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
      if (c == ' ' || c == '\t' || c == '\r' || c == '\f' || c == '\v') {
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
        const auto close = s_.find("*/", pos_ + 2);
        pos_ = close == std::string::npos ? s_.size() : close + 2;
        space = true;
        continue;
      }
      // Only directives name files (__has_include is valid in #if and #elif
      // alone): any other line is passed over, its comments and literals
      // honoured, without being tokenized.
      if (line_.empty() && c != '#' && !(c == '%' && at(1) == ':')) {
        skip_code_line();
        continue;
      }
      Token t = header_name_expected() ? lex_header_name() : lex();
      t.space_before = space;
      space = false;
      line_.push_back(t);
    }
    end_line();
    return std::move(out_);
  }

 private:
  char at(std::size_t ahead) const noexcept { return pos_ + ahead < s_.size() ? s_[pos_ + ahead] : '\0'; }
  std::string_view text(std::size_t b, std::size_t e) const { return std::string_view(s_).substr(b, e - b); }
  std::string_view text(const Token& t) const { return text(t.begin, t.end); }
  std::string inner(const Token& t) const { return std::string(text(t.inner_begin, t.inner_end)); }
  bool is_ident(const Token& t, std::string_view name) const { return t.kind == Token::Kind::ident && text(t) == name; }
  bool is_punct(const Token& t, char p) const { return t.kind == Token::Kind::punct && t.punct == p; }

  // After `#include` (and its kin) at the start of a line comes a header name,
  // lexed raw: `<a//b.h>` is a name there, not a comment.
  bool header_name_expected() const {
    if (line_.size() != 2 || !is_punct(line_[0], '#') || line_[1].kind != Token::Kind::ident) return false;
    const std::string_view d = text(line_[1]);
    return d == "include" || d == "include_next" || d == "import" || d == "embed";
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

  // Passes over the rest of a line that is not a directive, up to its newline:
  // block comments (which may run over lines), string and character literals
  // and raw strings (which may too) are skipped whole, so nothing in them is
  // taken for a directive on the next line.
  void skip_code_line() {
    static constexpr auto kSpecial = [] {
      std::array<bool, 256> t{};
      for (const char c : {'\n', '/', '"', '\''}) t[static_cast<unsigned char>(c)] = true;
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
        const auto close = s_.find("*/", pos_ + 2);
        pos_ = close == std::string::npos ? s_.size() : close + 2;
        continue;
      }
      if (c == '"') {
        std::size_t b = pos_;
        while (b > 0 && ident_char(s_[b - 1])) --b;
        const std::string_view prefix = text(b, pos_);
        if (prefix == "R" || prefix == "u8R" || prefix == "uR" || prefix == "UR" || prefix == "LR") {
          (void)raw_string(Token{});
        } else {
          skip_quoted('"');
        }
        continue;
      }
      if (c == '\'' && !(pos_ > 0 && ident_char(s_[pos_ - 1]))) {
        skip_quoted('\'');
        continue;
      }
      ++pos_;
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
      while (pos_ < s_.size() && ident_char(s_[pos_])) ++pos_;
      const std::string_view id = text(t.begin, pos_);
      const bool string_prefix = id == "u8" || id == "u" || id == "U" || id == "L" || id == "R" || id == "u8R" ||
                                 id == "uR" || id == "UR" || id == "LR";
      if (string_prefix && at(0) == '"') {
        if (id.back() == 'R') return raw_string(t);
        return string_literal(t, pos_);
      }
      if ((id == "u8" || id == "u" || id == "U" || id == "L") && at(0) == '\'') {
        skip_quoted('\'');
        t.end = pos_;
        return t;
      }
      t.kind = Token::Kind::ident;
      t.end = pos_;
      return t;
    }
    if (digit(c) || (c == '.' && digit(at(1)))) {
      // A pp-number, digit separators (1'000) and exponent signs included.
      ++pos_;
      while (pos_ < s_.size()) {
        const char d = s_[pos_];
        if ((d == '+' || d == '-') &&
            (s_[pos_ - 1] == 'e' || s_[pos_ - 1] == 'E' || s_[pos_ - 1] == 'p' || s_[pos_ - 1] == 'P')) {
          ++pos_;
        } else if (d == '\'' && ident_char(at(1))) {
          pos_ += 2;
        } else if (ident_char(d) || d == '.') {
          ++pos_;
        } else {
          break;
        }
      }
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

  // R"delim( ... )delim": anything inside, newlines and what looks like comments included.
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

  // `<` ... `>` or a string after line_[i]: the header name, or false.
  bool header_argument(std::size_t i, std::string& name, bool& quoted, std::size_t& last) const {
    if (i >= line_.size()) return false;
    if (line_[i].kind == Token::Kind::string) {
      name = inner(line_[i]);
      quoted = true;
      last = i;
      return true;
    }
    if (!is_punct(line_[i], '<')) return false;
    for (std::size_t j = i + 1; j < line_.size(); ++j) {
      if (is_punct(line_[j], '>')) {
        name = std::string(text(line_[i].end, line_[j].begin));
        quoted = false;
        last = j;
        return true;
      }
    }
    return false;
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
      line_.clear();
      return;
    }
    // A function-like macro: its parameters may be what __has_include is applied to.
    std::vector<std::string_view> params;
    std::string_view defined;
    std::size_t body = 0;
    if (name == "define" && line_.size() >= 4 && line_[2].kind == Token::Kind::ident && is_punct(line_[3], '(') &&
        !line_[3].space_before) {
      defined = text(line_[2]);
      std::size_t i = 4;
      for (; i < line_.size() && !is_punct(line_[i], ')'); ++i) {
        if (line_[i].kind == Token::Kind::ident) params.push_back(text(line_[i]));
      }
      body = i + 1;
    }
    if (!directive) {
      line_.clear();
      return;
    }
    // Each call's arguments are read to their end: a directive of thousands of tokens (nested
    // calls) would take quadratic time. Such a line is left uncached rather than read slowly.
    constexpr std::size_t kMaxDirectiveTokens = 4096;
    if (line_.size() > kMaxDirectiveTokens) {
      if (out_.unknowable.empty()) {
        out_.unknowable = "a directive of " + std::to_string(line_.size()) + " tokens on line " +
                          std::to_string(line_number(line_[0].begin)) + " (longer than the scanner reads)";
      }
      line_.clear();
      return;
    }
    for (std::size_t i = 0; i < line_.size(); ++i) {
      const Token& t = line_[i];
      if (t.kind != Token::Kind::ident) continue;
      // The name a #define defines, and its parameter list, are no calls.
      if (name == "define" && (i == 2 || (body > 0 && i < body))) continue;
      const std::string_view id = text(t);
      const bool has_include = id == "__has_include" || id == "__has_include_next";
      if (i + 1 >= line_.size() || !is_punct(line_[i + 1], '(')) {
        // `#define HAS __has_include`: an alias the scanner cannot follow. `defined(__has_include)`,
        // `defined __has_include` and `#ifdef __has_include` only ask whether it exists.
        const bool asks = name == "ifdef" || name == "ifndef" || (i >= 1 && is_ident(line_[i - 1], "defined")) ||
                          (i >= 2 && is_punct(line_[i - 1], '(') && is_ident(line_[i - 2], "defined"));
        if (has_include && !asks) unknowable(t, t.end);
        continue;
      }
      std::string header;
      bool quoted = false;
      std::size_t last = 0;
      const bool literal = header_argument(i + 2, header, quoted, last);
      if (has_include) {
        if (literal) {
          out_.refs.push_back(
              {header, quoted,
               id == "__has_include" ? IncludeRef::Kind::has_include : IncludeRef::Kind::has_include_next});
        } else if (i >= body && body > 0 && i + 2 < line_.size() && line_[i + 2].kind == Token::Kind::ident &&
                   std::find(params.begin(), params.end(), text(line_[i + 2])) != params.end()) {
          if (std::find(out_.wrappers.begin(), out_.wrappers.end(), defined) == out_.wrappers.end()) {
            out_.wrappers.emplace_back(defined);
          }
        } else {
          unknowable(t, i + 3 < line_.size() ? line_[i + 3].end : line_.back().end);
        }
        continue;
      }
      // Any other call: each argument that is a header name is a lookup should `id` wrap
      // __has_include; an argument made of a parameter of the macro being defined makes that
      // macro forward to `id`; any other argument cannot be known if `id` is a wrapper.
      bool forwards = false;
      bool opaque = false;
      std::size_t k = i + 2;
      for (;;) {
        std::size_t arg_end = k;
        int depth = 0;
        bool param = false;
        while (arg_end < line_.size()) {
          const Token& a = line_[arg_end];
          if (depth == 0 && (is_punct(a, ',') || is_punct(a, ')'))) break;
          if (is_punct(a, '(')) ++depth;
          if (is_punct(a, ')')) --depth;
          if (a.kind == Token::Kind::ident && i >= body && body > 0 &&
              std::find(params.begin(), params.end(), text(a)) != params.end()) {
            param = true;
          }
          ++arg_end;
        }
        std::string arg_header;
        bool arg_quoted = false;
        std::size_t arg_last = 0;
        if (header_argument(k, arg_header, arg_quoted, arg_last) && arg_last + 1 == arg_end) {
          out_.macro_lookups.push_back({std::string(id), arg_header, arg_quoted});
        } else if (param) {
          forwards = true;
        } else if (arg_end > k) {
          opaque = true;
        }
        if (arg_end >= line_.size() || is_punct(line_[arg_end], ')')) break;
        k = arg_end + 1;
      }
      if (forwards) out_.forwards.push_back({std::string(defined), std::string(id)});
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
  mutable std::size_t counted_to_ = 0;  // line_number()'s memo
  mutable std::size_t newlines_ = 0;
  std::set<std::string, std::less<>> opaque_seen_;
  std::size_t pos_ = 0;
  std::vector<Token> line_;
  IncludeScan out_;
};

IncludeScan scan_spliced(std::string_view text, bool lenient) {
  std::vector<std::size_t> splices;
  // Most texts have nothing to splice: they are read in place.
  if (text.find('\\') == std::string_view::npos && text.find("??") == std::string_view::npos) {
    return Scanner({}, text, {}).run();
  }
  std::string s = splice(text, lenient, splices);
  const std::string_view view(s);
  return Scanner(std::move(s), view, std::move(splices)).run();
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

template <class T>
void append_new(std::vector<T>& to, const std::vector<T>& from) {
  for (const auto& x : from) {
    if (std::find(to.begin(), to.end(), x) == to.end()) to.push_back(x);
  }
}

}  // namespace

IncludeScan scan_includes(std::string_view text) {
  IncludeScan strict = scan_spliced(text, false);
  if (!has_lenient_splice(text)) return strict;
  // Whether "\ <newline>" joins lines depends on the compiler: both readings count.
  const IncludeScan lenient = scan_spliced(text, true);
  append_new(strict.refs, lenient.refs);
  append_new(strict.wrappers, lenient.wrappers);
  append_new(strict.macro_lookups, lenient.macro_lookups);
  append_new(strict.forwards, lenient.forwards);
  append_new(strict.opaque_calls, lenient.opaque_calls);
  if (strict.unknowable.empty()) strict.unknowable = lenient.unknowable;
  return strict;
}

}  // namespace drvshim::detail
