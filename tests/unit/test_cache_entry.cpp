// SPDX-License-Identifier: Apache-2.0
// The compile cache's entry codec (pure: bytes in, bytes out): what a hit
// returns is what was stored, and every kind of damage is named, never used.
#include <gtest/gtest.h>

#include <cstring>

#include "cache/cache_entry.hpp"

using drvshim::detail::decode;
using drvshim::detail::encode;
using drvshim::detail::Sha256;
using drvshim::detail::Stored;

namespace {

Sha256::Digest key_of(const char* text) {
  Sha256 h;
  h.update(text);
  return h.finish();
}

Stored sample() {
  Stored s;
  s.result.cubin = true;
  s.linked = true;
  s.result.log = "warning: unused variable";
  s.result.options = {"--gpu-architecture=sm_90", "--std=c++17"};
  s.result.lowered_names = {{"scale<float>", "_Z5scaleIfEvPT_"}, {"scale<double>", "_Z5scaleIdEvPT_"}};
  s.result.compile_ms = 12.5;
  const std::string image = std::string(
                                "\x7f"
                                "ELF",
                                4) +
                            std::string(300, '\0') + "payload";
  const auto* p = reinterpret_cast<const std::byte*>(image.data());
  s.result.image.assign(p, p + image.size());
  return s;
}

TEST(CompileCacheEntry, DecodesExactlyWhatWasEncoded) {
  const auto key = key_of("k");
  const Stored in = sample();
  const std::string bytes = encode(key, in);
  Stored out;
  EXPECT_EQ(decode(bytes, key, out), "");
  EXPECT_EQ(out.result.image, in.result.image);
  EXPECT_EQ(out.result.cubin, in.result.cubin);
  EXPECT_EQ(out.linked, in.linked);
  EXPECT_EQ(out.result.log, in.result.log);
  EXPECT_EQ(out.result.options, in.result.options);
  EXPECT_EQ(out.result.lowered_names, in.result.lowered_names);
  EXPECT_DOUBLE_EQ(out.result.compile_ms, in.result.compile_ms);

  Stored empty;
  Stored back;
  EXPECT_EQ(decode(encode(key, empty), key, back), "") << "an entry of nothing round-trips too";
  EXPECT_TRUE(back.result.image.empty());
  EXPECT_FALSE(back.linked);
}

// Each flag is its own bit: an image decoded as the wrong kind (a CUBIN
// loaded as PTX, SASS the driver linked taken for NVRTC's) is refused by
// the driver or, worse, used for another device.
TEST(CompileCacheEntry, TheImageKindFlagsRoundTripIndependently) {
  const auto key = key_of("k");
  for (const bool cubin : {false, true}) {
    for (const bool linked : {false, true}) {
      Stored in = sample();
      in.result.cubin = cubin;
      in.linked = linked;
      Stored out;
      ASSERT_EQ(decode(encode(key, in), key, out), "");
      EXPECT_EQ(out.result.cubin, cubin) << "cubin " << cubin << ", linked " << linked;
      EXPECT_EQ(out.linked, linked) << "cubin " << cubin << ", linked " << linked;
    }
  }
}

TEST(CompileCacheEntry, EveryTruncationIsRefused) {
  const auto key = key_of("k");
  const std::string bytes = encode(key, sample());
  for (std::size_t n = 0; n < bytes.size(); ++n) {
    Stored out;
    const std::string why = decode(std::string_view(bytes).substr(0, n), key, out);
    EXPECT_FALSE(why.empty()) << "a prefix of " << n << " bytes was accepted";
  }
}

TEST(CompileCacheEntry, EverySingleBitFlipIsRefused) {
  const auto key = key_of("k");
  const std::string bytes = encode(key, sample());
  for (std::size_t i = 0; i < bytes.size(); ++i) {
    for (int bit = 0; bit < 8; ++bit) {
      std::string damaged = bytes;
      damaged[i] = static_cast<char>(damaged[i] ^ (1 << bit));
      Stored out;
      EXPECT_FALSE(decode(damaged, key, out).empty()) << "byte " << i << " bit " << bit;
    }
  }
}

TEST(CompileCacheEntry, EachKindOfBadEntryIsNamed) {
  const auto key = key_of("k");
  const std::string bytes = encode(key, sample());
  Stored out;
  EXPECT_EQ(decode("", key, out), "truncated");
  EXPECT_EQ(decode(std::string(bytes.size(), 'x'), key, out), "not a drvshim entry (bad magic)");
  EXPECT_EQ(decode(bytes, key_of("another"), out), "foreign entry (its key is another key's)");
  std::string older = bytes;
  older[8] = 1;  // the format after the 8-byte magic
  EXPECT_EQ(decode(older, key, out), "unknown format 1");
  older[8] = 2;  // format 2 had a hand-written checksum: recompiled, not trusted
  EXPECT_EQ(decode(older, key, out), "unknown format 2");
  std::string flipped = bytes;
  flipped[bytes.size() / 2] = static_cast<char>(flipped[bytes.size() / 2] ^ 0x20);
  EXPECT_EQ(decode(flipped, key, out), "checksum mismatch (truncated or altered)");
  // A well-formed checksum over bytes that do not parse: the trailer is
  // recomputed over an entry with a byte too many before it.
  std::string longer = bytes.substr(0, bytes.size() - 8) + "!";
  const std::uint64_t sum = drvshim::detail::entry_checksum(longer.data(), longer.size());
  longer.append(reinterpret_cast<const char*>(&sum), 8);
  EXPECT_EQ(decode(longer, key, out), "malformed");
}

}  // namespace
