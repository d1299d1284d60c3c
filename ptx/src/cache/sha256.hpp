// SPDX-License-Identifier: Apache-2.0
#pragma once
// SHA-256 (FIPS 180-4) for the compile cache's keys and header digests. A
// cryptographic hash, so that a key collision is not a practical concern and
// drvshim needs no crypto library.
#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace drvshim::detail {

class Sha256 {
 public:
  using Digest = std::array<std::uint8_t, 32>;
  Sha256() noexcept;
  void update(const void* data, std::size_t size) noexcept;
  void update(std::string_view text) noexcept { update(text.data(), text.size()); }
  // A labelled, length-prefixed field: "label" || u64 length || bytes, so that
  // no two different field sequences hash the same byte stream.
  void field(std::string_view label, std::string_view value) noexcept;
  Digest finish() noexcept;
  static std::string hex(const Digest& digest);
  // Whether blocks go through the CPU's SHA instructions (where it has them);
  // false forces the portable code (tests compare the two).
  static void use_cpu_instructions(bool on) noexcept;
  static bool uses_cpu_instructions() noexcept;

 private:
  void block(const std::uint8_t* p) noexcept;
  std::array<std::uint32_t, 8> h_;
  std::array<std::uint8_t, 64> buffer_{};
  std::size_t used_ = 0;
  std::uint64_t length_ = 0;
};

}  // namespace drvshim::detail
