// A pool's life and its pool-wide figures: zs_create_pool() checks the configuration, builds
// the class table (classes/size_class.h), lays out every class's lock shards side by side
// with their fullness ranges, the lookup by 16-byte granule, the shards' metadata arenas and
// the cell region, and takes the page source (the caller's, or a VmSource of its own);
// zs_destroy_pool() gives every page back, live objects or not. Also here: the name, the
// class lookup, total pages, bookkeeping bytes and the pool's statistics.
#include "pool/pool.h"

#include <algorithm>
#include <cerrno>
#include <new>
#include <thread>

#include "memory/vm_source.h"
#include "tcache/thread_cache.h"
#include "zspage/obj.h"
#include "zspage/zspage.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

namespace {

constexpr unsigned kMaxShards = 64, kDefaultMaxShards = 16;

size_t zspage_metadata_size(uint32_t nr_pages) { return sizeof(ZsPage) + nr_pages * sizeof(char*); }

// One shard per CPU, rounded up to a power of two, at most kDefaultMaxShards.
unsigned default_shards() {
  unsigned cpus = std::max(1u, std::thread::hardware_concurrency());
  unsigned shards = 1;
  while (shards < cpus && shards < kDefaultMaxShards) shards *= 2;
  return shards;
}

// Hardened pools created in this process, whose count gives each its handle tag.
std::atomic<unsigned long> hardened_pools_created{0};

// The next hardened pool's handle tag: generations 1..kHandleGenerations in turn.
unsigned long next_handle_tag() {
  unsigned long n = hardened_pools_created.fetch_add(1, std::memory_order_relaxed);
  return (n % kHandleGenerations + 1) << kHandleTagShift;
}

// The reservation unit of the pool's own page source: the memory limit when it is below the
// source's default unit, so that a small pool reserves no more than it may use, else the
// default (the source maps more reservations as the pool grows).
size_t reserve_for_limit(unsigned long max_pages, size_t page_size) {
  if (max_pages == 0 || max_pages > VmSource::kDefaultReserve / page_size) return 0;
  return max_pages * page_size;
}

// The inuse range of every fullness group of a class (see ClassShard::fullness_lo), and the
// group of one object short of full.
void init_fullness_ranges(ClassShard* shard) {
  for (int fg = 0; fg < NR_FULLNESS_GROUPS; fg++) {
    shard->fullness_lo[fg] = UINT32_MAX;
    shard->fullness_hi[fg] = 0;
  }
  ZsPage probe{};
  for (uint32_t inuse = 0; inuse <= shard->objs_per_zspage; inuse++) {
    probe.inuse = inuse;
    int fg = get_fullness_group(shard, &probe);
    shard->fullness_lo[fg] = std::min(shard->fullness_lo[fg], inuse);
    shard->fullness_hi[fg] = std::max(shard->fullness_hi[fg], inuse);
  }
  probe.inuse = shard->objs_per_zspage - 1;
  shard->almost_full_group = static_cast<uint32_t>(get_fullness_group(shard, &probe));
}

bool init_classes(ZsPool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  const ClassTable& t = pool->classes.table;
  pool->classes.nr_class_shards = t.nr_distinct * (pool->fast.shard_mask + 1);
  pool->classes.class_shards = new (std::nothrow) ClassShard[pool->classes.nr_class_shards];
  if (pool->classes.class_shards == nullptr) return false;
  ClassShard* next = pool->classes.class_shards;
  for (uint32_t i = t.nr_indices; i-- > 0;) {
    const ClassRow& row = t.rows[i];
    if (!t.distinct(i)) {
      pool->classes.first_shard[i] = pool->classes.first_shard[row.resolve];
      continue;
    }
    pool->classes.first_shard[i] = next;
    for (uint32_t s = 0; s <= pool->fast.shard_mask; s++) {
      ClassShard* shard = next++;
      shard->geom = {row.size, t.page_shift, t.page_size - 1, row.huge() ? 0 : kHandleSize};
      shard->objs_per_zspage = row.objs;
      shard->pages_per_zspage = row.pages;
      shard->index = i;
      shard->shard_index = s;
      init_fullness_ranges(shard);
    }
  }
  size_t granules = (t.page_size >> kGranuleShift) + 2;
  pool->fast.first_shard_by_granule = new (std::nothrow) ClassShard*[granules];
  if (pool->fast.first_shard_by_granule == nullptr) return false;
  for (size_t g = 0; g < granules; g++)
    pool->fast.first_shard_by_granule[g] =
        pool->classes.first_shard[t.index_of(g << kGranuleShift)];
  pool->metadata.arenas = new (std::nothrow) ShardArenas[pool->fast.shard_mask + 1];
  if (pool->metadata.arenas == nullptr) return false;
  for (uint32_t s = 0; s <= pool->fast.shard_mask; s++) {
    ShardArenas& arenas = pool->metadata.arenas[s];
    arenas.cells = new (std::nothrow) MetadataArena(sizeof(HandleCell), &pool->metadata.cells);
    if (arenas.cells == nullptr) return false;
    for (uint32_t n = 1; n <= t.chain; n++) {
      arenas.meta[n] = new (std::nothrow) MetadataArena(zspage_metadata_size(n));
      if (arenas.meta[n] == nullptr) return false;
    }
  }
  return true;
}

// Returns every page of every zspage to the source (zs_destroy_pool with live objects).
void free_all_zspages(ZsPool* pool) {
  for_each_zspage(pool, [pool](ZsPage* zspage) { free_zspage_pages(pool, zspage); });
}

}  // namespace

ZsPool* zs_create_pool(const char* name, const zs_pool_config* cfg) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  zs_pool_config defaults{};
  if (cfg == nullptr) cfg = &defaults;
  size_t page_size = cfg->page_size != 0 ? cfg->page_size : 4096;
  unsigned chain = cfg->chain_size != 0 ? cfg->chain_size : kDefaultChain;
  unsigned shards = cfg->nr_shards != 0 ? cfg->nr_shards : default_shards();
  if (!valid_geometry(page_size, chain) ||
      (page_size != 4096 && page_size != 16384 && page_size != 65536) || shards > kMaxShards ||
      (shards & (shards - 1)) != 0 || (cfg->flags & ~(ZS_POOL_HARDENED | ZS_POOL_NO_THREAD_CACHE)) != 0) {
    errno = EINVAL;
    return nullptr;
  }
  ZsPool* pool = new (std::nothrow) ZsPool;
  if (pool == nullptr) {
    errno = ENOMEM;
    return nullptr;
  }
  try {
    pool->id.name = name != nullptr ? name : "";
  } catch (const std::bad_alloc&) {
    delete pool;
    errno = ENOMEM;
    return nullptr;
  }
  pool->classes.page_size = static_cast<uint32_t>(page_size);
  pool->fast.shard_mask = shards - 1;
  pool->classes.table = build_class_table(pool->classes.page_size, chain);
  pool->pages.limit = cfg->max_pages;
  pool->fast.hardened = (cfg->flags & ZS_POOL_HARDENED) != 0;
  pool->fast.thread_caches = !pool->fast.hardened && (cfg->flags & ZS_POOL_NO_THREAD_CACHE) == 0;
  pool->fast.store_size_limit = pool->fast.hardened ? 0 : pool->classes.page_size;
  pool->tcache.free_reserved_slot = free_reserved;
  if (pool->fast.hardened) pool->id.handle_tag = next_handle_tag();
  if (cfg->page_source != nullptr) {
    pool->source.ops = *cfg->page_source;
  } else {
    size_t reserve = reserve_for_limit(cfg->max_pages, page_size);
    pool->source.own = VmSource::create(page_size, reserve, 0, VmSource::kDefaultRetain);
    if (pool->source.own != nullptr)
      pool->source.ops = {VmSource::alloc_page_cb, VmSource::free_page_cb, pool->source.own};
  }
  if (pool->source.ops.alloc_page == VmSource::alloc_page_cb &&
      pool->source.ops.free_page == VmSource::free_page_cb)
    pool->source.runs = static_cast<VmSource*>(pool->source.ops.ctx);
  int err = 0;
  if (pool->source.ops.alloc_page == nullptr || pool->source.ops.free_page == nullptr)
    err = cfg->page_source != nullptr ? EINVAL : ENOMEM;  // a bad source, or no default one
  else if (!pool->metadata.cells.reserve(ZSM_PROFILING) || !init_classes(pool) ||
           !init_thread_caches(pool))
    err = ENOMEM;
  if (err != 0) {
    zs_destroy_pool(pool);
    errno = err;
    return nullptr;
  }
  if (!register_pool(pool)) {
    zs_destroy_pool(pool);
    errno = ENOMEM;
    return nullptr;
  }
  return pool;
}

void zs_destroy_pool(ZsPool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  if (pool == nullptr) return;
  unregister_pool(pool);
  wait_for_exiting_threads(pool);
  free_all_zspages(pool);
  delete[] pool->classes.class_shards;
  delete[] pool->fast.first_shard_by_granule;
  if (pool->metadata.arenas != nullptr) {
    for (uint32_t s = 0; s <= pool->fast.shard_mask; s++) {
      delete pool->metadata.arenas[s].cells;
      for (MetadataArena* arena : pool->metadata.arenas[s].meta) delete arena;
    }
    delete[] pool->metadata.arenas;
  }
  delete pool->source.own;
  delete pool;
}

const char* zs_pool_name(const ZsPool* pool) {
  return pool != nullptr ? pool->id.name.c_str() : "";
}

size_t zs_huge_class_size(const ZsPool* pool) {
  return pool != nullptr ? pool->classes.table.huge_class_size : 0;
}

unsigned zs_lookup_class_index(const ZsPool* pool, unsigned size) {
  if (pool == nullptr) return 0;
  return pool->classes.first_shard[pool->classes.table.index_of(size)]->index;
}

unsigned long zs_get_total_pages(const ZsPool* pool) {
  return pool != nullptr ? pool->pages.allocated.load(std::memory_order_relaxed) : 0;
}

size_t zs_pool_bookkeeping_bytes(ZsPool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  if (pool == nullptr) return 0;
  const size_t granules = (pool->classes.page_size >> kGranuleShift) + 2;
  // cells, metadata per chain length
  const size_t arenas_per_shard = 1 + pool->classes.table.chain;
  size_t bytes = sizeof(ZsPool) + pool->classes.nr_class_shards * sizeof(ClassShard) +
                 granules * sizeof(*pool->fast.first_shard_by_granule) +
                 (pool->fast.shard_mask + 1) *
                     (sizeof(ShardArenas) + arenas_per_shard * sizeof(MetadataArena));
  for (uint32_t s = 0; s <= pool->fast.shard_mask; s++) {
    ShardArenas& arenas = pool->metadata.arenas[s];
    MutexGuard guard(arenas.lock);
    bytes += arenas.cells->carved_bytes();
    for (const MetadataArena* arena : arenas.meta)
      if (arena != nullptr) bytes += arena->carved_bytes();
  }
  return bytes;
}

void zs_pool_stats(const ZsPool* pool, struct zs_pool_stats* stats) {
  if (pool == nullptr || stats == nullptr) return;
  stats->pages_compacted = pool->compaction.pages_compacted.load(std::memory_order_relaxed);
  stats->lock_waits = 0;
  stats->shard_moves = 0;
  for (uint32_t c = 0; c < pool->classes.nr_class_shards; c++) {
    const ClassShard& shard = pool->classes.class_shards[c];
    stats->lock_waits += shard.lock_waits.load(std::memory_order_relaxed);
    stats->shard_moves += shard.moves_in.load(std::memory_order_relaxed);
  }
  ThreadCacheFigures caches = thread_cache_figures(pool);
  stats->cached_objs = caches.objs;
  stats->cached_bytes = caches.bytes;
  stats->thread_cache_bytes = caches.own_bytes;
  stats->cached_bytes_per_thread =
      pool->fast.thread_caches ? pool->tcache.cache_bytes_per_thread : 0;
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
