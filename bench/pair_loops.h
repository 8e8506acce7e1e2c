// The measured loops of the instruction counters (pair_count.cpp, kernel_pair_count.cpp):
// steady-state pairs on a live set (live_set.h). noinline: one copy of each loop per
// allocator, with a name (store_pairs, write_pairs) that tools/lib/count_pairs.py subtracts as
// the benchmark's own loop. Header-only.
#pragma once

#include <cstddef>

#include "live_set.h"

namespace zsm_bench {

// Each pair frees the victim and stores a new object of `size` bytes in its place.
template <typename A>
__attribute__((noinline)) void store_pairs(LiveSet<A>& live, size_t size, long pairs) {
  const unsigned char* src = source_bytes();
  for (long i = 0; i < pairs; i++) {
    size_t k = live.victim();
    A::free(live.pool, live.handles[k]);
    live.handles[k] = A::store(live.pool, src, size);
  }
}

// The same with the allocation and the write apart (zs_malloc + zs_obj_write).
template <typename A>
__attribute__((noinline)) void write_pairs(LiveSet<A>& live, size_t size, long pairs) {
  const unsigned char* src = source_bytes();
  for (long i = 0; i < pairs; i++) {
    size_t k = live.victim();
    A::free(live.pool, live.handles[k]);
    unsigned long h = A::malloc(live.pool, size);
    A::write(live.pool, h, src, size);
    live.handles[k] = h;
  }
}

}  // namespace zsm_bench
