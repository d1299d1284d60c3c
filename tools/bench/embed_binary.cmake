# SPDX-License-Identifier: Apache-2.0
# cmake -DIN=file -DOUT=header.hpp -DNAME=identifier -P embed_binary.cmake
# Writes `inline constexpr unsigned char NAME[] = {...};` for C++ to embed a binary file (a fatbin).
file(READ "${IN}" hex HEX)
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," bytes "${hex}")
string(REGEX REPLACE "(0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,0x..,)" "\\1\n" bytes "${bytes}")
file(WRITE "${OUT}" "#pragma once\n// Generated from ${IN}; do not edit.\ninline constexpr unsigned char ${NAME}[] = {\n${bytes}};\n")
