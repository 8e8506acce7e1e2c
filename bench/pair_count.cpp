// zsm_pair_count: runs a fixed number of steady-state pairs (live_set.h) of one family, size
// and allocator, with the counter collecting only around the measured loop
// (count_markers.h). Run it under
//   valgrind --tool=callgrind --instr-atstart=no zsm_pair_count <allocator> <family> <size> <pairs>
// (tools/lib/count_pairs.py does, for every size and allocator, and divides by <pairs>), or,
// built for arm64 with ZSM_BENCH_ZSM_ONLY (zsm's variants alone), under tools/lib/qemu_count.py.
//   allocator: cached | cached_baseline | patched | baseline | mimalloc | glibc | jemalloc | tcmalloc | hardened
//              | prof_{inline,outline}_{off,on} | kernel (the kernel's own 6.1 zsmalloc, write only,
//              where linux-source-6.1 is installed)
//   family:    store   (zs_store + zs_free; malloc + memcpy + free for the baselines)
//              write   (zs_malloc + zs_obj_write + zs_free; zsm only)
// Outside a counter it just runs the loop (a smoke test).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include <zsm/version.h>

#include "count_markers.h"
#include "driver_args.h"
#include "live_set.h"
#include "pair_loops.h"
#include "variants.h"
#if ZSM_BENCH_WITH_KERNEL
#include "kapi.h"  // the kernel's own zsmalloc (kernel/), as the `kernel` variant
#endif

namespace zsm_bench {
namespace {

template <typename A>
int run(const std::string& family, size_t size, long pairs) {
  auto* pool = A::create();
  int rc = 0;
  {
    LiveSet<A> live(pool, size);
    // Warm up: one pass over the live set, outside the measurement.
    store_pairs(live, size, static_cast<long>(kLiveObjects));
    ZSM_COUNT_START();
    if (family == "store") {
      store_pairs(live, size, pairs);
    } else if constexpr (requires { A::malloc(pool, size); }) {
      if (family == "write") write_pairs(live, size, pairs);
      else rc = 2;
    } else {
      rc = 2;
    }
    ZSM_COUNT_STOP();
    if (rc == 0 && !live.all_stored()) rc = 1;
  }
  A::destroy(pool);
  return rc;
}

}  // namespace
}  // namespace zsm_bench

int main(int argc, char** argv) {
  using namespace zsm_bench;
  const char* usage =
      "cached|cached_baseline|patched|baseline|mimalloc|glibc|jemalloc|tcmalloc|hardened|"
      "prof_{inline,outline}_{off,on} store|write SIZE PAIRS";
  if (zsm_driver::answered_help_or_version(argc, argv, usage,
                                           "zsm_pair_count " ZSM_VERSION_STRING))
    return 0;
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s %s\n", argv[0], usage);
    return 2;
  }
  std::string allocator = argv[1], family = argv[2];
  uint64_t size_arg = 0, pairs_arg = 0;
  if (!zsm_driver::parse_count(argv[3], "SIZE", 1, 4096, size_arg) ||
      !zsm_driver::parse_count(argv[4], "PAIRS", 1, uint64_t{1} << 40, pairs_arg))
    return 2;
  const size_t size = size_arg;
  const long pairs = static_cast<long>(pairs_arg);
  int rc = 2;
#if ZSM_BENCH_WITH_PATCHED
  if (allocator == "cached") rc = run<cached>(family, size, pairs);
  if (allocator == "patched") rc = run<patched>(family, size, pairs);
#endif
#if ZSM_BENCH_WITH_BASELINE
  if (allocator == "baseline") rc = run<baseline>(family, size, pairs);
  if (allocator == "cached_baseline") rc = run<cached_baseline>(family, size, pairs);
#endif
#if ZSM_BENCH_WITH_PATCHED
  if (allocator == "hardened") rc = run<hardened>(family, size, pairs);
#endif
#if ZSM_BENCH_WITH_PROFILING
  if (allocator == "prof_inline_off") rc = run<prof_inline_off>(family, size, pairs);
  if (allocator == "prof_inline_on") rc = run<prof_inline_on>(family, size, pairs);
  if (allocator == "prof_outline_off") rc = run<prof_outline_off>(family, size, pairs);
  if (allocator == "prof_outline_on") rc = run<prof_outline_on>(family, size, pairs);
#endif
#if ZSM_BENCH_WITH_KERNEL
  if (allocator == "kernel") {
    if (!kzs::init_all()) return 1;
    rc = family == "write" ? run<kzs::kernel>(family, size, pairs) : 2;
  }
#endif
#if !ZSM_BENCH_ZSM_ONLY
  if (allocator == "mimalloc") rc = run<mimalloc>(family, size, pairs);
  if (allocator == "glibc") rc = run<glibc>(family, size, pairs);
  if (allocator == "jemalloc") rc = run<jemalloc>(family, size, pairs);
  if (allocator == "tcmalloc") rc = run<tcmalloc>(family, size, pairs);
#endif
  if (rc == 2) std::fprintf(stderr, "unknown allocator or family: %s %s\n", argv[1], argv[2]);
  if (rc == 1) std::fprintf(stderr, "a store failed\n");
  return rc;
}
