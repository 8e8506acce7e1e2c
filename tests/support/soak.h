// soak.h: what the soak tests share (tests/zsm/soak_test.cpp, tests/cache/cache_soak_test.cpp):
// their thread count and their length. Their threads' failures go to a Mismatches
// (workload.h).
#pragma once

#include <cstdint>
#include <cstdlib>

#include "workload.h"

namespace zsm_test {

inline constexpr int kThreads = 4;

// Operations per soak test: ZSM_SOAK_OPS, else `full`, or an eighth of it under sanitizers
// (which slow these loops down 9x (ASan + UBSan, Debug) to 18x (TSan)).
inline uint64_t soak_ops(uint64_t full) {
  if (const char* env = std::getenv("ZSM_SOAK_OPS")) return std::strtoull(env, nullptr, 10);
#ifdef ZSM_TEST_SANITIZED
  return full / 8;
#else
  return full;
#endif
}

}  // namespace zsm_test
