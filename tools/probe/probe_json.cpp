// SPDX-License-Identifier: Apache-2.0
// drvshim-probe: the JSON building blocks (probe_json.hpp).
#include "probe_json.hpp"

#include <cmath>
#include <cstdio>

namespace drvshim_probe {

double ms(std::int64_t ns) { return std::round(static_cast<double>(ns) / 1e3) / 1e3; }

std::string version_text(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }

ordered_json attribute_json(const drvshim::AttributeValue& v) {
  if (v.has_value()) return v.value();
  return v.to_string();  // "unsupported" or "unknown"
}

// Runs one live check in isolation: a failure becomes that check's result, never the probe's.
ordered_json run_check(const std::function<ordered_json()>& check) {
  try {
    return check();
  } catch (const drvshim::UnsupportedError& e) {
    return ordered_json{{"status", "unsupported"}, {"detail", e.what()}};
  } catch (const drvshim::Error& e) {
    ordered_json j{{"status", "failed"}, {"detail", e.what()}};
    if (e.code() != 0) {
      j["result"] = e.code_name();
      j["result_code"] = e.code();
    }
    return j;
  } catch (const std::exception& e) {
    return ordered_json{{"status", "failed"}, {"detail", e.what()}};
  }
}

ordered_json ok(ordered_json extra) {
  ordered_json j{{"status", "ok"}};
  for (auto& [k, v] : extra.items()) j[k] = v;
  return j;
}

// What went wrong in one step, as the JSON reports it: the step, the
// message, and for driver errors the API and result.
ordered_json error_json(const std::string& step, const std::exception& e) {
  ordered_json j{{"step", step}, {"detail", e.what()}};
  if (const auto* d = dynamic_cast<const drvshim::Error*>(&e)) {
    if (!d->api().empty()) j["api"] = d->api();
    if (d->code() != 0) {
      j["result"] = d->code_name();
      j["result_code"] = d->code();
    }
  }
  return j;
}

// ---- text that is not UTF-8 ----------------------------------------------------------------
// Paths (a DRVSHIM_LIBCUDA value, a loader message) are bytes, not text; JSON
// strings must be UTF-8. Bytes that do not form UTF-8 are written as \xNN
// (backslash, x, two hex digits) and a backslash as two, so nothing is lost,
// nothing is ambiguous and the JSON stays valid.

namespace {

// The length of the valid UTF-8 sequence at s[i], or 0.
std::size_t utf8_sequence(const std::string& s, std::size_t i) {
  const auto b = [&](std::size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = b(i);
  if (c < 0x80) return 1;
  std::size_t n = 0;
  unsigned min = 0;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2, min = 0x80;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3, min = 0x800;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4, min = 0x10000;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  unsigned cp = c & (0x7fu >> n);
  for (std::size_t k = 1; k < n; ++k) {
    if ((b(i + k) & 0xc0) != 0x80) return 0;
    cp = (cp << 6) | (b(i + k) & 0x3fu);
  }
  if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return 0;
  return n;
}

std::string utf8_safe(const std::string& s) {
  std::string out;
  out.reserve(s.size());
  for (std::size_t i = 0; i < s.size();) {
    // A backslash is doubled so that "\xff" written by the text itself is told from the byte 0xff.
    if (s[i] == '\\') {
      out += "\\\\";
      ++i;
      continue;
    }
    const std::size_t n = utf8_sequence(s, i);
    if (n == 0) {
      char buf[5];
      std::snprintf(buf, sizeof buf, "\\x%02x", static_cast<unsigned char>(s[i]));
      out += buf;
      ++i;
    } else {
      out.append(s, i, n);
      i += n;
    }
  }
  return out;
}

}  // namespace

void make_utf8_safe(ordered_json& j) {
  if (j.is_string()) {
    j = utf8_safe(j.get<std::string>());
  } else if (j.is_structured()) {
    for (auto& v : j) make_utf8_safe(v);
  }
}

ordered_json state_json(const drvshim::PrimaryContextState& s) {
  return ordered_json{{"active", s.active}, {"flags", drvshim::to_string(s.flags)}};
}

}  // namespace drvshim_probe
