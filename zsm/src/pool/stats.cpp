// Per-class statistics and the kernel's debugfs "classes" table (zs_stats_size_show()), the
// pool's check on demand (zs_check_pool()) and the drain of its thread caches.
// A class's row sums its lock shards, each read under its own lock: every shard's figures
// are consistent, the table as a whole is not a snapshot. A shard's hot zspage
// (zspage/zspage.h, "Lazy fullness") is counted in the group it is in now, so the figures
// are exact.
#include "pool/pool.h"

#include <cerrno>

#include "tcache/thread_cache.h"
#include "zspage/check.h"
#include "zspage/types.h"
#include "zspage/zspage.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

namespace {

// Sums the shards of the class whose shard 0 is `first`, each under its own lock.
void fill_class_stats(const ZsPool* pool, ClassShard* first, struct zs_class_stats* out) {
  *out = {};
  out->index = first->index;
  out->size = first->geom.size;
  out->pages_per_zspage = first->pages_per_zspage;
  out->objs_per_zspage = first->objs_per_zspage;
  for (ClassShard* shard = first; shard <= first + pool->fast.shard_mask; shard++) {
    MutexGuard guard(shard->lock);
    for (int fg = 0; fg < NR_FULLNESS_GROUPS; fg++) out->zspages[fg] += shard->stats[fg];
    if (shard->hot != nullptr) out->zspages[hot_group(shard)]++;  // counted in no stats[g]
    out->obj_allocated += shard->stats[ZS_OBJS_ALLOCATED];
    out->obj_used += shard->stats[ZS_OBJS_INUSE];
    out->prof_objs += shard->prof_objs;
    out->prof_bytes += shard->prof_bytes;
  }
  out->pages_used = out->obj_allocated / first->objs_per_zspage * first->pages_per_zspage;
  out->freeable = can_compact_pages(out->obj_allocated, out->obj_used, first);
}

}  // namespace

unsigned zs_class_count(const ZsPool* pool) {
  return pool != nullptr ? pool->classes.table.nr_indices : 0;
}

int zs_class_stats(ZsPool* pool, unsigned index, struct zs_class_stats* out) {
  if (pool == nullptr || out == nullptr || index >= pool->classes.table.nr_indices) {
    errno = EINVAL;
    return -1;
  }
  fill_class_stats(pool, pool->classes.first_shard[index], out);
  return pool->classes.table.distinct(index) ? 1 : 0;
}

int zs_print_classes(ZsPool* pool, FILE* out) {
  if (pool == nullptr || out == nullptr) {
    errno = EINVAL;
    return -1;
  }
  static const char* const kGroups[] = {"10%", "20%", "30%", "40%", "50%", "60%",
                                        "70%", "80%", "90%", "99%", "100%"};
  std::fprintf(out, " %5s %5s", "class", "size");
  for (const char* g : kGroups) std::fprintf(out, " %9s", g);
  std::fprintf(out, " %13s %10s %10s %16s %8s\n", "obj_allocated", "obj_used", "pages_used",
               "pages_per_zspage", "freeable");

  struct zs_class_stats total{};
  for (unsigned i = 0; i < pool->classes.table.nr_indices; i++) {
    if (!pool->classes.table.distinct(i)) continue;
    struct zs_class_stats s{};
    fill_class_stats(pool, pool->classes.first_shard[i], &s);
    std::fprintf(out, " %5u %5u", i, s.size);
    for (int fg = ZS_INUSE_RATIO_10; fg < NR_FULLNESS_GROUPS; fg++) {
      std::fprintf(out, " %9lu", s.zspages[fg]);
      total.zspages[fg] += s.zspages[fg];
    }
    std::fprintf(out, " %13lu %10lu %10lu %16u %8lu\n", s.obj_allocated, s.obj_used,
                 s.pages_used, s.pages_per_zspage, s.freeable);
    total.obj_allocated += s.obj_allocated;
    total.obj_used += s.obj_used;
    total.pages_used += s.pages_used;
    total.freeable += s.freeable;
  }
  std::fprintf(out, "\n %5s %5s", "Total", "");
  for (int fg = ZS_INUSE_RATIO_10; fg < NR_FULLNESS_GROUPS; fg++)
    std::fprintf(out, " %9lu", total.zspages[fg]);
  std::fprintf(out, " %13lu %10lu %10lu %16s %8lu\n", total.obj_allocated, total.obj_used,
               total.pages_used, "", total.freeable);
  return std::ferror(out) ? (errno = EIO, -1) : 0;
}

int zs_check_pool(ZsPool* pool, FILE* report) {
  if (pool == nullptr) {
    errno = EINVAL;
    return -1;
  }
  block_and_drain_thread_caches(pool);  // no cached store writes a header while we look
  int findings = check_pool(pool, report);
  unblock_thread_caches(pool);
  if (findings == 0) return 0;
  errno = EUCLEAN;
  return -1;
}

void zs_drain_thread_caches(ZsPool* pool) {
  if (pool != nullptr) drain_thread_caches(pool);
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
