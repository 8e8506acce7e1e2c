// tests/bytes.h: byte strings for the codec and cache tests.
#pragma once

#include <cstddef>
#include <cstdint>
#include <random>
#include <vector>

namespace zsm_test {

using Bytes = std::vector<std::byte>;

// Incompressible bytes, the same for the same seed.
inline Bytes random_bytes(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Bytes b(n);
  for (auto& x : b) x = static_cast<std::byte>(rng());
  return b;
}

}  // namespace zsm_test
