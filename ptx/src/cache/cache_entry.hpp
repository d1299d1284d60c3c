// SPDX-License-Identifier: Apache-2.0
#pragma once
// A compile-cache entry on disk and its codec. Pure: bytes in, bytes out.
//   magic "DRVSHIM\0" · u32 format · u32 flags (CUBIN, linked) · the 32-byte key
//   echoed · u64 creation time · log · options · lowered names · compile time ·
//   image · XXH3-64 of everything before it.
// Integers little-endian; strings as u64 length + bytes.
#include <drvshim/nvrtc.hpp>

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

#include "cache/sha256.hpp"

namespace drvshim::detail {

// No entry is larger (a bigger file under objects/ is corrupt).
constexpr std::uint64_t kMaxEntryBytes = std::uint64_t{256} << 20;

// What an entry holds: the compile's result, and whether its image is SASS the driver linked.
struct Stored {
  CompileResult result;
  bool linked = false;
};

// The entry's trailer over `size` bytes.
std::uint64_t entry_checksum(const char* data, std::size_t size) noexcept;

std::string encode(const Sha256::Digest& key, const Stored& s);
// Decodes an entry written for `key`; returns why it is unusable ("truncated",
// "checksum mismatch (truncated or altered)", "foreign entry (...)", ...), or empty.
std::string decode(std::string_view bytes, const Sha256::Digest& key, Stored& out);

}  // namespace drvshim::detail
