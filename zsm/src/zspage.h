// The zspage and class-shard layer (mm/zsmalloc.c's fullness lists, handle cache, obj_malloc
// and obj_free, and the zspage life cycle), beneath the object API of pool.cpp and the
// compaction of compact.cpp. Everything a store or free runs on its fast path is here, inline,
// so that it sits in the API's code as the kernel's static helpers sit in zs_malloc():
//   fullness      a zspage's group from its in-use count, the shard's lists by group,
//                 fix_fullness_group() (two compares when the group stays) and
//                 find_get_zspage() (the fullest zspage with room, from a bitmap)
//   objects       obj_malloc() and obj_free() on a zspage's free list, under the inline
//                 policy's ZSM_OBJ_HELPER (compiler.h)
//   handle cells  the shard's cache of free cells, refilled from and drained to the shard's
//                 arena in batches (zspage.cpp)
// zspage.cpp holds what runs off the fast path: page charging against the pool's limit,
// zspage metadata, the zspage's pages, freeing zspages and spares. alloc_zspage() itself is
// in pool.cpp, in the translation unit of zs_malloc() as in the kernel, so that the inline
// policy's choice for it (ZSM_ZSPAGE_HELPER) is the same choice the kernel's compiler makes.
// Every function here needs the shard's lock where it says ZSM_REQUIRES.
#pragma once

#include <cstdint>

#include "compiler.h"
#include "obj.h"
#include "pool_types.h"
#include "report.h"

namespace zsm {
inline namespace ZSM_VARIANT_NS {

inline constexpr uint32_t kHandleBatch = 64;  // cells moved between a shard and its arena

// --- the shard's lock -----------------------------------------------------------------------

// Adds one to a lock statistic of a shard whose lock the caller holds.
inline void count_under_lock(std::atomic<unsigned long>& counter) {
  counter.store(counter.load(std::memory_order_relaxed) + 1, std::memory_order_relaxed);
}

// Waits for a shard's lock that a try_lock() found held, and counts the wait.
ZSM_COLD_PATH void lock_shard_contended(ClassShard* cls) ZSM_ACQUIRE(cls->lock);

// Takes a shard's lock: one compare-and-swap when it is free; a wait is counted.
ZSM_ALWAYS_INLINE void lock_shard(ClassShard* cls) ZSM_ACQUIRE(cls->lock)
    ZSM_NO_THREAD_SAFETY_ANALYSIS {
  if (ZSM_LIKELY(cls->lock.try_lock())) return;
  lock_shard_contended(cls);
}

// --- fullness -------------------------------------------------------------------------------

// The fullness group a zspage's in-use count puts it in.
inline int get_fullness_group(const ClassShard* cls, const ZsPage* zspage) {
  uint32_t inuse = zspage->inuse, objs = cls->objs_per_zspage;
  if (inuse == 0) return ZS_INUSE_RATIO_0;
  if (inuse == objs) return ZS_INUSE_RATIO_100;
  return static_cast<int>(100 * inuse / objs / 10 + 1);
}

// zs_can_compact(): pages compaction could free in a class whose shards hold `allocated`
// object slots and `inuse` objects.
inline unsigned long can_compact_pages(unsigned long allocated, unsigned long inuse,
                                       const ClassShard* cls) {
  if (allocated <= inuse) return 0;
  return (allocated - inuse) / cls->objs_per_zspage * cls->pages_per_zspage;
}

ZSM_ALWAYS_INLINE void insert_zspage(ClassShard* cls, ZsPage* zspage, int fullness)
    ZSM_REQUIRES(cls->lock) {
  ZSM_DCHECK(fullness == get_fullness_group(cls, zspage));
  cls->stats[fullness]++;
  zspage->fullness = static_cast<uint8_t>(fullness);
  if (fullness == ZS_INUSE_RATIO_100) return;
  ZsPage* head = cls->fullness_list[fullness];
  zspage->prev = nullptr;
  zspage->next = head;
  if (head != nullptr) head->prev = zspage;
  cls->fullness_list[fullness] = zspage;
  cls->nonempty |= static_cast<uint16_t>(1u << fullness);
}

ZSM_ALWAYS_INLINE void remove_zspage(ClassShard* cls, ZsPage* zspage) ZSM_REQUIRES(cls->lock) {
  int fullness = zspage->fullness;
  cls->stats[fullness]--;
  if (fullness == ZS_INUSE_RATIO_100) return;
  if (zspage->prev != nullptr)
    zspage->prev->next = zspage->next;
  else
    cls->fullness_list[fullness] = zspage->next;
  if (zspage->next != nullptr) zspage->next->prev = zspage->prev;
  if (cls->fullness_list[fullness] == nullptr)
    cls->nonempty &= static_cast<uint16_t>(~(1u << fullness));
}

// Moves the zspage to the group its inuse count calls for; returns that group. Two compares
// tell that it stays where it is, which is the common case.
inline int fix_fullness_group(ClassShard* cls, ZsPage* zspage) ZSM_REQUIRES(cls->lock) {
  int fg = zspage->fullness;
  uint32_t inuse = zspage->inuse;
  if (ZSM_LIKELY(inuse >= cls->fullness_lo[fg] && inuse <= cls->fullness_hi[fg])) return fg;
  remove_zspage(cls, zspage);
  fg = get_fullness_group(cls, zspage);
  insert_zspage(cls, zspage, fg);
  return fg;
}

inline int putback_zspage(ClassShard* cls, ZsPage* zspage) ZSM_REQUIRES(cls->lock) {
  int fg = get_fullness_group(cls, zspage);
  insert_zspage(cls, zspage, fg);
  return fg;
}

// The fullest zspage with a free slot, or nullptr.
inline ZsPage* find_get_zspage(ClassShard* cls) ZSM_REQUIRES(cls->lock) {
  unsigned with_room = cls->nonempty & ((1u << ZS_INUSE_RATIO_100) - 1);
  if (ZSM_UNLIKELY(with_room == 0)) return nullptr;
  return cls->fullness_list[31 - __builtin_clz(with_room)];
}

// --- objects --------------------------------------------------------------------------------
// Static, as in the kernel's one file: each translation unit that uses them (pool.cpp and
// compact.cpp) has its own copy for the inline policy to act on ([[maybe_unused]] for those
// that include this header without calling them).

// obj_malloc(): takes the first free slot of a zspage, writes `header` (make_header()) and
// returns the new obj value. The caller holds the class lock, and records the obj in the
// handle's cell when the object is ready.
[[maybe_unused]] static ZSM_OBJ_HELPER unsigned long obj_malloc(ClassGeometry g,
                                                                ZsPage* zspage,
                                                                unsigned long header) {
  ZSM_DCHECK(zspage->freeobj != kFreeListEnd && zspage->inuse < 0x8000);
  uint32_t obj_idx = zspage->freeobj;
  unsigned long* word = obj_word(obj_location(g, zspage, obj_idx));
  zspage->freeobj = static_cast<uint32_t>(*word >> OBJ_TAG_BITS);
  *word = header;
  zspage->inuse++;
  return location_to_obj(zspage, obj_idx);
}

// obj_free(): puts slot `obj_idx` back at the head of the zspage's free list. The caller
// holds the class lock.
[[maybe_unused]] static ZSM_OBJ_HELPER void obj_free(ClassGeometry g, ZsPage* zspage,
                                                      uint32_t obj_idx) {
  ZSM_DCHECK(zspage->inuse > 0);
  *obj_word(obj_location(g, zspage, obj_idx)) = static_cast<unsigned long>(zspage->freeobj)
                                                << OBJ_TAG_BITS;
  zspage->freeobj = obj_idx;
  zspage->inuse--;
}

// --- handle cells ---------------------------------------------------------------------------

// Moves up to kHandleBatch cells from the shard's arena into its cache.
ZSM_COLD_PATH void refill_handle_cache(ZsPool* pool, ClassShard* cls) ZSM_REQUIRES(cls->lock);
// Gives kHandleBatch cells of an overfull cache back to the shard's arena.
ZSM_COLD_PATH void drain_handle_cache(ZsPool* pool, ClassShard* cls) ZSM_REQUIRES(cls->lock);

// cache_alloc_handle(): a free cell from the class's cache; 0 when memory is short.
inline unsigned long cache_alloc_handle(ZsPool* pool, ClassShard* cls) ZSM_REQUIRES(cls->lock) {
  if (ZSM_UNLIKELY(cls->free_cells == nullptr)) {
    refill_handle_cache(pool, cls);
    if (cls->free_cells == nullptr) return 0;
  }
  HandleCell* cell = cls->free_cells;
  cls->free_cells = reinterpret_cast<HandleCell*>(cell->load(std::memory_order_relaxed));
  cls->nr_free_cells--;
  return reinterpret_cast<unsigned long>(cell);
}

inline void cache_free_handle(ZsPool* pool, ClassShard* cls, unsigned long handle)
    ZSM_REQUIRES(cls->lock) {
  HandleCell* cell = handle_to_cell(handle);
  cell->store(reinterpret_cast<unsigned long>(cls->free_cells), std::memory_order_relaxed);
  cls->free_cells = cell;
  if (ZSM_UNLIKELY(++cls->nr_free_cells > 2 * kHandleBatch)) drain_handle_cache(pool, cls);
}

// --- zspage life (zspage.cpp) ---------------------------------------------------------------

// Charges `pages` against the pool's memory limit; false when it would be exceeded.
bool charge_pages(ZsPool* pool, unsigned long pages);
void uncharge_pages(ZsPool* pool, unsigned long pages);
// For a pool at its memory limit: takes back the slots threads' caches reserve and frees the
// shards' spares, then charges. Takes every shard's lock in turn; call with none held.
ZSM_COLD_PATH bool charge_pages_after_reclaim(ZsPool* pool, unsigned long pages);
// A metadata record for a zspage of the shard's chain length, or nullptr.
ZsPage* alloc_zspage_metadata(ZsPool* pool, const ClassShard* cls);
void free_zspage_metadata(ZsPool* pool, const ClassShard* cls, ZsPage* zspage);
// Gives `n` pages back to the pool's page source.
void free_pages(ZsPool* pool, char* const* pages, uint32_t n);
// init_zspage(): an empty zspage whose free list runs through every object in order.
void init_zspage(const ClassShard* cls, ZsPage* zspage);
// Pages free_zspage() has given back on the calling thread, ever: a drain's count of what
// its frees released, which no other thread's frees can disturb.
unsigned long pages_freed_by_this_thread();
// __free_zspage(): gives an empty, unlisted zspage's pages and metadata back.
void free_zspage(ZsPool* pool, ClassShard* cls, ZsPage* zspage) ZSM_REQUIRES(cls->lock);
// A zspage a free has just left empty (on the 0 % list): kept as the shard's spare unless
// the shard has one already.
void release_empty_zspage(ZsPool* pool, ClassShard* cls, ZsPage* zspage) ZSM_REQUIRES(cls->lock);
// Frees the shard's spare empty zspages; returns the pages freed.
unsigned long free_empty_zspages(ZsPool* pool, ClassShard* cls) ZSM_REQUIRES(cls->lock);
// Frees every shard's spare; for a pool at its memory limit. Takes each shard's lock.
ZSM_COLD_PATH unsigned long free_all_spares(ZsPool* pool);

}  // namespace ZSM_VARIANT_NS
}  // namespace zsm
