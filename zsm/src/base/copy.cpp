// copy_payload(): zsm's copy of object bytes into and out of pool pages.
//
// Why not memcpy. glibc 2.36 (Debian 12; also Ubuntu 22.04's 2.35) copies sizes from
// x86_rep_movsb_threshold (2112 B on CPUs with erms) up to the L2 size with `rep movsb`. On
// AMD Zen that is slow when the destination is misaligned to the source, and zsm's payloads
// are: each starts 8 bytes past a 16-byte boundary (the object header) at any offset in its
// page, while callers' buffers are aligned. glibc 2.40 stopped using it on Zen 3/4
// (BZ 30994) and 2.39 got the backport; older systems keep it. docs/benchmarks.md ("The copy
// into and out of pages") has the measurements.
// A process-wide tunable is no answer for a library, so zsm does not call memcpy for these
// copies on x86-64.
//
// The copy. No `rep movsb` at any size; loads unaligned, stores aligned to dst:
//   n <= 64      two overlapping moves from both ends (1, 2, 4, 8 or 16 bytes; 32 + 32 for
//                n >= 32), no loop and no branch on alignment;
//   64 < n <= 128  the first and the last 64 bytes, 16-byte vectors;
//   n > 128      the first vector unaligned, then blocks of four vectors stored at aligned
//                addresses of dst while more than four vectors are left, then the last four
//                vectors unaligned, overlapping the blocks (all loads of the tail are done
//                before any store, so no byte is read after it was written; src and dst
//                must not overlap, as for memcpy).
// The n > 128 form comes in two widths: SSE2 (16-byte vectors, all baseline x86-64 has; the
// library is built without -march) and AVX2 (32-byte vectors), chosen at each call by
// __builtin_cpu_supports("avx2"), one load and test of the flags libgcc's constructor
// fills in at start-up (before any constructor of a user's; were they not filled in yet,
// the SSE2 form would run, which is as correct). AVX2 pays (docs/benchmarks.md); 64-byte
// AVX-512 vectors were not tried: Zen 4 splits them in two.
//
// Other architectures use the C library's memcpy: nothing there was measured slow.
//
// The instruction counts (tools/lib/count_pairs.py) leave every function named copy_payload*
// out of the allocator's figure, as they leave memcpy out, so the A/B's allocator-only
// counts mean what they meant with memcpy.
#include "base/copy.h"

#include <cstdint>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace zsm {
inline namespace ZSM_VARIANT_NS {

#if defined(__x86_64__)
namespace {

// Every helper here is always inlined: the instruction counts leave out the functions named
// copy_payload*, and these are not.
ZSM_ALWAYS_INLINE __m128i load16(const char* p) {
  return _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
}
ZSM_ALWAYS_INLINE void store16(char* p, __m128i v) {
  _mm_storeu_si128(reinterpret_cast<__m128i*>(p), v);
}
ZSM_ALWAYS_INLINE void store16_aligned(char* p, __m128i v) {
  _mm_store_si128(reinterpret_cast<__m128i*>(p), v);
}

// n in [sizeof(T), 2 * sizeof(T)]: the first and the last sizeof(T) bytes, which overlap
// unless n is exactly 2 * sizeof(T). Both loads come before both stores. Fixed-size
// __builtin_memcpy: one unaligned move each, never a call.
template <typename T>
ZSM_ALWAYS_INLINE void copy_payload_two(char* d, const char* s, size_t n) {
  T head, tail;
  __builtin_memcpy(&head, s, sizeof(T));
  __builtin_memcpy(&tail, s + n - sizeof(T), sizeof(T));
  __builtin_memcpy(d, &head, sizeof(T));
  __builtin_memcpy(d + n - sizeof(T), &tail, sizeof(T));
}

// n <= 64: overlapping moves of 1, 2, 4, 8 or 16 bytes from both ends; no loop.
ZSM_ALWAYS_INLINE void copy_payload_upto_64(char* d, const char* s, size_t n) {
  if (n >= 32) {
    __m128i a = load16(s), b = load16(s + 16), y = load16(s + n - 32), z = load16(s + n - 16);
    store16(d, a);
    store16(d + 16, b);
    store16(d + n - 32, y);
    store16(d + n - 16, z);
  } else if (n >= 16) {
    __m128i a = load16(s), z = load16(s + n - 16);
    store16(d, a);
    store16(d + n - 16, z);
  } else if (n >= 8) {
    copy_payload_two<uint64_t>(d, s, n);
  } else if (n >= 4) {
    copy_payload_two<uint32_t>(d, s, n);
  } else if (n >= 2) {
    copy_payload_two<uint16_t>(d, s, n);
  } else if (n == 1) {
    *d = *s;
  }
}

// 64 < n <= 128: the first and the last 64 bytes, four 16-byte moves each.
ZSM_ALWAYS_INLINE void copy_payload_65_to_128(char* d, const char* s, size_t n) {
  __m128i a = load16(s), b = load16(s + 16), c = load16(s + 32), e = load16(s + 48);
  __m128i w = load16(s + n - 64), x = load16(s + n - 48), y = load16(s + n - 32),
          z = load16(s + n - 16);
  store16(d, a);
  store16(d + 16, b);
  store16(d + 32, c);
  store16(d + 48, e);
  store16(d + n - 64, w);
  store16(d + n - 48, x);
  store16(d + n - 32, y);
  store16(d + n - 16, z);
}

// n > 128, 16-byte vectors: an unaligned first vector; then 64-byte blocks stored at
// 16-byte-aligned addresses of dst (loaded unaligned from src) while more than 64 bytes are
// left; then the last 64 bytes, unaligned, overlapping what the blocks wrote.
void copy_payload_large_sse2(char* d, const char* s, size_t n) {
  __m128i head = load16(s);
  __m128i w = load16(s + n - 64), x = load16(s + n - 48), y = load16(s + n - 32),
          z = load16(s + n - 16);
  size_t skew = 16 - (reinterpret_cast<uintptr_t>(d) & 15);  // 1..16
  char* to = d + skew;
  const char* from = s + skew;
  char* const last = d + n - 64;
  for (; to < last; to += 64, from += 64) {
    store16_aligned(to, load16(from));
    store16_aligned(to + 16, load16(from + 16));
    store16_aligned(to + 32, load16(from + 32));
    store16_aligned(to + 48, load16(from + 48));
  }
  store16(d, head);
  store16(last, w);
  store16(last + 16, x);
  store16(last + 32, y);
  store16(last + 48, z);
}

// n > 128, 32-byte vectors: the same shape, 128-byte blocks at 32-byte-aligned addresses.
#define ZSM_LOAD32(p) _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
#define ZSM_STORE32(p, v) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v)
#define ZSM_STORE32_ALIGNED(p, v) _mm256_store_si256(reinterpret_cast<__m256i*>(p), v)
ZSM_TARGET_AVX2 void copy_payload_large_avx2(char* d, const char* s, size_t n) {
  __m256i head = ZSM_LOAD32(s);
  __m256i w = ZSM_LOAD32(s + n - 128), x = ZSM_LOAD32(s + n - 96), y = ZSM_LOAD32(s + n - 64),
          z = ZSM_LOAD32(s + n - 32);
  size_t skew = 32 - (reinterpret_cast<uintptr_t>(d) & 31);  // 1..32
  char* to = d + skew;
  const char* from = s + skew;
  char* const last = d + n - 128;
  for (; to < last; to += 128, from += 128) {
    ZSM_STORE32_ALIGNED(to, ZSM_LOAD32(from));
    ZSM_STORE32_ALIGNED(to + 32, ZSM_LOAD32(from + 32));
    ZSM_STORE32_ALIGNED(to + 64, ZSM_LOAD32(from + 64));
    ZSM_STORE32_ALIGNED(to + 96, ZSM_LOAD32(from + 96));
  }
  ZSM_STORE32(d, head);
  ZSM_STORE32(last, w);
  ZSM_STORE32(last + 32, x);
  ZSM_STORE32(last + 64, y);
  ZSM_STORE32(last + 96, z);
}
#undef ZSM_LOAD32
#undef ZSM_STORE32
#undef ZSM_STORE32_ALIGNED

}  // namespace

bool copy_payload_avx2_usable() { return __builtin_cpu_supports("avx2"); }

void copy_payload_sse2(void* dst, const void* src, size_t n) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (n <= 64)
    copy_payload_upto_64(d, s, n);
  else if (n <= 128)
    copy_payload_65_to_128(d, s, n);
  else
    copy_payload_large_sse2(d, s, n);
}

void copy_payload_avx2(void* dst, const void* src, size_t n) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (n <= 64)
    copy_payload_upto_64(d, s, n);
  else if (n <= 128)
    copy_payload_65_to_128(d, s, n);
  else
    copy_payload_large_avx2(d, s, n);
}

void copy_payload(void* dst, const void* src, size_t n) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (n <= 64)
    copy_payload_upto_64(d, s, n);
  else if (n <= 128)
    copy_payload_65_to_128(d, s, n);
  else if (__builtin_cpu_supports("avx2"))
    copy_payload_large_avx2(d, s, n);
  else
    copy_payload_large_sse2(d, s, n);
}

#else  // not x86-64: the C library's memcpy

void copy_payload(void* dst, const void* src, size_t n) {
  if (n != 0) std::memcpy(dst, src, n);
}

#endif

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
