// SPDX-License-Identifier: Apache-2.0
// The compile cache's key hash: drvshim's SHA-256 (SHA instructions where the
// CPU has them, else portable code) against OpenSSL's libcrypto (EVP), on the
// kind of input a key is: labelled, length-prefixed fields, a few KB in all.
// Also what linking libcrypto would cost every process: the time to map it.
//
//   bench_cache_key                 Google Benchmark over 1, 4 and 16 KB keys
//   bench_cache_key --load-only     prints the dlopen time of libcrypto.so.3 (run in a fresh process)
//
// libcrypto is reached with dlopen, not linked, so the load is measured in a
// process that has not mapped it yet. Results and the decision: docs/DESIGN.md.
#include <benchmark/benchmark.h>
#include <dlfcn.h>
#include <openssl/evp.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "cache/sha256.hpp"

namespace {

using drvshim::detail::Sha256;

// A key-like list of fields: a source of `source_bytes`, the name, a few
// header digests, the options, NVRTC's identity.
std::vector<std::pair<std::string, std::string>> key_fields(std::size_t source_bytes) {
  std::vector<std::pair<std::string, std::string>> f;
  f.emplace_back("schema", "drvshim-compile-cache-2");
  std::string source;
  while (source.size() < source_bytes)
    source += "extern \"C\" __global__ void k(float* p) { p[threadIdx.x] *= 2.0f; }\n";
  source.resize(source_bytes);
  f.emplace_back("source", source);
  f.emplace_back("name", "kernels.cu");
  for (int i = 0; i < 4; ++i) {
    f.emplace_back("include",
                   "include|/usr/local/cuda/include|cuda_fp16.h->/usr/local/cuda/include/cuda_fp16.h="
                   "a3f1c0d2e4b5968778695a4b3c2d1e0f00112233445566778899aabbccddeeff;");
  }
  for (const char* o :
       {"--gpu-architecture=sm_90", "--std=c++17", "-DBLOCK=256", "--use_fast_math", "-I/usr/local/cuda/include"}) {
    f.emplace_back("option", o);
  }
  f.emplace_back("nvrtc", "nvrtc 123456789:1732900000000000000; builtins 9876543:1732900000000000000");
  f.emplace_back("link", "none");
  return f;
}

// The same framing Sha256::field uses: label, u64 length, bytes.
template <class Update>
void feed(const std::vector<std::pair<std::string, std::string>>& fields, Update&& update) {
  for (const auto& [label, value] : fields) {
    update(label.data(), label.size());
    const std::uint64_t n = value.size();
    update(&n, sizeof n);
    update(value.data(), value.size());
  }
}

void drvshim_sha256(benchmark::State& state, bool cpu) {
  const auto fields = key_fields(static_cast<std::size_t>(state.range(0)));
  Sha256::use_cpu_instructions(cpu);
  if (cpu && !Sha256::uses_cpu_instructions()) state.SkipWithError("this CPU has no SHA instructions");
  for (auto _ : state) {
    Sha256 h;
    for (const auto& [label, value] : fields) h.field(label, value);
    auto digest = h.finish();
    benchmark::DoNotOptimize(digest);
  }
  Sha256::use_cpu_instructions(true);
}

// libcrypto's entry points, reached with dlsym.
struct Crypto {
  void* handle = nullptr;
  double load_ms = 0.0;
  decltype(&EVP_MD_CTX_new) ctx_new = nullptr;
  decltype(&EVP_MD_CTX_free) ctx_free = nullptr;
  decltype(&EVP_DigestInit_ex) init = nullptr;
  decltype(&EVP_DigestUpdate) update = nullptr;
  decltype(&EVP_DigestFinal_ex) final = nullptr;
  decltype(&EVP_sha256) sha256 = nullptr;
  decltype(&EVP_MD_fetch) fetch = nullptr;

  template <class T>
  void get(T& fn, const char* name) {
    void* p = dlsym(handle, name);
    std::memcpy(&fn, &p, sizeof p);
  }
  static Crypto& instance() {
    static Crypto c = [] {
      Crypto k;
      const auto t0 = std::chrono::steady_clock::now();
      k.handle = dlopen("libcrypto.so.3", RTLD_NOW | RTLD_LOCAL);
      k.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
      if (k.handle == nullptr) return k;
      k.get(k.ctx_new, "EVP_MD_CTX_new");
      k.get(k.ctx_free, "EVP_MD_CTX_free");
      k.get(k.init, "EVP_DigestInit_ex");
      k.get(k.update, "EVP_DigestUpdate");
      k.get(k.final, "EVP_DigestFinal_ex");
      k.get(k.sha256, "EVP_sha256");
      k.get(k.fetch, "EVP_MD_fetch");
      return k;
    }();
    return c;
  }
};

// As a drop-in would use it: a context per key, the implicitly fetched SHA-256.
void openssl_per_key(benchmark::State& state) {
  Crypto& c = Crypto::instance();
  if (c.handle == nullptr) return state.SkipWithError("libcrypto.so.3 not found");
  const auto fields = key_fields(static_cast<std::size_t>(state.range(0)));
  for (auto _ : state) {
    EVP_MD_CTX* ctx = c.ctx_new();
    c.init(ctx, c.sha256(), nullptr);
    feed(fields, [&](const void* p, std::size_t n) { c.update(ctx, p, n); });
    unsigned char digest[32];
    unsigned int len = 0;
    c.final(ctx, digest, &len);
    c.ctx_free(ctx);
    benchmark::DoNotOptimize(digest);
  }
}

// At its best: the algorithm fetched once, one context reused.
void openssl_reused(benchmark::State& state) {
  Crypto& c = Crypto::instance();
  if (c.handle == nullptr) return state.SkipWithError("libcrypto.so.3 not found");
  const auto fields = key_fields(static_cast<std::size_t>(state.range(0)));
  EVP_MD* md = c.fetch(nullptr, "SHA256", nullptr);
  EVP_MD_CTX* ctx = c.ctx_new();
  for (auto _ : state) {
    c.init(ctx, md, nullptr);
    feed(fields, [&](const void* p, std::size_t n) { c.update(ctx, p, n); });
    unsigned char digest[32];
    unsigned int len = 0;
    c.final(ctx, digest, &len);
    benchmark::DoNotOptimize(digest);
  }
  c.ctx_free(ctx);
}

BENCHMARK_CAPTURE(drvshim_sha256, sha_instructions, true)->Arg(1024)->Arg(4096)->Arg(16384);
BENCHMARK_CAPTURE(drvshim_sha256, portable, false)->Arg(1024)->Arg(4096)->Arg(16384);
BENCHMARK(openssl_per_key)->Arg(1024)->Arg(4096)->Arg(16384);
BENCHMARK(openssl_reused)->Arg(1024)->Arg(4096)->Arg(16384);

}  // namespace

int main(int argc, char** argv) {
  if (argc == 2 && std::strcmp(argv[1], "--load-only") == 0) {
    Crypto& c = Crypto::instance();
    std::printf("dlopen(libcrypto.so.3): %.3f ms%s\n", c.load_ms, c.handle == nullptr ? " (not found)" : "");
    return c.handle == nullptr ? 1 : 0;
  }
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  std::printf("dlopen(libcrypto.so.3) in this process: %.3f ms\n", Crypto::instance().load_ms);
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
