# SPDX-License-Identifier: Apache-2.0
# cmake -DIN=file -DOUT=header.hpp -DNAME=identifier -P embed_text.cmake
# Writes `inline constexpr const char NAME[] = R"...(<file>)...";` for C++ to embed a text file.
file(READ "${IN}" text)
file(WRITE "${OUT}" "#pragma once\n// Generated from ${IN}; do not edit.\ninline constexpr const char ${NAME}[] = R\"drvshim_embed(${text})drvshim_embed\";\n")
