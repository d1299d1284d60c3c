// SPDX-License-Identifier: Apache-2.0
// Binary images the fake reads: CUBINs (ELF) and fatbins (fake_images.cpp),
// for cuLibraryLoadData.
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

namespace drvshim::fake {

// What the fake reads from a CUBIN: its kernels (".text.<kernel>" sections)
// and its variables (object symbols, with their initial bytes).
struct ElfContents {
  std::vector<std::string> kernels;
  std::vector<std::pair<std::string, std::vector<unsigned char>>> globals;
};

ElfContents read_elf(const unsigned char* elf, size_t size);

// What a fatbin holds (header: u32 magic, u16 version, u16 header size, u64
// payload size; then entries, each with its own header: u16 kind (1 PTX,
// 2 ELF), u16, u32 header size, u64 payload size, u32 compressed size, u32,
// u16 minor, u16 major, u32 architecture, ...). PTX text is read when the
// entry is uncompressed (nvcc --no-compress); without PTX (a device-linked
// -rdc image) the first CUBIN's kernels and variables are read.
struct FatbinContents {
  std::string ptx;
  std::vector<int> ptx_archs;
  std::vector<int> sass_archs;
  ElfContents elf;
};

FatbinContents read_fatbin(const unsigned char* fatbin);

}  // namespace drvshim::fake
