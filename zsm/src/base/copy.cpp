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
// The copy. No `rep movsb` at any size; loads unaligned; two shapes above 128 B:
//   n <= 64      two overlapping moves from both ends (1, 2, 4, 8 or 16 bytes; 32 + 32 for
//                n >= 32), no loop and no branch on alignment;
//   64 < n <= 128  the first and the last 64 bytes, 16-byte vectors;
//   n > 128, unaligned: blocks of four vectors from the start while more than four vectors
//                are left, stored unaligned, then the last four vectors, overlapping the
//                blocks. The trip count depends on n alone. zsm's payloads sit 8 bytes past
//                a 16-byte boundary, and in classes of size 16 mod 32 neighbouring payloads
//                alternate between 8 and 24 mod 32: a loop whose trip count followed the
//                destination's alignment ran 5 or 6 times at 784 B, and its exit
//                mispredicted (docs/design.md, "The copy").
//   n > 128, destination-aligned: the first vector unaligned, then blocks of four vectors
//                stored at aligned addresses of dst while more than four vectors are left,
//                then the last four vectors unaligned, overlapping the blocks. Above about
//                1 KiB the aligned stores pay for the one misprediction.
// copy_payload() takes the unaligned shape up to kUnalignedUpTo bytes and the aligned one
// above; copy_payload_for_class() makes that choice once per class, from the largest payload
// the class holds, and hands the cached store a copy it tail-calls (copy.h).
// Both n > 128 shapes come in two widths: SSE2 (16-byte vectors, all baseline x86-64 has; the
// library is built without -march) and AVX2 (32-byte vectors), chosen once, when the library
// is loaded: `avx2` below is set from __builtin_cpu_supports("avx2") by a static initialiser,
// after libgcc's constructor has filled in the CPU's flags (were it read before, by a user's
// constructor, the SSE2 form would run, which is as correct). No call reads the CPU model.
// AVX2 pays (docs/benchmarks.md); 64-byte AVX-512 vectors were not tried: Zen 4 splits them in
// two.
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

// n > 128, unaligned, 16-byte vectors: 64-byte blocks from the start while more than 64 bytes
// are left, then the last 64 bytes, overlapping what the blocks wrote. ceil((n - 64) / 64)
// blocks: a trip count of n alone.
ZSM_ALWAYS_INLINE void copy_unaligned_sse2(char* d, const char* s, size_t n) {
  const size_t body = n - 64;
  for (size_t i = 0; i < body; i += 64) {
    __m128i a = load16(s + i), b = load16(s + i + 16), c = load16(s + i + 32),
            e = load16(s + i + 48);
    store16(d + i, a);
    store16(d + i + 16, b);
    store16(d + i + 32, c);
    store16(d + i + 48, e);
  }
  __m128i w = load16(s + body), x = load16(s + body + 16), y = load16(s + body + 32),
          z = load16(s + body + 48);
  store16(d + body, w);
  store16(d + body + 16, x);
  store16(d + body + 32, y);
  store16(d + body + 48, z);
}

// n > 128, destination-aligned, 16-byte vectors: an unaligned first vector; then 64-byte
// blocks stored at 16-byte-aligned addresses of dst (loaded unaligned from src) while more
// than 64 bytes are left; then the last 64 bytes, unaligned, overlapping what the blocks
// wrote.
ZSM_ALWAYS_INLINE void copy_aligned_sse2(char* d, const char* s, size_t n) {
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

// The same two shapes with 32-byte vectors: 128-byte blocks, aligned ones at 32-byte-aligned
// addresses of dst.
#define ZSM_LOAD32(p) _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))
#define ZSM_STORE32(p, v) _mm256_storeu_si256(reinterpret_cast<__m256i*>(p), v)
#define ZSM_STORE32_ALIGNED(p, v) _mm256_store_si256(reinterpret_cast<__m256i*>(p), v)
ZSM_TARGET_AVX2 ZSM_ALWAYS_INLINE void copy_unaligned_avx2(char* d, const char* s, size_t n) {
  const size_t body = n - 128;
  for (size_t i = 0; i < body; i += 128) {
    __m256i a = ZSM_LOAD32(s + i), b = ZSM_LOAD32(s + i + 32), c = ZSM_LOAD32(s + i + 64),
            e = ZSM_LOAD32(s + i + 96);
    ZSM_STORE32(d + i, a);
    ZSM_STORE32(d + i + 32, b);
    ZSM_STORE32(d + i + 64, c);
    ZSM_STORE32(d + i + 96, e);
  }
  __m256i w = ZSM_LOAD32(s + body), x = ZSM_LOAD32(s + body + 32),
          y = ZSM_LOAD32(s + body + 64), z = ZSM_LOAD32(s + body + 96);
  ZSM_STORE32(d + body, w);
  ZSM_STORE32(d + body + 32, x);
  ZSM_STORE32(d + body + 64, y);
  ZSM_STORE32(d + body + 96, z);
}

ZSM_TARGET_AVX2 ZSM_ALWAYS_INLINE void copy_aligned_avx2(char* d, const char* s, size_t n) {
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

// n <= 128: the moves without a loop. Out of line, so that the shapes above 128 B, which
// the pool's classes mostly take, keep no registers for it.
ZSM_COPY_FUNCTION void copy_payload_small(char* d, const char* s, size_t n) {
  if (n <= 64)
    copy_payload_upto_64(d, s, n);
  else
    copy_payload_65_to_128(d, s, n);
}

// Any n: `Large` above 128 bytes, copy_payload_small() (tail-called) up to it. Twice, as the
// AVX2 shapes inline only into a function compiled for AVX2.
using Shape = void (*)(char*, const char*, size_t);
template <Shape Large>
ZSM_ALWAYS_INLINE void copy_any(void* dst, const void* src, size_t n) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (ZSM_LIKELY(n > 128))
    Large(d, s, n);
  else
    copy_payload_small(d, s, n);
}
template <Shape Large>
ZSM_TARGET_AVX2 ZSM_ALWAYS_INLINE void copy_any_avx2(void* dst, const void* src, size_t n) {
  auto* d = static_cast<char*>(dst);
  const auto* s = static_cast<const char*>(src);
  if (ZSM_LIKELY(n > 128))
    Large(d, s, n);
  else
    copy_payload_small(d, s, n);
}

// The cached store's copies (CopyThenClear, copy.h): the copy, then *flag = 0 (release),
// then `result` back. One per shape and width, named copy_payload_* so that the instruction
// counts leave them out with the copy (the flag store and the result's move, two
// instructions, are the store's: docs/design.md counts them). Up to 128 bytes, all forms
// tail-call the one without a loop.
ZSM_COPY_FUNCTION unsigned long copy_payload_small_then_clear(void* dst, const void* src,
                                                              size_t n,
                                                              std::atomic<uint32_t>* flag,
                                                              unsigned long result) {
  copy_payload_small(static_cast<char*>(dst), static_cast<const char*>(src), n);
  flag->store(0, std::memory_order_release);
  return result;
}
template <Shape Large>
unsigned long copy_payload_then_clear(void* dst, const void* src, size_t n,
                                      std::atomic<uint32_t>* flag, unsigned long result) {
  if (ZSM_UNLIKELY(n <= 128)) return copy_payload_small_then_clear(dst, src, n, flag, result);
  Large(static_cast<char*>(dst), static_cast<const char*>(src), n);
  flag->store(0, std::memory_order_release);
  return result;
}
template <Shape Large>
ZSM_TARGET_AVX2 unsigned long copy_payload_then_clear_avx2(void* dst, const void* src, size_t n,
                                                           std::atomic<uint32_t>* flag,
                                                           unsigned long result) {
  if (ZSM_UNLIKELY(n <= 128)) return copy_payload_small_then_clear(dst, src, n, flag, result);
  Large(static_cast<char*>(dst), static_cast<const char*>(src), n);
  flag->store(0, std::memory_order_release);
  return result;
}

// Whether the AVX2 forms run: set once, when the library is loaded (see the top).
const bool avx2 = __builtin_cpu_supports("avx2");

}  // namespace

bool copy_payload_avx2_usable() { return avx2; }

void copy_payload_unaligned_sse2(void* dst, const void* src, size_t n) {
  copy_any<copy_unaligned_sse2>(dst, src, n);
}
void copy_payload_aligned_sse2(void* dst, const void* src, size_t n) {
  copy_any<copy_aligned_sse2>(dst, src, n);
}
ZSM_TARGET_AVX2 void copy_payload_unaligned_avx2(void* dst, const void* src, size_t n) {
  copy_any_avx2<copy_unaligned_avx2>(dst, src, n);
}
ZSM_TARGET_AVX2 void copy_payload_aligned_avx2(void* dst, const void* src, size_t n) {
  copy_any_avx2<copy_aligned_avx2>(dst, src, n);
}

void copy_payload(void* dst, const void* src, size_t n) {
  if (n <= kUnalignedUpTo) {
    if (avx2)
      copy_payload_unaligned_avx2(dst, src, n);
    else
      copy_payload_unaligned_sse2(dst, src, n);
  } else if (avx2) {
    copy_payload_aligned_avx2(dst, src, n);
  } else {
    copy_payload_aligned_sse2(dst, src, n);
  }
}

CopyThenClear copy_payload_for_class(size_t max_n) {
  if (max_n <= 128) return copy_payload_small_then_clear;
  if (max_n <= kUnalignedUpTo)
    return avx2 ? copy_payload_then_clear_avx2<copy_unaligned_avx2>
                : copy_payload_then_clear<copy_unaligned_sse2>;
  return avx2 ? copy_payload_then_clear_avx2<copy_aligned_avx2>
              : copy_payload_then_clear<copy_aligned_sse2>;
}

#else  // not x86-64: the C library's memcpy

void copy_payload(void* dst, const void* src, size_t n) {
  if (n != 0) std::memcpy(dst, src, n);
}

namespace {
unsigned long copy_payload_then_clear(void* dst, const void* src, size_t n,
                                      std::atomic<uint32_t>* flag, unsigned long result) {
  if (n != 0) std::memcpy(dst, src, n);
  flag->store(0, std::memory_order_release);
  return result;
}
}  // namespace

CopyThenClear copy_payload_for_class(size_t) { return copy_payload_then_clear; }

#endif

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
