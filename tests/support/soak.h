// soak.h: what the soak tests share (tests/zsm/soak_test.cpp, tests/cache/cache_soak_test.cpp):
// their thread count, their length, and the record of mismatches any thread saw.
#pragma once

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <mutex>
#include <string>

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

// Mismatches seen by any thread, and the first one's description.
class Mismatches {
 public:
  void record(const std::string& what) {
    if (count_++ == 0) {
      std::lock_guard<std::mutex> guard(mu_);
      first_ = what;
    }
  }
  unsigned long count() const { return count_.load(); }
  std::string first() const {
    std::lock_guard<std::mutex> guard(mu_);
    return first_;
  }

 private:
  std::atomic<unsigned long> count_{0};
  mutable std::mutex mu_;
  std::string first_;
};

}  // namespace zsm_test
