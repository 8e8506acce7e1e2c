// The zspage and class-shard layer off the fast path (design: zspage.h): the fullness moves
// that lazy fullness leaves out of stores and frees, handle-cache refills and drains, page
// charging, zspage metadata and pages, and freeing zspages and spares.
#include "zspage.h"

#include <new>

#include "thread_cache.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

void lock_shard_contended(ClassShard* cls) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  cls->lock.lock_contended();
  count_under_lock(cls->lock_waits);
}

void put_back_hot(ClassShard* cls) ZSM_REQUIRES(cls->lock) {
  ZsPage* zspage = cls->hot;
  if (zspage == nullptr) return;
  cls->hot = nullptr;
  insert_zspage(cls, zspage, regroup(cls, zspage->fullness, zspage->inuse));
}

void regroup_after_free(ZsPool* pool, ClassShard* cls, ZsPage* zspage) ZSM_REQUIRES(cls->lock) {
  if (zspage == cls->hot)
    cls->hot = nullptr;  // below its floor: back on the lists
  else
    remove_zspage(cls, zspage);
  int fg = regroup(cls, zspage->fullness, zspage->inuse);
  insert_zspage(cls, zspage, fg);
  if (fg == ZS_INUSE_RATIO_0) release_empty_zspage(pool, cls, zspage);
}

void refill_handle_cache(ZsPool* pool, ClassShard* cls) ZSM_REQUIRES(cls->lock) {
  ShardArenas& arenas = pool->arenas[cls->shard];
  MutexGuard guard(arenas.lock);
  for (uint32_t i = 0; i < kHandleBatch; i++) {
    auto* cell = static_cast<HandleCell*>(arenas.cells->alloc());
    if (cell == nullptr) break;
    cell->store(reinterpret_cast<unsigned long>(cls->free_cells), std::memory_order_relaxed);
    cls->free_cells = cell;
    cls->nr_free_cells++;
  }
}

void drain_handle_cache(ZsPool* pool, ClassShard* cls) ZSM_REQUIRES(cls->lock) {
  ShardArenas& arenas = pool->arenas[cls->shard];
  MutexGuard guard(arenas.lock);
  for (uint32_t i = 0; i < kHandleBatch; i++) {
    HandleCell* cell = cls->free_cells;
    cls->free_cells = reinterpret_cast<HandleCell*>(cell->load(std::memory_order_relaxed));
    cls->nr_free_cells--;
    arenas.cells->free(cell);
  }
}

bool charge_pages(ZsPool* pool, unsigned long pages) {
  unsigned long cur = pool->pages_allocated.load(std::memory_order_relaxed);
  do {
    if (pool->max_pages != 0 && cur + pages > pool->max_pages) return false;
  } while (!pool->pages_allocated.compare_exchange_weak(cur, cur + pages,
                                                        std::memory_order_relaxed));
  return true;
}

void uncharge_pages(ZsPool* pool, unsigned long pages) {
  pool->pages_allocated.fetch_sub(pages, std::memory_order_relaxed);
}

bool charge_pages_after_reclaim(ZsPool* pool, unsigned long pages) {
  drain_thread_caches(pool);
  free_all_spares(pool);
  return charge_pages(pool, pages);
}

ZsPage* alloc_zspage_metadata(ZsPool* pool, const ClassShard* cls) {
  ShardArenas& arenas = pool->arenas[cls->shard];
  MutexGuard guard(arenas.lock);
  void* record = arenas.meta[cls->pages_per_zspage]->alloc();
  return record != nullptr ? std::launder(static_cast<ZsPage*>(record)) : nullptr;
}

void free_zspage_metadata(ZsPool* pool, const ClassShard* cls, ZsPage* zspage) {
  ShardArenas& arenas = pool->arenas[cls->shard];
  MutexGuard guard(arenas.lock);
  arenas.meta[zspage->nr_pages]->free(zspage);
}

void free_pages(ZsPool* pool, char* const* pages, uint32_t n) {
  MutexGuard guard(pool->source_lock);
  for (uint32_t i = 0; i < n; i++) pool->source.free_page(pool->source.ctx, pages[i]);
}

void init_zspage(const ClassShard* cls, ZsPage* zspage) {
  zspage->inuse = 0;
  zspage->freeobj = 0;
  for (uint32_t i = 0; i < cls->objs_per_zspage; i++) {
    uint32_t next = i + 1 < cls->objs_per_zspage ? i + 1 : kFreeListEnd;
    *obj_word(obj_location(cls->geom, zspage, i)) = static_cast<unsigned long>(next)
                                                    << OBJ_TAG_BITS;
  }
}

namespace {
thread_local unsigned long pages_freed_here = 0;
}  // namespace

unsigned long pages_freed_by_this_thread() { return pages_freed_here; }

void free_zspage(ZsPool* pool, ClassShard* cls, ZsPage* zspage) ZSM_REQUIRES(cls->lock) {
  ZSM_DCHECK(zspage->inuse == 0 && zspage->cls.load(std::memory_order_relaxed) == cls);
  zspage->cls.store(nullptr, std::memory_order_relaxed);
  cls->stats[ZS_OBJS_ALLOCATED] -= cls->objs_per_zspage;
  free_pages(pool, zspage->pages(), zspage->nr_pages);
  free_zspage_metadata(pool, cls, zspage);
  uncharge_pages(pool, cls->pages_per_zspage);
  pages_freed_here += cls->pages_per_zspage;
}

void release_empty_zspage(ZsPool* pool, ClassShard* cls, ZsPage* zspage) ZSM_REQUIRES(cls->lock) {
  if (cls->stats[ZS_INUSE_RATIO_0] > 1) {
    remove_zspage(cls, zspage);
    free_zspage(pool, cls, zspage);
  }
}

unsigned long free_empty_zspages(ZsPool* pool, ClassShard* cls) ZSM_REQUIRES(cls->lock) {
  unsigned long freed = 0;
  while (ZsPage* zspage = cls->fullness_list[ZS_INUSE_RATIO_0]) {
    remove_zspage(cls, zspage);
    free_zspage(pool, cls, zspage);
    freed += cls->pages_per_zspage;
  }
  return freed;
}

unsigned long free_all_spares(ZsPool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  unsigned long freed = 0;
  for (uint32_t c = 0; c < pool->nr_class_shards; c++) {
    ClassShard* cls = &pool->class_shards[c];
    MutexGuard guard(cls->lock);
    freed += free_empty_zspages(pool, cls);
  }
  return freed;
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
