// SPDX-License-Identifier: Apache-2.0
#pragma once
// The binary form of a record inside a thread log: a fixed head, the raw
// argument words, then text (rendered arguments, copied strings, or an
// event's name and detail). Decoding (drain.cpp) turns it into a Record.
#include <drvshim_recorder/call_desc.hpp>
#include <drvshim_recorder/record.hpp>

#include <cstdint>

namespace drvshim::recorder::detail {

enum class ApiForm : std::uint8_t {
  cstr,    // api points to a static string; text is the rendered arguments
  desc,    // api points to a CallDesc, aux to its ArgKinds; words + copied strings
  inline_  // the first api_len bytes of text are the name, the rest the detail
};

struct EntryHead {
  std::uint32_t size;  // of the whole entry, a multiple of 8
  Kind kind;
  ApiForm form;
  std::uint16_t nwords;
  std::int32_t result;
  std::uint32_t text_len;
  std::int64_t ts;  // absolute (now_ns)
  std::int64_t dur;
  std::uint64_t ctx;
  std::uint64_t caller;
  std::uint64_t rt;
  const void* api;
  const void* aux;
  std::uint32_t api_len;
  std::uint32_t pad;
};
static_assert(sizeof(EntryHead) % 8 == 0);

constexpr std::uint32_t entry_bytes(std::size_t nwords, std::size_t text) noexcept {
  return static_cast<std::uint32_t>((sizeof(EntryHead) + 8 * nwords + text + 7) & ~std::size_t{7});
}

inline const std::uint64_t* entry_words(const unsigned char* entry) noexcept {
  return reinterpret_cast<const std::uint64_t*>(entry + sizeof(EntryHead));
}
inline const char* entry_text(const unsigned char* entry, const EntryHead& head) noexcept {
  return reinterpret_cast<const char*>(entry + sizeof(EntryHead) + std::size_t{8} * head.nwords);
}

// Renders the words of a desc-form entry as the args text.
void render_words(const CallDesc& desc, const ArgKind* kinds, const std::uint64_t* words, std::size_t nwords,
                  std::string_view strings, std::string& out);

}  // namespace drvshim::recorder::detail
