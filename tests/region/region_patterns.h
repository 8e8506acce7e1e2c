// tests/region/region_patterns.h: page contents a test can recompute: fill_page(p, version)
// writes a compressible page naming both (or, with `noise`, one that does not compress past
// its first 16 bytes), write_page_wordwise() writes it into the region one 8-byte word at a
// time, page_mismatch() finds where a page differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace zsm_test {

inline constexpr size_t kPage = 4096;

// splitmix64's finaliser: noise a test can recompute.
inline uint64_t mix(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// A compressible page for (page, version): text-like words that name both. With `noise`, every
// 16-byte word after the first is noise drawn from (page, version, offset) instead.
inline void fill_page(unsigned char* page, uint64_t p, uint64_t version, bool noise = false) {
  for (size_t off = 0; off < kPage; off += 16) {
    uint64_t a = p * 0x9E3779B97F4A7C15ull ^ version;
    uint64_t b = (off / 16) % 7 + version * 3;
    if (noise && off != 0) {
      a = mix(a + off);
      b = mix(a ^ b);
    }
    std::memcpy(page + off, &a, 8);
    std::memcpy(page + off + 8, &b, 8);
  }
}

// fill_page()'s contents written into a region's page one 8-byte store at a time, as a program
// would, so that eviction can meet the page half written (a memcpy may write it in any order).
inline void write_page_wordwise(unsigned char* page, uint64_t p, uint64_t version, bool noise = false) {
  unsigned char want[kPage];
  fill_page(want, p, version, noise);
  auto* dst = reinterpret_cast<volatile uint64_t*>(page);
  for (size_t i = 0; i < kPage / 8; ++i) {
    uint64_t w;
    std::memcpy(&w, want + i * 8, 8);
    dst[i] = w;
  }
}

// The index of the first 16-byte word that differs from fill_page(p, version, noise), or -1.
inline long page_mismatch(const unsigned char* page, uint64_t p, uint64_t version, bool noise = false) {
  unsigned char want[kPage];
  fill_page(want, p, version, noise);
  for (size_t off = 0; off < kPage; off += 16) {
    if (std::memcmp(page + off, want + off, 16) != 0) return static_cast<long>(off / 16);
  }
  return -1;
}

}  // namespace zsm_test
