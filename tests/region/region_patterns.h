// tests/region/region_patterns.h: page contents a test can recompute: fill_page(p, version)
// writes a compressible page naming both, write_page_wordwise() writes it into the region one
// 8-byte word at a time, page_mismatch() finds where a page differs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace zsm_test {

inline constexpr size_t kPage = 4096;

// A compressible page for (page, version): text-like words that name both.
inline void fill_page(unsigned char* page, uint64_t p, uint64_t version) {
  for (size_t off = 0; off < kPage; off += 16) {
    uint64_t a = p * 0x9E3779B97F4A7C15ull ^ version;
    uint64_t b = (off / 16) % 7 + version * 3;
    std::memcpy(page + off, &a, 8);
    std::memcpy(page + off + 8, &b, 8);
  }
}

// fill_page()'s contents written into a region's page one 8-byte store at a time, as a program
// would, so that eviction can meet the page half written (a memcpy may write it in any order).
inline void write_page_wordwise(unsigned char* page, uint64_t p, uint64_t version) {
  unsigned char want[kPage];
  fill_page(want, p, version);
  auto* dst = reinterpret_cast<volatile uint64_t*>(page);
  for (size_t i = 0; i < kPage / 8; ++i) {
    uint64_t w;
    std::memcpy(&w, want + i * 8, 8);
    dst[i] = w;
  }
}

// The index of the first 16-byte word that differs from fill_page(p, version), or -1.
inline long page_mismatch(const unsigned char* page, uint64_t p, uint64_t version) {
  unsigned char want[kPage];
  fill_page(want, p, version);
  for (size_t off = 0; off < kPage; off += 16) {
    if (std::memcmp(page + off, want + off, 16) != 0) return static_cast<long>(off / 16);
  }
  return -1;
}

}  // namespace zsm_test
