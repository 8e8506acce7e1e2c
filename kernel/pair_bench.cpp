// kernel_pair_bench: zsm_pair_bench's paired families (bench/pair_bench.cpp) on the kernel's own
// zsmalloc (kernel/kapi.h), under the same benchmark names, so tools/ab_analysis.py reads both:
//   zs_malloc+zs_obj_write+zs_free/<variant>/<size>  (6.1: zs_map_object(WO) + memcpy +
//                                                    zs_unmap_object for the write)
//   zs_store+zs_free/<variant>/<size>                where the tree has zs_store()
#include <benchmark/benchmark.h>

#include <cstdio>

#include "../bench/live_set.h"
#include "kapi.h"

namespace {

using zsm_bench::LiveSet;
using zsm_bench::source_bytes;

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

void finish(benchmark::State& state, size_t size) {
  state.SetItemsProcessed(static_cast<int64_t>(state.iterations()));
  state.SetBytesProcessed(static_cast<int64_t>(state.iterations() * size));
}

template <typename A>
void BM_MallocWriteFree(benchmark::State& state, size_t size) {
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

template <typename A>
void BM_StoreFree(benchmark::State& state, size_t size) {
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

template <typename A>
void register_variant() {
  for (size_t size : zsm_bench::kSizes) {
    benchmark::RegisterBenchmark(
        (std::string("zs_malloc+zs_obj_write+zs_free/") + A::name + "/" + std::to_string(size))
            .c_str(),
        BM_MallocWriteFree<A>, size);
    if (A::kHasStore)
      benchmark::RegisterBenchmark(
          (std::string("zs_store+zs_free/") + A::name + "/" + std::to_string(size)).c_str(),
          BM_StoreFree<A>, size);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (!kzs::init_all()) {
    std::fprintf(stderr, "kernel set-up failed\n");
    return 1;
  }
#ifdef KZS_HAS_patched_zs_malloc
  register_variant<kzs::patched>();
#endif
#ifdef KZS_HAS_baseline_zs_malloc
  register_variant<kzs::baseline>();
#endif
#ifdef KZS_HAS_kernel_zs_malloc
  register_variant<kzs::kernel>();
#endif
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return kzs::all_memory_back() ? 0 : 1;
}
