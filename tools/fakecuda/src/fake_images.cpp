// SPDX-License-Identifier: Apache-2.0
// Reading CUBINs (ELF64: kernels from ".text.<kernel>" sections, variables
// from the symbol table) and fatbins (their PTX and CUBIN entries); see fake_images.hpp.
#include "fake_images.hpp"

#include <cstdint>
#include <cstring>

namespace drvshim::fake {

ElfContents read_elf(const unsigned char* elf, size_t size) {
  ElfContents out;
  if (size < 64 || elf[0] != 0x7f || elf[4] != 2) return out;  // ELF64 only
  std::uint64_t shoff = 0;
  std::uint16_t shentsize = 0, shnum = 0, shstrndx = 0;
  std::memcpy(&shoff, elf + 0x28, 8);
  std::memcpy(&shentsize, elf + 0x3A, 2);
  std::memcpy(&shnum, elf + 0x3C, 2);
  std::memcpy(&shstrndx, elf + 0x3E, 2);
  if (shentsize < 64 || shoff + std::uint64_t{shnum} * shentsize > size || shstrndx >= shnum) return out;
  struct Section {
    std::uint32_t name, type, link;
    std::uint64_t offset, size;
  };
  std::vector<Section> sections(shnum);
  for (std::uint16_t i = 0; i < shnum; ++i) {
    const unsigned char* h = elf + shoff + std::uint64_t{i} * shentsize;
    std::memcpy(&sections[i].name, h, 4);
    std::memcpy(&sections[i].type, h + 4, 4);
    std::memcpy(&sections[i].offset, h + 0x18, 8);
    std::memcpy(&sections[i].size, h + 0x20, 8);
    std::memcpy(&sections[i].link, h + 0x28, 4);
  }
  const auto text = [&](std::uint64_t table, std::uint32_t at) -> std::string {
    if (table + at >= size) return {};
    const char* p = reinterpret_cast<const char*>(elf + table + at);
    return std::string(p, strnlen(p, size - table - at));
  };
  for (const auto& sec : sections) {
    const std::string name = text(sections[shstrndx].offset, sec.name);
    if (name.rfind(".text.", 0) == 0) out.kernels.push_back(name.substr(6));
    if (sec.type != 2 || sec.link >= shnum || sec.offset + sec.size > size) continue;  // SHT_SYMTAB
    for (std::uint64_t at = 0; at + 24 <= sec.size; at += 24) {
      const unsigned char* sym = elf + sec.offset + at;
      std::uint32_t sym_name = 0;
      std::uint16_t shndx = 0;
      std::uint64_t value = 0, sym_size = 0;
      std::memcpy(&sym_name, sym, 4);
      std::memcpy(&shndx, sym + 6, 2);
      std::memcpy(&value, sym + 8, 8);
      std::memcpy(&sym_size, sym + 16, 8);
      const std::string var = text(sections[sec.link].offset, sym_name);
      if ((sym[4] & 0xf) != 1 || sym_size == 0 || shndx == 0 || shndx >= shnum || var.empty() || var[0] == '$' ||
          var[0] == '.' || var.rfind("__U", 0) == 0) {
        continue;  // not a program variable (STT_OBJECT in a section)
      }
      std::vector<unsigned char> init(sym_size, 0);
      const Section& home = sections[shndx];
      if (home.type != 8 && value + sym_size <= home.size && home.offset + value + sym_size <= size) {  // not NOBITS
        std::memcpy(init.data(), elf + home.offset + value, sym_size);
      }
      out.globals.emplace_back(var, std::move(init));
    }
  }
  return out;
}

FatbinContents read_fatbin(const unsigned char* fatbin) {
  FatbinContents out;
  std::uint16_t header = 0;
  std::uint64_t payload = 0;
  std::memcpy(&header, fatbin + 6, 2);
  std::memcpy(&payload, fatbin + 8, 8);
  size_t off = header;
  while (off + 64 <= header + payload) {
    const unsigned char* entry = fatbin + off;
    std::uint16_t kind = 0;
    std::uint32_t entry_header = 0, compressed = 0, arch = 0;
    std::uint64_t entry_size = 0;
    std::memcpy(&kind, entry, 2);
    std::memcpy(&entry_header, entry + 4, 4);
    std::memcpy(&entry_size, entry + 8, 8);
    std::memcpy(&compressed, entry + 16, 4);
    std::memcpy(&arch, entry + 28, 4);
    if (entry_header == 0) break;
    const unsigned char* data = entry + entry_header;
    if (kind == 1) {
      out.ptx_archs.push_back(static_cast<int>(arch));
      if (compressed == 0 && out.ptx.empty()) {
        out.ptx.assign(reinterpret_cast<const char*>(data), strnlen(reinterpret_cast<const char*>(data), entry_size));
      }
    } else if (kind == 2) {
      out.sass_archs.push_back(static_cast<int>(arch));
      if (compressed == 0 && out.elf.kernels.empty()) out.elf = read_elf(data, entry_size);
    }
    off += entry_header + entry_size;
  }
  return out;
}

}  // namespace drvshim::fake
