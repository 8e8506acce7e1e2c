// tests/region/region_support.h: what the region's tests share: the skip when userfaultfd is
// not available (with the library's own one-line reason), the page patterns, stats.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>

#include <gtest/gtest.h>
#include <zsm/region.h>

#include "region_patterns.h"

namespace zsm_test {

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

inline struct zsm_region_stats region_stats(zsm_region* r) {
  struct zsm_region_stats s {};
  EXPECT_EQ(zsm_region_stats(r, &s), 0);
  return s;
}

}  // namespace zsm_test
