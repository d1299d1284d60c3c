// SPDX-License-Identifier: Apache-2.0
// Real entry point -> wrapper, for cuGetProcAddress: the map is built at run
// time from the real library (ZLUDA's way), so a lookup hands back the
// wrapper of exactly the variant the real driver chose for the (name,
// version, flags) asked, never one derived by appending _v2 or _ptsz.
#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "interposer.hpp"

namespace drvshim::trace_interposer {
namespace {
// Sorted by address; written once before any lookup (the constructor), read without a lock.
std::vector<std::pair<const void*, int>>* g_map = nullptr;
}  // namespace

void build_pointer_map() noexcept {
  try {
    auto* map = new std::vector<std::pair<const void*, int>>;
    // Default-stream names first: a driver that hands out one address for a function and
    // its per-thread-stream variant (drvshim's fake) is shown calling the default one.
    for (const int flavour : {1, 2}) {
      for (std::size_t i = 0; i < kFnCount; ++i) {
        if (kFns[i].flags == flavour && g_real[i] != nullptr) map->emplace_back(g_real[i], static_cast<int>(i));
      }
      for (std::size_t i = 0; i < kFnCount; ++i) {
        if (kFns[i].flags == flavour && g_lookup[i] != nullptr && g_lookup[i] != g_real[i]) {
          map->emplace_back(g_lookup[i], static_cast<int>(i));
        }
      }
    }
    // Two names for one address (a driver that aliases variants): the first name, in table order, wins.
    std::stable_sort(map->begin(), map->end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    map->erase(std::unique(map->begin(), map->end(), [](const auto& a, const auto& b) { return a.first == b.first; }),
               map->end());
    g_map = map;
  } catch (...) {
    g_map = nullptr;  // lookups then hand out real pointers, counted as untraced
  }
}

int id_for_lookup(const char* symbol, int version, unsigned long long flags) noexcept {
  if (symbol == nullptr || *symbol == '\0') return -1;
  const int flavour = flags == 2 ? 2 : 1;  // DEFAULT (0) and LEGACY (1) mean the legacy stream
  int best = -1;
  for (std::size_t i = 0; i < kFnCount; ++i) {
    if (kFns[i].flags != flavour || kFns[i].version == 0 || kFns[i].version > version || g_real[i] == nullptr ||
        std::strcmp(kFns[i].base, symbol) != 0) {
      continue;
    }
    if (best < 0 || kFns[i].version > kFns[static_cast<std::size_t>(best)].version) best = static_cast<int>(i);
  }
  return best;
}

int id_of_real(const void* fn) noexcept {
  if (g_map == nullptr) return -1;
  const auto it = std::lower_bound(g_map->begin(), g_map->end(), fn,
                                   [](const auto& entry, const void* key) { return entry.first < key; });
  return it != g_map->end() && it->first == fn ? it->second : -1;
}

}  // namespace drvshim::trace_interposer
