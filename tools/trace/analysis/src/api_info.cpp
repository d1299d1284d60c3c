// SPDX-License-Identifier: Apache-2.0
#include <drvshim_trace/api_info.hpp>

#include <algorithm>
#include <unordered_map>

namespace drvshim::trace_analysis {
namespace {

struct Entry {
  const char* symbol;
  const char* base;
  int version;
  int flags;
  const char* names;
};

constexpr Entry kEntries[] = {
#define DRVSHIM_TRACE_FN(id, sym, base, ver, flags, interesting, n, names, hex) {#sym, #base, ver, flags, names},
#include "driver_api_table.inc"
#undef DRVSHIM_TRACE_FN
};

std::vector<std::string_view> split_names(std::string_view names) {
  std::vector<std::string_view> out;
  while (!names.empty()) {
    const auto comma = names.find(',');
    out.push_back(names.substr(0, comma));
    if (comma == std::string_view::npos) break;
    names.remove_prefix(comma + 1);
  }
  return out;
}

struct Index {
  std::vector<ApiInfo> infos;
  std::unordered_map<std::string_view, const ApiInfo*> by_symbol;
  std::unordered_map<std::string_view, const ApiInfo*> by_base;  // the current legacy-stream variant
  // Every legacy-stream variant of a base, newest first.
  std::unordered_map<std::string_view, std::vector<const ApiInfo*>> variants;
};

const Index& index() {
  static const Index idx = [] {
    Index i;
    i.infos.reserve(std::size(kEntries));
    for (const auto& e : kEntries) i.infos.push_back({e.symbol, e.base, split_names(e.names)});
    std::unordered_map<std::string_view, int> best_version;
    for (std::size_t k = 0; k < std::size(kEntries); ++k) {
      const auto& e = kEntries[k];
      i.by_symbol.emplace(e.symbol, &i.infos[k]);
      if (e.flags != 1) continue;
      auto& v = i.variants[e.base];
      v.push_back(&i.infos[k]);
      std::stable_sort(v.begin(), v.end(), [&](const ApiInfo* a, const ApiInfo* b) {
        return kEntries[static_cast<std::size_t>(a - i.infos.data())].version >
               kEntries[static_cast<std::size_t>(b - i.infos.data())].version;
      });
      auto [it, fresh] = best_version.emplace(e.base, e.version);
      if (fresh || e.version > it->second) {
        it->second = e.version;
        i.by_base[e.base] = &i.infos[k];
      }
    }
    return i;
  }();
  return idx;
}

}  // namespace

const ApiInfo* api_info(std::string_view symbol_or_base) {
  const Index& idx = index();
  if (auto it = idx.by_symbol.find(symbol_or_base); it != idx.by_symbol.end()) return it->second;
  if (auto it = idx.by_base.find(symbol_or_base); it != idx.by_base.end()) return it->second;
  return nullptr;
}

const ApiInfo* api_info(const recorder::Record& record) {
  // The interposer names the exact export ("sym"); a record without it (the in-process
  // trace) carries a base name, called through its current variant.
  const Index& idx = index();
  if (!record.symbol.empty()) {
    auto it = idx.by_symbol.find(record.symbol);
    return it != idx.by_symbol.end() ? it->second : nullptr;
  }
  // A base name: the newest variant with as many parameters as the record has arguments
  // (drvshim calls cuCtxCreate as _v4 or, on old drivers, as _v2).
  if (auto it = idx.variants.find(record.api); it != idx.variants.end()) {
    const std::size_t n = split_args(record.args).size();
    for (const ApiInfo* info : it->second) {
      if (info->params.size() == n) return info;
    }
    return it->second.front();
  }
  if (auto it = idx.by_symbol.find(record.api); it != idx.by_symbol.end()) return it->second;
  return nullptr;
}

std::vector<ArgValue> split_args(std::string_view args) {
  std::vector<ArgValue> out;
  std::size_t i = 0;
  while (i < args.size()) {
    ArgValue v;
    if (args.compare(i, 2, "->") == 0) {
      v.out = true;
      i += 2;
    }
    const std::size_t start = i;
    if (i < args.size() && args[i] == '"') {
      ++i;
      while (i < args.size() && args[i] != '"') i += args[i] == '\\' ? std::size_t{2} : std::size_t{1};
      i = std::min(i + 1, args.size());
    } else if (i < args.size() && args[i] == '{') {
      while (i < args.size() && args[i] != '}') ++i;
      i = std::min(i + 1, args.size());
    }
    const std::size_t comma = args.find(", ", i);
    const std::size_t end = comma == std::string_view::npos ? args.size() : comma;
    v.text = std::string(args.substr(start, end - start));
    v.known = v.text != "?" && v.text != "{...}";
    out.push_back(std::move(v));
    i = comma == std::string_view::npos ? args.size() : comma + 2;
  }
  return out;
}

std::optional<ArgValue> arg(const recorder::Record& record, std::string_view param) {
  const ApiInfo* info = api_info(record);
  if (info == nullptr) return std::nullopt;
  for (std::size_t k = 0; k < info->params.size(); ++k) {
    if (info->params[k] != param) continue;
    auto values = split_args(record.args);
    if (k >= values.size()) return std::nullopt;
    return values[k];
  }
  return std::nullopt;
}

}  // namespace drvshim::trace_analysis
