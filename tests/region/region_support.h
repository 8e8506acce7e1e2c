// tests/region/region_support.h: what the region's tests share: the skip when userfaultfd is
// not available (with the library's own one-line reason), page patterns, and a region of
// pages for a test body.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include <gtest/gtest.h>
#include <zsm/region.h>

namespace zsm_test {

inline constexpr size_t kPage = 4096;

// "" when a region can be made here, else zsm_region_last_error()'s line.
inline std::string region_unavailable() {
  zsm_region* r = zsm_region_create(64 * kPage, nullptr);
  if (r == nullptr) return zsm_region_last_error();
  zsm_region_destroy(r);
  return "";
}

#define ZSM_REQUIRE_REGION()                                                  \
  do {                                                                        \
    if (std::string why = zsm_test::region_unavailable(); !why.empty()) {     \
      GTEST_SKIP() << why;                                                    \
    }                                                                         \
  } while (0)

// A compressible page for (page, version): text-like words that name both.
inline void fill_page(unsigned char* page, uint64_t p, uint64_t version) {
  for (size_t off = 0; off < kPage; off += 16) {
    uint64_t a = p * 0x9E3779B97F4A7C15ull ^ version;
    uint64_t b = (off / 16) % 7 + version * 3;
    std::memcpy(page + off, &a, 8);
    std::memcpy(page + off + 8, &b, 8);
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

inline struct zsm_region_stats region_stats(zsm_region* r) {
  struct zsm_region_stats s {};
  EXPECT_EQ(zsm_region_stats(r, &s), 0);
  return s;
}

}  // namespace zsm_test
