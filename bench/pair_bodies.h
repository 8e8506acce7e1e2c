// The timed bodies of the paired benchmarks (Google Benchmark), shared by zsm_pair_bench
// (pair_bench.cpp) and kernel_pair_bench (kernel_pair_bench.cpp) so that both time the
// same loop: steady-state pairs on a live set (live_set.h). Header-only.
#pragma once

#include <benchmark/benchmark.h>

#include <cstddef>
#include <cstdint>

#include "live_set.h"

namespace zsm_bench {

inline void finish(benchmark::State& state, size_t bytes_per_item) {
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * bytes_per_item));
}

// Runs `body(live)` on a fresh pool that holds a live set of `size`-byte objects.
template <typename A, typename Body>
void on_live_set(benchmark::State& state, size_t size, Body body) {
  auto* pool = A::create();
  {
    LiveSet<A> live(pool, size);
    if (live.all_stored())
      body(live);
    else
      state.SkipWithError("filling the live set failed");
  }
  A::destroy(pool);
}

// zs_store + zs_free (or malloc + memcpy + free): each pair frees the victim and stores anew.
template <typename A>
void time_store_free(benchmark::State& state, size_t size) {
  on_live_set<A>(state, size, [&](LiveSet<A>& live) {
    const unsigned char* src = source_bytes();
    for (auto _ : state) {
      size_t k = live.victim();
      A::free(live.pool, live.handles[k]);
      live.handles[k] = A::store(live.pool, src, size);
      benchmark::DoNotOptimize(live.handles[k]);
    }
    finish(state, size);
  });
}

// zs_malloc + zs_obj_write + zs_free.
template <typename A>
void time_malloc_write_free(benchmark::State& state, size_t size) {
  on_live_set<A>(state, size, [&](LiveSet<A>& live) {
    const unsigned char* src = source_bytes();
    for (auto _ : state) {
      size_t k = live.victim();
      A::free(live.pool, live.handles[k]);
      unsigned long h = A::malloc(live.pool, size);
      A::write(live.pool, h, src, size);
      live.handles[k] = h;
      benchmark::DoNotOptimize(h);
    }
    finish(state, size);
  });
}

}  // namespace zsm_bench
