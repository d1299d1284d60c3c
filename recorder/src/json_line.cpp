// SPDX-License-Identifier: Apache-2.0
// The JSON-lines form of a record, rendered straight into the writer's reused
// buffer: keys in a fixed order, strings escaped, bytes that are not part of
// well-formed UTF-8 written as \u00XX so every line parses and keeps every
// byte. The escape is reversible: a well-formed character from U+0080 up is
// always written as itself, so \u0080-\u00ff in a string always stands for
// one raw byte (docs/trace-format.md). Not through
// nlohmann-json: it throws on (or replaces) bytes that are not UTF-8 and has no
// call that escapes into a buffer (docs/DESIGN.md, "The in-process recorder").
#include <drvshim_recorder/json_line.hpp>

#include <fmt/format.h>

#include <charconv>
#include <iterator>

namespace drvshim::recorder {
namespace {

// Length of the well-formed UTF-8 sequence starting at s[i], or 0. Overlong forms (E0 80 80),
// UTF-16 surrogates (ED A0 80) and code points past U+10FFFF (F4 90 80 80) are not well
// formed: a reader would reject or replace them, so their bytes are escaped one by one.
std::size_t utf8_length(std::string_view s, std::size_t i) noexcept {
  const auto c = static_cast<unsigned char>(s[i]);
  std::size_t n = 0;
  unsigned char lo = 0x80, hi = 0xbf;  // the range of the second byte
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
    if (c == 0xe0) lo = 0xa0;
    if (c == 0xed) hi = 0x9f;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
    if (c == 0xf0) lo = 0x90;
    if (c == 0xf4) hi = 0x8f;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  const auto second = static_cast<unsigned char>(s[i + 1]);
  if (second < lo || second > hi) return 0;
  for (std::size_t k = 2; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  }
  return n;
}

void append_escaped(std::string& out, std::string_view s) {
  for (std::size_t i = 0; i < s.size(); ++i) {
    // Runs of plain ASCII are copied at once.
    std::size_t run = i;
    while (run < s.size()) {
      const auto c = static_cast<unsigned char>(s[run]);
      if (c < 0x20 || c >= 0x80 || c == '"' || c == '\\') break;
      ++run;
    }
    if (run > i) {
      out.append(s.data() + i, run - i);
      i = run;
      if (i == s.size()) break;
    }
    const char c = s[i];
    const auto u = static_cast<unsigned char>(c);
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      default: break;
    }
    if (u < 0x20) {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(u));
    } else if (u < 0x80) {
      out += c;
    } else if (const std::size_t n = utf8_length(s, i); n > 0) {
      out.append(s.substr(i, n));
      i += n - 1;
    } else {
      fmt::format_to(std::back_inserter(out), "\\u{:04x}", static_cast<unsigned>(u));
    }
  }
}

void append_string_field(std::string& out, const char* key, std::string_view value) {
  out += ",\"";
  out += key;
  out += "\":\"";
  append_escaped(out, value);
  out += '"';
}

}  // namespace

template <class T>
void append_number(std::string& out, const char* key, T value, int base = 10) {
  out += key;
  char buf[24];
  const auto res = std::to_chars(buf, buf + sizeof buf, value, base);
  out.append(buf, static_cast<std::size_t>(res.ptr - buf));
}

void append_json(std::string& out, const Record& r) {
  append_number(out, "{\"seq\":", r.seq);
  append_number(out, ",\"ts_ns\":", r.ts_ns);
  append_number(out, ",\"dur_ns\":", r.dur_ns);
  append_number(out, ",\"tid\":", r.tid);
  if (r.pid != 0) append_number(out, ",\"pid\":", r.pid);
  out += ",\"kind\":\"";
  out += kind_name(r.kind);
  out += '"';
  append_string_field(out, "api", r.api);
  append_string_field(out, "args", r.args);
  append_number(out, ",\"result\":", r.result);
  out += ",\"result_name\":\"";
  out += r.kind == Kind::call ? result_name(r.result) : "";
  append_number(out, "\",\"ctx\":\"0x", static_cast<std::uint64_t>(r.ctx), 16);
  out += '"';
  if (!r.symbol.empty()) append_string_field(out, "sym", r.symbol);
  if (!r.lib.empty()) append_string_field(out, "lib", r.lib);
  if (r.rt != 0) append_number(out, ",\"rt\":", r.rt);
  if (r.kind == Kind::counts) append_number(out, ",\"count\":", r.count);
  if (r.ns != 0) append_number(out, ",\"ns\":", r.ns);
  out += '}';
}

std::string to_json(const Record& record) {
  std::string out;
  out.reserve(192 + record.args.size());
  append_json(out, record);
  return out;
}

}  // namespace drvshim::recorder
