// SPDX-License-Identifier: Apache-2.0
#pragma once
// Host-registration cases: one table run against the fake driver (CI,
// test_memory.cpp) and the real driver (tests/gpu/test_gpu_memory.cpp); the
// results must agree (docs/contract-cases.md).
#include <drvshim/drvshim.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace drvshim_test {

struct RegisterCase {
  const char* name;
  std::size_t offset;  // into a page-aligned 64 KiB host block
  std::size_t bytes;
  std::size_t offset2;  // a second registration, when bytes2 != 0
  std::size_t bytes2;
  const char* expected;  // "ok", an error kind, or the CUresult name of the second registration
};

inline const std::vector<RegisterCase>& register_cases() {
  static const std::vector<RegisterCase> cases = {
      {"page-aligned range", 0, 8192, 0, 0, "ok"},
      {"unaligned start and size", 100, 5000, 0, 0, "ok"},
      {"zero size", 0, 0, 0, 0, "invalid-argument"},
      {"identical range twice", 0, 4096, 0, 4096, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"},
      {"interior overlap", 0, 16384, 4096, 4096, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"},
      {"partial overlap at the end", 4096, 8192, 8192, 8192, "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED"},
      {"adjacent ranges", 0, 8192, 8192, 8192, "ok"},
  };
  return cases;
}

// "ok", the CUresult name of a CudaError, or the drvshim error kind.
inline std::string outcome(const std::function<void()>& f) {
  try {
    f();
    return "ok";
  } catch (const drvshim::CudaError& e) {
    return e.code_name();
  } catch (const drvshim::InvalidArgumentError&) {
    return "invalid-argument";
  } catch (const drvshim::UnsupportedError&) {
    return "unsupported";
  }
}

// Runs one case in `ctx`; registrations are undone before returning.
inline std::string run_register_case(const drvshim::ContextRef& ctx, const RegisterCase& c) {
  std::vector<std::uint8_t> block(65536 + 4096);
  auto* base =
      reinterpret_cast<std::uint8_t*>((reinterpret_cast<std::uintptr_t>(block.data()) + 4095) & ~std::uintptr_t{4095});
  std::optional<drvshim::RegisteredRange> first;
  std::string got =
      outcome([&] { first.emplace(drvshim::RegisteredRange::register_range(ctx, base + c.offset, c.bytes)); });
  if (got == "ok" && c.bytes2 != 0) {
    got = outcome([&] { (void)drvshim::RegisteredRange::register_range(ctx, base + c.offset2, c.bytes2); });
  }
  return got;
}

}  // namespace drvshim_test
