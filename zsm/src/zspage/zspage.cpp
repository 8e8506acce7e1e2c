// The zspage and class-shard layer off the fast path (design: zspage.h): the fullness moves
// that lazy fullness leaves out of stores and frees, the cell stock's refills and trims, page
// charging, zspage metadata and pages, freeing zspages and spares, and counting zspages.
#include "zspage/zspage.h"

#include <new>

#include "memory/vm_source.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

void lock_shard_contended(ClassShard* shard) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  shard->lock.lock_contended();
  count_under_lock(shard->lock_waits);
}

void put_back_hot(ClassShard* shard) ZSM_REQUIRES(shard->lock) {
  ZsPage* zspage = shard->hot;
  if (zspage == nullptr) return;
  shard->hot = nullptr;
  insert_zspage(shard, zspage, regroup(shard, zspage->fullness, zspage->inuse));
}

void regroup_after_free(ZsPool* pool, ClassShard* shard, ZsPage* zspage) ZSM_REQUIRES(shard->lock) {
  int fg = zspage->fullness;  // its group, or the hot zspage's floor
  if (zspage == shard->hot)
    shard->hot = nullptr;  // below its floor: back on the lists
  else
    remove_zspage(shard, zspage);
  fg = regroup(shard, fg, zspage->inuse);
  insert_zspage(shard, zspage, fg);
  if (fg == ZS_INUSE_RATIO_0) release_empty_zspage(pool, shard, zspage);
}

namespace {

// Moves up to kHandleBatch cells of shard `from`'s arena into `shard`'s stock: its free ones
// only, or also newly carved ones with `carve`.
void stock_from_arena(ZsPool* pool, ClassShard* shard, uint32_t from, bool carve)
    ZSM_REQUIRES(shard->lock) {
  ShardArenas& arenas = pool->metadata.arenas[from];
  MutexGuard guard(arenas.lock);
  for (uint32_t i = 0; i < kHandleBatch; i++) {
    auto* cell = static_cast<HandleCell*>(carve ? arenas.cells->alloc() : arenas.cells->alloc_free());
    if (cell == nullptr) break;
    cell->store(reinterpret_cast<unsigned long>(shard->cell_stock), std::memory_order_relaxed);
    shard->cell_stock = cell;
    shard->nr_stocked_cells++;
  }
}

}  // namespace

// Free cells first, from any shard's arena (the cells all lie in the pool's one cell region):
// compaction moves objects between a class's shards, and with them their cells, which the
// objects' frees then give to the other shard. A shard that lost cells so must take back the
// free ones the others hold, not carve new ones, or the cells carved grow without bound.
// Arena locks are leaves, taken one at a time.
void refill_cell_stock(ZsPool* pool, ClassShard* shard) ZSM_REQUIRES(shard->lock) {
  const uint32_t own = shard->shard_index;
  stock_from_arena(pool, shard, own, false);
  for (uint32_t s = 1; shard->cell_stock == nullptr && s <= pool->fast.shard_mask; s++)
    stock_from_arena(pool, shard, (own + s) & pool->fast.shard_mask, false);
  if (shard->cell_stock == nullptr) stock_from_arena(pool, shard, own, true);
}

void release_cell_stock(ZsPool* pool, ClassShard* shard) ZSM_REQUIRES(shard->lock) {
  ShardArenas& arenas = pool->metadata.arenas[shard->shard_index];
  MutexGuard guard(arenas.lock);
  for (uint32_t i = 0; i < kHandleBatch; i++) {
    HandleCell* cell = shard->cell_stock;
    shard->cell_stock = reinterpret_cast<HandleCell*>(cell->load(std::memory_order_relaxed));
    shard->nr_stocked_cells--;
    arenas.cells->free(cell);
  }
}

bool charge_pages(ZsPool* pool, unsigned long pages) {
  unsigned long cur = pool->pages.allocated.load(std::memory_order_relaxed);
  do {
    if (pool->pages.limit != 0 && cur + pages > pool->pages.limit) return false;
  } while (!pool->pages.allocated.compare_exchange_weak(cur, cur + pages,
                                                       std::memory_order_relaxed));
  return true;
}

void uncharge_pages(ZsPool* pool, unsigned long pages) {
  pool->pages.allocated.fetch_sub(pages, std::memory_order_relaxed);
}

ZsPage* alloc_zspage_metadata(ZsPool* pool, const ClassShard* shard) {
  ShardArenas& arenas = pool->metadata.arenas[shard->shard_index];
  MutexGuard guard(arenas.lock);
  void* block = arenas.meta[shard->pages_per_zspage]->alloc();
  return block != nullptr ? std::launder(static_cast<ZsPage*>(block)) : nullptr;
}

void free_zspage_metadata(ZsPool* pool, const ClassShard* shard, ZsPage* zspage) {
  ShardArenas& arenas = pool->metadata.arenas[shard->shard_index];
  MutexGuard guard(arenas.lock);
  arenas.meta[zspage->nr_pages]->free(zspage);
}

static_assert(kMaxChain <= VmSource::kMaxRun, "a zspage's pages must fit in one run");

namespace {

void free_each_page(ZsPool* pool, char* const* pages, uint32_t n) ZSM_REQUIRES(pool->source.lock) {
  for (uint32_t i = 0; i < n; i++) pool->source.ops.free_page(pool->source.ops.ctx, pages[i]);
}

bool pages_adjacent(char* const* pages, uint32_t n, size_t page_size) {
  for (uint32_t i = 1; i < n; i++)
    if (pages[i] != pages[0] + i * page_size) return false;
  return true;
}

}  // namespace

bool alloc_zspage_pages(ZsPool* pool, ZsPage* zspage, uint32_t n) {
  char** pages = zspage->pages();
  zspage->nr_pages = static_cast<uint8_t>(n);
  MutexGuard guard(pool->source.lock);
  if (pool->source.runs != nullptr && n > 1) {
    if (auto* run = static_cast<char*>(pool->source.runs->alloc_run(n))) {
      for (uint32_t i = 0; i < n; i++) pages[i] = run + size_t{i} * pool->classes.page_size;
      zspage->layout = kPagesContiguous | kPagesOneRun;
      return true;
    }
  }
  for (uint32_t got = 0; got < n; got++) {
    pages[got] = static_cast<char*>(pool->source.ops.alloc_page(pool->source.ops.ctx));
    if (pages[got] == nullptr) {
      free_each_page(pool, pages, got);
      return false;
    }
  }
  zspage->layout = pages_adjacent(pages, n, pool->classes.page_size) ? kPagesContiguous : 0;
  return true;
}

void free_zspage_pages(ZsPool* pool, const ZsPage* zspage) {
  MutexGuard guard(pool->source.lock);
  if (zspage->layout & kPagesOneRun)
    pool->source.runs->free_run(zspage->pages()[0], zspage->nr_pages);
  else
    free_each_page(pool, zspage->pages(), zspage->nr_pages);
}

void init_zspage(const ClassShard* shard, ZsPage* zspage) {
  zspage->inuse = 0;
  zspage->freeobj = 0;
  for (uint32_t i = 0; i < shard->objs_per_zspage; i++) {
    uint32_t next = i + 1 < shard->objs_per_zspage ? i + 1 : kFreeListEnd;
    *obj_word(obj_location(shard->geom, zspage, i)) = static_cast<unsigned long>(next)
                                                    << OBJ_TAG_BITS;
  }
}

namespace {
thread_local unsigned long pages_freed_here = 0;
}  // namespace

unsigned long pages_freed_by_this_thread() { return pages_freed_here; }

void free_zspage(ZsPool* pool, ClassShard* shard, ZsPage* zspage) ZSM_REQUIRES(shard->lock) {
  ZSM_DCHECK(zspage->inuse == 0 && zspage->shard.load(std::memory_order_relaxed) == shard);
  zspage->shard.store(nullptr, std::memory_order_relaxed);
  shard->stats[ZS_OBJS_ALLOCATED] -= shard->objs_per_zspage;
  free_zspage_pages(pool, zspage);
  free_zspage_metadata(pool, shard, zspage);
  uncharge_pages(pool, shard->pages_per_zspage);
  pages_freed_here += shard->pages_per_zspage;
}

void release_empty_zspage(ZsPool* pool, ClassShard* shard, ZsPage* zspage)
    ZSM_REQUIRES(shard->lock) {
  if (shard->stats[ZS_INUSE_RATIO_0] > 1) {
    remove_zspage(shard, zspage);
    free_zspage(pool, shard, zspage);
  }
}

unsigned long free_empty_zspages(ZsPool* pool, ClassShard* shard) ZSM_REQUIRES(shard->lock) {
  unsigned long freed = 0;
  while (ZsPage* zspage = shard->fullness_list[ZS_INUSE_RATIO_0].front()) {
    remove_zspage(shard, zspage);
    free_zspage(pool, shard, zspage);
    freed += shard->pages_per_zspage;
  }
  return freed;
}

unsigned long free_all_spares(ZsPool* pool) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  unsigned long freed = 0;
  for (uint32_t c = 0; c < pool->classes.nr_class_shards; c++) {
    ClassShard* shard = &pool->classes.class_shards[c];
    MutexGuard guard(shard->lock);
    freed += free_empty_zspages(pool, shard);
  }
  return freed;
}

unsigned long count_zspage_pages(ZsPool* pool) {
  unsigned long pages = 0;
  for_each_zspage(pool, [&pages](const ZsPage* zspage) { pages += zspage->nr_pages; });
  return pages;
}

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
