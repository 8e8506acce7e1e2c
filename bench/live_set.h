// The steady-state pattern every pair benchmark and the instruction counter share.
//
// A live set of kLiveObjects objects of one size is stored first. Each pair then frees a
// victim chosen by a xorshift generator and stores a replacement in its place, so the live
// set never changes size. Why this never allocates a zspage in the timed loop: the free
// always leaves a hole (or, for a zspage left empty, the class's spare), and the store takes
// the fullest non-full zspage, which is the one with that hole: pairs run on the fast path,
// whatever the live-set size. 1024 objects span at least 32 zspages in every class measured
// (9..32 objects per zspage for 384..3136 B), so consecutive pairs land in different zspages
// and move them between fullness lists as a real pool does; the set (0.4-3.3 MB) stays
// within this machine's caches, so the figures measure the allocator, not DRAM.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace zsm_bench {

inline constexpr size_t kLiveObjects = 1024;  // a power of two: the victim is rng & mask

// The sizes the kernel mail measured: 384..3136 B, 8 classes evenly spaced, rounded to 16 B.
// The one list: the scripts read it from here (tools/lib/count_pairs.py, SIZES).
inline constexpr size_t kSizes[] = {384, 784, 1168, 1568, 1952, 2352, 2736, 3136};

struct XorShift {
  uint64_t state;
  explicit XorShift(uint64_t seed) : state(seed * 0x9E3779B97F4A7C15ull | 1) {}
  uint64_t next() {
    state ^= state << 13;
    state ^= state >> 7;
    state ^= state << 17;
    return state;
  }
};

// Source bytes for stores: incompressible-looking, one page plus slack.
inline const unsigned char* source_bytes() {
  static const std::vector<unsigned char> bytes = [] {
    std::vector<unsigned char> b(65536 + 64);
    XorShift rng(42);
    for (auto& c : b) c = static_cast<unsigned char>(rng.next() >> 56);
    return b;
  }();
  return bytes.data();
}

template <typename A>
struct LiveSet {
  typename A::Pool* pool;
  std::vector<unsigned long> handles;
  std::vector<size_t> sizes;
  XorShift rng;

  LiveSet(typename A::Pool* p, size_t size, uint64_t seed = 1)
      : pool(p), handles(kLiveObjects), sizes(kLiveObjects, size), rng(seed) {
    for (unsigned long& h : handles) h = A::store(pool, source_bytes(), size);
  }
  // A live set whose sizes are drawn from `choices` (the mixed-size family).
  LiveSet(typename A::Pool* p, const size_t* choices, size_t n, uint64_t seed)
      : pool(p), handles(kLiveObjects), sizes(kLiveObjects), rng(seed) {
    for (size_t i = 0; i < kLiveObjects; i++) {
      sizes[i] = choices[rng.next() % n];
      handles[i] = A::store(pool, source_bytes(), sizes[i]);
    }
  }
  ~LiveSet() {
    for (unsigned long h : handles) A::free(pool, h);
  }
  LiveSet(const LiveSet&) = delete;
  LiveSet& operator=(const LiveSet&) = delete;

  size_t victim() { return rng.next() & (kLiveObjects - 1); }
  bool all_stored() const {
    for (unsigned long h : handles)
      if (h == 0) return false;
    return true;
  }
};

}  // namespace zsm_bench
