// tests/zsm/copy_test.cpp: zsm's payload copy (zsm/src/base/copy.cpp) gives the bytes memcpy gives and
// writes nothing outside [dst, dst + n). Every form is checked: copy_payload() as the pool
// calls it and, on x86-64, its unaligned and destination-aligned shapes in their SSE2 and
// AVX2 widths alone (AVX2 where the CPU has it), each at every length; and the copy the cached
// store tail-calls (copy_payload_for_class()), with its flag and result. Like
// profiling_off_test, this test links the core variant zsm::noprof and calls it directly.
//
// What is covered, for every form (alignment = address mod 64, of src and of dst):
//   EveryAlignmentPairUpTo1100  every length 0..1100 at every one of the 64 x 64 alignment
//       pairs. The copy's thresholds (the 1/2/4/8/16/32-byte moves, 64, 128, the first
//       aligned block of each form and the overlapping tail after 1..8 AVX2 blocks or 1..16
//       SSE2 blocks) all lie below 1100, so every path and every way the aligned blocks and
//       the overlapping ends fall is met at every alignment pair.
//   EveryLengthUpTo65536  every length 0..65536, length L at the alignment pair number
//       L mod 4096 (src alignment L mod 64, dst alignment (L / 64) mod 64), so the lengths
//       run through all 4096 pairs 16 times.
//   AcrossAPageSplitAtEveryOffset  zsm's two-part copy of an object that crosses a page: for
//       every offset 0..4095 in the first page and three lengths from there (one byte into
//       the next page, 1..1500 bytes into it, and 4096 bytes), copied into two separate
//       pages and back out of them, as zs_store and zs_obj_read_begin copy.
// Guard bytes: 64 on each side of every destination, of a value the source never holds, so
// a stray write of any source byte shows. The destination is overwritten with a second such
// value before each copy, so a copy that skips a byte shows too.
#define ZSM_VARIANT_NS noprof
#include "base/copy.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace {

namespace core = zsm::noprof;

using CopyFn = void (*)(void*, const void*, size_t);

struct Form {
  const char* name;
  CopyFn copy;
};

std::vector<Form> forms() {
  std::vector<Form> f = {{"copy_payload", core::copy_payload}};
#if defined(__x86_64__)
  f.push_back({"unaligned_sse2", core::copy_payload_unaligned_sse2});
  f.push_back({"aligned_sse2", core::copy_payload_aligned_sse2});
  if (core::copy_payload_avx2_usable()) {
    f.push_back({"unaligned_avx2", core::copy_payload_unaligned_avx2});
    f.push_back({"aligned_avx2", core::copy_payload_aligned_avx2});
  }
#endif
  return f;
}

constexpr uint8_t kGuard = 0xA5;  // never in the source
constexpr uint8_t kStale = 0x5A;  // never in the source: what dst holds before a copy
constexpr size_t kGuardBytes = 64;

// Source bytes: pseudo-random, without kGuard and kStale.
std::vector<uint8_t> source_bytes(size_t n) {
  std::vector<uint8_t> b(n);
  uint64_t x = 0x9E3779B97F4A7C15ull;
  for (auto& c : b) {
    x ^= x << 13;
    x ^= x >> 7;
    x ^= x << 17;
    c = static_cast<uint8_t>(x >> 56);
    if (c == kGuard || c == kStale) c = 0x11;
  }
  return b;
}

// A destination of up to `capacity` bytes at any alignment 0..63, with guard bytes around.
class Destination {
 public:
  explicit Destination(size_t capacity) : buf_(capacity + 64 + 2 * kGuardBytes + 64) {}

  // Prepares [dst, dst + n) at `align` (mod 64): guards around, kStale inside.
  uint8_t* prepare(size_t align, size_t n) {
    uintptr_t base = reinterpret_cast<uintptr_t>(buf_.data()) + kGuardBytes;
    base = (base + 63) & ~uintptr_t{63};
    dst_ = reinterpret_cast<uint8_t*>(base) + align;
    n_ = n;
    std::memset(dst_ - kGuardBytes, kGuard, kGuardBytes);
    std::memset(dst_, kStale, n);
    std::memset(dst_ + n, kGuard, kGuardBytes);
    return dst_;
  }

  // Empty when dst holds src's n bytes and the guards are intact; otherwise what differs.
  std::string check(const uint8_t* src) const {
    if (std::memcmp(dst_, src, n_) != 0) {
      for (size_t i = 0; i < n_; i++)
        if (dst_[i] != src[i]) return "byte " + std::to_string(i) + " differs";
    }
    for (size_t i = 0; i < kGuardBytes; i++) {
      if (dst_[-1 - static_cast<ptrdiff_t>(i)] != kGuard)
        return "wrote " + std::to_string(i + 1) + " bytes before dst";
      if (dst_[n_ + i] != kGuard) return "wrote byte dst + n + " + std::to_string(i);
    }
    return {};
  }

 private:
  std::vector<uint8_t> buf_;
  uint8_t* dst_ = nullptr;
  size_t n_ = 0;
};

// src at alignment `align` (mod 64) in a 64-aligned copy of the source bytes.
const uint8_t* aligned_source(const std::vector<uint8_t>& bytes, size_t align) {
  uintptr_t base = (reinterpret_cast<uintptr_t>(bytes.data()) + 63) & ~uintptr_t{63};
  return reinterpret_cast<const uint8_t*>(base) + align;
}

TEST(Copy, EveryAlignmentPairUpTo1100) {
  constexpr size_t kMax = 1100;
  const std::vector<uint8_t> bytes = source_bytes(kMax + 128);
  Destination d(kMax);
  for (const Form& f : forms()) {
    for (size_t sa = 0; sa < 64; sa++) {
      const uint8_t* src = aligned_source(bytes, sa);
      for (size_t da = 0; da < 64; da++) {
        for (size_t n = 0; n <= kMax; n++) {
          f.copy(d.prepare(da, n), src, n);
          std::string bad = d.check(src);
          ASSERT_TRUE(bad.empty()) << f.name << " n=" << n << " src%64=" << sa
                                   << " dst%64=" << da << ": " << bad;
        }
      }
    }
  }
}

TEST(Copy, EveryLengthUpTo65536) {
  constexpr size_t kMax = 65536;
  const std::vector<uint8_t> bytes = source_bytes(kMax + 128);
  Destination d(kMax);
  for (const Form& f : forms()) {
    for (size_t n = 0; n <= kMax; n++) {
      size_t sa = n % 64, da = (n / 64) % 64;
      const uint8_t* src = aligned_source(bytes, sa);
      f.copy(d.prepare(da, n), src, n);
      std::string bad = d.check(src);
      ASSERT_TRUE(bad.empty()) << f.name << " n=" << n << " src%64=" << sa << " dst%64=" << da
                               << ": " << bad;
    }
  }
}

// Two pages apart from each other (zsm's pages are not adjacent), each with guards.
TEST(Copy, AcrossAPageSplitAtEveryOffset) {
  constexpr size_t kPage = 4096;
  const std::vector<uint8_t> bytes = source_bytes(2 * kPage + 128);
  const uint8_t* object = aligned_source(bytes, 0);
  Destination first(kPage), second(kPage), out(2 * kPage);
  for (const Form& f : forms()) {
    for (size_t offset = 0; offset < kPage; offset++) {
      const size_t room = kPage - offset;
      for (size_t n : {room + 1, room + 1 + offset % 1500, kPage}) {
        const size_t head = std::min(n, room), rest = n - head;
        // Into the pages: the part in the second page first, as zs_store copies.
        uint8_t* page0 = first.prepare(0, kPage);
        uint8_t* page1 = second.prepare(0, kPage);
        f.copy(page1, object + head, rest);
        f.copy(page0 + offset, object, head);
        ASSERT_EQ(std::memcmp(page0 + offset, object, head), 0)
            << f.name << " offset " << offset << " n=" << n;
        ASSERT_EQ(std::memcmp(page1, object + head, rest), 0)
            << f.name << " offset " << offset << " n=" << n;
        for (size_t i = 0; i < offset; i++)
          ASSERT_EQ(page0[i], kStale) << f.name << " offset " << offset << " n=" << n;
        for (size_t i = rest; i < kPage; i++)
          ASSERT_EQ(page1[i], kStale) << f.name << " offset " << offset << " n=" << n;
        std::string bad = first.check(page0);  // guards around the whole first page
        ASSERT_TRUE(bad.empty()) << f.name << " offset " << offset << ": " << bad;
        bad = second.check(page1);
        ASSERT_TRUE(bad.empty()) << f.name << " offset " << offset << ": " << bad;
        // Out of the pages into one buffer, as zs_obj_read_begin fills local_copy.
        uint8_t* local = out.prepare(0, n);
        f.copy(local, page0 + offset, head);
        f.copy(local + head, page1, rest);
        bad = out.check(object);
        ASSERT_TRUE(bad.empty()) << f.name << " out of offset " << offset << " n=" << n << ": "
                                 << bad;
      }
    }
  }
}

// The cached store's copy of each kind of class copies as copy_payload() does, then clears
// its flag and returns its result.
TEST(Copy, TheClassCopyCopiesThenClearsItsFlagAndReturnsItsResult) {
  const std::vector<uint8_t> bytes = source_bytes(4096 + 128);
  Destination d(4096);
  for (size_t max_n : {size_t{48}, size_t{128}, core::kUnalignedUpTo, core::kUnalignedUpTo + 1,
                       size_t{4096}}) {
    core::CopyThenClear copy = core::copy_payload_for_class(max_n);
    for (size_t n = 0; n <= max_n; n += 1 + n / 8) {
      for (size_t da : {size_t{8}, size_t{24}, size_t{37}}) {
        const uint8_t* src = aligned_source(bytes, n % 64);
        std::atomic<uint32_t> flag{1};
        unsigned long result = copy(d.prepare(da, n), src, n, &flag, 0x1234500 + n);
        ASSERT_EQ(result, 0x1234500 + n) << "class of " << max_n << " n=" << n;
        ASSERT_EQ(flag.load(), 0u) << "class of " << max_n << " n=" << n;
        std::string bad = d.check(src);
        ASSERT_TRUE(bad.empty()) << "class of " << max_n << " n=" << n << " dst%64=" << da
                                 << ": " << bad;
      }
    }
  }
}

}  // namespace
