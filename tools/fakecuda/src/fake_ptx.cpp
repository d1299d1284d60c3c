// SPDX-License-Identifier: Apache-2.0
// What the fake JIT reads and writes: PTX entries (with their parameter
// layout) and module-scope variables (with simple initializers), and the JIT
// options' outputs (logs, wall time).
#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "fake_engine.hpp"

namespace drvshim::fake {
namespace {

size_t ptx_type_size(const std::string& t) {
  if (t == ".u64" || t == ".s64" || t == ".b64" || t == ".f64") return 8;
  if (t == ".u32" || t == ".s32" || t == ".b32" || t == ".f32") return 4;
  if (t == ".u16" || t == ".s16" || t == ".b16" || t == ".f16") return 2;
  if (t == ".u8" || t == ".s8" || t == ".b8") return 1;
  return 0;
}

// One declaration such as ".param .align 8 .b8 p[24]" or ".global .u32 counter":
// returns (size, alignment), or (0, 0) when it cannot be read.
std::pair<size_t, size_t> ptx_decl(const std::string& decl) {
  std::vector<std::string> words;
  std::string w;
  for (char c : decl) {
    if (c == ' ' || c == '\t' || c == ',' || c == ';') {
      if (!w.empty()) words.push_back(w);
      w.clear();
    } else {
      w += c;
    }
  }
  if (!w.empty()) words.push_back(w);
  size_t align = 0;
  size_t elem = 0;
  size_t count = 1;
  for (size_t i = 0; i < words.size(); ++i) {
    if (words[i] == ".align" && i + 1 < words.size()) align = std::strtoul(words[i + 1].c_str(), nullptr, 10);
    if (const size_t sz = ptx_type_size(words[i]); sz != 0) elem = sz;
    const auto lb = words[i].find('[');
    if (lb != std::string::npos && elem != 0) count = std::strtoul(words[i].c_str() + lb + 1, nullptr, 10);
  }
  if (elem == 0) return {0, 0};
  return {elem * count, align != 0 ? align : elem};
}

std::string ptx_name(const std::string& decl) {
  // The last word, without an array suffix.
  auto end = decl.find_last_not_of(" \t;,)");
  if (end == std::string::npos) return {};
  auto start = decl.find_last_of(" \t", end);
  std::string name =
      decl.substr(start == std::string::npos ? 0 : start + 1, end - (start == std::string::npos ? 0 : start + 1) + 1);
  if (auto lb = name.find('['); lb != std::string::npos) name.resize(lb);
  return name;
}

// Writes a variable's initializer ("5", "0f3F800000", "{1, 2, 3}") into its memory.
void ptx_initialize(const std::string& decl, std::string values, unsigned char* mem, size_t size) {
  size_t elem = 0;
  for (const char* t :
       {".u64", ".s64", ".b64", ".f64", ".u32", ".s32", ".b32", ".f32", ".u16", ".s16", ".b16", ".u8", ".s8", ".b8"}) {
    if (decl.find(t) != std::string::npos) {
      elem = ptx_type_size(t);
      break;
    }
  }
  if (elem == 0) return;
  for (char& c : values) {
    if (c == '{' || c == '}' || c == ',') c = ' ';
  }
  size_t offset = 0;
  const char* p = values.c_str();
  while (offset + elem <= size) {
    while (*p == ' ' || *p == '\t' || *p == '\n') ++p;
    if (*p == '\0') break;
    unsigned long long bits = 0;
    char* next = nullptr;
    if (p[0] == '0' && (p[1] == 'f' || p[1] == 'd' || p[1] == 'F' || p[1] == 'D')) {
      bits = std::strtoull(p + 2, &next, 16);
    } else {
      bits = static_cast<unsigned long long>(std::strtoll(p, &next, 0));
    }
    if (next == p) break;
    std::memcpy(mem + offset, &bits, elem);
    offset += elem;
    p = next;
  }
}

}  // namespace

// Parses entries and globals; returns an error text for unreadable PTX.
std::string parse_ptx(const std::string& ptx, FakeModule& m) {
  if (ptx.find(".version") == std::string::npos) return "ptxas fatal : Parsing error: missing .version directive";
  if (const auto bad = ptx.find("syntax_error"); bad != std::string::npos) {
    const auto line = 1 + std::count(ptx.begin(), ptx.begin() + static_cast<long>(bad), '\n');
    return "ptxas application ptx input, line " + std::to_string(line) +
           "; fatal   : Parsing error near 'syntax_error': syntax error";
  }
  size_t pos = 0;
  while ((pos = ptx.find(".entry", pos)) != std::string::npos) {
    const auto open = ptx.find('(', pos);
    const auto close = ptx.find(')', open);
    if (open == std::string::npos || close == std::string::npos) return "ptxas fatal : unterminated .entry";
    auto* f = new FakeFunction;
    f->module = &m;
    std::string head = ptx.substr(pos + 6, open - pos - 6);
    head.erase(0, head.find_first_not_of(" \t\n"));
    head.erase(head.find_last_not_of(" \t\n") + 1);
    f->name = head;
    size_t offset = 0;
    std::string params = ptx.substr(open + 1, close - open - 1);
    size_t p = 0;
    while ((p = params.find(".param", p)) != std::string::npos) {
      const auto end = params.find_first_of(",", p);
      const auto decl = params.substr(p + 6, (end == std::string::npos ? params.size() : end) - p - 6);
      const auto [size, align] = ptx_decl(decl);
      if (size == 0) {
        delete f;
        return "ptxas fatal : unreadable parameter '" + decl + "'";
      }
      offset = (offset + align - 1) / align * align;
      f->params.emplace_back(offset, size);
      offset += size;
      p += 6;
    }
    m.functions.push_back(f);
    pos = close;
  }
  // Module-scope variables: __device__ (.global) and __constant__ (.const), with
  // simple initializers ("= 5", "= 0f3F800000", "= {1, 2}") applied.
  for (const char* space : {".global", ".const"}) {
    const size_t space_len = std::strlen(space);
    pos = 0;
    while ((pos = ptx.find(space, pos)) != std::string::npos) {
      const auto end = ptx.find(';', pos);
      const std::string whole = ptx.substr(pos + space_len, end - pos - space_len);
      pos = end;
      const auto eq = whole.find('=');
      const std::string decl = whole.substr(0, eq);
      const auto [size, align] = ptx_decl(decl);
      if (size == 0) continue;
      // The space also matches instructions (ld.global...): a name seen twice is not a second variable.
      const std::string name = ptx_name(decl);
      if (name.empty() || m.globals.count(name) != 0) continue;
      void* mem = std::calloc(1, size);
      if (eq != std::string::npos) ptx_initialize(decl, whole.substr(eq + 1), static_cast<unsigned char*>(mem), size);
      m.globals[name] = {reinterpret_cast<uintptr_t>(mem), size};
    }
  }
  return {};
}

void write_log(unsigned n, CUjit_option* opts, void** values, CUjit_option buffer, CUjit_option size_opt,
               const std::string& text) {
  char* buf = nullptr;
  size_t cap = 0;
  for (unsigned i = 0; i < n; ++i) {
    if (opts[i] == buffer) buf = static_cast<char*>(values[i]);
    if (opts[i] == size_opt) cap = reinterpret_cast<uintptr_t>(values[i]);
  }
  if (buf != nullptr && cap > 0) std::snprintf(buf, cap, "%s", text.c_str());
}

// CU_JIT_WALL_TIME "overwrites the option value" with a float: the slot
// itself, as the driver does (contract case "JIT wall time reported").
void write_wall_time(unsigned n, CUjit_option* opts, void** values, float ms) {
  for (unsigned i = 0; i < n; ++i) {
    if (opts[i] == CU_JIT_WALL_TIME) std::memcpy(&values[i], &ms, sizeof ms);
  }
}

// The info log: a summary line, and with CU_JIT_LOG_VERBOSE ptxas's lines for
// every entry function (about 300 bytes each, as on the H200).
std::string info_log(const FakeModule& m, unsigned n, CUjit_option* opts, void** values) {
  std::string log = "ptxas info    : fake JIT: " + std::to_string(m.functions.size()) + " entry function(s)\n";
  bool verbose = false;
  for (unsigned i = 0; i < n; ++i) {
    if (opts[i] == CU_JIT_LOG_VERBOSE) verbose = reinterpret_cast<uintptr_t>(values[i]) != 0;
  }
  if (!verbose) return log;
  log += "ptxas info    : 0 bytes gmem\n";
  for (const FakeFunction* f : m.functions) {
    log += "ptxas info    : Compiling entry function '" + f->name + "' for 'sm_90'\n";
    log += "ptxas info    : Function properties for " + f->name + "\n";
    log += "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n";
    log += "ptxas info    : Used 32 registers, used 0 barriers, " + std::to_string(380 + 8 * f->params.size()) +
           " bytes cmem[0]\n";
  }
  return log;
}

CUresult refuse_image(Engine& e, const char* what, unsigned n, CUjit_option* opts, void** values) {
  const std::string why = std::string("drvshim fake driver: ") + what +
                          ": the fake runs kernels from PTX text (and libraries from fatbins that carry PTX or a "
                          "CUBIN); compile to PTX for tests on the fake";
  write_log(n, opts, values, CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, why);
  if (e.refusals_reported.insert(what).second) std::fprintf(stderr, "%s\n", why.c_str());
  return CUDA_ERROR_INVALID_IMAGE;
}

}  // namespace drvshim::fake
