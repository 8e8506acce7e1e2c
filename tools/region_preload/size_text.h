// parse_size(): a byte count as the preload library's environment gives it: decimal digits,
// optionally followed by one of K, M, G (or k, m, g: powers of 1024). Nothing else: no sign,
// no spaces, no fraction, no overflow. No allocation (it runs inside malloc).
#pragma once

#include <cstddef>
#include <cstdint>

namespace zsm_preload {

inline bool parse_size(const char* text, size_t* out) {
  if (text == nullptr || *text < '0' || *text > '9') return false;
  size_t v = 0;
  const char* c = text;
  for (; *c >= '0' && *c <= '9'; c++)
    if (__builtin_mul_overflow(v, size_t{10}, &v) ||
        __builtin_add_overflow(v, static_cast<size_t>(*c - '0'), &v))
      return false;
  unsigned shift = 0;
  switch (*c) {
    case '\0': break;
    case 'k': case 'K': shift = 10; break;
    case 'm': case 'M': shift = 20; break;
    case 'g': case 'G': shift = 30; break;
    default: return false;
  }
  if (shift != 0 && *++c != '\0') return false;
  if (shift != 0 && v > (SIZE_MAX >> shift)) return false;
  *out = v << shift;
  return true;
}

}  // namespace zsm_preload
