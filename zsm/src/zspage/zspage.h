// The zspage and class-shard layer (mm/zsmalloc.c's fullness lists, handle cells, obj_malloc
// and obj_free, and the zspage life cycle), beneath the object paths and compaction of pool/.
// Everything a store or free runs on its fast path is here, inline, so that it sits in the
// API's code as the kernel's static helpers sit in zs_malloc():
//   fullness      a zspage's group from its in-use count, the shard's lists by group, the
//                 hot zspage ("Lazy fullness" below) and find_get_zspage() (the fullest
//                 zspage with room, from a bitmap)
//   objects       obj_malloc() and obj_free() on a zspage's free list, under the inline
//                 policy's ZSM_OBJ_HELPER (base/compiler.h)
//   handle cells  the shard's cell stock ("The cell stock" below)
// zspage.cpp holds what runs off the fast path: page charging against the pool's limit,
// zspage metadata, the zspage's pages, freeing zspages and spares, counting zspages.
// alloc_zspage() itself is in pool/locked_path.h, in the translation unit of the store as in
// the kernel. Every function here needs the shard's lock where it says ZSM_REQUIRES.
#pragma once

#include <cstdint>

#include "base/compiler.h"
#include "zspage/obj.h"
#include "zspage/report.h"
#include "zspage/types.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

inline constexpr uint32_t kHandleBatch = 64;  // cells moved between a shard and its arena

// --- the shard's lock -----------------------------------------------------------------------

// Adds one to a lock statistic of a shard whose lock the caller holds.
inline void count_under_lock(std::atomic<unsigned long>& counter) {
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// Waits for a shard's lock that a try_lock() found held, and counts the wait.
ZSM_COLD_PATH void lock_shard_contended(ClassShard* shard) ZSM_ACQUIRE(shard->lock);

// Takes a shard's lock: one compare-and-swap when it is free; a wait is counted.
ZSM_ALWAYS_INLINE void lock_shard(ClassShard* shard) ZSM_ACQUIRE(shard->lock)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  if (ZSM_LIKELY(shard->lock.try_lock())) return;
  lock_shard_contended(shard);
}

// --- fullness -------------------------------------------------------------------------------
//
// Lazy fullness. In a steady state of stores and frees nearly every zspage is full, so the
// kernel's fix_fullness_group() moves a zspage on every pair: the free takes a full zspage
// to 90-99 % (a division for the group, a list insert), the store fills it again (a list
// removal). Here that zspage instead becomes the shard's *hot* zspage: it stays off the lists
// and out of stats[0..11], and stores go to it first. It goes back on the list of its group
// when another zspage becomes hot, when a free takes it below its floor or empties it, and
// when compaction needs the lists exact (pool/compact.cpp); when a store fills it, it is counted
// as full. Statistics add it where it belongs when they are read (hot_group()).
//   The floor, kept in the hot zspage's `fullness`: the group it was in when it became hot.
// A free into the hot zspage keeps it hot while it stays at or above that group. A zspage
// becomes hot in two ways only:
//   - a free takes it from full to one object short (almost_full_group): no zspage with room
//     can be fuller;
//   - a store finds no hot zspage: it takes the head of the fullest list (the kernel's
//     find_get_zspage() choice), or a new zspage when the lists are empty.
// Listed zspages only ever lose objects (stores go to the hot one), and a zspage put back
// leaves the hot place to a fuller one or to none, so the hot zspage's group is never below
// that of any listed zspage: a store still goes to a zspage of the fullest group with room,
// as in the kernel, which would take the same zspage when it is the one a free just left 99 %
// full (the head of that list).
//   Group changes walk the groups' inuse ranges (fullness_lo/hi) from the old group instead
// of dividing; get_fullness_group() remains for building those ranges and for the checks.

// The fullness group a zspage's in-use count puts it in.
inline int get_fullness_group(const ClassShard* shard, const ZsPage* zspage) {
  uint32_t inuse = zspage->inuse, objs = shard->objs_per_zspage;
  if (inuse == 0) return ZS_INUSE_RATIO_0;
  if (inuse == objs) return ZS_INUSE_RATIO_100;
  return static_cast<int>(100 * inuse / objs / 10 + 1);
}

// The group of `inuse` objects, from group `fg` (the zspage's old group, or a hot zspage's
// floor): a walk over the groups' ranges, one step for a change of one object, a few more
// across groups that no in-use count maps to (lo > hi).
inline int regroup(const ClassShard* shard, int fg, uint32_t inuse) {
  while (inuse > shard->fullness_hi[fg]) fg++;
  while (inuse < shard->fullness_lo[fg]) fg--;
  return fg;
}

// The group the shard's hot zspage is in now.
inline int hot_group(const ClassShard* shard) ZSM_REQUIRES(shard->lock) {
  return regroup(shard, shard->hot->fullness, shard->hot->inuse);
}

// zs_can_compact(): pages compaction could free in a class whose shards hold `allocated`
// object slots and `inuse` objects.
inline unsigned long can_compact_pages(unsigned long allocated, unsigned long inuse,
                                       const ClassShard* shard) {
  if (allocated <= inuse) return 0;
  return (allocated - inuse) / shard->objs_per_zspage * shard->pages_per_zspage;
}

ZSM_ALWAYS_INLINE void insert_zspage(ClassShard* shard, ZsPage* zspage, int fullness)
    ZSM_REQUIRES(shard->lock) {
  ZSM_DCHECK(fullness == get_fullness_group(shard, zspage));
  shard->stats[fullness]++;
  zspage->fullness = static_cast<uint8_t>(fullness);
  if (fullness == ZS_INUSE_RATIO_100) return;
  shard->fullness_list[fullness].push_front(zspage);
  shard->nonempty |= static_cast<uint16_t>(1u << fullness);
}

ZSM_ALWAYS_INLINE void remove_zspage(ClassShard* shard, ZsPage* zspage) ZSM_REQUIRES(shard->lock) {
  int fullness = zspage->fullness;
  shard->stats[fullness]--;
  if (fullness == ZS_INUSE_RATIO_100) return;
  shard->fullness_list[fullness].remove(zspage);
  if (shard->fullness_list[fullness].empty())
    shard->nonempty &= static_cast<uint16_t>(~(1u << fullness));
}

inline int putback_zspage(ClassShard* shard, ZsPage* zspage) ZSM_REQUIRES(shard->lock) {
  int fg = get_fullness_group(shard, zspage);
  insert_zspage(shard, zspage, fg);
  return fg;
}

// The fullest zspage with a free slot, or nullptr.
inline ZsPage* find_get_zspage(ClassShard* shard) ZSM_REQUIRES(shard->lock) {
  unsigned with_room = shard->nonempty & ((1u << ZS_INUSE_RATIO_100) - 1);
  if (ZSM_UNLIKELY(with_room == 0)) return nullptr;
  return shard->fullness_list[31 - __builtin_clz(with_room)].front();
}

// Puts the shard's hot zspage, if any, back on the list of its group. Off the fast path: a
// store fills the hot zspage before the next free makes another one, in a steady state.
ZSM_OFF_FAST_PATH void put_back_hot(ClassShard* shard) ZSM_REQUIRES(shard->lock);

// A free has taken a full zspage to one object short: it becomes the hot zspage.
ZSM_ALWAYS_INLINE void make_hot(ClassShard* shard, ZsPage* zspage) ZSM_REQUIRES(shard->lock) {
  if (ZSM_UNLIKELY(shard->hot != nullptr)) put_back_hot(shard);
  shard->stats[ZS_INUSE_RATIO_100]--;
  zspage->fullness = static_cast<uint8_t>(shard->almost_full_group);
  shard->hot = zspage;
}

// The head of the fullest list becomes the hot zspage, for a store that found none; returns
// it, or nullptr when the lists are empty. An empty zspage's floor is the group of one
// object, the least a hot zspage holds once the store is in.
inline ZsPage* make_fullest_hot(ClassShard* shard) ZSM_REQUIRES(shard->lock) {
  ZsPage* zspage = find_get_zspage(shard);
  if (zspage == nullptr) return nullptr;
  remove_zspage(shard, zspage);
  if (zspage->fullness == ZS_INUSE_RATIO_0)
    zspage->fullness = static_cast<uint8_t>(regroup(shard, 0, 1));
  shard->hot = zspage;
  return zspage;
}

// A store has filled the hot zspage: it is counted as full, off every list as full ones are.
ZSM_ALWAYS_INLINE void retire_full_hot(ClassShard* shard, ZsPage* zspage)
    ZSM_REQUIRES(shard->lock) {
  shard->hot = nullptr;
  zspage->fullness = ZS_INUSE_RATIO_100;
  shard->stats[ZS_INUSE_RATIO_100]++;
}

// A free has taken the zspage below its group's range (or the hot zspage below its floor),
// and not from full to hot: it moves to the list of its new group, and an emptied zspage is
// released (release_empty_zspage()).
ZSM_OFF_FAST_PATH void regroup_after_free(ZsPool* pool, ClassShard* shard, ZsPage* zspage)
    ZSM_REQUIRES(shard->lock);

// After a free from the zspage (its in-use count already lowered). A full zspage, the
// common case in steady state (stores fill the hot zspage, frees hit full ones), becomes hot
// unless the free emptied it; otherwise one compare when the zspage stays where it is,
// listed or hot: a free only lowers the count, so only the lower bound of its group (or
// floor) can be crossed.
ZSM_ALWAYS_INLINE void fix_fullness_after_free(ZsPool* pool, ClassShard* shard, ZsPage* zspage)
    ZSM_REQUIRES(shard->lock) {
  int fg = zspage->fullness;
  uint32_t inuse = zspage->inuse;
  if (ZSM_LIKELY(fg == ZS_INUSE_RATIO_100)) {
    if (ZSM_LIKELY(inuse != 0))
      make_hot(shard, zspage);
    else
      regroup_after_free(pool, shard, zspage);
  } else if (ZSM_UNLIKELY(inuse < shard->fullness_lo[fg])) {
    regroup_after_free(pool, shard, zspage);
  }
}

// --- objects --------------------------------------------------------------------------------
// Static, as in the kernel's one file: each translation unit that uses them
// (pool/object_api.cpp and pool/compact.cpp) has its own copy for the inline policy to act
// on ([[maybe_unused]] for those that include this header without calling them).

// What obj_malloc() returns: the new object's obj value, and where its payload starts (in
// the page of its header), so that a store writes there without finding the page again.
struct NewObj {
  unsigned long obj;
  char* payload;
};

// obj_malloc(): takes the first free slot of a zspage, writes `header` (make_header()) and
// returns the new object. The caller holds the shard lock, and records the obj in the
// handle's cell.
[[maybe_unused]] static ZSM_OBJ_HELPER NewObj obj_malloc(ClassGeometry g, ZsPage* zspage,
                                                         unsigned long header) {
  ZSM_DCHECK(zspage->freeobj != kFreeListEnd && zspage->inuse < 0x8000);
  uint32_t obj_idx = zspage->freeobj;
  Location loc = obj_location(g, zspage, obj_idx);
  unsigned long* word = obj_word(loc);
  zspage->freeobj = static_cast<uint32_t>(*word >> OBJ_TAG_BITS);
  *word = header;
  zspage->inuse++;
  return {location_to_obj(zspage, obj_idx), loc.page + loc.offset + g.payload_offset};
}

// obj_free(): puts slot `obj_idx` back at the head of the zspage's free list. The caller
// holds the shard lock.
[[maybe_unused]] static ZSM_OBJ_HELPER void obj_free(ClassGeometry g, ZsPage* zspage,
                                                      uint32_t obj_idx) {
  ZSM_DCHECK(zspage->inuse > 0);
  *obj_word(obj_location(g, zspage, obj_idx)) = static_cast<unsigned long>(zspage->freeobj)
                                                << OBJ_TAG_BITS;
  zspage->freeobj = obj_idx;
  zspage->inuse--;
}

// --- handle cells ---------------------------------------------------------------------------
//
// The cell stock. A shard keeps free handle cells of its own (ClassShard::cell_stock, linked
// through the cells), so that a store takes a cell and a free gives one back under the lock
// it holds anyway. The stock is trimmed back to the shard's arena in batches of kHandleBatch,
// and refilled with free cells from any shard's arena before new ones are carved: compaction
// moves objects, and their cells, between a class's shards (zspage.cpp).

// Moves up to kHandleBatch cells into the shard's stock: free ones of its arena, else free
// ones of another shard's, else new ones carved by its arena.
ZSM_COLD_PATH void refill_cell_stock(ZsPool* pool, ClassShard* shard) ZSM_REQUIRES(shard->lock);
// Gives kHandleBatch cells of an overfull stock back to the shard's arena.
ZSM_COLD_PATH void release_cell_stock(ZsPool* pool, ClassShard* shard) ZSM_REQUIRES(shard->lock);

// alloc_handle() (the kernel's cache_alloc_handle()): a free cell from the shard's stock; 0
// when memory is short.
inline unsigned long alloc_handle(ZsPool* pool, ClassShard* shard) ZSM_REQUIRES(shard->lock) {
  if (ZSM_UNLIKELY(shard->cell_stock == nullptr)) {
    refill_cell_stock(pool, shard);
    if (shard->cell_stock == nullptr) return 0;
  }
  HandleCell* cell = shard->cell_stock;
  shard->cell_stock = reinterpret_cast<HandleCell*>(cell->load(std::memory_order_relaxed));
  shard->nr_stocked_cells--;
  return reinterpret_cast<unsigned long>(cell);
}

// Puts a free cell in the shard's stock, which may leave it overfull (see free_handle()).
inline void stock_cell(ClassShard* shard, unsigned long handle) ZSM_REQUIRES(shard->lock) {
  HandleCell* cell = handle_to_cell(handle);
  cell->store(reinterpret_cast<unsigned long>(shard->cell_stock), std::memory_order_relaxed);
  shard->cell_stock = cell;
  shard->nr_stocked_cells++;
}

// Gives cells back to the arena if stock_cell() left the stock overfull.
inline void trim_cell_stock(ZsPool* pool, ClassShard* shard) ZSM_REQUIRES(shard->lock) {
  if (ZSM_UNLIKELY(shard->nr_stocked_cells > 2 * kHandleBatch)) release_cell_stock(pool, shard);
}

// free_handle() (the kernel's cache_free_handle()): gives a cell back to the shard's stock.
inline void free_handle(ZsPool* pool, ClassShard* shard, unsigned long handle)
    ZSM_REQUIRES(shard->lock) {
  stock_cell(shard, handle);
  trim_cell_stock(pool, shard);
}

// --- zspage life (zspage.cpp) ---------------------------------------------------------------

// Charges `pages` against the pool's memory limit; false when it would be exceeded.
bool charge_pages(ZsPool* pool, unsigned long pages);
void uncharge_pages(ZsPool* pool, unsigned long pages);
// A metadata block for a zspage of the shard's chain length, or nullptr.
ZsPage* alloc_zspage_metadata(ZsPool* pool, const ClassShard* shard);
void free_zspage_metadata(ZsPool* pool, const ClassShard* shard, ZsPage* zspage);
// Takes the `n` pages of a new zspage from the pool's page source (under its source lock):
// one run where the source hands out runs, else page by page. Sets the zspage's pages(),
// nr_pages and layout; false, with no page kept, when the source has too few.
bool alloc_zspage_pages(ZsPool* pool, ZsPage* zspage, uint32_t n);
// Gives a zspage's pages back to the pool's page source, as they were taken.
void free_zspage_pages(ZsPool* pool, const ZsPage* zspage);
// init_zspage(): an empty zspage whose free list runs through every object in order.
void init_zspage(const ClassShard* shard, ZsPage* zspage);
// Pages free_zspage() has given back on the calling thread, ever: a drain's count of what
// its frees released, which no other thread's frees can disturb.
unsigned long pages_freed_by_this_thread();
// __free_zspage(): gives an empty, unlisted zspage's pages and metadata back.
void free_zspage(ZsPool* pool, ClassShard* shard, ZsPage* zspage) ZSM_REQUIRES(shard->lock);
// A zspage a free has just left empty (on the 0 % list): kept as the shard's spare unless
// the shard has one already.
void release_empty_zspage(ZsPool* pool, ClassShard* shard, ZsPage* zspage)
    ZSM_REQUIRES(shard->lock);
// Frees the shard's spare empty zspages; returns the pages freed.
unsigned long free_empty_zspages(ZsPool* pool, ClassShard* shard) ZSM_REQUIRES(shard->lock);
// Frees every shard's spare; for a pool at its memory limit. Takes each shard's lock.
ZSM_COLD_PATH unsigned long free_all_spares(ZsPool* pool);

// Calls `visit(zspage)` for every live zspage of the pool: a metadata block with a shard.
// Call with every shard's arenas locked, or with no other thread in the pool.
template <typename Visit>
void for_each_zspage(ZsPool* pool, Visit visit) ZSM_NO_THREAD_SAFETY_ANALYSIS {
  if (pool->metadata.arenas == nullptr) return;
  for (uint32_t s = 0; s <= pool->fast.shard_mask; s++) {
    for (MetadataArena* arena : pool->metadata.arenas[s].meta) {
      if (arena == nullptr) continue;
      arena->for_each_block([&visit](void* block) {
        auto* zspage = static_cast<ZsPage*>(block);
        if (zspage->shard.load(std::memory_order_relaxed) != nullptr) visit(zspage);
      });
    }
  }
}

// The pages of every zspage the pool holds, counted from its metadata blocks.
unsigned long count_zspage_pages(ZsPool* pool);

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
