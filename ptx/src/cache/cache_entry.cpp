// SPDX-License-Identifier: Apache-2.0
#include "cache/cache_entry.hpp"

// xxHash, header-only (Debian's libxxhash-dev): nothing to link, nothing for
// the GPU machine to have.
#define XXH_INLINE_ALL
#include <xxhash.h>

#include <bit>
#include <chrono>
#include <cstring>

namespace drvshim::detail {
namespace {

constexpr char kMagic[8] = {'D', 'R', 'V', 'S', 'H', 'I', 'M', '\0'};
// 3: an XXH3-64 trailer; 2 had a hand-written 64-bit checksum, 1 a SHA-256.
constexpr std::uint32_t kFormat = 3;
constexpr std::uint32_t kFlagCubin = 1;
constexpr std::uint32_t kFlagLinked = 2;

struct Writer {
  std::string out;
  void u32(std::uint32_t v) {
    for (int i = 0; i < 4; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  void u64(std::uint64_t v) {
    for (int i = 0; i < 8; ++i) out.push_back(static_cast<char>(v >> (8 * i)));
  }
  void str(std::string_view s) {
    u64(s.size());
    out.append(s);
  }
};

struct Reader {
  std::string_view in;
  std::size_t pos = 0;
  bool ok = true;
  bool need(std::size_t n) {
    if (!ok || in.size() - pos < n) ok = false;
    return ok;
  }
  std::uint32_t u32() {
    if (!need(4)) return 0;
    std::uint32_t v = 0;
    for (int i = 0; i < 4; ++i)
      v |= std::uint32_t{static_cast<unsigned char>(in[pos + static_cast<std::size_t>(i)])} << (8 * i);
    pos += 4;
    return v;
  }
  std::uint64_t u64() {
    if (!need(8)) return 0;
    std::uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
      v |= std::uint64_t{static_cast<unsigned char>(in[pos + static_cast<std::size_t>(i)])} << (8 * i);
    pos += 8;
    return v;
  }
  std::string str() {
    const std::uint64_t n = u64();
    if (!ok || n > in.size() - pos) {
      ok = false;
      return {};
    }
    std::string s(in.substr(pos, static_cast<std::size_t>(n)));
    pos += static_cast<std::size_t>(n);
    return s;
  }
};

}  // namespace

// The entry's trailer: XXH3-64 against truncation and damage. Not a
// cryptographic hash: the key (SHA-256) and its echo inside the entry already
// keep one key's entry from being taken for another's; the trailer only has
// to catch what disks and crashes do, at a cost far below a disk hit's.
std::uint64_t entry_checksum(const char* data, std::size_t size) noexcept { return XXH3_64bits(data, size); }

std::string encode(const Sha256::Digest& key, const Stored& s) {
  Writer w;
  w.out.append(kMagic, sizeof kMagic);
  w.u32(kFormat);
  w.u32((s.result.cubin ? kFlagCubin : 0) | (s.linked ? kFlagLinked : 0));
  w.out.append(reinterpret_cast<const char*>(key.data()), key.size());
  w.u64(static_cast<std::uint64_t>(std::chrono::system_clock::now().time_since_epoch().count()));
  w.str(s.result.log);
  w.u32(static_cast<std::uint32_t>(s.result.options.size()));
  for (const auto& o : s.result.options) w.str(o);
  w.u32(static_cast<std::uint32_t>(s.result.lowered_names.size()));
  for (const auto& [expr, lowered] : s.result.lowered_names) {
    w.str(expr);
    w.str(lowered);
  }
  w.u64(std::bit_cast<std::uint64_t>(s.result.compile_ms));
  w.str(std::string_view(reinterpret_cast<const char*>(s.result.image.data()), s.result.image.size()));
  w.u64(entry_checksum(w.out.data(), w.out.size()));
  return w.out;
}

// Decodes an entry; returns the reason it is unusable, or empty.
std::string decode(std::string_view bytes, const Sha256::Digest& key, Stored& out) {
  if (bytes.size() < sizeof kMagic + 8 + 32 + 8) return "truncated";
  if (std::memcmp(bytes.data(), kMagic, sizeof kMagic) != 0) return "not a drvshim entry (bad magic)";
  Reader r{bytes.substr(0, bytes.size() - 8), sizeof kMagic};
  if (const auto format = r.u32(); format != kFormat) return "unknown format " + std::to_string(format);
  std::uint64_t trailer = 0;
  std::memcpy(&trailer, bytes.data() + bytes.size() - 8, 8);
  if (entry_checksum(bytes.data(), bytes.size() - 8) != trailer) return "checksum mismatch (truncated or altered)";
  const std::uint32_t flags = r.u32();
  if (!r.need(32)) return "truncated";
  if (std::memcmp(bytes.data() + r.pos, key.data(), 32) != 0) return "foreign entry (its key is another key's)";
  r.pos += 32;
  (void)r.u64();
  out.result.log = r.str();
  const std::uint32_t options = r.u32();
  for (std::uint32_t i = 0; i < options && r.ok; ++i) out.result.options.push_back(r.str());
  const std::uint32_t lowered = r.u32();
  for (std::uint32_t i = 0; i < lowered && r.ok; ++i) {
    std::string expr = r.str();
    out.result.lowered_names[expr] = r.str();
  }
  out.result.compile_ms = std::bit_cast<double>(r.u64());
  const std::string payload = r.str();
  if (!r.ok || r.pos != r.in.size()) return "malformed";
  const auto* p = reinterpret_cast<const std::byte*>(payload.data());
  out.result.image.assign(p, p + payload.size());
  out.result.cubin = (flags & kFlagCubin) != 0;
  out.linked = (flags & kFlagLinked) != 0;
  return {};
}

}  // namespace drvshim::detail
