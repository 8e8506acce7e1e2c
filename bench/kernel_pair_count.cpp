// kernel_pair_count: zsm_pair_count (bench/pair_count.cpp) on the kernel's own zsmalloc
// (kernel/kapi.h): a fixed number of steady-state pairs of one family, size and variant, with
// the counter collecting only around the measured loop (bench/count_markers.h), so
// tools/lib/count_pairs.py (x86-64, callgrind) and tools/lib/qemu_count.py (arm64, qemu) count
// it as they count zsm. Run it under
//   valgrind --tool=callgrind --instr-atstart=no kernel_pair_count <variant> <family> <size> <pairs>
// or, built for arm64, under qemu_count.py.
//   variant: the variants built in (patched, baseline, kernel)
//   family:  write (zs_malloc + the write + zs_free: zs_obj_write, or in 6.1 zs_map_object(WO),
//                   memcpy, zs_unmap_object), store (zs_store + zs_free, where the tree has it)
// After the loop every live object is read back and compared with what was written, the
// pool is destroyed and every page and slab object must be back (exit status 1 otherwise).
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "count_markers.h"
#include "driver_args.h"
#include "live_set.h"
#include "pair_loops.h"
#include "kapi.h"

namespace {

using zsm_bench::LiveSet;
using zsm_bench::source_bytes;
using zsm_bench::store_pairs;
using zsm_bench::write_pairs;

// Every live object holds what was written to it.
template <typename A>
bool read_back(LiveSet<A>& live, size_t size) {
  std::vector<unsigned char> copy(size);
  for (unsigned long h : live.handles) {
    if (h == 0) return false;
    void* mem = A::read_begin(live.pool, h, size, copy.data());
    bool same = std::memcmp(mem, source_bytes(), size) == 0;
    A::read_end(live.pool, h, size, mem);
    if (!same) return false;
  }
  return true;
}

template <typename A>
int run(const std::string& family, size_t size, long pairs) {
  if (family == "store" && !A::kHasStore) return 2;
  if (family != "store" && family != "write") return 2;
  auto* pool = A::create();
  if (pool == nullptr) return 1;
  int rc = 0;
  {
    LiveSet<A> live(pool, size);
    store_pairs(live, size, static_cast<long>(zsm_bench::kLiveObjects));  // warm-up
    ZSM_COUNT_START();
    if (family == "store")
      store_pairs(live, size, pairs);
    else
      write_pairs(live, size, pairs);
    ZSM_COUNT_STOP();
    if (!read_back(live, size)) {
      std::fprintf(stderr, "an object did not read back as written\n");
      rc = 1;
    }
  }
  A::destroy(pool);
  if (!kzs::all_memory_back()) {
    std::fprintf(stderr, "memory not back: %lu pages in use, %lu bad pages, %ld zspages, "
                 "%ld slab objects\n", kshim_pages_in_use(), kshim_bad_pages(),
                 kshim_nr_zspages(), kshim_slab_objects());
    rc = 1;
  }
  return rc;
}

}  // namespace

int main(int argc, char** argv) {
  const char* usage = "VARIANT write|store SIZE PAIRS";
  if (zsm_driver::answered_help_or_version(argc, argv, usage,
                                           "the kernel's pair driver (zsm's kernel A/B)"))
    return 0;
  if (argc != 5) {
    std::fprintf(stderr, "usage: %s %s\n", argv[0], usage);
    return 2;
  }
  std::string family = argv[2];
  uint64_t size_arg = 0, pairs_arg = 0;
  if (!zsm_driver::parse_count(argv[3], "SIZE", 1, 4096 - sizeof(unsigned long), size_arg) ||
      !zsm_driver::parse_count(argv[4], "PAIRS", 1, uint64_t{1} << 40, pairs_arg))
    return 2;
  const size_t size = size_arg;
  const long pairs = static_cast<long>(pairs_arg);
  if (!kzs::init_all()) {
    std::fprintf(stderr, "kernel set-up failed\n");
    return 1;
  }
  int rc = 2;
  if (!kzs::with_variant(argv[1], [&](auto v) { rc = run<decltype(v)>(family, size, pairs); }))
    rc = 2;
  if (rc == 2) std::fprintf(stderr, "unknown variant or family: %s %s\n", argv[1], argv[2]);
  return rc;
}
