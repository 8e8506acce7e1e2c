// tests/fuzz/fuzz_support.h: what the two libFuzzer targets share.
//
// FuzzInput reads a fuzz input front to back as the small integers and byte strings that a
// target decodes its operations from. Past the end every read gives 0 and byte strings come
// back short, so any input is a complete program and the seeds of make_seeds.py are easy to
// write by hand. FUZZ_CHECK reports a broken invariant on stderr and aborts, which libFuzzer
// records as a crash together with the input. Stored objects and values are filled with the
// patterns of tests/support/bytes.h (zsm_test::fill_pattern) and checked with first_difference().
#pragma once

#include <algorithm>
#include <cstdarg>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <span>

#include "../support/bytes.h"

namespace zsm_fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), left_(size) {}

  [[nodiscard]] bool empty() const { return left_ == 0; }

  uint8_t u8() {
    if (left_ == 0) return 0;
    left_--;
    return *data_++;
  }

  // Little-endian.
  uint16_t u16() {
    uint16_t lo = u8();
    return static_cast<uint16_t>(lo | (u8() << 8));
  }

  // Up to n bytes, fewer when the input runs out.
  std::span<const uint8_t> bytes(size_t n) {
    n = std::min(n, left_);
    std::span<const uint8_t> out(data_, n);
    data_ += n;
    left_ -= n;
    return out;
  }

 private:
  const uint8_t* data_;
  size_t left_;
};

[[noreturn]] __attribute__((format(printf, 4, 5))) inline void fail(const char* file, int line,
                                                                    const char* cond,
                                                                    const char* fmt, ...) {
  std::fprintf(stderr, "%s:%d: FUZZ_CHECK(%s) failed: ", file, line, cond);
  va_list args;
  va_start(args, fmt);
  std::vfprintf(stderr, fmt, args);
  va_end(args);
  std::fputc('\n', stderr);
  std::abort();
}

// FUZZ_CHECK(condition, printf format, arguments...): abort with the message unless it holds.
#define FUZZ_CHECK(cond, ...)                                             \
  do {                                                                    \
    if (!(cond)) ::zsm_fuzz::fail(__FILE__, __LINE__, #cond, __VA_ARGS__); \
  } while (0)

// The index of the first byte where a and b differ, n when they do not.
ZSM_TEST_NO_COVERAGE inline size_t first_difference(const uint8_t* a, const uint8_t* b, size_t n) {
  if (std::memcmp(a, b, n) == 0) return n;
  size_t at = 0;
  while (a[at] == b[at]) at++;
  return at;
}

}  // namespace zsm_fuzz
