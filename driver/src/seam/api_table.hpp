// SPDX-License-Identifier: Apache-2.0
#pragma once
// The driver function table's types, generated from api_list.hpp: an Api
// enumerator per function, its names, the ABI version asked for, whether it is
// required, and its function pointer type.
#include <cuda.h>
#include <cudaProfilerTypedefs.h>
#include <cudaTypedefs.h>

#include <array>
#include <cstddef>
#include <cstdint>

#include "seam/api_list.hpp"

namespace drvshim::detail {

enum class Need { Required, Optional };

enum class Api : std::uint16_t {
#define DRVSHIM_X(alias, name, ver, need) k_##alias,
  DRVSHIM_DRIVER_FUNCTIONS(DRVSHIM_X)
#undef DRVSHIM_X
      count_
};
inline constexpr std::size_t kApiCount = static_cast<std::size_t>(Api::count_);
constexpr std::size_t index(Api id) noexcept { return static_cast<std::size_t>(id); }

struct ApiInfo {
  const char* alias;
  const char* name;  // base name given to cuGetProcAddress
  int version;       // ABI version asked for
  bool required;
};
inline constexpr std::array<ApiInfo, kApiCount> kApiInfo{{
#define DRVSHIM_X(alias, name, ver, need) {#alias, #name, ver, Need::need == Need::Required},
    DRVSHIM_DRIVER_FUNCTIONS(DRVSHIM_X)
#undef DRVSHIM_X
}};
inline const char* api_name(Api id) noexcept { return kApiInfo[index(id)].name; }

template <Api id>
struct ApiType;
#define DRVSHIM_X(alias, name, ver, need) \
  template <>                             \
  struct ApiType<Api::k_##alias> {        \
    using type = PFN_##name##_v##ver;     \
  };
DRVSHIM_DRIVER_FUNCTIONS(DRVSHIM_X)
#undef DRVSHIM_X

using AnyFn = void (*)();

}  // namespace drvshim::detail
