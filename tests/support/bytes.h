// tests/support/bytes.h: the byte strings that the tests and the fuzzers (tests/fuzz/) store
// and check against: deterministic patterns (mix64, fill_pattern, make_pattern) and random bytes.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

namespace zsm_test {

using Bytes = std::vector<std::byte>;

// splitmix64's finaliser: a cheap, well-mixed 64-bit hash.
inline uint64_t mix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// Byte loops that give libFuzzer no coverage worth steering by and take most of an input's
// time when instrumented: left out of clang's coverage instrumentation (and out of line, so
// that the attribute holds).
#if defined(__clang__)
#define ZSM_TEST_NO_COVERAGE __attribute__((no_sanitize("coverage"), noinline))
#else
#define ZSM_TEST_NO_COVERAGE
#endif

// Fills `n` bytes with the pattern of `seed`: every 8-byte word differs, and byte i depends on
// i, so that bytes read from the wrong place or the wrong object do not match.
ZSM_TEST_NO_COVERAGE inline void fill_pattern(void* dst, size_t n, uint64_t seed) {
  auto* p = static_cast<uint8_t*>(dst);
  const uint64_t base = mix64(seed);
  for (size_t i = 0; i < n; i += 8) {
    const uint64_t word = mix64(base + i);
    std::memcpy(p + i, &word, std::min<size_t>(8, n - i));
  }
}

inline std::vector<uint8_t> make_pattern(size_t n, uint64_t seed) {
  std::vector<uint8_t> v(n);
  fill_pattern(v.data(), n, seed);
  return v;
}

// Incompressible bytes, the same for the same seed.
inline Bytes random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return b;
}

}  // namespace zsm_test
