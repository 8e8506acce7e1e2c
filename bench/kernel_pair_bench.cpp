// kernel_pair_bench: zsm_pair_bench's paired families (bench/pair_bench.cpp) on the kernel's own
// zsmalloc (kernel/kapi.h), under the same benchmark names, so tools/lib/ab_analysis.py reads both:
//   zs_malloc+zs_obj_write+zs_free/<variant>/<size>  (6.1: zs_map_object(WO) + memcpy +
//                                                    zs_unmap_object for the write)
//   zs_store+zs_free/<variant>/<size>                where the tree has zs_store()
#include <benchmark/benchmark.h>

#include <cstdio>
#include <string>

#include "driver_args.h"
#include "live_set.h"
#include "pair_bodies.h"
#include "kapi.h"

namespace {

template <typename A>
void register_variant() {
  for (size_t size : zsm_bench::kSizes) {
    benchmark::RegisterBenchmark(
        (std::string("zs_malloc+zs_obj_write+zs_free/") + A::name + "/" + std::to_string(size))
            .c_str(),
        zsm_bench::time_malloc_write_free<A>, size);
    if (A::kHasStore)
      benchmark::RegisterBenchmark(
          (std::string("zs_store+zs_free/") + A::name + "/" + std::to_string(size)).c_str(),
          zsm_bench::time_store_free<A>, size);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (zsm_driver::answered_version(argc, argv, "the kernel's pair benchmark (zsm's kernel A/B)")) return 0;
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
